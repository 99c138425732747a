"""grpo_identity.checks.measure.arrival: the asynchronous-groups probe names each released failure of group
integrity (short groups on a batch baseline, ignored staleness, groups resumed across versions, None rewards filled,
empty answers dropped), planted in the numpy reference target, by its own finding, and passes the reference itself.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest

from grpo_identity.checks.measure.arrival import CASES, audit_arrival, numpy_arrival_target


def _audit(settings: dict[str, Any] | None = None, **kw: Any) -> tuple[dict[str, Any], dict[str, str]]:
    target = functools.partial(numpy_arrival_target, **kw)
    out, findings = audit_arrival(target, {"max_staleness": 1} if settings is None else settings)
    return out, {f.property: f.severity for f in findings}


def test_the_reference_trainer_passes_every_case():
    out, found = _audit()
    assert found == {} and out["calibrated"] is True
    assert set(out["cases"]) == set(CASES)
    assert all(case["outcome"] == "trained" and case["problems"] == [] for case in out["cases"].values())


@pytest.mark.parametrize(
    ("plant", "finding", "case"),
    [
        ("batch_baseline", "group_baseline_foreign", "short"),  # slime #2230, AReaL #1419
        ("ignore_staleness", "staleness_ignored", "stale"),  # miles #1829
        ("mix_versions", "group_mixed_versions", "mixed"),  # slime #2092
        ("none_as_zero", "reward_none_trained", "none"),
        ("none_as_nan", "async_crash_or_nan", "none"),
        ("drop_empty", "empty_answer_dropped", "empty"),
    ],
)
def test_each_planted_failure_gets_its_own_finding(plant: str, finding: str, case: str):
    out, found = _audit(plant=plant)
    assert found == {finding: "fail"}
    assert finding in out["cases"][case]["problems"]


def test_a_split_group_on_the_batch_baseline_is_found_in_both_steps():
    out, _ = _audit(plant="batch_baseline")
    split = out["cases"]["split"]
    assert split["problems"] == ["group_baseline_foreign"] and len(split["trained"]) == 2


def test_a_batch_wide_scale_is_another_group_entering():
    """Centred on its own mean but scaled by the batch's σ: the baseline fit passes, the scale alone does not."""

    def batch_scale(r: Any, G: int, L: Any, request: dict[str, Any]) -> dict[str, Any]:
        out = numpy_arrival_target(r, G, L, request)
        for step, spec in zip(out["steps"], request["arrival"]["steps"]):
            rewards = np.array([x if x is not None else 0.0 for x in spec["reward"]])
            step["advantages"] = (np.asarray(step["advantages"]) * (1 + rewards.std())).tolist()
        return out

    out, findings = audit_arrival(batch_scale, {"max_staleness": 1})
    f = next(f for f in findings if f.property == "group_baseline_foreign")
    assert "scale_alone" in f.counterexample


def test_a_documented_mixing_is_a_deviation_naming_its_setting():
    settings = {"max_staleness": 1, "documented": {"group_mixed_versions": "partial_rollout: true"}}
    target = functools.partial(numpy_arrival_target, plant="mix_versions")
    _, findings = audit_arrival(target, settings)
    (f,) = findings
    assert (f.property, f.severity) == ("group_mixed_versions", "deviation") and "partial_rollout: true" in f.message


def test_without_a_staleness_bound_late_answers_are_not_judged_and_a_note_says_so():
    out, found = _audit({"max_staleness": None}, plant="ignore_staleness", max_staleness=None)
    assert "stale" not in out["cases"] and found == {"async_groups": "note"}


def test_a_refused_delivery_is_a_note_and_a_crash_a_fail():
    def refuses_none(r: Any, G: int, L: Any, request: dict[str, Any]) -> dict[str, Any]:
        if any(x is None for step in request["arrival"]["steps"] for x in step["reward"]):
            raise ValueError("a reward function returned None")
        return numpy_arrival_target(r, G, L, request)

    out, found = audit_arrival(refuses_none, {"max_staleness": 1})
    assert out["cases"]["none"]["outcome"] == "refused"
    assert {f.property: f.severity for f in found} == {"async_groups": "note"}

    def crashes(r: Any, G: int, L: Any, request: dict[str, Any]) -> dict[str, Any]:
        if any(n == 0 for step in request["arrival"]["steps"] for n in step["length"]):
            raise RuntimeError("division by zero tokens")
        return numpy_arrival_target(r, G, L, request)

    out, found = audit_arrival(crashes, {"max_staleness": 1})
    assert out["cases"]["empty"]["outcome"] == "crashed"
    assert {f.property: f.severity for f in found} == {"async_crash_or_nan": "fail"}


def test_an_answer_trained_twice_is_found():
    def twice(r: Any, G: int, L: Any, request: dict[str, Any]) -> dict[str, Any]:
        out = numpy_arrival_target(r, G, L, request)
        if len(out["steps"]) == 2:
            first = out["steps"][0]
            out["steps"][1]["trained"] += first["trained"][:4]  # the whole first group, as it was
            out["steps"][1]["advantages"] += first["advantages"][:4]
        return out

    _, found = audit_arrival(twice, {"max_staleness": 1})
    assert [(f.property, f.counterexample.get("answers")) for f in found] == [("group_baseline_foreign", [0, 1, 2, 3])]


def test_a_variant_without_a_baseline_is_not_judged_on_it():
    def raw(r: Any, G: int, L: Any, request: dict[str, Any]) -> dict[str, Any]:
        out = numpy_arrival_target(r, G, L, request)
        for step, spec in zip(out["steps"], request["arrival"]["steps"]):
            reward = dict(zip(spec["id"], spec["reward"]))
            step["advantages"] = [float(reward.get(i) or 0.0) for i in step["trained"]]
        return out

    out, found = audit_arrival(raw, {"max_staleness": 1})
    assert out["calibrated"] is False and {f.property: f.severity for f in found} == {"async_groups": "note"}


def test_the_gradient_audit_runs_the_probe_for_a_target_that_announces_it():
    from grpo_identity.checks.frameworks import answer_lengths
    from grpo_identity.checks.gradient import audit_gradient
    from grpo_identity.checks.measure.rollout import numpy_rollout_target

    def target(r: Any, G: int, L: Any = None, request: dict[str, Any] | None = None) -> Any:
        if request is not None and "arrival" in request:
            return numpy_arrival_target(r, G, L, request, plant="none_as_zero")
        out = numpy_rollout_target(r, G, answer_lengths(len(r)) if L is None else L)
        return out if L is not None else out["advantages"]

    target.grpo_identity_info = {"async_groups": {"max_staleness": 1}}  # type: ignore[attr-defined]
    report = audit_gradient(target, name="async")
    assert report.inferred.async_groups["cases"]["none"]["problems"] == ["reward_none_trained"]
    found = {f.property: f for f in report.findings}
    assert (
        found["reward_none_trained"].severity == "fail" and "as a reward of 0" in found["reward_none_trained"].message
    )
    assert report.verdict == "fail" and "asynchronous groups (staleness bound 1" in report.format()
    assert report.to_dict()["inferred"]["async_groups"]["max_staleness"] == 1


def test_a_case_the_driver_cannot_deliver_is_a_note_naming_it_and_whole_groups_it_cannot_train_end_the_probe():
    def synchronous(r: Any, G: int, L: Any, request: dict[str, Any]) -> dict[str, Any]:
        steps = request["arrival"]["steps"]
        if any(len(set(step["version"])) > 1 for step in steps):
            raise NotImplementedError("this trainer samples every answer at the current weights")
        return numpy_arrival_target(r, G, L, request)

    out, findings = audit_arrival(synchronous, {"max_staleness": None})
    assert out["cases"]["mixed"]["outcome"] == "unsupported"
    (note,) = findings
    assert note.property == "async_groups" and note.counterexample["unsupported"] == ["mixed"]
    assert "mixed not run (NotImplementedError: this trainer samples" in note.message

    def nothing(r: Any, G: int, L: Any, request: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError("no deliveries here")

    from grpo_identity.checks.calls.target import TargetError

    with pytest.raises(TargetError, match="whole fresh groups unsupported: NotImplementedError: no deliveries"):
        audit_arrival(nothing, {"max_staleness": 1})


def test_a_malformed_answer_ends_the_probe_as_malformed_not_as_a_refusal():
    def short_of_one(r: Any, G: int, L: Any, request: dict[str, Any]) -> dict[str, Any]:
        out = numpy_arrival_target(r, G, L, request)
        out["steps"][0]["advantages"] = out["steps"][0]["advantages"][:-1]
        return out

    with pytest.raises(ValueError, match="advantages for 12 trained answers"):
        audit_arrival(short_of_one, {"max_staleness": 1})
