"""The off-policy probe (``checks.measure.offpolicy``) on numpy targets: the importance-weight law (token, sequence
(GSPO), none, other) is named, the clip rule is checked against the configured ε, a KL term's push on silent
groups is a deviation with its size (a fail where β = 0), the identity with importance-weighted scores holds
and fails where the advantages are not centred; ``audit_gradient`` runs the probe only on targets that
announce it."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from grpo_identity.checks.gradient import audit_gradient
from grpo_identity.checks.measure.offpolicy import audit_off_policy, clipped, numpy_off_policy_target


def _target(**kw):
    return functools.partial(numpy_off_policy_target, **kw)


def _properties(findings):
    return {f.property: f.severity for f in findings}


@pytest.mark.parametrize("law", ["token", "sequence", "none"])
def test_the_importance_weight_law_is_named_and_told_apart_from_the_others(law):
    out, findings = audit_off_policy(_target(law=law), {})
    assert out["importance_weight"] == law and out["fit_residual"] < 1e-6  # the target: central differences
    assert out["silent_groups_zero_gradient"] and out["identity_holds"]
    assert _properties(findings) == ({"importance_weight": "note"} if law == "none" else {})


def test_gspo_clips_whole_answers_and_grpo_clips_tokens_as_the_configured_epsilon_predicts():
    token, _ = audit_off_policy(_target(law="token"), {})
    sequence, _ = audit_off_policy(_target(law="sequence"), {})
    for out in (token, sequence):
        assert 0 < out["clipped_share"] < 1 and out["clipped_share"] == out["clip_predicted_share"]
        assert out["clip_rule_matches"] and out["clip_mismatched_tokens"] == 0
    assert token["clipped_share"] != sequence["clipped_share"]


def test_a_loss_that_ignores_the_clip_is_a_deviation_with_a_token_it_should_have_clipped():
    out, findings = audit_off_policy(_target(clip=False), {})
    assert out["importance_weight"] == "token" and out["clipped_share"] == 0
    assert out["clip_rule_matches"] is False and out["clip_predicted_share"] > 0
    assert _properties(findings) == {"clip_rule": "deviation"}
    example = next(f for f in findings if f.property == "clip_rule").counterexample
    assert example["clipped_by_config"] and example["surrogate_factor"] == pytest.approx(example["ratio"])


def test_a_weight_of_no_known_law_is_other_and_leaves_clip_and_identity_unjudged():
    def squared(r, G, L, request=None):  # the surrogate weighs ρ² instead of ρ
        out = numpy_off_policy_target(r, G, L, request, clip=False)
        out["coefficients"] = out["coefficients"] * np.exp(out["log_ratio_old"])
        return out

    out, findings = audit_off_policy(squared, {})
    assert out["importance_weight"] == "other" and out["nearest_law"] == "token" and out["fit_residual"] > 1e-2
    assert out["clip_rule_matches"] is None and out["identity_holds"] is None
    assert _properties(findings) == {"importance_weight": "note"}


@pytest.mark.parametrize("law", ["token", "sequence"])
@pytest.mark.parametrize("kl", ["k3", "k3·ratio"])
def test_a_kl_term_moves_silent_groups_a_deviation_with_its_size_and_its_law(kl, law):
    out, findings = audit_off_policy(_target(beta=0.04, kl=kl, law=law), {})
    assert out["kl_law"] == kl and out["importance_weight"] == law and out["identity_holds"]
    assert not out["silent_groups_zero_gradient"]
    size = out["silent_size"]
    assert size["kl_law"] == kl and 0 < size["max_ratio"] < 1 and math.isfinite(size["norm_ratio"])
    assert _properties(findings) == {"kl_moves_silent_groups": "deviation"}
    message = next(f.message for f in findings if f.property == "kl_moves_silent_groups")
    assert "β(π_ref/π − 1)∇log π per token, independent of the advantage" in message and "β = 0.04" in message


def test_the_kl_push_scales_with_beta():
    small, _ = audit_off_policy(_target(beta=0.01), {})
    large, _ = audit_off_policy(_target(beta=0.04), {})
    assert large["silent_size"]["max_ratio"] == pytest.approx(4 * small["silent_size"]["max_ratio"], rel=0.05)


def test_silent_groups_pushed_off_policy_without_a_kl_term_fail():
    def leaky(r, G, L, request=None):
        out = numpy_off_policy_target(r, G, L, request)
        R = np.asarray(r).reshape(-1, G)
        silent = np.repeat(R.max(1) == R.min(1), G)
        out["coefficients"][silent] += 1e-3 * out["log_ratio_old"][silent]  # nothing on-policy, something after
        return out

    out, findings = audit_off_policy(leaky, {})
    assert not out["silent_groups_zero_gradient"]
    assert _properties(findings) == {"off_policy_silent_groups": "fail"}


def test_the_identity_fails_where_the_update_is_not_centred_in_its_group():
    def uncentred(r, G, L, request=None):  # Âᵢ + 0.3 on the answers of live groups, centred Âᵢ reported
        out = numpy_off_policy_target(r, G, L, request)
        R = np.asarray(r).reshape(-1, G)
        live = np.repeat(R.max(1) > R.min(1), G)
        ratio = out["coefficients"] / np.where(out["advantages"][:, None] == 0, 1.0, out["advantages"][:, None])
        out["coefficients"][live] += 0.3 * ratio[live]
        return out

    out, findings = audit_off_policy(uncentred, {})
    assert out["importance_weight"] == "token" and out["identity_holds"] is False
    assert max(row["residual"] for row in out["identity"]) > 1e-2
    assert _properties(findings) == {"identity_off_policy": "fail"}


def test_the_identity_is_checked_with_the_named_per_sample_weight():
    out, _ = audit_off_policy(_target(), {}, weight="1/step_tokens")
    assert out["identity_holds"] and {row["k"] for row in out["identity"] if row["G"] == 8} == set(range(1, 8))
    assert all(row["ratio"] == pytest.approx(1, abs=1e-9) for row in out["identity"])
    wrong, _ = audit_off_policy(_target(), {}, weight="1/length")  # the loss weighs 1/(batch tokens)
    assert wrong["identity_holds"] is False
    unnamed, _ = audit_off_policy(_target(), {}, weight="other")
    assert unnamed["identity_holds"] is None and unnamed["identity"] == []


def test_the_clip_rule_with_a_two_sided_cap():
    ratio = np.array([0.7, 1.05, 1.15, 1.3, 1.15, 1.6])
    A = np.array([-1.0, 1.0, 1.0, -1.0, -1.0, -1.0])
    assert clipped(ratio, A, 0.2, 0.2).tolist() == [True, False, False, False, False, False]
    assert clipped(ratio, A, 0.2, 0.2, delta=1.1).tolist() == [True, False, True, True, False, True]


def test_the_gradient_audit_runs_the_probe_only_for_a_target_that_announces_it():
    def announced(r, G, L, request=None):
        return numpy_off_policy_target(r, G, L, request, beta=0.04)

    announced.grpo_identity_info = {"off_policy": {"beta": 0.04, "old_logps": "the unmoved policy's"}}

    def silent(r, G, L):
        return numpy_off_policy_target(r, G, L)

    report = audit_gradient(announced)
    off = report.inferred.off_policy
    assert off["importance_weight"] == "token" and off["settings"]["old_logps"] == "the unmoved policy's"
    assert report.verdict == "deviation" and "kl_moves_silent_groups" in _properties(report.findings)
    assert "off-policy step" in report.format() and report.to_dict()["inferred"]["off_policy"]["kl_law"] == "k3"
    plain = audit_gradient(silent)
    assert plain.inferred.off_policy == {} and "off-policy" not in plain.format()
    assert not any("off_policy" in f.property or "kl_" in f.property for f in plain.findings)


def test_a_target_whose_off_policy_step_is_malformed_gets_a_note():
    def broken(r, G, L, request=None):
        out = numpy_off_policy_target(r, G, L)
        if request is not None:
            del out["log_ratio_old"]
        return out

    broken.grpo_identity_info = {"off_policy": {"beta": 0.0}}
    report = audit_gradient(broken)
    assert report.inferred.off_policy == {} and report.verdict == "deviation"  # its 1/step_tokens weight
    assert _properties(report.findings) == {"off_policy": "note", "per_sample_weight": "deviation"}


def test_a_push_on_silent_groups_that_no_kl_law_explains_fails_even_with_beta():
    def leaky(r, G, L, request=None):
        out = numpy_off_policy_target(r, G, L, request, beta=0.04)
        out["coefficients"] = out["coefficients"] + 0.01 * out["mask"]  # every token pushed alike
        return out

    out, findings = audit_off_policy(leaky, {})
    assert _properties(findings).get("off_policy_silent_groups") == "fail"
    assert "kl_moves_silent_groups" not in _properties(findings)
