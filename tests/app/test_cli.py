"""The CLI is thin: closed-forms prints the paper's numbers; bad input is one line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from grpo_identity import __version__
from grpo_identity.app.cli import main
from grpo_identity.foundation import EXIT_CODES_HELP


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "grpo_identity", *args], capture_output=True, text=True, timeout=120)


def test_version_prints_the_version_and_exits_0(capsys):
    assert main(["--version"]) == 0
    assert __version__ in capsys.readouterr().out


HELPS = [
    [],
    ["closed-forms"],
    ["train"],
    ["train", "bernoulli"],
    ["train", "lm"],
    ["audit"],
    ["prove"],
    ["realdata"],
    ["dapo-fit"],
    ["verify"],
    ["render"],
]


@pytest.mark.parametrize("command", HELPS, ids=[" ".join(c) or "grpo-identity" for c in HELPS])
def test_help_of_every_command_exits_0_and_lists_the_exit_codes(command, capsys):
    assert main([*command, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse rewraps the epilog
    assert " ".join(EXIT_CODES_HELP.split()) in text
    assert "0 success" in text and "1 a check failed" in text and "2 bad input" in text


def test_help_states_the_bounds_of_sizes(capsys):
    for command, bound in (
        (["closed-forms"], "1,000,000"),
        (["dapo-fit"], "10,000"),
        (["realdata"], "10,000"),
        (["train", "bernoulli"], "16 GiB"),
        (["train", "lm"], "16 GiB"),
    ):
        assert main([*command, "--help"]) == 0
        assert bound in " ".join(capsys.readouterr().out.split()), command


def test_closed_forms_json_has_every_quantity(capsys):
    assert main(["closed-forms", "--G", "8", "--p", "0.05", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["G"] == 8 and len(out["sigma_by_k"]) == 9
    assert round(out["fidelity"], 4) == 0.5390
    assert [r["G_exact"] for r in out["group_size"]] == [42, 69, 273]
    for key in ("silent_rate", "expected_update", "attenuation_first_order", "difficulty_weight"):
        assert isinstance(out[key], float)


def test_group_size_table_json_has_twelve_rows_with_the_unrounded_law(capsys):
    assert main(["closed-forms", "--table", "group-size", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert len(rows) == 12
    assert {(r["p"], r["eps"]) for r in rows} == {(p, e) for p in (0.5, 0.3, 0.1, 0.05) for e in (0.1, 0.05, 0.01)}
    r = next(r for r in rows if r["p"] == 0.05 and r["eps"] == 0.01)
    assert r["G_exact"] == 273 and r["G_law"] == pytest.approx(1 / (8 * 0.01 * 0.05 * 0.95))


def test_group_size_table_text_is_readable(capsys):
    assert main(["closed-forms", "--table", "group-size"]) == 0
    out = capsys.readouterr().out
    assert "273 (263)" in out and "7 (5)" in out


def test_edges_of_p_print_undefined_rather_than_crash(capsys):
    assert main(["closed-forms", "--G", "8", "--p", "0"]) == 0
    assert "undefined" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["closed-forms", "--G", "1"],
            "grpo-identity closed-forms: error: argument --G: must be an integer from 2 to 1,000,000, got 1",
        ),
        (
            ["train", "bernoulli", "--G", "1"],
            "grpo-identity train bernoulli: error: --G must be an integer >= 2, got 1",
        ),
    ],
)
def test_the_installed_module_entry_point_prints_one_line_and_exits_2(args, needle):
    r = run_cli(*args)
    assert r.returncode == 2
    assert r.stderr == needle + "\n" and r.stdout == ""


def test_the_module_entry_point_exits_0_on_success():
    r = run_cli("closed-forms", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["G"] == 8


def _raise_in_realdata(monkeypatch, exc):
    from grpo_identity.analysis import realdata

    def boom(*args, **kwargs):
        raise exc

    monkeypatch.setattr(realdata, "summarise", boom)


def test_a_numpy_repr_in_an_error_is_printed_as_a_plain_number(tmp_path, monkeypatch, capsys):
    import numpy as np

    _raise_in_realdata(
        monkeypatch, ValueError(f"rate {np.float64(0.015625)!r} and count {np.int64(3)!r} are bad\nsecond line")
    )
    (tmp_path / "r.csv").write_text("llama8b_solve_rate\n0.5\n")
    assert main(["realdata", str(tmp_path / "r.csv")]) == 2
    assert capsys.readouterr().err == "grpo-identity realdata: error: rate 0.015625 and count 3 are bad\n"


def test_a_file_error_during_the_work_is_one_line_with_its_path(tmp_path, monkeypatch, capsys):
    _raise_in_realdata(monkeypatch, OSError(28, "No space left on device", "/some/where"))
    (tmp_path / "r.csv").write_text("llama8b_solve_rate\n0.5\n")
    assert main(["realdata", str(tmp_path / "r.csv")]) == 2
    assert capsys.readouterr().err == "grpo-identity realdata: error: No space left on device: /some/where\n"


def test_an_import_error_of_the_project_itself_is_not_hidden(tmp_path, monkeypatch):
    _raise_in_realdata(monkeypatch, ImportError("cannot import name 'x' from 'grpo_identity'", name="grpo_identity"))
    (tmp_path / "r.csv").write_text("llama8b_solve_rate\n0.5\n")
    with pytest.raises(ImportError):  # a bug of the project, not a missing extra: the traceback is the report
        main(["realdata", str(tmp_path / "r.csv")])


def test_running_out_of_memory_is_one_line_not_a_traceback(tmp_path, monkeypatch, capsys):
    _raise_in_realdata(monkeypatch, MemoryError())
    (tmp_path / "r.csv").write_text("llama8b_solve_rate\n0.5\n")
    assert main(["realdata", str(tmp_path / "r.csv")]) == 2
    assert capsys.readouterr().err == "grpo-identity realdata: error: ran out of memory: lower the sizes\n"


def test_bad_input_leaves_no_out_folder_behind_not_even_an_empty_one(tmp_path, capsys):
    out = tmp_path / "DIR" / "sub"
    assert main(["verify", "--solve-rates", str(tmp_path / "missing.csv"), "--out", str(out)]) == 2
    assert "missing.csv" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
