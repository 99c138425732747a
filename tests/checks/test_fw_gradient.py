"""The gradient-level analysis (checks.gradient) on hand-made gradient targets: each weight law
is named, and each broken property is found (no framework needed)."""

from __future__ import annotations

import numpy as np
import pytest

from grpo_identity import dial as D
from grpo_identity.checks.gradient import audit_gradient

T = 8


def _target(weight, advantage=D.GRPO, spread=0.0, silent_leak=0.0):
    """A gradient target: aᵢₜ = Âᵢ·weight(Lᵢ, L)·(1 + spread·t) on the answer's tokens."""

    def fn(rewards, G, lengths):
        A = D.advantages(rewards, G, advantage)
        mask = (np.arange(T)[None, :] < lengths[:, None]).astype(float)  # (n, T)
        w = weight(lengths.astype(float), lengths.astype(float).sum(), len(rewards))
        coeff = (A * w)[:, None] * (1 + spread * np.arange(T))[None, :] * mask
        R = rewards.reshape(-1, G)
        silent = np.repeat(R.max(1) == R.min(1), G)
        coeff[silent] += silent_leak * mask[silent]
        return {"advantages": A, "coefficients": coeff, "mask": mask}

    return fn


@pytest.mark.parametrize(
    "weight, law, verdict",
    [
        (lambda L, total, n: np.full(L.shape, 1.0 / (n * T)), "constant", "pass"),
        (lambda L, total, n: 1.0 / (n * L), "1/length", "deviation"),
        (lambda L, total, n: np.full(L.shape, 1.0 / total), "1/batch_tokens", "deviation"),
    ],
)
def test_the_per_sample_weight_is_named_and_the_identity_holds_with_it(weight, law, verdict):
    report = audit_gradient(_target(weight))
    assert report.inferred["per_sample_weight"] == law
    assert report.verdict == verdict, report.format()
    assert report.inferred["silent_groups_zero_gradient"] and report.inferred["uniform_within_answer"]
    assert max(row["G1_residual"] for row in report.coefficient_table) < 1e-9


def test_a_weight_that_follows_no_law_fails():
    report = audit_gradient(_target(lambda L, total, n: 1.0 / (L * L)))
    assert report.verdict == "fail" and report.inferred["per_sample_weight"] == "other"


def test_token_weights_that_vary_within_an_answer_fail():
    report = audit_gradient(_target(lambda L, total, n: np.ones_like(L), spread=0.1))
    assert report.verdict == "fail" and not report.inferred["uniform_within_answer"]
    assert "uniform_within_answer" in [f.property for f in report.findings]


def test_a_silent_group_with_a_gradient_fails_and_says_where():
    report = audit_gradient(_target(lambda L, total, n: np.ones_like(L), silent_leak=1e-3))
    assert report.verdict == "fail" and not report.inferred["silent_groups_zero_gradient"]
    assert any(f.property == "silent_groups_zero_gradient" and "σ = 0" in f.message for f in report.findings)


def test_an_expected_preset_compares_the_advantage_coefficient():
    same = audit_gradient(_target(lambda L, total, n: np.ones_like(L), advantage=D.DR_GRPO), expect="dr_grpo")
    other = audit_gradient(_target(lambda L, total, n: np.ones_like(L), advantage=D.DR_GRPO), expect="grpo")
    assert same.verdict == "pass"
    assert other.verdict == "deviation" and any(f.property == "matches_preset" for f in other.findings)


def test_the_json_names_level_verdict_inferred_weight_and_findings():
    out = audit_gradient(_target(lambda L, total, n: 1.0 / L)).to_dict()
    assert out["level"] == "gradient" and out["verdict"] == "deviation"
    assert out["inferred"]["per_sample_weight"] == "1/length"
    assert {"property", "message", "severity"} <= set(out["findings"][0])
