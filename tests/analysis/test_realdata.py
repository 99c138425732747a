"""Real-data numbers on ten problems whose answers are worked out by hand (PAPER claim 8)."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from grpo_identity.analysis.realdata import gradient_weights, mass_share, subsampled_silent_rate, summarise

# ten problems, k correct of 64 logged rollouts
K = [0, 0, 64, 64, 16, 32, 32, 48, 4, 60]
RATES = [k / 64 for k in K]


def _silent_with_replacement(G: int) -> float:
    """Independent reference: mean of p^G + (1-p)^G in exact rationals."""
    ps = [Fraction(k, 64) for k in K]
    return float(sum(p**G + (1 - p) ** G for p in ps) / len(ps))


def _silent_without_replacement(G: int) -> float:
    """Independent reference: [C(k,G) + C(64-k,G)] / C(64,G) with exact integers."""
    return float(sum(Fraction(math.comb(k, G) + math.comb(64 - k, G), math.comb(64, G)) for k in K) / len(K))


def test_fractions_at_zero_and_one_count_the_problems():
    s = summarise(RATES)
    assert s["n"] == 10 and s["frac_p0"] == 0.2 and s["frac_p1"] == 0.2


def test_closed_form_silent_fraction_matches_exact_rationals():
    s = summarise(RATES)
    for G in (4, 8, 16, 32, 64):
        assert s["silent_closed_form"][str(G)] == pytest.approx(_silent_with_replacement(G), abs=1e-15)


def test_subsampled_silent_fraction_matches_exact_binomial_coefficients():
    s = summarise(RATES)
    assert set(s["silent_subsampled"]) == {"4", "8", "16"}
    for G in (4, 8, 16):
        assert s["silent_subsampled"][str(G)] == pytest.approx(_silent_without_replacement(G), rel=1e-13)


def test_subsampled_silent_rate_matches_enumerating_every_subset():
    n, G = 9, 3
    for k in range(n + 1):
        answers = [1] * k + [0] * (n - k)
        subsets = list(itertools.combinations(answers, G))
        silent = sum(1 for sub in subsets if len(set(sub)) == 1) / len(subsets)
        assert subsampled_silent_rate(G, k, n) == pytest.approx(silent, rel=1e-12, abs=1e-15)


def test_drawing_without_replacement_is_never_more_silent_than_with_replacement():
    s = summarise(RATES)
    for G in ("4", "8", "16"):
        assert s["silent_subsampled"][G] <= s["silent_closed_form"][G]


def test_subsampling_every_rollout_is_silent_only_at_zero_or_n():
    np.testing.assert_array_equal(subsampled_silent_rate(64, np.arange(65), 64), [1.0] + [0.0] * 63 + [1.0])


def test_subsampled_rate_stays_finite_for_many_rollouts():
    # C(10000, 500) overflows a float; the log-space form does not
    assert subsampled_silent_rate(500, 10_000, 10_000) == 1.0
    assert subsampled_silent_rate(500, 9_000, 10_000) == pytest.approx(
        math.exp(sum(math.log((9_000 - i) / (10_000 - i)) for i in range(500))), rel=1e-9
    )


def test_mass_shares_match_the_hand_computation():
    # Dr. GRPO weights p(1-p): k=16,48: 3/16; k=32: 1/4 (twice); k=4,60: 15/256; k=0,64: 0.
    total = 2 * Fraction(3, 16) + 2 * Fraction(1, 4) + 2 * Fraction(15, 256)
    s = summarise(RATES)
    assert s["mass_share"]["dr_grpo"]["extreme"] == pytest.approx(float(2 * Fraction(15, 256) / total))  # 15/127
    assert s["mass_share"]["dr_grpo"]["medium"] == pytest.approx(float(2 * Fraction(1, 4) / total))  # 64/127
    # GRPO weights sqrt(p(1-p)): sqrt(3)/4, 1/2, sqrt(15)/16
    g_total = 2 * math.sqrt(3) / 4 + 2 * 0.5 + 2 * math.sqrt(15) / 16
    assert s["mass_share"]["grpo"]["extreme"] == pytest.approx(2 * math.sqrt(15) / 16 / g_total)
    assert s["mass_share"]["grpo"]["medium"] == pytest.approx(1.0 / g_total)


def test_grpo_puts_more_mass_on_extreme_prompts_than_dr_grpo():
    ms = summarise(RATES)["mass_share"]
    assert ms["grpo"]["extreme"] > ms["dr_grpo"]["extreme"] and ms["grpo"]["medium"] < ms["dr_grpo"]["medium"]


def test_finite_g_weights_are_the_expected_update_and_expected_sigma_squared():
    w = gradient_weights([0.5], 2)
    assert w["grpo"][0] == pytest.approx(0.5 * 0.5)  # E[g] at G=2, p=1/2: P(k=1)·σ(1) = 1/2 · 1/2
    assert w["dr_grpo"][0] == pytest.approx(0.25 * 0.5)


def test_a_histogram_gives_the_same_summary_as_its_problems():
    from grpo_identity.analysis.solve_rates import from_histogram

    hist = from_histogram([0.0, 1.0, 0.25, 0.5, 0.75, 0.0625, 0.9375], [2, 2, 1, 2, 1, 1, 1])
    a, b = summarise(hist), summarise(RATES)
    for key in ("frac_p0", "frac_p1"):
        assert a[key] == b[key]
    assert a["silent_closed_form"] == pytest.approx(b["silent_closed_form"])
    assert a["mass_share"]["grpo"] == pytest.approx(b["mass_share"]["grpo"])


def test_rates_that_are_not_multiples_of_one_over_n_are_rejected_for_subsampling():
    with pytest.raises(ValueError, match="not multiples of 1/64"):
        summarise([0.3])


def test_mass_share_is_zero_without_mass():
    assert mass_share([0.0, 0.0], [True, False]) == 0.0


def test_extreme_is_strict_and_medium_is_inclusive_at_the_edges():
    from grpo_identity.analysis.realdata import is_extreme, is_medium

    p = np.array([0.0, 0.05, 0.1, 0.4, 0.5, 0.6, 0.9, 0.95, 1.0])
    assert is_extreme(p).tolist() == [True, True, False, False, False, False, False, True, True]
    assert is_medium(p).tolist() == [False, False, False, True, True, True, False, False, False]


def test_summary_of_tenths_with_ten_rollouts_by_hand():
    # p = 0.1, 0.4, 0.6, 0.9, 1.0: none extreme (edges are strict), 0.4 and 0.6 medium
    s = summarise([0.1, 0.4, 0.6, 0.9, 1.0], num_rollouts=10)
    assert s["frac_p1"] == 0.2 and s["mass_share"]["dr_grpo"]["extreme"] == 0.0
    assert s["mass_share"]["dr_grpo"]["medium"] == pytest.approx(0.48 / (0.09 + 0.24 + 0.24 + 0.09))
    # G = 4 of 10 without replacement: k=1 -> C(9,4)/C(10,4) = 126/210; k=4 -> (1 + 15)/210; k=10 -> 1
    want = (Fraction(126, 210) + Fraction(16, 210) + Fraction(16, 210) + Fraction(126, 210) + 1) / 5
    assert s["silent_subsampled"]["4"] == pytest.approx(float(want), rel=1e-13)


def test_subsampled_rate_is_the_exact_ratio_rounded_once():
    for G in (4, 8, 16):
        for k in range(65):
            exact = Fraction(math.comb(k, G) + math.comb(64 - k, G), math.comb(64, G))
            assert subsampled_silent_rate(G, k, 64) == float(exact)


# --- the shipped Big-Math histogram and bad input --------------------------------------------
def test_the_shipped_big_math_histogram_gives_the_papers_fourteen_numbers_at_its_printed_precision():
    from grpo_identity.analysis.solve_rates import big_math

    s = summarise(big_math())
    pct = lambda x, d: round(100 * x, d)  # noqa: E731
    # the paper's text (claim 8), typed here from the paper, not read from grpo_identity.paper
    assert (s["n"], pct(s["frac_p0"], 1), pct(s["frac_p1"], 1)) == (215_608, 4.0, 7.2)
    assert [pct(s["silent_closed_form"][g], 0) for g in ("4", "8", "16", "32", "64")] == [59, 44, 32, 23, 17]
    assert [pct(s["silent_subsampled"][g], 0) for g in ("4", "8", "16")] == [59, 43, 30]
    ms = s["mass_share"]
    assert (pct(ms["dr_grpo"]["extreme"], 1), pct(ms["grpo"]["extreme"], 1)) == (13.9, 24.7)
    assert (pct(ms["dr_grpo"]["medium"], 1), pct(ms["grpo"]["medium"], 1)) == (22.8, 17.5)
    assert s["off_grid_share"] == 0.0


@pytest.mark.parametrize("bad", [0, -3, True, 2.5, "64"])
def test_a_number_of_rollouts_below_one_or_not_an_integer_is_rejected_in_one_line(bad):
    with pytest.raises(ValueError, match=r"^num_rollouts must be an integer >= 1, got ") as e:
        summarise(RATES, num_rollouts=bad)
    assert "np." not in str(e.value)


def test_a_few_rates_off_the_grid_are_rounded_to_the_nearest_k_as_the_paper_does():
    on, off = [36 / 64] * 199, [5 / 9]  # 64·5/9 = 35.6: rounds to k = 36 (not down to 35)
    s = summarise(on + off)
    assert s["off_grid_share"] == pytest.approx(1 / 200)
    assert s["silent_subsampled"] == pytest.approx(summarise(on + [36 / 64])["silent_subsampled"], rel=1e-12)


def test_many_rates_off_the_grid_are_an_error_naming_the_share_as_a_plain_number():
    with pytest.raises(
        ValueError, match=r"2 % of the solve rates in array are not multiples of 1/64 \(e\.g\. 0\.3\)"
    ) as e:
        summarise([0.5] * 98 + [0.3] * 2)
    assert "np." not in str(e.value)
