"""The controlled Bernoulli-logit run: real autograd gradients obey the identity (PAPER claim 9)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _reproduce import RESULTS, numbers_differ, rerun_recorded  # noqa: E402

from grpo_identity.analysis.stats import r_squared  # noqa: E402
from grpo_identity.foundation import dumps  # noqa: E402
from grpo_identity.trainer import bernoulli as B  # noqa: E402
from grpo_identity.trainer.bernoulli import BernoulliConfig, initial_solve_rates, run_bernoulli  # noqa: E402

SMALL = BernoulliConfig(num_prompts=300, steps=12, seed=3, mass_draws=50)


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
    assert set(small_result["identity_max_abs_err_by_arm"]) == {"grpo", "dr_grpo", "dapo", "initial_mass"}


def test_the_result_has_the_documented_keys_and_is_json(small_result):
    r = json.loads(dumps(small_result))
    for key in (
        "identity_max_abs_err",
        "r2_silent",
        "extreme_share",
        "hard_final",
        "dapo_oversample",
        "seconds",
        "solve_rate_source",
    ):
        assert key in r
    for arm in ("grpo", "dr_grpo"):
        assert set(r["extreme_share"][arm]) == {"measured", "finite_g", "large_g"}
        assert all(0 <= v <= 1 for v in r["extreme_share"][arm].values())
    assert set(r["hard_final"]) == {"grpo", "dr_grpo", "dapo"}
    assert r["config"]["num_prompts"] == 300 and r["solve_rate_source"].startswith("Big-Math")
    assert len(r["curves"]["grpo"]["silent_measured"]) == 12


def test_the_same_seed_gives_the_same_run_and_another_seed_does_not(small_result):
    again = run_bernoulli(SMALL)
    other = run_bernoulli(dataclasses.replace(SMALL, seed=4))
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


# --- the paper's definitions ------------------------------------------------------------------
def test_the_hardest_quartile_is_every_prompt_at_or_below_the_quantile_ties_included():
    p0 = np.array([0.02] * 3 + [0.5] * 5)  # the 25 % quantile is 0.02: three prompts, not round(0.25 · 8) = 2
    assert B.hardest_quartile(p0).tolist() == [True] * 3 + [False] * 5


def test_extreme_bins_are_those_centred_below_0_1_or_above_0_9():
    p = np.array([0.0, 0.05, 0.0999, 0.1, 0.5, 0.8999, 0.9, 0.98, 1.0])
    assert B.EXTREME_BINS[B.mass_bin(p)].tolist() == [True, True, True, False, False, False, True, True, True]


def test_r2_silent_is_the_grpo_arms_alone(small_result):
    cv = small_result["curves"]["grpo"]
    m, f = np.array(cv["silent_measured"]), np.array(cv["silent_predicted"])
    by_hand = 1 - ((m - f) ** 2).sum() / ((m - m.mean()) ** 2).sum()
    assert small_result["r2_silent"] == pytest.approx(by_hand, rel=1e-5)
    assert small_result["r2_silent"] != small_result["r2_silent_pooled"]


def _expected_update(p: float, G: int) -> float:
    """Independent reference: (1/G) Σ_k C(G,k) p^k (1−p)^(G−k) √(k(G−k))."""
    return sum(math.comb(G, k) * p**k * (1 - p) ** (G - k) * math.sqrt(k * (G - k)) for k in range(1, G)) / G


def test_the_initial_extreme_share_is_the_gradient_mass_of_many_draws_at_p0(tmp_path):
    path = tmp_path / "hist.csv"
    path.write_text("solve_rate,count\n0.05,1\n0.5,1\n")  # half the prompts extreme, half medium
    r = run_bernoulli(BernoulliConfig(num_prompts=400, steps=1, mass_draws=400, solve_rates=str(path)))
    p0, _ = initial_solve_rates(BernoulliConfig(num_prompts=400, solve_rates=str(path)))
    n_ext = int((p0 == 0.05).sum())
    g_ext, g_mid = n_ext * _expected_update(0.05, 8), (400 - n_ext) * _expected_update(0.5, 8)
    d_ext, d_mid = n_ext * 0.05 * 0.95, (400 - n_ext) * 0.25
    es = r["extreme_share"]
    assert es["grpo"]["finite_g"] == pytest.approx(g_ext / (g_ext + g_mid), rel=1e-5)
    assert es["dr_grpo"]["finite_g"] == pytest.approx(d_ext / (d_ext + d_mid), rel=1e-5)
    # 400 draws x 400 prompts: the measured share is within Monte Carlo error of E[g]
    assert es["grpo"]["measured"] == pytest.approx(es["grpo"]["finite_g"], abs=0.005)
    assert es["dr_grpo"]["measured"] == pytest.approx(es["dr_grpo"]["finite_g"], abs=0.005)
    assert r["identity_max_abs_err_by_arm"]["initial_mass"] < 1e-12


def test_the_initial_mass_counts_every_draw_however_it_is_batched(monkeypatch):
    cfg = BernoulliConfig(num_prompts=40, group_size=2, mass_draws=60)
    p0 = np.full(40, 0.5)  # G = 2: σ = 1/2 when k = 1 (probability 1/2), else 0
    for batch in (B.MASS_BATCH_ROLLOUTS, 2 * 40 * 7):  # one batch; batches of 7 draws
        monkeypatch.setattr(B, "MASS_BATCH_ROLLOUTS", batch)
        mass, _ = B.initial_gradient_mass(p0, cfg)
        draws_with_k1 = mass["grpo"] / 0.5
        np.testing.assert_array_equal(draws_with_k1, np.round(draws_with_k1))
        assert draws_with_k1.mean() == pytest.approx(30, abs=3)  # 60 draws x 1/2
        np.testing.assert_array_equal(mass["dr_grpo"], mass["grpo"] / 2)  # σ² = σ/2 on the same draws


def test_mass_draws_below_one_are_rejected():
    with pytest.raises(ValueError, match="mass_draws must be an integer from 1 to 100,000, got 0"):
        BernoulliConfig(mass_draws=0)


# --- the stored run, regenerated from the command it recorded ------------------------------------
#: float64 throughout and seeded: a rerun on the recorded versions matches to rounding
REPRO_RTOL, REPRO_ATOL = 1e-9, 1e-12
#: the stored run this test regenerates (about 10 s)
STORED = RESULTS / "bernoulli"


def _numbers_differ(stored, fresh) -> list[str]:
    return numbers_differ(stored, fresh, rtol=REPRO_RTOL, atol=REPRO_ATOL)


def test_the_comparison_finds_a_change_beyond_the_tolerance_and_ignores_timings():
    stored = {"r2": 0.9993, "curve": [0.1, 0.2], "seconds": 24.6, "source": "bigmath"}
    assert _numbers_differ(stored, {**stored, "seconds": 5.0, "r2": 0.9993 * (1 + 1e-12)}) == []
    assert _numbers_differ(stored, {**stored, "curve": [0.1, 0.2 * (1 + 1e-8)]}) == [
        f".curve[1]: stored 0.2, now {0.2 * (1 + 1e-8)!r}"
    ]
    assert _numbers_differ(stored, {**stored, "source": "file"}) == [".source: stored 'bigmath', now 'file'"]


def test_the_stored_run_reproduces_from_its_recorded_command(tmp_path, capsys):
    from grpo_identity import provenance

    code, recorded = rerun_recorded(STORED, tmp_path)
    assert code == 0
    capsys.readouterr()
    env = provenance.differences(recorded) or ["none"]
    for name in ("result.json", "config.json"):
        stored, fresh = (json.loads((d / name).read_text()) for d in (STORED, tmp_path))
        diffs = _numbers_differ(stored, fresh)
        assert not diffs, f"{name} differs from the stored run ({len(diffs)} values; environment changes: {env}): " + (
            "; ".join(diffs[:5])
        )
