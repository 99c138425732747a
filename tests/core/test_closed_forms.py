"""Closed forms reproduce the paper's numbers and stay finite and correct at the edges."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from grpo_identity import closed_forms as C
from grpo_identity import paper

PAPER_TABLE = paper.GROUP_SIZE_TABLE  # Corollary 2 as printed: p -> [(exact, G* rounded)] for 90 %, 95 %, 99 %


def test_group_size_table_reproduces_the_paper_exactly():
    rows = C.group_size_table()
    assert len(rows) == 12
    for row in rows:
        i = C.PAPER_TABLE_EPS.index(row["eps"])
        exact, law = PAPER_TABLE[row["p"]][i]
        assert row["G_exact"] == exact
        assert round(row["G_law"]) == law


def test_group_size_table_is_symmetric_in_p():
    for p in (0.3, 0.1, 0.05):
        for e in C.PAPER_TABLE_EPS:
            assert C.group_size_exact(e, p) == C.group_size_exact(e, 1 - p)


@pytest.mark.parametrize(("G", "p", "value"), [(G, p, v) for (G, p), v in paper.FIDELITY.items()])
def test_fidelity_matches_the_paper_to_four_decimals(G, p, value):
    assert round(C.fidelity(G, p), 4) == value


@pytest.mark.parametrize(("G", "p", "value"), [(G, p, v) for (G, p), v in paper.ATTENUATION_FIRST_ORDER.items()])
def test_first_order_law_at_the_paper_point_overestimates_fidelity(G, p, value):
    assert round(C.attenuation_first_order(G, p), 2) == value > round(C.fidelity(G, p), 2)


def test_difficulty_weight_and_penalty_match_the_paper():
    for p, w in paper.DIFFICULTY_WEIGHT.items():
        assert round(C.difficulty_weight(p), 1) == w
    ps = np.array(list(paper.DIFFICULTY_PENALTY))
    penalty = C.difficulty_weight(ps) ** 2 / 4
    assert np.round(penalty, 1).tolist() == list(paper.DIFFICULTY_PENALTY.values())


def test_g8_realises_93_percent_at_p_one_half():
    assert round(100 * C.fidelity(8, 0.5)) == 93


def test_group_size_exact_is_the_smallest_g_found_by_a_linear_scan():
    for p in (0.5, 0.2, 0.05):
        for e in (0.2, 0.1, 0.05):
            g = C.group_size_exact(e, p)
            scan = next(G for G in range(2, 2000) if C.fidelity(G, p) >= 1 - e)
            assert g == scan


def test_fidelity_increases_with_group_size_on_a_grid():
    for p in (0.01, 0.05, 0.2, 0.5, 0.8):
        phi = np.array([C.fidelity(G, p) for G in range(2, 400)])
        assert np.all(np.diff(phi) > 0)


def test_every_closed_form_is_finite_from_g_2_to_a_million_and_on_the_closed_interval():
    p = np.array([0.0, 1e-12, 1e-4, 0.05, 0.5, 0.95, 1 - 1e-9, 1.0])
    for G in (2, 3, 64, 1029, 1030, 1031, 10**4, 10**6):
        for f in (C.expected_update, C.fidelity, C.silent_rate, C.expected_sigma_sq):
            v = f(G, p)
            assert np.all(np.isfinite(v)), (f.__name__, G)
        eg = C.expected_update(G, p)
        assert eg[0] == eg[-1] == 0.0
        assert np.all(eg <= np.sqrt(p * (1 - p)) + 1e-15)  # Jensen: E[σ] ≤ σ(p)


def test_expected_update_tends_to_the_large_g_limit():
    for p in (0.05, 0.5):
        assert C.expected_update(10**6, p) == pytest.approx(np.sqrt(p * (1 - p)), rel=1e-4)


def test_vectorised_calls_equal_scalar_calls():
    ps = np.linspace(0, 1, 41)
    vec = C.expected_update(32, ps)
    assert vec.shape == ps.shape
    assert np.allclose(vec, [C.expected_update(32, float(p)) for p in ps], rtol=1e-14, atol=0)
    grid = C.expected_update(16, ps.reshape(41, 1))
    assert grid.shape == (41, 1)


def test_summary_contains_every_quantity():
    s = C.summary(8, 0.05)
    assert len(s["sigma_by_k"]) == 9
    assert [r["G_exact"] for r in s["group_size"]] == [42, 69, 273]
    assert s["silent_rate"] == pytest.approx(0.95**8 + 0.05**8)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: C.sigma(1, 1), "group size G must be an integer >= 2, got 1"),
        (lambda: C.expected_update(8.5, 0.5), "got 8.5"),
        (lambda: C.expected_update(8, 1.2), "p must be in \\[0, 1\\], got 1.2"),
        (lambda: C.fidelity(8, float("nan")), "got nan"),
        (lambda: C.group_size_law(0.0, 0.5), "eps must be > 0, got 0.0"),
        (lambda: C.group_size_law(-1, 0.5), "eps must be > 0"),
        (lambda: C.group_size_exact(0.1, 0.0), "p must be in \\(0, 1\\)"),
        (lambda: C.sigma(9, 8), "integer in \\[0, G=8\\], got 9"),
        (lambda: C.sigma(1.5, 8), "got 1.5"),
        (lambda: C.silent_rate(True, 0.5), "got True"),
        (lambda: C.group_size_law(0.1, 0.0), "p must be in \\(0, 1\\), got 0.0"),
        (lambda: C.group_size_exact(1.0, 0.5), "eps must be in \\(0, 1\\), got 1.0"),
        (lambda: C.subsampled_silent_rate(2, 0, 1), "number of rollouts n must be an integer >= 2, got 1"),
        (lambda: C.subsampled_silent_rate(8, 1, 4), "group size G=8 exceeds the 4 logged rollouts"),
        (lambda: C.subsampled_silent_rate(2, 6, 5), "integer in \\[0, n=5\\], got 6$"),
        (lambda: C.subsampled_silent_rate(2, -1, 5), "integer in \\[0, n=5\\], got -1$"),
        (lambda: C.subsampled_silent_rate(2, 1.5, 5), "integer in \\[0, n=5\\], got 1.5$"),
        (lambda: C.token_weight(float("nan"), 1.0, 0.2, 0.2), "ratio must be a finite number, got nan"),
        (lambda: C.clipped_surrogate(1.0, 1.0, 0.0, 0.2), "eps_low must be a positive number, got 0.0"),
        (lambda: C.sequence_ratio([]), "at least one token per answer"),
        (lambda: C.kl_gradient_weight(0.0, 0.04), "ref_ratio must be a positive number, got 0.0"),
    ],
)
def test_bad_input_raises_a_value_error_naming_the_value(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize(
    "G, k, n", [(1000, 100, 1100), (1000, 1000, 1100), (2, 1023, 1025), (2, 2, 1025), (64, 64, 2000), (64, 1936, 2000)]
)
def test_subsampled_silent_rate_above_1024_rollouts_counts_a_branch_with_exactly_G_answers(G, k, n):
    # k = G or n − k = G: one all-equal subset of G exists in that branch, C(G, G) = 1 (PAPER claim 8)
    exact = (math.comb(k, G) + math.comb(n - k, G)) / math.comb(n, G)
    got = C.subsampled_silent_rate(G, k, n)
    assert exact > 0 and abs(got - exact) <= 1e-10 * exact, (got, exact)


def test_subsampled_silent_rate_up_to_1024_rollouts_is_the_exact_ratio_rounded_once():
    # the documented contract of the exact-integer branch, at its last n
    n, G = 1024, 8
    for k in (0, 1, 7, 8, 9, 100, 512, 1015, 1016, 1017, 1024):
        exact = (math.comb(k, G) + math.comb(n - k, G)) / math.comb(n, G)  # int / int: one rounding
        assert C.subsampled_silent_rate(G, k, n) == exact, k


def test_closed_forms_at_p_0_and_1_return_their_limits_without_numpy_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a division by zero left to numpy would warn
        assert C.difficulty_weight(0.0) == C.difficulty_weight(1.0) == np.inf
        assert C.attenuation_first_order(8, 0.0) == C.attenuation_second_order(8, 1.0) == -np.inf
        assert C.fidelity(8, 0.0) == 0.0
        assert C.binomial_pmf(0, 8, 0.0) == C.binomial_pmf(8, 8, 1.0) == 1.0
        assert C.binomial_pmf(3, 8, 0.0) == C.binomial_pmf(3, 8, 1.0) == 0.0


@pytest.mark.parametrize("G, p", [(2, 0.5), (8, 0.1), (64, 0.03), (1000, 0.77)])
def test_second_order_law_equals_its_symbolic_definition(G, p):
    import sympy as sp

    from grpo_identity import formulas as F

    want = float(F.attenuation_second_order(sp.Integer(G), sp.Rational(str(p))))
    assert C.attenuation_second_order(G, p) == pytest.approx(want, rel=1e-13)


def test_summary_names_every_quantity_and_leaves_the_laws_out_at_p_0_and_1():
    keys = {
        "G",
        "p",
        "sigma_by_k",
        "silent_rate",
        "expected_update",
        "expected_sigma_sq",
        "fidelity",
        "attenuation_first_order",
        "difficulty_weight",
        "arcsine_objective",
        "group_size",
        "sigma_by_k_all",
    }
    inner = C.summary(8, 0.5)
    assert set(inner) == keys and set(inner["group_size"][0]) == {"eps", "G_exact", "G_law"}
    assert inner["sigma_by_k"][4] == {"k": 4, "sigma": 0.5}
    assert inner["sigma_by_k_all"] is True and len(inner["sigma_by_k"]) == 9  # every k at a small G
    assert inner["expected_update"] == C.expected_update(8, 0.5) and inner["fidelity"] == C.fidelity(8, 0.5)
    assert inner["attenuation_first_order"] == 0.9375 and inner["difficulty_weight"] == 2.0
    assert [r["G_law"] for r in inner["group_size"]] == [C.group_size_law(e, 0.5) for e in C.PAPER_TABLE_EPS]
    for p in (0.0, 1.0):
        edge = C.summary(8, p)
        assert edge["attenuation_first_order"] is None and edge["difficulty_weight"] is None
        assert all(r["G_exact"] is None and r["G_law"] is None for r in edge["group_size"])
        assert edge["silent_rate"] == 1.0 and edge["expected_update"] == 0.0
