"""The registry covers every formula, and every twin equals its symbolic definition."""

from __future__ import annotations

import inspect
import itertools

import mpmath
import numpy as np
import pytest
import sympy as sp

from grpo_identity import closed_forms as C
from grpo_identity import dial as D
from grpo_identity import formulas as F
from grpo_identity.registry import REGISTRY, by_name, resolve

SYMBOLS = {"G", "k", "m", "n", "p", "eps", "batch_std"}


def test_registry_lists_every_public_formula_exactly_once():
    public = {n for n in F.__all__ if n not in SYMBOLS}
    names = [f.name for f in REGISTRY]
    assert len(names) == len(set(names))
    assert set(names) == public


def test_every_registry_entry_resolves_to_a_definition_and_a_twin():
    for f in REGISTRY:
        assert callable(resolve(f.symbolic)), f.name
        assert callable(resolve(f.twin)), f.name
        assert f.symbolic == f"grpo_identity.formulas:{f.name}"
        assert f.paper_ref and f.formula and f.quantity and f.proof


def test_closed_forms_exports_only_documented_functions():
    for name in C.__all__:
        doc = inspect.getdoc(getattr(C, name))
        assert doc and ">>>" in doc, f"{name} needs a docstring with an example"


def test_by_name_rejects_unknown_names():
    with pytest.raises(KeyError, match="no formula named"):
        by_name("nope")


# --- twins against definitions, exact rationals for small G ------------------------------------
RATIONAL_P = [sp.Rational(1, 20), sp.Rational(3, 10), sp.Rational(1, 2), sp.Rational(9, 10)]


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-300)


@pytest.mark.parametrize("G", range(2, 13))
def test_k_twins_equal_their_definitions_for_every_k(G):
    for k in range(G + 1):
        exact_sigma = F.sigma(k, G)
        assert _rel(C.sigma(k, G), float(exact_sigma)) < 1e-14 or float(exact_sigma) == C.sigma(k, G) == 0
        assert C.group_mean(k, G) == pytest.approx(float(F.group_mean(k, G)), rel=1e-15)
        pos, neg = C.advantage_values(k, G)
        if 0 < k < G:
            assert _rel(pos, float(F.advantage_correct(k, G))) < 1e-13
            assert _rel(neg, float(F.advantage_incorrect(k, G))) < 1e-13
        else:
            assert pos == neg == 0.0


DIALS = [D.GRPO, D.DR_GRPO, D.DAPO, D.RLOO, D.TRL, D.VERL, D.OPENRLHF, D.GRPO.replace(ddof=1), D.RLOO.replace(scale="group_std"),
         D.GRPO.replace(eps=0.01, eps_where="variance"), D.TRL.replace(eps_where="variance")]


@pytest.mark.parametrize("dial", DIALS, ids=lambda d: f"{d.name}-{d.centre}-{d.scale}-{d.ddof}-{d.eps}-{d.eps_where}")
def test_coefficient_twin_equals_the_symbolic_update_coefficient(dial):
    eps = sp.nsimplify(dial.eps)
    for G in (2, 3, 5, 8, 16):
        for k in range(G + 1):
            expr = F.update_coefficient(dial.centre, dial.scale, dial.ddof, eps, dial.keep, k=k, G=G, eps_where=dial.eps_where)
            want = 0.0 if k in (0, G) else float(expr)
            assert D.coefficient(k, G, dial) == pytest.approx(want, rel=1e-13, abs=1e-300)


def test_batch_std_coefficient_twin_equals_the_symbolic_form():
    for where in ("std", "variance"):
        dial = D.GRPO.replace(scale="batch_std", eps=0.01, eps_where=where)
        for k in range(1, 8):
            expr = F.update_coefficient("mean", "batch_std", 0, sp.Rational(1, 100), "all", k=k, G=8, sigma_batch=sp.Rational(2, 5), eps_where=where)
            assert D.coefficient(k, 8, dial, batch_std=0.4) == pytest.approx(float(expr), rel=1e-14)


@pytest.mark.parametrize("G", range(2, 13))
def test_p_twins_equal_their_definitions_with_exact_rationals(G):
    for p in RATIONAL_P:
        pf = float(p)
        assert _rel(C.silent_rate(G, pf), float(F.silent_rate(G, p))) < 1e-13
        assert _rel(C.expected_sigma_sq(G, pf), float(F.expected_sigma_sq(G, p))) < 1e-13
        exact = F.expected_update(G, p).doit()
        assert _rel(C.expected_update(G, pf), float(sp.N(exact, 30))) < 1e-12
        assert _rel(C.fidelity(G, pf), float(sp.N(F.fidelity(G, p).doit(), 30))) < 1e-12
        assert _rel(C.attenuation_first_order(G, pf), float(F.attenuation_first_order(G, p))) < 1e-13


def test_subsampled_silent_rate_twin_equals_its_definition_with_exact_rationals():
    for n in (2, 5, 16, 64):
        for G in {2, min(4, n), n}:
            for k in range(n + 1):
                exact = F.subsampled_silent_rate(G, k, n)
                assert C.subsampled_silent_rate(G, k, n) == float(exact), (G, k, n)
    # the log-space branch above 1024 rollouts
    for k in (0, 3, 1500, 2997, 3000):
        exact = float(sp.N(F.subsampled_silent_rate(8, k, 3000), 30))
        assert _rel(C.subsampled_silent_rate(8, k, 3000), exact) < 1e-10 or exact == C.subsampled_silent_rate(8, k, 3000) == 0


def test_p_only_and_group_size_twins_equal_their_definitions():
    for p in RATIONAL_P:
        pf = float(p)
        assert _rel(C.difficulty_weight(pf), float(F.difficulty_weight(p))) < 1e-14
        assert _rel(C.arcsine_objective(pf), float(sp.N(F.arcsine_objective(p), 30))) < 1e-14
        for e in (sp.Rational(1, 10), sp.Rational(1, 100)):
            assert _rel(C.group_size_law(float(e), pf), float(F.group_size_law(e, p))) < 1e-14


def _mp_expected_update(G: int, p: float, window: int | None = None) -> mpmath.mpf:
    """Reference E[g] at 40 digits: the binomial sum term by term (optionally a ±window of sd)."""
    with mpmath.workdps(40):
        pm = mpmath.mpf(p)
        lo, hi = 1, G - 1
        if window is not None:
            sd = float(mpmath.sqrt(G * pm * (1 - pm)))
            lo = max(1, int(G * p - window * sd) - 30)
            hi = min(G - 1, int(G * p + window * sd) + 30)
        logc = mpmath.loggamma(G + 1) - mpmath.loggamma(lo + 1) - mpmath.loggamma(G - lo + 1)
        term = mpmath.exp(logc + lo * mpmath.log(pm) + (G - lo) * mpmath.log(1 - pm))
        total = mpmath.mpf(0)
        for k in range(lo, hi + 1):
            total += term * mpmath.sqrt(k * (G - k))
            term = term * (G - k) / (k + 1) * pm / (1 - pm)
        return total / G


@pytest.mark.parametrize("G", [2, 7, 64, 1000, 1001, 1030, 2047, 4096, 4097, 5000])
@pytest.mark.parametrize("p", [1e-6, 0.003, 0.05, 0.3, 0.5, 0.77, 0.999])
def test_expected_update_matches_a_40_digit_reference(G, p):
    ref = float(_mp_expected_update(G, p))
    assert _rel(C.expected_update(G, p), ref) < 1e-10


@pytest.mark.slow
@pytest.mark.parametrize("G", [10**5, 10**6])
@pytest.mark.parametrize("p", [1e-7, 0.01, 0.5, 0.93])
def test_expected_update_matches_a_40_digit_reference_up_to_a_million(G, p):
    # Terms beyond 20 sd are below 1e-80 of the sum, so the windowed reference is exact to 40 digits.
    ref = float(_mp_expected_update(G, p, window=20))
    assert _rel(C.expected_update(G, p), ref) < 1e-10


def test_binomial_pmf_sums_to_one_and_matches_exact_values():
    for G, p in itertools.product((2, 9, 40, 3000), (0.0, 0.01, 0.5, 0.99, 1.0)):
        ks = np.arange(G + 1)
        pmf = C.binomial_pmf(ks, G, p)
        assert abs(pmf.sum() - 1.0) < 1e-12
    for k in range(11):
        exact = float(sp.binomial(10, k) * sp.Rational(3, 10) ** k * sp.Rational(7, 10) ** (10 - k))
        assert _rel(C.binomial_pmf(k, 10, 0.3), exact) < 1e-14
