"""One distribution, one namespace; light modules stay light."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIGHT = ["grpo_identity", "grpo_identity.checks", "grpo_identity.dial", "grpo_identity.closed_forms",
         "grpo_identity.registry", "grpo_identity.app.cli", "grpo_identity.trainer"]


@pytest.mark.parametrize("module", LIGHT)
def test_light_modules_import_neither_torch_nor_sympy(module):
    code = f"import {module}, sys; heavy = {{'torch', 'sympy', 'transformers'}} & set(sys.modules); assert not heavy, heavy"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_building_the_cli_parser_stays_light():
    code = ("import sys; from grpo_identity.app.cli import build_parser; build_parser(); "
            "heavy = {'torch', 'sympy', 'transformers', 'matplotlib'} & set(sys.modules); assert not heavy, heavy")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_citation_file_is_cff_1_2_with_the_paper_as_preferred_citation():
    text = (ROOT / "CITATION.cff").read_text()
    assert "cff-version: 1.2.0" in text
    assert "preferred-citation:" in text and "2607.00152" in text
    assert (ROOT / "LICENSE").exists()


def test_readme_cheat_sheet_names_every_registered_formula():
    from grpo_identity.registry import REGISTRY

    readme = (ROOT / "README.md").read_text()
    for f in REGISTRY:
        assert f"`{f.name}`" in readme, f.name


def test_readme_quick_start_is_the_two_make_commands_and_ci_calls_the_test_one():
    readme = (ROOT / "README.md").read_text()
    assert "make verify" in readme and "make test" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.slow
def test_wheel_holds_everything_under_grpo_identity_and_nothing_else(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True, text=True, timeout=300,
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
    assert "grpo_identity/data/bigmath_solve_rate_hist.csv" in names and "grpo_identity/data/dapo_fig3b_accuracy1_fraction.csv" in names
