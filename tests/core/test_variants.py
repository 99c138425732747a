"""The named variants (``grpo_identity.variants``): each reference computation against numbers
worked by hand from its definition, its stated c(k, G) against its own advantages, the departures
it declares against the audit's properties, and the name lookup."""

from __future__ import annotations

import math

import numpy as np
import pytest

from grpo_identity import dial as D
from grpo_identity.variants import DEPARTURES, VARIANTS, variant


def test_maxrl_divides_the_centred_rewards_by_the_group_mean_and_leaves_all_wrong_groups_at_zero():
    R = np.array([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    A = VARIANTS["maxrl"].advantages(R)
    assert np.allclose(A[0], [0.75 / 0.25, -1, -1, -1]) and np.allclose(A[1], [1, 1, -1, -1])
    assert np.array_equal(A[2], np.zeros(4))


@pytest.mark.parametrize("G", [2, 3, 4, 7, 16])
def test_the_stated_coefficient_is_k_over_g_times_the_correct_answers_advantage(G):
    for k in range(1, G):
        R = np.r_[np.ones(k), np.zeros(G - k)].reshape(1, G)
        A = VARIANTS["maxrl"].advantages(R)[0]
        assert math.isclose(VARIANTS["maxrl"].coefficient(k, G), k / G * A[0], rel_tol=1e-12)
        opo = VARIANTS["opo"].advantages(R)[0]  # equal lengths: Dr. GRPO, c = σ²
        assert math.isclose(VARIANTS["opo"].coefficient(k, G), k / G * opo[0], rel_tol=1e-12)


def test_opo_is_dr_grpo_at_equal_lengths_and_zero_sum_with_token_weights_otherwise():
    R = np.array([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    assert np.allclose(VARIANTS["opo"].advantages(R), D.advantages(R, dial=D.DR_GRPO))
    L = np.array([[2.0, 1.0, 1.0], [1.0, 1.0, 6.0]])
    A = VARIANTS["opo"].advantages(R, L)
    assert np.allclose(A[0], [0.5, -0.5, -0.5])  # baseline (2·1)/4
    assert np.allclose((L * A).sum(1), 0) and not np.allclose(A.sum(1), 0)


def test_gpg_scales_dr_grpo_by_the_batch_over_its_nonzero_rewards():
    R = np.array([[1.0, 0.0], [0.0, 0.0]])
    assert np.allclose(VARIANTS["gpg"].advantages(R), [[2.0, -2.0], [0.0, 0.0]])  # α = 4/1
    assert np.allclose(VARIANTS["gpg"].advantages(R[:1]), [[1.0, -1.0]])  # alone: α = 2/1


def test_pass_at_k_moves_only_a_unique_best_answer_by_its_lead_over_the_std():
    R = np.array([[0.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.2, 0.9, 0.5]])
    A = VARIANTS["grpo_passk"].advantages(R)
    assert np.allclose(A[0], [0, 1 / (np.std([0, 1, 0], ddof=1) + 1e-6), 0])
    assert np.array_equal(A[1], np.zeros(3))  # two best answers: a lead of 0
    assert np.allclose(A[2], [0, 0.4 / (np.std([0.2, 0.9, 0.5], ddof=1) + 1e-6), 0])


@pytest.mark.parametrize(
    "name, form, ddof",
    [("reinforce_plus_plus_baseline", "verl", 1), ("gdpo", "verl", 1), ("reinforce_plus_plus_baseline", "OpenRLHF", 0)],
)
def test_the_whitened_variants_have_token_mean_zero_and_token_variance_one(name, form, ddof):
    R = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.3, 0.8, 0.1]])
    L = np.array([[3.0, 1.0, 2.0], [5.0, 1.0, 1.0], [2.0, 2.0, 4.0]])
    A = VARIANTS[name].advantages(R, L, form)
    mean = (L * A).sum() / L.sum()
    assert abs(mean) < 1e-12
    assert math.isclose((L * (A - mean) ** 2).sum() / (L.sum() - ddof), 1.0, rel_tol=1e-6)
    assert not np.allclose(A[1], 0)  # the silent group moves: the token-weighted shift


def test_every_departure_names_properties_and_every_variant_cites_a_source():
    for v in VARIANTS.values():
        assert v.citation and v.stands and v.forms
        assert all(d in DEPARTURES for d in v.departs)
        assert (v.coefficient is None) or v.coefficient_text
    assert VARIANTS["gpg"].departs_from("groups_independent") and not VARIANTS["maxrl"].departs_from(
        "zero_sum_per_group"
    )


def test_a_variant_is_found_by_the_names_people_write():
    assert variant("REINFORCE++-baseline").name == "reinforce_plus_plus_baseline"
    assert variant("GRPO-passk").name == "grpo_passk"
    with pytest.raises(ValueError, match="choose from maxrl"):
        variant("grpo")


def test_pkpo_gives_a_correct_answer_its_share_of_the_pass_at_k_subsets_and_an_incorrect_one_zero():
    R = np.array([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.5, 1.0, 0.0, 0.0]])
    A = VARIANTS["pkpo"].advantages(R, form="K=2")
    assert np.allclose(A[0], [3 / 6, 0, 0, 0]) and np.allclose(A[1], [2 / 6, 2 / 6, 0, 0])  # C(G−k, 1)/C(4, 2)
    assert np.isnan(A[2]).all()  # not binary: outside the definition
    assert np.isnan(VARIANTS["pkpo"].advantages(R[:, :2], form="K=3")).all()  # G < K


def test_gpg_as_its_paper_counts_the_answers_of_live_groups_not_the_nonzero_rewards():
    R = np.array([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    assert np.allclose(VARIANTS["gpg"].advantages(R, form="paper"), [[1, 1, -1, -1], [0, 0, 0, 0]])  # α = 8/4
    assert np.allclose(VARIANTS["gpg"].advantages(R, form="verl"), [[2, 2, -2, -2], [0, 0, 0, 0]])  # α = 8/2


def test_lite_ppo_and_trls_normalize_then_sum_divide_zero_sum_groups_by_one_batch_std():
    R = np.array([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    lite = VARIANTS["lite_ppo"].advantages(R)
    centred = R - R.mean(1, keepdims=True)
    assert np.allclose(lite, centred / (np.sqrt((centred**2).sum() / 8) + 1e-5))
    trl = VARIANTS["gdpo"].advantages(R, form="TRL normalize_then_sum")
    assert np.allclose(trl.sum(1), 0, atol=1e-12) and np.abs(trl[2]).max() < 1e-12  # the batch mean: rounding
    assert math.isclose(trl.std(ddof=1), 1.0, rel_tol=1e-3)


def test_token_grpo_centres_and_scales_by_the_groups_tokens():
    R, L = np.array([[1.0, 0.0]]), np.array([[3.0, 1.0]])
    A = VARIANTS["token_grpo"].advantages(R, L)
    mean, std = 0.75, math.sqrt((3 * 0.25**2 + 0.75**2) / 3)  # 4 tokens, Bessel's over them
    assert np.allclose(A, [[0.25 / (std + 1e-5), -0.75 / (std + 1e-5)]])
    assert math.isclose(float((L * A).sum()), 0.0, abs_tol=1e-12) and mean == 0.75
