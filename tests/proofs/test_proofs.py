"""Tests of grpo_identity.proofs: every theorem is proved, every proof can fail, the CLI."""

from __future__ import annotations

import inspect
import json
import re

import numpy as np
import pytest
import sympy as sp

from grpo_identity import closed_forms as C
from grpo_identity import formulas as F
from grpo_identity.app.cli import main
from grpo_identity.proofs import (
    THEOREMS,
    Claim,
    Theorem,
    by_name,
    check_claims,
    check_equal,
    fidelity_series,
    prove_all,
    select,
    table_comparison,
)
from grpo_identity.proofs.attenuation import _t11_symbolic
from grpo_identity.proofs.core import Formulas, G_interior, k, sbar_minus, sbar_plus
from grpo_identity.proofs.expectation import explicit_expected_update
from grpo_identity.proofs.identity import group_update
from grpo_identity.registry import REGISTRY

FAST = [t for t in THEOREMS if t.name != "T11"]


# --- every theorem is proved ------------------------------------------------------------------
@pytest.mark.parametrize("theorem", FAST, ids=lambda t: t.name)
def test_every_theorem_is_proved_by_the_method_its_claims_establish(theorem: Theorem) -> None:
    r = theorem.prove()
    assert r.status == "proved", r.details["claims"]
    assert r.residual is None
    assert r.name == theorem.name and r.seconds >= 0
    assert all(c["holds"] for c in r.details["claims"])
    assert r.method == theorem.method  # as declared, and as the rendered statement says
    assert f"method: {theorem.method}" in theorem.render_markdown()


@pytest.mark.slow
def test_attenuation_theorem_t11_is_proved_with_its_numeric_checks() -> None:
    r = by_name("T11").prove()
    assert r.status == "proved", [c for c in r.details["claims"] if not c["holds"]]
    for pv in ("p=0.5", "p=0.3", "p=0.1"):
        e = r.details["errors"][pv]
        assert abs(e["slope_first_order"] + 2) < 0.1
        assert abs(e["slope_second_order"] + 3) < 0.1
    assert r.details["group_size_table"]["second_order_better"] is True
    assert r.method == "certified numeric"
    assert r.details["evidence"] and all(e["holds"] for e in r.details["evidence"])
    assert not any(c["method"] == "numeric evidence" for c in r.details["claims"])


def test_the_theorems_are_t1_to_t14_then_g1_to_g11_in_order() -> None:
    assert [t.name for t in THEOREMS] == [f"T{i}" for i in range(1, 15)] + [f"G{i}" for i in range(1, 12)]


@pytest.mark.parametrize("theorem", THEOREMS, ids=lambda t: t.name)
def test_every_theorem_record_is_complete_and_renders(theorem: Theorem) -> None:
    for field in (theorem.title, theorem.statement, theorem.paper_ref, theorem.assumptions, theorem.latex):
        assert isinstance(field, str) and field.strip()
    assert "= True" not in theorem.latex and theorem.latex not in ("True", "False")
    md = theorem.render_markdown()
    assert theorem.statement in md and f"$$\n{theorem.latex}\n$$" in md


def test_identity_latex_is_printed_by_sympy_from_the_formulas() -> None:
    assert by_name("T3").latex == sp.latex(
        sp.Eq(sp.Symbol("g"), F.sigma() * (sp.Symbol(r"\bar{s}_{+}") - sp.Symbol(r"\bar{s}_{-}")), evaluate=False)
    )


def test_every_proof_named_in_the_registry_exists() -> None:
    names = {t.name for t in THEOREMS}
    assert {f.proof for f in REGISTRY} <= names


# --- every proof can fail ---------------------------------------------------------------------
def _sigma_inflated(k=F.k, G=F.G):  # type: ignore[no-untyped-def]
    return F.sigma(k, G) * (1 + sp.Integer(1) / G)


def _ddof_one(**kw):  # type: ignore[no-untyped-def]
    return F.update_coefficient(**{**kw, "ddof": 1})


def _ddof_zero(**kw):  # type: ignore[no-untyped-def]
    return F.update_coefficient(**{**kw, "ddof": 0})


PERTURBATIONS = {
    "T1": {"sigma": _sigma_inflated},
    "T2": {"advantage_correct": lambda k=F.k, G=F.G: 2 * F.advantage_correct(k, G)},
    "T3": {"sigma": _sigma_inflated},
    "T4": {"advantage_incorrect": lambda k=F.k, G=F.G: -F.advantage_incorrect(k, G)},
    "T5": {"sigma": _sigma_inflated},
    "T6": {"update_coefficient": _ddof_one},
    "T7": {"group_mean": lambda k=F.k, G=F.G: k / (G + 1)},
    "T8": {"silent_rate": lambda G=F.G, p=F.p: p**G},  # a missing term
    "T9": {"expected_sigma_sq": lambda G=F.G, p=F.p: p * (1 - p)},  # a missing factor 1 - 1/G
    "T10": {"expected_update": lambda G=F.G, p=F.p: F.expected_update(G, p) * (1 + sp.Integer(1) / G)},
    "T14": {
        "fidelity": lambda G=F.G, p=F.p: F.fidelity(G, p) * (1 - sp.Rational(1, 1000))
    },  # 0.1 % low: G=51 misses 99 %
    "G7": {
        "expected_score_gap": lambda p=F.p, grad_p=1: grad_p / p
    },  # E[sbar+ | k] alone, the incorrect side forgotten
    "G8": {
        "update_covariance_given_k": lambda k=F.k, G=F.G, cov_plus=F.cov_plus, cov_minus=F.cov_minus, c=None: (
            F.update_covariance_given_k(k, G, cov_plus, cov_minus, c) * k / G
        )
    },
    "T12": {"group_size_law": lambda eps=F.eps, p=F.p: 1 / (eps * p * (1 - p))},  # missing 1/8
    "T13": {"difficulty_weight": lambda p=F.p: 2 / sp.sqrt(p * (1 - p))},
    "G1": {"sigma": _sigma_inflated},
    "G2": {"update_coefficient": _ddof_zero},  # ddof 0 where 1 is stated
    "G3": {"update_coefficient": lambda **kw: F.update_coefficient(**{**kw, "eps": 0})},
    "G4": {"sigma": _sigma_inflated},
    "G5": {"advantage_correct": lambda k=F.k, G=F.G: F.advantage_correct(k, G) * (1 + sp.Integer(1) / G)},
    "G6": {"sigma": _sigma_inflated},
    "G9": {"reward_std": lambda R=F.R, G=F.G: _binary_sigma(R, G)},  # right on binary rewards only
    # w = ρ everywhere: importance-weighted, never clipped
    "G10": {"token_weight": lambda ratio=F.ratio, advantage=F.advantage, eps_low=F.eps_low, eps_high=F.eps_high: ratio},
    # the sequence weight as the geometric mean where the product is meant (NeMo-RL PR #2269's choice, not TIS's)
    "G11": {"sequence_product_ratio": lambda log_ratio=F.log_ratio, L=F.L: F.sequence_ratio(log_ratio, L)},
}


def _binary_sigma(R, G):  # type: ignore[no-untyped-def]
    """σ from the binary formula √(R̄(1 − R̄)): σ_R for rewards in {0, 1}, wrong for any others."""
    mean = sp.Sum(R[F._j], (F._j, 1, G)) / G if isinstance(R, sp.IndexedBase) else sp.Rational(1, len(R)) * sum(R)
    return sp.sqrt(mean * (1 - mean))


def test_every_fast_theorem_has_a_perturbation() -> None:
    assert set(PERTURBATIONS) == {t.name for t in FAST}


@pytest.mark.parametrize("name", sorted(PERTURBATIONS))
def test_a_perturbed_statement_is_reported_failed_with_a_nonzero_residual(name: str) -> None:
    r = by_name(name).prove(perturb=PERTURBATIONS[name])
    assert r.status == "failed"
    failed = [c for c in r.details["claims"] if not c["holds"]]
    assert failed
    if any(c["kind"] == "eq" for c in failed):  # an equation that fails reports its residual
        assert r.residual is not None and r.residual != 0
    else:  # a certified claim that fails reports its enclosure
        assert all(c["kind"] == "certified" and c["result"].startswith("[") for c in failed)


def test_sigma_times_one_plus_one_over_G_fails_the_identity_with_that_residual() -> None:
    G = G_interior
    lhs = group_update(F.advantage_correct(k, G), F.advantage_incorrect(k, G))
    assert check_equal(lhs, F.sigma(k, G) * (sbar_plus - sbar_minus)).status == "proved"
    bad = check_equal(lhs, F.sigma(k, G) * (1 + 1 / G) * (sbar_plus - sbar_minus))
    assert bad.status == "failed"
    j = sp.Symbol("j", nonnegative=True, integer=True)
    expected = -F.sigma(k, G) / G * (sbar_plus[j, 0] - sbar_minus[j, 0])
    assert sp.simplify(bad.residual - expected) == 0


def test_ddof_one_where_zero_is_stated_fails() -> None:
    G = G_interior
    r = check_equal(F.update_coefficient(ddof=1, k=k, G=G), F.sigma(k, G))
    assert r.status == "failed" and r.residual != 0


def test_a_missing_factor_fails() -> None:
    r = check_equal(F.expected_sigma_sq(), F.p * (1 - F.p))
    assert r.status == "failed"
    assert sp.simplify(r.residual + F.p * (1 - F.p) / F.G) == 0


def test_a_perturbed_second_order_law_fails_the_symbolic_part_of_t11() -> None:
    wrong = {
        "attenuation_second_order": lambda G=F.G, p=F.p: (
            F.attenuation_first_order(G, p) - (8 - 16 * p * (1 - p)) / (128 * G**2 * p**2 * (1 - p) ** 2)
        )
    }
    r = check_claims("T11", _t11_symbolic(Formulas(wrong)))
    assert r.status == "failed" and r.residual != 0
    assert check_claims("T11", _t11_symbolic(Formulas())).status == "proved"


def test_failed_sign_and_numeric_claims_fail_the_proof() -> None:
    x = sp.Symbol("x", real=True)
    assert check_claims("s", [Claim("x^2 - 1 >= 0", x**2 - 1, kind="nonneg")]).status == "failed"
    assert check_claims("n", [Claim("numbers agree", "diff", kind="numeric", ok=False, value=1.0)]).status == "failed"
    assert check_claims("ok", [Claim("x^2 >= 0", x**2, kind="nonneg")]).status == "proved"


def test_perturbing_an_unknown_formula_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown formula 'sigmaa'"):
        by_name("T1").prove(perturb={"sigmaa": F.sigma})


# --- values the proofs rely on ----------------------------------------------------------------
def test_expected_update_closed_values_at_small_group_sizes() -> None:
    p = F.p
    assert sp.expand(explicit_expected_update(2) - p * (1 - p)) == 0
    assert sp.expand(explicit_expected_update(3) - sp.sqrt(2) * p * (1 - p)) == 0  # (3·√2/3)(p q² + p² q)


def test_the_fidelity_series_gives_the_paper_law_and_the_next_term() -> None:
    c = fidelity_series(2)
    p = F.p
    assert c[0] == 1
    assert sp.simplify(c[1] + 1 / (8 * p * (1 - p))) == 0
    assert sp.simplify(c[2] + (7 - 16 * p * (1 - p)) / (128 * p**2 * (1 - p) ** 2)) == 0


def test_second_order_twin_equals_its_symbolic_definition() -> None:
    sym = sp.lambdify((F.G, F.p), F.attenuation_second_order(F.G, F.p), modules="math")
    for G in (2, 3, 8, 64, 4096):
        for p in (0.01, 0.05, 0.3, 0.5, 0.9):
            assert C.attenuation_second_order(G, p) == pytest.approx(sym(G, p), rel=1e-13)
    ps = np.array([0.1, 0.5])
    assert np.allclose(C.attenuation_second_order(8, ps), [sym(8, 0.1), sym(8, 0.5)], rtol=1e-13)
    assert C.attenuation_second_order(8, 0.0) == -np.inf


def test_second_order_law_predicts_the_paper_table_better_than_g_star() -> None:
    t = table_comparison()
    assert [r["G_exact"] for r in t["rows"]] == [7, 11, 51, 9, 14, 61, 22, 36, 144, 42, 69, 273]
    assert [r["G_second_order"] for r in t["rows"]] == [6, 11, 51, 7, 13, 61, 18, 32, 143, 33, 60, 272]
    assert t["exact_matches_first_order"] == 0 and t["exact_matches_second_order"] == 3
    assert t["mean_abs_error_second_order"] < t["mean_abs_error_first_order"]
    assert t["second_order_better"] is True


def test_prove_all_filters_by_name_or_title() -> None:
    assert [r.name for r in prove_all("T2")] == ["T2"]
    assert [t.name for t in select("bessel")] == ["G2"]
    assert select("no such theorem") == []
    assert len(select(None)) == len(THEOREMS)


# --- CLI --------------------------------------------------------------------------------------
def test_cli_prove_json_has_the_documented_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prove", "-k", "T2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"all_proved", "seconds", "theorems"}
    assert out["all_proved"] is True and isinstance(out["seconds"], float)
    (t,) = out["theorems"]
    assert set(t) == {"name", "paper_ref", "statement", "status", "method", "seconds"}
    assert t["name"] == "T2" and t["status"] == "proved" and t["method"] == "symbolic"


def test_cli_prove_prints_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prove", "-k", "Bessel"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^G2\s+Bessel.*proved", out, re.M)
    assert "1/1 proved" in out


def test_cli_prove_with_a_selection_that_matches_nothing_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prove", "-k", "zzz"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no theorem matches" in err


def test_cli_prove_exits_1_when_a_theorem_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = Theorem(
        "X1",
        "false",
        "1 = 2",
        "none",
        "none",
        lambda f: [Claim("1 = 2", sp.Integer(1), sp.Integer(2))],
        lambda f: sp.Eq(1, 2, evaluate=False),
    )
    monkeypatch.setattr("grpo_identity.proofs.select", lambda s=None: [bad])
    assert main(["prove", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["all_proved"] is False and out["theorems"][0]["status"] == "failed"


# --- every ingredient a proof reads from the formulas can break it -------------------------------
FORMULA_FUNCTIONS = [name for name in F.__all__ if inspect.isfunction(getattr(F, name))]


def _wrapped(name: str, calls: set[str], factor: sp.Expr = sp.Integer(1)):  # type: ignore[no-untyped-def]
    fn = getattr(F, name)

    def wrapped(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.add(name)
        return fn(*args, **kwargs) * factor

    return wrapped


@pytest.mark.slow
@pytest.mark.parametrize("theorem", FAST, ids=lambda t: t.name)
def test_every_formula_a_theorem_reads_is_checked_by_it(theorem: Theorem) -> None:
    """Scaling any formula the proof reads by 11/10 must make it fail: no ingredient is decorative."""
    read = theorem.reads() & set(FORMULA_FUNCTIONS)
    assert read, f"{theorem.name} reads no formula"
    still_proved = []
    for name in sorted(read):
        scaled = {name: _wrapped(name, set(), sp.Rational(11, 10))}
        if theorem.prove(perturb=scaled, first_failure=True).status != "failed":
            still_proved.append(name)
    assert still_proved == [], f"{theorem.name} is still proved with {still_proved} scaled by 11/10"


def test_an_rloo_coefficient_wrong_by_a_common_factor_fails_t7() -> None:
    r = by_name("T7").prove(
        perturb={"update_coefficient": lambda **kw: sp.Rational(11, 10) * F.update_coefficient(**kw)}
    )
    assert r.status == "failed" and r.residual is not None and r.residual != 0


def test_t13_reads_sigma_and_the_expected_update_from_the_formulas() -> None:
    assert by_name("T13").prove(perturb={"sigma": _sigma_inflated}).status == "failed"
    assert (
        by_name("T13").prove(perturb={"expected_update": lambda G=F.G, p=F.p: 2 * F.expected_update(G, p)}).status
        == "failed"
    )


def _expected_update_over_all_k(G=F.G, p=F.p):  # type: ignore[no-untyped-def]
    """E[g] written as the sum over k = 0..G: equal to Proposition 2's sum, since sigma = 0 at both ends."""
    return sp.Sum(sp.binomial(G, F.k) * p**F.k * (1 - p) ** (G - F.k) * F.sigma(F.k, G), (F.k, 0, G))


def test_t10_proves_the_true_rewrite_of_the_expected_update_as_a_sum_over_k_0_to_g() -> None:
    assert by_name("T10").prove(perturb={"expected_update": _expected_update_over_all_k}).status == "proved"
    wrong = by_name("T10").prove(
        perturb={"expected_update": lambda G=F.G, p=F.p: _expected_update_over_all_k(G, p) * sp.Rational(11, 10)}
    )
    assert wrong.status == "failed" and wrong.residual is not None


def test_t10_derives_the_expected_update_instead_of_reading_sigma() -> None:
    assert "sigma" not in by_name("T10").reads()
    assert {"expected_update", "expected_score_gap"} <= by_name("T10").reads()


def test_a_perturbation_of_a_formula_the_theorem_does_not_read_is_an_error() -> None:
    with pytest.raises(ValueError, match="T1 does not read 'expected_update'"):
        by_name("T1").prove(perturb={"expected_update": F.expected_update})


def test_overriding_the_dials_centred_reward_reaches_t6() -> None:
    def loo_everywhere(centre, k, G):  # type: ignore[no-untyped-def]
        return F._centred_correct("loo", k, G)

    assert "_centred_correct" in by_name("T6").reads()
    assert by_name("T6").prove(perturb={"_centred_correct": loo_everywhere}).status == "failed"


def test_a_theorem_is_only_as_strong_as_its_weakest_claim() -> None:
    x = sp.Symbol("x", real=True)
    claims = [Claim("x = x", x, x), Claim("interval", "i", kind="certified", ok=True, value="[1, 2]")]
    assert check_claims("c", claims).method == "certified numeric"
    assert (
        check_claims("n", [*claims, Claim("floats", "f", kind="numeric", ok=True, value=1.0)]).method
        == "numeric evidence"
    )
    assert check_claims("s", claims[:1]).method == "symbolic"


def test_t12_no_longer_promises_the_exact_fidelity_at_g_star() -> None:
    t = by_name("T12")
    assert "not a guarantee" in t.statement
    assert by_name("T12").prove(perturb={"attenuation_second_order": F.attenuation_first_order}).status == "failed"


def test_t14_certifies_the_exact_table_and_the_fidelity_where_ceil_g_star_undershoots() -> None:
    r = by_name("T14").prove()
    cells = {(c["p"], c["eps"]): c for c in r.details["cells"]}
    assert [c["G_exact"] for c in r.details["cells"]] == [7, 11, 51, 9, 14, 61, 22, 36, 144, 42, 69, 273]
    for (pv, e), printed in {(0.5, 0.1): "0.862", (0.05, 0.1): "0.827", (0.05, 0.01): "0.9896"}.items():
        assert cells[(pv, e)]["phi_at_ceil_G_star"].startswith("[" + printed), cells[(pv, e)]


def test_t14_fails_when_the_table_is_off_by_one() -> None:
    import grpo_identity.proofs.table as table

    shifted = tuple((p, e, exact + 1, law) for p, e, exact, law in table.CELLS)
    try:
        table.CELLS, saved = shifted, table.CELLS
        assert by_name("T14").prove().status == "failed"
    finally:
        table.CELLS = saved


def test_g7_fails_when_the_incorrect_side_of_the_score_gap_is_dropped_in_the_enumeration() -> None:
    from grpo_identity.proofs.policy import _g7_enumerated

    claims = _g7_enumerated(Formulas({"expected_score_gap": lambda p=F.p, grad_p=1: grad_p / p}))
    assert check_claims("G7", claims).status == "failed"


@pytest.mark.slow
def test_t11_checks_the_papers_fidelities_with_the_formulas_fidelity() -> None:
    from grpo_identity.proofs.attenuation import _t11_numeric

    claims, _ = _t11_numeric(Formulas({"fidelity": lambda G=F.G, p=F.p: F.fidelity(G, p) * sp.Rational(11, 10)}))
    failed = [c.label for c in claims if not c.ok]
    assert any("0.9278" in label for label in failed) and any("0.539" in label for label in failed)


# --- G6 models the clip and the KL term, and is specific to the first on-policy step -------------
def test_g6_gradient_on_policy_is_the_advantage_weighted_score() -> None:
    from grpo_identity.proofs.beyond import _A, _theta, answer_objective, gradient_at_ratio

    ell = sp.Function("ell")
    score = sp.Derivative(ell(_theta), _theta)
    assert check_equal(gradient_at_ratio(answer_objective(ell, _A), ell, 0), _A * score).status == "proved"


def test_g6_fails_off_policy_where_the_clip_is_active() -> None:
    """At ratio 2 with clip 0.2 and A > 0 the surrogate is flat: only the KL gradient remains."""
    from grpo_identity.proofs.beyond import _beta, _clip, _theta, answer_objective, gradient_at_ratio

    ell = sp.Function("ell")
    score = sp.Derivative(ell(_theta), _theta)
    grad = gradient_at_ratio(answer_objective(ell, 1), ell, sp.log(2)).subs(_clip, sp.Rational(1, 5))
    r = check_equal(grad, 1 * score)
    assert r.status == "failed" and r.residual != 0
    assert check_equal(grad, -_beta * score / 2).status == "proved"  # k3: (1 − ρ)·score with ρ = 1/2


def test_g6_kl_claim_fails_with_the_k1_estimator() -> None:
    """With KL estimated by log(π/π_ref) its gradient at the first step is the score, not 0."""
    from grpo_identity.proofs.beyond import _beta, _theta, answer_objective, gradient_at_ratio

    ell = sp.Function("ell")
    score = sp.Derivative(ell(_theta), _theta)
    k1 = lambda log_rho: -log_rho  # noqa: E731  log(π_θ/π_ref) = −log ρ
    grad = gradient_at_ratio(answer_objective(ell, 0, kl=k1), ell, 0)
    r = check_equal(grad, 0)
    assert r.status == "failed"
    assert check_equal(grad, -_beta * score).status == "proved"


def test_cli_prove_reports_whether_the_second_order_law_predicts_the_table_better(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    table = {
        "rows": [{}] * 12,
        "exact_matches_first_order": 0,
        "exact_matches_second_order": 3,
        "mean_abs_error_first_order": 5.92,
        "mean_abs_error_second_order": 2.67,
        "second_order_better": True,
    }
    t = Theorem(
        "T11",
        "attenuation",
        "s",
        "Corollary 1",
        "none",
        lambda f: [Claim("1 = 1", sp.Integer(1), sp.Integer(1))],
        lambda f: sp.Eq(1, 1, evaluate=False),
        extra=lambda f: ([], {"group_size_table": table}),
    )
    monkeypatch.setattr("grpo_identity.proofs.select", lambda s=None: [t])
    assert main(["prove"]) == 0
    out = capsys.readouterr().out
    assert "second-order law is better than G*: 3/12 exact vs 0/12, mean |error| 2.67 vs 5.92" in out


# --- G9: the identity for any rewards -------------------------------------------------------------
def test_g9_proves_the_any_reward_identity_for_symbolic_g_with_its_corollaries() -> None:
    r = by_name("G9").prove()
    claims = {c["claim"]: c for c in r.details["claims"]}
    assert r.status == "proved" and r.method == "symbolic"
    for word in ("any rewards", "GRPO", "Dr. GRPO", "RLOO", "DAPO", "binary rewards: beta_hat"):
        assert any(word in label and c["holds"] for label, c in claims.items()), word


def test_a_binary_only_sigma_fails_g9_on_any_rewards_yet_holds_on_binary_ones() -> None:
    r = by_name("G9").prove(perturb=PERTURBATIONS["G9"])
    holds = {c["claim"]: c["holds"] for c in r.details["claims"]}
    assert r.status == "failed"
    identity = next(claim for claim in holds if claim.startswith("(1/G) sum (R_i - Rbar) s_i = sigma_R^2 beta_hat"))
    assert not holds[identity]
    assert holds["binary rewards: sigma_R = sigma"]  # the binary formula is right where it was made for


def test_linear_sums_splits_a_sum_and_takes_out_the_factors_free_of_its_index() -> None:
    from grpo_identity.proofs.rewards import linear_sums

    i = sp.Symbol("i", integer=True, positive=True)
    x = sp.IndexedBase("x")
    got = linear_sums(sp.Sum((x[i] - sp.Sum(x[i], (i, 1, F.G)) / F.G) * 3, (i, 1, F.G)))
    assert got == 0
    assert linear_sums(sp.Sum(F.G * x[i] ** 2, (i, 2, F.G))) == F.G * sp.Sum(x[i] ** 2, (i, 2, F.G))


# --- G10: off-policy steps --------------------------------------------------------------------------
def test_g10_proves_the_clip_the_group_gspo_and_the_kl_parts_symbolically() -> None:
    r = by_name("G10").prove()
    labels = [c["claim"] for c in r.details["claims"]]
    assert r.status == "proved" and r.method == "symbolic"
    assert sum("d/dtheta min(rA, clip(r)A) = w A" in c for c in labels) == 6  # the six open regions
    assert sum(c.startswith("GSPO, s in") for c in labels) == 6
    for word in ("(clipped)", "GRPO: (1/G) sum A_i s~_i = sigma", "Dr. GRPO", "silent group", "KL3", "pi = pi_ref"):
        assert any(word in c for c in labels), word


def test_a_token_weight_without_the_clip_mask_fails_g10_exactly_where_tokens_are_clipped() -> None:
    r = by_name("G10").prove(perturb=PERTURBATIONS["G10"])
    failed = [c["claim"] for c in r.details["claims"] if not c["holds"]]
    assert r.status == "failed" and r.residual is not None and r.residual != 0
    assert failed and all("clipped" in c or c.endswith("w = 0") or "clip mask" in c for c in failed), failed
    assert not any(c.startswith("A > 0, 1 - eps_low < rho") for c in failed)  # w = rho where nothing is clipped


def _clip_wrong_side(  # type: ignore[no-untyped-def]
    ratio=F.ratio, advantage=F.advantage, eps_low=F.eps_low, eps_high=F.eps_high
):
    """The mask of Â's other sign: a positive advantage clipped below 1 − ε_low, a negative one above 1 + ε_high."""
    clipped = sp.Or(sp.And(advantage > 0, ratio < 1 - eps_low), sp.And(advantage < 0, ratio > 1 + eps_high))
    return sp.Piecewise((0, clipped), (ratio, True))


def test_a_clip_mask_on_the_wrong_side_fails_the_token_claims_of_g10() -> None:
    from grpo_identity.proofs.offpolicy import _token_clip

    r = check_claims("G10", _token_clip(Formulas({"token_weight": _clip_wrong_side})))
    assert r.status == "failed" and r.residual is not None and r.residual != 0
    assert check_claims("G10", _token_clip(Formulas())).status == "proved"


def test_a_ratio_placed_in_no_region_leaves_the_clip_undecided_and_is_refused() -> None:
    from grpo_identity.proofs.offpolicy import decide

    # ρ itself (positive, nothing more): the condition ρ > 1 + ε_high is not decided, the Piecewise stays
    w = decide(F.token_weight(F.ratio, 1, F.eps_low, F.eps_high))
    assert w.has(sp.Piecewise)
    assert check_equal(w, F.ratio).status == "failed" and check_equal(w, 0).status == "failed"


def test_the_gspo_weight_is_the_sequence_ratio_not_the_token_ratio() -> None:
    from grpo_identity.proofs.offpolicy import _u, _v, gspo_token_gradient, x

    grad = gspo_token_gradient(Formulas(), F.advantage, clip=False)  # d/dx_u of sum_t s A, L = u + v
    s = F.sequence_ratio(x, _u + _v)
    assert check_equal(grad, s * F.advantage).status == "proved"
    wrong = check_equal(grad, sp.exp(x[_u]) * F.advantage)  # the token ratio rho_u as GSPO's weight
    assert wrong.status == "failed" and wrong.residual != 0


def test_a_sequence_ratio_from_the_summed_log_ratios_gives_l_times_the_weight() -> None:
    from grpo_identity.proofs.offpolicy import _t, _u, _v, gspo_token_gradient, x

    def summed(log_ratio=F.log_ratio, L=F.L):  # type: ignore[no-untyped-def]
        return sp.exp(sp.Sum(log_ratio[_t], (_t, 1, L)))  # exp of the sum: no 1/L

    f = Formulas({"sequence_ratio": summed})
    grad = gspo_token_gradient(f, F.advantage, clip=False)
    s = summed(x, _u + _v)
    r = check_equal(grad, s * F.advantage)
    assert r.status == "failed"
    assert check_equal(grad, (_u + _v) * s * F.advantage).status == "proved"


def test_a_kl_gradient_with_the_wrong_sign_fails_g10_in_its_kl_claims_only() -> None:
    r = by_name("G10").prove(
        perturb={"kl_gradient_weight": lambda ref_ratio=F.ref_ratio, beta=F.beta: beta * (1 - ref_ratio)}
    )
    failed = [c["claim"] for c in r.details["claims"] if not c["holds"]]
    assert r.status == "failed" and r.residual is not None and r.residual != 0
    assert failed and all("KL3" in c or "pi_ref" in c or "silent answer" in c for c in failed), failed


def test_the_k1_estimator_does_not_have_the_k3_gradient() -> None:
    """KL estimated by log(π/π_ref) (k1) has the gradient −β·∇log π, not k3's β(π_ref/π − 1)·∇log π."""
    from grpo_identity.proofs.offpolicy import _ell_ref, ell, score, theta

    k1 = -(_ell_ref - ell(theta))  # log(π_θ/π_ref)
    grad = sp.diff(-F.beta * k1, theta)
    assert check_equal(grad, F.kl_gradient_weight(sp.exp(_ell_ref - ell(theta)), F.beta) * score).status == "failed"
    assert check_equal(grad, -F.beta * score).status == "proved"
