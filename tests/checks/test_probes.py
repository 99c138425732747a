"""The edge probes (``checks.measure.probes``): what a target does with a partial last group, a tiny
spread of rewards and singleton groups, said in notes; a remainder that moves the whole groups
fails."""

from __future__ import annotations

import numpy as np
import pytest

from grpo_identity import dial as D
from grpo_identity.checks import audit
from grpo_identity.checks.measure.probes import remainder


def test_the_edge_probes_report_what_the_target_does_with_remainders_tiny_spreads_and_singletons():
    def lenient(rewards, G):  # accepts a partial last group; G = 1 gives zeros
        out = np.zeros_like(rewards)
        n = rewards.size // G * G
        out[:n] = D.advantages(rewards[:n], G, D.GRPO) if G > 1 else 0.0
        return out

    notes = {f.property: f for f in audit(lenient, max_examples=10).findings}
    assert "the whole groups are unchanged" in notes["probe_remainder"].message
    assert "noise scaled up to full weight" in notes["probe_tiny_spread"].message
    assert "probe_singleton" not in notes  # all zeros: nothing to say


def test_a_partial_last_group_that_changes_the_whole_groups_fails():
    def batch_mean(rewards, G):  # centres on the batch mean, so the remainder moves every group
        return rewards - rewards.mean()

    finding = remainder(batch_mean)
    assert finding.severity == "fail" and "changes the whole groups" in finding.message


def test_a_lone_answer_at_a_fixed_group_size_is_a_note_whether_nan_or_a_raw_reward():
    from grpo_identity.checks.measure.probes import singletons

    def bessel(r, G):  # std with ddof 1 at G = 1: NaN
        R = r.reshape(-1, G)
        return ((R - R.mean(1, keepdims=True)) / R.std(1, ddof=1, keepdims=True)).reshape(-1)

    with np.errstate(all="ignore"):
        nan = singletons(bessel)
    raw = singletons(lambda r, G: r.copy() if G == 1 else r - r.mean())
    assert nan.severity == "note" and "NaN or inf would poison" in nan.message
    assert raw.severity == "note" and "raw reward" in raw.message
    assert singletons(lambda r, G: np.zeros_like(r)) is None


def test_a_filter_at_g_1_is_probed_too_and_keeping_a_lone_answer_is_a_note():
    from grpo_identity.checks.measure.probes import filter_singletons

    def exact(r, G):
        return np.ptp(r.reshape(-1, G), 1) > 0

    def keeps_everything(r, G):
        return np.ones(r.size // G, dtype=bool)

    assert filter_singletons(exact, "nonzero_std") is None  # one answer: one value, dropped
    kept = filter_singletons(keeps_everything, "nonzero_std")
    assert kept.severity == "note" and "drops every one" in kept.message
    assert filter_singletons(keeps_everything, "all") is None


def test_a_probe_that_cannot_run_reports_under_the_name_it_reports_when_it_runs(monkeypatch):
    from grpo_identity import dial as D
    from grpo_identity.checks.measure import probes

    def grpo(rewards, G):
        return D.advantages(rewards, G, D.GRPO)

    ran = [f.property for f in probes.run_probes(grpo)]
    assert ran == [probes.PROBE_FINDINGS[p] for p in probes.PROBES]

    def crash(target):  # a probe whose child timed out
        raise TimeoutError("no answer in 30 s")

    monkeypatch.setattr(probes, "PROBES", (crash,))
    monkeypatch.setitem(probes.PROBE_FINDINGS, crash, "probe_singleton")
    (finding,) = probes.run_probes(grpo)
    assert finding.property == "probe_singleton" and "could not run" in finding.message


@pytest.mark.parametrize(
    "dtype, spread", [("float64", "1e-5"), ("float32", "1e-5"), ("float16", "2e-3"), ("bfloat16", "2e-2")]
)
def test_the_tiny_spread_is_one_the_rewards_dtype_keeps_so_the_group_is_never_silent(dtype, spread):
    from grpo_identity.checks.calls.target import LocalTarget, RoundedRewards
    from grpo_identity.checks.measure.probes import tiny_spread

    target = RoundedRewards(LocalTarget(lambda r, G: D.advantages(r, G, D.GRPO)), dtype)
    finding = tiny_spread(target)
    assert f"differ by ~{spread} (0.7 + {spread}·noise" in finding.message
    assert "noise scaled up to full weight" in finding.message  # GRPO, ε = 0: the spread is live, not rounded away
