"""Properties every group-relative advantage (or group filter) must have, one function each.

Each property takes the target (``target(rewards, G) -> array``, see
:mod:`grpo_identity.checks.calls.target`), one :class:`~grpo_identity.checks.measure.strategies.RewardBatch`
(1-D float64, group by group), a :class:`Context` (tolerance, reference dial) and a numpy
``Generator`` for its own random draws; it returns nothing, or raises :class:`PropertyViolation`
with an explicit message and the counterexample (the offending group and the batch).

The identity (Theorem 1, PAPER §Claims 1): for two-valued rewards, g = (1/G) Σ Âᵢ sᵢ =
c(k, G)·(s̄₊ − s̄₋), with c = (k/G)·Â₊ given by the dial (:func:`grpo_identity.dial.coefficient`);
for any rewards (theorem G9), g = c·β̂ with β̂ the least-squares slope of the scores on the rewards
(:func:`grpo_identity.closed_forms.score_slope`) and c = (1/G) Σ Âᵢ (Rᵢ − R̄): GRPO's σ_R, Dr. GRPO's σ_R².

>>> import numpy as np
>>> from grpo_identity.checks.measure.strategies import RewardBatch
>>> ctx = Context(Tolerance.for_precision("float64"))
>>> batch = RewardBatch(np.array([1., 1., 0., 0.]), 2, "binary")
>>> zero_sum_per_group(lambda r, G: r - 0.5, batch, ctx, np.random.default_rng(0))
Traceback (most recent call last):
...
grpo_identity.checks.measure.properties.PropertyViolation: zero_sum_per_group: group 0 (G=2) sums to 1 instead of 0: ...
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from grpo_identity import closed_forms as C
from grpo_identity import dial as D
from grpo_identity.checks.calls.target import Output, TargetError, View, as_target, output_of, round_rewards

__all__ = [
    "PropertyViolation",
    "call_target",
    "Tolerance",
    "Context",
    "well_formed",
    "silent_groups_exactly_zero",
    "two_valued_per_group",
    "zero_sum_per_group",
    "identity_in_vector_form",
    "any_reward_groups",
    "groups_independent",
    "permutation_equivariant",
    "stateless",
    "matches_dial",
    "filter_well_formed",
    "kept_by_definition",
    "keeps_groups_with_nonzero_std",
    "filter_groups_independent",
    "filter_stateless",
    "ADVANTAGE_PROPERTIES",
    "CALL_PROPERTIES",
    "FILTER_PROPERTIES",
    "LAYOUT_PROPERTIES",
    "WholeGroups",
    "layout_independent",
    "ragged_groups",
]

#: a target: ``fn(rewards, G)``, and ``fn(rewards, G, ids)`` for one that takes group ids; the audit hands every
#: property a :class:`~grpo_identity.checks.calls.target.Target`, a test may hand it a plain function
Fn = Callable[..., Any]


class PropertyViolation(AssertionError):
    """A property does not hold: ``property`` (its name), ``message``, ``counterexample`` (a dict)."""

    def __init__(
        self, property: str, message: str, counterexample: dict[str, Any] | None = None, severity: str = "fail"
    ) -> None:
        super().__init__(f"{property}: {message}")
        self.property = property
        self.message = message
        self.counterexample = counterexample or {}
        self.severity = severity


#: relative tolerance by the precision the target computes in (fp32 sums over G ≤ 256 rows)
_RTOL = {"float64": 1e-9, "float32": 2e-5, "float16": 4e-3, "bfloat16": 3e-2}
#: the resolution of each float type (its machine epsilon): what "exactly zero" can mean for a computed value
_EPS = {"float64": 2.220446049250313e-16, "float32": 1.1920929e-07, "float16": 9.765625e-04, "bfloat16": 7.8125e-03}
#: rounding steps a residue may take (a mean, a difference, a division) before it stops being rounding
_ROUNDING_STEPS = 8


@dataclass(frozen=True)
class Tolerance:
    """Relative tolerance fitted to the dtype the target computes in."""

    precision: str
    rtol: float

    @classmethod
    def for_precision(cls, precision: str) -> Tolerance:
        if precision not in _RTOL:
            raise ValueError(f"precision must be one of {tuple(_RTOL)}, got {precision!r}")
        return cls(precision, _RTOL[precision])

    def close(self, a: np.ndarray, b: np.ndarray, scale: float) -> bool:
        """|a − b| ≤ rtol·scale elementwise (scale: the magnitude of the group's advantages)."""
        return bool(np.all(np.abs(np.asarray(a) - np.asarray(b)) <= self.rtol * max(scale, 1e-300)))

    def zero_floor(self, scale: float, rows: int = 1) -> float:
        """What counts as zero for a value computed in this precision beside values of magnitude ``scale``: the
        type's resolution × the rounding steps × √``rows`` (the random walk of the roundings of a mean or a
        whitening over that many values), at most a tenth of the comparisons' rtol.  A real push is O(scale);
        rounding is ~1e-17·scale in float64.

        >>> Tolerance.for_precision("float64").zero_floor(1.0, rows=64) < 1e-12
        True
        """
        rounding = _EPS[self.precision] * _ROUNDING_STEPS * math.sqrt(max(int(rows), 1))
        return min(rounding, 0.1 * self.rtol) * max(float(scale), 0.0)  # never as loose as the comparisons' rtol


#: significant bits a value may have and still say nothing of the precision that computed it: 0, ±1, 0.75 or
#: 1.03125 are numbers of every float type (a float64 pass@k answers 0 and 1 only), where a bfloat16 result has
#: 8 significant bits, most of them used
SHORT_BITS = 6


def precision_of(out: np.ndarray) -> str:
    """The narrowest float type that holds every value of ``out`` exactly (how the target computed), read from
    the values with more than :data:`SHORT_BITS` significant bits; with none, the output's own dtype."""
    x = np.asarray(out, dtype=np.float64).reshape(-1)
    x = x[np.isfinite(x) & (x != 0)]
    x = x[np.ldexp(np.frexp(x)[0], SHORT_BITS) % 1 != 0]  # the short values fit every type: no evidence
    if np.asarray(out).dtype == np.float32 or (x.size and np.array_equal(x.astype(np.float32).astype(np.float64), x)):
        if x.size and np.array_equal(_bf16(x), x):
            return "bfloat16"
        if x.size and np.array_equal(x.astype(np.float16).astype(np.float64), x):
            return "float16"
        return "float32"
    return "float64"


def _bf16(x: np.ndarray) -> np.ndarray:
    b = x.astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    return b.view(np.float32).astype(np.float64)


@dataclass
class Context:
    """What the properties need besides the batch: tolerance, reference, the inferred layout."""

    tol: Tolerance
    reference: Callable[[np.ndarray, int], np.ndarray] | None = None
    """Advantages the target should reproduce (the inferred or expected dial), or ``None``."""
    batch_scale: bool = False
    """The target scales by a batch-wide number (batch std): groups are independent up to it."""
    keep_reference: Any = None
    """For filters: the dial whose keep rule is expected (default DAPO's: keep σ > 0)."""
    keep_rule: Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]] | None = None
    """For filters whose rule keeps σ > 0 up to a tolerance (inferred): which groups it keeps, and
    which lie too near the tolerance to judge; ``None``: the rule's exact definition."""
    reference_ids: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
    """Advantages the target should give rows in any order with group ids (groups of any size),
    for targets that take group ids; ``None`` otherwise."""
    ragged: bool = False
    """The target takes group ids and no group size: groups of different sizes can be passed."""
    earlier: Callable[[np.ndarray, int], np.ndarray | None] | None = None
    """The target's first answer to an input, given before the property now running asked it (the search's
    memory), or ``None`` where none is remembered; unset: nothing is."""
    notes: list[str] = field(default_factory=list)


# --- helpers -------------------------------------------------------------------------------------
def call_target(target: Fn, rewards: np.ndarray, G: int, prop: str, ids: Any = None) -> np.ndarray:
    """The target's advantages of ``rewards`` (groups of G, or by ``ids``) as float64, or a ``prop`` violation where
    their shape or dtype is not an advantage vector's."""
    return advantage_vector(target(rewards, G) if ids is None else target(rewards, G, ids), rewards, G, prop)


def advantage_vector(out: Any, rewards: np.ndarray, G: int, prop: str) -> np.ndarray:
    """``out``, a target's output for ``rewards``, as float64 advantages; a ``prop`` violation where its shape or
    dtype is not an advantage vector's."""
    out = np.asarray(out)
    if out.shape != rewards.shape:
        raise PropertyViolation(
            prop,
            f"returned shape {out.shape} for {rewards.shape[0]} rewards (G={G}); expected {rewards.shape}",
            _example(rewards, G, out),
        )
    if not np.issubdtype(out.dtype, np.floating):
        raise PropertyViolation(
            prop, f"returned dtype {out.dtype}; advantages must be floating point", _example(rewards, G, out)
        )
    return out.astype(np.float64)


def _list(x: np.ndarray, cap: int = 64) -> list[float] | str:
    x = np.asarray(x).reshape(-1)
    if x.size > cap:
        return f"<{x.size} values>"
    return [float(v) if np.issubdtype(np.asarray(v).dtype, np.floating) else v.item() for v in x]


def _example(rewards: np.ndarray, G: int, out: Any = None, group: int | None = None) -> dict[str, Any]:
    ex: dict[str, Any] = {"group_size": int(G), "n_groups": int(len(rewards) // G), "rewards": _list(rewards)}
    if out is not None:
        ex["output"] = _list(np.asarray(out))
    if group is not None:
        ex["group"] = int(group)
        ex["group_rewards"] = _list(rewards[group * G : (group + 1) * G], 256)
        if out is not None and np.asarray(out).shape == rewards.shape:
            ex["group_output"] = _list(np.asarray(out)[group * G : (group + 1) * G], 256)
    return ex


def _fmt(x: np.ndarray, cap: int = 8) -> str:
    x = np.asarray(x).reshape(-1)
    body = ", ".join(f"{v:.6g}" for v in x[:cap])
    return f"[{body}{', …' if x.size > cap else ''}]"


def _silent(R: np.ndarray) -> np.ndarray:
    return R.max(1) == R.min(1)  # (n,)


def _residue_group(R: np.ndarray, g: int) -> bool:
    """A silent group of a non-exact value (0.1 …): its float residue is the silent probe's business."""
    return bool(R[g].max() == R[g].min() and not _exact_silent_value(float(R[g, 0])))


def _exact_silent_value(v: float) -> bool:
    """Values whose multiples and means are exact in any float type (0, 1, 0.5, 2, −1, 10 …)."""
    return bool(v * 4 == round(v * 4) and abs(v) <= 16)


# --- advantage properties ------------------------------------------------------------------------
def well_formed(target: Fn, batch: Any, ctx: Context, rng: np.random.Generator) -> None:
    """One finite advantage per reward, an array of the rewards' shape and dtype (1-D float64,
    n_groups × G), the rewards left untouched (no in-place update of the caller's array), and the output its own
    (a second call does not overwrite it).  The second call's rewards are ``1 − r``: every group that is not silent
    gets other advantages (``r + 1`` gave a centred estimator the same ones, and a shared buffer went unseen on
    every batch the float rounding left exact), and binary rewards stay binary."""
    r, G = batch.contiguous(), batch.group_size
    target = as_target(target)  # where the output is checked: the transport, on the output as the target returned it
    first = target.call(r, G)
    A = advantage_vector(first.value, r, G, "well_formed")
    other = 1.0 - r
    second = target.call(other, G)  # does it overwrite the first call's output?
    advantage_vector(second.value, other, G, "well_formed")
    # the first call's overwrite of the call before it (another example's, another property's) is left out: it
    # would make the finding depend on what ran before, and shrink to a flaky silent group; 1 − r alone finds it
    issue = first.issue or second.issue or second.overwrite
    if issue:
        raise PropertyViolation("well_formed", f"the target {issue} (G={G}, {r.size} rewards)", _example(r, G, A))
    bad = ~np.isfinite(A)
    if bad.any():
        g = int(np.flatnonzero(bad)[0] // G)
        raise PropertyViolation(
            "well_formed",
            f"non-finite advantage {A[bad][0]} in group {g} (G={G}, rewards {_fmt(r[g * G : (g + 1) * G])})",
            _example(r, G, A, g),
        )


def silent_groups_exactly_zero(target: Fn, batch: Any, ctx: Context, rng: np.random.Generator) -> None:
    """Groups whose rewards are all equal get exactly 0 (not ε-small, not NaN): σ = 0 ⇒ g = 0.

    Checked on values with exact means (0, 1, 0.5, 2 …); silent groups of other values (0.1) are
    probed by the audit and reported as a note when float rounding leaves a residue.
    """
    r, G = batch.contiguous(), batch.group_size
    A = call_target(target, r, G, "silent_groups_exactly_zero").reshape(-1, G)
    R = r.reshape(-1, G)
    floor = _zero_floor(A, r, G, ctx)
    for g in np.flatnonzero(_silent(R)):
        if _exact_silent_value(float(R[g, 0])) and not np.all(np.abs(A[g]) <= floor):
            raise PropertyViolation(
                "silent_groups_exactly_zero",
                f"silent group {g} (G={G}, every reward {R[g, 0]:g}) has advantages {_fmt(A[g])} instead of exactly 0",
                _example(r, G, A.reshape(-1), int(g)),
            )


def _zero_floor(A: np.ndarray, r: np.ndarray, G: int, ctx: Context) -> float:
    """Zero for this output (:meth:`Tolerance.zero_floor`): its precision's resolution at the batch's largest
    |Â|, over the rows a value is computed from (the whole batch where the target scales by a batch statistic)."""
    finite = np.abs(A[np.isfinite(A)])
    scale = float(finite.max()) if finite.size else 0.0
    return ctx.tol.zero_floor(scale, rows=r.size if ctx.batch_scale else G)


def _two_valued_groups(R: np.ndarray) -> list[tuple[int, float, float]]:
    out = []
    for g in range(R.shape[0]):
        vals = np.unique(R[g])
        if vals.size == 2:
            out.append((g, float(vals[0]), float(vals[1])))
    return out


def two_valued_per_group(target: Fn, batch: Any, ctx: Context, rng: np.random.Generator) -> None:
    """Two-valued rewards give two advantages per group: equal rewards, equal advantages; the higher
    reward the higher advantage (a sign flip fails here)."""
    r, G = batch.contiguous(), batch.group_size
    A = call_target(target, r, G, "two_valued_per_group").reshape(-1, G)
    R = r.reshape(-1, G)
    for g, lo, hi in _two_valued_groups(R):
        scale = float(np.abs(A[g]).max())
        a_hi, a_lo = A[g][R[g] == hi], A[g][R[g] == lo]
        if not (ctx.tol.close(a_hi, a_hi[0], scale) and ctx.tol.close(a_lo, a_lo[0], scale)):
            raise PropertyViolation(
                "two_valued_per_group",
                f"group {g} (G={G}) has rewards {{{lo:g}, {hi:g}}} but more than two advantages: "
                f"{_fmt(np.unique(A[g]))}",
                _example(r, G, A.reshape(-1), g),
            )
        if not a_hi[0] > a_lo[0]:
            raise PropertyViolation(
                "two_valued_per_group",
                f"group {g} (G={G}): reward {hi:g} gets advantage {a_hi[0]:.6g} ≤ {a_lo[0]:.6g} of reward {lo:g} "
                "(wrong sign or order)",
                _example(r, G, A.reshape(-1), g),
            )


def _cancellation(row: np.ndarray) -> float:
    """How much centring a group's rewards amplifies their rounding: max|R| / (max R − min R), at
    least 1.  Rewards 1/3 and 0.3 rounded to bfloat16 (8 bits) differ by 10 % of their size, so the
    centred values carry ~10× the relative rounding error of the rewards themselves."""
    spread = float(row.max() - row.min())
    return max(1.0, float(np.abs(row).max()) / spread) if spread > 0 else 1.0


def _mean_rounding(row: np.ndarray, adv: np.ndarray, ctx: Context) -> float:
    """What a group's mean rounded in the target's precision leaves in Σᵢ Âᵢ: the mean is off by up to half a
    unit of its last place, u·max|R|, and every one of the G centred values carries that same error times the
    target's scale (the slope of Â on R), so the sum is off by G·u·max|R|·slope, not √G of it.  In bfloat16 a
    group of 98 ones and a zero has its mean 0.9899 rounded to 0.9883: Σ Â = 1.6 where the advantages are
    0.117 and −9.875 (1e-5 in float32, 5e-14 in float64, where a shifted baseline still sums to G·shift·slope)."""
    spread = float(np.ptp(row))
    if spread <= 0 or not np.all(np.isfinite(adv)):
        return 0.0
    width = float(np.ptp(adv))
    unit = _EPS[ctx.tol.precision] / 2
    return row.size * unit * float(np.abs(row).max()) * width / spread


def zero_sum_per_group(target: Fn, batch: Any, ctx: Context, rng: np.random.Generator) -> None:
    """Σᵢ Âᵢ = 0 in every group (the baseline removes the group's mean; RLOO's too, Prop. 1)."""
    r, G = batch.contiguous(), batch.group_size
    A = call_target(target, r, G, "zero_sum_per_group").reshape(-1, G)
    R = r.reshape(-1, G)
    silent = _silent(R)
    for g in range(A.shape[0]):
        if silent[g] and not _exact_silent_value(float(R[g, 0])):
            continue  # rounding residue of a silent 0.1-group: the audit's silent probe reports it
        s, scale = float(A[g].sum()), float(np.abs(A[g]).sum())
        bound = ctx.tol.rtol * max(scale, 1e-300) * max(1.0, np.sqrt(G) / 4) * _cancellation(R[g])
        if abs(s) > max(bound, _mean_rounding(R[g], A[g], ctx), _zero_floor(A, r, G, ctx)):
            raise PropertyViolation(
                "zero_sum_per_group",
                f"group {g} (G={G}) sums to {s:.6g} instead of 0: rewards {_list(R[g], 16)}, advantages "
                f"{_list(A[g], 16)}",
                _example(r, G, A.reshape(-1), g),
            )


def identity_in_vector_form(target: Fn, batch: Any, ctx: Context, rng: np.random.Generator) -> None:
    """g = (1/G) Σ Âᵢ sᵢ on random score vectors of any dimension: c·(s̄₊ − s̄₋) on the batch's
    two-valued groups (Theorem 1), and c·β̂ on groups of continuous and multi-valued rewards drawn
    beside the batch (theorem G9: β̂ the least-squares slope of the scores on the rewards), c the
    reference dial's coefficient where there is one (GRPO's σ_R, Dr. GRPO's σ_R² …)."""
    _identity_two_valued(target, batch, ctx, rng)
    _identity_any_rewards(target, batch, ctx, rng)


def _random_scores(n_rows: int, rng: np.random.Generator) -> np.ndarray:
    shape = tuple(int(d) for d in rng.integers(1, 4, size=int(rng.integers(0, 3))))
    return rng.standard_normal((n_rows, *shape))  # (n·G, *shape): one score per answer


def _identity_two_valued(target: Fn, batch: Any, ctx: Context, rng: np.random.Generator) -> None:
    r, G = batch.contiguous(), batch.group_size
    A = call_target(target, r, G, "identity_in_vector_form")
    R = r.reshape(-1, G)
    two = _two_valued_groups(R)
    if not two:
        return
    S = _random_scores(r.size, rng)
    g_all = D.group_updates(A, S, G)  # (n, D)
    high = np.zeros_like(r)
    for g, _lo, hi in two:
        high[g * G : (g + 1) * G] = R[g] == hi
    gap = D.score_gap(high, S, G)  # (n, D)
    Ag = A.reshape(-1, G)
    for g, _lo, hi in two:
        k = int(high[g * G : (g + 1) * G].sum())
        c = (k / G) * float(Ag[g][R[g] == hi].mean())
        scale = float(np.abs(Ag[g]).max() * np.abs(S[g * G : (g + 1) * G]).max())
        if not ctx.tol.close(g_all[g], c * gap[g], scale * 4):
            raise PropertyViolation(
                "identity_in_vector_form",
                f"group {g} (G={G}, k={k}): g = {_fmt(g_all[g], 4)} is not c·(s̄₊ − s̄₋) = {_fmt(c * gap[g], 4)} "
                f"with c = (k/G)·Â₊ = {c:.6g}",
                _example(r, G, A, g),
            )


#: reward levels of the multi-valued groups (partial credit): exact in every float type
_PARTIAL_CREDIT = np.array([0.0, 0.25, 0.5, 0.75, 1.0])


def any_reward_groups(n: int, G: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` groups of ``G`` rewards beyond the binary verifier: partial credit (levels 0, ¼, ½, ¾, 1,
    ties included, three levels at least; for G ≥ 3), continuous in [0, 1], or continuous of either sign
    (normal × 1 or 0.01: advantages stay inside the ±10 clips trainers apply), one kind per group; shape
    (n·G,), group by group.

    >>> R = any_reward_groups(3, 4, np.random.default_rng(0)).reshape(3, 4)
    >>> [int(np.unique(row).size) >= 3 for row in R]
    [True, True, True]
    """
    rows = []
    for kind in rng.integers(0 if G > 2 else 1, 3, size=n):
        if kind == 0:
            row = rng.choice(_PARTIAL_CREDIT, size=G)
            row[rng.permutation(G)[:3]] = (0.0, 0.5, 1.0)
        elif kind == 1:
            row = rng.random(G)
            row[rng.integers(G)] = 0.0  # the worst answer gets 0: the spread is at least the largest reward
        else:
            row = rng.standard_normal(G) * float(rng.choice([1.0, 0.01]))
        rows.append(row)
    return np.concatenate(rows)


def _coefficient(A: np.ndarray, R: np.ndarray) -> np.ndarray:
    """c with g = c·β̂ for advantages Âᵢ = a·(Rᵢ − R̄): c = a·σ_R² = (1/G) Σ Âᵢ (Rᵢ − R̄), per group: the
    update of the scores sᵢ = Rᵢ − R̄."""
    centred = R - R.mean(1, keepdims=True)  # (n, G)
    return D.group_updates(A, centred.reshape(-1), R.shape[1])[:, 0]  # (n,)


def _identity_any_rewards(target: Fn, batch: Any, ctx: Context, rng: np.random.Generator) -> None:
    G = batch.group_size
    if G < 2:
        return
    r = any_reward_groups(batch.n_groups, G, rng)
    dtype = getattr(target, "dtype", None)
    r = round_rewards(r, dtype) if dtype else r  # the rewards exactly as the target sees them
    R = r.reshape(-1, G)
    A = call_target(target, r, G, "identity_in_vector_form")
    S = _random_scores(r.size, rng)
    g_all = D.group_updates(A, S, G)  # (n, D)
    slope = np.asarray(C.score_slope(R, S.reshape(R.shape[0], G, -1)))  # (n, D): β̂ per group, score component
    c_target = _coefficient(A.reshape(-1, G), R)
    E = _centred_reference(ctx, r, R)  # (n, G) or None
    c_ref = None if E is None else _coefficient(E, R)
    for g in range(R.shape[0]):
        if R[g].max() == R[g].min():  # rounding made it silent: the silent properties' business
            continue
        size = max(float(np.abs(A[g * G : (g + 1) * G]).max()), 0.0 if E is None else float(np.abs(E[g]).max()))
        tol = size * float(np.abs(S[g * G : (g + 1) * G]).max()) * 4 * _cancellation(R[g])
        for c, whose in ((c_target, "its own"), (c_ref, "the dial's")):
            if c is not None and not ctx.tol.close(g_all[g], c[g] * slope[g], tol):
                raise PropertyViolation(
                    "identity_in_vector_form",
                    _any_reward_message(g, R[g], g_all[g], c[g], slope[g], whose, c_target[g]),
                    _example(r, G, A, g),
                )


def _centred_reference(ctx: Context, r: np.ndarray, R: np.ndarray) -> np.ndarray | None:
    """The reference dial's advantages on these rewards, (n, G), when it is centred (zero-sum groups:
    then it has a coefficient c with g = c·β̂); ``None`` otherwise or without a reference."""
    if ctx.reference is None:
        return None
    E = np.asarray(ctx.reference(r, R.shape[1]), dtype=np.float64).reshape(R.shape)
    if not np.all(np.abs(E.sum(1)) <= 1e-6 * np.maximum(np.abs(E).sum(1), 1e-300)):
        return None
    return E


def _any_reward_message(
    g: int, row: np.ndarray, upd: np.ndarray, c: float, slope: np.ndarray, whose: str, c_own: float
) -> str:
    sd = float(C.reward_std(row))
    head = (
        f"group {g} (G={row.size}, rewards {_fmt(row)}, σ_R = {sd:.6g}): g = {_fmt(upd, 4)} is not "
        f"c·β̂ = {_fmt(c * slope, 4)}, β̂ the least-squares slope of the scores on the rewards"
    )
    if whose == "its own":
        return f"{head} and c = (1/G)Σ Âᵢ(Rᵢ − R̄) = {c:.6g}: the advantages are not proportional to R − R̄"
    said = (
        f"{head} and c = {c:.6g} the dial's coefficient (GRPO's is σ_R, Dr. GRPO's σ_R²); the target's "
        f"advantages give c = {c_own:.6g} = {c_own / c:.6g}·c"
    )
    if c_own > 0 and c > 0:  # c = σ_R²/divisor for advantages (R − R̄)/divisor
        said += (
            f": it divides this group's R − R̄ by {sd * sd / c_own:.6g} where the dial divides by {sd * sd / c:.6g} "
            "(a floor on σ_R, another ε, or σ by a formula other than the group's std, such as the binary "
            "√(μ(1 − μ)))"
        )
    return said


def groups_independent(target: Fn, batch: Any, ctx: Context, rng: np.random.Generator) -> None:
    """A group's advantages do not depend on the other groups of the batch nor on their order
    (a batch std may scale them all by one number: then up to that factor)."""
    r, G = batch.contiguous(), batch.group_size
    A = call_target(target, r, G, "groups_independent").reshape(-1, G)
    n = A.shape[0]
    R = r.reshape(-1, G)
    order = rng.permutation(n) if n > 1 else np.arange(n)
    B = call_target(target, R[order].reshape(-1), G, "groups_independent").reshape(-1, G)
    for pos, g in enumerate(order):
        scale = float(np.abs(A[g]).max())
        if not _residue_group(R, g) and not ctx.tol.close(B[pos], A[g], scale):
            raise PropertyViolation(
                "groups_independent",
                f"reordering the {n} groups changed group {g}'s advantages from {_fmt(A[g])} to {_fmt(B[pos])} (G={G})",
                _example(r, G, A.reshape(-1), int(g)),
            )
    # the same group with fresh neighbours (a different batch around it)
    g = int(rng.integers(n))
    if _residue_group(R, g):
        return
    other = np.where(rng.random(G * 3) < 0.5, 0.0, 1.0)
    for neighbours in (np.empty(0), other):
        C = call_target(target, np.concatenate([R[g], neighbours]), G, "groups_independent")[:G]
        scale = float(np.abs(A[g]).max())
        if ctx.batch_scale:
            lam = float(np.dot(C, A[g]) / max(np.dot(A[g], A[g]), 1e-300))
            if ctx.tol.close(C, lam * A[g], max(scale * abs(lam), 1e-300)) and (lam > 0 or scale == 0):
                continue
        elif ctx.tol.close(C, A[g], scale):
            continue
        what = "alone" if neighbours.size == 0 else f"beside {neighbours.size // G} other groups"
        raise PropertyViolation(
            "groups_independent",
            f"group {g} (G={G}, rewards {_fmt(R[g])}) gets {_fmt(A[g])} in the batch but {_fmt(C)} {what}: coupled "
            "across groups",
            _example(r, G, A.reshape(-1), g),
        )


def permutation_equivariant(target: Fn, batch: Any, ctx: Context, rng: np.random.Generator) -> None:
    """Permuting the answers within a group permutes their advantages the same way."""
    r, G = batch.contiguous(), batch.group_size
    A = call_target(target, r, G, "permutation_equivariant").reshape(-1, G)
    R = r.reshape(-1, G)
    perm = np.stack([rng.permutation(G) for _ in range(R.shape[0])])  # (n, G)
    P = call_target(target, np.take_along_axis(R, perm, 1).reshape(-1), G, "permutation_equivariant").reshape(-1, G)
    expect = np.take_along_axis(A, perm, 1)
    floor = _zero_floor(A, r, G, ctx)  # a silent group's rounding residue, moved by the permutation, is no change
    for g in range(R.shape[0]):
        same = ctx.tol.close(P[g], expect[g], float(np.abs(A[g]).max())) or np.all(np.abs(P[g] - expect[g]) <= floor)
        if not _residue_group(R, g) and not same:
            raise PropertyViolation(
                "permutation_equivariant",
                f"group {g} (G={G}): permuting the rewards {_fmt(R[g])} by {_fmt(perm[g])} gave {_fmt(P[g])}, "
                f"expected {_fmt(expect[g])}",
                _example(r, G, A.reshape(-1), g),
            )


def stateless(target: Fn, batch: Any, ctx: Context, rng: np.random.Generator) -> None:
    """The same input gives the same output on the next call and after other calls (no running stats, no
    answer that flips from call to call).  The answer from before other calls is the target's first answer to the
    input where the search remembers one (:attr:`Context.earlier`: another property asked it, every call since came
    between); otherwise a call of other rewards is made between two calls here."""
    r, G = batch.contiguous(), batch.group_size
    before = ctx.earlier(r, G) if ctx.earlier is not None else None
    A1 = call_target(target, r, G, "stateless")
    pairs = [(A1, call_target(target, r, G, "stateless"), "on the next call")]
    if before is not None:
        pairs.append((advantage_vector(before, r, G, "stateless"), A1, "after other calls"))
    else:
        call_target(target, np.where(rng.random(r.size) < 0.5, 0.0, 1.0) * 3.0 - 1.0, G, "stateless")
        pairs.append((A1, call_target(target, r, G, "stateless"), "after another call"))
    for first, then, when in pairs:
        if not ctx.tol.close(first, then, float(np.abs(first).max())):
            i = int(np.argmax(np.abs(first - then)))
            raise PropertyViolation(
                "stateless",
                f"the same rewards gave {first[i]:.6g} then {then[i]:.6g} at row {i} (G={G}) {when}: the target "
                "keeps state",
                _example(r, G, first, i // G),
            )


def matches_dial(target: Fn, batch: Any, ctx: Context, rng: np.random.Generator) -> None:
    """The advantages equal the reference dial's (the expected preset, or the inferred dial), so
    c(k, G) matches it too; silent groups of non-exact values are left to the audit's probe."""
    if ctx.reference is None:
        return
    r, G = batch.contiguous(), batch.group_size
    A = call_target(target, r, G, "matches_dial").reshape(-1, G)
    E = np.asarray(ctx.reference(r, G), dtype=np.float64).reshape(-1, G)
    R = r.reshape(-1, G)
    silent = _silent(R)
    for g in range(A.shape[0]):
        if silent[g] and not _exact_silent_value(float(R[g, 0])):
            continue
        if not ctx.tol.close(A[g], E[g], float(max(np.abs(E[g]).max(), np.abs(A[g]).max())) * 4):
            raise PropertyViolation(
                "matches_dial",
                f"group {g} (G={G}, rewards {_fmt(R[g])}): advantages {_fmt(A[g])}, the dial gives {_fmt(E[g])}",
                _example(r, G, A.reshape(-1), g),
            )


# --- layouts (targets that take group ids) ---------------------------------------------------------
def layout_independent(target: Fn, batch: Any, ctx: Context, rng: np.random.Generator) -> None:
    """Rows in any order, with group ids of any labels, give each answer the advantage it gets when
    the groups come one after another (for targets that take group ids)."""
    if ctx.reference_ids is None:
        return
    r, G = batch.contiguous(), batch.group_size
    A = call_target(target, r, G, "layout_independent")
    n = r.size // G
    labels = rng.choice(10**9, size=n, replace=False)
    order = rng.permutation(r.size)
    ids = np.repeat(labels, G)[order]
    B = call_target(target, r[order], G, "layout_independent", ids)
    expect = A[order]
    for row in range(r.size):
        g = order[row] // G
        if _residue_group(r.reshape(-1, G), g):
            continue
        if not ctx.tol.close(B[row], expect[row], float(np.abs(A[g * G : (g + 1) * G]).max())):
            raise PropertyViolation(
                "layout_independent",
                f"the advantages depend on the layout: answer {order[row]} of group {g} (G={G}, rewards "
                f"{_fmt(r[g * G : (g + 1) * G])}) gets {expect[row]:.6g} group by group but {B[row]:.6g} with the "
                "rows shuffled and the groups relabelled",
                _example(r, G, A, int(g)),
            )


def ragged_groups(target: Fn, batch: Any, ctx: Context, rng: np.random.Generator) -> None:
    """Groups of different sizes (answers filtered out or aborted, down to a lone answer) each get
    their own group's advantages: no block of G is assumed.  A lone answer has σ = 0 and gets 0;
    NaN there fails, a nonzero push (its raw reward: no baseline) is a deviation."""
    if ctx.reference_ids is None or not ctx.ragged:
        return
    r, G = batch.contiguous(), batch.group_size
    R = r.reshape(-1, G)
    sizes = rng.integers(1, G + 1, size=R.shape[0])
    picks = [rng.permutation(G)[: sizes[g]] for g in range(R.shape[0])]
    if R.shape[0] > 1:  # a lone answer beside other groups in every example: the one of its group's rewards
        g1 = int(rng.integers(0, R.shape[0], size=1)[0])  # farthest from 0, which a missing baseline pushes most
        sizes[g1], picks[g1] = 1, np.array([np.argmax(np.abs(R[g1]))])
    rows = np.concatenate([R[g, picks[g]] for g in range(R.shape[0])])
    ids = np.repeat(np.arange(R.shape[0]), sizes)
    order = rng.permutation(rows.size)
    rows, ids = rows[order], ids[order]
    A = call_target(target, rows, G, "ragged_groups", ids)
    E = np.asarray(ctx.reference_ids(rows, ids), dtype=np.float64)
    pushed: PropertyViolation | None = None
    for g in np.unique(ids):
        at = np.flatnonzero(ids == g)
        got, want = A[at], E[at]
        padded = _padded_to(ctx, rows[at], got, {G, int(sizes.max())})
        if padded:
            raise PropertyViolation(
                "ragged_groups",
                f"a group of {at.size} (rewards {_fmt(rows[at])}, among groups of sizes {sorted(set(sizes.tolist()))}) "
                f"gets {_fmt(got)}: its advantages as if padded with {padded - at.size} zero reward(s) to {padded} "
                "answers (the zeros count in its mean and std), where its own answers give "
                f"{_fmt(want)}: take each group's statistics over its own answers (mask the padding)",
                {"group_size": G, "rewards": _list(rows), "group_ids": _list(ids), "group": int(g)},
            )
        if at.size == 1 and got[0] != 0:
            lone = PropertyViolation(
                "ragged_groups",
                f"a lone answer (a group of 1, reward {rows[at][0]:.6g}) gets {got[0]:.6g}: σ = 0 there, so the "
                "identity gives it no push (NaN poisons the step; a nonzero value pushes by the raw reward, with "
                "no baseline)",
                {"group_size": 1, "rewards": _list(rows), "group_ids": _list(ids)},
                "fail" if not np.isfinite(got[0]) else "deviation",
            )
            if lone.severity == "fail":
                raise lone
            pushed = pushed or lone  # raised once every other group is checked: a fail there comes first
        scale = float(max(np.abs(want).max(), np.abs(got).max())) * 4
        if at.size > 1 and not ctx.tol.close(got, want, scale):
            kept = rows[at]
            if kept.max() == kept.min() and not _exact_silent_value(float(kept[0])):
                continue  # a silent subset of 0.1s: its rounding residue is the silent probe's business
            if _alone_gives(target, kept, G, got, ctx.tol, scale):
                continue  # its groups are the ids' (what it computes in them is the other properties' business)
            raise PropertyViolation(
                "ragged_groups",
                f"a group of {at.size} among groups of sizes {sorted(set(sizes.tolist()))} (G={G} before answers "
                f"were dropped; rewards {_fmt(rows[at])}) gets {_fmt(got)}, its own group's advantages are "
                f"{_fmt(want)}: the groups are not taken as the ids give them (fixed blocks of G?)",
                {"group_size": G, "rewards": _list(rows), "group_ids": _list(ids), "group": int(g)},
            )
    if pushed is not None:
        raise pushed


def _padded_to(ctx: Context, kept: np.ndarray, got: np.ndarray, sizes: set[int]) -> int:
    """The size a group of fewer answers was padded to with zero rewards, where the reference on the padded group
    gives what the target gave (and its own answers do not); 0 where no padding explains it."""
    if ctx.reference is None or not np.all(np.isfinite(got)) or not np.any(kept):
        return 0
    own = np.zeros(1) if kept.size == 1 else np.asarray(ctx.reference(kept, kept.size), dtype=np.float64)
    for size in sorted(s for s in sizes if s > kept.size):
        try:
            padded = np.r_[kept, np.zeros(size - kept.size)]
            want = np.asarray(ctx.reference(padded, size), dtype=np.float64)[: kept.size]
        except ValueError:  # a reference that takes no such group
            return 0
        scale = float(max(np.abs(want).max(), np.abs(got).max(), 1e-30)) * 4
        if ctx.tol.close(got, want, scale) and not ctx.tol.close(got, own, scale):
            return size
    return 0


def _alone_gives(target: Fn, rows: np.ndarray, G: int, got: np.ndarray, tol: Tolerance, scale: float) -> bool:
    """Whether the target gives a group's rows, called on them alone under one id, what it gave them in a ragged
    batch: then it takes the groups as the ids give them, whatever it computes in each."""
    try:
        alone = call_target(target, rows, G, "ragged_groups", np.zeros(rows.size, dtype=int))
    except (PropertyViolation, TargetError):
        return False
    return bool(tol.close(alone, got, scale))


# --- filter properties ---------------------------------------------------------------------------
def call_filter(target: Fn, rewards: np.ndarray, G: int, prop: str) -> np.ndarray:
    return filter_flags(target(rewards, G), rewards, G, prop)


def filter_flags(out: Any, rewards: np.ndarray, G: int, prop: str) -> np.ndarray:
    """``out``, a filter's output for ``rewards``, as one bool per group; a ``prop`` violation where it is not."""
    out = np.asarray(out)
    n = rewards.size // G
    if out.shape != (n,):
        raise PropertyViolation(
            prop,
            f"returned shape {out.shape} for {n} groups (G={G}); a filter returns one bool per group",
            _example(rewards, G, out),
        )
    return _as_flags(out, rewards, G, prop, "a filter returns one bool per group")


def _as_flags(out: np.ndarray, rewards: np.ndarray, G: int, prop: str, rule: str) -> np.ndarray:
    """Flags as bools: bools as they are, numbers that are all 0 or 1 read as flags; anything else (a
    σ, a probability, a score returned where the keep flag was meant) is a ``prop`` violation."""
    if out.dtype == np.bool_:
        return out
    if np.issubdtype(out.dtype, np.number) and np.all((out == 0) | (out == 1)):
        return out.astype(bool)
    raise PropertyViolation(
        prop,
        f"returned dtype {out.dtype} with values {_fmt(out)}, not flags; {rule} (True = keep)",
        _example(rewards, G, out),
    )


def _as_row_mask(out: np.ndarray, n: int, indices: bool = False) -> tuple[np.ndarray, bool]:
    """A row filter's output as one flag per row: flags as they are, or the indices of the kept rows
    (what ``zero_variance_filter``-style filters return) turned into flags; and whether it was read as indices.

    Integers of length ``n`` that are all 0 or 1 read as flags, unless they are also the indices 0…n−1 (every row
    of a batch of one or two rows kept) and the filter has returned indices before (``indices``)."""
    if out.ndim == 1 and out.size == 0 and n > 0:  # no index: every row dropped
        return np.zeros(n, dtype=bool), indices
    if out.dtype == np.bool_ or out.ndim != 1 or not np.issubdtype(out.dtype, np.integer):
        return out, False
    if out.size == n and np.isin(out, (0, 1)).all() and not (indices and np.array_equal(out, np.arange(n))):
        return out.astype(bool), False
    if out.size and (out.min() < 0 or out.max() >= n):
        return out, False
    mask = np.zeros(n, dtype=bool)
    mask[out] = True
    return mask, True


class WholeGroups(View):
    """A row filter (one keep flag per answer) seen as a group filter: each group's flags must agree
    (a group is kept or dropped whole, by its σ); a group split between kept and dropped answers is a
    ``keeps_whole_groups`` violation, with the rows of each side.  A filter that has returned the indices of the
    kept rows is read so from then on where its output could be either (:func:`_as_row_mask`)."""

    returns_indices = False
    """Whether the filter has returned indices (the first calls, the designed probes, have many rows: they tell)."""

    def call(self, rewards: np.ndarray, group_size: int) -> Output:  # a row filter takes no group ids
        out = output_of(self._target, rewards, group_size)
        return Output(self._flags(out.value, rewards, int(group_size)), out.issue, out.overwrite)

    def _flags(self, out: Any, rewards: np.ndarray, G: int) -> np.ndarray:
        rows, indices = _as_row_mask(np.asarray(out), rewards.size, self.returns_indices)
        self.returns_indices = self.returns_indices or indices
        if rows.shape != rewards.shape:
            raise PropertyViolation(
                "filter_well_formed",
                f"returned shape {rows.shape} for {rewards.size} rewards (G={G}); a row filter returns one bool "
                "per answer",
                _example(rewards, G, rows),
            )
        rule = "a row filter returns one bool per answer, or the indices of the kept answers"
        flags = _as_flags(rows, rewards, G, "filter_well_formed", rule).reshape(-1, G)
        split = np.flatnonzero(flags.any(1) & ~flags.all(1))
        if split.size:
            g = int(split[0])
            kept, dropped = np.flatnonzero(flags[g]).tolist(), np.flatnonzero(~flags[g]).tolist()
            raise PropertyViolation(
                "keeps_whole_groups",
                f"group {g} (G={G}, rewards {_fmt(rewards[g * G : (g + 1) * G])}) is split: answers {kept} kept, "
                f"{dropped} dropped; a keep rule decides by the group's σ, for the whole group",
                _example(rewards, G, rows, g),
            )
        return np.asarray(flags.all(1))


def filter_well_formed(target: Fn, batch: Any, ctx: Context, rng: np.random.Generator) -> None:
    """One bool per group (True = keep), and the rewards left untouched."""
    r, G = batch.contiguous(), batch.group_size
    out = as_target(target, "filter").call(r, G)  # the input checked where the target runs
    keep = filter_flags(out.value, r, G, "filter_well_formed")
    if out.issue:
        raise PropertyViolation(
            "filter_well_formed", f"the target {out.issue} (G={G}, {r.size} rewards)", _example(r, G, keep)
        )


def kept_by_definition(rewards: np.ndarray, G: int, keep: str) -> np.ndarray:
    """Which groups a keep rule keeps, from the rule's definition: the filter audit's reference.

    ``'all'`` keeps every group; ``'nonzero_std'`` (DAPO's dynamic sampling) keeps the groups with
    σ > 0, and σ = 0 exactly when every reward of the group is equal: one distinct value
    (``np.unique``), however close the others are.  Written apart from
    :func:`grpo_identity.dial.keep_mask`, so that the audit of a filter also tests the dial's.

    >>> kept_by_definition(np.array([1., 1., 0.1, 0.1 + 1e-9]), 2, "nonzero_std")
    array([False,  True])
    """
    R = np.asarray(rewards, dtype=np.float64).reshape(-1, G)  # (n, G)
    if keep == "all":
        return np.ones(R.shape[0], dtype=bool)
    if keep != "nonzero_std":
        raise ValueError(f"keep must be 'all' or 'nonzero_std', got {keep!r}")
    return np.array([np.unique(row).size > 1 for row in R], dtype=bool)


def keeps_groups_with_nonzero_std(target: Fn, batch: Any, ctx: Context, rng: np.random.Generator) -> None:
    """The filter keeps exactly the groups the expected keep rule keeps (DAPO's: σ > 0), by the
    rule's definition (:func:`kept_by_definition`)."""
    r, G = batch.contiguous(), batch.group_size
    keep = call_filter(target, r, G, "keeps_groups_with_nonzero_std")
    rule = (ctx.keep_reference or D.DAPO).keep
    want = kept_by_definition(r, G, rule)
    if ctx.keep_rule is not None and rule == "nonzero_std":  # the tolerance the inference found
        want, near = ctx.keep_rule(r, G)
        keep = np.where(near, want, keep)
    R = r.reshape(-1, G)
    for g in np.flatnonzero(keep != want):
        sd = float(R[g].std())
        raise PropertyViolation(
            "keeps_groups_with_nonzero_std",
            f"group {g} (G={G}, rewards {_fmt(R[g])}, σ = {sd:.3g}) is {'kept' if keep[g] else 'dropped'}; the keep "
            f"rule '{rule}' {'keeps' if want[g] else 'drops'} it",
            _example(r, G, keep, int(g)),
        )


def filter_groups_independent(target: Fn, batch: Any, ctx: Context, rng: np.random.Generator) -> None:
    """A group's keep decision depends on that group only (not its neighbours, not their order)."""
    r, G = batch.contiguous(), batch.group_size
    keep = call_filter(target, r, G, "filter_groups_independent")
    R = r.reshape(-1, G)
    order = rng.permutation(R.shape[0])
    k2 = call_filter(target, R[order].reshape(-1), G, "filter_groups_independent")
    for pos, g in enumerate(order):
        if k2[pos] != keep[g]:
            raise PropertyViolation(
                "filter_groups_independent",
                f"reordering the groups changed the decision for group {g} (G={G}, rewards {_fmt(R[g])})",
                _example(r, G, keep, int(g)),
            )
    for g in range(R.shape[0]):
        alone = call_filter(target, R[g], G, "filter_groups_independent")[0]
        if alone != keep[g]:
            raise PropertyViolation(
                "filter_groups_independent",
                f"group {g} (G={G}, rewards {_fmt(R[g])}) is {'kept' if alone else 'dropped'} alone but "
                f"{'kept' if keep[g] else 'dropped'} in the batch",
                _example(r, G, keep, g),
            )


def filter_stateless(target: Fn, batch: Any, ctx: Context, rng: np.random.Generator) -> None:
    """The same rewards get the same decisions, and permuting within a group changes nothing."""
    r, G = batch.contiguous(), batch.group_size
    k1 = call_filter(target, r, G, "filter_stateless")
    R = r.reshape(-1, G)
    shuffled = np.stack([row[rng.permutation(G)] for row in R]).reshape(-1)
    k2 = call_filter(target, shuffled, G, "filter_stateless")
    k3 = call_filter(target, r, G, "filter_stateless")
    if not (np.array_equal(k1, k3) and np.array_equal(k1, k2)):
        g = int(np.flatnonzero((k1 != k3) | (k1 != k2))[0])
        raise PropertyViolation(
            "filter_stateless",
            f"group {g} (G={G}, rewards {_fmt(R[g])}): decisions changed between calls on the same (or a "
            "within-group permuted) batch",
            _example(r, G, k1, g),
        )


#: advantage properties, in the order the audit runs them
ADVANTAGE_PROPERTIES = (
    well_formed,
    silent_groups_exactly_zero,
    two_valued_per_group,
    zero_sum_per_group,
    identity_in_vector_form,
    groups_independent,
    permutation_equivariant,
    stateless,
    matches_dial,
)
#: properties of targets that take group ids (rows in any order, groups of any size)
LAYOUT_PROPERTIES = (layout_independent, ragged_groups)
#: filter properties
FILTER_PROPERTIES = (filter_well_formed, keeps_groups_with_nonzero_std, filter_groups_independent, filter_stateless)
#: the properties that judge the calls themselves (what a call leaves behind, what a second call of the same input
#: gives): every call of theirs reaches the target.  The others judge answers, which the search may give them from
#: the target's earlier answer to the same input (:class:`~grpo_identity.checks.measure.search.AnswerMemo`).
CALL_PROPERTIES = frozenset({well_formed, stateless, filter_well_formed, filter_stateless})
