"""AReaL driver: its PPO actor's own advantage computation, from its own config.

- config: AReaL's loader steps (``areal.api.cli_args``): ``parse_cli_args`` (Hydra's compose of a
  YAML file with the command-line overrides) on a YAML holding the driver's mandatory names (the
  experiment and trial names, a file root, the backends), with the user's ``--config`` file merged
  over it, then each ``--set KEY=VALUE`` as the Hydra override ``++KEY=VALUE`` (override or add:
  the driver's YAML does not spell every key), then ``to_structured_cfg(cfg, GRPOConfig)`` (the
  merge with the dataclass defaults: an unknown key is OmegaConf's error) and
  ``OmegaConf.to_object`` (the dataclasses' own ``__post_init__`` checks).  ``load_expr_config``'s
  other two steps, the name-resolve setup and writing the config to the log directory, are side
  effects the driver skips;
- advantages: ``PPOActor(config.actor, engine=None).compute_advantages`` on the list of per-prompt
  batches the trainer passes it: each prompt's G trajectories (as ``RLVRWorkflow`` returns them, a
  prompt of 2 tokens and responses of different lengths) concatenated by
  ``areal.utils.data.concat_padded_tensors`` (as ``GroupedRolloutWorkflow`` does), so the groups
  are G consecutive rows.  That is reward scaling/bias/clip → ``reward_norm`` → the token-level
  return (GAE with no values) → ``adv_norm`` over the response tokens.  The engine is never used
  there; the behaviour and reference log-probabilities are 0, so the KL reward is 0;
- gradient: that batch, concatenated again (``concat_padded_tensors``) as ``_ppo_update`` gets
  it, through ``grpo_loss_fn`` bound to the config's options as ``_ppo_update`` binds it,
  differentiated by autograd with respect to the log-probabilities (on-policy: current = old =
  0).  The whole batch is one minibatch (``ppo_n_minibatches`` splits a step into several
  updates; the audit's batch is one) and one micro-batch (the engine scales each micro-batch's
  loss by its ``loss_mask.count_nonzero()`` over the total: 1 here); the engine's forward pass
  (the model's log-probabilities) is bypassed;
- group size: ``NormConfig.group_size`` (``${gconfig.n_samples}`` in AReaL's examples) is each
  probe batch's G, set on the actor's config before the actor is built.
"""

from __future__ import annotations

import copy
import os
import tempfile
import warnings
from importlib.metadata import version
from typing import Any, Callable

import numpy as np

from grpo_identity.checks.frameworks import PROMPT_LENGTH, RESPONSE_LENGTH, AdapterError, FrameworkSpec, lengths_for

__all__ = [
    "import_check",
    "load_config",
    "advantage_target",
    "gradient_target",
    "lengths_for",
    "PROMPT_LENGTH",
    "RESPONSE_LENGTH",
]

#: the names AReaL's config leaves mandatory (``???``), which a training YAML always gives;
#: ``{root}`` is a fresh temporary directory (nothing is written there)
DRIVER_YAML = """\
experiment_name: grpo-identity
trial_name: audit
train_dataset: {{path: none, type: rl}}
saver: {{experiment_name: "${{experiment_name}}", trial_name: "${{trial_name}}", fileroot: "{root}"}}
evaluator: {{experiment_name: "${{experiment_name}}", trial_name: "${{trial_name}}", fileroot: "{root}"}}
stats_logger: {{experiment_name: "${{experiment_name}}", trial_name: "${{trial_name}}", fileroot: "{root}"}}
recover: {{experiment_name: "${{experiment_name}}", trial_name: "${{trial_name}}", fileroot: "{root}"}}
rollout: {{backend: "sglang:d1"}}
actor: {{experiment_name: "${{experiment_name}}", trial_name: "${{trial_name}}", backend: "fsdp:d1"}}
"""
#: keys the audit sets itself, per probe batch
GROUP_SIZE_KEYS = ("actor.reward_norm.group_size", "actor.adv_norm.group_size", "gconfig.n_samples")


#: the settings that give each preset (what a report suggests)
SETTINGS: dict[str, dict[str, str]] = {
    "preset": {
        "dr_grpo": "actor.reward_norm.mean_level=group with actor.reward_norm.std_level=null",
        "rloo": "actor.reward_norm.mean_level=group, actor.reward_norm.mean_leave1out=true, "
        "actor.reward_norm.std_level=null",
    },
}


def import_check() -> None:
    """Import what the driver needs (a release environment's smoke test)."""
    import importlib

    importlib.import_module("areal.api.cli_args")
    importlib.import_module("areal.trainer.ppo.actor")
    importlib.import_module("grpo_identity.checks.target")


def _release() -> str:
    return f"AReaL {version('areal')}"


def _override(key: str, value: str) -> str:
    """A ``--set`` as a Hydra override: ``++KEY=VALUE`` unless it already says ``+``/``~``."""
    for name in GROUP_SIZE_KEYS:
        if key.lstrip("+~") == name:
            raise AdapterError(f"{name} is the audit's group size G, set for each probe batch: drop --set {key}")
    return f"{key}={value}" if key[:1] in "+~" else f"++{key}={value}"


def _yaml(spec: FrameworkSpec, folder: str) -> str:
    """The YAML file AReaL's loader reads: the driver's names, the user's file over them."""
    from omegaconf import OmegaConf

    base = OmegaConf.create(DRIVER_YAML.format(root=os.path.join(folder, "fileroot")))
    if spec.config:
        base = OmegaConf.merge(base, OmegaConf.load(spec.config))
    path = os.path.join(folder, "grpo_identity_areal.yaml")
    OmegaConf.save(base, path)
    return path


def load_config(spec: FrameworkSpec) -> Any:
    """AReaL's ``GRPOConfig`` from ``spec``, through its own loader (see the module's docstring)."""
    warnings.filterwarnings("ignore")
    try:
        from areal.api import cli_args
        from omegaconf import OmegaConf
    except ImportError as exc:
        raise AdapterError(f"AReaL {version('areal')}: areal.api.cli_args does not import here ({exc})") from None
    for name in ("parse_cli_args", "to_structured_cfg", "GRPOConfig"):
        if not hasattr(cli_args, name):
            raise AdapterError(
                f"{_release()} has no areal.api.cli_args.{name} (the driver knows AReaL's loader of 1.0)"
            )
    overrides = [_override(k, v) for k, v in spec.sets]
    try:
        with tempfile.TemporaryDirectory(prefix="grpo-identity-areal-") as folder:
            raw, _ = cli_args.parse_cli_args(["--config", _yaml(spec, folder), *overrides])
            cfg = OmegaConf.to_object(cli_args.to_structured_cfg(raw, config_cls=cli_args.GRPOConfig))
    except Exception as exc:  # Hydra's override grammar, an unknown key, a value __post_init__ refuses
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise AdapterError(f"{_release()} rejects the config ({spec.describe()}): {msg}") from None
    finally:
        _clear_hydra()
    return cfg


def _clear_hydra() -> None:
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()


def _actor_module() -> Any:
    try:
        from areal.trainer.ppo import actor as actor_module
    except ImportError as exc:
        raise AdapterError(f"{_release()}: areal.trainer.ppo.actor does not import here ({exc})") from None
    for name in ("PPOActor",):
        if not hasattr(actor_module, name):
            raise AdapterError(f"{_release()} has no areal.trainer.ppo.actor.{name}")
    if not hasattr(actor_module.PPOActor, "compute_advantages"):
        raise AdapterError(f"{_release()} has no PPOActor.compute_advantages")
    actor_module.logger.setLevel("WARNING")  # the actor logs its whole configuration when built
    return actor_module


class _Actors:
    """One ``PPOActor`` per group size: ``config.actor`` with each normalisation's group_size = G."""

    def __init__(self, cfg: Any) -> None:
        self.cfg, self.module = cfg, _actor_module()
        self.built: dict[int, Any] = {}

    def __call__(self, G: int) -> Any:
        if G not in self.built:
            actor_cfg = copy.deepcopy(self.cfg.actor)
            for norm in (actor_cfg.reward_norm, actor_cfg.adv_norm):
                if norm is not None:
                    norm.group_size = G
            self.built[G] = self.module.PPOActor(actor_cfg, engine=None)
        return self.built[G]


def _trajectory(reward: float, length: int, prox_logp: bool) -> dict[str, Any]:
    """One trajectory as ``RLVRWorkflow.arun_episode`` returns it (batch dim 1), with the
    trainer's ``prox_logp`` (recomputed log-probabilities, on-policy: 0) when the config asks
    for them (``should_compute_prox_logp``)."""
    import torch

    L, P = PROMPT_LENGTH + int(length), PROMPT_LENGTH
    traj = {
        "input_ids": torch.ones(1, L, dtype=torch.int32),
        "loss_mask": torch.tensor([[0] * P + [1] * int(length)], dtype=torch.int32),
        "logprobs": torch.zeros(1, L, dtype=torch.float32),
        "versions": torch.tensor([[-1] * P + [0] * int(length)], dtype=torch.int32),
        "attention_mask": torch.ones(1, L, dtype=torch.bool),
        "rewards": torch.tensor([float(reward)], dtype=torch.float32),
    }
    if prox_logp:
        traj["prox_logp"] = torch.zeros(1, L, dtype=torch.float32)
    return traj


def _batch(actor: Any, rewards: np.ndarray, G: int, lengths: np.ndarray) -> list[dict[str, Any]]:
    """The trainer's ``rollout_batch``: one dict per prompt, its G trajectories concatenated."""
    from areal.utils.data import concat_padded_tensors

    prox = bool(actor.config.should_compute_prox_logp())
    rows = [_trajectory(r, ell, prox) for r, ell in zip(np.asarray(rewards), np.asarray(lengths))]
    return [concat_padded_tensors(rows[i : i + G]) for i in range(0, len(rows), G)]


def _advantages(
    actor: Any, rewards: np.ndarray, G: int, lengths: np.ndarray
) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """One advantage per trajectory (its response tokens' common value), and the actor's output."""
    out = actor.compute_advantages(_batch(actor, rewards, G, lengths))
    values = []
    for group in out:
        adv, mask = group["advantages"].double(), group["loss_mask"].bool()  # (G, T); mask rolled by the actor
        for a, m in zip(adv, mask):
            tokens = a[m]
            if tokens.numel() == 0:
                raise RuntimeError("a response has no token in the actor's loss mask")
            if float((tokens - tokens[0]).abs().max()) > 1e-6 * max(1.0, float(tokens[0].abs())):
                raise RuntimeError(
                    "token advantages vary within a response: not an outcome advantage of one value per answer"
                )
            values.append(float(tokens[0]))
    return np.asarray(values, dtype=np.float64), out


def advantage_target(spec: FrameworkSpec) -> Callable[..., Any]:
    """fn(rewards, G): the advantages AReaL's PPO actor computes under ``spec``'s config."""
    cfg = load_config(spec)
    actors = _Actors(cfg)

    def areal_actor_advantage(rewards: np.ndarray, group_size: int) -> np.ndarray:
        G = int(group_size)
        return _advantages(actors(G), rewards, G, lengths_for(len(rewards)))[0]

    areal_actor_advantage.grpo_identity_info = _info(  # type: ignore[attr-defined]
        spec, cfg, "PPOActor.compute_advantages (engine unused; KL reward 0)"
    )
    return areal_actor_advantage


def _loss_fn(module: Any, a: Any) -> Callable[..., Any]:
    """``grpo_loss_fn`` with the keyword options ``PPOActor._ppo_update`` gives it from the config."""
    import functools

    if not hasattr(module, "grpo_loss_fn"):
        raise AdapterError(f"{_release()} has no areal.trainer.ppo.actor.grpo_loss_fn")
    opts = (
        "eps_clip",
        "eps_clip_higher",
        "c_clip",
        "rejection_sampling",
        "m2_threshold",
        "importance_sampling_level",
        "prox_logp_method",
        "use_sapo_loss",
        "sapo_tau_pos",
        "sapo_tau_neg",
        "use_decoupled_loss",
    )
    return functools.partial(module.grpo_loss_fn, current_version=0, **{k: getattr(a, k) for k in opts})


def gradient_target(spec: FrameworkSpec) -> Callable[..., Any]:
    """fn(rewards, G, lengths) → {advantages, coefficients, mask}: −∂loss/∂log π per response token,
    autograd through the actor's ``grpo_loss_fn`` on the whole batch as one minibatch and one
    micro-batch (the engine then scales the loss by loss_mask.count_nonzero() over the total: 1)."""
    import torch
    from areal.utils.data import concat_padded_tensors

    cfg = load_config(spec)
    actors = _Actors(cfg)
    loss_fn = _loss_fn(actors.module, cfg.actor)

    def areal_grpo_loss_gradient(
        rewards: np.ndarray, group_size: int, lengths: np.ndarray | None
    ) -> dict[str, np.ndarray]:
        G = int(group_size)
        adv, out = _advantages(
            actors(G), rewards, G, lengths_for(len(rewards)) if lengths is None else np.asarray(lengths)
        )
        if lengths is None:  # the advantages alone (the advantage audit of the same run)
            return {"advantages": adv}
        data = concat_padded_tensors(out)  # the batch _ppo_update receives, rows in the caller's order
        logp = data["logprobs"].detach().clone().requires_grad_(True)  # (B, T); on-policy: current = old
        loss = loss_fn(logp, torch.zeros_like(logp), data)
        (grad,) = torch.autograd.grad(loss, logp)
        return {"advantages": adv, "coefficients": -grad.double().numpy(), "mask": data["loss_mask"].double().numpy()}

    entry = (
        "PPOActor.compute_advantages, then grpo_loss_fn as _ppo_update binds it (one minibatch, one micro-batch; "
        "the engine's forward bypassed: log-probs given)"
    )
    areal_grpo_loss_gradient.grpo_identity_info = {  # type: ignore[attr-defined]
        **_info(spec, cfg, entry),
        "ppo_n_minibatches": "1 (the audit's batch is one update)",
        "lengths_optional": True,
    }
    return areal_grpo_loss_gradient


def _norm(norm: Any) -> dict[str, Any] | None:
    if norm is None:
        return None
    keys = ("mean_level", "mean_leave1out", "std_level", "std_unbiased", "eps")
    return {k: getattr(norm, k, None) for k in keys}


def _info(spec: FrameworkSpec, cfg: Any, entry: str) -> dict[str, Any]:
    a = cfg.actor
    return {
        "framework": "areal",
        "version": version("areal"),
        "entry": entry,
        "options": dict(spec.sets),
        "reward_norm": _norm(a.reward_norm),
        "adv_norm": _norm(a.adv_norm),
        "reward_scaling": a.reward_scaling,
        "reward_bias": a.reward_bias,
        "reward_clip": a.reward_clip,
        "group_size": "each probe batch's G (NormConfig.group_size)",
        "stand_ins": [],
        "dtype": "float32",
    }
