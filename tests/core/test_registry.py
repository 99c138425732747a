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
from grpo_identity.registry import REGISTRY, Formula, by_name, resolve

SYMBOLS = {"G", "k", "m", "n", "p", "eps", "batch_std", "grad_p", "cov_plus", "cov_minus", "R", "s"}
SYMBOLS |= {"ratio", "advantage", "eps_low", "eps_high", "log_ratio", "L", "ref_ratio", "beta"}
SYMBOLS |= {"rollout_ratio", "cap", "mask_low", "mask_high"}


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


# --- every twin against its definition, driven by the entry's signature ------------------------
RATIONAL_P = [sp.Rational(1, 20), sp.Rational(3, 10), sp.Rational(1, 2), sp.Rational(9, 10)]
RATIONAL_EPS = [sp.Rational(1, 10), sp.Rational(1, 20), sp.Rational(1, 100)]
DIALS = [
    D.GRPO,
    D.DR_GRPO,
    D.DAPO,
    D.RLOO,
    D.TRL,
    D.VERL,
    D.OPENRLHF,
    D.GRPO.replace(ddof=1),
    D.RLOO.replace(scale="group_std"),
    D.GRPO.replace(eps=0.01, eps_where="variance"),
    D.TRL.replace(eps_where="variance"),
]
_Q = sp.Rational
#: groups of rewards the "R" signatures are compared on: binary, two-valued, multi-valued (ties),
#: continuous, silent (all equal: σ_R = 0, β̂ undefined and its twin 0), a lone answer
REWARD_GROUPS = [
    (1, 0, 0, 0),
    (_Q(1, 10), _Q(9, 10), _Q(9, 10)),
    (0, _Q(1, 2), 1, _Q(1, 2), 0),
    (_Q(3, 10), _Q(-7, 4), 2, _Q(1, 3), 5, _Q(-1, 8)),
    (_Q(1, 10),) * 3,
    (_Q(7, 3),),
]
#: token ratios, advantages and clip ranges (ε_low, ε_high) the "rho,A,eps" signature is compared on: every region
#: of the clip, the kinks 3/4 and 3/2 of the range (1/4, 1/2) (exact in binary), DAPO's clip-higher (1/5, 7/25)
RATIOS = [_Q(1, 4), _Q(3, 4), _Q(9, 10), 1, _Q(6, 5), _Q(3, 2), 2]
CLIP_RANGES = [(_Q(1, 4), _Q(1, 2)), (_Q(1, 5), _Q(7, 25))]
#: one answer's per-token log-ratios (the "x" signature): on-policy, a lone token, mixed signs
LOG_RATIOS = [(0, 0, 0), (_Q(-1, 3),), (_Q(1, 10), _Q(-7, 4), 2, _Q(1, 3), _Q(-1, 8))]
COVARIANCES = [
    (sp.Rational(1, 3), sp.Rational(2, 7)),
    (sp.Integer(1), sp.Integer(1)),
    (sp.Integer(0), sp.Rational(5, 2)),
]


def points(signature: str) -> list[tuple[object, ...]]:
    """The exact arguments at which a twin is compared with its definition, per signature."""
    if signature == "k,G":
        return [(k, G) for G in range(2, 13) for k in range(G + 1)]
    if signature == "G,p":
        return [(G, p) for G in range(2, 13) for p in RATIONAL_P]
    if signature == "eps,p":
        return [(e, p) for e in RATIONAL_EPS for p in RATIONAL_P]
    if signature == "p":
        return [(p,) for p in RATIONAL_P]
    if signature == "k,G,dial":
        return [(k, G, dial) for dial in DIALS for G in (2, 3, 5, 8, 16) for k in range(G + 1)]
    if signature == "G,k,n":
        small = [(G, k, n) for n in (2, 5, 16, 64) for G in sorted({2, min(4, n), n}) for k in range(n + 1)]
        return small + [(8, k, 3000) for k in (0, 3, 1500, 2997, 3000)]  # the log-space branch above 1024 rollouts
    if signature == "k,G,p":
        return [(k, G, p) for G in range(2, 9) for k in range(G + 1) for p in RATIONAL_P]
    if signature == "k,G,cov":
        return [(k, G, cov) for G in range(2, 9) for k in range(1, G) for cov in COVARIANCES]
    if signature == "R":
        return [(list(R),) for R in REWARD_GROUPS]
    if signature == "R,s":
        scores = [_Q(2, 3), -1, _Q(5, 2), 0, _Q(-9, 7), 4]
        return [(list(R), scores[: len(R)]) for R in REWARD_GROUPS]
    if signature == "rho,A,eps":
        return [(r, A, *e) for e in CLIP_RANGES for A in (_Q(-3, 2), 0, _Q(7, 10)) for r in RATIOS]
    if signature == "x":
        return [(list(x),) for x in LOG_RATIOS]
    if signature == "rho,beta":
        return [(r, b) for r in (_Q(1, 4), 1, _Q(3, 2), 5) for b in (_Q(1, 100), _Q(1, 25), 1)]
    if signature == "r,cap":
        return [(r, c) for r in RATIOS for c in (_Q(1, 2), 1, _Q(3, 2), 2)]
    if signature == "r,low,high":
        return [(r, lo, hi) for r in RATIOS for lo, hi in ((0, 2), (_Q(1, 2), _Q(3, 2)), (_Q(3, 4), _Q(6, 5)))]
    raise ValueError(f"no comparison points for signature {signature!r}: add them to points()")


def _definition_value(formula: Formula, args: tuple[object, ...]) -> sp.Expr:
    definition = resolve(formula.symbolic)
    if formula.signature == "k,G,dial":
        k, G, dial = args
        return definition(**{**dial.params(), "eps": sp.nsimplify(dial.eps)}, k=k, G=G)  # type: ignore[attr-defined]
    if formula.signature == "k,G,cov":
        k, G, (cp, cm) = args  # type: ignore[misc]
        return definition(k, G, cp, cm)
    if formula.signature == "k,G,p":
        return definition(*args, 1)  # one unit of the gradient
    value = definition(*args)
    return value.doit() if isinstance(value, sp.Basic) else value


def _twin_value(formula: Formula, args: tuple[object, ...]) -> float:
    twin = resolve(formula.twin)
    if formula.signature == "k,G,dial":
        k, G, dial = args
        out = twin(k, G, dial)
    elif formula.signature == "k,G,cov":
        k, G, (cp, cm) = args  # type: ignore[misc]
        out = twin(k, G, float(cp), float(cm))
    elif formula.signature in ("R", "R,s", "x"):
        out = twin(*[np.array([float(x) for x in a]) for a in args])  # type: ignore[attr-defined]
    else:
        out = twin(*[a if isinstance(a, int) else float(a) for a in args])  # type: ignore[arg-type]
    return float(out[formula.twin_part] if formula.twin_part is not None else out)


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-300)


def _tolerance(formula: Formula, args: tuple[object, ...]) -> float:
    """1e-12 relative; 1e-10 where the twin works in log space (the sub-sampled rate above 1024 rollouts)."""
    if formula.signature == "G,k,n" and int(args[2]) > C.EXACT_ROLLOUTS_MAX:  # type: ignore[call-overload]
        return 1e-10
    return 1e-12


def twin_mismatches(formula: Formula) -> list[str]:
    """Every point where the twin differs from the definition by more than the tolerance (relative).

    The definition is evaluated exactly (unevaluated Sums expanded) and rounded at 30 digits.
    Where it is undefined (0/0 at a silent group), the twin must return the convention value 0.
    """
    bad = []
    for args in points(formula.signature):
        rel = _tolerance(formula, args)
        exact = _definition_value(formula, args)
        want = sp.N(exact, 30)
        got = _twin_value(formula, args)
        if not want.is_finite:  # a silent group: advantages and coefficients are defined as 0
            ok = got == 0.0
        else:
            w = float(want)
            ok = got == w or abs(got - w) <= rel * max(abs(w), 1e-300)
        if not ok:
            bad.append(f"{formula.name}{args}: twin {got!r}, definition {want}")
    return bad


@pytest.mark.parametrize("formula", REGISTRY, ids=lambda f: f.name)
def test_every_registered_twin_equals_its_definition_at_its_signatures_points(formula: Formula) -> None:
    assert twin_mismatches(formula) == []


def test_a_registered_formula_with_a_wrong_twin_fails_the_registry_check(monkeypatch: pytest.MonkeyPatch) -> None:
    # a new entry whose twin is another quantity: no test of its own, caught by the parametrised check
    wrong = Formula(
        "sigma_wrong",
        "a deliberately wrong twin",
        "σ",
        "none",
        "grpo_identity.formulas:sigma",
        "grpo_identity.closed_forms:group_mean",
        "T1",
        "k,G",
    )
    monkeypatch.setattr("grpo_identity.registry.REGISTRY", (*REGISTRY, wrong))
    from grpo_identity import registry

    assert [f.name for f in registry.REGISTRY if twin_mismatches(f)] == ["sigma_wrong"]
    # and a twin broken in place (off by 1e-9 relative, at one signature) is caught too
    monkeypatch.setattr(C, "silent_rate", lambda G, p: (p**G + (1 - p) ** G) * (1 + 1e-9))
    assert twin_mismatches(by_name("silent_rate"))


def test_a_signature_without_comparison_points_is_an_error() -> None:
    with pytest.raises(ValueError, match="no comparison points"):
        points("G,eps,n")


def test_batch_std_coefficient_twin_equals_the_symbolic_form():
    for where in ("std", "variance"):
        dial = D.GRPO.replace(scale="batch_std", eps=0.01, eps_where=where)
        for k in range(1, 8):
            expr = F.update_coefficient(
                "mean",
                "batch_std",
                0,
                sp.Rational(1, 100),
                "all",
                k=k,
                G=8,
                sigma_batch=sp.Rational(2, 5),
                eps_where=where,
            )
            assert D.coefficient(k, 8, dial, batch_std=0.4) == pytest.approx(float(expr), rel=1e-14)


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
