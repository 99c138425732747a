"""How a target combines several reward components into one advantage (TRL's
``multi_objective_aggregation``, GDPO): sum then normalise, or normalise each then sum.

The target takes the components, shape (n, K), group by group.  Two invariances tell the rules apart
without knowing the target's normalisation:

- **sum then normalise** sees the components only through their weighted sum Σₖ wₖ Rₖ: moving reward
  from one component to another (same weighted sum per answer) leaves every advantage unchanged;
- **normalise each then sum** z-scores each component inside its group: multiplying one component by
  a positive factor and shifting it leaves every advantage unchanged (a component's spread does not
  buy it weight), and a component that is silent in a group drops out of that group.

Where the identity stands (theorem G9, any rewards): sum then normalise is G9 on R = Σₖ wₖ Rₖ,
g = c(σ_R)·β̂(R); normalise then sum gives Âᵢ = Σₖ wₖ (Rₖᵢ − R̄ₖ)/(σₖ + ε), so G9 once per component
gives g = Σₖ wₖ·σₖ²/(σₖ + ε)·β̂ₖ ≈ Σₖ wₖ σₖ β̂ₖ (β̂ₖ the slope of the scores on component k): each
component weighs wₖ whatever its spread, one silent in a group drops out of it (and the whole is
divided by one batch std when the framework normalises the sum over the batch, as TRL and GDPO do).

>>> import numpy as np
>>> from grpo_identity import dial as D
>>> def summed(C, G, w=(1.0, 1.0)):
...     return D.advantages(C @ np.asarray(w), G, D.GRPO)
>>> audit_aggregation(summed, (1.0, 1.0))["rule"]
'sum_then_normalize'
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from grpo_identity.checks.report import Finding

__all__ = ["AGGREGATION_GROUP_SIZE", "components_batch", "audit_aggregation"]

#: group size of the component probes
AGGREGATION_GROUP_SIZE = 4
#: relative tolerance of an invariance (float32 targets, a batch normalisation)
_RTOL = 1e-3


def components_batch(G: int = AGGREGATION_GROUP_SIZE) -> np.ndarray:
    """Groups of two components: correctness (0/1) and a format bonus (0 or 0.5), with groups where only
    one of them varies, both vary, or neither does; shape (6·G, 2).

    >>> components_batch(4).shape
    (24, 2)
    """
    half = G // 2
    correct = [np.r_[np.ones(k), np.zeros(G - k)] for k in (1, half, 0, G, 1, half)]
    bonus = [
        np.r_[np.zeros(G - 1), 0.5],  # both vary
        np.full(G, 0.5),  # only correctness varies: the bonus is silent
        np.r_[0.5, np.zeros(G - 1)],  # only the bonus varies
        np.full(G, 0.5),  # neither varies
        np.r_[0.5, np.zeros(G - 1)],  # both vary, on the same answer
        np.where(np.arange(G) % 2 == 0, 0.5, 0.0),  # both vary, across
    ]
    return np.stack([np.concatenate(correct), np.concatenate(bonus)], axis=1)


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    scale = max(float(np.abs(a).max()), float(np.abs(b).max()), 1e-12)
    return bool(np.all(np.abs(a - b) <= _RTOL * scale))


def _columns(C: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, int, int]:
    """The two designed components placed at a component of nonzero weight (the pivot) and the next one,
    every other component 0: (n, K), and the two columns."""
    K = weights.size
    pivot = int(np.flatnonzero(weights)[0])
    other = next((j for j in range(K) if j != pivot and weights[j]), next(j for j in range(K) if j != pivot))
    out = np.zeros((C.shape[0], K))
    out[:, pivot], out[:, other] = C[:, 0], C[:, 1]
    return out, pivot, other


def audit_aggregation(
    target: Callable[[np.ndarray, int], np.ndarray], weights: tuple[float, ...], G: int = AGGREGATION_GROUP_SIZE
) -> dict[str, Any]:
    """The rule ``target`` combines its reward components by (``weights``: one per component, two at least,
    one nonzero), with the evidence, and the findings: ``{"rule", "weights", "moved_reward_changes",
    "rescaled_component_changes", "reshaped_component_changes", "findings"}``.  A component whose non-affine
    reshaping changes nothing is ignored: the rule is then 'other'."""
    w = np.asarray(weights, dtype=np.float64)
    if w.size < 2 or not np.any(w):
        raise ValueError(f"two reward components at least, one of nonzero weight, are needed; got weights {weights}")
    C, p, q = _columns(components_batch(G), w)
    base = np.asarray(target(C, G), dtype=np.float64)
    moved = C.copy()  # the same weighted sum per answer, carried by the other component
    moved[:, p] = C[:, p] + 0.25 * C[:, q] * w[q] / w[p]
    moved[:, q] = 0.75 * C[:, q]
    rescaled = C.copy()
    rescaled[:, q] = 10.0 * C[:, q] + 0.3
    reshaped = C.copy()  # not affine: a z-score sees it, and so does a sum (unless the weight is 0)
    reshaped[:, q] = np.where(np.arange(C.shape[0]) % 3 == 0, 0.9, C[:, q])
    after = {
        "moved": np.asarray(target(moved, G), dtype=np.float64),
        "rescaled": np.asarray(target(rescaled, G), dtype=np.float64),
        "reshaped": np.asarray(target(reshaped, G), dtype=np.float64),
    }
    by_sum, scale_free = _close(base, after["moved"]), _close(base, after["rescaled"])
    ignored = _close(base, after["reshaped"])
    if ignored:
        rule = "other"
    else:
        rule = "sum_then_normalize" if by_sum and not scale_free else "normalize_then_sum" if scale_free else "other"
    out: dict[str, Any] = {
        "rule": rule,
        "weights": [float(x) for x in w],
        "moved_reward_changes": float(np.abs(after["moved"] - base).max()),
        "rescaled_component_changes": float(np.abs(after["rescaled"] - base).max()),
        "reshaped_component_changes": float(np.abs(after["reshaped"] - base).max()),
        "ignores_a_component": ignored,
    }
    out["findings"] = [_finding(out)]
    return out


def _finding(out: dict[str, Any]) -> Finding:
    rule = out["rule"]
    if rule == "sum_then_normalize":
        message = (
            "reward components are summed, then normalised (advantages depend on Σₖ wₖRₖ alone: moving reward "
            "between components changed nothing; scaling the format component by 10 changed advantages by up to "
            f"{out['rescaled_component_changes']:.3g}): the identity is G9 on the summed reward, g = c(σ_R)·β̂, and a "
            "component weighs by its spread"
        )
    elif rule == "normalize_then_sum":
        message = (
            "each reward component is normalised in its group, then summed (GDPO: scaling one component by 10 "
            f"changed nothing; moving reward between components changed advantages by up to "
            f"{out['moved_reward_changes']:.3g}): G9 holds per component, each weighing wₖ whatever its spread, and "
            "a component silent in a group drops out of that group"
        )
    elif out["ignores_a_component"]:
        message = (
            "a reward component is ignored: reshaping it (not an affine change) left every advantage unchanged "
            f"(weights {out['weights']})"
        )
    else:
        message = (
            "the reward components are combined by neither rule: moving reward between components changed "
            f"advantages by {out['moved_reward_changes']:.3g}, scaling one by 10 changed them by "
            f"{out['rescaled_component_changes']:.3g}"
        )
    return Finding("reward_aggregation", message, {k: v for k, v in out.items() if k != "findings"}, "note")
