"""The identity inside a TRL ``GRPOTrainer`` run: a ``transformers.TrainerCallback``.

::

    trainer = GRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(...), ...)
    trainer.add_callback(IdentityCallback(trainer))

Where the numbers come from. TRL 1.16 computes the advantages inline in
``GRPOTrainer._generate_and_score_completions``; it gathers every process's rewards there
(accelerate's ``gather``) because groups are normalised across processes, and it keeps the
gathered rewards, advantages and prompts of the latest generation batch in ``trainer._logs``
(the buffer of its completions table) on every process. The callback only *reads* that buffer
once per new generation batch (``trainer._buffered_inputs`` is replaced at each generation): no
wrapped reward function, no patched method, no collective of its own, so it cannot desynchronise
the processes. Only the main process computes; it appends the metrics of
:func:`grpo_identity.integrations.metrics.step_metrics` to ``trainer._metrics["train"]``, the
dict TRL's own metrics go through, so they are averaged over ``logging_steps`` and reach the
console, TensorBoard or W&B exactly as TRL's ``reward`` and ``kl`` do.

The configured method's dial (:func:`dial_for_config`) is the one ``grpo-identity audit
trl:scale_rewards=…`` infers from the real trainer (tested). A live departure from it (for
example a silent group of non-binary rewards left with non-zero advantages by float rounding)
is warned about once, on the logger ``grpo_identity``.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
from transformers import TrainerCallback

from grpo_identity import dial as D
from grpo_identity.integrations.metrics import (
    DEFAULT_EPS,
    DEFAULT_PRIOR_ROLLOUTS,
    SolveRateTracker,
    StepReport,
    step_metrics,
)

__all__ = ["IdentityCallback", "dial_for_config", "read_batch"]

logger = logging.getLogger("grpo_identity")

#: TRL's ε added to the std (``grpo_trainer.py``: ``/ (std_rewards + 1e-4)``) and torch's ddof
_TRL_EPS, _TRL_DDOF = D.TRL.eps, D.TRL.ddof


def dial_for_config(args: Any) -> D.Dial | None:
    """The dial of a ``GRPOConfig``: ``scale_rewards`` 'group' → TRL (ddof 1, ε 1e-4), 'none' →
    Dr. GRPO, 'batch' → batch std (ddof 1, ε 1e-4); None when the rewards are normalised per
    reward function first (``multi_objective_aggregation='normalize_then_sum'``, off the dial).

    >>> from types import SimpleNamespace as NS
    >>> dial_for_config(NS(scale_rewards="group", multi_objective_aggregation="sum_then_normalize")).name
    'trl'
    """
    if getattr(args, "multi_objective_aggregation", "sum_then_normalize") != "sum_then_normalize":
        return None
    scale = {True: "group", False: "none"}.get(args.scale_rewards, args.scale_rewards)
    if scale == "group":
        return D.TRL
    if scale == "none":
        return D.DR_GRPO
    if scale == "batch":
        return D.Dial(
            scale="batch_std",
            ddof=_TRL_DDOF,
            eps=_TRL_EPS,
            name="trl_batch",
            citation="TRL GRPOTrainer, scale_rewards='batch'",
        )
    raise ValueError(f"unknown scale_rewards {args.scale_rewards!r}")


def _prompt_key(prompt: Any) -> str:
    return prompt if isinstance(prompt, str) else repr(prompt)


def read_batch(trainer: Any) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The latest generation batch as TRL gathered it: rewards (n·G,) — the weighted sum over
    reward functions, NaN where every function returned None, as TRL forms them — advantages
    (n·G,) and one prompt key per group."""
    logs, G = trainer._logs, int(trainer.num_generations)
    per_func = np.array(
        [list(logs["rewards"][name]) for name in trainer.reward_func_names], dtype=np.float64
    )  # (F, n·G)
    weights = np.asarray(trainer.reward_weights.detach().cpu(), dtype=np.float64).reshape(-1, 1)  # (F, 1)
    unscorable = np.isnan(per_func).all(0)
    rewards = np.where(unscorable, np.nan, np.nansum(per_func * weights, axis=0))
    adv = np.asarray(list(logs["advantages"]), dtype=np.float64)
    prompts = list(logs["prompt"])
    if not (rewards.size == adv.size == len(prompts)) or adv.size % G:
        raise ValueError(
            f"TRL's buffers disagree: {rewards.size} rewards, {adv.size} advantages, {len(prompts)} prompts, G = {G}"
        )
    return rewards, adv, [_prompt_key(p) for p in prompts[::G]]


class IdentityCallback(TrainerCallback):
    """Logs the live diagnostics of every generation batch of a TRL ``GRPOTrainer`` (see the module
    docstring); ``eps`` is the tolerance of the recommended G, ``prior_rollouts`` the shrinkage of
    the per-prompt solve rates; ``log_file`` (optional) also gets one JSON line per step from the
    main process, which ``grpo-identity diagnose`` reads."""

    def __init__(
        self,
        trainer: Any,
        *,
        eps: float = DEFAULT_EPS,
        prior_rollouts: float = DEFAULT_PRIOR_ROLLOUTS,
        dial: D.Dial | None = None,
        log_file: str | Path | None = None,
    ) -> None:
        if not 0 < eps < 1:
            raise ValueError(f"eps must be in (0, 1), got {eps!r}")
        self.log_file = Path(log_file) if log_file is not None else None
        if self.log_file is not None and not self.log_file.parent.is_dir():
            raise ValueError(f"log_file {log_file}: folder {self.log_file.parent} does not exist")
        self.trainer = trainer
        self.eps = float(eps)
        self.dial = dial if dial is not None else dial_for_config(trainer.args)
        self.tracker = SolveRateTracker(prior_rollouts=prior_rollouts)
        self.last: StepReport | None = None
        self.warned = False
        self._seen: Any = None

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        t = self.trainer
        batch = getattr(t, "_buffered_inputs", None)
        if batch is None or batch is self._seen:  # no new generation batch in this step
            return control
        self._seen = batch
        if not t.accelerator.is_main_process:
            return control
        rewards, adv, prompts = read_batch(t)
        groups = rewards.reshape(-1, int(t.num_generations))
        keep = ~np.isnan(groups).any(1)  # groups with an unscorable completion are left out
        G = int(t.num_generations)
        self.last = step_metrics(
            groups[keep].reshape(-1),
            adv.reshape(groups.shape)[keep].reshape(-1),
            G,
            self.dial,
            prompts=[p for p, k in zip(prompts, keep) if k],
            tracker=self.tracker,
            eps=self.eps,
        )
        finite = {k: v for k, v in self.last.metrics.items() if math.isfinite(v)}
        for name, value in finite.items():
            t._metrics["train"][name].append(value)
        if self.log_file is not None:  # one JSON line per step, for grpo-identity diagnose
            with self.log_file.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"step": state.global_step, **finite}) + "\n")
        if self.last.departure and not self.warned:
            self.warned = True
            logger.warning(
                "grpo-identity: the trainer's advantages leave the identity of %s at step %d: %s "
                "(reported once; see identity/departures)",
                self.dial.name if self.dial else "its method",
                state.global_step,
                self.last.departure,
            )
        return control
