"""One distribution, one namespace; light modules stay light."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIGHT = [
    "grpo_identity",
    "grpo_identity.checks",
    "grpo_identity.dial",
    "grpo_identity.closed_forms",
    "grpo_identity.registry",
    "grpo_identity.app.cli",
    "grpo_identity.trainer",
]


@pytest.mark.parametrize("module", LIGHT)
def test_light_modules_import_neither_torch_nor_sympy(module):
    code = (
        f"import {module}, sys; heavy = {{'torch', 'sympy', 'transformers'}} & set(sys.modules); "
        "assert not heavy, heavy"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_building_the_cli_parser_stays_light():
    code = (
        "import sys; from grpo_identity.app.cli import build_parser; build_parser(); "
        "heavy = {'torch', 'sympy', 'transformers', 'matplotlib'} & set(sys.modules); assert not heavy, heavy"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_citation_file_is_cff_1_2_with_the_paper_as_preferred_citation():
    text = (ROOT / "CITATION.cff").read_text()
    assert "cff-version: 1.2.0" in text
    assert "preferred-citation:" in text and "2607.00152" in text
    assert (ROOT / "LICENSE").exists()


def test_the_cheat_sheet_names_every_registered_formula():
    from grpo_identity.app.docs import GENERATED, cheat_sheet
    from grpo_identity.registry import REGISTRY

    sheet = cheat_sheet()
    for f in REGISTRY:
        assert f"| `{f.name}` |" in sheet, f.name
    assert GENERATED["reference/cheat-sheet.md"] == "cheat_sheet"  # the site's page is this one
    assert "`group_mean` · `closed_forms.group_mean`" not in (ROOT / "README.md").read_text()  # no hand-kept copy


def test_readme_quick_start_is_the_two_make_commands_and_ci_calls_the_test_one():
    readme = (ROOT / "README.md").read_text()
    assert "make verify" in readme and "make test" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.slow
def test_wheel_holds_everything_under_grpo_identity_and_nothing_else(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = tmp_path.glob("grpo_identity-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops <= {"grpo_identity", wheel.name.split("-py")[0].replace(".whl", "") + ".dist-info"} | {
        t for t in tops if t.endswith(".dist-info")
    }
    for sub in ("proofs", "checks", "trainer"):
        assert f"grpo_identity/{sub}/__init__.py" in names
        assert not any(n.startswith(f"{sub}/") for n in names)
    assert "grpo_identity/formulas.py" in names and "grpo_identity/py.typed" in names
    assert "grpo_identity/app/commands/__init__.py" in names and "grpo_identity/app/commands/verify.py" in names
    assert "grpo_identity/trainer/lm/train.py" in names and "grpo_identity/analysis/realdata.py" in names
    # the data ship with the package: a user's clone needs no shared/ folder beside it
    assert (
        "grpo_identity/data/bigmath_solve_rate_hist.csv" in names
        and "grpo_identity/data/dapo_fig3b_accuracy1_fraction.csv" in names
    )


def test_the_framework_table_is_rendered_from_the_recorded_audit_output_of_its_grid():
    import json

    from grpo_identity.app import grid, table

    rows = [
        json.loads(ln)
        for ln in (ROOT / "results" / "frameworks" / "audits.jsonl").read_text().splitlines()
        if ln.strip()
    ]
    rendered = table.render(rows)
    assert (ROOT / "results" / "frameworks" / "table.md").read_text() == rendered  # nobody edited it by hand
    # the one copy: the site includes table.md (pymdownx.snippets), the README does not copy it
    docs_page = ROOT / "docs" / "findings" / "frameworks.md"
    assert '--8<-- "results/frameworks/table.md"' in docs_page.read_text().splitlines()
    assert rendered.splitlines()[2] not in (ROOT / "README.md").read_text()
    audits = grid.load(ROOT / "results" / "frameworks" / "grid.yaml").audits
    assert [(r["target"], r["release"]) for r in rows] == [a.key for a in audits]  # every audit ran, in its order
    meta = json.loads((ROOT / "results" / "frameworks" / "meta.json").read_text())
    assert meta["command"].startswith("grpo-identity matrix results/frameworks/grid.yaml --out results/frameworks")
    assert meta["recorded"] == len(audits) and meta["versions"]["grpo-identity"]


def test_every_target_of_the_framework_tables_grid_is_a_registered_framework():
    from grpo_identity.app import grid
    from grpo_identity.checks.frameworks.registry import FRAMEWORK_TABLE

    audits = grid.load(ROOT / "results" / "frameworks" / "grid.yaml").audits
    assert {a.environment[0] for a in audits} == set(FRAMEWORK_TABLE)
    assert all(a.release for a in audits)


def test_the_framework_table_shows_adapter_errors_and_the_first_failing_finding():
    from grpo_identity.app import table as fa

    report = {
        "verdict": "fail",
        "matches": None,
        "inferred": {
            "centre": "mean",
            "scale": "group_std",
            "ddof": 1,
            "eps": 1e-6,
            "per_sample_weight": "constant",
            "silent_groups_zero_gradient": False,
            "step": {
                "weight": "1/micro_batch_tokens",
                "invariant": False,
                "pieces": [{"weight_ratio": 0.5}, {"weight_ratio": None}, {"weight_ratio": 1.5}],
            },
        },
        "findings": [
            {"severity": "note", "property": "probe_singleton", "message": "n"},
            {"severity": "fail", "property": "zero_sum", "message": "a | b"},
        ],
    }
    table = fa.render(
        [
            {"target": "verl --set x=1", "release": "0.9.1", "wall_seconds": 12.3, "report": report},
            {
                "target": "verl --set y=2",
                "release": "0.6.0",
                "wall_seconds": 3.0,
                "error": "grpo-identity: verl 0.6.0: TypeError",
            },
        ]
    )
    fail, error = table.splitlines()[2:]
    step = "**1/micro_batch_tokens**, **not invariant** (0.5–1.5×)"
    assert (
        f"| FAIL | - | group std, ddof 1, ε 1e-06 | constant | {step} | **not 0** | - | - | - | zero_sum: a / b | 12 |"
        in fail
    )
    assert "| adapter error |" in error and "TypeError" in error


def test_the_framework_table_shows_a_deviation_where_nothing_fails_and_the_off_policy_weight():
    from grpo_identity.app import table as fa

    report = {
        "verdict": "deviation",
        "matches": "gpg",
        "inferred": {
            "centre": None,
            "per_sample_weight": "1/step_tokens",
            "off_policy": {"importance_weight": "sequence"},
        },
        "findings": [
            {"severity": "deviation", "property": "per_sample_weight", "message": "its own column"},
            {"severity": "deviation", "property": "groups_independent", "message": "by design of gpg: coupled"},
        ],
    }
    (line,) = fa.render([{"target": "verl", "release": "0.9.1", "wall_seconds": 1.0, "report": report}]).splitlines()[
        2:
    ]
    assert "| DEVIATION | gpg | no dial fits | 1/step_tokens |" in line
    assert "| sequence | - | - | groups_independent: by design of gpg: coupled |" in line


def test_the_framework_table_names_the_three_policy_estimator_and_what_departs():
    from grpo_identity.app import table as fa

    fit = {"estimator": "sequence_mask", "in_graph": True, "on_policy_as_configured": False, "missing": "crashed",
           "non_finite": "non-finite"}  # fmt: skip
    report = {"verdict": "fail", "matches": None, "inferred": {"three_policy": fit}, "findings": []}
    (line,) = fa.render([{"target": "trl", "release": "1.6.0", "wall_seconds": 1.0, "report": report}]).splitlines()[2:]
    cell = "sequence_mask; **in the graph**; **≠ 1 on-policy**; missing: crashed; non-finite: non-finite"
    assert f"| {cell} |" in line


def test_the_frameworks_extra_pins_the_tested_releases_and_is_the_one_list_of_them():
    import re

    from grpo_identity.checks.calls.adapters import TESTED_VERSIONS

    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins = dict(r.split("==") for r in extras["frameworks"] if "==" in r)
    makefile = (ROOT / "Makefile").read_text()
    transformers = re.search(r"^TRANSFORMERS_VERSION\s*:=\s*(\S+)", makefile, re.M).group(1)
    torch = re.search(r"^torch==(\S+)", (ROOT / "constraints.txt").read_text(), re.M).group(1)
    assert pins == {
        "trl": TESTED_VERSIONS["trl"],
        "verl": TESTED_VERSIONS["verl"],
        "transformers": transformers,
        "torch": torch,
    }
    assert not any("frameworks" in r for r in extras["all"])  # opt-in for pip users: not in `all`
    assert "trl==" not in makefile  # one list, pyproject's (the lock resolves it with every other extra)
