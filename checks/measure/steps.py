"""The split step: the update of one optimizer step as a trainer cuts it into micro-batches,
gradient-accumulation steps and data-parallel ranks, against the same step in one piece.

No trainer computes an optimizer step in one piece, and where "token-mean" is normalised (by the
step's token count, a micro-batch's, a rank's, or a count that includes masked tokens) decides the
update.  This module probes a **step target**: a framework driver's gradient target that runs the
framework's own step path when called with a step request.

Contract
--------
A step target is a gradient target (:mod:`grpo_identity.checks.gradient`) whose info carries
``"step"``, the geometry of the configured step::

    {"group_size": G,            # answers per group (num_generations, rollout.n …)
     "step_rows": R,             # answers per optimizer step, all ranks together
     "generation_rows": N,       # answers per generation batch (the advantages' batch)
     "layouts": {"split": "...", "unsplit": "..."},   # each layout in the framework's settings
     "ranks": "processes" | "emulated" | "one",       # how the split layout runs its ranks
     "holes": bool,              # it can mask tokens inside an answer (tool or multi-turn masks)
     "truncation": bool,         # it can take answers cut at the length budget (no EOS)
     "ragged": bool,             # its rollout can deliver groups of fewer than G answers
     "settings": {...},          # the split settings in force (the user's, or the driver's default)
     "objective": {"name": …,    # the loss type's objective (grpo_identity.objectives.OBJECTIVES), or None
                   "budget": L, "setting": "loss_type=dapo", "documented": "…",
                   "alternative": None | name, "alternative_source": "…"}}   # LossSetting.for_step()

``fn(rewards, G, lengths, request)`` with ``request = {"layout": "split" | "unsplit", "sizes":
[group sizes in row order], "holes": [masked tokens inside each answer], "truncated": [bool per
answer]}`` runs the rows as the framework would (groups contiguous in the rollout's order;
``lengths`` count an answer's tokens, its EOS included; ``holes[i]`` tokens from position 1 on are
masked out of the loss; a truncated answer fills the length budget with no EOS, and the framework
masks it or not as it is configured to) and returns per row, in the caller's order:

- ``advantages`` (n,), ``mask`` (n, T): the tokens the loss contains;
- ``coefficients`` (n, T): −∂/∂log π(yᵢₜ) of the update the optimizer applies in the step the row
  is in (accumulated over micro-batches, averaged over ranks as the framework's data parallelism
  averages);
- ``step``, ``rank``, ``micro_batch`` (n,): where the row was: its optimizer step (0, 1, … over
  the call; -1 for an answer the framework never trained on), its rank, its micro-batch within
  (step, rank); optionally ``generation`` (n,), its generation batch, where the framework draws the
  batches in an order of its own (else the rows' order: ``generation_rows`` rows each).

``unsplit`` runs the same optimizer steps (as many answers per step as the split layout, composed as
the framework composes them) each as one micro-batch on one rank.  A call holds :func:`probe_rows`
answers: whole optimizer steps and whole generation batches, at least two of each.  A driver says what cannot be
measured by raising (a setting the framework's step path refuses is the framework's error, raised
when the target is built where the driver can tell, else at the call).

What is measured
----------------
- the weight law of each layout, its denominator's scope named (:data:`~grpo_identity.checks.report.WEIGHTS`): uᵢ =
  aᵢ/Âᵢ times the law's denominator is one constant over every live answer of the call;
- ``split_invariance``: ρᵢ = aᵢ(split) over what the unsplit layout's law gives answer i in its
  split step.  An answer the split leaves out of the update, or ρ varying inside one optimizer step,
  means the split changes the update's direction (fail, with each micro-batch's ρ); one ρ ≠ 1 for a
  whole step means the split rescales the update (deviation); a step whose law is counted per
  generation batch while it holds answers of several is weighted unevenly by the split (fail);
- ``masked_normaliser``: the law only fits when its token counts include tokens masked out of the
  loss (inside answers, or whole truncated answers);
- ``group_slicing`` (drivers whose rollout delivers short groups): one group short of G changes
  the advantages of the other groups (fixed-size blocks sliced over ragged groups);
- ``step_scale`` and ``step_weights`` (targets that name their objective): the split layout against the update
  its loss type's objective defines, absolutely (:mod:`grpo_identity.checks.measure.oracle`): what no comparison of the
  framework with itself can see.

>>> def fake(r, G, L, request=None):  # every token weighs 1/(tokens of its micro-batch): 2 per step
...     return micro_batch_mean(r, G, L, request, micro_batches=2)
>>> fake.grpo_identity_info = {"step": geometry(4, 16, 16, holes=True)}
>>> out = audit_step(fake, fake.grpo_identity_info["step"])
>>> out.law_split, out.law_unsplit, out.invariant
('1/micro_batch_tokens', '1/step_tokens', False)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from grpo_identity.checks.frameworks.contract import geometry
from grpo_identity.checks.report import Finding

__all__ = [
    "geometry",
    "check_geometry",
    "StepDesign",
    "design",
    "StepRun",
    "fit_law",
    "StepResult",
    "audit_step",
    "micro_batch_mean",
]

#: relative tolerance of the step's float32 measurements (10 × the gradient level's RTOL)
TOL = 1e-3
#: the most answers a step probe trains on (a bound on the audit's run time)
MAX_PROBE_ROWS = 256
#: the shortest answer of a step probe: a marker token and the EOS (drivers identify rows by it)
MIN_LENGTH = 2
#: weight laws with their denominator's scope, simplest first (a scope that coincides with a smaller one
#: in a layout, a generation batch that is one micro-batch, is named by the smaller): (name, per-answer
#: length factor, scope, what the scope counts)
_CANDIDATES: tuple[tuple[str, bool, str | None, str | None], ...] = (
    ("constant", False, None, None),
    ("1/length", True, None, None),
    ("1/step_tokens", False, "step", "tokens"),
    ("1/step_rows", False, "step", "rows"),
    ("1/(length·step_rows)", True, "step", "rows"),
    ("1/rank_tokens", False, "rank", "tokens"),
    ("1/micro_batch_tokens", False, "micro_batch", "tokens"),
    ("1/micro_batch_rows", False, "micro_batch", "rows"),
    ("1/(length·micro_batch_rows)", True, "micro_batch", "rows"),
    ("1/(length·rank_rows)", True, "rank", "rows"),
    ("1/generation_tokens", False, "generation", "tokens"),
)


def probe_rows(geo: dict[str, Any]) -> int:
    """Rows of a step probe: twice the larger of an optimizer step and a generation batch, and a whole number of
    each (where neither holds a whole number of the other, their least common multiple)."""
    step, generation = int(geo["step_rows"]), int(geo["generation_rows"])
    return math.lcm(2 * max(step, generation), min(step, generation))


def check_geometry(geo: Any) -> str | None:
    """What is wrong with a step target's ``info["step"]`` (in words), or None."""
    if not isinstance(geo, dict):
        return f"info['step'] must be a dict (steps.geometry(...)), got {type(geo).__name__}"
    for key in ("group_size", "step_rows", "generation_rows"):
        value = geo.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            return f"info['step'][{key!r}] must be a whole number ≥ 1, got {value!r}"
    objective = geo.get("objective")
    if objective:
        from grpo_identity.objectives import OBJECTIVES

        stepwise = [name for name, o in OBJECTIVES.items() if o.scope != "group"]  # a step run has no group keys
        if not isinstance(objective, dict) or objective.get("name") not in stepwise:
            return f"info['step']['objective'] must name one of {', '.join(stepwise)}, got {objective!r}"
        if OBJECTIVES[objective["name"]].budget and not objective.get("budget"):
            return f"info['step']['objective']: {objective['name']} divides by a length budget: give its 'budget'"
    if geo["step_rows"] % geo["group_size"] and geo["generation_rows"] % geo["group_size"]:
        return "info['step']: neither step_rows nor generation_rows holds whole groups of group_size answers"
    if probe_rows(geo) > MAX_PROBE_ROWS:
        return (
            f"the step's probe would take {probe_rows(geo)} answers (whole optimizer steps of {geo['step_rows']} and "
            f"generation batches of {geo['generation_rows']}); the audit runs at most {MAX_PROBE_ROWS}: choose "
            "batch sizes whose optimizer step and generation batch divide one another, or smaller ones"
        )
    return None


@dataclass(frozen=True)
class StepDesign:
    """The rows of a step probe: two or more generation batches of whole groups."""

    rewards: np.ndarray
    group_size: int
    sizes: tuple[int, ...]
    lengths: np.ndarray
    holes: np.ndarray
    generation: np.ndarray
    """The generation batch of each row."""
    truncated: np.ndarray
    """Answers cut at the length budget, with no EOS."""

    def request(self, layout: str) -> dict[str, Any]:
        return {
            "layout": layout,
            "sizes": list(self.sizes),
            "holes": self.holes.tolist(),
            "truncated": self.truncated.tolist(),
        }


def design(geo: dict[str, Any], T: int, seed: int = 0) -> StepDesign:
    """:func:`probe_rows` answers in whole groups (two generation batches or two optimizer steps, whichever
    is larger, and whole ones of both): binary
    groups with k = 1 … G−1 successes and a silent group every fourth; answers of 2 … T tokens,
    the short ones first in each batch (so that micro-batches hold unequal token counts) and the
    second batch longer (so that the steps do); one masked token inside every third answer of
    four tokens or more, where the target can mask; one truncated answer of a live group per batch,
    where the target can take one."""
    G = int(geo["group_size"])
    n = probe_rows(geo)
    per_batch = max(int(geo["generation_rows"]), int(geo["step_rows"]))
    rng = np.random.default_rng(seed)
    rewards = np.zeros(n)
    for g in range(n // G):
        if g % 4 == 3 or G == 1:
            rewards[g * G : (g + 1) * G] = float(g % 2)
            continue
        k = 1 + g % (G - 1)
        rewards[g * G + rng.permutation(G)[:k]] = 1.0
    position = np.arange(n) % per_batch
    batch = np.arange(n) // per_batch
    short = position < per_batch // 2
    lengths = np.where(short, MIN_LENGTH + position % 2, T - 1 - position % 2 + batch)
    lengths = np.clip(lengths, MIN_LENGTH, T).astype(int)
    holes = np.where(bool(geo.get("holes")) & (lengths >= 4) & (np.arange(n) % 3 == 0), 1, 0).astype(int)
    generation = np.arange(n) // int(geo["generation_rows"])
    truncated = np.zeros(n, dtype=bool)
    if geo.get("truncation"):
        live = np.repeat(np.ptp(rewards.reshape(-1, G), axis=1) > 0, G)
        for b in range(2):
            order = b * per_batch + (per_batch // 2 + np.arange(per_batch)) % per_batch  # the long half first
            truncated[next((i for i in order if live[i]), order[0])] = True
        lengths = np.where(truncated, T, lengths)
    return StepDesign(rewards, G, tuple([G] * (n // G)), lengths, holes, generation, truncated)


@dataclass
class StepRun:
    """One layout's rows as measured: per-answer coefficient aᵢ, advantage Âᵢ, token counts, and
    where each row was."""

    layout: str
    advantages: np.ndarray
    a: np.ndarray
    loss_tokens: np.ndarray
    """Tokens of each answer in the loss."""
    all_tokens: np.ndarray
    """Tokens of each answer, the masked ones inside it included."""
    live: np.ndarray
    """Rows whose advantage and loss are nonzero (the law's evidence)."""
    where: dict[str, np.ndarray]
    """A key per row for each scope: step, generation, rank, micro_batch (-1: never trained on)."""
    trained: np.ndarray
    """Rows the update contains (a step ≥ 0 and a nonzero coefficient)."""
    width: int = 0
    """The response width of the coefficients (tokens per row, padding included)."""

    def scope_sum(self, scope: str, values: np.ndarray) -> np.ndarray:
        """Per row, the sum of ``values`` over the rows in the same ``scope``."""
        keys = self.where[scope]
        _, inverse = np.unique(keys, return_inverse=True)
        return np.bincount(inverse, weights=values)[inverse]


def run_layout(target: Callable[..., Any], d: StepDesign, layout: str) -> StepRun:
    """Call the step target for ``layout`` and read its rows."""
    from grpo_identity.checks.calls.target import TargetMalformed, gradient_arrays

    out = target(d.rewards, d.group_size, d.lengths, d.request(layout))
    keys = ("step", "rank", "micro_batch", *(("generation",) if isinstance(out, dict) and "generation" in out else ()))
    arrays = gradient_arrays(out, d.rewards.size, int(d.lengths.max()), per_row=keys)
    A, C, M = arrays["advantages"], arrays["coefficients"], arrays["mask"]
    ids = _row_ids(arrays)
    step, rank, micro = ids["step"], ids["rank"], ids["micro_batch"]
    never = step < 0
    if not np.all(np.isfinite(A[~never])):
        raise TargetMalformed(f"returned NaN or inf advantages for {int((~np.isfinite(A[~never])).sum())} answers "
                              "trained on: their step has no weight to measure")  # fmt: skip
    n_tok = M.sum(1)
    a = (C * M).sum(1) / np.maximum(n_tok, 1)
    scale = max(float(np.abs(a[~never]).max()), 1e-30)  # the rows trained on (one at least): a NaN elsewhere is none
    where = {
        "step": step,
        "generation": ids.get("generation", d.generation),
        "rank": np.where(never, -1, step * 1000 + rank),
        "micro_batch": np.where(never, -1, (step * 1000 + rank) * 100000 + micro),
    }
    trained = ~never & (np.abs(a) > 1e-12 * scale)
    live = (A != 0) & (n_tok > 0) & trained
    masked = np.where(d.truncated & (n_tok == 0), d.lengths, d.holes)  # a truncated answer masked whole, else holes
    return StepRun(layout, A, a, n_tok, n_tok + masked, live, where, trained, int(C.shape[1]) if C.ndim == 2 else 0)


#: the bounds of a step output's row ids: optimizer steps from -1 (never trained on); for a row trained on, ranks below
#: 1000 and micro-batches below 100,000 (a row's micro-batch key is (step·1000 + rank)·100,000 + micro: steps below
#: 10⁹ keep it in 64 bits), generation batches from 0 (only grouped, never packed: no upper bound)
_ID_BOUNDS = {"step": (-1, 10**9), "rank": (0, 1000), "micro_batch": (0, 100_000), "generation": (0, math.inf)}


def _row_ids(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every row's step, and for the rows trained on their rank, micro-batch and (where given) generation batch,
    checked: whole numbers within :data:`_ID_BOUNDS`, at least one row trained on; the ids as int64, -1 for a row
    never trained on.  Else :class:`TargetMalformed`, naming the ids."""
    from grpo_identity.checks.calls.target import TargetMalformed

    trained = arrays["step"] >= 0
    out = {}
    for key, (low, high) in _ID_BOUNDS.items():
        if key not in arrays:
            continue
        ids = arrays[key] if key == "step" else arrays[key][trained]
        if not (np.all(np.isfinite(ids)) and np.all(ids == np.round(ids)) and np.all((ids >= low) & (ids < high))):
            raise TargetMalformed(f"returned {key!r} ids that are not whole numbers from {low} to {high - 1:g}, not "
                                  f"row ids a step can hold (got {_span(ids)})")  # fmt: skip
        if key == "step" and not np.any(trained):
            raise TargetMalformed("returned 'step' -1 for every answer, no answer trained on: no step to measure")
        out[key] = np.where(trained, arrays[key], -1).astype(np.int64)
    return out


def _span(ids: np.ndarray) -> str:
    """The ids' range in words, and how many are no number."""
    finite = ids[np.isfinite(ids)]
    span = f"{finite.min():g} … {finite.max():g}" if finite.size else "no number"
    lost = ids.size - finite.size
    return span + (f", {lost} NaN or inf" if lost else "")


@dataclass(frozen=True)
class Law:
    """A fitted weight law: its name, whether its counts include masked tokens, the constant
    uᵢ·denominator, and the evidence in words."""

    name: str
    counts_masked: bool
    constant: float
    why: str

    def weights(self, run: StepRun) -> np.ndarray:
        """wᵢ = 1/denominator for every row of ``run``."""
        return 1.0 / _denominator(self.name, run, self.counts_masked)


def _denominator(name: str, run: StepRun, counts_masked: bool) -> np.ndarray:
    _, per_answer, scope, count = next(c for c in _CANDIDATES if c[0] == name)
    tokens = run.all_tokens if counts_masked else run.loss_tokens
    D = np.ones(run.a.shape) * (tokens if per_answer else 1.0)
    if scope is not None:
        D = D * run.scope_sum(scope, tokens if count == "tokens" else np.ones(run.a.shape))
    return np.maximum(D, 1e-30)


def fit_law(run: StepRun, tol: float = TOL) -> Law:
    """The simplest law under which uᵢ·denominator is one constant over the live answers; the
    loss's own token counts first, then counts that include masked tokens."""
    u = run.a[run.live] / run.advantages[run.live]
    if u.size == 0:
        return Law("other", False, float("nan"), "no answer with a nonzero advantage and loss")
    for counts_masked in (False, True):
        for name, *_ in _CANDIDATES:
            x = u * _denominator(name, run, counts_masked)[run.live]
            if float(np.ptp(x)) <= tol * float(np.abs(x).max()):
                c = float(np.median(x))
                return Law(name, counts_masked, c, f"uᵢ·denominator = {c:.6g} over {u.size} answers")
    return Law("other", False, float("nan"), f"uᵢ ranges {float(u.min()):.4g} … {float(u.max()):.4g} in no known law")


@dataclass
class StepResult:
    """What the split-step audit measured."""

    law_split: str
    law_unsplit: str
    invariant: bool | None
    findings: list[Finding] = field(default_factory=list)
    pieces: list[dict[str, Any]] = field(default_factory=list)
    """Per (step, rank, micro-batch) of the split layout: rows, tokens, ρ (its weight over the unsplit step's)."""
    layouts: dict[str, str] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    ranks: str = "one"
    objective: dict[str, Any] = field(default_factory=dict)
    """The split layout against its loss type's objective (:mod:`grpo_identity.checks.measure.oracle`); empty where the
    target names none."""


def _pieces(split: StepRun, rho: np.ndarray) -> list[dict[str, Any]]:
    """One row per micro-batch of the split layout, in step, rank, micro-batch order."""
    rows = []
    keys = split.where["micro_batch"]
    for key in np.unique(keys[keys >= 0]):
        inside = keys == key
        live = inside & split.live & np.isfinite(rho)
        rows.append(
            {
                "step": int(key // 100000 // 1000),
                "rank": int(key // 100000 % 1000),
                "micro_batch": int(key % 100000),
                "rows": int(inside.sum()),
                "tokens": int(split.loss_tokens[inside].sum()),
                "weight_ratio": float(np.median(rho[live])) if live.any() else None,
            }
        )
    return rows


def _ratios(split: StepRun, unsplit: StepRun, law: Law) -> np.ndarray:
    """ρᵢ: each live answer's coefficient in the split layout over what the unsplit step's law gives
    it (its constant, its denominator counted on the split layout's rows); the two layouts' own
    coefficients where no law fits the unsplit step."""
    rho = np.full(split.a.shape, np.nan)
    if law.name == "other":
        both = split.live & unsplit.live
        rho[both] = split.a[both] / unsplit.a[both]
        return rho
    live = split.live
    predicted = law.constant * split.advantages / _denominator(law.name, split, law.counts_masked)
    rho[live] = split.a[live] / predicted[live]
    return rho


def _invariance(split: StepRun, unsplit: StepRun, law: Law, tol: float) -> tuple[bool, list[Finding], Any]:
    """ρᵢ per live answer, the findings it gives (answers left out; and the first of: weights that differ
    inside a step, a step counted per generation batch while it spans several, a rescaled step), and the
    per-micro-batch table."""
    rho = _ratios(split, unsplit, law)
    pieces = _pieces(split, rho)
    weighed = _uneven(split, rho, pieces, tol) or _spanning(split, law) or _rescaled(split, rho, tol)
    found = [f for f in (_dropped(split, unsplit), weighed) if f is not None]
    return not found, found, pieces


def _dropped(split: StepRun, unsplit: StepRun) -> Finding | None:
    left_out = np.flatnonzero(unsplit.live & ~split.trained)
    if not left_out.size:
        return None
    message = (
        f"the split leaves {left_out.size} of the {split.a.size} answers out of the update (the unsplit step "
        "trains on them): a drop_last or a window that never closes"
    )
    return Finding("split_invariance", message, {"dropped": int(left_out.size), "rows": left_out[:8].tolist()})


def _uneven(split: StepRun, rho: np.ndarray, pieces: list[dict[str, Any]], tol: float) -> Finding | None:
    for s in np.unique(split.where["step"][split.where["step"] >= 0]):
        r = rho[(split.where["step"] == s) & np.isfinite(rho)]
        if r.size and float(np.ptp(r)) > tol * float(np.abs(r).max()):
            mine = [p for p in pieces if p["step"] == int(s)]
            ratios = [p["weight_ratio"] for p in mine if p["weight_ratio"] is not None]
            message = (
                f"the update depends on how the step is split: in optimizer step {int(s)} the micro-batches' "
                f"weights are {min(ratios):.4g}× … {max(ratios):.4g}× the unsplit step's"
            )
            return Finding("split_invariance", message, {"step": int(s), "micro_batches": mine})
    return None


def _spanning(split: StepRun, law: Law) -> Finding | None:
    """A law counted per generation batch in a step that holds answers of several: each batch's answers
    weigh by their own batch's count (invisible to ρ when the unsplit step does the same).  Read from the
    unsplit law (there a step is one micro-batch, so a generation batch is named as such; in the split a
    micro-batch that is one generation batch is named by the micro-batch)."""
    if law.name != "1/generation_tokens":
        return None
    for s in np.unique(split.where["step"][split.where["step"] >= 0]):
        held = np.unique(split.where["generation"][split.where["step"] == s])
        if held.size > 1:
            message = (
                f"optimizer step {int(s)} holds answers of {held.size} generation batches and weighs each batch's "
                "tokens by that batch's own count: the step's update depends on where the generation batches end"
            )
            return Finding("split_invariance", message, {"step": int(s), "generation_batches": held.tolist()})
    return None


def _rescaled(split: StepRun, rho: np.ndarray, tol: float) -> Finding | None:
    for s in np.unique(split.where["step"][split.where["step"] >= 0]):
        r = rho[(split.where["step"] == s) & np.isfinite(rho)]
        if r.size and abs(float(np.median(r)) - 1.0) > tol:
            factor = float(np.median(r))
            message = (
                f"the split rescales the update: optimizer step {int(s)} is {factor:.6g}× the same step unsplit "
                "(every answer alike: the direction holds, the step size depends on the split)"
            )
            return Finding("split_invariance", message, {"step": int(s), "factor": factor}, "deviation")
    return None


def _ragged_probe(target: Callable[..., Any], geo: dict[str, Any], T: int) -> Finding | None:
    """A generation batch with its second group one answer short (and its answers the longest, so that a
    dispatch ordered by tokens puts it first), against the same batch whole: every other group must keep
    its advantages, and the short group's own must stay of the batch's size (a partial block normalised
    by a zero std blows them up)."""
    G = int(geo["group_size"])
    n = int(geo["generation_rows"])
    if G < 3 or n // G < 3:
        return None
    d = design({**geo, "step_rows": n}, T)
    r, L = d.rewards[:n], d.lengths[:n].copy()
    L[G : 2 * G] = T
    drop = G + int(np.flatnonzero(r[G : 2 * G] != r[G])[0]) if np.ptp(r[G : 2 * G]) > 0 else G
    keep = np.arange(n) != drop
    sizes = [G, G - 1] + [G] * (n // G - 2)
    whole = target(r, G, L, {"layout": "unsplit", "sizes": [G] * (n // G), "holes": [0] * n})
    short = target(r[keep], G, L[keep], {"layout": "unsplit", "sizes": sizes, "holes": [0] * (n - 1)})
    A_whole = np.asarray(whole["advantages"], dtype=np.float64)[keep]
    A_short = np.asarray(short["advantages"], dtype=np.float64)
    mine = np.zeros(n - 1, dtype=bool)
    mine[G : 2 * G - 1] = True
    diff = np.abs(A_whole - A_short)[~mine]
    scale = max(1.0, float(np.abs(A_whole).max()))
    example = {"group_size": G, "sizes": sizes[:4]}
    if float(diff.max()) > TOL * scale:
        g = int(np.flatnonzero(diff > TOL * scale)[0] // G)
        message = (
            f"a group one answer short of G={G} changes the advantages of other groups (by up to "
            f"{float(diff.max()):.4g}): groups are cut as fixed blocks of G rows, not by their ids"
        )
        return Finding("group_slicing", message, {**example, "group": g if g < 1 else g + 1})
    own = float(np.abs(A_short[mine]).max())
    if not np.isfinite(own) or own > 10 * scale:
        message = (
            f"a group one answer short of G={G} gets advantages up to {own:.4g} (the whole batch's reach "
            f"{scale:.4g}): its rows are normalised as a partial block of G rows, not as their own group"
        )
        return Finding("group_slicing", message, {**example, "group": 1, "group_output": A_short[mine].tolist()})
    return None


def audit_step(target: Callable[..., Any], geo: dict[str, Any], T: int | None = None, seed: int = 0) -> StepResult:
    """Run the split and unsplit layouts of a step target and measure (see the module docstring)."""
    from grpo_identity.checks.frameworks import RESPONSE_LENGTH

    T = int(T or RESPONSE_LENGTH)
    result = StepResult("other", "other", None, layouts=dict(geo.get("layouts", {})))
    result.settings, result.ranks = dict(geo.get("settings", {})), str(geo.get("ranks", "one"))
    if int(geo["group_size"]) < 2:
        note = Finding("split_invariance", "G = 1: every group is silent, the step has no update to split", {}, "note")
        result.findings.append(note)
        return result
    d = design(geo, T, seed)
    split, unsplit = run_layout(target, d, "split"), run_layout(target, d, "unsplit")
    law_split, law_unsplit = fit_law(split), fit_law(unsplit)
    result.law_split, result.law_unsplit = law_split.name, law_unsplit.name
    result.invariant, findings, result.pieces = _invariance(split, unsplit, law_unsplit, TOL)
    result.findings += findings
    if geo.get("objective"):  # the absolute oracle: a factor both layouts share shows here
        from grpo_identity.checks.measure import oracle

        judged, result.objective = oracle.judge(split, geo["objective"], unsplit)
        result.findings += judged
    counting = [law for law in (law_split, law_unsplit) if law.counts_masked and law.name != "constant"]
    if counting:
        masked = int((split.all_tokens - split.loss_tokens).sum())
        message = (
            f"the normaliser counts tokens the loss does not contain: the weight is {counting[0].name} only when "
            f"the {masked} masked tokens (inside answers, or of truncated answers) are counted"
        )
        result.findings.append(Finding("masked_normaliser", message, {"masked_tokens": masked}))
    if geo.get("ragged"):
        result.findings += _short_groups(target, geo, T)
    return result


def _short_groups(target: Callable[..., Any], geo: dict[str, Any], T: int) -> list[Finding]:
    """The short-group probe's finding, or a note where the framework cannot run a batch with a short
    group under these settings (the rest of the step's measurement stands)."""
    try:
        found = _ragged_probe(target, geo, T)
    except Exception as exc:  # noqa: BLE001 (the framework's own error on a short group, said in the note)
        message = f"the batch with a group one answer short could not be run: {type(exc).__name__}: {exc}"
        return [Finding("group_slicing", message[:400], {}, "note")]
    return [found] if found is not None else []


def micro_batch_mean(
    rewards: np.ndarray,
    G: int,
    lengths: np.ndarray,
    request: dict[str, Any] | None,
    micro_batches: int = 2,
    scope: str = "micro_batch",
    count_masked: bool = False,
    scale: float = 1.0,
) -> dict[str, np.ndarray]:
    """A step target made of numpy, for tests and the docs: group-centred advantages; one rank; one
    optimizer step per ``len(rewards) // 2`` rows, cut into ``micro_batches`` accumulated micro-batches
    in the split layout (each micro-batch's loss divided by their number, as accumulation does); token
    coefficients Âᵢ/denominator with the denominator of ``scope``: 'micro_batch' (the micro-batch's
    tokens), 'step' (the step's tokens), 'length' (the answer's tokens times the step's answers) or
    'constant' (the step's answers times the length budget).  Truncated answers are masked out;
    ``count_masked``: the token counts include masked tokens; ``scale``: the split layout's update times
    this (a loss scaled by the split)."""
    from grpo_identity.checks.frameworks import RESPONSE_LENGTH

    r = np.asarray(rewards, dtype=np.float64)
    n, T = r.size, RESPONSE_LENGTH
    R = r.reshape(-1, G)
    A = (R - R.mean(1, keepdims=True)).reshape(-1)
    L = np.asarray(lengths, dtype=int)
    request = request or {}
    holes = np.asarray(request.get("holes") or [0] * n, dtype=int)
    truncated = np.asarray(request.get("truncated") or [False] * n, dtype=bool)
    mask = (np.arange(T)[None, :] < L[:, None]).astype(float)
    for i, h in enumerate(holes):
        mask[i, 1 : 1 + h] = 0.0
    mask[truncated] = 0.0
    pieces = micro_batches if request.get("layout") == "split" else 1
    step = np.arange(n) // (n // 2)
    micro = (np.arange(n) % (n // 2)) // max(1, (n // 2) // pieces)
    tokens = mask.sum(1) + (np.where(truncated, L, holes) if count_masked else 0)  # masked: a whole answer, or holes
    key = step * 100 + (micro if scope == "micro_batch" else 0)
    _, inverse = np.unique(key, return_inverse=True)
    per_scope = np.bincount(inverse, weights=tokens)[inverse]
    denominator = {
        "micro_batch": per_scope * pieces,
        "step": per_scope,
        "length": np.maximum(tokens, 1) * (n // 2),
        "constant": np.full(n, (n // 2) * T),
    }[scope]
    coefficients = (A / denominator)[:, None] * mask * (scale if pieces > 1 else 1.0)
    return {
        "advantages": A,
        "coefficients": coefficients,
        "mask": mask,
        "step": step,
        "rank": np.zeros(n, dtype=int),
        "micro_batch": micro,
    }
