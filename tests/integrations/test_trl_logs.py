"""The identity's prediction from a plain TRL log: lower bound, saturation model, cost table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_identity.closed_forms import group_size_exact, silent_rate
from grpo_identity.integrations import trl_logs as T

STATE = Path(__file__).parents[1] / "app" / "data" / "trl-1.16.0.trainer_state.json"


def test_the_lower_bound_at_g4_and_mean_reward_one_half_is_one_eighth():
    assert T.silent_lower_bound(4, 0.5) == 0.125  # 0.5^4 + 0.5^4


def test_the_saturated_share_matches_the_logged_fraction_on_average_and_is_clipped():
    # F = rho + (1 - rho) f  =>  rho = (F - f) / (1 - f): (0.5 - 0.125) / 0.875 = 3/7
    assert T.saturated_share([0.5], [0.125]) == pytest.approx(3 / 7)
    assert T.model_silent(4, 0.5, 3 / 7) == pytest.approx(0.5)
    assert T.saturated_share([0.0], [0.125]) == 0.0 and T.saturated_share([], []) is None
    assert T.saturated_share([1.0], [1.0]) is None


def test_only_training_entries_with_a_reward_are_steps():
    history = [
        {"step": 1, "reward": 0.5, "frac_reward_zero_std": 0.25, "reward_std": 0.5},
        {"step": 1, "eval_reward": 0.9},
        {"step": 2, "train_runtime": 1.0},
        {"step": 2, "reward": float("nan")},
    ]
    assert T.logged_steps(history) == [T.LoggedStep(1.0, 0.5, 0.25, 0.5)]


def test_each_steps_model_value_uses_only_the_steps_before_it():
    history = json.loads(STATE.read_text())["log_history"]
    c = T.compare(history, 4)
    assert c.model[0] is None
    F, f = [s.frac_zero_std for s in c.steps], c.bound
    for i in (1, 4, 7):
        rho = T.saturated_share(F[:i], f[:i])
        assert c.model[i] == pytest.approx(rho + (1 - rho) * silent_rate(4, c.steps[i].reward))
    changed = [dict(e, frac_reward_zero_std=0.0) if e.get("step") == 8 else e for e in history]
    assert T.compare(changed, 4).model == c.model  # the last step's log does not move its own prediction


def test_the_cost_table_prices_g_over_2_g_2g_4g_and_the_group_size_of_fidelity_one_minus_eps():
    rows = T.cost_table(4, 0.25, 0.2, eps=0.1)
    g_eps = group_size_exact(0.1, 0.25)
    assert [r.G for r in rows] == sorted({2, 4, 8, 16, g_eps})
    for r in rows:
        assert r.silent_bound == pytest.approx(silent_rate(r.G, 0.25))
        assert r.silent_model == pytest.approx(0.2 + 0.8 * r.silent_bound)
        assert r.wasted_rollouts == pytest.approx(r.silent_model * r.G)


def test_a_mean_reward_outside_0_1_gives_no_prediction_and_says_why():
    c = T.compare([{"step": 1, "reward": 2.5, "frac_reward_zero_std": 0.0}], 4)
    assert c.cost == [] and "outside [0, 1]" in c.notes[0]


def test_a_logged_fraction_under_the_bound_is_flagged():
    c = T.compare([{"step": s, "reward": 0.5, "frac_reward_zero_std": 0.0} for s in (1, 2)], 4)
    assert any("under the lower bound" in n for n in c.notes)


def test_a_zero_std_fraction_logged_only_as_nan_is_said_to_be_nan_not_missing():
    from grpo_identity.integrations.trl_logs import compare

    history = [{"step": s, "reward": 0.5, "frac_reward_zero_std": float("nan")} for s in (1, 2)]
    (note,) = [n for n in compare(history, 4).notes if "frac_reward_zero_std" in n]
    assert note.startswith("every logged frac_reward_zero_std is NaN")
    (note,) = [n for n in compare([{"step": 1, "reward": 0.5}], 4).notes if "frac_reward_zero_std" in n]
    assert "added in TRL 0.18" in note
