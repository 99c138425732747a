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
answers actually in it.  So for every group trained at a step (its *cohort*), the probe checks absolutely:

- **its baseline is its own**: Âᵢ = a·(rᵢ − r̄_B) for one a ≥ 0, with B the cohort (and the group's answers with no
  tokens: they are sampled answers with a reward, and weigh nothing in the gradient whether trained or not) — no
  other group's reward, no answer dropped from the step, no reward filled in; and its scale is the one the target
  gives B called alone as a group (a batch-wide σ is another group entering);
- **no answer without a reward is trained** (a None filled with 0 enters the baseline);
- **no answer beyond the staleness bound is trained**, where the target has one;
- **one weight version**: a cohort whose answers come from several policies is not one group of the theorem (unless
  the configuration documents that it mixes them: a deviation naming the setting);
- every advantage is finite, and no delivery crashes the step.

The probe first calibrates on whole, fresh groups: a target whose advantages are not centred on the group's mean
there (a variant with no baseline) gets the baseline check skipped, with a note.

>>> out, findings = audit_arrival(numpy_arrival_target, {"max_staleness": 1})
>>> out["calibrated"], sorted(out["cases"]), findings
(True, ['empty', 'mixed', 'none', 'short', 'split', 'stale'], [])
>>> _, findings = audit_arrival(functools.partial(numpy_arrival_target, plant="batch_baseline"), {"max_staleness": 1})
>>> sorted({f.property for f in findings})
['group_baseline_foreign']
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import Any, Callable

import numpy as np

from grpo_identity.checks.measure.rollout import attempt
from grpo_identity.checks.report import Finding

__all__ = ["CASES", "audit_arrival", "numpy_arrival_target"]

#: the configured group size and the trainer's weight version of the probe
G, VERSION = 4, 10
#: the probe's deliveries: what each case is about
CASES = {
    "short": "a group arrives with 3 of its 4 answers, beside whole groups",
    "split": "a group's answers arrive in two steps, 2 and 2, each beside another whole group",
    "stale": "a whole group generated one version beyond the staleness bound, and one at the bound",
    "mixed": "a group resumed across two weight versions (2 answers from each), all within the staleness bound",
    "none": "one answer of a group has no reward (None)",
    "empty": "one answer of a group has no tokens (its reward is 0)",
}
#: tolerance of the baseline and scale fits: float32 advantages
TOL = 1e-4


def _answers(group: int, rewards: list[float | None], version: int = VERSION, lengths: list[int] | None = None
             ) -> list[dict[str, Any]]:  # fmt: skip
    lengths = lengths or [3 + (i % 3) for i in range(len(rewards))]
    return [{"group": group, "reward": r, "length": n, "version": version} for r, n in zip(rewards, lengths)]


def _deliveries(case: str, staleness: int | None) -> list[list[dict[str, Any]]] | None:
    """The answers of each step of ``case`` (None where it does not apply to the staleness bound)."""
    whole = _answers(0, [1.0, 0.0, 0.0, 0.0]) + _answers(2, [1.0, 1.0, 1.0, 0.0])
    if case == "short":
        return [whole + _answers(1, [1.0, 1.0, 0.0])]
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


def _deliver(target: Callable[..., Any], request: dict[str, Any]) -> tuple[list[dict[int, float]] | None, str, str]:
    """The target's trained answers per step (id → advantage), or None with how it declined ('refused', 'crashed',
    'unsupported') and its message.  An answer of another shape is a ValueError: the probe's output is malformed
    (a note that ends it), not the target refusing."""
    from grpo_identity.checks.frameworks import answer_lengths
    from grpo_identity.checks.measure.infer import probe_batch

    r = probe_batch(G)
    out, (outcome, message) = attempt(functools.partial(target, r, G, answer_lengths(r.size), request))
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
        got.append(dict(zip(ids, adv.tolist())))
    return got, "", ""


def _baseline_fit(rewards: np.ndarray, adv: np.ndarray, base: np.ndarray) -> tuple[float, float]:
    """a and the residual of Â = a·(r − mean(base)): the residual relative to max |Â| (0 where all Â are 0)."""
    d = rewards - base.mean()
    a = float(d @ adv / (d @ d)) if (d @ d) > 0 else 0.0
    scale = max(float(np.abs(adv).max()), 1e-12)
    return a, float(np.abs(adv - a * d).max() / scale)


def audit_arrival(
    target: Callable[..., Any], settings: dict[str, Any], cases: tuple[str, ...] = tuple(CASES)
) -> tuple[dict[str, Any], list[Finding]]:
    """Probe an asynchronous-groups target (the module docstring): the measurements and their findings."""
    t0 = time.perf_counter()
    staleness = settings.get("max_staleness")
    staleness = None if staleness is None else int(staleness)
    calibrated = _calibrate(target)
    out: dict[str, Any] = {"max_staleness": staleness, "calibrated": calibrated, "cases": {}}
    problems: list[Finding] = []
    for case in cases:
        steps = _deliveries(case, staleness)
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
        found = _judge(target, case, request["arrival"], got, staleness, calibrated)
        names = list(dict.fromkeys(f.property for f in found))
        out["cases"][case] = {"outcome": "trained", "trained": [sorted(s) for s in got], "problems": names}
        problems += [dataclasses.replace(f, counterexample={"case": case, **f.counterexample}) for f in found]
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out, _findings(out, problems, settings)


def _calibrate(target: Callable[..., Any]) -> bool:
    """Whether the target's advantages of whole fresh groups are centred on their group's mean (else the baseline
    check does not apply: a variant without a baseline)."""
    from grpo_identity.checks.calls.target import TargetError

    whole = _answers(0, [1.0, 0.0, 0.0, 0.0]) + _answers(1, [1.0, 1.0, 1.0, 0.0]) + _answers(2, [0.0, 1.0, 1.0, 0.0])
    request = _request([whole])
    steps, outcome, message = _deliver(target, request)
    if steps is None:  # a target that cannot train whole fresh groups is not probed further
        raise TargetError(f"whole fresh groups {outcome}: {message}")
    got = steps[0]
    spec = request["arrival"]["steps"][0]
    for g in (0, 1, 2):
        ids = [i for i, k in zip(spec["id"], spec["group"]) if k == g]
        if any(i not in got for i in ids):
            return False
        r = np.array([spec["reward"][spec["id"].index(i)] for i in ids])
        if _baseline_fit(r, np.array([got[i] for i in ids]), r)[1] > TOL:
            return False
    return True


def _judge(target: Callable[..., Any], case: str, spec: dict[str, Any], got: list[dict[int, float]],
           staleness: int | None, calibrated: bool) -> list[Finding]:  # fmt: skip
    """The problems of one case's training: per step and group cohort."""
    answer = {i: {k: step[k][j] for k in ("group", "reward", "length", "version")}
              for step in spec["steps"] for j, i in enumerate(step["id"])}  # fmt: skip
    problems: list[Finding] = []
    seen: set[int] = set()
    for t, trained in enumerate(got):
        unknown = [i for i in trained if i not in answer or i in seen]
        if unknown:
            said = f"{_MESSAGES['group_baseline_foreign']} (answers {unknown} trained twice, or never sent)"
            problems.append(Finding("group_baseline_foreign", said, {"answers": unknown}))
        seen.update(trained)
        # an answer with no reward given an advantage of exactly 0 moves nothing: it is not trained in effect
        pushed = [i for i in trained if i in answer and not (answer[i]["reward"] is None and trained[i] == 0.0)]
        for g in sorted({answer[i]["group"] for i in pushed}):
            ids = [i for i in pushed if answer[i]["group"] == g]
            problems += _cohort(target, case, spec, answer, got[t], ids, spec["versions"][t], staleness, calibrated)
    return problems


def _cohort(target: Callable[..., Any], case: str, spec: dict[str, Any], answer: dict[int, dict[str, Any]],
            trained: dict[int, float], ids: list[int], version: int, staleness: int | None, calibrated: bool
            ) -> list[Finding]:  # fmt: skip
    """The problems of one group's answers trained together at one step."""
    g = answer[ids[0]]["group"]
    adv = np.array([trained[i] for i in ids])
    where = {"group": g, "answers": ids}
    if not np.isfinite(adv).all():
        said = f"{_MESSAGES['async_crash_or_nan']} (advantages {adv.tolist()})"
        return [Finding("async_crash_or_nan", said, where)]
    problems = []
    if any(answer[i]["reward"] is None for i in ids):
        zero = np.array([answer[i]["reward"] or 0.0 for i in ids], dtype=np.float64)
        said = _MESSAGES["reward_none_trained"]
        said += ", as a reward of 0 in its group's baseline" if _baseline_fit(zero, adv, zero)[1] <= TOL else ""
        problems.append(Finding("reward_none_trained", said, where))
    if staleness is not None and any(version - answer[i]["version"] > staleness for i in ids):
        lag = max(version - answer[i]["version"] for i in ids)
        said = f"{_MESSAGES['staleness_ignored']} ({lag} versions behind, the bound {staleness})"
        problems.append(Finding("staleness_ignored", said, {"lag": lag, **where}))
    versions = sorted({answer[i]["version"] for i in ids})
    if len(versions) > 1:
        said = f"{_MESSAGES['group_mixed_versions']} (versions {versions})"
        problems.append(Finding("group_mixed_versions", said, {"versions": versions, **where}))
    if not calibrated or problems:
        return problems
    base = ids + [i for i in answer if i not in ids and answer[i]["group"] == g and answer[i]["length"] == 0
                  and _same_step(spec, i, ids[0])]  # fmt: skip
    r = np.array([answer[i]["reward"] for i in ids], dtype=np.float64)
    a, residual = _baseline_fit(r, adv, np.array([answer[i]["reward"] for i in base], dtype=np.float64))
    if residual > TOL and len(base) > len(ids) and _baseline_fit(r, adv, r)[1] <= TOL:
        return [Finding("empty_answer_dropped", _MESSAGES["empty_answer_dropped"], where)]
    if residual > TOL:
        said = f"{_MESSAGES['group_baseline_foreign']} (Â is not a·(r − r̄) of its answers: residual {residual:.3g})"
        return [Finding("group_baseline_foreign", said, {"residual": residual, **where})]
    alone = _alone(target, [answer[i] for i in base])
    if alone is not None and abs(a - alone) > TOL * max(abs(alone), 1e-12):
        said = f"{_MESSAGES['group_baseline_foreign']} (its scale {a:.6g}, alone {alone:.6g})"
        return [Finding("group_baseline_foreign", said, {"scale": a, "scale_alone": alone, **where})]
    return []


def _same_step(spec: dict[str, Any], i: int, j: int) -> bool:
    return any(i in step["id"] and j in step["id"] for step in spec["steps"])


def _alone(target: Callable[..., Any], answers: list[dict[str, Any]]) -> float | None:
    """a of the answers called as the only group of a fresh delivery (None where the target declines it, or the
    rewards are all equal)."""
    group = [{**a, "group": 0, "version": VERSION} for a in answers]
    r = np.array([a["reward"] for a in group], dtype=np.float64)
    if r.max() == r.min():
        return None
    steps, _, _ = _deliver(target, _request([group]))
    if steps is None:  # a group the target declines alone: its scale is not checked
        return None
    got = steps[0]
    trained = [i for i in range(len(group)) if i in got and group[i]["length"] > 0]
    if not trained:
        return None
    return _baseline_fit(r[trained], np.array([got[i] for i in trained]), r)[0]


def _findings(out: dict[str, Any], problems: list[Finding], settings: dict[str, Any]) -> list[Finding]:
    """One finding per name (its first case), the case said first; a deviation where the configuration documents it
    (``settings["documented"]``: name → the setting)."""
    documented = settings.get("documented") or {}
    found: dict[str, Finding] = {}
    for f in problems:
        if f.property in found:
            continue
        message = f"{CASES[f.counterexample['case']]}: {f.message}"
        if f.property in documented:
            f = dataclasses.replace(f, severity="deviation")
            message += f"; so configured ({documented[f.property]})"
        found[f.property] = dataclasses.replace(f, message=message)
    notes = []
    if not out["calibrated"]:
        notes.append(
            "whole fresh groups' advantages are not centred on their group's mean: the baseline is not checked"
        )
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
    "group_baseline_foreign": "a group's baseline or scale is not its own answers' (another group's or a batch-wide "
    "statistic entered it, or one of its answers was left out)",
    "empty_answer_dropped": "the answer with no tokens is left out of its group's baseline; it was sampled with the "
    "group and has a reward, so the others' advantages move",
    "reward_none_trained": "an answer with no reward is trained on",
    "staleness_ignored": "answers older than the staleness bound are trained on",
    "group_mixed_versions": "one group's baseline mixes answers of several weight versions: not one group of the "
    "theorem (answers sampled from one policy)",
    "async_crash_or_nan": "the step crashed or gave non-finite advantages",
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
    #1419), ``ignore_staleness`` (miles #1829), ``mix_versions`` (a group resumed across versions kept whole: slime
    #2092), ``none_as_zero`` (a None reward taken as 0), ``none_as_nan`` (taken as NaN), ``drop_empty`` (answers
    with no tokens dropped before the group's statistics)."""
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
        trained, adv = [], []
        for g in dict.fromkeys(row["group"] for row in kept):
            cohort = [row for row in kept if row["group"] == g]
            r = np.array([row["reward"] for row in cohort], dtype=np.float64)
            base = every if plant == "batch_baseline" and len(cohort) < spec["G"] else r
            sd = float(np.std(base, ddof=1)) if base.size > 1 else 0.0
            trained += [row["id"] for row in cohort]
            adv += ((r - base.mean()) / (sd + 1e-4) if base.size > 1 else np.zeros_like(r)).tolist()
        steps.append({"trained": trained, "advantages": adv})
    return {"steps": steps}


def _keeps(row: dict[str, Any], version: int, max_staleness: int | None, plant: str | None) -> bool:
    if plant == "drop_empty" and row["length"] == 0:
        return False
    if row["reward"] is None and plant not in ("none_as_zero", "none_as_nan"):
        return False
    stale = max_staleness is not None and version - row["version"] > max_staleness
    return not stale or plant == "ignore_staleness"
