"""The controlled Bernoulli-logit run: real autograd gradients obey the identity (PAPER claim 9)."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from grpo_identity.analysis.stats import r_squared  # noqa: E402
from grpo_identity.foundation import dumps  # noqa: E402
from grpo_identity.trainer.bernoulli import BernoulliConfig, initial_solve_rates, run_bernoulli  # noqa: E402

SMALL = BernoulliConfig(num_prompts=300, steps=12, seed=3)


@pytest.fixture(scope="module")
def small_result() -> dict:
    return run_bernoulli(SMALL)


def test_autograd_gradient_of_a_hand_written_grpo_loss_is_minus_sigma():
    """Independent of the trainer: one scalar prompt, advantages and loss written out by hand."""
    G = 8
    theta = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    y = torch.tensor([1, 0, 0, 1, 1, 0, 0, 0], dtype=torch.float64)  # k = 3
    mu, sd = y.mean(), y.std(unbiased=False)
    adv = (y - mu) / sd
    log_pi = y * torch.log(torch.sigmoid(theta)) + (1 - y) * torch.log(1 - torch.sigmoid(theta))
    (-(adv * log_pi).sum() / G).backward()
    assert theta.grad.item() == pytest.approx(-np.sqrt(3 * 5) / 8, abs=1e-14)


def test_every_autograd_gradient_matches_the_identity(small_result):
    assert small_result["identity_max_abs_err"] < 1e-12
    assert set(small_result["identity_max_abs_err_by_arm"]) == {"grpo", "dr_grpo", "dapo"}


def test_the_result_has_the_documented_keys_and_is_json(small_result):
    r = json.loads(dumps(small_result))
    for key in ("identity_max_abs_err", "r2_silent", "extreme_share", "hard_final", "dapo_oversample", "seconds", "solve_rate_source"):
        assert key in r
    for arm in ("grpo", "dr_grpo"):
        assert set(r["extreme_share"][arm]) == {"measured", "finite_g", "large_g"}
        assert all(0 <= v <= 1 for v in r["extreme_share"][arm].values())
    assert set(r["hard_final"]) == {"grpo", "dr_grpo", "dapo"}
    assert r["config"]["num_prompts"] == 300 and r["solve_rate_source"].startswith("synthetic default")
    assert len(r["curves"]["grpo"]["silent_measured"]) == 12


def test_the_same_seed_gives_the_same_run_and_another_seed_does_not(small_result):
    again = run_bernoulli(SMALL)
    other = run_bernoulli(BernoulliConfig(num_prompts=300, steps=12, seed=4))
    assert again["curves"] == small_result["curves"]
    assert other["hard_final"] != small_result["hard_final"]


def test_dapo_without_resampling_uses_exactly_grpos_samples():
    r = run_bernoulli(BernoulliConfig(num_prompts=100, steps=5, max_draws=1))
    assert r["dapo_oversample"] == 1.0


def test_dapo_oversampling_lies_between_one_and_the_draw_limit(small_result):
    assert 1.0 < small_result["dapo_oversample"] <= 4.0


def test_a_vanishing_learning_rate_leaves_the_solve_rates_where_they_started():
    r = run_bernoulli(BernoulliConfig(num_prompts=100, steps=3, lr=1e-12))
    for arm in ("grpo", "dr_grpo", "dapo"):
        assert r["hard_final"][arm] == pytest.approx(r["hard_initial"], abs=1e-9)


def test_a_histogram_file_sets_the_initial_difficulties(tmp_path):
    path = tmp_path / "hist.csv"
    path.write_text("# one interior solve rate plus silent problems\nsolve_rate,count\n0.0,5\n0.5,10\n1.0,5\n")
    cfg = BernoulliConfig(num_prompts=40, steps=2, solve_rates=str(path))
    p0, source = initial_solve_rates(cfg)
    np.testing.assert_array_equal(p0, 0.5)
    r = run_bernoulli(cfg)
    assert r["hard_initial"] == 0.5 and "hist.csv" in r["solve_rate_source"]
    assert r["extreme_share"]["grpo"]["finite_g"] == 0.0


def test_initial_solve_rates_are_clipped():
    p0, _ = initial_solve_rates(BernoulliConfig(num_prompts=5000))
    assert p0.min() >= 0.02 and p0.max() <= 0.98 and (p0 == 0.02).any()


def test_bad_settings_are_rejected_naming_the_value():
    with pytest.raises(ValueError, match="num_prompts"):
        BernoulliConfig(num_prompts=2)
    with pytest.raises(ValueError, match="lr"):
        BernoulliConfig(lr=0.0)
    with pytest.raises(ValueError, match="clip"):
        BernoulliConfig(clip_low=0.5, clip_high=0.4)


def test_r_squared_is_one_for_a_perfect_prediction_and_zero_for_the_mean():
    m = [1.0, 2.0, 3.0]
    assert r_squared(m, m) == 1.0 and r_squared(m, [2.0, 2.0, 2.0]) == 0.0


def test_a_mid_sized_run_reproduces_the_papers_qualitative_findings():
    r = run_bernoulli(BernoulliConfig(num_prompts=1500, steps=60))
    assert r["r2_silent"] > 0.98  # measured silent fraction tracks E[p^G + (1-p)^G]
    run = r["extreme_share_run"]
    for arm in ("grpo", "dr_grpo"):  # |autograd gradient| mass matches the finite-G closed form
        assert run[arm]["measured"] == pytest.approx(run[arm]["finite_g"], abs=0.02)
    assert r["extreme_share"]["grpo"]["finite_g"] > r["extreme_share"]["dr_grpo"]["finite_g"]
    assert r["hard_final"]["dapo"] > r["hard_final"]["grpo"] > r["hard_final"]["dr_grpo"]


def test_the_gradient_comes_from_the_dials_advantages_through_autograd(monkeypatch):
    """Doubling the dial's advantages doubles the autograd gradient, so the identity check fails."""
    import grpo_identity.dial as D

    real = D.advantages
    monkeypatch.setattr(D, "advantages", lambda *a, **kw: 2 * real(*a, **kw))
    r = run_bernoulli(BernoulliConfig(num_prompts=40, steps=2))
    assert r["identity_max_abs_err"] > 0.1


def test_a_nan_in_the_identity_check_is_reported_not_dropped(monkeypatch):
    import grpo_identity.dial as D

    monkeypatch.setattr(D, "coefficient", lambda dial, k, G, **kw: np.full(np.shape(k), np.nan))
    r = run_bernoulli(BernoulliConfig(num_prompts=40, steps=2))
    assert np.isnan(r["identity_max_abs_err"])
