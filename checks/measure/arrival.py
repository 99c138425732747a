"""The asynchronous-groups probe: groups that arrive short, split across steps, late or across weight versions,
and answers with no reward or no tokens (issue 32's third family).

A target whose info carries ``"async_groups"`` (a dict: ``max_staleness``, the most weight versions an answer may
lag the trainer by, None where the target has no bound; ``setting``, what chose it; ``documented``, finding names a
configuration documents, each with the setting that does) takes ``request = {"arrival": spec}`` as a fourth
argument.  ``spec["steps"]`` is a list of deliveries, trained in order; each is a dict of equal-length lists:
``id`` (the answer, unique in the request), ``group`` (its prompt), ``reward`` (a float, or None: no reward),
``length`` (its tokens, 0 allowed) and ``version`` (the weight version that generated it); ``spec["versions"]``
gives the trainer's weight version at each step and ``spec["G"]`` the configured group size.  The target returns
``{"steps": [{"trained": [ids], "advantages": [floats]}, ...]}``: the answers it trains on at each step (it may hold
an answer for a later step) and their advantages.  A ValueError refuses a delivery (the probe notes it).

The theorem's group is the answers sampled together from one policy: the identity g = σ(s̄₊ − s̄₋) holds on the
answers actually in it.  So for every group trained at a step, per weight version, the probe checks:

- **nothing of another group or of the batch enters it**: its advantages are what the target gives the same answers
  delivered alone, as one group (with the group's answers of no tokens at that step: sampled with it, a reward
  each); first on three whole fresh groups in one batch, where a difference is a batch statistic (the finding; in
  the cases a group is then judged against its own mean alone);
- **its baseline is its own mean**, where the target's whole groups are a·(r − r̄) with a > 0: Â = a·(r − r̄_B) with
  B the group's trained and empty answers — an answer left out, or a None filled with 0, is a rule the target
  applies alone too, so it is judged against the formula, not against the target;
- **no answer without a reward is pushed** (an advantage of exactly 0 is no push), **nothing beyond the staleness
  bound**, and **one weight version per baseline** (a group resumed across versions whose parts each have their own
  baseline is fine; one baseline over several versions is not one group of the theorem, unless the configuration
  documents it: a deviation naming the setting);
- every answer accounted for (none trained twice or never sent; none with a reward and tokens, within the bound, of
  its group's newest version, dropped while the rest of its group is trained); every advantage finite, no crash.

>>> out, findings = audit_arrival(numpy_arrival_target, {"max_staleness": 1})
>>> out["calibrated"], sorted(out["cases"]), findings
(True, ['empty', 'mixed', 'none', 'short', 'split', 'stale'], [])
>>> _, findings = audit_arrival(functools.partial(numpy_arrival_target, plant="batch_baseline"), {"max_staleness": 1})
>>> sorted({f.property for f in findings})  # the batch's mean, and its σ where the means happen to agree
['group_baseline_foreign', 'group_scale_foreign']
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import time
from typing import Any, Callable

import numpy as np

from grpo_identity.checks.measure.rollout import attempt
from grpo_identity.checks.report import Finding

__all__ = ["CASES", "audit_arrival", "group_order", "numpy_arrival_target"]

#: the configured group size and the trainer's weight version of the probe
G, VERSION = 4, 10
#: the probe's deliveries: what each case is about
CASES = {
    "short": "a group arrives with 3 of its 4 answers, between two whole groups",
    "split": "a group's answers arrive in two steps, 2 and 2, each beside another whole group",
    "stale": "a whole group generated one version beyond the staleness bound, and one at the bound",
    "mixed": "a group resumed across two weight versions (2 answers from each), all within the staleness bound",
    "none": "one answer of a group has no reward (None)",
    "empty": "one answer of a group has no tokens (its reward is 0)",
}
#: what the calibration delivers (its findings say so)
_WHOLE = "three whole fresh groups of 4 in one batch"
#: tolerance of the baseline and scale fits: float32 advantages
TOL = 1e-4


def _answers(group: int, rewards: list[float | None], version: int = VERSION, lengths: list[int] | None = None
             ) -> list[dict[str, Any]]:  # fmt: skip
    lengths = lengths or [3 + (i % 3) for i in range(len(rewards))]
    return [{"group": group, "reward": r, "length": n, "version": version} for r, n in zip(rewards, lengths)]


def _deliveries(case: str, staleness: int | None) -> list[list[dict[str, Any]]] | None:
    """The answers of each step of ``case`` (None where it does not apply to the staleness bound)."""
    whole = _answers(0, [1.0, 0.0, 0.0, 0.0]) + _answers(2, [1.0, 1.0, 1.0, 0.0])
    if case == "short":  # between two whole groups: a trainer that cuts fixed blocks of G mixes it with the next
        return [_answers(0, [1.0, 0.0, 0.0, 0.0]) + _answers(1, [1.0, 1.0, 0.0]) + _answers(2, [1.0, 1.0, 1.0, 0.0])]
    if case == "split":
        return [_answers(0, [1.0, 0.0, 0.0, 0.0]) + _answers(1, [1.0, 0.0]),
                _answers(2, [1.0, 1.0, 1.0, 0.0]) + _answers(1, [1.0, 1.0])]  # fmt: skip
    if case == "stale":
        if staleness is None:
            return None
        late = _answers(1, [1.0, 0.0, 1.0, 0.0], VERSION - staleness - 1)
        at_bound = _answers(3, [0.0, 1.0, 0.0, 0.0], VERSION - staleness)
        return [whole + late + at_bound]
    if case == "mixed":
        if staleness == 0:
            return None
        return [whole + _answers(1, [1.0, 0.0], VERSION) + _answers(1, [1.0, 1.0], VERSION - 1)]
    if case == "none":
        return [whole + _answers(1, [1.0, None, 0.0, 0.0])]
    return [whole + _answers(1, [1.0, 0.0, 1.0, 0.0], lengths=[3, 0, 4, 2])]


def group_order(groups: list[Any]) -> list[int]:
    """The positions of a delivery's answers group by group, each group where it first arrives (a trainer that
    lays its batch out in blocks per prompt).

    >>> group_order([0, 2, 1, 0, 2])
    [0, 3, 1, 4, 2]
    """
    return [j for g in dict.fromkeys(groups) for j, k in enumerate(groups) if k == g]


def _request(steps: list[list[dict[str, Any]]]) -> dict[str, Any]:
    spec: dict[str, Any] = {"steps": [], "versions": [VERSION] * len(steps), "G": G}
    n = 0
    for answers in steps:
        ids = list(range(n, n + len(answers)))
        n += len(answers)
        spec["steps"].append(
            {"id": ids, **{k: [a[k] for a in answers] for k in ("group", "reward", "length", "version")}}
        )
    return {"arrival": spec}


def _baseline_fit(rewards: np.ndarray, adv: np.ndarray, base: np.ndarray) -> tuple[float, float]:
    """a and the residual of Â = a·(r − mean(base)): the residual relative to max |Â| (0 where all Â are 0)."""
    d = rewards - base.mean()
    a = float(d @ adv / (d @ d)) if (d @ d) > 0 else 0.0
    scale = max(float(np.abs(adv).max()), 1e-12)
    return a, float(np.abs(adv - a * d).max() / scale)


def _deliver(target: Callable[..., Any], request: dict[str, Any]
             ) -> tuple[list[list[tuple[int, float]]] | None, str, str]:  # fmt: skip
    """The target's trained answers per step ((id, advantage) pairs, as it gave them), or None with how it declined
    ('refused', 'crashed', 'unsupported') and its message.  An answer of another shape is a ValueError: the probe's
    output is malformed (a note that ends it), not the target refusing."""
    from grpo_identity.checks.frameworks import answer_lengths
    from grpo_identity.checks.measure.infer import probe_batch

    r = probe_batch(G)
    given = copy.deepcopy(request)  # a target in this process may change what it is given; the probe reads its own
    out, (outcome, message) = attempt(functools.partial(target, r, G, answer_lengths(r.size), given))
    if out is None:
        return None, outcome, message
    steps = out["steps"] if isinstance(out, dict) and "steps" in out else None
    if not isinstance(steps, list) or len(steps) != len(request["arrival"]["steps"]):
        raise ValueError(f"{len(request['arrival']['steps'])} steps delivered, the answer is not a list of as many")
    got = []
    for s in steps:
        ids, adv = [int(i) for i in s["trained"]], np.asarray(s["advantages"], dtype=np.float64).reshape(-1)
        if adv.size != len(ids):
            raise ValueError(f"{adv.size} advantages for {len(ids)} trained answers")
        got.append(list(zip(ids, adv.tolist())))
    return got, "", ""


def _close(measured: np.ndarray, expected: np.ndarray) -> bool:
    return bool(np.all(np.abs(measured - expected) <= TOL * max(1.0, float(np.abs(expected).max(initial=0.0)))))


@dataclasses.dataclass
class _Probe:
    """What every case is judged with: the target, its staleness bound, whether whole fresh groups in one batch get
    what each gets alone (``isolated``: no batch statistic, so a group's advantages can be judged against the same
    answers delivered alone) and are centred on their mean with a positive scale (``centred``: a group's baseline
    is then checked against its own mean, whatever its scale); the groups delivered alone, memoised."""

    target: Callable[..., Any]
    staleness: int | None
    isolated: bool = True
    centred: bool = True
    memo: dict[tuple[Any, ...], np.ndarray | None] = dataclasses.field(default_factory=dict)

    def within_bound(self, lag: int) -> bool:
        """Whether an answer ``lag`` weight versions behind the trainer may be trained (always, with no bound)."""
        return self.staleness is None or lag <= self.staleness

    def alone(self, answers: list[dict[str, Any]]) -> np.ndarray | None:
        """The advantages of ``answers`` delivered as the only group of a fresh step at the trainer's version, in
        their order (None where the target declines them, or leaves one untrained)."""
        key = tuple((a["reward"], a["length"]) for a in answers)
        if key not in self.memo:
            group = [{**a, "group": 0, "version": VERSION} for a in answers]
            steps, _, _ = _deliver(self.target, _request([group]))
            got = dict(steps[0]) if steps is not None else {}
            self.memo[key] = np.array([got[i] for i in range(len(group))]) if len(got) == len(group) else None
        return self.memo[key]


def audit_arrival(
    target: Callable[..., Any], settings: dict[str, Any], cases: tuple[str, ...] = tuple(CASES)
) -> tuple[dict[str, Any], list[Finding]]:
    """Probe an asynchronous-groups target (the module docstring): the measurements and their findings."""
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise ValueError(f"no asynchronous-groups case {unknown[0]!r}; the cases: {', '.join(CASES)}")
    t0 = time.perf_counter()
    staleness = settings.get("max_staleness")
    probe = _Probe(target, None if staleness is None else int(staleness))
    calibration = _calibrate(probe)
    out: dict[str, Any] = {"max_staleness": probe.staleness, "calibrated": probe.centred, "isolated": probe.isolated,
                           "calibration": [f.property for f in calibration], "cases": {}}  # fmt: skip
    problems = calibration
    crashed = any(f.property == "async_crash_or_nan" for f in calibration)
    for case in cases if not crashed else ():
        steps = _deliveries(case, probe.staleness)
        if steps is None:
            continue
        request = _request(steps)
        got, outcome, message = _deliver(target, request)
        if got is None:  # refused, crashed, or the driver cannot deliver it to this framework (unsupported)
            out["cases"][case] = {"outcome": outcome, "message": message}
            if outcome == "crashed":
                said = f"{_MESSAGES['async_crash_or_nan']} ({message})"
                problems.append(Finding("async_crash_or_nan", said, {"case": case}))
            continue
        by_step = _judge(probe, request["arrival"], got)
        found = [f for step in by_step for f in step]
        out["cases"][case] = {
            "outcome": "trained",
            "trained": [sorted(i for i, _ in s) for s in got],
            "problems": list(dict.fromkeys(f.property for f in found)),
            "problems_by_step": [list(dict.fromkeys(f.property for f in step)) for step in by_step],
        }
        problems += [dataclasses.replace(f, counterexample={"case": case, **f.counterexample}) for f in found]
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out, _findings(out, problems, settings)


def _calibrate(probe: _Probe) -> list[Finding]:
    """Whole fresh groups in one batch: whether each gets what it gets alone (``probe.isolated``; else what entered
    it is the finding, and in the cases a group is judged against its own mean only) and is a·(r − r̄), a > 0
    (``probe.centred``: the own-mean check applies).  A crash there is the finding, and no case is run; a refusal
    ends the probe (a note)."""
    from grpo_identity.checks.calls.target import TargetError

    groups = [[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0]]
    whole = [a for g, rewards in enumerate(groups) for a in _answers(g, list(rewards))]
    steps, outcome, message = _deliver(probe.target, _request([whole]))
    if steps is None and outcome == "crashed":
        return [Finding("async_crash_or_nan", f"{_MESSAGES['async_crash_or_nan']} ({message})", {"case": "whole"})]
    if steps is None:
        raise TargetError(f"whole fresh groups {outcome}: {message}")
    got, found = dict(steps[0]), []
    for g in range(len(groups)):
        ids = [i for i, a in enumerate(whole) if a["group"] == g]
        if any(i not in got for i in ids) or len(got) != len(steps[0]):
            probe.isolated = probe.centred = False
            given = [i for i, _ in steps[0]]
            repeated = sorted({i for i in given if given.count(i) > 1 or not 0 <= i < len(whole)})
            dropped = [i for i in range(len(whole)) if i not in got]
            said = f"{_MESSAGES['answers_lost_or_repeated']} (whole groups: answers {repeated or dropped})"
            return [Finding("answers_lost_or_repeated", said, {"case": "whole", "repeated": repeated,
                                                                "dropped": dropped})]  # fmt: skip
        adv, r = np.array([got[i] for i in ids]), np.array(groups[g])
        if not np.isfinite(adv).all():
            said = f"{_MESSAGES['async_crash_or_nan']} (whole group {g}: advantages {adv.tolist()})"
            return [Finding("async_crash_or_nan", said, {"case": "whole", "group": g})]
        alone = probe.alone([whole[i] for i in ids])
        if alone is not None and not _close(adv, alone) and probe.isolated:
            probe.isolated = False
            found.append(dataclasses.replace(f := _contamination(adv, alone, {"group": g, "answers": ids}),
                                             counterexample={"case": "whole", **f.counterexample}))  # fmt: skip
        scale, residual = _baseline_fit(r, adv, r)
        probe.centred &= residual <= TOL and scale > 0
    return found


def _judge(probe: _Probe, spec: dict[str, Any], got: list[list[tuple[int, float]]]) -> list[list[Finding]]:
    """The problems of one case's training, per step: each group's answers trained at the step, per weight version
    (:func:`_part`), and the answers trained twice, never sent, or dropped (:func:`_accounting`)."""
    answer = {i: {k: step[k][j] for k in ("group", "reward", "length", "version")} | {"step": t}
              for t, step in enumerate(spec["steps"]) for j, i in enumerate(step["id"])}  # fmt: skip
    by_step: list[list[Finding]] = []
    for t, pairs in enumerate(got):
        trained = dict(pairs)
        found = []
        # an answer with no reward given an advantage of exactly 0 moves nothing: it is not trained in effect
        pushed = [i for i in trained if i in answer and not (answer[i]["reward"] is None and trained[i] == 0.0)]
        for g in dict.fromkeys(answer[i]["group"] for i in pushed):
            ids = [i for i in pushed if answer[i]["group"] == g]
            parts = [
                [i for i in ids if answer[i]["version"] == v] for v in dict.fromkeys(answer[i]["version"] for i in ids)
            ]
            verdicts = [_part(probe, answer, trained, part, spec["versions"][t]) for part in parts]
            if len(parts) > 1 and (any(verdicts) or not probe.isolated):
                found += _mixed(probe, answer, trained, ids, parts, verdicts)
            else:
                found += [f for v in verdicts for f in v]
        by_step.append(found)
    by_step[-1] += _accounting(probe, answer, got, spec["versions"])
    return by_step


def _part(probe: _Probe, answer: dict[int, dict[str, Any]], trained: dict[int, float], ids: list[int], now: int
          ) -> list[Finding]:  # fmt: skip
    """The problems of one group's answers of one weight version trained together at a step (trainer version
    ``now``): non-finite, a None pushed, beyond the staleness bound, else a baseline or scale not its own."""
    adv = np.array([trained[i] for i in ids])
    where = {"group": answer[ids[0]]["group"], "answers": ids}
    if not np.isfinite(adv).all():
        return [Finding("async_crash_or_nan", f"{_MESSAGES['async_crash_or_nan']} (advantages {adv.tolist()})", where)]
    problems = []
    if any(answer[i]["reward"] is None for i in ids):
        zero = [{**answer[i], "reward": answer[i]["reward"] or 0.0} for i in ids]
        as_zero = (expected := probe.alone(zero)) is not None and _close(adv, expected)
        said = _MESSAGES["reward_none_trained"] + (", as a reward of 0 in its group's baseline" if as_zero else "")
        problems.append(Finding("reward_none_trained", said, where))
    lag = max(now - answer[i]["version"] for i in ids)
    if not probe.within_bound(lag):
        said = f"{_MESSAGES['staleness_ignored']} ({lag} versions behind, the bound {probe.staleness})"
        problems.append(Finding("staleness_ignored", said, {"lag": lag, **where}))
    return problems or _baseline(probe, answer, adv, ids, where)


def _baseline(probe: _Probe, answer: dict[int, dict[str, Any]], adv: np.ndarray, ids: list[int],
              where: dict[str, Any]) -> list[Finding]:  # fmt: skip
    """Whether the answers' advantages are their group's own: what the target gives the group alone (the trained
    answers and the group's answers with no tokens at that step: sampled with it, a reward each), so nothing of
    another group or of the batch entered; and, where the target's whole groups are a·(r − r̄), centred on the
    group's mean with its empty answers in it and nothing filled in (a rule the target applies alone as well)."""
    first = answer[ids[0]]
    same = ("group", "step", "version")
    empty = [i for i, a in answer.items() if i not in ids and a["length"] == 0 and a["reward"] is not None
             and all(a[k] == first[k] for k in same)]  # fmt: skip
    nones = [i for i, a in answer.items() if a["reward"] is None and all(a[k] == first[k] for k in same)]
    as_zero = f"{_MESSAGES['reward_none_trained']}: as a reward of 0 in its group's baseline, its own advantage 0"
    expected = probe.alone([answer[i] for i in ids + empty]) if probe.isolated else None
    if expected is not None and not _close(adv, expected[: len(ids)]):
        zeros = [{**answer[i], "reward": 0.0} for i in nones]
        filled = probe.alone([answer[i] for i in ids + empty] + zeros) if nones else None
        if filled is not None and _close(adv, filled[: len(ids)]):
            return [Finding("reward_none_trained", as_zero, {**where, "none": nones})]
        return [_contamination(adv, expected[: len(ids)], where)]
    if not probe.centred:
        return []
    r, group = (np.array([answer[i]["reward"] for i in part], dtype=np.float64) for part in (ids, ids + empty))
    if _baseline_fit(r, adv, group)[1] <= TOL:
        return []
    if empty and _baseline_fit(r, adv, r)[1] <= TOL:
        return [Finding("empty_answer_dropped", _MESSAGES["empty_answer_dropped"], where)]
    if nones and _baseline_fit(r, adv, np.concatenate([r, np.zeros(len(nones))]))[1] <= TOL:
        return [Finding("reward_none_trained", as_zero, {**where, "none": nones})]
    said = f"{_MESSAGES['group_baseline_foreign']} (group {first['group']}: {_fmt(adv)} is not a·(r − r̄) of it)"
    return [Finding("group_baseline_foreign", said, where)]


def _contamination(adv: np.ndarray, expected: np.ndarray, where: dict[str, Any]) -> Finding:
    """A group's advantages that differ from the same answers' alone: another scale (``group_scale_foreign``), or
    another baseline."""
    scale = float(adv @ expected / (expected @ expected)) if expected @ expected > 0 else 0.0
    evidence = {"advantages": adv.tolist(), "alone": expected.tolist(), **where}
    if scale > 0 and _close(adv, scale * expected):
        said = f"{_MESSAGES['group_scale_foreign']} ({scale:.6g}× what its answers get alone)"
        return Finding("group_scale_foreign", said, {"scale": scale, **evidence})
    said = f"{_MESSAGES['group_baseline_foreign']} (group {where['group']}: {_fmt(adv)}, alone {_fmt(expected)})"
    return Finding("group_baseline_foreign", said, evidence)


def _mixed(probe: _Probe, answer: dict[int, dict[str, Any]], trained: dict[int, float], ids: list[int],
           parts: list[list[int]], verdicts: list[list[Finding]]) -> list[Finding]:  # fmt: skip
    """A group trained at one step with answers of several weight versions, not each version on its own baseline:
    one baseline over the versions (``group_mixed_versions``; the whole group alone where the target is isolated,
    else a·(r − r̄) over the whole group and not over each part, where it is centred), else the parts' problems."""
    adv = np.array([trained[i] for i in ids])
    if probe.isolated:
        expected = probe.alone([answer[i] for i in ids])
        one = expected is not None and _close(adv, expected)
    else:
        r = {i: float(answer[i]["reward"] or 0.0) for i in ids}

        def fits(part: list[int]) -> bool:
            rewards = np.array([r[i] for i in part])
            return _baseline_fit(rewards, np.array([trained[i] for i in part]), rewards)[1] <= TOL

        one = probe.centred and fits(ids) and not all(fits(part) for part in parts)
    if not one:
        return [f for v in verdicts for f in v]
    versions = sorted({answer[i]["version"] for i in ids})
    said = f"{_MESSAGES['group_mixed_versions']} (versions {versions})"
    return [Finding("group_mixed_versions", said, {"group": answer[ids[0]]["group"], "versions": versions,
                                                   "answers": ids})]  # fmt: skip


def _accounting(probe: _Probe, answer: dict[int, dict[str, Any]], got: list[list[tuple[int, float]]],
                versions: list[int]) -> list[Finding]:  # fmt: skip
    """Answers trained twice or never sent; and answers that should have been trained (a reward and tokens, within
    the bound, of their group's newest version) never trained while the rest of their group was."""
    ids = [i for pairs in got for i, _ in pairs]
    repeated = sorted({i for i in ids if ids.count(i) > 1 or i not in answer})
    trained_groups = {answer[i]["group"] for i in ids if i in answer}
    newest = {g: max(a["version"] for a in answer.values() if a["group"] == g) for g in trained_groups}
    dropped = [i for i, a in answer.items() if i not in ids and a["group"] in trained_groups
               and a["reward"] is not None and a["length"] > 0 and a["version"] == newest[a["group"]]
               and probe.within_bound(versions[a["step"]] - a["version"])]  # fmt: skip
    if not repeated and not dropped:
        return []
    said = ", ".join(
        ([f"answers {repeated} trained twice or never sent"] if repeated else [])
        + ([f"answers {dropped} never trained while the rest of their group was"] if dropped else [])
    )
    return [Finding("answers_lost_or_repeated", f"{_MESSAGES['answers_lost_or_repeated']} ({said})",
                    {"repeated": repeated, "dropped": dropped})]  # fmt: skip


def _fmt(values: np.ndarray) -> str:
    return "[" + ", ".join(f"{v:.4g}" for v in values) + "]"


def _findings(out: dict[str, Any], problems: list[Finding], settings: dict[str, Any]) -> list[Finding]:
    """One finding per name (its first case), the case said first; a deviation where the configuration documents it
    (``settings["documented"]``: name → the setting)."""
    documented = settings.get("documented") or {}
    found: dict[str, Finding] = {}
    for f in problems:
        if f.property in found:
            continue
        message = f"{CASES.get(f.counterexample['case'], _WHOLE)}: {f.message}"
        if f.property in documented:
            f = dataclasses.replace(f, severity="deviation")
            message += f"; so configured ({documented[f.property]})"
        found[f.property] = dataclasses.replace(f, message=message)
    notes = []
    lost = "answers_lost_or_repeated" in out["calibration"]
    if not out["isolated"] and not lost:
        notes.append("whole fresh groups in one batch get other advantages than alone: in the cases a group is not "
                     "judged against its answers alone")  # fmt: skip
    if lost:
        notes.append("whole fresh groups were not each trained once: no group's baseline is judged in the cases")
    if not out["calibrated"]:
        notes.append("whole fresh groups' advantages are not a·(r − r̄), a > 0: where a group is not delivered alone, "
                     "and for its empty answers, its baseline is not judged")  # fmt: skip
    if out["max_staleness"] is None:
        notes.append("the target announces no staleness bound: late answers are not checked")
    refused = [c for c, v in out["cases"].items() if v["outcome"] == "refused"]
    if refused:
        notes.append(f"refused (a ValueError): {', '.join(refused)}")
    unsupported = {c: v["message"] for c, v in out["cases"].items() if v["outcome"] == "unsupported"}
    for said in dict.fromkeys(unsupported.values()):
        notes.append(f"{', '.join(c for c, s in unsupported.items() if s == said)} not run ({said})")
    evidence = {"refused": refused, "unsupported": sorted(unsupported)}
    extra = [Finding("async_groups", "; ".join(notes), evidence, "note")] if notes else []
    return [*found.values(), *extra]


_MESSAGES = {
    "group_baseline_foreign": "a group's baseline is not its own answers' mean (another group's reward or a "
    "batch-wide mean entered it, or one of its answers was left out)",
    "group_scale_foreign": "a group's advantages are centred on its own answers but scaled otherwise than the same "
    "answers alone (a batch-wide σ)",
    "empty_answer_dropped": "the answer with no tokens is left out of its group's baseline; it was sampled with the "
    "group and has a reward, so the others' advantages move",
    "reward_none_trained": "an answer with no reward is trained on",
    "staleness_ignored": "answers older than the staleness bound are trained on",
    "group_mixed_versions": "one group's baseline mixes answers of several weight versions: not one group of the "
    "theorem (answers sampled from one policy)",
    "async_crash_or_nan": "the step crashed or gave non-finite advantages",
    "answers_lost_or_repeated": "answers are trained twice, never sent, or lost",
}


# --- a reference target, for tests and the docs -------------------------------------------------------------
def numpy_arrival_target(
    rewards: Any, G: int, lengths: Any, request: dict[str, Any], *, max_staleness: int | None = 1,
    plant: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """An asynchronous trainer made of numpy: each step it drops answers beyond ``max_staleness`` and answers with
    no reward, keeps a group's answers of its newest weight version, and gives each group the GRPO advantage
    (r − r̄)/(σ + 1e-4) over the answers it kept (σ the sample std; a lone answer gets 0).  ``plant`` breaks it as
    released code has: ``batch_baseline`` (a group short of G takes the batch's mean and σ: slime #2230, AReaL
    #1419), ``strides`` (the step's rows cut into blocks of G whatever their groups, a last partial block divided by
    the ε alone: AReaL 1.0.4's ``Normalization``), ``batch_scale`` (every group divided by the step's σ),
    ``ignore_staleness`` (miles #1829), ``mix_versions`` (a group resumed across versions kept whole: slime #2092),
    ``none_as_zero`` (a None reward taken as 0), ``none_as_nan`` (taken as NaN), ``drop_empty`` (answers with no
    tokens dropped before the group's statistics)."""
    spec = request["arrival"]
    steps = []
    for step, version in zip(spec["steps"], spec["versions"]):
        rows = [dict(zip(("id", "group", "reward", "length", "version"), v))
                for v in zip(step["id"], step["group"], step["reward"], step["length"], step["version"])]  # fmt: skip
        kept = [row for row in rows if _keeps(row, version, max_staleness, plant)]
        if plant != "mix_versions":
            newest = {row["group"]: max(x["version"] for x in kept if x["group"] == row["group"]) for row in kept}
            kept = [row for row in kept if row["version"] == newest[row["group"]]]
        for row in kept:
            if row["reward"] is None:
                row["reward"] = 0.0 if plant == "none_as_zero" else math.nan
        every = np.array([row["reward"] for row in kept], dtype=np.float64)
        if plant == "strides":
            steps.append({"trained": [row["id"] for row in kept], "advantages": _strides(every, spec["G"]).tolist()})
            continue
        trained, adv = [], []
        for g in dict.fromkeys(row["group"] for row in kept):
            cohort = [row for row in kept if row["group"] == g]
            r = np.array([row["reward"] for row in cohort], dtype=np.float64)
            base = every if plant == "batch_baseline" and len(cohort) < spec["G"] else r
            sd = float(np.std(every if plant == "batch_scale" else base, ddof=1)) if base.size > 1 else 0.0
            trained += [row["id"] for row in cohort]
            adv += ((r - base.mean()) / (sd + 1e-4) if base.size > 1 else np.zeros_like(r)).tolist()
        steps.append({"trained": trained, "advantages": adv})
    return {"steps": steps}


def _strides(r: np.ndarray, G: int) -> np.ndarray:
    """Blocks of G rows normalised each, the rows after the last whole block at mean 0 and σ 0 (AReaL #1419)."""
    out = r / 1e-4
    for start in range(0, r.size - G + 1, G):
        block = r[start : start + G]
        out[start : start + G] = (block - block.mean()) / (block.std(ddof=1) + 1e-4)
    return out


def _keeps(row: dict[str, Any], version: int, max_staleness: int | None, plant: str | None) -> bool:
    if plant == "drop_empty" and row["length"] == 0:
        return False
    if row["reward"] is None and plant not in ("none_as_zero", "none_as_nan"):
        return False
    stale = max_staleness is not None and version - row["version"] > max_staleness
    return not stale or plant == "ignore_staleness"
