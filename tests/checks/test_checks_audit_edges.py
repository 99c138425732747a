"""The audit's sharp edges: each test here was written against a bug planted in the checks or the
dial (a property dropped, a tolerance loosened, a reference compared with itself) and fails on it."""

from __future__ import annotations

import numpy as np
import pytest

from grpo_identity import dial as D
from grpo_identity.checks import audit
from grpo_identity.checks import properties as P
from grpo_identity.checks.infer import infer_keep_rule


def grpo_with_a_silent_residue(rewards, G):
    """Paper GRPO, except that silent groups get ±1e-12 residues summing to 0 (on {0, 1} rewards too)."""
    R = rewards.reshape(-1, G)
    live = np.ptp(R, 1, keepdims=True) > 0
    A = np.divide(R - R.mean(1, keepdims=True), R.std(1, keepdims=True), out=np.zeros_like(R), where=live)
    residue = 1e-12 * (np.arange(G) - (G - 1) / 2)  # (G,): sums to 0, so zero-sum holds
    return np.where(live, A, residue).reshape(-1)


def test_a_residue_on_silent_binary_groups_fails_the_audit_by_the_silent_groups_property():
    report = audit(grpo_with_a_silent_residue, expect="grpo", max_examples=100)
    assert report.verdict == "fail"
    silent = [f for f in report.findings if f.property == "silent_groups_exactly_zero"]
    assert silent and "instead of exactly 0" in silent[0].message, report.format()
    assert "binary NOT exactly 0" in report.format()


def test_the_silent_groups_property_names_the_group_and_its_advantages():
    batch = type("B", (), {"contiguous": lambda self: np.array([1.0, 1.0, 0.0, 1.0]), "group_size": 2})()
    with pytest.raises(P.PropertyViolation, match=r"silent group 0 \(G=2, every reward 1\)"):
        P.silent_groups_exactly_zero(
            grpo_with_a_silent_residue, batch, P.Context(P.Tolerance.for_precision("float64")), np.random.default_rng(0)
        )


@pytest.mark.parametrize("eps, matches", [(1.3e-4, False), (0.7e-4, False), (1.01e-4, True)])
def test_an_epsilon_matches_the_trl_preset_only_within_2_percent_of_its_1e_4(eps, matches):
    report = audit(lambda r, G: D.advantages(r, G, D.TRL.replace(eps=eps)), expect="trl", max_examples=20)
    assert report.inferred.eps == pytest.approx(eps, rel=1e-6)
    assert (report.matches == "trl") is matches, report.format()
    assert report.verdict == ("pass" if matches else "deviation")
    if not matches:
        assert f"eps {eps:.3g} instead of 0.0001" in report.format()


def test_kept_by_definition_keeps_exactly_the_groups_with_two_distinct_rewards():
    R = np.array([1.0, 1.0, 0.1, 0.1 + 1e-9, 0.1, 0.1, -0.0, 0.0, 0.0, 1.0])
    assert P.kept_by_definition(R, 2, "nonzero_std").tolist() == [False, True, False, False, True]
    assert P.kept_by_definition(R, 2, "all").tolist() == [True] * 5
    with pytest.raises(ValueError, match="keep must be"):
        P.kept_by_definition(R, 2, "some")


def _keep_mask_with_a_threshold(rewards, group_size=None, dial=D.DAPO, **kw):
    """keep_mask with silence tested as max − min < 1e-6: a bug the filter audit must see."""
    R = np.asarray(rewards, dtype=np.float64).reshape(-1, group_size)
    return np.ptp(R, 1) >= 1e-6 if dial.keep == "nonzero_std" else np.ones(R.shape[0], dtype=bool)


def test_the_filter_audit_catches_a_bug_in_the_dials_own_keep_mask(monkeypatch):
    def the_dials_filter(r, G):
        return D.keep_mask(r, G, D.DAPO)  # looked up at call time: the planted bug below

    assert audit(the_dials_filter, kind="filter", expect="dapo", max_examples=20).verdict == "pass"
    monkeypatch.setattr(D, "keep_mask", _keep_mask_with_a_threshold)
    assert infer_keep_rule(the_dials_filter) == ("other", "G=2: group [0.1, 0.100000001] is dropped")
    report = audit(the_dials_filter, kind="filter", expect="dapo", max_examples=20)
    assert report.verdict == "fail" and report.findings[0].property == "keeps_groups_with_nonzero_std", report.format()
