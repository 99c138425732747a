"""verl driver: its trainer's own advantage dispatch and policy loss, from its own config.

- config: verl's Hydra config ``ppo_trainer`` composed with the user's overrides (Hydra's own
  override parser reads the values; an unknown key is Hydra's "not in struct" error), then a YAML
  file merged on top the way OmegaConf merges a config;
- advantages: ``verl.trainer.ppo.ray_trainer.compute_advantage`` called exactly as
  ``RayPPOTrainer.fit`` calls it (``adv_estimator``, ``gamma``, ``lam``, ``num_repeat``,
  ``norm_adv_by_std_in_grpo``, ``config=config.algorithm``) on a ``DataProto`` laid out as the
  trainer lays it out: each prompt's G responses repeated in place (``repeat(interleave=True)``),
  one uid string per prompt, then rows reordered (``balance_batch``), responses of different
  lengths with the score on the last response token;
- gradient: the actor's policy loss (``get_policy_loss_fn(policy_loss.loss_mode)``, which ends in
  ``agg_loss(loss_agg_mode)``) with ``global_batch_info`` filled as ``workers.utils.losses.ppo_loss``
  fills it (releases before 0.8 aggregate over the micro-batch, here the whole batch, and return
  a 4-tuple), differentiated by autograd with respect to each response token's log-probability;
- the optimizer step (:mod:`grpo_identity.checks.steps`): the trainer's own step path on each
  generation batch, ``RayPPOTrainer._balance_batch``, ``compute_advantage`` and ``_update_actor``,
  then on each data-parallel rank the actor worker's own split into optimizer steps and
  micro-batches, its loss scaling and accumulation: the legacy FSDP worker's
  ``DataParallelPPOActor.update_policy`` (0.6; 0.7's default) or the engine worker's
  ``TrainingWorker.train_mini_batch`` (0.7 with ``trainer.use_legacy_worker_impl=disable``; 0.9's
  only one); the ranks are threads of this process whose collectives exchange the ranks' values, the
  gradient averaged over them as FSDP averages it (:func:`step_run`);
- ``verl:estimator=NAME``: the ``core_algos`` estimator function alone (bypasses the trainer).
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import threading
import types
import uuid
import warnings
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any, Callable

import numpy as np

from grpo_identity.checks import steps
from grpo_identity.checks.frameworks import (
    PROMPT_LENGTH,
    RESPONSE_LENGTH,
    AdapterError,
    FrameworkSpec,
    lengths_for,
)

__all__ = [
    "import_check",
    "compose",
    "advantage_target",
    "estimator_target",
    "gradient_target",
    "lengths_for",
    "StepSplit",
    "step_split",
    "step_run",
]

#: settings every verl run must give (the actor's micro-batch size has no default); the user's
#: ``--set`` come after and win
DRIVER_SETS = (("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "1"),)


#: the settings that give each per-sample weight and each preset (what a report suggests)
SETTINGS: dict[str, dict[str, str]] = {
    "per_sample_weight": {
        "constant": "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum",
        "1/length": "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
        "1/step_tokens": "actor_rollout_ref.actor.loss_agg_mode=token-mean",
    },
    "preset": {
        "dr_grpo": "algorithm.adv_estimator=grpo with algorithm.norm_adv_by_std_in_grpo=false",
        "verl": "algorithm.adv_estimator=grpo",
        "rloo": "algorithm.adv_estimator=rloo",
    },
    "split": {
        "invariant": "verl ≥ 0.8 (or trainer.use_legacy_worker_impl=disable on 0.7.x): the engine worker's token-mean "
        "counts the whole step's tokens; or actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum",
    },
}


def import_check() -> None:
    """Import what the driver needs (a release environment's smoke test)."""
    import importlib

    importlib.import_module("verl.trainer.ppo.core_algos")
    importlib.import_module("grpo_identity.checks.target")


def compose(spec: FrameworkSpec) -> Any:
    """verl's trainer config with the user's overrides (and YAML file), as its Hydra app builds it."""
    import verl
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    overrides = [f"{k}={v}" for k, v in (*DRIVER_SETS, *spec.sets)]
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    GlobalHydra.instance().clear()
    cfg: Any
    try:
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            cfg = hydra_compose("ppo_trainer", overrides=overrides)
            if spec.config:  # the file over the defaults, then the --set overrides over the file
                with_sets, cfg = cfg, hydra_compose("ppo_trainer")
                OmegaConf.set_struct(cfg, True)
                cfg = OmegaConf.merge(cfg, OmegaConf.load(spec.config))
                for key, _ in (*DRIVER_SETS, *spec.sets):  # the driver's own sizes too, as without a file
                    key = key.lstrip("+~")
                    OmegaConf.update(cfg, key, OmegaConf.select(with_sets, key), merge=False, force_add=True)
    except Exception as exc:  # Hydra's override grammar, an unknown key, a bad YAML file
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise AdapterError(f"verl {version('verl')} rejects the config ({spec.describe()}): {msg}") from None
    finally:
        GlobalHydra.instance().clear()
    estimator = str(OmegaConf.select(cfg, "algorithm.adv_estimator"))
    if estimator == "gae":
        raise AdapterError(
            f"verl {version('verl')}: algorithm.adv_estimator is gae (verl's default when none is set), which needs "
            "a critic's values this audit does not run: set algorithm.adv_estimator=grpo (or rloo, "
            "reinforce_plus_plus, … a critic-free estimator)"
        )
    return cfg


def _trainer_module() -> Any:
    warnings.filterwarnings("ignore")
    try:
        from verl.trainer.ppo import ray_trainer
    except ImportError as exc:
        raise AdapterError(f"verl {version('verl')}: its trainer module does not import here ({exc})") from None
    if not hasattr(ray_trainer, "compute_advantage"):
        raise AdapterError(
            f"verl {version('verl')} has no verl.trainer.ppo.ray_trainer.compute_advantage (the driver knows the "
            "trainer's dispatch from 0.6 on)"
        )
    return ray_trainer


def _batch(rewards: np.ndarray, G: int, lengths: np.ndarray) -> tuple[Any, np.ndarray]:
    """A DataProto as ``RayPPOTrainer.fit`` holds it before ``compute_advantage``, and the row
    order: ``order[j]`` is the caller's row at the batch's row j."""
    import torch
    from verl import DataProto

    n = len(rewards)
    order = np.random.default_rng(n).permutation(n)  # balance_batch reorders the rows
    L = np.asarray(lengths)[order]
    mask = torch.zeros(n, RESPONSE_LENGTH, dtype=torch.float32)  # (bs, T)
    for j, ell in enumerate(L):
        mask[j, :ell] = 1.0
    scores = torch.zeros(n, RESPONSE_LENGTH, dtype=torch.float32)  # the score on the last response token
    scores[torch.arange(n), torch.as_tensor(L - 1)] = torch.as_tensor(np.asarray(rewards)[order], dtype=torch.float32)
    prompt_uid = [str(uuid.UUID(int=(7919 * g + 104729 * n) % 2**128, version=4)) for g in range(n // G + 1)]
    uid = np.array([prompt_uid[i // G] for i in order], dtype=object)
    data = DataProto.from_dict(tensors={"token_level_rewards": scores, "response_mask": mask}, non_tensors={"uid": uid})
    return data, order


def _advantages(
    ray_trainer: Any, cfg: Any, rewards: np.ndarray, G: int, lengths: np.ndarray
) -> tuple[np.ndarray, Any, np.ndarray]:
    """Per-row advantages the trainer's dispatch computes, in the caller's row order; also the
    token advantages and the mask in batch order, and the order."""
    data, order = _batch(rewards, G, lengths)
    data = _trainer_advantage(ray_trainer, cfg.algorithm, data, G)
    out = np.empty(len(rewards), dtype=np.float64)
    out[order] = data.batch["advantages"][:, 0].detach().numpy()
    return out, data, order


def _trainer_advantage(ray_trainer: Any, alg: Any, data: Any, G: int) -> Any:
    """``compute_advantage`` called as ``RayPPOTrainer.fit`` calls it; an estimator whose token
    advantages vary within an answer is no outcome advantage (an error)."""
    data = ray_trainer.compute_advantage(
        data,
        adv_estimator=alg.adv_estimator,
        gamma=alg.gamma,
        lam=alg.lam,
        num_repeat=G,  # actor_rollout_ref.rollout.n: the rollout draws G responses per prompt
        norm_adv_by_std_in_grpo=alg.get("norm_adv_by_std_in_grpo", True),
        config=alg,
    )
    adv, mask = data.batch["advantages"], data.batch["response_mask"]  # (bs, T)
    first = adv[:, 0]
    spread = ((adv - first[:, None]).abs() * mask).max()
    if float(spread) > 1e-6 * max(1.0, float(first.abs().max())):
        raise RuntimeError(
            f"estimator {alg.adv_estimator!r} gives token advantages that vary within a response (spread "
            f"{float(spread):.3g}): not an outcome advantage of one value per answer"
        )
    return data


def advantage_target(spec: FrameworkSpec) -> Callable[..., Any]:
    """fn(rewards, G): the advantages verl's trainer computes from ``spec``'s config."""
    cfg = compose(spec)
    ray_trainer = _trainer_module()

    def verl_trainer_advantage(rewards: np.ndarray, group_size: int) -> np.ndarray:
        return _advantages(ray_trainer, cfg, rewards, int(group_size), lengths_for(len(rewards)))[0]

    verl_trainer_advantage.grpo_identity_info = _info(  # type: ignore[attr-defined]
        spec, cfg, "ray_trainer.compute_advantage (the trainer's dispatch)"
    )
    return verl_trainer_advantage


def gradient_target(spec: FrameworkSpec) -> Callable[..., Any]:
    """fn(rewards, G, lengths) → {advantages, coefficients, mask}: −∂loss/∂log π per response token
    (autograd through the actor's policy loss and ``agg_loss``), rows in the caller's order; with a
    step request (:mod:`grpo_identity.checks.steps`), the optimizer steps of the actor worker as
    configured or unsplit (:func:`step_run`)."""
    import torch

    cfg = compose(spec)
    ray_trainer = _trainer_module()
    split = step_split(spec, cfg)
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.utils.config import omega_conf_to_dataclass

    try:
        actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    except Exception as exc:
        raise AdapterError(
            f"verl {version('verl')} rejects the actor config ({spec.describe()}): {str(exc).splitlines()[-1]}"
        ) from None
    loss_fn = get_policy_loss_fn(actor.policy_loss.get("loss_mode", "vanilla"))

    def verl_policy_loss_gradient(
        rewards: np.ndarray, group_size: int, lengths: np.ndarray | None, request: dict[str, Any] | None = None
    ) -> dict[str, np.ndarray]:
        if request is not None:
            layout = split if request["layout"] == "split" else split.unsplit()
            return step_run(cfg, layout, rewards, int(group_size), np.asarray(lengths), request)
        adv, data, order = _advantages(
            ray_trainer, cfg, rewards, int(group_size), lengths_for(len(rewards)) if lengths is None else lengths
        )
        if lengths is None:  # the advantages alone (the advantage audit of the same run)
            return {"advantages": adv}
        mask = data.batch["response_mask"]
        log_prob = torch.full(mask.shape, -1.0, requires_grad=True)  # (bs, T); on-policy: old = current
        if hasattr(actor, "global_batch_info"):  # from 0.8 on: agg_loss over the global batch (one rank here)
            actor.global_batch_info.update(
                {
                    "dp_size": 1,
                    "batch_num_tokens": mask.sum(),
                    "global_batch_size": mask.shape[0],
                    "loss_scale_factor": actor.loss_scale_factor,
                }
            )
        loss, *_ = loss_fn(
            old_log_prob=log_prob.detach(),
            log_prob=log_prob,
            advantages=data.batch["advantages"],
            response_mask=mask.bool(),
            loss_agg_mode=actor.loss_agg_mode,
            config=actor,
            rollout_is_weights=None,
        )
        (grad,) = torch.autograd.grad(loss, log_prob)
        coeff, m = np.empty(mask.shape), np.empty(mask.shape)
        coeff[order], m[order] = -grad.double().numpy(), mask.double().numpy()
        return {"advantages": adv, "coefficients": coeff, "mask": m}

    verl_policy_loss_gradient.grpo_identity_info = {  # type: ignore[attr-defined]
        **_info(spec, cfg, "ray_trainer.compute_advantage + core_algos policy loss (agg_loss)"),
        "loss_agg_mode": str(actor.loss_agg_mode),
        "loss_mode": str(actor.policy_loss.get("loss_mode", "vanilla")),
        "lengths_optional": True,
        "step": split.geometry(cfg),
    }
    return verl_policy_loss_gradient


def _info(spec: FrameworkSpec, cfg: Any, entry: str) -> dict[str, Any]:
    alg = cfg.algorithm
    return {
        "framework": "verl",
        "version": version("verl"),
        "entry": entry,
        "options": dict(spec.sets),
        "estimator": str(alg.adv_estimator),
        "norm_adv_by_std_in_grpo": bool(alg.get("norm_adv_by_std_in_grpo", True)),
        "dtype": "float32",
    }


def estimator_target(spec: FrameworkSpec) -> Callable[..., Any]:
    """fn(rewards, G): ``core_algos``'s estimator function alone, called with keyword options
    (bypasses the trainer: its dispatch, its config object and its batch layout are not used)."""
    import torch
    from verl.trainer.ppo import core_algos

    try:
        est = core_algos.get_adv_estimator_fn(spec.estimator)
    except (ValueError, KeyError) as exc:
        raise AdapterError(f"verl {version('verl')} has no advantage estimator {spec.estimator!r}: {exc}") from None
    options = dict(spec.options)

    def verl_estimator_function(rewards: np.ndarray, group_size: int) -> np.ndarray:
        n, T = len(rewards), 3
        order = np.random.default_rng(n).permutation(n)  # verl groups by uid, not by position
        token_rewards = torch.zeros(n, T, dtype=torch.float32)  # (bs, T)
        token_rewards[:, -1] = torch.as_tensor(np.asarray(rewards)[order], dtype=torch.float32)
        index = np.array([f"uid-{i // group_size:05d}" for i in order], dtype=object)
        adv, _ = est(token_level_rewards=token_rewards, response_mask=torch.ones(n, T), index=index, **options)
        out = np.empty(n, dtype=np.float64)
        out[order] = adv[:, 0].numpy()  # (bs,): broadcast over the tokens
        return out

    verl_estimator_function.grpo_identity_info = {  # type: ignore[attr-defined]
        "framework": "verl",
        "version": version("verl"),
        "entry": f"core_algos estimator {spec.estimator!r} called directly: bypasses the trainer",
        "estimator": spec.estimator,
        "options": options,
        "dtype": "float32",
    }
    return verl_estimator_function


# --- the optimizer step as the trainer splits it (grpo_identity.checks.steps) --------------------

#: an answer's first response token is MARK + its row in the caller's order: the probe's forward reads
#: each micro-batch's rows back from it, whatever order verl's balancing and splits left them in
MARK = 1000
#: every response token's log-probability in the probe, old and current alike (importance ratio 1)
LOG_PROB = -1.0
#: the step probe's split where the user set none of its keys (verl's own defaults, 1024 prompts on
#: 8 GPUs, size a production run): 2 emulated ranks, micro-batches of 2 answers, the token budget
#: of 2–5 probe sequences; an optimizer step of the fewest prompts that gives every rank 2
#: micro-batches, and 2 optimizer steps per generation batch (G = 4: 4 prompts in 2 steps of 2)
DEFAULT_SPLIT: dict[str, Any] = {
    "trainer.n_gpus_per_node": 2,
    "trainer.nnodes": 1,
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 2,
    "actor_rollout_ref.actor.use_dynamic_bsz": False,
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 20,
    "actor_rollout_ref.actor.ppo_mini_batch_size": "2 micro-batches per rank",
    "data.train_batch_size": "2 optimizer steps",
}
#: the step probe's group size where the user set no ``actor_rollout_ref.rollout.n``
DEFAULT_GROUP_SIZE = 4
#: the deprecated global micro-batch size, which ``fsdp_workers`` divides by the data-parallel size
_GLOBAL_MICRO = "actor_rollout_ref.actor.ppo_micro_batch_size"


@dataclass(frozen=True)
class StepSplit:
    """One layout of the actor's optimizer steps, in verl's settings."""

    prompts: int
    """Prompts per generation batch (``data.train_batch_size``)."""
    mini: int
    """Prompts per optimizer step, all ranks together (``actor.ppo_mini_batch_size``)."""
    micro: int
    """Answers per micro-batch on one GPU (``actor.ppo_micro_batch_size_per_gpu``)."""
    dynamic: bool
    """Micro-batches by token budget instead (``actor.use_dynamic_bsz``)."""
    max_tokens: int
    """That budget per GPU, prompt tokens included (``actor.ppo_max_token_len_per_gpu``)."""
    ranks: int
    """Data-parallel ranks (``trainer.n_gpus_per_node`` × ``trainer.nnodes``)."""
    group_size: int
    """Answers per prompt (``actor_rollout_ref.rollout.n``)."""
    defaults: tuple[str, ...] = field(default=())
    """The split keys the user did not set: the driver's :data:`DEFAULT_SPLIT` values."""

    def unsplit(self) -> StepSplit:
        """Each generation batch as one optimizer step of one micro-batch on one rank."""
        rows = self.prompts * self.group_size
        return StepSplit(self.prompts, self.prompts, rows, False, self.max_tokens, 1, self.group_size, self.defaults)

    def describe(self) -> str:
        G = self.group_size
        micro = (
            f"micro-batches by a token budget of {self.max_tokens} per GPU (use_dynamic_bsz)"
            if self.dynamic
            else f"micro-batches of {self.micro} answers per GPU"
        )
        return (
            f"{self.prompts} prompts × G={G} per generation batch (data.train_batch_size); optimizer steps of "
            f"{self.mini} prompts (ppo_mini_batch_size: {self.mini * G // self.ranks} answers per rank); {micro}; "
            f"{self.ranks} data-parallel rank(s)" + (", emulated" if self.ranks > 1 else "")
        )

    def geometry(self, cfg: Any) -> dict[str, Any]:
        """``info["step"]`` (:func:`grpo_identity.checks.steps.geometry`) of this split."""
        G = self.group_size
        engine = _engine_path(cfg)
        settings = {
            "data.train_batch_size": self.prompts,
            "actor_rollout_ref.rollout.n": G,
            "actor_rollout_ref.actor.ppo_mini_batch_size": self.mini,
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": self.micro,
            "actor_rollout_ref.actor.use_dynamic_bsz": self.dynamic,
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": self.max_tokens,
            "data-parallel ranks (trainer.n_gpus_per_node × trainer.nnodes)": self.ranks,
            "actor_rollout_ref.actor.loss_agg_mode": str(cfg.actor_rollout_ref.actor.loss_agg_mode),
            "actor_rollout_ref.actor.ppo_epochs": "1 (the probe runs the first epoch)",
            "trainer.balance_batch": bool(cfg.trainer.balance_batch),
            "driver defaults (keys the user did not set)": list(self.defaults),
            "worker": _ENGINE_WORKER if engine else _LEGACY_WORKER,
            "trainer": _TRAINER_PATH + (_V1_NOTE if "use_v1" in cfg.trainer and cfg.trainer.use_v1 else ""),
            "stand-ins": _ENGINE_STAND_INS if engine else _LEGACY_STAND_INS,
        }
        layouts = {
            "split": self.describe(),
            "unsplit": "each generation batch as one optimizer step (ppo_mini_batch_size = data.train_batch_size) "
            "of one micro-batch holding all its answers, on one GPU",
        }
        ranks = "emulated" if self.ranks > 1 else "one"
        return steps.geometry(
            G,
            self.mini * G,
            self.prompts * G,
            layouts=layouts,
            ranks=ranks,
            holes=True,
            ragged=False,
            settings=settings,
        )


_LEGACY_WORKER = (
    "legacy FSDP worker: workers.actor.dp_actor.DataParallelPPOActor.update_policy (mini-batches by data.split, "
    "micro-batches by split or prepare_dynamic_batch, each loss × 1/gradient_accumulation or × rows/mini-batch "
    "under dynamic bsz, backward, _optimizer_step per mini-batch), its config normalised as "
    "fsdp_workers.ActorRolloutRefWorker.__init__ does (ppo_mini_batch_size × rollout.n ÷ data-parallel size)"
)
_ENGINE_WORKER = (
    "engine worker: workers.engine_workers.TrainingWorker.train_mini_batch (mini-batches of mini_batch_size ÷ dp "
    "by tu.make_iterator), BaseEngine.train_batch, FSDPEngine.forward_backward_batch (token count all-reduced "
    "over dp, prepare_micro_batches, backward per micro-batch) and optimizer_step; loss workers.utils.losses."
    "ppo_loss (agg_loss with dp_size, batch_num_tokens, global_batch_size)"
)
_TRAINER_PATH = (
    "RayPPOTrainer._balance_batch, compute_advantage, _update_actor (0.7 on; 0.6's fit sets the meta info "
    "itself); verl's dispatch gives each rank one contiguous chunk (BatchData.chunk / DataProto.chunk)"
)
_V1_NOTE = (
    "; trainer.use_v1 (this release's default) runs the V1 trainer, which imports transfer_queue (not installed "
    "here): its RayPPOTrainer path is run, which hands the same engine worker the same mini-batch settings (the "
    "V1 balance does not sort within a rank's partition)"
)
_LEGACY_STAND_INS = (
    "model and FSDP: a one-parameter module and SGD at lr 0 (_optimizer_step runs: clip_grad_norm_, step); "
    "_forward_micro_batch: the probe's log-probabilities; torch.distributed: one thread per rank whose "
    "collectives exchange the ranks' values; gradients averaged over ranks as FSDP averages them"
)
_ENGINE_STAND_INS = (
    "FSDPEngineWithLMHead: the model forward gives the probe's log-probabilities (then ppo_loss as forward_step "
    "calls it), a one-parameter module and SGD at lr 0, train_mode without offload, an emulated data-parallel "
    "group; TrainingWorker._postprocess_output (metrics: CUDA memory, MFU) returns none; verl 0.9's "
    "plugin.platform (no CPU platform) answers 'cpu' while the step runs; torch.distributed: one thread per "
    "rank whose collectives exchange the ranks' values; gradients averaged over ranks as FSDP averages them"
)


def _engine_path(cfg: Any) -> bool:
    """Whether the trainer's actor runs the engine worker: always where the legacy actor is gone (0.9),
    with ``trainer.use_legacy_worker_impl=disable`` where ``RayPPOTrainer._update_actor`` chooses (0.7;
    0.6's actor is always the legacy one)."""
    import verl

    legacy = os.path.exists(os.path.join(os.path.dirname(verl.__file__), "workers", "actor", "dp_actor.py"))
    if not legacy:
        return True
    chooses = hasattr(_trainer_module().RayPPOTrainer, "_update_actor")
    return chooses and str(cfg.trainer.get("use_legacy_worker_impl", "auto")) == "disable"


def _user_keys(spec: FrameworkSpec) -> set[str]:
    """The dotted keys the user set, by ``--set`` or in the config file."""
    keys = {key.lstrip("+~") for key, _ in spec.sets}
    if spec.config:
        from omegaconf import OmegaConf

        def walk(node: Any, prefix: str) -> None:
            for key, value in node.items():
                if isinstance(value, dict):
                    walk(value, f"{prefix}{key}.")
                else:
                    keys.add(f"{prefix}{key}")

        walk(OmegaConf.to_container(OmegaConf.load(spec.config)), "")
    return keys


def step_split(spec: FrameworkSpec, cfg: Any) -> StepSplit:
    """The configured step: each split key the user set, :data:`DEFAULT_SPLIT` for the others (the
    group size :data:`DEFAULT_GROUP_SIZE` unless ``rollout.n`` was set); a global
    ``ppo_micro_batch_size`` is divided by the ranks as ``fsdp_workers`` normalises it, and a split
    that normalisation rejects is verl's error."""
    from omegaconf import OmegaConf

    user = _user_keys(spec)

    def value(key: str) -> Any:
        return OmegaConf.select(cfg, key) if key in user else DEFAULT_SPLIT[key]

    ranks = int(value("trainer.n_gpus_per_node")) * int(value("trainer.nnodes"))
    G = int(cfg.actor_rollout_ref.rollout.n) if "actor_rollout_ref.rollout.n" in user else DEFAULT_GROUP_SIZE
    micro = int(value("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"))
    if _GLOBAL_MICRO in user and "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu" not in user:
        micro = int(OmegaConf.select(cfg, _GLOBAL_MICRO)) // ranks
    mini_key, prompts_key = "actor_rollout_ref.actor.ppo_mini_batch_size", "data.train_batch_size"
    mini = int(value(mini_key)) if mini_key in user else _fewest_prompts(G, ranks, micro)
    split = StepSplit(
        prompts=int(value(prompts_key)) if prompts_key in user else 2 * mini,
        mini=mini,
        micro=micro,
        dynamic=bool(value("actor_rollout_ref.actor.use_dynamic_bsz")),
        max_tokens=int(value("actor_rollout_ref.actor.ppo_max_token_len_per_gpu")),
        ranks=ranks,
        group_size=G,
        defaults=tuple(k for k in DEFAULT_SPLIT if k not in user),
    )
    rows = split.mini * G // ranks  # fsdp_workers: ppo_mini_batch_size × rollout.n ÷ data-parallel size
    if rows <= 0 or (not split.dynamic and rows % micro):
        raise AdapterError(
            f"verl {version('verl')} rejects the split ({spec.describe()}): normalized ppo_mini_batch_size {rows} "
            f"should be larger than 0 and divisible by ppo_micro_batch_size_per_gpu {micro}"
        )
    return split


def _fewest_prompts(G: int, ranks: int, micro: int) -> int:
    """The fewest prompts per optimizer step that give every rank two or more whole micro-batches."""
    mini = 1
    while (mini * G) % (ranks * micro) or mini * G < 2 * ranks * micro:
        mini += 1
    return mini


def _step_config(cfg: Any, split: StepSplit, G: int) -> Any:
    """The trainer config with the layout's split, G answers per prompt and one PPO epoch."""
    from omegaconf import OmegaConf

    c = copy.deepcopy(cfg)
    updates = {
        "data.train_batch_size": split.prompts,
        "actor_rollout_ref.rollout.n": G,
        "actor_rollout_ref.actor.ppo_mini_batch_size": split.mini,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": split.micro,
        _GLOBAL_MICRO: None,
        "actor_rollout_ref.actor.use_dynamic_bsz": split.dynamic,
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": split.max_tokens,
        "actor_rollout_ref.actor.ppo_epochs": 1,
        "trainer.n_gpus_per_node": split.ranks,
        "trainer.nnodes": 1,
    }
    for key, value in updates.items():
        OmegaConf.update(c, key, value, merge=False)
    return c


def step_run(
    cfg: Any, split: StepSplit, rewards: np.ndarray, G: int, lengths: np.ndarray, request: dict[str, Any]
) -> dict[str, np.ndarray]:
    """The rows as the trainer runs them, one generation batch (``split.prompts`` groups) after the
    other: balanced over the ranks, advantages computed, the actor updated on the emulated ranks.  Per
    row, in the caller's order: its advantage, its token coefficients (−∂loss/∂log π summed over the
    micro-batches of its optimizer step and averaged over the ranks), its mask, step, rank and
    micro-batch."""
    ray_trainer = _trainer_module()
    c = _step_config(cfg, split, G)
    r = np.asarray(rewards, dtype=np.float64).reshape(-1)
    n = r.size
    sizes = [int(s) for s in request.get("sizes") or [G] * (n // G)]
    holes = np.asarray(request.get("holes") or [0] * n, dtype=int)
    recorder = _Recorder()
    advantages, mask = np.zeros(n), np.zeros((n, RESPONSE_LENGTH))
    with _cpu_platform(), _bert_padding(), contextlib.redirect_stdout(io.StringIO()):
        for rows, groups in _generation_batches(sizes, split.prompts):
            data = _rollout(rows, groups, r, np.asarray(lengths, dtype=int), holes, c)
            _balance(ray_trainer, c, data, split.ranks)
            data = _trainer_advantage(ray_trainer, c.algorithm, data, G)
            where = (data.batch["responses"][:, 0] - MARK).numpy()
            advantages[where] = data.batch["advantages"][:, 0].double().numpy()
            mask[where] = data.batch["response_mask"].double().numpy()
            _update_actor(ray_trainer, c, data, _dispatcher(c, split, recorder))
            recorder.next_generation()
    return {"advantages": advantages, "mask": mask, **recorder.result(n, split.ranks)}


def _generation_batches(sizes: list[int], prompts: int) -> list[tuple[np.ndarray, list[int]]]:
    """The rows and group sizes of each generation batch: ``prompts`` groups after the other."""
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    out = []
    for g in range(0, len(sizes), prompts):
        groups = sizes[g : g + prompts]
        out.append((np.arange(starts[g], starts[g] + sum(groups)), groups))
    return out


def _rollout(
    rows: np.ndarray, groups: list[int], rewards: np.ndarray, lengths: np.ndarray, holes: np.ndarray, c: Any
) -> Any:
    """A generation batch as ``RayPPOTrainer.fit`` holds it after the rollout: prompts of
    PROMPT_LENGTH tokens, each group's answers together under one uid (``repeat(interleave=True)``),
    responses right-padded to RESPONSE_LENGTH with the reward on the last token (the EOS),
    ``response_mask`` 0 on ``holes[i]`` tokens from position 1 on (as a multi-turn rollout masks tool
    output), ``old_log_probs`` (and ``ref_log_prob`` under ``use_kl_loss``) at the probe's log-probability."""
    import torch
    from verl import DataProto

    n, T, P = len(rows), RESPONSE_LENGTH, PROMPT_LENGTH
    L = torch.as_tensor(lengths[rows])
    live = (torch.arange(T)[None, :] < L[:, None]).long()  # (n, T): the answer's tokens
    response_mask = live.clone()
    for j, h in enumerate(holes[rows]):
        response_mask[j, 1 : 1 + int(h)] = 0
    responses = 7 * live
    responses[:, 0] = MARK + torch.as_tensor(rows)
    prompts = torch.full((n, P), 5)
    attention = torch.cat([torch.ones(n, P, dtype=torch.long), live], 1)
    scores = torch.zeros(n, T)
    scores[torch.arange(n), L - 1] = torch.as_tensor(rewards[rows], dtype=torch.float32)
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], 1),
        "attention_mask": attention,
        "position_ids": torch.clamp(torch.cumsum(attention, 1) - 1, min=0),
        "response_mask": response_mask,
        "token_level_rewards": scores,
        "old_log_probs": torch.full((n, T), LOG_PROB),
    }
    if c.actor_rollout_ref.actor.use_kl_loss:
        tensors["ref_log_prob"] = torch.full((n, T), LOG_PROB)
    uid = np.repeat(np.array([f"prompt-{rows[0]}-{g}" for g in range(len(groups))], dtype=object), groups)
    return DataProto.from_dict(tensors=tensors, non_tensors={"uid": uid})


def _balance(ray_trainer: Any, c: Any, data: Any, ranks: int) -> None:
    """``RayPPOTrainer._balance_batch`` (when ``trainer.balance_batch``, verl's default), on a
    trainer that knows only its config and its worker group's data-parallel size."""
    if not c.trainer.balance_batch:
        return
    cls = ray_trainer.RayPPOTrainer
    group = types.SimpleNamespace(world_size=ranks, _dispatch_info={"actor": list(range(ranks))})
    trainer = types.SimpleNamespace(config=c, actor_rollout_wg=group, use_prefix_grouper=False)
    if hasattr(cls, "_get_dp_size"):
        trainer._get_dp_size = types.MethodType(cls._get_dp_size, trainer)
    cls._balance_batch(trainer, data, metrics={})


def _update_actor(ray_trainer: Any, c: Any, data: Any, update_actor: Callable[[Any], Any]) -> None:
    """``RayPPOTrainer._update_actor`` where the release has it (the meta info, and for the engine
    worker the no-padding TensorDict with its mini-batch settings), else what 0.6's ``fit`` sets."""
    cls = ray_trainer.RayPPOTrainer
    group = types.SimpleNamespace(update_actor=update_actor)
    impl = str(c.trainer.get("use_legacy_worker_impl", "auto"))
    trainer = types.SimpleNamespace(config=c, actor_rollout_wg=group, use_legacy_worker_impl=impl)
    trainer.distillation_config = None
    if hasattr(cls, "_update_actor"):
        cls._update_actor(trainer, data)
        return
    data.meta_info["multi_turn"] = c.actor_rollout_ref.rollout.multi_turn.enable
    data.meta_info["temperature"] = c.actor_rollout_ref.rollout.temperature  # the worker sets it in 0.6
    update_actor(data)


def _dispatcher(c: Any, split: StepSplit, recorder: _Recorder) -> Callable[[Any], Any]:
    """``actor_rollout_wg.update_actor``: verl's dispatch cuts the batch into one contiguous chunk per
    data-parallel rank, and each emulated rank runs the actor worker's update on its chunk."""
    rank_update = _engine_rank if _engine_path(c) else _legacy_rank
    run = rank_update(c, split, recorder)

    def update_actor(batch: Any) -> Any:
        chunks = _chunks(batch, split.ranks)
        return _EmulatedRanks(split.ranks).run(lambda rank: run(rank, chunks[rank]))[0]

    return update_actor


def _chunks(batch: Any, k: int) -> list[Any]:
    """verl's dispatch split (``BatchData.chunk`` from 0.7, ``DataProto.chunk`` before), each chunk
    writable as a rank receives it."""
    try:
        from verl.protocol import BatchData

        parts = list(BatchData(batch).chunk(chunks=k))
    except ImportError:
        parts = list(batch.chunk(chunks=k))
    for part in parts:
        if getattr(part, "is_locked", False):
            part.unlock_()
    return parts


def _release() -> tuple[int, ...]:
    return tuple(int(x) for x in version("verl").split(".")[:2] if x.isdigit())


def _legacy_rank(c: Any, split: StepSplit, recorder: _Recorder) -> Callable[[int, Any], Any]:
    """The legacy FSDP worker's actor on one rank: ``DataParallelPPOActor`` with the actor config as
    ``fsdp_workers.ActorRolloutRefWorker.__init__`` normalises it, a one-parameter module and SGD in
    place of the FSDP model, its ``_forward_micro_batch`` giving the probe's log-probabilities;
    ``update_policy`` itself splits, scales, accumulates and steps."""
    import torch
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    configs = [_legacy_actor_config(c, split.ranks) for _ in range(split.ranks)]  # built here, not in threads
    as_dict = _release() >= (0, 7)  # 0.7 returns {"log_probs", "entropys"}, 0.6 (entropy, log_prob)

    def run(rank: int, chunk: Any) -> Any:
        module = torch.nn.Linear(1, 1)
        optimizer = torch.optim.SGD(module.parameters(), lr=0.0)
        actor = DataParallelPPOActor(config=configs[rank], actor_module=module, actor_optimizer=optimizer)
        actor._forward_micro_batch = _legacy_forward(recorder, rank, as_dict)
        actor._optimizer_step = recorder.counting(rank, actor._optimizer_step)
        return actor.update_policy(chunk)

    return run


def _legacy_actor_config(c: Any, ranks: int) -> Any:
    """The actor's dataclass config after ``fsdp_workers``' normalisation: ``ppo_mini_batch_size``
    × ``rollout.n`` ÷ the data-parallel size (answers per rank per optimizer step)."""
    from verl.utils.config import omega_conf_to_dataclass

    full = copy.deepcopy(c)
    actor = full.actor_rollout_ref.actor
    actor.ppo_mini_batch_size = actor.ppo_mini_batch_size * full.actor_rollout_ref.rollout.n // ranks
    return omega_conf_to_dataclass(actor)


def _legacy_forward(recorder: _Recorder, rank: int, as_dict: bool) -> Callable[..., Any]:
    """``DataParallelPPOActor._forward_micro_batch``: a leaf log-probability per response token of the
    micro-batch's rows (kept by the recorder), zero entropy when asked."""
    import torch

    def forward(micro_batch: Any, temperature: Any = 1.0, calculate_entropy: bool = False, **_: Any) -> Any:
        responses = micro_batch["responses"]
        leaf = torch.full(responses.shape, LOG_PROB, requires_grad=True)
        recorder.add(rank, responses[:, 0] - MARK, leaf, lambda grad: grad)
        entropy = torch.zeros_like(leaf) if calculate_entropy else None
        return {"log_probs": leaf, "entropys": entropy} if as_dict else (entropy, leaf)

    return forward


def _engine_rank(c: Any, split: StepSplit, recorder: _Recorder) -> Callable[[int, Any], Any]:
    """The engine worker on one rank: ``TrainingWorker.train_mini_batch`` on a worker holding the
    probe engine (:func:`_engine_probe_class`) and the loss ``ppo_loss`` with the actor config as
    ``engine_workers.ActorRolloutRefWorker.init_model`` builds it."""
    from functools import partial

    from omegaconf import OmegaConf
    from verl.utils.profiler import DistProfiler
    from verl.workers.engine_workers import TrainingWorker
    from verl.workers.utils.losses import ppo_loss

    probe = _engine_probe_class()
    configs = [_engine_actor_config(c) for _ in range(split.ranks)]  # built here, not in threads
    model_config = OmegaConf.create({"use_remove_padding": False})  # read as .get (0.9) or an attribute (0.7)

    def run(rank: int, chunk: Any) -> Any:
        config = configs[rank]
        worker = TrainingWorker.__new__(TrainingWorker)
        worker.engine = probe(config.engine, config.optim, rank, recorder)
        worker.engine_config, worker.model_config = config.engine, model_config
        worker.flops_counter, worker.device_name = None, "cpu"
        worker.loss_fn = partial(ppo_loss, config=config)
        worker.profiler = DistProfiler(rank=rank, config=None, tool_config=None)
        worker._postprocess_output = _no_metrics
        return TrainingWorker.train_mini_batch(worker, chunk)

    return run


def _engine_actor_config(c: Any) -> Any:
    """The actor config and its engine config as ``ActorRolloutRefWorker.init_model`` sets them."""
    from verl.utils.config import omega_conf_to_dataclass

    actor = c.actor_rollout_ref.actor
    config = omega_conf_to_dataclass(actor)
    config.engine.use_dynamic_bsz = actor.use_dynamic_bsz
    config.engine.max_token_len_per_gpu = actor.ppo_max_token_len_per_gpu
    config.engine.micro_batch_size_per_gpu = actor.ppo_micro_batch_size_per_gpu
    config.engine.use_remove_padding = False  # the model's input packing: the probe has no model
    return config


def _no_metrics(output: Any, **_: Any) -> Any:
    """``TrainingWorker._postprocess_output`` (metrics: CUDA memory, MFU): an MFU of 0, nothing else."""
    from verl.utils import tensordict_utils as tu

    return tu.get_tensordict(tensor_dict={}, non_tensor_dict={"metrics": {"mfu": 0.0}})


def _engine_probe_class() -> Any:
    """``FSDPEngineWithLMHead`` with what needs a GPU stack replaced: the FSDP model by a
    one-parameter module and SGD at lr 0, its forward by the probe's log-probabilities (then the loss
    as ``forward_step`` calls it), ``train_mode`` without offload, the data-parallel group by the
    emulated one.  ``forward_backward_batch``, ``train_batch`` and ``optimizer_step`` are verl's."""
    import torch
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead
    from verl.workers.utils.padding import no_padding_2_padding

    base: Any = FSDPEngineWithLMHead

    def __init__(self: Any, engine_config: Any, optimizer_config: Any, rank: int, recorder: _Recorder) -> None:
        self.engine_config, self.optimizer_config = engine_config, optimizer_config
        self.probe_rank, self.recorder = rank, recorder
        self.module = torch.nn.Linear(1, 1)
        self.optimizer = torch.optim.SGD(self.module.parameters(), lr=0.0)
        self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda _: 1.0)
        self.ulysses_sequence_parallel_size, self.ulysses_device_mesh = 1, None
        self.scaler, self._qat_enabled = None, False

    def forward_step(self: Any, micro_batch: Any, loss_function: Any, forward_only: bool) -> Any:
        offsets = micro_batch["input_ids"].offsets()  # the no-padding layout: one row per sequence
        leaf = torch.full((int(offsets[-1]),), LOG_PROB, requires_grad=True)
        log_probs = torch.nested.nested_tensor_from_jagged(leaf, offsets=offsets)
        rows = micro_batch["responses"][:, 0] - MARK
        self.recorder.add(self.probe_rank, rows, leaf, lambda grad: no_padding_2_padding(grad, micro_batch))
        group = self.get_data_parallel_group()
        loss, metrics = loss_function(model_output={"log_probs": log_probs}, data=micro_batch, dp_group=group)
        return loss, {"model_output": {}, "loss": loss.detach().item(), "metrics": metrics}

    def optimizer_step(self: Any) -> Any:
        norm = base.optimizer_step(self)
        self.recorder.stepped(self.probe_rank)
        return norm

    methods = {
        "__init__": __init__,
        "forward_step": forward_step,
        "optimizer_step": optimizer_step,
        "get_data_parallel_group": lambda self: "emulated data-parallel group",
        "train_mode": lambda self, **_: contextlib.nullcontext(),
    }
    return type("VerlEngineProbe", (base,), methods)


@contextlib.contextmanager
def _cpu_platform() -> Any:
    """verl 0.9's device layer has no CPU platform (``plugin.platform``: CUDA, NPU, ROCm; CUDA when
    none is found): while the step runs it answers 'cpu', so that ``get_device_id`` and
    ``get_device_name`` in the engine's token count and micro-batch split stay here.  Earlier
    releases know the CPU themselves."""
    try:
        from verl.plugin.platform import platform_manager
        from verl.plugin.platform.platform_cuda import PlatformCUDA
    except ImportError:
        yield
        return
    import torch

    cpu = {
        "device_name": property(lambda self: "cpu"),
        "device_module": property(lambda self: torch.cpu),
        "current_device": lambda self: "cpu",
    }
    saved = platform_manager._current_platform
    platform_manager._current_platform = type("CPUPlatform", (PlatformCUDA,), cpu)()
    try:
        yield
    finally:
        platform_manager._current_platform = saved


@contextlib.contextmanager
def _bert_padding() -> Any:
    """verl 0.7's engine worker unpads its batch with ``flash_attn.bert_padding`` (a CUDA package that
    is never installed here; verl 0.9 falls back to plain torch itself): while the step runs, a module
    of that name whose ``unpad_input``, ``pad_input`` and ``index_first_axis`` are the same plain-torch
    functions verl 0.9's ``utils.attention_utils`` falls back to."""
    import importlib.util
    import sys

    import torch

    if importlib.util.find_spec("flash_attn") is not None:
        yield
        return

    def index_first_axis(tensor: Any, indices: Any) -> Any:
        return tensor.reshape(-1, *tensor.shape[2:])[indices] if tensor.dim() > 2 else tensor[indices]

    def unpad_input(hidden_states: Any, attention_mask: Any, unused_mask: Any = None) -> Any:
        masks = attention_mask + unused_mask if unused_mask is not None else attention_mask
        seqlens = masks.sum(dim=-1, dtype=torch.int32)
        indices = torch.nonzero(masks.flatten(), as_tuple=False).flatten()
        cu_seqlens = torch.nn.functional.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
        flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
        return flat[indices], indices, cu_seqlens, int(seqlens.max()), attention_mask.sum(-1, dtype=torch.int32)

    def pad_input(hidden_states: Any, indices: Any, batch: int, seqlen: int) -> Any:
        output = hidden_states.new_zeros(batch * seqlen, *hidden_states.shape[1:])
        output[indices] = hidden_states
        return output.view(batch, seqlen, *hidden_states.shape[1:])

    def rearrange(*args: Any, **kwargs: Any) -> Any:
        from einops import rearrange as einops_rearrange

        return einops_rearrange(*args, **kwargs)

    padding = types.ModuleType("flash_attn.bert_padding")
    padding.__dict__.update(
        index_first_axis=index_first_axis, unpad_input=unpad_input, pad_input=pad_input, rearrange=rearrange
    )
    root = types.ModuleType("flash_attn")
    root.__dict__["bert_padding"] = padding
    sys.modules.update({"flash_attn": root, "flash_attn.bert_padding": padding})
    try:
        yield
    finally:
        for name in ("flash_attn", "flash_attn.bert_padding"):
            sys.modules.pop(name, None)


@dataclass
class _Piece:
    """One micro-batch as the probe's forward saw it."""

    rank: int
    step: int
    micro: int
    rows: Any
    leaf: Any
    grid: Callable[[Any], Any]
    """The leaf's gradient as (rows, RESPONSE_LENGTH) response tokens."""


class _Recorder:
    """The micro-batches of a call: each one's rank, optimizer step (counted per rank by the
    optimizer steps taken), index within (step, rank), rows and leaf log-probabilities."""

    def __init__(self) -> None:
        self.pieces: list[_Piece] = []
        self.steps: dict[int, int] = {}
        self.micro: dict[tuple[int, int], int] = {}
        self.base = 0

    def add(self, rank: int, rows: Any, leaf: Any, grid: Callable[[Any], Any]) -> None:
        step = self.base + self.steps.get(rank, 0)
        micro = self.micro.get((rank, step), 0)
        self.micro[(rank, step)] = micro + 1
        self.pieces.append(_Piece(rank, step, micro, rows.clone(), leaf, grid))

    def stepped(self, rank: int) -> None:
        self.steps[rank] = self.steps.get(rank, 0) + 1

    def counting(self, rank: int, optimizer_step: Callable[[], Any]) -> Callable[[], Any]:
        def counted() -> Any:
            out = optimizer_step()
            self.stepped(rank)
            return out

        return counted

    def next_generation(self) -> None:
        self.base += max(self.steps.values(), default=0)
        self.steps = {}

    def result(self, n: int, ranks: int) -> dict[str, np.ndarray]:
        """Per row: −gradient ÷ ranks (FSDP averages the ranks' gradients), step, rank, micro-batch."""
        out: dict[str, np.ndarray] = {"coefficients": np.zeros((n, RESPONSE_LENGTH))}
        out.update({key: np.zeros(n, dtype=int) for key in ("step", "rank", "micro_batch")})
        for piece in self.pieces:
            rows = piece.rows.numpy()
            if piece.leaf.grad is not None:
                grad = piece.grid(piece.leaf.grad).detach().double().numpy()[:, :RESPONSE_LENGTH]
                out["coefficients"][rows] = -grad / ranks
            out["step"][rows], out["rank"][rows], out["micro_batch"][rows] = piece.step, piece.rank, piece.micro
        return out


class _EmulatedRanks:
    """Data-parallel ranks as threads of this process: ``torch.distributed``'s collectives are
    replaced, while ``run`` runs, by ones that meet at a barrier and give every rank the reduction
    of all ranks' values (the gathered sums, maxima, minima; objects gathered in rank order)."""

    NAMES = ("is_initialized", "get_rank", "get_world_size", "all_reduce", "all_gather_object")

    def __init__(self, size: int) -> None:
        self.size = size
        self.barrier = threading.Barrier(size, timeout=120)
        self.local = threading.local()
        self.slots: list[Any] = [None] * size
        self.finished = 0

    def rank(self, group: Any = None) -> int:
        return int(getattr(self.local, "rank", 0))

    def world_size(self, group: Any = None) -> int:
        return self.size

    def _exchange(self, value: Any) -> list[Any]:
        if self.finished:
            raise RuntimeError("the emulated ranks made different collective calls")
        self.slots[self.rank()] = value
        self.barrier.wait()
        values = list(self.slots)
        self.barrier.wait()
        return values

    def all_reduce(self, tensor: Any, op: Any = None, group: Any = None, async_op: bool = False) -> None:
        import torch
        import torch.distributed as dist

        stacked = torch.stack(self._exchange(tensor.detach().clone()))
        reduce = {
            dist.ReduceOp.SUM: lambda x: x.sum(0),
            dist.ReduceOp.MAX: lambda x: x.amax(0),
            dist.ReduceOp.MIN: lambda x: x.amin(0),
            dist.ReduceOp.AVG: lambda x: x.double().mean(0),
        }[dist.ReduceOp.SUM if op is None else op]
        tensor.copy_(reduce(stacked))

    def all_gather_object(self, out: list[Any], obj: Any, group: Any = None) -> None:
        out[:] = self._exchange(obj)

    def run(self, fn: Callable[[int], Any]) -> list[Any]:
        """``fn(rank)`` on every rank, each in its thread; the first rank's error is raised."""
        import torch.distributed as dist

        results: list[Any] = [None] * self.size
        errors: list[BaseException | None] = [None] * self.size

        def target(rank: int) -> None:
            self.local.rank = rank
            try:
                results[rank] = fn(rank)
            except BaseException as exc:  # noqa: BLE001 (re-raised in the caller's thread)
                errors[rank] = exc
            self.finished += 1
            if self.barrier.n_waiting or errors[rank] is not None:  # a rank left waiting would wait forever
                self.barrier.abort()

        saved = {name: getattr(dist, name) for name in self.NAMES}
        patch = (lambda: True, self.rank, self.world_size, self.all_reduce, self.all_gather_object)
        for name, value in zip(self.NAMES, patch):
            setattr(dist, name, value)
        try:
            threads = [threading.Thread(target=target, args=(rank,)) for rank in range(self.size)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            for name, value in saved.items():
                setattr(dist, name, value)
        first = [e for e in errors if e is not None and not isinstance(e, threading.BrokenBarrierError)]
        first += [e for e in errors if e is not None]
        if first:
            raise first[0]
        return results
