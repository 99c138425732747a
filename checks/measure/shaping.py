"""Whether a token-level target's advantages follow its answers' token counts: a per-token term folded into the
score, a diagnosis for a target no point of the dial fits.

A target called on a rollout's token layout (verl's ``token_level_rewards, response_mask``:
:func:`~grpo_identity.checks.frameworks.token_view`) sees each answer's length Lᵢ.  Where its advantages are one
affine map per group of sᵢ = Rᵢ + c·Lᵢ with one c for the batch, it scored each answer by its outcome reward plus
c per token: a KL or length penalty summed into the token rewards, or a bonus per token.  The identity is about
the outcome reward: such a term belongs in the loss (or is reward shaping the report should name), and the
finding gives c.

>>> import numpy as np
>>> from grpo_identity.checks.frameworks import lengths_by_reward
>>> def folded(r, G):  # as a verl estimator that sums token rewards holding -0.01 per token would
...     s = (r + (-0.01) * lengths_by_reward(r)).reshape(-1, G)
...     return (s - s.mean(1, keepdims=True)).reshape(-1)
>>> round(folded_score(folded, "float64").counterexample["per_token"], 6)
-0.01
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from grpo_identity.checks.measure.merging import G, diagnosis_outputs
from grpo_identity.checks.report import Finding

__all__ = ["folded_score"]


def folded_score(target: Callable[..., Any], precision: str) -> Finding | None:
    """A ``reward_folded`` finding where the target's advantages on the diagnosis batch are one affine map per group
    of Rᵢ + c·Lᵢ (one c ≠ 0 for all groups, Lᵢ the token counts the target was given), else None."""
    from grpo_identity.checks.frameworks import lengths_by_reward

    got = diagnosis_outputs(target, precision, "reward_folded")
    if got is None:
        return None
    R, A, tol = got
    L = lengths_by_reward(R).astype(np.float64)
    ratios = []
    for r, ell, a in zip(R.reshape(-1, G), L.reshape(-1, G), A.reshape(-1, G)):
        X = np.column_stack([r, ell, np.ones(G)])
        coef, *_ = np.linalg.lstsq(X, a, rcond=None)
        if np.abs(X @ coef - a).max() > tol or min(abs(coef[0]) * np.ptp(r), abs(coef[1]) * np.ptp(ell)) <= tol:
            return None  # no affine map of R and L per group, or no visible term in R or in L
        ratios.append(coef[1] / coef[0])
    c = float(np.median(ratios))
    if max(abs(x - c) for x in ratios) > 1e-3 * abs(c):
        return None  # not one c for the batch
    message = (
        f"the advantages follow each answer's token count: they are each group's normalisation of the score "
        f"Rᵢ + c·Lᵢ with c = {c:.4g} per token (Lᵢ the answer's tokens in the response mask), not of the outcome "
        "reward Rᵢ: a per-token penalty or bonus (KL, length) summed into the token rewards; keep it in the loss, "
        "or name it as reward shaping"
    )
    example = {"group_size": G, "rewards": R.tolist(), "lengths": L.tolist(), "per_token": c}
    return Finding("reward_folded", message, example, "fail")
