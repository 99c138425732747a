"""Which named variant a target computes (:mod:`grpo_identity.variants`), for a report that says
what the target does instead of "no dial fits".

The target is called on designed batches, one per G of :data:`RECOGNITION_GROUP_SIZES`: a group per
k = 0…G of binary rewards, a group of distinct continuous rewards and a group of two non-binary
levels.  Each variant's reference (each of its forms, with equal response lengths and, for a variant
that weighs by tokens, with the lengths the framework drivers lay out) is fitted to the outputs with
one positive factor α over every batch; a variant whose worst residual is within the precision's
fit tolerance is recognised (α = 1 preferred — a factor within that tolerance of 1 is 1 — then the
smallest residual).  One factor for all
batches keeps a batch-wide number honest: GPG's α = B/#(nonzero rewards) changes from batch to batch
and is no constant times Dr. GRPO.  A form with an ε of its own that comes within
:data:`EPS_NEAR` but does not fit gets its ε fitted as well (0, or :data:`EPS_RANGE`): an implementation
that chose another ε is the variant with that ε (as a preset with another ε is the preset, a deviation).

>>> from grpo_identity.variants import VARIANTS
>>> ref = VARIANTS["maxrl"]
>>> def maxrl(r, G):
...     return ref.advantages(r.reshape(-1, G)).reshape(-1)
>>> found = recognise(maxrl, "float64")
>>> found.variant.name, found.factor
('maxrl', 1.0)
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from grpo_identity import dial as D
from grpo_identity.checks.calls.target import TargetError, TargetMalformed
from grpo_identity.checks.measure.infer import fit_tolerance, infer_dial
from grpo_identity.checks.measure.properties import PropertyViolation, call_target
from grpo_identity.foundation import minimise_scalar
from grpo_identity.variants import VARIANTS, Variant

__all__ = ["RECOGNITION_GROUP_SIZES", "Recognition", "recognition_batch", "recognise"]

#: group sizes of the recognition batches
RECOGNITION_GROUP_SIZES = (2, 3, 4, 8)
#: the ε an implementation may have chosen instead of its form's: 0, or within this range (a larger one is no
#: guard against a zero std but a change of scale)
EPS_RANGE = (1e-12, 1e-2)
#: the worst residual within which a form with its own ε is close enough for another ε to explain the rest: an
#: ε of 1e-2 changes an advantage of a recognition batch (σ ≥ 0.12) by at most about 8 %
EPS_NEAR = 0.1


@dataclass(frozen=True)
class Recognition:
    """A variant the target computes: its form, the factor α (target = α·reference), the lengths
    under which it matched, the worst residual (relative to the batch's largest |Â|) and the ε it uses where
    that is not its form's own (None: the form's)."""

    variant: Variant
    form: str
    factor: float
    lengths: str
    residual: float
    eps: float | None = None

    def answers(self, rewards: np.ndarray, G: int) -> np.ndarray:
        """The recognised form's own advantages of ``rewards`` (groups of G), under the lengths and with the ε it
        matched under (without the factor)."""
        from grpo_identity.checks.frameworks import length_layouts  # light: numpy at call time only

        r = np.asarray(rewards, dtype=np.float64).reshape(-1)
        L = length_layouts(r).get(self.lengths)
        with np.errstate(all="ignore"):
            return self.variant.advantages(r.reshape(-1, G), L, self.form, self.eps).reshape(-1)

    def to_dict(self) -> dict[str, Any]:
        v = self.variant
        return {
            "name": v.name,
            "citation": v.citation,
            "stands": v.stands,
            "departs": list(v.departures(self.form)),
            "coefficient": v.coefficient_text or None,
            "form": self.form,
            "factor": self.factor,
            "lengths": self.lengths,
            "residual": self.residual,
            "eps": self.eps,
            "form_eps": v.eps_of(self.form),
        }


def recognition_batch(G: int) -> np.ndarray:
    """Groups of G: k = 0…G binary (k ones first), distinct continuous rewards, two levels ½ and 1:
    (G + 3)·G rewards.

    >>> recognition_batch(2).reshape(-1, 2).tolist()[3:]
    [[0.137, 0.755], [0.5, 1.0]]
    """
    binary = [np.r_[np.ones(k), np.zeros(G - k)] for k in range(G + 1)]
    continuous = np.round((0.137 + 0.618 * np.arange(G)) % 1.0, 3)
    levels = np.where(np.arange(G) < G // 2, 0.5, 1.0)
    return np.concatenate([*binary, continuous, levels])


def _lengths_choices(variant: Variant) -> list[tuple[str, Callable[[np.ndarray], np.ndarray] | None]]:
    """The response lengths a variant's reference is tried under: equal (None) and, for a variant that weighs
    by tokens, the probes' unequal lengths (:func:`~grpo_identity.checks.frameworks.length_layouts`)."""
    from grpo_identity.checks.frameworks import length_layouts  # light: numpy at call time only

    equal: list[tuple[str, Callable[[np.ndarray], np.ndarray] | None]] = [("equal", None)]
    if not variant.uses_lengths:
        return equal
    return [*equal, *((name, lambda r, name=name: length_layouts(r)[name]) for name in length_layouts(np.zeros(2)))]


def _fit(outs: list[np.ndarray], refs: list[np.ndarray], unit: float) -> tuple[float, float]:
    """The one factor α with outs ≈ α·refs (least squares, where both are defined) and the worst residual
    relative to each batch's largest |output| (:func:`_worst`)."""
    ok = [np.isfinite(o) & np.isfinite(f) for o, f in zip(outs, refs)]
    t = np.concatenate([o[m] for o, m in zip(outs, ok)])
    r = np.concatenate([f[m] for f, m in zip(refs, ok)])
    rr = float(r @ r)
    alpha = float(t @ r) / rr if rr > 0 else 0.0
    if abs(alpha - 1) <= unit:  # within the precision: the variant itself, an ε of its own aside
        alpha = 1.0
    return alpha, _worst(outs, refs, alpha)


def _worst(outs: list[np.ndarray], refs: list[np.ndarray], alpha: float) -> float:
    """The largest |output − α·ref| of each batch where both are defined, relative to its largest |output| there:
    the worst over the batches."""
    worst = 0.0
    for o, f in zip(outs, refs):
        m = np.isfinite(o) & np.isfinite(f)
        size = max(float(np.abs(o[m]).max(initial=0.0)), 1e-300)
        worst = max(worst, float(np.abs(o[m] - alpha * f[m]).max(initial=0.0)) / size)
    return worst


def _outputs(target: Callable[..., Any]) -> dict[int, np.ndarray]:
    """The target's advantages on each recognition batch; NaN where it does not take that G (an
    exception of its own, a malformed output); a target that dies or hangs ends the recognition."""
    outs = {}
    for G in RECOGNITION_GROUP_SIZES:
        try:
            outs[G] = call_target(target, recognition_batch(G), G, "recognition")
        except (PropertyViolation, TargetMalformed):
            outs[G] = np.full(G * (G + 3), np.nan)
        except TargetError as exc:
            if type(exc) is not TargetError:  # crashed or timed out: nothing more to ask it
                raise
            outs[G] = np.full(G * (G + 3), np.nan)
    return outs


def _rewards(rounding: Callable[[np.ndarray], np.ndarray] | None) -> dict[int, np.ndarray]:
    """Each recognition batch as the target sees it (its dtype), (n_groups, G)."""
    return {
        G: (rounding(recognition_batch(G)) if rounding else recognition_batch(G)).reshape(-1, G)
        for G in RECOGNITION_GROUP_SIZES
    }


def _a_preset_fits(outs: dict[int, np.ndarray], rewards: dict[int, np.ndarray], tol: float) -> bool:
    """Whether a preset of the dial gives the target's advantages: then no variant explains it (OPO at
    equal lengths is Dr. GRPO), and a failing property is the target's own."""
    for d in D.PRESETS.values():
        refs = [np.asarray(D.advantages(rewards[G], dial=d)).reshape(-1) for G in RECOGNITION_GROUP_SIZES]
        if _fits([outs[G] for G in RECOGNITION_GROUP_SIZES], refs, tol, factor_free=True):
            return True
    return False


def _fits(outs: list[np.ndarray], refs: list[np.ndarray], tol: float, factor_free: bool = False) -> bool:
    if not all(np.all(np.isfinite(o)) for o in outs):
        return False
    alpha, worst = _fit(outs, refs, tol)
    return worst <= tol and (alpha == 1.0 or not factor_free)


def _candidate(
    v: Variant,
    form: str,
    lengths_of: Callable[[np.ndarray], np.ndarray] | None,
    outs: dict[int, np.ndarray],
    rewards: dict[int, np.ndarray],
    tol: float,
) -> tuple[float, float, float | None] | None:
    """(α, worst residual, ε or None for the form's own) of ``v``'s ``form`` under the lengths ``lengths_of``
    where it fits the target on two group sizes at least, else None."""
    L = {G: None if lengths_of is None else np.asarray(lengths_of(R), dtype=np.float64) for G, R in rewards.items()}

    def refs(eps: float | None) -> dict[int, np.ndarray]:
        with np.errstate(divide="ignore", invalid="ignore"):  # ε = 0 tried on a silent group: NaN, left out
            return {G: v.advantages(R, L[G], form, eps).reshape(-1) for G, R in rewards.items()}

    own = refs(None)
    defined = [  # the batches where the form and the target are defined
        G for G, f in own.items() if np.isfinite(f).any() and np.all(np.isfinite(outs[G][np.isfinite(f)]))
    ]
    if len(defined) < 2:  # one group size cannot tell a variant from one of its special cases
        return None

    def fit(eps: float | None) -> tuple[float, float]:
        got = own if eps is None else refs(eps)
        return _fit([outs[G] for G in defined], [got[G] for G in defined], tol)

    def off_at_one(eps: float) -> float:  # the worst residual of the form itself (α = 1) with this ε
        got = refs(eps)
        return _worst([outs[G] for G in defined], [got[G] for G in defined], 1.0)

    alpha, worst = fit(None)
    eps = None
    if worst > tol and worst <= EPS_NEAR and v.eps_of(form) is not None:
        eps = _fit_eps(off_at_one)  # α = 1: another ε, the same formula (α and ε trade off on similar batches)
        alpha, worst = 1.0, off_at_one(eps)
        if worst > tol:
            alpha, worst = fit(eps)
    return (alpha, worst, eps) if alpha > 0 and worst <= tol else None


def _fit_eps(worst: Callable[[float], float]) -> float:
    """The ε of 0 and :data:`EPS_RANGE` with the smallest ``worst(ε)``: a grid of quarter decades, then a
    golden-section search in log ε (:func:`~grpo_identity.foundation.minimise_scalar`)."""
    lo, hi = EPS_RANGE
    eps, value = minimise_scalar(worst, lo, hi, grid=int(round(math.log10(hi / lo) * 4)) + 1, log=True, tol=1e-6)
    return 0.0 if worst(0.0) <= value else eps


@functools.cache
def _named_otherwise_at_equal_lengths(name: str, form: str, precision: str) -> bool:
    """Whether the variant ``name``'s ``form``, with every answer of the same length, has another name at
    ``precision``: a point of the dial (OPO's is Dr. GRPO, token-level GRPO's is GRPO with Bessel's std, read by
    the dial's own inference) or another variant's form (verl's REINFORCE++-baseline is AReaL's LitePPO but for
    where the ε sits).  Such a form is recognised only under unequal lengths."""
    v = VARIANTS[name]

    def reference(r: np.ndarray, G: int) -> np.ndarray:
        return v.advantages(np.asarray(r).reshape(-1, G), None, form).reshape(-1)

    if infer_dial(reference).centre is not None:
        return True
    outs = {G: reference(recognition_batch(G), G) for G in RECOGNITION_GROUP_SIZES}
    rewards, tol = _rewards(None), fit_tolerance(precision)
    for w in VARIANTS.values():
        for other in w.forms if w is not v else ():
            fit = _candidate(w, other, None, outs, rewards, tol)
            if fit is not None and fit[0] == 1.0 and fit[2] is None:
                return True
    return False


def recognise(
    target: Callable[..., Any],
    precision: str,
    rounding: Callable[[np.ndarray], np.ndarray] | None = None,
    prefer: Variant | None = None,
    only: Variant | None = None,
) -> Recognition | None:
    """The variant ``target`` computes, or None: ``prefer`` where it fits among others, else the
    best fit; ``only``: that variant alone.  ``rounding``: the rewards as the target sees them
    (its dtype), for the references.  None where a preset of the dial gives its advantages, and a
    variant that weighs by tokens counts at equal response lengths only where it has no other name there
    (:func:`_named_otherwise_at_equal_lengths`)."""
    outs = _outputs(target)
    if sum(np.all(np.isfinite(A)) for A in outs.values()) < 2:
        return None
    tol = fit_tolerance(precision)
    rewards = _rewards(rounding)
    if _a_preset_fits(outs, rewards, tol):
        return None
    found: list[Recognition] = []
    for v in [only] if only is not None else list(VARIANTS.values()):
        for form in v.forms:
            for lengths, lengths_of in _lengths_choices(v):
                if v.uses_lengths and lengths == "equal" and _named_otherwise_at_equal_lengths(v.name, form, precision):
                    continue  # at equal lengths it has another name
                fit = _candidate(v, form, lengths_of, outs, rewards, tol)
                if fit is not None:
                    found.append(Recognition(v, form, fit[0], lengths, fit[1], fit[2]))
    return min(found, key=lambda f: (f.variant != prefer, f.factor != 1.0, f.residual)) if found else None
