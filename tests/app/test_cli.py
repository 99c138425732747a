"""The CLI is thin: closed-forms prints the paper's numbers; bad input is one line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from grpo_identity import __version__
from grpo_identity.app.cli import main


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "grpo_identity", *args], capture_output=True, text=True, timeout=120)


def test_version_and_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and __version__ in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert "closed-forms" in capsys.readouterr().out


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
        (["closed-forms", "--G", "1"], "group size G must be an integer >= 2, got 1"),
        (["closed-forms", "--p", "1.5"], "p must be in [0, 1], got 1.5"),
        (["closed-forms", "--G", "8.5"], "invalid int value"),
        (["closed-forms", "--table", "nope"], "invalid choice"),
        (["no-such-command"], "invalid choice"),
    ],
)
def test_bad_input_prints_one_line_and_exits_2(args, needle):
    r = run_cli(*args)
    assert r.returncode == 2
    assert needle in r.stderr
    assert "Traceback" not in r.stderr
    assert len([line for line in r.stderr.splitlines() if "error" in line]) == 1
