"""The zero test: residuals with Sums over shifted or extended ranges, boundary terms peeled off."""

from __future__ import annotations

import sympy as sp

from grpo_identity import formulas as F
from grpo_identity.proofs.core import Formulas, check_equal, combine_sums, reduce_to_zero

G, p = F.G, F.p
j = sp.Symbol("j", integer=True)


def test_a_sum_over_an_extended_range_with_vanishing_end_terms_equals_the_shorter_sum() -> None:
    full = sp.Sum(sp.binomial(G, F.k) * p**F.k * (1 - p) ** (G - F.k) * F.sigma(F.k, G), (F.k, 0, G))
    assert reduce_to_zero(F.expected_update(G, p) - full) == 0


def test_an_extended_range_whose_end_terms_do_not_vanish_fails_with_those_terms() -> None:
    r = reduce_to_zero(sp.Sum(j, (j, 1, G - 1)) - sp.Sum(j, (j, 0, G)))
    assert r != 0 and sp.simplify(r + G) == 0


def test_a_shifted_index_is_recognised() -> None:
    assert reduce_to_zero(sp.Sum(j**2, (j, 1, G)) - sp.Sum((j + 1) ** 2, (j, 0, G - 1))) == 0


def test_a_shift_with_a_wrong_range_fails() -> None:
    assert reduce_to_zero(sp.Sum(j**2, (j, 1, G)) - sp.Sum((j + 1) ** 2, (j, 0, G))) != 0


def test_sums_over_unrelated_ranges_are_kept_apart() -> None:
    k, m = sp.symbols("k m", integer=True, positive=True)
    parts = combine_sums(sp.Sum(j, (j, 1, k)) + sp.Sum(j, (j, k + 1, k + m)))
    assert parts is not None and len(parts) == 3  # two families and the remainder
    assert reduce_to_zero(sp.Sum(j, (j, 1, k)) - sp.Sum(j, (j, k + 1, k + m))) != 0


def test_a_nonlinear_use_of_a_sum_is_left_alone() -> None:
    assert combine_sums(sp.Sum(j, (j, 1, G)) ** 2) is None


def test_a_true_rewrite_of_the_expected_update_proves_and_a_scaled_one_fails() -> None:
    full = sp.Sum(sp.binomial(G, F.k) * p**F.k * (1 - p) ** (G - F.k) * F.sigma(F.k, G), (F.k, 0, G))
    assert check_equal(F.expected_update(G, p), full).status == "proved"
    assert check_equal(F.expected_update(G, p), full * sp.Rational(11, 10)).status == "failed"


def test_formulas_records_what_a_proof_reads() -> None:
    f = Formulas()
    f.sigma(1, 2)
    f._scale("none", 0, 0, 1, 2, 1)
    assert f.read == {"sigma", "_scale"}


def test_a_piecewise_claim_false_only_near_zero_fails_by_evaluation_before_any_simplify(monkeypatch) -> None:
    """A wrong piecewise claim can vanish at a first probe point; the others find it, and the costly
    rewrites (``simplify`` on piecewise conditions took 40 s of G10's perturbation test) never run."""
    x, y = sp.symbols("x y", positive=True)

    def no_simplify(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("simplify was called on a residual that evaluates to a nonzero number")

    monkeypatch.setattr(sp, "simplify", no_simplify)
    wrong = check_equal(sp.Piecewise((x + y, 10 * x < 1), (0, True)), 0)
    assert wrong.status == "failed" and wrong.residual != 0
    true = check_equal(
        sp.Piecewise((x**2 - y**2, x < 1), (0, True)), sp.Piecewise(((x - y) * (x + y), x < 1), (0, True))
    )
    assert true.status == "proved"


def test_a_true_claim_whose_terms_cancel_at_a_probe_point_is_proved_not_read_as_nonzero() -> None:
    """Near 0, exp(5/x) is about 10²⁵⁰: the two sides cancel to a zero with no digits left, which
    evalf's strict mode refuses instead of calling it a number; the rewrites then prove the claim."""
    x, y = sp.symbols("x y", positive=True)
    assert (
        check_equal(sp.exp(5 / x) * (sp.sqrt(y) + 1) ** 2, sp.exp(5 / x) * (y + 2 * sp.sqrt(y) + 1)).status == "proved"
    )


def test_a_true_piecewise_sign_claim_still_gets_its_rewrites() -> None:
    """A sign is read from a reduced expression, where nonzero is the normal case: no early stop there."""
    from grpo_identity.proofs.core import Claim, check_claims

    x, y = sp.symbols("x y", positive=True)
    claim = Claim("c", sp.Piecewise(((x**2 - 1) / (x - 1) - x, y < 5), (1, True)), kind="nonneg")
    assert check_claims("sign", [claim]).status == "proved"


def test_first_failure_looks_at_the_computed_claims_first_and_stops_at_the_first_that_fails(monkeypatch) -> None:
    from grpo_identity.proofs import core

    x = sp.Symbol("x", positive=True)
    claims = [
        core.Claim("x - x = 0", x - x),
        core.Claim("x + 1 = x", x + 1, x),
        core.Claim("numbers agree", "diff", kind="numeric", ok=False, value=1.0),
        core.Claim("x > 0", x, kind="pos"),
    ]
    checked: list[str] = []
    check_one = core._check_one
    monkeypatch.setattr(core, "_check_one", lambda c: (checked.append(c.label), check_one(c))[1])
    every = core.check_claims("all", claims)
    assert every.status == "failed" and checked == [c.label for c in claims] and every.residual == 1
    checked.clear()
    first = core.check_claims("first", claims, first_failure=True)
    assert first.status == "failed" and checked == ["numbers agree"] and first.residual is None
    assert [c["claim"] for c in first.details["claims"]] == ["numbers agree"]
    checked.clear()
    holds = core.check_claims("first", [claims[0], claims[3]], first_failure=True)
    assert holds.status == "proved" and checked == ["x - x = 0", "x > 0"] and len(holds.details["claims"]) == 2
    checked.clear()
    eq_first = core.check_claims("first", [claims[0], claims[1], claims[3]], first_failure=True)
    assert checked == ["x - x = 0", "x + 1 = x"] and eq_first.residual == 1
    assert [c["claim"] for c in eq_first.details["claims"]] == ["x - x = 0", "x + 1 = x"]
    checked.clear()
    agree = core.Claim("numbers agree", "diff", kind="numeric", ok=True, value=0.0)
    proved = core.check_claims("first", [claims[0], agree, claims[3]], first_failure=True)
    assert checked == ["numbers agree", "x - x = 0", "x > 0"] and proved.status == "proved"
    assert proved.details == core.check_claims("all", [claims[0], agree, claims[3]]).details


def test_a_theorem_proved_to_its_first_failure_lists_the_claims_up_to_that_one() -> None:
    from grpo_identity.proofs import by_name

    wrong = {"expected_sigma_sq": lambda G, p: p * (1 - p)}  # E[σ²] without its 1 − 1/G
    every, first = (by_name("T9").prove(perturb=wrong, first_failure=f) for f in (False, True))
    assert every.status == first.status == "failed"
    assert len(every.details["claims"]) > 1 and not any(c["holds"] for c in every.details["claims"])
    assert [c["claim"] for c in first.details["claims"]] == [every.details["claims"][0]["claim"]]
