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
- ``verl:estimator=NAME``: the ``core_algos`` estimator function alone (bypasses the trainer).
"""

from __future__ import annotations

import os
import uuid
import warnings
from importlib.metadata import version
from typing import Any, Callable

import numpy as np

from grpo_identity.checks.frameworks import RESPONSE_LENGTH, AdapterError, FrameworkSpec, lengths_for

__all__ = ["import_check", "compose", "advantage_target", "estimator_target", "gradient_target", "lengths_for"]

#: settings every verl run must give (the actor's micro-batch size has no default); the user's
#: ``--set`` come after and win
DRIVER_SETS = (("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "1"),)


#: the settings that give each per-sample weight and each preset (what a report suggests)
SETTINGS: dict[str, dict[str, str]] = {
    "per_sample_weight": {
        "constant": "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum",
        "1/length": "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
        "1/batch_tokens": "actor_rollout_ref.actor.loss_agg_mode=token-mean",
    },
    "preset": {
        "dr_grpo": "algorithm.adv_estimator=grpo with algorithm.norm_adv_by_std_in_grpo=false",
        "verl": "algorithm.adv_estimator=grpo",
        "rloo": "algorithm.adv_estimator=rloo",
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
    alg = cfg.algorithm
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
    out = np.empty(len(rewards), dtype=np.float64)
    out[order] = first.detach().numpy()
    return out, data, order


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
    (autograd through the actor's policy loss and ``agg_loss``), rows in the caller's order."""
    import torch

    cfg = compose(spec)
    ray_trainer = _trainer_module()
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
        rewards: np.ndarray, group_size: int, lengths: np.ndarray | None
    ) -> dict[str, np.ndarray]:
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
