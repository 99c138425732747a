"""Which groups a target normalises together: a diagnosis for a target no point of the dial fits.

Every point of the dial, RLOO and Dr. GRPO included, maps a group's rewards to its advantages by one affine map
per group (Âᵢ = a·Rᵢ + b, a and b set by the group's own statistics).  On a batch whose groups all differ in
mean and spread, no two groups share a map.  Where the target's advantages lie on one line for several groups,
it took their rewards for one group: ids that collide (a hash bucket, a truncated uid, ``id % k``), a block
size that is not G, or the whole batch as one group.  The finding names the merged groups.

>>> import numpy as np
>>> def two_groups_as_one(r, G):  # a block of 2·G
...     R = r.reshape(-1, 2 * G)
...     return ((R - R.mean(1, keepdims=True)) / R.std(1, keepdims=True)).reshape(-1)
>>> merged_groups(two_groups_as_one, "float64").message.split(":")[0]
'groups normalised as one'
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from grpo_identity.checks.calls.target import TargetError
from grpo_identity.checks.measure.infer import fit_tolerance
from grpo_identity.checks.measure.properties import PropertyViolation, call_target
from grpo_identity.checks.report import Finding

__all__ = ["merging_batch", "merged_groups", "diagnosis_outputs"]

#: the diagnosis batch: groups of G answers
GROUPS, G = 6, 4


def merging_batch() -> np.ndarray:
    """Six groups of four distinct rewards, each group with its own mean and spread (no two share a line).

    >>> merging_batch().reshape(-1, 4)[:2].tolist()
    [[0.137, 0.755, 0.373, 0.991], [0.724, 1.96, 1.196, 2.432]]
    """
    base = (0.137 + 0.618 * np.arange(G)) % 1.0  # a fixed pattern, distinct values
    rows = [0.45 * g + (1.0 + g) * base for g in range(GROUPS)]
    return np.round(np.concatenate(rows), 3)


def diagnosis_outputs(target: Callable[..., Any], precision: str, prop: str) -> tuple[Any, Any, float] | None:
    """(rewards, advantages, tolerance) of the target on :func:`merging_batch`, the tolerance 10× the precision's
    fit tolerance of its largest |Â|; None where it fails there, gives a non-finite value, or computes in 16 bits
    (whose rounding is the size of the gaps a diagnosis looks for)."""
    if fit_tolerance(precision) > 1e-3:
        return None
    R = merging_batch()
    try:
        A = call_target(target, R, G, prop)
    except (PropertyViolation, TargetError, ValueError, TypeError):
        return None
    if not np.all(np.isfinite(A)):
        return None
    return R, A, 10 * fit_tolerance(precision) * max(float(np.abs(A).max()), 1e-30)


def merged_groups(target: Callable[..., Any], precision: str) -> Finding | None:
    """A ``merged_groups`` finding where the target's advantages put several groups of the diagnosis batch on one
    affine map of their rewards, else None (also where a group's advantages are no affine map of its rewards, or
    the target fails on the batch)."""
    got = diagnosis_outputs(target, precision, "merged_groups")
    if got is None:
        return None
    R, A, tol = got
    Rg, Ag = R.reshape(-1, G), A.reshape(-1, G)
    lines = [np.polyfit(r, a, 1) for r, a in zip(Rg, Ag)]
    if any(np.abs(np.polyval(line, r) - a).max() > tol for line, r, a in zip(lines, Rg, Ag)):
        return None  # not one affine map per group: something else, which the other findings describe
    if any(abs(line[0]) * np.ptp(r) <= tol for line, r in zip(lines, Rg)):
        return None  # advantages that do not follow the rewards: no grouping to speak of
    classes = _classes([[np.abs(np.polyval(lines[g], Rg[h]) - Ag[h]).max() <= tol for h in range(GROUPS)]
                        for g in range(GROUPS)])  # fmt: skip
    # a class that is one group's normalisation is centred: its advantages sum to 0 (a shared map that is not,
    # raw or shifted rewards, is no grouping at all: the other findings say so)
    merged = [c for c in classes if len(c) > 1 and abs(float(Ag[list(c)].sum())) <= tol * G * len(c)]
    if not merged:
        return None
    said = "; ".join("{" + ", ".join(str(g) for g in c) + "}" for c in merged)
    whole = len(merged) == 1 and len(merged[0]) == GROUPS
    cause = (
        "the whole batch is normalised as one group, not group by group"
        if whole
        else "their group ids collide (a hash bucket, a truncated uid, id % k) or the rows are cut into blocks "
        "that are not G answers"
    )
    message = (
        f"groups normalised as one: of {GROUPS} groups of G={G} with different means and spreads, groups {said} get "
        f"advantages on one affine map of their rewards (one mean and one scale for all of them): {cause}"
    )
    example = {"group_size": G, "rewards": R.tolist(), "advantages": A.tolist(), "merged": [list(c) for c in merged]}
    return Finding("merged_groups", message, example, "fail")


def _classes(same: list[list[bool]]) -> list[tuple[int, ...]]:
    """The classes of groups linked by ``same[g][h]`` (either way), in order of their first group."""
    n, parent = len(same), list(range(len(same)))

    def root(g: int) -> int:
        while parent[g] != g:
            g = parent[g]
        return g

    for g in range(n):
        for h in range(n):
            if same[g][h] or same[h][g]:
                parent[root(h)] = root(g)
    out: dict[int, list[int]] = {}
    for g in range(n):
        out.setdefault(root(g), []).append(g)
    return [tuple(c) for c in out.values()]
