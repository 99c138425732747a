"""The absolute oracle: each optimizer step of a step run against the update its loss type's objective defines.

The split-step audit (:mod:`grpo_identity.checks.measure.steps`) compares a framework's step split as configured with
the same step unsplit, so it cannot see a factor both layouts share (a normaliser over the whole generation
batch, a 1/GA applied twice in a window normaliser and again by the trainer).  Here every live answer's
measured coefficient aᵢ (−∂loss/∂log π per loss token, as the optimizer receives it) is divided by what the
objective gives it, Âᵢ·wᵢ (:func:`grpo_identity.objectives.step_weights`), on the same rows, advantages and
token counts.  fᵢ = 1 for every answer is the objective, scale included.

- ``step_scale`` (fail): an optimizer step is f× its objective.  The likely cause is named from f and the
  step's geometry (:func:`causes`): the accumulation's 1/GA twice or missing, ranks counted twice or summed, a
  normaliser over the generation batch, a normaliser that counts masked tokens.  Where the steps of one
  generation batch are off by factors that average to one (a normaliser taken as the generation batch's mean
  step, not each step's own count), it is a deviation that names their range: the batch as a whole is exact.
- ``step_weights`` (fail): inside one optimizer step the answers' fᵢ differ (the update's direction departs
  from the objective's, by the range named).

The objective is the framework's documented one (:data:`grpo_identity.objectives.LOSS_SETTINGS`); where the
paper that introduced the loss reads it otherwise, the note says so.

>>> from grpo_identity.checks.measure import steps
>>> def dapo(r, G, L, request=None):  # every token weighs 1/(tokens of its optimizer step): DAPO's token mean
...     return steps.micro_batch_mean(r, G, L, request, micro_batches=2, scope="step")
>>> geo = steps.geometry(4, 16, 16, objective={"name": "token_mean", "setting": "loss=dapo"})
>>> out = steps.audit_step(dapo, geo)
>>> out.objective["factors"], [f.property for f in out.findings]
([1.0, 1.0], [])
>>> def halved(r, G, L, request=None):  # the same, its loss halved in every layout: invisible to the split
...     out = dapo(r, G, L, request)
...     return {**out, "coefficients": out["coefficients"] / 2}
>>> out = steps.audit_step(halved, geo)
>>> out.invariant, [f.property for f in out.findings], out.objective["factors"]
(True, ['step_scale'], [0.5, 0.5])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from grpo_identity.checks.report import Finding

__all__ = ["TOL", "CAUSE_TOL", "judge", "causes"]

#: relative tolerance of fᵢ = 1 (float32 coefficients of a tiny model: the split-step audit's)
TOL = 1e-3
#: how close a measured factor must come to a candidate cause's to be named by it
CAUSE_TOL = 0.02


def judge(run: Any, objective: dict[str, Any], unsplit: Any = None) -> tuple[list[Finding], dict[str, Any]]:
    """The findings of one step run (:class:`grpo_identity.checks.measure.steps.StepRun`, the split layout) against
    ``objective`` (``info["step"]["objective"]``), and what was measured: per step its factor, and the range of fᵢ.
    ``unsplit``: the same steps unsplit, whose factors tell the causes that act in both layouts from the others."""
    import time

    from grpo_identity.objectives import OBJECTIVES

    t0 = time.perf_counter()
    name = objective["name"]
    f, live = _ratios(run, objective)
    steps_ = [int(s) for s in np.unique(run.where["step"][live])]
    factors = [float(np.median(f[live & (run.where["step"] == s)])) for s in steps_]
    spreads = [_range(f[live & (run.where["step"] == s)]) for s in steps_]
    summary = {
        "name": name,
        "formula": OBJECTIVES[name].formula,
        "setting": objective.get("setting"),
        "documented": objective.get("documented"),
        "factors": [round(x, 6) for x in factors],
        "within_step": [[round(lo, 6), round(hi, 6)] for lo, hi in spreads],
    }
    findings = [_objective_note(objective)]
    uneven = [(s, lo, hi) for s, (lo, hi) in zip(steps_, spreads) if hi - lo > TOL * max(abs(hi), abs(lo), 1e-30)]
    even = [(s, x) for s, x in zip(steps_, factors) if s not in {u[0] for u in uneven}]  # a step's scale: if even
    scale = _scale(run, even, objective, unsplit)
    if scale is not None and not (uneven and scale.severity == "fail" and not scale.counterexample.get("causes")):
        findings.append(scale)  # (beside uneven steps, a scale no cause explains is the same departure: not said twice)
    if uneven:
        s, lo, hi = uneven[0]
        mid = float(np.median(f[live & (run.where["step"] == s)]))
        message = (
            f"inside optimizer step {s} the answers weigh {lo / mid:.4g}× … {hi / mid:.4g}× what the objective {name} "
            f"({OBJECTIVES[name].formula}) gives them relative to one another: the update's direction departs from "
            "the objective's"
        )
        findings.append(Finding("step_weights", message, {"step": s, "range": [lo, hi]}))
    summary["seconds"] = round(time.perf_counter() - t0, 4)  # the oracle's own cost (benchmarks/bench_step.py)
    return [x for x in findings if x is not None], summary


def _ratios(run: Any, objective: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """fᵢ = aᵢ/(Âᵢ·wᵢ) of every live answer (NaN elsewhere), and which answers are live."""
    from grpo_identity.objectives import step_weights

    w = step_weights(
        objective["name"], run.where["step"], run.where["micro_batch"], run.loss_tokens, objective.get("budget") or 1
    )
    f = np.full(run.a.shape, np.nan)
    live = run.live & (np.abs(run.advantages) > 0)
    f[live] = run.a[live] / (run.advantages[live] * w[live])
    return f, live


def _step_factor(run: Any, objective: dict[str, Any], s: int) -> float | None:
    f, live = _ratios(run, objective)
    inside = live & (run.where["step"] == s)
    return float(np.median(f[inside])) if inside.any() else None


def _range(values: np.ndarray) -> tuple[float, float]:
    return (float(values.min()), float(values.max())) if values.size else (float("nan"), float("nan"))


def _objective_note(objective: dict[str, Any]) -> Finding | None:
    from grpo_identity.objectives import OBJECTIVES

    other = objective.get("alternative")
    if not other:
        return None
    o, p = OBJECTIVES[objective["name"]], OBJECTIVES[other]
    message = (
        f"{objective.get('setting')}: judged by the framework's documented objective {o.name} ({o.formula}); "
        f"another reading is {p.name} ({p.formula}): {objective.get('alternative_source') or p.source}"
    )
    return Finding("objective", message, {"documented": o.name, "alternative": p.name}, "note")


def _scale(run: Any, even: list[tuple[int, float]], objective: dict[str, Any], unsplit: Any) -> Finding | None:
    """A step off its objective's scale (of the steps whose answers weigh alike: an uneven step's median says
    little, ``step_weights`` says it): a deviation where the steps of each generation batch average to their
    objective, else a failure naming the likely cause of the first step off (:func:`_likely`)."""
    off = [(s, x) for s, x in even if abs(x - 1.0) > TOL]
    if not off:
        return None
    factors = [x for _, x in even]
    name = objective["name"]
    if _averages_to_one(run, [s for s, _ in even], factors):
        lo, hi = min(factors), max(factors)
        message = (
            f"each optimizer step is {lo:.4g}× … {hi:.4g}× its objective {name} ({objective.get('setting')}), "
            "and the steps of each generation batch average to 1: the normaliser is the generation batch's mean "
            "step (its tokens over its optimizer steps), not each step's own count"
        )
        return Finding("step_scale", message, {"factors": factors, "range": [lo, hi]}, "deviation")
    s, x = off[0]
    named, where = _likely(run, s, x, objective, unsplit)
    likely = f"; likely{where} {' or '.join(named)}" if named else "; no known cause gives this factor"
    message = (
        f"optimizer step {s} is {x:.6g}× its objective {name} ({objective.get('setting')}: "
        f"{objective.get('documented') or 'documented'}){likely}"
    )
    return Finding("step_scale", message, {"step": s, "factor": x, "causes": named})


#: causes whose mechanism exists only where the split layout has it (accumulation, ranks, micro-batches)
_SPLIT_ONLY = ("ga_twice", "ga_missing", "ranks_twice", "ranks_summed", "micro_rows")


def _likely(run: Any, s: int, x: float, objective: dict[str, Any], unsplit: Any) -> tuple[list[str], str]:
    """The causes that give factor ``x`` in step ``s``, judged on both layouts: a cause is named where it also gives
    the unsplit run's factor for the same step (its mechanism acts in every layout where it exists).  A factor both
    layouts share is named by the causes that act in both, and by the split's own settings read as constants (the
    configured gradient_accumulation_steps divided out once more in both runs) only where no cause acting in both
    gives it; one the unsplit run does not share, by the split's causes alone."""
    near = lambda a, b: abs(a / b - 1.0) <= CAUSE_TOL  # noqa: E731
    split = [(key, words) for key, words, value in causes(run, s, objective) if near(x, value)]
    x_unsplit = _step_factor(unsplit, objective, s) if unsplit is not None else None
    if x_unsplit is None:
        return [w for _, w in split], ""
    there = {key: value for key, _, value in causes(unsplit, s, objective)}
    if near(x_unsplit, x):  # shared by both layouts
        both = [w for key, w in split if key not in _SPLIT_ONLY and near(x_unsplit, there.get(key, 1.0))]
        constant = [f"{w}: the configured value, divided in both runs" for key, w in split if key in _SPLIT_ONLY]
        return both or constant, " (both layouts alike)"  # a cause acting in both explains it better than a constant
    both = [w for key, w in split if near(x_unsplit, there.get(key, 1.0))]
    return (both, "") if both else ([w for _, w in split], " (in the split layout alone)")


def _averages_to_one(run: Any, steps_: list[int], factors: list[float]) -> bool:
    """Every generation batch holds ≥ 2 optimizer steps whose factors average to 1."""
    by_batch: dict[int, list[float]] = {}
    for s, x in zip(steps_, factors):
        batch = int(np.median(run.where["generation"][run.where["step"] == s]))
        by_batch.setdefault(batch, []).append(x)
    return all(len(xs) >= 2 and abs(float(np.mean(xs)) - 1.0) <= TOL for xs in by_batch.values())


def causes(run: Any, s: int, objective: dict[str, Any] | None = None) -> list[tuple[str, str, float]]:
    """Candidate causes of a whole-step factor in optimizer step ``s``: (key, words, the factor it gives), read from
    the step's geometry as the run lays it out (micro-batches per rank, ranks, answers per micro-batch, token
    counts, the response width) and the objective's length budget."""
    inside = run.where["step"] == s
    micro = len(np.unique(run.where["micro_batch"][inside]))
    ranks = len(np.unique(run.where["rank"][inside]))
    per_rank = max(1, micro // max(ranks, 1))
    step_tokens = float(run.loss_tokens[inside].sum())
    found: list[tuple[str, str, float]] = []
    if per_rank > 1:
        found += [
            ("ga_twice", f"1/gradient_accumulation_steps applied twice (1/{per_rank} once more)", 1.0 / per_rank),
            ("ga_missing", f"the accumulation's 1/gradient_accumulation_steps missing (×{per_rank})", float(per_rank)),
        ]
    if ranks > 1:
        found += [
            ("ranks_twice", f"ranks counted twice (1/{ranks} once more)", 1.0 / ranks),
            ("ranks_summed", f"ranks summed, not averaged (×{ranks})", float(ranks)),
        ]
    batches = np.isin(run.where["generation"], np.unique(run.where["generation"][inside]))
    total = float(run.loss_tokens[batches].sum())
    if total > step_tokens:
        words = "a normaliser over the whole generation batch (generation_tokens), not the optimizer step's"
        found.append(("generation", words, step_tokens / total))
    masked = float(run.all_tokens[inside].sum())
    if masked > step_tokens:
        found.append(("masked", "a normaliser that counts the tokens the loss masks", step_tokens / masked))
    _, rows = np.unique(run.where["micro_batch"][inside], return_counts=True)
    if rows.size and rows.min() == rows.max() > 1:
        words = f"a micro-batch's sum over its answers not divided by their number (×{int(rows[0])})"
        found.append(("micro_rows", words, float(rows[0])))
    cap = (objective or {}).get("ratio_cap")
    if cap is not None and 0.0 < float(cap) < 1.0:
        setting = (objective or {}).get("ratio_cap_setting")
        words = (
            f"the importance weight capped at {float(cap):g}, below its on-policy value 1 ({setting}: set it above 1)"
        )
        found.append(("ratio_cap", words, float(cap)))
    budget = (objective or {}).get("budget")
    if budget and run.width and float(budget) != run.width:
        words = f"the length constant taken as the batch's response width {run.width}, not the configured {budget:g}"
        found.append(("width", words, float(budget) / run.width))
    return found
