"""The audit's options (``checks.options``): one frozen record, every option bounded and checked
once, a bad one an ``OptionError`` naming its field.  (Named ``test_checks_options`` beside
``tests/app/test_options.py``.)"""

from __future__ import annotations

import dataclasses
import math

import pytest

from grpo_identity import dial as D
from grpo_identity.checks.options import (
    CALL_TIMEOUT,
    DEFAULT_MAX_EXAMPLES,
    FRAMEWORK_LOAD_TIMEOUT,
    MAX_EXAMPLES,
    MAX_TIMEOUT,
    AuditOptions,
    OptionError,
)


def test_the_defaults_are_the_documented_ones_and_the_record_is_frozen():
    options = AuditOptions()
    assert (options.expect, options.max_examples, options.timeout) == (None, DEFAULT_MAX_EXAMPLES, CALL_TIMEOUT)
    assert (options.load_timeout, options.isolate, options.python, options.progress) == (None, None, None, False)
    assert options.expected is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.max_examples = 5  # type: ignore[misc]


def test_the_expected_preset_is_a_dial_whether_named_or_given():
    assert AuditOptions(expect="dr_grpo").expected == D.DR_GRPO
    mine = D.GRPO.replace(eps=1e-3)
    assert AuditOptions(expect=mine).expected is mine


def test_the_bounds_themselves_are_allowed():
    assert AuditOptions(max_examples=1).max_examples == 1 and AuditOptions(max_examples=MAX_EXAMPLES).max_examples
    assert AuditOptions(timeout=MAX_TIMEOUT, load_timeout=MAX_TIMEOUT).timeout == MAX_TIMEOUT == 3600
    assert isinstance(AuditOptions(timeout=2).timeout, float)


@pytest.mark.parametrize(
    "options, field",
    [
        ({"max_examples": 0}, "max_examples"),
        ({"max_examples": MAX_EXAMPLES + 1}, "max_examples"),
        ({"max_examples": 10.0}, "max_examples"),
        ({"max_examples": True}, "max_examples"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": -1}, "timeout"),
        ({"timeout": math.inf}, "timeout"),
        ({"timeout": math.nan}, "timeout"),
        ({"timeout": 1e9}, "timeout"),
        ({"timeout": MAX_TIMEOUT + 1}, "timeout"),
        ({"timeout": "60"}, "timeout"),
        ({"timeout": True}, "timeout"),
        ({"load_timeout": math.inf}, "load_timeout"),
        ({"load_timeout": 0}, "load_timeout"),
        ({"isolate": "yes"}, "isolate"),
        ({"python": 3}, "python"),
        ({"expect": "ppo"}, "expect"),
        ({"expect": 3}, "expect"),
    ],
)
def test_a_bad_option_is_an_option_error_naming_its_field(options, field):
    with pytest.raises(OptionError) as info:
        AuditOptions(**options)
    assert info.value.field == field and str(info.value).startswith(f"{field} must be")


def test_an_unknown_preset_names_the_presets():
    with pytest.raises(OptionError, match="must be a preset \\(grpo, dr_grpo, dapo"):
        AuditOptions(expect="ppo")


def test_loading_a_framework_gets_longer_unless_told():
    assert AuditOptions(timeout=5).load_timeout_for(framework=False) == 5
    assert AuditOptions(timeout=5).load_timeout_for(framework=True) == FRAMEWORK_LOAD_TIMEOUT
    assert AuditOptions(timeout=5, load_timeout=7).load_timeout_for(framework=True) == 7


def test_a_declared_coefficient_is_read_once_into_the_record_and_names_what_was_expected():
    options = AuditOptions(expect="c=sigma**2/G")
    assert options.declared is not None and options.declared.at(2, 4) == 1 / 16
    assert options.expected is None and options.expected_name == "c=sigma**2/G"
    assert AuditOptions(expect="grpo").declared is None and AuditOptions(expect="grpo").expected_name == "grpo"
    assert dataclasses.replace(options, max_examples=5).declared == options.declared
    with pytest.raises(OptionError) as info:
        AuditOptions(expect="c=__import__('os')")
    assert info.value.field == "expect" and info.value.worded({"expect": "--expect"}).startswith("--expect must be")


def test_expect_may_name_a_variant_which_is_then_no_preset():
    options = AuditOptions(expect="REINFORCE++-baseline")
    assert options.expected_variant.name == "reinforce_plus_plus_baseline"
    assert options.expected is None and options.expected_name == "reinforce_plus_plus_baseline"
    assert AuditOptions(expect="grpo").expected_variant is None


def test_an_unknown_expectation_lists_the_presets_and_the_variants():
    with pytest.raises(OptionError, match=r"a variant \(maxrl, opo, gpg"):
        AuditOptions(expect="maxrll")
