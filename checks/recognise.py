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
and is no constant times Dr. GRPO.

>>> from grpo_identity.variants import VARIANTS
>>> ref = VARIANTS["maxrl"]
>>> def maxrl(r, G):
...     return ref.advantages(r.reshape(-1, G)).reshape(-1)
>>> found = recognise(maxrl, "float64")
>>> found.variant.name, found.factor
('maxrl', 1.0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from grpo_identity.checks.infer import fit_tolerance
from grpo_identity.checks.properties import PropertyViolation, _call
from grpo_identity.checks.target import TargetError
from grpo_identity.variants import VARIANTS, Variant

__all__ = ["RECOGNITION_GROUP_SIZES", "Recognition", "recognition_batch", "recognise"]

#: group sizes of the recognition batches
RECOGNITION_GROUP_SIZES = (2, 3, 4, 8)


@dataclass(frozen=True)
class Recognition:
    """A variant the target computes: its form, the factor α (target = α·reference), the lengths
    under which it matched and the worst residual (relative to the batch's largest |Â|)."""

    variant: Variant
    form: str
    factor: float
    lengths: str
    residual: float

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


def _lengths_choices(variant: Variant) -> list[tuple[str, Callable[[int], np.ndarray] | None]]:
    from grpo_identity.checks.frameworks import length_layouts  # light: numpy at call time only

    equal: list[tuple[str, Callable[[int], np.ndarray] | None]] = [("equal", None)]
    if not variant.uses_lengths:
        return equal
    return [*equal, *((name, lambda n, name=name: length_layouts(n)[name]) for name in length_layouts(2))]


def _fit(outs: list[np.ndarray], refs: list[np.ndarray], unit: float) -> tuple[float, float]:
    """The one factor α with outs ≈ α·refs (least squares, where both are defined) and the worst residual
    relative to each batch's largest |output|."""
    ok = [np.isfinite(o) & np.isfinite(f) for o, f in zip(outs, refs)]
    t = np.concatenate([o[m] for o, m in zip(outs, ok)])
    r = np.concatenate([f[m] for f, m in zip(refs, ok)])
    rr = float(r @ r)
    alpha = float(t @ r) / rr if rr > 0 else 0.0
    if abs(alpha - 1) <= unit:  # within the precision: the variant itself, an ε of its own aside
        alpha = 1.0
    worst = max(
        float(np.abs(o[m] - alpha * f[m]).max(initial=0.0)) / max(float(np.abs(o[m]).max(initial=0.0)), 1e-300)
        for o, f, m in zip(outs, refs, ok)
    )
    return alpha, worst


def recognise(
    target: Callable[..., Any],
    precision: str,
    rounding: Callable[[np.ndarray], np.ndarray] | None = None,
    prefer: Variant | None = None,
    only: Variant | None = None,
) -> Recognition | None:
    """The variant ``target`` computes, or None: ``prefer`` where it fits among others, else the
    best fit; ``only``: that variant alone.  ``rounding``: the rewards as the target sees them
    (its dtype), for the references."""
    outs = {}
    for G in RECOGNITION_GROUP_SIZES:
        try:
            outs[G] = _call(target, recognition_batch(G), G, "recognition")
        except (PropertyViolation, TargetError) as exc:  # a G it does not take: the others decide
            if isinstance(exc, TargetError) and type(exc) is not TargetError:
                raise  # it died or hung
            outs[G] = np.full(G * (G + 3), np.nan)
    if sum(np.all(np.isfinite(A)) for A in outs.values()) < 2:
        return None
    tol = fit_tolerance(precision)
    found: list[Recognition] = []
    for v in [only] if only is not None else list(VARIANTS.values()):
        for lengths, lengths_of in _lengths_choices(v):
            for form in v.forms:
                refs = []
                for G in RECOGNITION_GROUP_SIZES:
                    r = recognition_batch(G)
                    R = (rounding(r) if rounding else r).reshape(-1, G)
                    L = None if lengths_of is None else np.asarray(lengths_of(r.size), dtype=np.float64)
                    refs.append(v.advantages(R, L, form).reshape(-1))
                defined = [  # where the form and the target are defined
                    i
                    for i, (G, f) in enumerate(zip(RECOGNITION_GROUP_SIZES, refs))
                    if np.isfinite(f).any() and np.all(np.isfinite(outs[G][np.isfinite(f)]))
                ]
                if not defined:
                    continue
                outs_d = [outs[RECOGNITION_GROUP_SIZES[i]] for i in defined]
                alpha, worst = _fit(outs_d, [refs[i] for i in defined], tol)
                if alpha > 0 and worst <= tol:
                    found.append(Recognition(v, form, alpha, lengths, worst))
    return min(found, key=lambda f: (f.variant != prefer, f.factor != 1.0, f.residual)) if found else None
