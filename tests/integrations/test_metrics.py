"""step_metrics and SolveRateTracker: every metric against a value computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from grpo_identity import dial as D
from grpo_identity.closed_forms import group_size_exact
from grpo_identity.integrations.metrics import SolveRateTracker, band_of, step_metrics


def metrics(rewards, G, dial=D.GRPO, advantages=None, **kw):
    r = np.asarray(rewards, dtype=np.float64)
    a = D.advantages(r, G, dial) if advantages is None else np.asarray(advantages)
    return step_metrics(r, a, G, dial, **kw)


def test_the_silent_fraction_counts_groups_whose_rewards_are_all_equal():
    m = metrics([1, 0, 1, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0.5, 0.5, 0.5, 0.5], 4).metrics
    assert m["identity/silent_frac"] == 0.75 and m["identity/groups"] == 4


def test_the_prediction_uses_only_what_was_known_before_the_step():
    tracker = SolveRateTracker(prior_rollouts=2)
    tracker.update(["x", "z"], np.array([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]]))  # x: 4 of 4, z: 0 of 4 so far
    m = metrics([1, 0, 0, 0, 0, 0, 0, 0], 4, prompts=["x", "y"], tracker=tracker).metrics
    mean = 4 / 8  # every rollout seen before this step, not this step's own rewards (1/8)
    px, py = (4 + 2 * mean) / (4 + 2), mean  # y is new: the mean seen so far
    want = ((px**4 + (1 - px) ** 4) + (py**4 + (1 - py) ** 4)) / 2
    assert m["identity/silent_frac_pred"] == pytest.approx(want, rel=1e-12)
    assert tracker.counts["x"] == [8.0, 5.0] and tracker.counts["y"] == [4.0, 0.0]


def test_the_coefficient_deviation_is_bessels_factor_when_trls_advantages_meet_the_papers_grpo():
    r = np.array([1.0, 0, 0, 0, 1, 1, 0, 0])
    m = metrics(r, 4, D.GRPO, advantages=D.advantages(r, 4, D.TRL)).metrics
    dev = []
    for k in (1, 2):
        s = math.sqrt(k * (4 - k)) / 4
        dev.append(abs((k / 4) * (1 - k / 4) / (s * math.sqrt(4 / 3) + 1e-4) - s))
    assert m["identity/coef_dev_max"] == pytest.approx(max(dev), rel=1e-12)
    assert m["identity/coef_dev_mean"] == pytest.approx(sum(dev) / 2, rel=1e-12)
    assert m["identity/departures"] == 2


def test_a_silent_group_with_any_non_zero_advantage_departs_and_is_described():
    r = np.full(8, 0.7)
    a = np.zeros(8)
    a[3] = 6e-4
    rep = metrics(r, 8, D.TRL, advantages=a)
    assert rep.metrics["identity/departures"] == 1 and rep.metrics["identity/adv_dev_max"] == 6e-4
    assert rep.departure is not None and rep.departure.startswith("a silent group of rewards [0.7, 0.7")
    assert rep.departure.endswith("has advantages [0, 0, 0, 0.0006, 0, 0, 0, 0]")


def test_float32_rounding_of_a_live_group_is_no_departure_but_a_wrong_sign_is():
    r = np.array([1.0, 0, 0, 0])
    a32 = D.advantages(r.astype(np.float32), 4, D.TRL)
    assert metrics(r, 4, D.TRL, advantages=a32).metrics["identity/departures"] == 0
    assert metrics(r, 4, D.TRL, advantages=-a32).metrics["identity/departures"] == 1


def test_mass_shares_weigh_each_group_by_its_mean_absolute_advantage_in_its_difficulty_band():
    # three prompts seen before: p̂ ≈ 0.05 (extreme), 0.5 (medium), 0.3 (intermediate)
    tracker = SolveRateTracker(prior_rollouts=0)
    for key, k in (("hard", 5), ("mid", 50), ("inter", 30)):
        tracker.update([key], np.array([[1.0] * k + [0.0] * (100 - k)]))
    r = np.array([1.0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 0, 0])
    a = D.advantages(r, 4, D.GRPO)
    m = metrics(r, 4, prompts=["hard", "mid", "inter"], tracker=tracker).metrics
    mass = np.abs(a).reshape(3, 4).mean(1)  # (3,)
    assert m["identity/mass_share_extreme"] == pytest.approx(mass[0] / mass.sum(), rel=1e-12)
    assert m["identity/mass_share_medium"] == pytest.approx(mass[1] / mass.sum(), rel=1e-12)


def test_the_recommended_g_of_a_batch_of_one_prompt_is_the_group_size_laws_exact_g():
    tracker = SolveRateTracker(prior_rollouts=2)
    tracker.update(["x"], np.array([[1.0] + [0.0] * 9]))
    m = metrics([1, 0, 0, 0], 4, prompts=["x"], tracker=tracker, eps=0.05).metrics
    # with this step's group, shrunk toward its mean 1/4: p̂ = (1 + 1 + 2/4)/(10 + 4 + 2)
    assert m["identity/recommended_G"] == group_size_exact(0.05, 2.5 / 16)
    assert set(k for k in m if k.startswith("identity/fidelity/")) == {"identity/fidelity/intermediate"}


def test_rewards_outside_zero_one_keep_the_audit_and_drop_the_solve_rate_metrics():
    m = metrics([2.0, -1.0, 0.5, 0.5], 2).metrics
    assert "identity/silent_frac_pred" not in m and "identity/recommended_G" not in m
    assert m["identity/silent_frac"] == 0.5 and m["identity/departures"] == 0


def test_bands_split_the_solve_rate_at_the_papers_thresholds():
    assert band_of([0.0999, 0.1, 0.3999, 0.4, 0.6, 0.6001, 0.9, 0.9001]).tolist() == [
        "extreme",
        "intermediate",
        "intermediate",
        "medium",
        "medium",
        "intermediate",
        "intermediate",
        "extreme",
    ]


def test_prompt_keys_must_match_the_groups():
    with pytest.raises(ValueError, match="2 prompt keys for 1 groups"):
        metrics([1, 0, 0, 0], 4, prompts=["a", "b"])
