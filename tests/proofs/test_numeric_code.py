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

from grpo_identity import closed_forms as C
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


# --- G10: the twins' losses have the gradients the theorem states (central differences) ---------
_H = 1e-6


def _gradient(loss, x: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    """∂ loss/∂x_u for every u, by central differences."""
    out = np.empty_like(x)
    for u in range(x.size):
        e = np.zeros_like(x)
        e[u] = _H
        out[u] = (loss(x + e) - loss(x - e)) / (2 * _H)
    return out


@pytest.mark.parametrize("eps", [(0.2, 0.2), (0.2, 0.28)], ids=["grpo", "dapo-clip-higher"])
@pytest.mark.parametrize("A", [-1.3, 0.0, 0.8])
def test_the_clipped_surrogates_gradient_in_the_log_ratio_is_the_token_weight_times_a(  # type: ignore[no-untyped-def]
    eps, A
) -> None:
    el, eh = eps
    ratios = np.array([0.3, 0.7, 0.79, 0.95, 1.0, 1.1, 1.27, 1.35, 2.5])  # every region, near both kinks
    x = np.log(ratios)
    fd = (C.clipped_surrogate(np.exp(x + _H), A, el, eh) - C.clipped_surrogate(np.exp(x - _H), A, el, eh)) / (2 * _H)
    assert np.allclose(fd, C.token_weight(ratios, A, el, eh) * A, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("A", [-0.7, 0.9])
def test_gspo_weighs_every_token_of_an_answer_alike_and_the_token_ratio_does_not(A: float) -> None:
    rng = np.random.default_rng(0)
    el, eh = 0.2, 0.28
    for shift in (0.0, 0.5, -0.5):  # s inside the clip range, above it, below it
        x = shift + rng.normal(scale=0.1, size=7)  # one answer's log-ratios log π_θ − log π_old
        s = C.sequence_ratio(x)
        gspo = _gradient(lambda z: z.size * C.clipped_surrogate(C.sequence_ratio(z), A, el, eh), x)
        assert np.allclose(gspo, C.token_weight(s, A, el, eh) * A, rtol=1e-6, atol=1e-9)
        assert np.ptp(gspo) < 1e-6  # the same weight on every token
        token = _gradient(lambda z: C.clipped_surrogate(np.exp(z), A, el, eh).sum(), x)
        assert np.allclose(token, C.token_weight(np.exp(x), A, el, eh) * A, rtol=1e-6, atol=1e-9)
        if shift == 0.0:  # inside the clip range each token keeps its own ρ_u
            assert np.ptp(token) > 0.05


def test_the_k3_kl_terms_gradient_is_the_kl_gradient_weight() -> None:
    beta, ell_ref = 0.04, np.log(np.array([0.1, 0.5, 0.5, 0.9]))
    ell = np.log(np.array([0.3, 0.5, 0.2, 0.95]))  # π_θ above, at, below and above π_ref

    def minus_beta_k3(z: np.ndarray) -> float:
        rho = np.exp(ell_ref - z)  # π_ref/π_θ
        return float(-beta * (rho - np.log(rho) - 1).sum())

    grad = _gradient(minus_beta_k3, ell)
    assert np.allclose(grad, C.kl_gradient_weight(np.exp(ell_ref - ell), beta), rtol=1e-6, atol=1e-10)
    assert grad[1] == pytest.approx(0.0, abs=1e-9) and grad[0] < 0 < grad[2]
