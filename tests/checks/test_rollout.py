"""grpo_identity.checks.measure.rollout: the three-policy probe (theorem G11) names each released failure of a
rollout–trainer correction, planted in the numpy reference target, by its own finding, and passes the estimators
as the frameworks document them."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from grpo_identity.checks.gradient import audit_gradient
from grpo_identity.checks.measure.rollout import ESTIMATORS, audit_rollout, estimator_weights, numpy_rollout_target


def _audit(estimator="token_truncate", plant=None, documented=None, **kw):
    target = functools.partial(numpy_rollout_target, estimator=estimator, plant=plant, **kw)
    settings = {"estimator": documented or estimator, "cap": kw.get("cap", 2.0), "low": kw.get("low", 0.0)}
    out, findings = audit_rollout(target, settings)
    return out, {f.property: f.severity for f in findings}


@pytest.mark.parametrize(
    "estimator, kw",
    [
        ("token_truncate", {}),  # TIS, TRL's token_truncate, verl's token level
        ("token_truncate", {"low": 0.5, "cap": 5.0}),  # OpenRLHF 0.10's two-sided tis clamp
        ("token_mask", {"low": 0.5, "cap": 5.0}),  # IcePop
        ("sequence_truncate", {}),  # TRL's and verl's sequence level: the product
        ("sequence_mask", {"cap": 3.0}),
        ("geometric_truncate", {}),  # ms-swift's sequence_truncate, AReaL's sequence level
        ("geometric_gate", {}),  # ms-swift's sequence_mask, OpenRLHF's seq-mask-tis
    ],
)
def test_each_documented_estimator_is_recognised_and_keeps_the_identity(estimator, kw):
    out, found = _audit(estimator, **kw)
    assert (out["estimator"], out["in_graph"], found) == (estimator, False, {})
    assert out["on_policy_weight_one"] and out["missing"] == "refused" and out["non_finite"] == "refused"
    assert out["identity_holds"] and len(out["identity"]) == 3  # G = 4: k = 1, 2, 3


@pytest.mark.parametrize(
    "plant, estimator, finding, severity",
    [
        ("in_graph", "token_truncate", "correction_in_graph", "fail"),  # verl PR #4105
        ("in_graph", "geometric_truncate", "correction_in_graph", "fail"),
        ("shift", "token_truncate", "rollout_logps_shifted", "fail"),  # ms-swift #8196
        ("fill", "token_truncate", "rollout_logps_filled", "fail"),  # vime #70
        ("skip", "token_truncate", "rollout_logps_missing", "note"),  # skipped without a word
        ("unguarded", "token_truncate", "correction_non_finite", "fail"),  # prime-rl #2972
        ("nan_as_equal", "token_truncate", "rollout_logps_non_finite", "deviation"),  # TRL 1.16's nan_to_num
        ("cap_below_one", "token_truncate", "correction_on_policy", "fail"),
        ("product", "geometric_truncate", "correction_estimator", "deviation"),  # NeMo-RL PR #2269's dispute
    ],
)
def test_each_failure_mode_planted_in_the_reference_fails_with_its_own_finding(plant, estimator, finding, severity):
    out, clean = _audit(estimator)
    assert clean == {}
    out, found = _audit(estimator, plant)
    assert found.get(finding) == severity, found


def test_a_shifted_engine_is_named_and_its_estimator_still_read_through_the_shift():
    out, found = _audit("token_mask", "shift", cap=5.0, low=0.2)
    assert out["shift"] == 1 and out["estimator"] == "token_mask"
    assert found == {"rollout_logps_shifted": "fail", "identity_three_policy": "fail"}  # off the documented weights


def test_the_product_where_the_mean_is_documented_names_both_and_fails_the_documented_identity():
    out, found = _audit("geometric_truncate", "product")
    assert (out["estimator"], out["documented"], out["identity_estimator"]) == (
        "sequence_truncate", "geometric_truncate", "geometric_truncate"
    )  # fmt: skip
    assert out["identity_holds"] is False and found["identity_three_policy"] == "fail"
    undocumented, found = _audit("geometric_truncate", "product", documented="no documented estimator")
    assert undocumented["identity_holds"] and undocumented["identity_estimator"] == "sequence_truncate"


@pytest.mark.parametrize("estimator, kw", [("geometric_mask", {}), ("token_mask", {"cap": 1e300})])
def test_an_estimator_that_agrees_with_another_on_the_probe_is_read_as_the_documented_one(estimator, kw):
    out, found = _audit(estimator, **kw)  # no geometric mean reaches 2 here; a mask without a bound is a truncation
    assert (out["estimator"], found) == (estimator, {})


def test_a_target_that_crashes_without_rollout_log_probabilities_is_not_taken_as_refusing():
    def crashing(r, G, L, request=None):
        if request is not None and request["rollout"]["log_ratio"] is None:
            raise TypeError("unsupported operand type(s) for -: 'float' and 'NoneType'")
        return numpy_rollout_target(r, G, L, request)

    out, findings = audit_rollout(crashing, {"estimator": "token_truncate", "cap": 2.0})
    assert out["missing"] == "crashed" and {f.property: f.severity for f in findings} == {
        "rollout_logps_missing": "fail"
    }


def test_estimator_weights_by_hand():
    x = np.log(np.array([[3.0, 0.5, 7.0]]))
    M = np.array([[1.0, 1.0, 0.0]])  # the third token is padding
    assert estimator_weights("token_truncate", x, M, 2.0)[0, :2].tolist() == pytest.approx([2.0, 0.5])
    assert estimator_weights("token_truncate", x, M, 2.0, low=0.6)[0, :2].tolist() == pytest.approx([2.0, 0.6])
    assert estimator_weights("token_mask", x, M, 2.0)[0, :2].tolist() == pytest.approx([0.0, 0.5])
    assert estimator_weights("sequence_truncate", x, M, 2.0)[0, 0] == pytest.approx(1.5)  # 3 × 0.5
    assert estimator_weights("sequence_mask", x, M, 1.2)[0, 0] == 0.0
    assert estimator_weights("geometric_truncate", x, M, 2.0)[0, 0] == pytest.approx(math.sqrt(1.5))
    assert estimator_weights("geometric_gate", x, M, 2.0)[0, :2].tolist() == pytest.approx([3.0, 0.5])
    assert estimator_weights("geometric_gate", x, M, 1.1)[0, :2].tolist() == [0.0, 0.0]
    assert estimator_weights("none", x, M, 2.0).tolist() == [[1.0, 1.0, 1.0]]
    assert set(ESTIMATORS) >= {"none", "token_truncate", "sequence_truncate", "geometric_truncate"}


def test_the_gradient_audit_runs_the_probe_only_for_a_target_that_announces_it_and_reports_it():
    def announced(r, G, L, request=None):
        return numpy_rollout_target(r, G, L, request, plant="in_graph")

    announced.grpo_identity_info = {"rollout_correction": {"estimator": "token_truncate", "cap": 2.0,
                                                           "setting": "mode=token_truncate"}}  # fmt: skip

    def silent(r, G, L):
        return numpy_rollout_target(r, G, L)

    report = audit_gradient(announced)
    fit = report.inferred.three_policy
    assert fit["estimator"] == "token_truncate" and fit["in_graph"] and report.verdict == "fail"
    assert "correction_in_graph" in {f.property for f in report.findings}
    text = report.format()
    assert "three policies" in text and "mode=token_truncate" in text and "left in the graph" in text
    assert report.to_dict()["inferred"]["three_policy"]["estimator"] == "token_truncate"
    plain = audit_gradient(silent)
    assert plain.inferred.three_policy == {} and "three policies" not in plain.format()


def test_a_target_whose_three_policy_step_is_malformed_gets_a_note():
    def broken(r, G, L, request=None):
        out = numpy_rollout_target(r, G, L, request)
        if request is not None:
            del out["old_logps"]
        return out

    broken.grpo_identity_info = {"rollout_correction": {"estimator": "token_truncate", "cap": 2.0}}
    report = audit_gradient(broken)
    assert report.inferred.three_policy == {}
    assert {f.property: f.severity for f in report.findings}.get("three_policy") == "note"


def test_a_corrected_step_of_nan_coefficients_fails_the_identity_and_names_where():
    def nan_when_corrected(r, G, L, request=None):
        out = numpy_rollout_target(r, G, L, request)
        if ((request or {}).get("rollout") or {}).get("correct"):
            out["coefficients"] = out["coefficients"] * np.nan
        return out

    out, findings = audit_rollout(nan_when_corrected, {"estimator": "token_truncate", "cap": 2.0})
    assert out["identity_holds"] is False
    found = [f for f in findings if f.property == "identity_three_policy"]
    assert found and "c is nan× it" in found[0].message and found[0].counterexample["group_size"] >= 2


def test_a_cap_below_one_that_the_configuration_sets_is_a_deviation_not_a_shift():
    out, found = _audit("token_truncate", cap=0.5)  # documented: cap 0.5, so every equal token weighs 0.5
    assert (out["on_policy_weight_one"], out["on_policy_as_configured"], out["shift"]) == (False, True, None)
    assert out["estimator"] == "token_truncate" and out["missing"] == "refused"
    assert found == {"correction_on_policy": "deviation"}


def test_a_driver_that_cannot_run_the_step_is_a_note_not_a_finding_about_the_framework():
    from grpo_identity.checks.frameworks import AdapterError

    def unable(r, G, L, request=None):
        if request is not None and request["rollout"]["log_ratio"] is None:
            raise AdapterError("the driver cannot hand this release no rollout log-probabilities")
        return numpy_rollout_target(r, G, L, request)

    unable.grpo_identity_info = {"rollout_correction": {"estimator": "token_truncate", "cap": 2.0}}
    report = audit_gradient(unable)
    found = {f.property: f.severity for f in report.findings}
    assert report.inferred.three_policy == {} and found.get("three_policy") == "note"
    assert "rollout_logps_missing" not in found and "could not be run" in report.format()


@pytest.mark.parametrize("estimator, cap", [("token_truncate", 2.0), ("sequence_truncate", 5.0)])
def test_a_truncating_sampler_against_a_full_vocabulary_is_found_and_a_replayed_one_is_not(estimator, cap):
    """trl #6789: the engine's log-probabilities renormalised over the tokens top-p keeps, the trainer's over the
    whole vocabulary: with equal policies each token weighs its kept mass S (G11), S^L an answer for the product."""
    settings = {"estimator": estimator, "cap": cap, "sampler": "top_p=0.9"}
    for plant, support in ((None, "replayed"), ("full_vocab", "truncated")):
        target = functools.partial(numpy_rollout_target, estimator=estimator, cap=cap, plant=plant)
        out, findings = audit_rollout(target, settings)
        assert out["support"] == support and 0.7 <= out["kept_mass_range"][0] < out["kept_mass_range"][1] < 1
        found = {f.property: f.severity for f in findings}
        assert found == ({} if plant is None else {"rollout_support_truncated": "fail"})
    lo, hi = out["support_weight_range"]
    assert (lo < out["kept_mass_range"][0] - 1e-6) is (estimator == "sequence_truncate")  # a product of masses
    _, plain = audit_rollout(functools.partial(numpy_rollout_target, plant="full_vocab"), {"estimator": estimator})
    assert "rollout_support_truncated" not in {f.property for f in plain}  # no sampler announced: not asked
