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
        ("batch_baseline", "group_baseline_foreign", "short"),  # slime #2230, AReaL #1419 (its σ too: see below)
        ("ignore_staleness", "staleness_ignored", "stale"),  # miles #1829
        ("mix_versions", "group_mixed_versions", "mixed"),  # slime #2092
        ("none_as_zero", "reward_none_trained", "none"),
        ("none_as_nan", "async_crash_or_nan", "none"),
        ("drop_empty", "empty_answer_dropped", "empty"),
        ("batch_scale", "group_scale_foreign", None),  # TRL's scale_rewards="batch", undocumented: whole groups
    ],
)
def test_each_planted_failure_gets_its_own_finding(plant: str, finding: str, case: str):
    out, found = _audit(plant=plant)
    # the batch's σ beside its mean: where the batch's mean happens to be the group's, the scale is still not its own
    also = {"group_scale_foreign": "fail"} if plant == "batch_baseline" else {}
    also |= {"async_groups": "note"} if plant == "batch_scale" else {}  # a group's own baseline is then not judged
    assert found == {finding: "fail", **also}
    assert finding in (out["cases"][case]["problems"] if case else out["calibration"])


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
    f = next(f for f in findings if f.property == "group_scale_foreign")
    assert f.counterexample["case"] == "whole" and f.counterexample["scale"] != 1
    assert "group_baseline_foreign" not in {f.property for f in findings} and out["isolated"] is False


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
    assert [(f.property, f.counterexample.get("repeated")) for f in found] == [
        ("answers_lost_or_repeated", [0, 1, 2, 3])
    ]


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


def _rewrite(rule):
    """The reference trainer with each step's advantages replaced by ``rule(step, spec) -> (trained, advantages)``."""

    def target(r: Any, G: int, L: Any, request: dict[str, Any]) -> dict[str, Any]:
        out = numpy_arrival_target(r, G, L, request)
        for step, spec in zip(out["steps"], request["arrival"]["steps"]):
            step["trained"], step["advantages"] = rule(step, spec)
        return out

    return target


def test_groups_cut_into_fixed_strides_are_found_in_the_short_and_split_cases():
    out, found = _audit(plant="strides")  # AReaL 1.0.4's Normalization (areal #1419)
    assert found == {"group_baseline_foreign": "fail"}
    assert out["cases"]["short"]["problems"] == ["group_baseline_foreign"] and out["isolated"]


def test_a_split_groups_two_parts_on_the_batch_baseline_are_each_found():
    out, _ = _audit(plant="batch_baseline")
    assert out["cases"]["split"]["problems_by_step"] == [["group_baseline_foreign"]] * 2


def test_a_group_resumed_across_versions_with_a_baseline_per_version_is_no_mixing():
    def per_version(step, spec):  # each (group, version) part its own GRPO group
        keys = list(zip(spec["group"], spec["version"]))
        advantages = []
        for j, key in enumerate(keys):
            r = np.array([spec["reward"][k] or 0.0 for k in range(len(keys)) if keys[k] == key])
            sd = r.std(ddof=1) if r.size > 1 else 0.0
            advantages.append(((spec["reward"][j] or 0.0) - r.mean()) / (sd + 1e-4) if r.size > 1 else 0.0)
        keep = [j for j in range(len(keys)) if spec["reward"][j] is not None]
        return [spec["id"][j] for j in keep], [advantages[j] for j in keep]

    out, findings = audit_arrival(_rewrite(per_version), {"max_staleness": 1, "documented": {}})
    assert out["cases"]["mixed"]["problems"] == []
    assert "group_mixed_versions" not in {f.property for f in findings}


def test_a_none_filled_with_0_whose_own_advantage_is_0_is_still_found():
    def zero_in_baseline(step, spec):
        trained, advantages = [], []
        for g in dict.fromkeys(spec["group"]):
            rows = [j for j, k in enumerate(spec["group"]) if k == g]
            r = np.array([spec["reward"][j] or 0.0 for j in rows])
            a = (r - r.mean()) / (r.std(ddof=1) + 1e-4)
            trained += [spec["id"][j] for j in rows]
            advantages += [0.0 if spec["reward"][j] is None else float(v) for j, v in zip(rows, a)]
        return trained, advantages

    out, findings = audit_arrival(_rewrite(zero_in_baseline), {"max_staleness": None})
    f = next(f for f in findings if f.property == "reward_none_trained")
    assert "its own advantage 0" in f.message and out["cases"]["none"]["problems"] == ["reward_none_trained"]


def test_a_dropped_answer_and_a_repeated_id_are_found():
    def drops_one(r: Any, G: int, L: Any, request: dict[str, Any]) -> dict[str, Any]:
        """The short group's last answer left out of the step, its group baselined without it."""
        spec = request["arrival"]
        for step in spec["steps"]:
            if step["group"].count(1) == 3:
                keep = [j for j in range(len(step["id"])) if j != len(step["id"]) - 1]
                step.update({k: [v[j] for j in keep] for k, v in step.items()})
        return numpy_arrival_target(r, G, L, request)

    out, findings = audit_arrival(drops_one, {"max_staleness": 1})
    (f,) = findings
    assert f.property == "answers_lost_or_repeated" and f.counterexample["dropped"] == [10]
    assert out["cases"]["short"]["problems"] == ["answers_lost_or_repeated"]

    def repeats_one(step, spec):
        return step["trained"] + step["trained"][:1], step["advantages"] + step["advantages"][:1]

    _, findings = audit_arrival(_rewrite(repeats_one), {"max_staleness": 1})
    assert any(f.property == "answers_lost_or_repeated" and f.counterexample.get("repeated") for f in findings)


def test_advantages_that_fall_with_the_reward_are_not_taken_as_centred():
    def negated(step, spec):
        return step["trained"], [-a for a in step["advantages"]]

    out, found = audit_arrival(_rewrite(negated), {"max_staleness": 1})
    assert out["calibrated"] is False and [f.property for f in found] == ["async_groups"]


def test_a_crash_on_whole_fresh_groups_is_a_fail_and_no_case_runs():
    def crashes(r: Any, G: int, L: Any, request: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("no device")

    out, found = audit_arrival(crashes, {"max_staleness": 1})
    assert out["cases"] == {} and [(f.property, f.severity) for f in found] == [("async_crash_or_nan", "fail")]


def test_an_unknown_case_is_refused_by_name():
    with pytest.raises(ValueError, match="no asynchronous-groups case 'late'"):
        audit_arrival(numpy_arrival_target, {"max_staleness": 1}, cases=("late",))


def _batch_sigma(per_version: bool, short_on_batch_mean: bool):
    """A trainer dividing every group by the step's σ (a documented batch scale), centring each group on its own
    mean (per weight version where ``per_version``), a short group on the batch's mean where asked."""

    def rule(step, spec):
        keep = [j for j in range(len(spec["id"])) if spec["reward"][j] is not None and spec["version"][j] >= 9]
        r = np.array([spec["reward"][j] for j in keep], dtype=np.float64)
        key = [(spec["group"][j], spec["version"][j] if per_version else 0) for j in keep]
        sd = r.std(ddof=1)
        advantages = []
        for j, k in enumerate(key):
            members = np.array([r[m] for m in range(len(keep)) if key[m] == k])
            short = short_on_batch_mean and len(members) < spec["G"] if "G" in spec else False
            advantages.append((r[j] - (r.mean() if short else members.mean())) / (sd + 1e-4))
        return [spec["id"][j] for j in keep], advantages

    return rule


def _with_g(rule):
    def target(r: Any, G: int, L: Any, request: dict[str, Any]) -> dict[str, Any]:
        spec = request["arrival"]
        steps = [dict(zip(("trained", "advantages"), rule(step, {**step, "G": spec["G"]}))) for step in spec["steps"]]
        return {"steps": steps}

    return target


def test_under_a_documented_batch_scale_a_baseline_per_version_is_no_mixing_and_a_batch_mean_is_still_found():
    settings = {"max_staleness": 1, "documented": {"group_scale_foreign": "scale=batch"}}
    out, findings = audit_arrival(_with_g(_batch_sigma(True, False)), settings)
    assert out["isolated"] is False and out["calibrated"] is True
    assert {f.property: f.severity for f in findings} == {"group_scale_foreign": "deviation", "async_groups": "note"}
    out, _ = audit_arrival(_with_g(_batch_sigma(False, False)), settings)  # one baseline over both versions
    assert out["cases"]["mixed"]["problems"] == ["group_mixed_versions"]
    out, _ = audit_arrival(_with_g(_batch_sigma(True, True)), settings)
    assert out["cases"]["short"]["problems"] == ["group_baseline_foreign"]  # the centred check still runs


def test_a_trainer_that_replays_the_truncation_under_a_cap_below_1_is_not_flagged():
    from grpo_identity.checks.measure.rollout import audit_rollout, numpy_rollout_target

    for cap in (0.5, 0.8):
        target = functools.partial(numpy_rollout_target, cap=cap)
        out, findings = audit_rollout(target, {"estimator": "token_truncate", "cap": cap, "sampler": "top_k=3"})
        assert out["support"] in ("replayed", "indistinguishable")
        assert "rollout_support_truncated" not in {f.property for f in findings}
