"""The numeric code computes what the theorems state, and no proof leans on numeric code.

The proofs are symbolic: they may read the dial's presets (their parameters) but never call
the dial's numeric functions or the closed forms.  The numeric checks that once sat inside
the proofs (T6, G2, G3) live here, comparing the dial with each theorem's statement.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

from grpo_identity import dial as D
from grpo_identity import formulas as F
from grpo_identity.proofs.core import Formulas
from grpo_identity.proofs.identity import THREE_MODES, _published

PROOFS = Path(__file__).resolve().parents[2] / "proofs"
#: the dial's numeric functions; a proof may use the presets (``D.GRPO``, ``.params()``) only
NUMERIC = {"advantages", "keep_mask", "coefficient", "group_updates", "score_gap"}


def numeric_calls(source: str) -> list[str]:
    """Uses of the dial's numeric functions or of the closed forms in a module's source."""
    tree = ast.parse(source)
    dial_names, found = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.endswith("closed_forms") or any(a.name == "closed_forms" for a in node.names):
                found.append(f"imports closed_forms (line {node.lineno})")
            if node.module == "grpo_identity.dial":
                found += [f"imports dial.{a.name} (line {node.lineno})" for a in node.names if a.name in NUMERIC]
            if node.module == "grpo_identity":
                dial_names |= {a.asname or a.name for a in node.names if a.name == "dial"}
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.endswith("closed_forms"):
                    found.append(f"imports closed_forms (line {node.lineno})")
                if a.name == "grpo_identity.dial":
                    dial_names.add(a.asname or a.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in NUMERIC and ast.unparse(node.value) in dial_names:
            found.append(f"uses dial.{node.attr} (line {node.lineno})")
    return found


@pytest.mark.parametrize("path", sorted(PROOFS.glob("*.py")), ids=lambda p: p.name)
def test_no_proof_calls_the_dials_numeric_functions_or_the_closed_forms(path: Path) -> None:
    assert numeric_calls(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    "source",
    [
        "from grpo_identity import dial as D\nx = D.coefficient(1, 2)\n",
        "import grpo_identity.dial as D\nx = D.advantages\n",
        "from grpo_identity.dial import keep_mask\n",
        "from grpo_identity import closed_forms as C\n",
        "def f():\n    from grpo_identity.closed_forms import sigma\n",
    ],
)
def test_the_scan_catches_a_proof_that_calls_numeric_code(source: str) -> None:
    assert numeric_calls(source) != []


def test_the_scan_allows_the_presets_parameters() -> None:
    assert numeric_calls("from grpo_identity import dial as D\nkw = D.GRPO.params()\nd = D.Dial\n") == []


# --- T6: the dial computes each method's published advantage ----------------------------------
@pytest.mark.parametrize("dial", THREE_MODES, ids=lambda d: d.name)
@pytest.mark.parametrize("G", range(2, 9))
def test_the_dial_computes_the_published_advantages_for_every_k(dial: D.Dial, G: int) -> None:
    f = Formulas()
    for k in range(G + 1):
        R = np.array([1.0] * k + [0.0] * (G - k))
        silent = k in (0, G)
        want = [0.0 if silent and dial.name != "dr_grpo" else float(_published(dial.name, f, r, k, G)) for r in R]
        assert np.max(np.abs(D.advantages(R, G, dial) - np.array(want))) < 1e-12, (dial.name, G, k)


# --- G2: Bessel's correction multiplies the coefficient by sqrt((G-1)/G) ----------------------
@pytest.mark.parametrize("G", range(2, 9))
def test_the_dials_ddof_one_coefficient_is_sqrt_of_g_minus_one_over_g_times_sigma(G: int) -> None:
    dial = D.GRPO.replace(ddof=1)
    for k in range(G + 1):
        want = float(sp.sqrt(sp.Rational(G - 1, G)) * F.sigma(k, G))
        assert D.coefficient(k, G, dial) == pytest.approx(want, rel=1e-13, abs=1e-300)


# --- G3: the frameworks' epsilon moves the coefficient by at most eps*G/sqrt(G-1), relatively --
@pytest.mark.parametrize("dial", [D.TRL, D.VERL, D.OPENRLHF], ids=lambda d: d.name)
def test_the_frameworks_epsilon_changes_the_coefficient_by_less_than_the_g3_bound(dial: D.Dial) -> None:
    for G in range(2, 65):
        k = np.arange(1, G)
        exact = D.coefficient(k, G, dial.replace(eps=0.0))
        rel = (exact - D.coefficient(k, G, dial)) / exact
        assert np.all(rel > 0) and np.all(rel < dial.eps * G / math.sqrt(G - 1)), (dial.name, G)
