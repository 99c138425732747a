"""Option checks of the command layer: bounded numbers, config errors told in the typed option,
the memory budget."""

from __future__ import annotations

import argparse

import pytest

from grpo_identity.app.options import MEMORY_BUDGET, human_bytes, in_options, integer, number, over_budget, typed_option


@pytest.mark.parametrize(("text", "value"), [("2", 2), ("10", 10), ("007", 7)])
def test_integer_accepts_whole_numbers_inside_the_bounds(text, value):
    assert integer(2, 10)(text) == value


@pytest.mark.parametrize("text", ["1", "11", "-3", "2.5", "two", "", "nan"])
def test_integer_rejects_anything_else_with_the_bounds_in_words(text):
    with pytest.raises(argparse.ArgumentTypeError, match="must be an integer from 2 to 10, got"):
        integer(2, 10)(text)


def test_integer_without_an_upper_end_says_so():
    assert integer(0)("123456789012345678901234567890") == 123456789012345678901234567890
    with pytest.raises(argparse.ArgumentTypeError, match=r"must be an integer >= 0, got -1$"):
        integer(0)("-1")


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1.5", "-0.1", "x"])
def test_number_rejects_non_finite_and_out_of_range_values(text):
    with pytest.raises(argparse.ArgumentTypeError, match=r"must be a finite number in \[0, 1\], got"):
        number(0, 1)(text)


def test_number_accepts_the_ends_of_its_interval():
    assert (number(0, 1)("0"), number(0, 1)("1"), number(0, 1)("0.25")) == (0.0, 1.0, 0.25)


def test_the_option_the_user_typed_is_named_else_the_first_alias():
    aliases = ["--G", "--group-size"]
    assert typed_option(aliases, ["--group-size", "3"]) == "--group-size"
    assert typed_option(aliases, ["--group-size=3"]) == "--group-size"
    assert typed_option(aliases, ["--steps", "3"]) == "--G"


def test_field_names_become_options_as_whole_words_only():
    flags = {"lr": ["--lr"], "warmup_lr": ["--warmup-lr"], "n_head": ["--n-head"], "n_embd": ["--n-embd"]}
    msg = "warmup_lr must be > 0 and lr too; n_head must divide n_embd, got n_head=3"
    assert (
        in_options(msg, flags, [])
        == "--warmup-lr must be > 0 and --lr too; --n-head must divide --n-embd, got --n-head=3"
    )


def test_a_name_already_an_option_is_left_alone():
    assert in_options("--steps must be >= 1", {"steps": ["--steps"]}, []) == "--steps must be >= 1"


def test_memory_within_the_budget_passes_and_over_it_names_the_options_of_the_largest_term():
    assert over_budget([("a", MEMORY_BUDGET / 2, ["--M"]), ("b", MEMORY_BUDGET / 2, ["--G"])]) is None
    line = over_budget([("small", 1.0, ["--steps"]), ("the draws", MEMORY_BUDGET, ["--M", "--G", "--max-draws"])])
    assert (
        line is not None
        and "mostly the draws" in line
        and line.endswith("lower --M, --G or --max-draws (or raise GRPO_IDENTITY_MEMORY_GIB)")
    )
    assert "16 GiB" in line and "\n" not in line


@pytest.mark.parametrize(
    ("n", "text"),
    [(512, "512 B"), (1536, "1.5 KiB"), (16 * 2**30, "16 GiB"), (3 * 2**50, "3 PiB"), (2**70, "1.05e+06 PiB")],
)
def test_bytes_are_told_in_the_largest_unit(n, text):
    assert human_bytes(n) == text


def test_the_budget_is_16_gib_unless_the_environment_sets_another(monkeypatch):
    from grpo_identity.app.options import MEMORY_BUDGET_VARIABLE, memory_budget

    monkeypatch.delenv(MEMORY_BUDGET_VARIABLE, raising=False)
    assert memory_budget() == 16 * 2**30
    monkeypatch.setenv(MEMORY_BUDGET_VARIABLE, "120")
    assert memory_budget() == 120 * 2**30


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "lots"])
def test_a_bad_budget_in_the_environment_is_a_usage_error_naming_the_variable(monkeypatch, text):
    from grpo_identity.app.options import MEMORY_BUDGET_VARIABLE, memory_budget
    from grpo_identity.foundation import UsageError

    monkeypatch.setenv(MEMORY_BUDGET_VARIABLE, text)
    with pytest.raises(UsageError, match=f"^{MEMORY_BUDGET_VARIABLE} must be a number of GiB > 0, got '{text}'$"):
        memory_budget()
