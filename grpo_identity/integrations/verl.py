"""The identity inside a verl run: the live diagnostics of a ``DataProto`` batch, as a dict for
verl's tracking.

verl's driver holds the whole batch after ``compute_advantage`` (one process: nothing to
gather). In a recipe's own loop, two lines after ``compute_advantage(...)``::

    identity = IdentityHook()                 # once, before the loop (it keeps solve-rate estimates)
    metrics.update(identity(batch))           # every step, before logger.log(data=metrics, ...)

With verl's own ``RayPPOTrainer.fit``, which collects its metrics through the module function
``compute_data_metrics``, the same two lines wrap that function before ``fit()``::

    import verl.trainer.ppo.ray_trainer as rt
    rt.compute_data_metrics = IdentityHook().wrap(rt.compute_data_metrics)

A row's reward is its ``token_level_rewards`` summed over the response, its advantage the mean of
``advantages`` over its ``response_mask`` (outcome estimators broadcast one value over the
tokens); rows are grouped by ``non_tensor_batch["uid"]`` (any order, equal group sizes) and a
prompt is tracked across steps by ``non_tensor_batch["index"]`` (the dataset index verl's
``RLHFDataset`` adds) when present, else by its uid. The default dial is verl's ``grpo``
(:data:`grpo_identity.dial.VERL`; for ``norm_adv_by_std_in_grpo=False`` pass
:data:`~grpo_identity.dial.DR_GRPO`).

No verl or torch import here: the batch is read through its attributes.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Callable

import numpy as np

from grpo_identity import dial as D
from grpo_identity.checks.calls.calling import to_numpy
from grpo_identity.integrations.metrics import (
    DEFAULT_EPS,
    DEFAULT_PRIOR_ROLLOUTS,
    SolveRateTracker,
    StepReport,
    step_metrics,
)

__all__ = ["IdentityHook", "read_dataproto"]

logger = logging.getLogger("grpo_identity")


def _numpy(x: Any) -> np.ndarray:
    return np.asarray(to_numpy(x), dtype=np.float64)


def read_dataproto(batch: Any) -> tuple[np.ndarray, np.ndarray, int, list[Any]]:
    """Rewards (n·G,) and advantages (n·G,) laid out group by group (groups in order of first
    appearance), the group size G and one prompt key per group, from a verl ``DataProto``."""
    td, nt = batch.batch, batch.non_tensor_batch
    mask = _numpy(td["response_mask"])  # (bs, T)
    rewards = _numpy(td["token_level_rewards"]).sum(-1)  # (bs,)
    tokens = np.maximum(mask.sum(-1), 1.0)
    adv = (_numpy(td["advantages"]) * mask).sum(-1) / tokens  # (bs,)
    uid = np.asarray(nt["uid"], dtype=object)
    names, first, inverse, counts = np.unique(
        uid.astype(str), return_index=True, return_inverse=True, return_counts=True
    )
    if counts.min() != counts.max():
        raise ValueError(f"every uid must have the same number of responses, got {counts.min()} to {counts.max()}")
    order_of_group = np.argsort(first, kind="stable")  # groups in order of first appearance
    rank = np.empty_like(order_of_group)
    rank[order_of_group] = np.arange(order_of_group.size)
    rows = np.argsort(rank[inverse], kind="stable")  # (bs,) row indices, group by group
    keys_src = nt["index"] if "index" in nt else uid
    keys = [keys_src[first[g]] for g in order_of_group]
    return rewards[rows], adv[rows], int(counts[0]), [k.item() if hasattr(k, "item") else k for k in keys]


class IdentityHook:
    """Callable on a verl ``DataProto``: the metrics of :func:`grpo_identity.integrations.metrics.step_metrics`
    as a dict of floats (non-finite values left out); warns once on the logger ``grpo_identity``
    when the batch's advantages leave the identity of ``dial``."""

    def __init__(
        self, dial: D.Dial | None = D.VERL, *, eps: float = DEFAULT_EPS, prior_rollouts: float = DEFAULT_PRIOR_ROLLOUTS
    ) -> None:
        if not 0 < eps < 1:
            raise ValueError(f"eps must be in (0, 1), got {eps!r}")
        self.dial, self.eps = dial, float(eps)
        self.tracker = SolveRateTracker(prior_rollouts=prior_rollouts)
        self.last: StepReport | None = None
        self.warned = False

    def __call__(self, batch: Any) -> dict[str, float]:
        rewards, adv, G, keys = read_dataproto(batch)
        self.last = step_metrics(rewards, adv, G, self.dial, prompts=keys, tracker=self.tracker, eps=self.eps)
        if self.last.departure and not self.warned:
            self.warned = True
            logger.warning(
                "grpo-identity: the batch's advantages leave the identity of %s: %s "
                "(reported once; see identity/departures)",
                self.dial.name if self.dial else "its method",
                self.last.departure,
            )
        return {k: v for k, v in self.last.metrics.items() if math.isfinite(v)}

    def wrap(self, compute_data_metrics: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        """``compute_data_metrics`` (verl's) with these metrics added to what it returns."""

        def with_identity(batch: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
            return {**compute_data_metrics(batch, *args, **kwargs), **self(batch)}

        return with_identity
