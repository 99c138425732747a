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
  probe batch's G, set on the actor's config before the actor is built;
- the optimizer step (:mod:`grpo_identity.checks.measure.steps`, a call with a request): the trainer's
  path from the rollout to the optimizer, per generation batch (``train_dataset.batch_size``
  prompts, each a group as ``GroupedRolloutWorkflow`` delivers it: the answers that did not come
  back ``None``, so a group may hold fewer than ``gconfig.n_samples``).  ``PPOActorController``
  hands the groups to the data-parallel ranks with ``TrainController._dispatch_tensors`` (whole
  groups, balanced by tokens; on one rank too, where it orders them heaviest first); each rank
  runs ``PPOActor.compute_advantages`` on its groups concatenated (``Normalization`` cuts fixed
  blocks of ``group_size`` rows), the results are merged back (``_merge_tensors``) and dispatched
  again for ``PPOActor.ppo_update``: its
  ``ppo_n_minibatches`` mini-batches (``split_padded_tensor_dict_into_mb_list``: ``_ffd_allocate``
  deals the answers out longest first, each to the mini-batch with the fewest; not by group), one
  ``engine.train_batch`` (one optimizer step) each, with AReaL's
  ``grpo_loss_fn`` partial and its ``loss_weight_fn`` (``loss_mask.count_nonzero()``).  The
  engine is ``FSDPEngine`` itself, its ``train_batch`` running as written (``_prepare_mb_list``'s
  micro-batches by ``actor.mb_spec``, ``compute_total_loss_weight``'s all-reduced total,
  ``_compute_logprobs_and_loss``'s scale ``local_weight / total_loss_weight × dp_size``); only the
  model (a table of log-probabilities, one row per answer), the optimizer step (it records the
  accumulated gradient) and FSDP's gradient average over the ranks (1/dp) are stand-ins.  Each rank
  is a process of its own in one gloo group (:class:`~grpo_identity.checks.frameworks._ranks.ProcessRanks`),
  forked once for the advantages and once for the update, so every all-reduce AReaL makes (the total
  loss weight, a batch-level ``Normalization``, the micro-batch count) is torch's own over every rank.
  The unsplit layout runs the same optimizer steps (the answers of each split step, all ranks' k-th
  mini-batches) each as one ``ppo_update`` of one micro-batch on one rank.  Split
  settings AReaL would refuse on the audit's rows (a count below 1, a token budget below the longest
  sequence, a batch the ranks or micro-batches cannot divide) are refused when the target is built.
"""

from __future__ import annotations

import copy
import importlib
import os
import tempfile
import warnings
from dataclasses import dataclass, replace
from importlib.metadata import version
from typing import Any, Callable

import numpy as np

from grpo_identity.checks.frameworks import (
    PROMPT_LENGTH,
    RESPONSE_LENGTH,
    STEP_GROUP_SIZE,
    AdapterError,
    FrameworkSpec,
    hydra_keys,
    lengths_for,
)
from grpo_identity.checks.frameworks._ranks import ProcessRanks
from grpo_identity.checks.frameworks.contract import Built, Difference, DriverInfo, StepPlan

__all__ = [
    "DIFFERENCES",
    "import_check",
    "load_config",
    "build",
    "ArealTarget",
    "lengths_for",
    "PROMPT_LENGTH",
    "RESPONSE_LENGTH",
]

_CLI, _ACTOR = "areal.api.cli_args", "areal.trainer.ppo.actor"
#: how AReaL's releases differ where the driver reads their code (:class:`~.contract.Difference`); the loader came
#: with the 0.3.0-lite tag (0.3.1 is the first numbered release after it), the actor moved to areal.trainer in 1.0
DIFFERENCES = {
    "loader": Difference(f"{_CLI}:parse_cli_args", "0.3.1", "AReaL's loader of a YAML config and its overrides"),
    "structured": Difference(f"{_CLI}:to_structured_cfg", "0.3.1", "the loaded config as AReaL's dataclasses"),
    "config": Difference(f"{_CLI}:GRPOConfig", "0.3.1", "the GRPO experiment's config class"),
    "advantages": Difference(
        f"{_ACTOR}:PPOActor.compute_advantages", "1.0.0", "the actor's advantages: the driver's advantage path"
    ),
    "loss": Difference(f"{_ACTOR}:grpo_loss_fn", "1.0.0", "the actor's PPO loss: the gradient's"),
    "rejection_sampling": Difference(
        f"{_CLI}:PPOActorConfig.rejection_sampling",
        "1.0.4",
        "the behaviour-policy correction of the decoupled loss (the three-policy probe's estimator)",
    ),
}

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
#: keys the audit sets itself, per probe batch (``gconfig.n_samples``, the configured G, is the user's:
#: the step's group size)
GROUP_SIZE_KEYS = ("actor.reward_norm.group_size", "actor.adv_norm.group_size")
#: the settings that split an optimizer step (a key, or everything under it)
SPLIT_KEYS = ("actor.ppo_n_minibatches", "actor.mb_spec", "actor.backend")
#: the split where the user set none of :data:`SPLIT_KEYS`: two micro-batches per mini-batch on
#: two data-parallel ranks (AReaL's own defaults, one micro-batch on one rank, would not accumulate)
DEFAULT_N_MBS, DEFAULT_BACKEND = 2, "fsdp:d2"
#: the prompts per generation batch where the user set none (AReaL's default, ``batch_size=1``, holds
#: one group); the step's group size where the user set none is :data:`STEP_GROUP_SIZE`
DEFAULT_BATCH_SIZE = 4
#: the unsplit layout (:func:`_run_unsplit`)
UNSPLIT = (
    "the split layout's optimizer steps, each with the same answers (the ranks' k-th mini-batches of "
    "PPOActor._ppo_update), run as PPOActor.ppo_update with ppo_n_minibatches=1 and MicroBatchSpec() "
    "(one train_batch of one micro-batch) on one rank; the advantages computed on one rank"
)


def import_check() -> None:
    """Import what the driver needs (a release environment's smoke test)."""
    importlib.import_module("areal.api.cli_args")
    importlib.import_module("areal.trainer.ppo.actor")
    importlib.import_module("areal.engine.fsdp_engine")
    importlib.import_module("areal.infra.controller.train_controller")
    importlib.import_module("grpo_identity.checks.calls.target")


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
    for name in ("loader", "structured", "config"):
        DIFFERENCES[name].require(_release())
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
    DIFFERENCES["advantages"].require(_release())
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


def _trajectory(reward: float, length: int, prox_logp: bool, marker: int = 1, hole: int = 0) -> dict[str, Any]:
    """One trajectory as ``RLVRWorkflow.arun_episode`` returns it (batch dim 1), with the
    trainer's ``prox_logp`` (recomputed log-probabilities, on-policy: 0) when the config asks
    for them (``should_compute_prox_logp``).  Every token id is ``marker`` (the step probe's row
    id); ``hole`` response tokens from position 1 on are out of the loss mask, as a multi-turn
    workflow masks the tokens it did not generate."""
    import torch

    L, P = PROMPT_LENGTH + int(length), PROMPT_LENGTH
    if not 0 <= int(hole) < max(int(length), 1):
        raise ValueError(f"{hole} masked tokens do not fit inside an answer of {length} tokens")
    answer = [1] + [0] * int(hole) + [1] * (int(length) - 1 - int(hole))
    traj = {
        "input_ids": torch.full((1, L), int(marker), dtype=torch.int32),
        "loss_mask": torch.tensor([[0] * P + answer], dtype=torch.int32),
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
    return _answer_values(out), out


def _answer_values(out: list[dict[str, Any]]) -> np.ndarray:
    """The actor's advantages, one per trajectory (its response tokens' common value), group by group."""
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
    return np.asarray(values, dtype=np.float64)


def _loss_fn(module: Any, a: Any) -> Callable[..., Any]:
    """``grpo_loss_fn`` with the keyword options ``PPOActor._ppo_update`` gives it from the config."""
    import functools

    DIFFERENCES["loss"].require(_release())
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


def build(spec: FrameworkSpec, level: str) -> ArealTarget:
    """The target of ``spec`` at ``level`` (:mod:`.contract`)."""
    return ArealTarget(spec, level)


class ArealTarget(Built):
    """AReaL's PPO actor from ``spec``'s config.  Advantages: ``PPOActor.compute_advantages`` (engine unused, KL
    reward 0).  Gradient: −∂loss/∂log π per response token, autograd through the actor's ``grpo_loss_fn`` on the
    whole batch as one minibatch and one micro-batch (the engine then scales the loss by
    loss_mask.count_nonzero() over the total: 1).  A step request: the trainer's step path (:func:`_run_step`),
    with ``step``, ``rank`` and ``micro_batch`` per row."""

    def __init__(self, spec: FrameworkSpec, level: str) -> None:
        self.cfg = load_config(spec)
        self.actors = _Actors(self.cfg)
        info = _info(spec, self.cfg, "PPOActor.compute_advantages (engine unused; KL reward 0)")
        if level == "gradient":
            self.loss_fn = _loss_fn(self.actors.module, self.cfg.actor)
            self.split = _step_split(spec, self.cfg)
            self.engine = _engine_class()
            details = {
                **info.details,
                "ppo_n_minibatches": "1 (the audit's batch is one update); the step request splits as configured",
            }
            self.correction = rollout_settings(self.cfg.actor)
            if self.correction:
                details["rollout_log_probs"] = "put in after the advantages (computed at μ = π_old: KL reward 0)"
            groups = async_settings(self.cfg.actor)
            info = info.with_step(self.split.plan(), entry=_GRADIENT_ENTRY, details=details, lengths_optional=True,
                                  rollout_correction=self.correction, async_groups=groups)  # fmt: skip
        super().__init__(info, level)

    def advantages(self, rewards: np.ndarray, G: int, scores: Any = None) -> np.ndarray:
        return _advantages(self.actors(G), rewards, G, lengths_for(len(rewards)))[0]

    def step(self, rewards: np.ndarray, G: int, lengths: np.ndarray, request: dict[str, Any]) -> dict[str, Any]:
        return _run_step(self.cfg, self.split, self.engine, np.asarray(rewards, dtype=np.float64), G, lengths, request)

    def gradient(self, rewards: np.ndarray, G: int, lengths: np.ndarray) -> dict[str, Any]:
        import torch
        from areal.utils.data import concat_padded_tensors

        adv, out = _advantages(self.actors(G), rewards, G, np.asarray(lengths))
        data = concat_padded_tensors(out)  # the batch _ppo_update receives, rows in the caller's order
        logp = data["logprobs"].detach().clone().requires_grad_(True)  # (B, T); on-policy: current = old
        loss = self.loss_fn(logp, torch.zeros_like(logp), data)
        (grad,) = torch.autograd.grad(loss, logp)
        return {"advantages": adv, "coefficients": -grad.double().numpy(), "mask": data["loss_mask"].double().numpy()}

    def async_groups(self, arrival: dict[str, Any]) -> dict[str, Any]:
        return {"steps": _deliveries(self.actors(int(arrival["G"])), arrival)}

    def three_policy(self, rewards: np.ndarray, G: int, lengths: np.ndarray, rollout: dict[str, Any]) -> dict[str, Any]:
        """The decoupled loss given the rollout engine's log-probabilities ``logprobs`` = log π_old − X beside the
        recomputed ``prox_logp`` = log π_old (seeded), at π_θ = π_old, with the config's ``rejection_sampling`` or
        none (the correction off); X None: the batch has no ``logprobs``, from the advantages on."""
        import torch
        from areal.utils.data import concat_padded_tensors

        from grpo_identity.checks.measure.rollout import seeded_old_logps

        if not self.correction:
            raise NotImplementedError("AReaL: this config sets no rollout correction (actor.rejection_sampling)")
        actor, x = self.actors(G), rollout["log_ratio"]
        if x is None:  # what the actor does with a batch the rollout engine gave no log-probabilities
            batch = _batch(actor, np.asarray(rewards), G, np.asarray(lengths))
            actor.compute_advantages([{k: v for k, v in group.items() if k != "logprobs"} for group in batch])
        adv, out = _advantages(actor, rewards, G, np.asarray(lengths))
        data = concat_padded_tensors(out)
        mask = data["loss_mask"].bool()

        def rolled(a: np.ndarray) -> Any:  # the answer's T tokens → the actor's rolled layout (see _response)
            z = torch.zeros(mask.shape)
            cols = min(RESPONSE_LENGTH, mask.shape[1] - PROMPT_LENGTH + 1)
            z[:, PROMPT_LENGTH - 1 : PROMPT_LENGTH - 1 + cols] = torch.as_tensor(a[:, :cols], dtype=torch.float32)
            return z * mask

        old = rolled(seeded_old_logps((mask.shape[0], RESPONSE_LENGTH)))
        data["prox_logp"] = old.clone()
        if x is None:
            data.pop("logprobs")
        else:
            data["logprobs"] = old - rolled(np.asarray(x, dtype=np.float64))
        logp = old.clone().requires_grad_(True)
        chosen = self.cfg.actor.rejection_sampling if rollout["correct"] else None
        loss = self.loss_fn(logp, torch.zeros_like(logp), data, rejection_sampling=chosen)
        (grad,) = torch.autograd.grad(loss, logp)
        rows = {"coefficients": -grad, "mask": mask.double(), "old_logps": old}
        return {"advantages": adv, **{k: np.stack([_response(r) for r in v]) for k, v in rows.items()}}


def async_settings(actor: Any) -> dict[str, Any]:
    """``info["async_groups"]``: no staleness bound of the trainer's own (``rollout.max_head_offpolicyness`` holds
    back new rollouts; an accepted answer is never dropped for age); answers of several weight versions in one batch
    by design (the decoupled loss's π_prox); a batch-wide σ where a normalisation's ``std_level=batch`` says so."""
    documented = {"group_mixed_versions": "AReaL's asynchronous RL: a batch's answers of several versions"}
    batch = [
        name for name in ("reward_norm", "adv_norm") if getattr(getattr(actor, name), "std_level", None) == "batch"
    ]
    if batch:
        documented["group_scale_foreign"] = ", ".join(f"actor.{name}.std_level=batch" for name in batch)
    return {
        "max_staleness": None,
        "setting": "rollout.max_head_offpolicyness bounds admission, not the trainer's batch",
        "documented": documented,
    }


def _deliveries(actor: Any, arrival: dict[str, Any]) -> list[dict[str, Any]]:
    """Each delivery as the trainer's batch: one dict per group as the rollout workflow leaves it (a group short of
    G as ``GroupedRolloutWorkflow`` keeps what came back), through ``PPOActor.compute_advantages``."""
    from areal.utils.data import concat_padded_tensors

    from grpo_identity.checks.measure.arrival import group_order

    prox = bool(actor.config.should_compute_prox_logp())
    steps = []
    for step in arrival["steps"]:
        if any(r is None for r in step["reward"]) or not all(step["length"]):
            raise NotImplementedError("AReaL: the trainer's batch holds a float reward and tokens for every answer")
        groups = list(dict.fromkeys(step["group"]))
        order = group_order(step["group"])
        batch = []
        for g in groups:
            rows = [j for j in order if step["group"][j] == g]
            trajs = [_trajectory(step["reward"][j], step["length"][j], prox) for j in rows]
            for traj, j in zip(trajs, rows):
                traj["versions"][traj["versions"] >= 0] = int(step["version"][j])
            batch.append(concat_padded_tensors(trajs))
        values = _answer_values(actor.compute_advantages(batch))
        steps.append({"trained": [step["id"][j] for j in order], "advantages": values.tolist()})
    return steps


def rollout_settings(actor: Any) -> dict[str, Any] | None:
    """``info["rollout_correction"]``: the decoupled loss's ``rejection_sampling`` as the probe's estimator (metric
    ratio: token mask or clamp; a sequence's geometric mean, aggregated by its mean), None where the release has
    none, the loss is not decoupled or π_old is not recomputed (``prox_logp_method=loglinear``); with another
    metric or aggregation no estimator is documented (the probe names what it finds)."""
    rs = actor.rejection_sampling if DIFFERENCES["rejection_sampling"].present() else None
    if rs is None or not actor.use_decoupled_loss or str(actor.prox_logp_method) == "loglinear":
        return None
    level, action, metric = str(rs.level), str(rs.action), str(rs.metric)
    mode = "truncate" if action == "clamp" else "mask"
    plain = metric == "ratio" and (level == "token" or str(rs.agg) == "mean")
    estimator = f"{'token' if level == 'token' else 'geometric'}_{mode}" if plain else None
    setting = f"actor.rejection_sampling: level={level}, action={action}, metric={metric}, upper={rs.upper}"
    setting += f", lower={rs.lower}" if rs.lower is not None else ""
    setting += f", agg={rs.agg}" if level != "token" else ""
    return {"estimator": estimator, "cap": float(rs.upper), "low": float(rs.lower or 0.0), "setting": setting}


_GRADIENT_ENTRY = (
    "PPOActor.compute_advantages, then grpo_loss_fn as _ppo_update binds it (one minibatch, one micro-batch; "
    "the engine's forward bypassed: log-probs given); with a step request PPOActor.ppo_update on "
    "FSDPEngine.train_batch (the model and the optimizer step stubbed)"
)


# --- the optimizer step ---------------------------------------------------------------------------
@dataclass(frozen=True)
class _Split:
    """The configured step: G answers per prompt, ``batch_size`` prompts per generation batch,
    ``minibatches`` optimizer steps per generation batch (``actor.ppo_n_minibatches``), each rank's
    mini-batch cut into micro-batches by ``mb_spec`` (``actor.mb_spec``), ``dp`` data-parallel
    ranks (``actor.backend``); ``chosen`` says what the driver set where the user set nothing."""

    group_size: int
    batch_size: int
    minibatches: int
    mb_spec: Any
    backend: str
    dp: int
    chosen: tuple[tuple[str, Any], ...] = ()

    @property
    def generation_rows(self) -> int:
        return self.batch_size * self.group_size

    def unsplit(self) -> _Split:
        """The unsplit layout's settings: one mini-batch (one ``train_batch``) of one micro-batch on one rank,
        run on the rows of each of the split layout's optimizer steps in turn."""
        from areal.api.cli_args import MicroBatchSpec

        return replace(self, minibatches=1, mb_spec=MicroBatchSpec(), backend="fsdp:d1", dp=1)

    def settings(self) -> dict[str, Any]:
        m = self.mb_spec
        return {
            "gconfig.n_samples": self.group_size,
            "train_dataset.batch_size": self.batch_size,
            "actor.ppo_n_minibatches": self.minibatches,
            "actor.mb_spec.n_mbs": m.n_mbs,
            "actor.mb_spec.max_tokens_per_mb": m.max_tokens_per_mb,
            "actor.mb_spec.granularity": m.granularity,
            "actor.mb_spec.n_mbs_divisor": m.n_mbs_divisor,
            "actor.mb_spec.packing_algorithm": m.packing_algorithm,
            "actor.backend": self.backend,
            "data_parallel_ranks": self.dp,
        }

    def plan(self) -> StepPlan:
        """The step of this split (:class:`~grpo_identity.checks.frameworks.contract.StepPlan`)."""
        m = self.mb_spec
        budget = f", at most {m.max_tokens_per_mb} tokens each" if m.max_tokens_per_mb is not None else ""
        split = (
            f"{self.batch_size} prompts × G per generation batch over {self.dp} data-parallel rank(s) "
            "(TrainController._dispatch_tensors: whole groups, balanced by tokens"
            f"{'; each rank a process' if self.dp > 1 else ''}); on each rank {self.minibatches} mini-batch(es), "
            "one optimizer step each (PPOActor._ppo_update: split_padded_tensor_dict_into_mb_list, the answers dealt "
            "out longest first, so a group's answers spread over steps), each cut by FSDPEngine._prepare_mb_list into "
            "at least "
            f"{m.n_mbs} micro-batch(es){budget} ({m.packing_algorithm})"
        )
        engine = self.backend.partition(":")[0]
        if engine != "fsdp":
            split += f"; FSDPEngine.train_batch stands in for the {engine} engine's"
        return StepPlan(
            self.group_size,
            max(1, self.generation_rows // self.minibatches),
            self.generation_rows,
            split=split,
            unsplit=UNSPLIT,
            settings=self.settings(),
            ranks=self.dp,
            chosen=dict(self.chosen),
            objective=objective(),
            holes=True,
            ragged=True,
        )


def objective() -> dict[str, Any] | None:
    """AReaL has no aggregation setting: every PPO-family config is its engine API's global token mean
    (:data:`grpo_identity.objectives.LOSS_SETTINGS`, which names the GRPO docs' other reading)."""
    from grpo_identity.objectives import objective_of

    found = objective_of("areal", "actor", "ppo")
    return None if found is None else found.for_step()


def _step_split(spec: FrameworkSpec, cfg: Any) -> _Split:
    """The step ``spec`` configures, the driver's defaults where the user set nothing (the batch
    size: the smallest from :data:`DEFAULT_BATCH_SIZE` on that AReaL can split as configured); a split
    AReaL would refuse on the audit's rows is an :class:`AdapterError` naming the setting."""
    from areal.api.alloc_mode import ModelAllocation
    from areal.api.cli_args import MicroBatchSpec

    keys = hydra_keys(spec)
    chosen: list[tuple[str, Any]] = []
    G = int(cfg.gconfig.n_samples)
    if "gconfig.n_samples" not in keys:
        G = STEP_GROUP_SIZE
        chosen.append(("gconfig.n_samples", G))
    a = cfg.actor
    mb_spec, backend = a.mb_spec, a.backend
    if not any(k == s or k.startswith(s + ".") for k in keys for s in SPLIT_KEYS):
        mb_spec, backend = MicroBatchSpec.new(a.mb_spec, n_mbs=DEFAULT_N_MBS), DEFAULT_BACKEND
        chosen += [("actor.mb_spec.n_mbs", DEFAULT_N_MBS), ("actor.backend", DEFAULT_BACKEND)]
    try:
        dp = int(ModelAllocation.from_str(backend, name="actor").parallel.dp_size)
    except Exception as exc:  # AReaL's allocation grammar
        raise AdapterError(f"{_release()} rejects actor.backend={backend}: {exc}") from None
    plan = _Split(G, int(cfg.train_dataset.batch_size), int(a.ppo_n_minibatches), mb_spec, backend, dp)
    refused = _invalid(plan)
    if refused is None and "train_dataset.batch_size" not in keys:
        fits = (b for b in range(DEFAULT_BATCH_SIZE, 10**5) if _splits(replace(plan, batch_size=b), short=1) is None)
        B = next(fits, 0)
        plan = replace(plan, batch_size=B or DEFAULT_BATCH_SIZE)
        chosen.append(("train_dataset.batch_size", plan.batch_size))
    refused = refused or _splits(plan)
    if refused is not None:
        raise AdapterError(f"{_release()}: {refused}")
    return replace(plan, chosen=tuple(chosen))


def _invalid(plan: _Split) -> str | None:
    """A split setting no batch can meet (None: none): a count below 1 (``n_mbs`` and ``max_tokens_per_mb``
    may be unset), or a token budget below the audit's longest sequence (``ffd_allocate`` and
    ``kk_allocate`` refuse a sequence over the budget; ``split_padded_tensor_dict_into_mb_list``
    counts ``granularity`` adjacent sequences as one)."""
    m = plan.mb_spec
    counts = {
        "gconfig.n_samples": plan.group_size,
        "train_dataset.batch_size": plan.batch_size,
        "actor.ppo_n_minibatches": plan.minibatches,
        "actor.mb_spec.n_mbs": m.n_mbs,
        "actor.mb_spec.granularity": m.granularity,
        "actor.mb_spec.max_tokens_per_mb": m.max_tokens_per_mb,
        "actor.mb_spec.n_mbs_divisor": m.n_mbs_divisor,
    }
    for key, value in counts.items():
        if value is not None and value < 1:
            return f"{key}={value}: the split settings count answers, micro-batches or tokens, and must be at least 1"
    longest = PROMPT_LENGTH + RESPONSE_LENGTH
    smallest = m.granularity * longest
    if m.max_tokens_per_mb is not None and m.max_tokens_per_mb < smallest:
        return (
            f"actor.mb_spec.max_tokens_per_mb={m.max_tokens_per_mb} is below the audit's longest sequence "
            f"({PROMPT_LENGTH} prompt + {RESPONSE_LENGTH} response tokens"
            f"{f', times actor.mb_spec.granularity={m.granularity}' if m.granularity > 1 else ''}): "
            f"AReaL's ffd_allocate refuses a sequence over the budget; the smallest value that works is {smallest}"
        )
    return None


def _splits(plan: _Split, short: int = 0) -> str | None:
    """Why AReaL cannot split a generation batch of ``plan``'s whole groups (None: it can), or, with
    ``short``, a batch that many answers short on one rank: ``balanced_greedy_partition`` deals the
    prompts out evenly over the ranks (``The length of nums must be divisible by K``),
    ``split_padded_tensor_dict_into_mb_list`` needs each rank's rows in whole ``granularity`` blocks,
    and ``ffd_allocate`` as many answers per rank as mini-batches and per mini-batch as micro-batches
    (``n_mbs`` rounded up to a multiple of ``n_mbs_divisor``, as ``ffd_allocate`` and ``kk_allocate`` round
    it, and ``allocate_balanced_mbs_synced`` makes every rank take the largest count; with no token budget,
    ``_ffd_allocate`` deals the rows out by count)."""
    m, per_rank = plan.mb_spec, plan.generation_rows // plan.dp
    if plan.batch_size % plan.dp:
        return (
            f"train_dataset.batch_size={plan.batch_size} is not a multiple of the dp={plan.dp} ranks of "
            f"actor.backend={plan.backend}: TrainController._dispatch_tensors deals a batch's prompts out evenly"
        )
    if per_rank % m.granularity:
        return (
            f"actor.mb_spec.granularity={m.granularity} does not divide the {per_rank} answers per rank "
            "(train_dataset.batch_size × gconfig.n_samples / dp): split_padded_tensor_dict_into_mb_list refuses them"
        )
    need = -(-max(m.n_mbs or 0, m.n_mbs_divisor) // m.n_mbs_divisor) * m.n_mbs_divisor
    if (per_rank - short) // plan.minibatches < need:
        return (
            f"{per_rank - short} answers per rank (train_dataset.batch_size × gconfig.n_samples / dp"
            f"{', one answer short' if short else ''}) do not make "
            f"actor.ppo_n_minibatches={plan.minibatches} mini-batches of {need} micro-batches (actor.mb_spec.n_mbs="
            f"{m.n_mbs}, n_mbs_divisor={m.n_mbs_divisor}): AReaL's {m.packing_algorithm}_allocate refuses fewer "
            "answers than groups"
        )
    return None


def _actor_config(actor: Any, plan: _Split, G: int) -> Any:
    """``config.actor`` with the plan's split and each normalisation's group_size = G."""
    a = copy.deepcopy(actor)
    for norm in (a.reward_norm, a.adv_norm):
        if norm is not None:
            norm.group_size = G
    a.ppo_n_minibatches, a.mb_spec, a.backend = plan.minibatches, plan.mb_spec, plan.backend
    return a


def _engine_class() -> Any:
    """``FSDPEngine`` with its model and optimizer stubbed, everything ``train_batch`` does between them
    as AReaL wrote it."""
    import torch
    from areal.engine.fsdp_engine import FSDPEngine, FSDPTrainContext

    class StubbedFSDPEngine(FSDPEngine):
        """The model is ``leaf``, a table of log-probabilities (row: the answer whose token ids are its
        marker, column: the position); ``optimizer_step`` records the gradient the micro-batches
        accumulated in it and the rows of each micro-batch."""

        def __init__(self, config: Any, dp: int, leaf: Any) -> None:  # FSDPEngine.__init__ builds the model
            from types import SimpleNamespace

            self.config, self.enable_tree_training, self.leaf = config, False, leaf
            self.model_config = SimpleNamespace(model_type="grpo-identity")
            self.parallel_helper = SimpleNamespace(dp_size=dp, tp_size=1, sp_size=1)
            self.dp_group, self.device, self.logger = None, torch.device("cpu"), _actor_module().logger
            self.steps: list[tuple[Any, list[list[int]]]] = []
            self._micro: list[list[int]] = []

        def _ensure_ready(self) -> None:
            pass

        def train(self, mode: bool = True) -> Any:
            return self

        def get_version(self) -> int:
            return 0

        def optimizer_zero_grad(self) -> None:
            self.leaf.grad = None

        def optimizer_step(self) -> dict[str, float]:
            grad = self.leaf.grad if self.leaf.grad is not None else torch.zeros_like(self.leaf)
            self.steps.append((grad.detach().clone(), self._micro))
            self._micro = []
            return {}

        def _compute_logprobs_entropy(self, logits: Any, inputs: Any, ulysses_pad_size: int = 0) -> Any:
            return logits, torch.zeros_like(logits.detach())

        def _get_vocab_min_max_logits(self, logits: Any, ulysses_pad_size: int = 0) -> Any:
            zero = torch.zeros_like(logits.detach())
            return zero, zero

        def forward_backward_batch(self, mb_list: Any, process_output_fn: Any, forward_only: bool = False) -> None:
            """The loop of ``FSDPEngine.forward_backward_batch``: each packed, padded micro-batch's
            log-probabilities (looked up in ``leaf``), ``process_output_fn``, ``loss.backward()``."""
            for item in mb_list:
                rows = item.padded_mb["input_ids"].reshape(-1).long() - 1  # pad tokens are 0: row -1
                cols = item.padded_mb["position_ids"].reshape(-1).long()
                live = rows >= 0
                cols = torch.where(live, cols, 0)  # pad positions run on past a row's width
                logp = torch.where(live, self.leaf[rows.clamp(min=0), cols], torch.zeros(()))
                self._micro.append(sorted(set(rows[live].tolist())))
                ctx = FSDPTrainContext(
                    model_inputs=item.padded_mb, mb_input=item.orig_mb, pad_length=item.padding_length
                )
                loss = process_output_fn(logp, ctx.to_dict())
                if not forward_only and loss is not None:
                    loss.backward()

    return StubbedFSDPEngine


def _group_items(
    rewards: np.ndarray, lengths: np.ndarray, sizes: list[int], holes: list[int], prox: bool
) -> list[dict[str, Any]]:
    """One dict per prompt as ``GroupedRolloutWorkflow.arun_episode`` returns it: its answers
    (``sizes[g]`` of them) concatenated; each answer's token ids are 1 + its row."""
    from areal.utils.data import concat_padded_tensors

    if sum(sizes) != len(rewards):
        raise ValueError(f"group sizes {sizes} do not add up to the {len(rewards)} rows")
    rows = [_trajectory(r, ell, prox, i + 1, h) for i, (r, ell, h) in enumerate(zip(rewards, lengths, holes))]
    bounds = np.cumsum([0, *sizes])
    return [concat_padded_tensors(rows[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def _rank_actors(actor_cfg: Any, dp: int, engine: Any, n: int) -> list[Any]:
    """One ``PPOActor`` per rank, each on its own stubbed engine (a table of ``n`` answers' log-probabilities)."""
    import torch

    module = _actor_module()
    width = PROMPT_LENGTH + RESPONSE_LENGTH
    return [
        module.PPOActor(actor_cfg, engine(actor_cfg, dp, torch.zeros(n, width, requires_grad=True))) for _ in range(dp)
    ]


def _advantages_on(ranks: ProcessRanks, actors: list[Any], items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``PPOActorController.compute_advantages``: the groups dispatched over the ranks
    (``_dispatch_tensors``), ``compute_advantages`` on each rank, merged back (``_merge_tensors``)."""
    from areal.infra.controller.train_controller import _dispatch_tensors, _merge_tensors

    shards, where = _dispatch_tensors(items, ranks.size)
    return _merge_tensors(ranks.run(lambda r: actors[r].compute_advantages(shards[r])), where)


def _run_generation(items: list[dict[str, Any]], actor_cfg: Any, dp: int, engine: Any, n: int) -> tuple[list, list]:
    """One generation batch as ``PPOTrainer.train`` runs it in the single-controller mode:
    dispatch, ``compute_advantages`` per rank, merge, dispatch, ``ppo_update`` per rank.  Returns
    the advantages' items (in the rollout's order) and each rank's engine."""
    from areal.infra.controller.train_controller import _dispatch_tensors

    ranks, actors = ProcessRanks(dp), _rank_actors(actor_cfg, dp, engine, n)
    adv = _advantages_on(ranks, actors, items)
    shards, _ = _dispatch_tensors(adv, dp)
    _updated(ranks, actors, lambda r: actors[r].ppo_update(shards[r]))
    return adv, [a.engine for a in actors]


def _updated(ranks: ProcessRanks, actors: list[Any], update: Callable[[int], Any]) -> None:
    """``update(rank)`` in every rank's process; each engine's recorded optimizer steps brought back."""

    def body(rank: int) -> list[tuple[Any, list[list[int]]]]:
        update(rank)
        return actors[rank].engine.steps

    for actor, recorded in zip(actors, ranks.run(body)):
        actor.engine.steps = recorded


def _answers(items: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Each answer of the groups' items as an item of its own (batch dim 1), by its row."""
    answers = {}
    for item in items:
        size = item["input_ids"].shape[0]
        for j in range(size):
            answer = {k: v[j : j + 1] if getattr(v, "shape", ())[:1] == (size,) else v for k, v in item.items()}
            answers[int(answer["input_ids"][0, 0]) - 1] = answer
    return answers


def _run_unsplit(
    items: list[dict[str, Any]], actor_cfg: Any, engine: Any, n: int, steps: list[list[int]]
) -> tuple[list, list]:
    """One generation batch in the unsplit layout: the advantages on one rank, then each of ``steps``
    (the rows of one of the split layout's optimizer steps) one ``ppo_update`` of those answers on one
    rank (``actor_cfg``: one mini-batch of one micro-batch).  Returns the advantages' items and the engine."""
    ranks, (actor,) = ProcessRanks(1), _rank_actors(actor_cfg, 1, engine, n)
    adv = _advantages_on(ranks, [actor], items)
    answers = _answers(adv)
    updates = [[answers[i] for i in rows] for rows in steps]
    _updated(ranks, [actor], lambda r: [actor.ppo_update(update) for update in updates])
    return adv, [actor.engine]


def _response(row: Any) -> np.ndarray:
    """A row of the actor's rolled layout (position t holds the token at t + 1) as the answer's T tokens."""
    x = row.detach().double().numpy()[PROMPT_LENGTH - 1 : PROMPT_LENGTH - 1 + RESPONSE_LENGTH]
    return np.pad(x, (0, RESPONSE_LENGTH - x.size))


class _StepRecord:
    """The step request's answer, filled generation batch by generation batch; a row no optimizer step
    held keeps step -1 and zero coefficients."""

    def __init__(self, n: int) -> None:
        self.advantages = np.zeros(n)
        self.coefficients, self.mask = np.zeros((n, RESPONSE_LENGTH)), np.zeros((n, RESPONSE_LENGTH))
        self.where = {k: np.full(n, -1, dtype=np.int64) for k in ("step", "rank", "micro_batch", "generation")}

    def read_advantages(self, items: list[dict[str, Any]], generation: int) -> None:
        for item in items:
            for ids, adv, mask in zip(item["input_ids"], item["advantages"], item["loss_mask"]):
                i, m = int(ids[0]) - 1, mask.bool()
                self.advantages[i] = float(adv[m].double().mean()) if m.any() else 0.0
                self.mask[i], self.where["generation"][i] = _response(mask), generation

    def read_steps(self, engines: list[Any], ids: list[int]) -> None:
        """Each rank's optimizer steps, the k-th as step ``ids[k]`` of the call; the gradient averaged over
        the ranks (FSDP's reduce-scatter averages: each row is on one rank, 1/dp of its rank's gradient)."""
        for rank, engine in enumerate(engines):
            for step, (grad, micro) in zip(ids, engine.steps):
                for m, rows in enumerate(micro):
                    for i in rows:
                        if self.where["step"][i] >= 0:
                            raise RuntimeError(f"row {i} was trained in two micro-batches")
                        self.where["step"][i], self.where["rank"][i], self.where["micro_batch"][i] = step, rank, m
                        self.coefficients[i] = -_response(grad[i]) / len(engines)

    def steps_of(self, rows: list[int], extra: int) -> list[tuple[int, list[int]]]:
        """The optimizer steps that hold ``rows``, each (its id, its rows in rank order), in step order;
        then the rows no step held as step ``extra`` (the unsplit layout trains what the split left out)."""
        held = sorted((tuple(int(self.where[k][i]) for k in ("step", "rank", "micro_batch")), i) for i in rows)
        steps: dict[int, list[int]] = {}
        for (step, _, _), i in held:
            steps.setdefault(step, []).append(i)
        left = steps.pop(-1, [])
        return list(steps.items()) + ([(extra, left)] if left else [])

    def result(self) -> dict[str, np.ndarray]:
        return {"advantages": self.advantages, "coefficients": self.coefficients, "mask": self.mask, **self.where}


def _run_step(
    cfg: Any, plan: _Split, engine: Any, rewards: np.ndarray, G: int, lengths: np.ndarray, request: dict[str, Any]
) -> dict[str, np.ndarray]:
    """A step request (:mod:`grpo_identity.checks.measure.steps`): the rows in groups of ``request["sizes"]``
    (as the rollout delivers them), ``plan.batch_size`` groups per generation batch, each through
    :func:`_run_generation` under the configured split; for the unsplit layout, each optimizer step of
    that split again through :func:`_run_unsplit` (the same answers, one micro-batch on one rank)."""
    n = len(rewards)
    sizes = [int(s) for s in request.get("sizes") or [G] * (n // G)]
    holes = [int(h) for h in request.get("holes") or [0] * n]
    actor_cfg = _actor_config(cfg.actor, plan, G)
    items = _group_items(rewards, lengths, sizes, holes, bool(actor_cfg.should_compute_prox_logp()))
    batches = [items[start : start + plan.batch_size] for start in range(0, len(items), plan.batch_size)]
    split = _StepRecord(n)
    for generation, batch in enumerate(batches):
        adv, engines = _split_generation(batch, actor_cfg, plan, engine, n)
        split.read_advantages(adv, generation)
        first = int(split.where["step"].max()) + 1
        split.read_steps(engines, list(range(first, first + max(len(e.steps) for e in engines))))
    if request.get("layout", "split") == "split":
        return split.result()
    unsplit, one = _StepRecord(n), _actor_config(cfg.actor, plan.unsplit(), G)
    extra = int(split.where["step"].max()) + 1  # past the split's steps: the rows it left out, per batch
    for generation, batch in enumerate(batches):
        steps = split.steps_of(list(_answers(batch)), extra + generation)
        adv, engines = _run_unsplit(batch, one, engine, n, [rows for _, rows in steps])
        unsplit.read_advantages(adv, generation)
        unsplit.read_steps(engines, [step for step, _ in steps])
    return unsplit.result()


def _split_generation(
    batch: list[dict[str, Any]], actor_cfg: Any, plan: _Split, engine: Any, n: int
) -> tuple[list, list]:
    """:func:`_run_generation` under ``plan``; AReaL's packing refusing the split is an :class:`AdapterError`."""
    try:
        return _run_generation(batch, actor_cfg, plan.dp, engine, n)
    except (RuntimeError, ValueError) as exc:
        if "seqpack" not in _origin(exc):
            raise
        raise AdapterError(f"{_release()} cannot split the step as configured ({plan.settings()}): {exc}") from None


def _origin(exc: BaseException) -> str:
    """The file of the innermost frame that raised ``exc`` (in a rank's process, or here)."""
    frames = getattr(exc, "rank_frames", None)
    if frames:
        return str(frames[-1][0])
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_filename if tb is not None else ""


def _norm(norm: Any) -> dict[str, Any] | None:
    if norm is None:
        return None
    keys = ("mean_level", "mean_leave1out", "std_level", "std_unbiased", "eps")
    return {k: getattr(norm, k, None) for k in keys}


def _info(spec: FrameworkSpec, cfg: Any, entry: str) -> DriverInfo:
    a = cfg.actor
    details = {
        "reward_norm": _norm(a.reward_norm),
        "adv_norm": _norm(a.adv_norm),
        "reward_scaling": a.reward_scaling,
        "reward_bias": a.reward_bias,
        "reward_clip": a.reward_clip,
        "group_size": "each probe batch's G (NormConfig.group_size)",
    }
    return DriverInfo("areal", version("areal"), entry, dict(spec.sets), details=details)
