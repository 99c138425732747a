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
- the optimizer step (:mod:`grpo_identity.checks.measure.steps`): the trainer's own step path on each
  generation batch, ``RayPPOTrainer._balance_batch``, ``compute_advantage`` and ``_update_actor``,
  then on each data-parallel rank the actor worker's own split into optimizer steps and
  micro-batches, its loss scaling and accumulation: the legacy FSDP worker's
  ``DataParallelPPOActor.update_policy`` (0.6; 0.7's default) or the engine worker's
  ``TrainingWorker.train_mini_batch`` (0.7 with ``trainer.use_legacy_worker_impl=disable``; 0.9's
  only one); each rank a process of its own in one gloo group (torch's own collectives), the gradient
  averaged over them as FSDP averages it (:func:`step_run`).  The unsplit layout runs the
  same optimizer steps, each handed alone to one rank as one micro-batch.  Refused when the target is
  built: sequence parallelism, a split setting below 1, a split verl's own checks reject
  (:func:`step_split`);
- ``verl:estimator=NAME``: the ``core_algos`` estimator function alone (bypasses the trainer).
"""

from __future__ import annotations

import contextlib
import io
import math
import sys
import uuid
import warnings
from dataclasses import dataclass, field, replace
from importlib.metadata import version
from typing import Any, Callable, Iterator

import numpy as np

from grpo_identity.checks.calls.calling import advantage_per_answer
from grpo_identity.checks.frameworks import (
    PROMPT_LENGTH,
    RESPONSE_LENGTH,
    STEP_GROUP_SIZE,
    AdapterError,
    FrameworkSpec,
    hydra_keys,
    lengths_for,
    token_view,
    whole_number,
)
from grpo_identity.checks.frameworks._ranks import ProcessRanks
from grpo_identity.checks.frameworks.contract import Built, Difference, DriverInfo, StepPlan
from grpo_identity.checks.frameworks.exported.verl import (
    MARK,
    Recorder,
    balance,
    chunks,
    compose_config,
    cpu_platform,
    engine_path,
    engine_rank,
    legacy_rank,
    plain_attention,
    rollout,
    step_config,
    trainer_advantage,
    update_actor,
)

__all__ = [
    "DIFFERENCES",
    "import_check",
    "compose",
    "build",
    "VerlTarget",
    "VerlEstimator",
    "lengths_for",
    "StepSplit",
    "step_split",
    "step_run",
]

#: how verl's releases differ where the driver reads their code (:class:`~.contract.Difference`)
DIFFERENCES = {
    "dispatch": Difference(
        "verl.trainer.ppo.ray_trainer:compute_advantage",
        "0.1",
        "the trainer's advantage dispatch: the driver's advantage path",
    ),
    "actor_config": Difference(
        "verl.workers.config.actor:ActorConfig",
        "0.6.0",
        "the actor's dataclass config the policy loss and the workers read: the driver's gradient path (--level "
        "advantage audits older releases)",
    ),
    "global_batch": Difference(
        "verl.workers.config.actor:ActorConfig.global_batch_info",
        "0.7.0",
        "agg_loss normalises over the global batch, whose size and tokens the driver gives for its one rank",
    ),
    "rollout_correction": Difference(
        "verl.trainer.ppo.rollout_corr_helper:compute_rollout_correction_and_add_to_batch",
        "0.7.0",
        "the rollout correction (algorithm.rollout_correction) the fit loop applies to a batch with rollout "
        "log-probabilities: the three-policy probe's path",
    ),
}

#: settings every verl run must give (the actor's micro-batch size has no default); the user's
#: ``--set`` come after and win
DRIVER_SETS = (("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "1"),)


def import_check() -> None:
    """Import what the driver needs (a release environment's smoke test)."""
    import importlib

    importlib.import_module("verl.trainer.ppo.core_algos")
    importlib.import_module("grpo_identity.checks.calls.target")


def compose(spec: FrameworkSpec) -> Any:
    """verl's trainer config with the user's overrides (and YAML file), as its Hydra app builds it."""
    from omegaconf import OmegaConf

    overrides = [f"{k}={v}" for k, v in (*DRIVER_SETS, *spec.sets)]
    try:
        cfg = compose_config(overrides, spec.config)
    except Exception as exc:  # Hydra's override grammar, an unknown key, a bad YAML file
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise AdapterError(f"verl {version('verl')} rejects the config ({spec.describe()}): {msg}") from None
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
    DIFFERENCES["dispatch"].require(f"verl {version('verl')}")
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
    ray_trainer: Any,
    cfg: Any,
    rewards: np.ndarray,
    G: int,
    lengths: np.ndarray,
    before: Callable[[Any, np.ndarray], Any] | None = None,
) -> tuple[np.ndarray, Any, np.ndarray]:
    """Per-row advantages the trainer's dispatch computes, in the caller's row order; also the
    token advantages and the mask in batch order, and the order.  ``before(batch, order)``: what the fit loop does
    to the batch before its advantages (the rollout correction), returning the batch."""
    data, order = _batch(rewards, G, lengths)
    if before is not None:
        data = before(data, order)
    data = trainer_advantage(ray_trainer, cfg.algorithm, data, G)
    out = np.empty(len(rewards), dtype=np.float64)
    out[order] = data.batch["advantages"][:, 0].detach().numpy()
    return out, data, order


def build(spec: FrameworkSpec, level: str) -> Built:
    """The target of ``spec`` at ``level`` (:mod:`.contract`): the estimator function alone where the spec names
    one, else the trainer's dispatch (and, at the gradient level, the actor's loss and step)."""
    with _without_iri_grammar():
        return VerlEstimator(spec) if spec.estimator is not None else VerlTarget(spec, level)


@contextlib.contextmanager
def _without_iri_grammar() -> Iterator[None]:
    """verl imports ray, ray imports jsonschema, and jsonschema imports its IRI-format checker ``rfc3987_syntax``
    where it is installed (by a pip install, beside Jupyter; not by the lock, nor in a release's environment),
    which builds a grammar on import: 1.7 s of a cold audit.  While verl is first imported it is held out:
    jsonschema tries it under ``suppress(ImportError)`` and leaves the ``iri`` formats unchecked, which neither ray
    nor verl asks for (they pass no format checker).  It is put back after, for whatever imports it later."""
    name = "rfc3987_syntax"
    held = name not in sys.modules
    if held:
        sys.modules[name] = None  # type: ignore[assignment]  # an import of it raises ImportError
    try:
        yield
    finally:
        if held and name in sys.modules and sys.modules[name] is None:
            del sys.modules[name]


class VerlTarget(Built):
    """verl's trainer from ``spec``'s config.  Advantages: ``ray_trainer.compute_advantage`` (the trainer's
    dispatch).  Gradient: −∂loss/∂log π per response token (autograd through the actor's policy loss and
    ``agg_loss``), rows in the caller's order; a step request (:mod:`grpo_identity.checks.measure.steps`) runs the
    optimizer steps of the actor worker as configured or unsplit (:func:`step_run`)."""

    def __init__(self, spec: FrameworkSpec, level: str) -> None:
        self.cfg = compose(spec)
        self.ray_trainer = _trainer_module()
        info = _info(spec, self.cfg, "ray_trainer.compute_advantage (the trainer's dispatch)")
        if level == "gradient":
            info = self._loss(spec, info)
        super().__init__(info, level)

    def _loss(self, spec: FrameworkSpec, info: DriverInfo) -> DriverInfo:
        DIFFERENCES["actor_config"].require(f"verl {version('verl')}")  # before importing what older ones lack
        from verl.trainer.ppo.core_algos import get_policy_loss_fn
        from verl.utils.config import omega_conf_to_dataclass

        self.split = split = step_split(spec, self.cfg)
        try:
            self.actor = actor = omega_conf_to_dataclass(self.cfg.actor_rollout_ref.actor)
        except Exception as exc:
            raise AdapterError(
                f"verl {version('verl')} rejects the actor config ({spec.describe()}): {str(exc).splitlines()[-1]}"
            ) from None
        self.loss_fn = get_policy_loss_fn(actor.policy_loss.get("loss_mode", "vanilla"))
        details = {
            **info.details,
            "loss_agg_mode": str(actor.loss_agg_mode),
            "loss_mode": str(actor.policy_loss.get("loss_mode", "vanilla")),
        }
        return info.with_step(
            split.plan(spec, self.cfg),
            entry="ray_trainer.compute_advantage + core_algos policy loss (agg_loss)",
            details=details,
            lengths_optional=True,
            rollout_correction=rollout_settings(self.cfg),
        )

    def advantages(self, rewards: np.ndarray, G: int, scores: Any = None) -> np.ndarray:
        return _advantages(self.ray_trainer, self.cfg, rewards, G, lengths_for(len(rewards)))[0]

    def step(self, rewards: np.ndarray, G: int, lengths: np.ndarray, request: dict[str, Any]) -> dict[str, Any]:
        return step_run(self.cfg, self.split, rewards, G, lengths, request)

    def gradient(self, rewards: np.ndarray, G: int, lengths: np.ndarray) -> dict[str, Any]:
        import torch

        adv, data, order = _advantages(self.ray_trainer, self.cfg, rewards, G, lengths)
        old = torch.full(data.batch["response_mask"].shape, -1.0)  # (bs, T); on-policy: old = current
        return {"advantages": adv, **self._loss_gradient(data, old, order)}

    def three_policy(self, rewards: np.ndarray, G: int, lengths: np.ndarray, rollout: dict[str, Any]) -> dict[str, Any]:
        """The policy loss given rollout log-probabilities log μ = log π_old − X (``rollout``: ``log_ratio`` X, or None
        for none; ``correct``), after ``compute_rollout_correction_and_add_to_batch`` as the fit loop runs it (only
        where the batch holds rollout log-probabilities, as there): its IS weights and rejection mask."""
        import torch

        if self.driver_info.rollout_correction is None:
            raise NotImplementedError("verl: the config sets no rollout correction (algorithm.rollout_correction)")
        held: dict[str, Any] = {}

        def correct(data: Any, order: np.ndarray) -> Any:  # the fit loop: the correction, then the advantages
            from grpo_identity.checks.measure.rollout import seeded_old_logps

            mask = data.batch["response_mask"]
            seeded = torch.as_tensor(seeded_old_logps(tuple(mask.shape)), dtype=torch.float32)
            held["old"], held["mask"] = seeded * mask, mask.clone()
            x = rollout.get("log_ratio")
            if x is None or not rollout.get("correct"):  # no rollout log-probabilities: the fit loop skips it
                return data
            from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch

            shift = torch.as_tensor(np.asarray(x, dtype=np.float64)[order], dtype=torch.float32) * mask
            data.batch["old_log_probs"], data.batch["rollout_log_probs"] = held["old"], held["old"] - shift
            with contextlib.redirect_stdout(io.StringIO()):
                data, _ = compute_rollout_correction_and_add_to_batch(data, self.cfg.algorithm.rollout_correction)
            return data

        adv, data, order = _advantages(self.ray_trainer, self.cfg, rewards, G, lengths, before=correct)
        old, mask = held["old"], held["mask"]
        weights = data.batch["rollout_is_weights"] if "rollout_is_weights" in data.batch.keys() else None
        got = self._loss_gradient(data, old, order, weights)
        m = np.empty(mask.shape)
        m[order] = mask.double().numpy()  # the probe's live tokens: before any rejection
        old_out = np.empty(mask.shape)
        old_out[order] = old.double().numpy()
        return {"advantages": adv, **got, "mask": m, "old_logps": old_out}

    def _loss_gradient(self, data: Any, old: Any, order: np.ndarray, weights: Any = None) -> dict[str, Any]:
        """−∂loss/∂log π per token of the actor's policy loss at log π = ``old`` (ρ = 1), with ``weights`` as its
        ``rollout_is_weights``, and the mask, in the caller's row order."""
        import torch

        actor = self.actor
        mask = data.batch["response_mask"]
        log_prob = old.clone().requires_grad_(True)
        if DIFFERENCES["global_batch"].present():  # agg_loss over the global batch (one rank here)
            actor.global_batch_info.update(
                {
                    "dp_size": 1,
                    "batch_num_tokens": mask.sum(),
                    "global_batch_size": mask.shape[0],
                    "loss_scale_factor": actor.loss_scale_factor,
                }
            )
        loss, *_ = self.loss_fn(
            old_log_prob=log_prob.detach(),
            log_prob=log_prob,
            advantages=data.batch["advantages"],
            response_mask=mask.bool(),
            loss_agg_mode=actor.loss_agg_mode,
            config=actor,
            rollout_is_weights=weights,
        )
        (grad,) = torch.autograd.grad(loss, log_prob)
        coeff, m = np.empty(mask.shape), np.empty(mask.shape)
        coeff[order], m[order] = -grad.double().numpy(), mask.double().numpy()
        return {"coefficients": coeff, "mask": m}


def rollout_settings(cfg: Any) -> dict[str, Any] | None:
    """``info["rollout_correction"]``: ``algorithm.rollout_correction``'s IS weights as the probe's estimator (the
    product for ``sequence``; IcePop's mask for a ``lower_upper`` threshold), None where it sets none or where the
    release has none; with rejection sampling (``rollout_rs``) or batch normalisation no estimator is documented
    (the probe names what it finds)."""
    rc = cfg.algorithm.get("rollout_correction") if DIFFERENCES["rollout_correction"].present() else None
    if rc is None or not rc.get("rollout_is") or rc.get("bypass_mode"):
        return None
    level, threshold = str(rc.get("rollout_is")), rc.get("rollout_is_threshold", 2.0)
    if threshold is None:  # verl applies no IS weight without a threshold
        return None
    low, _, high = str(threshold).partition("_")
    two_sided = bool(high)
    estimator = f"{level}_{'mask' if two_sided else 'truncate'}"
    plain = not rc.get("rollout_rs") and not rc.get("rollout_is_batch_normalize")
    setting = f"algorithm.rollout_correction: rollout_is={level}, rollout_is_threshold={threshold}"
    if not plain:
        setting += f", rollout_rs={rc.get('rollout_rs')}, batch_normalize={rc.get('rollout_is_batch_normalize')}"
    return {
        "estimator": estimator if plain else None,
        "cap": float(high if two_sided else threshold),
        "low": float(low) if two_sided else 0.0,
        "setting": setting,
    }


def export_recipe(spec: FrameworkSpec, split: StepSplit) -> dict[str, Any]:
    """What an exported test (:mod:`grpo_identity.checks.export`) needs to run the split layout's steps itself
    (:func:`grpo_identity.checks.frameworks.exported.verl.first_step_rows`): the Hydra overrides (no secret), the
    config file's text (no secret), the layout's settings, the probe's sizes, the ranks, the release."""
    from grpo_identity.checks.frameworks import config_text, is_secret

    return {
        "overrides": [f"{k}={v}" for k, v in (*DRIVER_SETS, *spec.sets) if not is_secret(k)],
        "config_text": config_text(spec.config),
        "updates": step_updates(split, split.group_size),
        "prompts": split.prompts,
        "prompt": PROMPT_LENGTH,
        "processes": split.ranks,
        "release": version("verl"),
    }


def _info(spec: FrameworkSpec, cfg: Any, entry: str) -> DriverInfo:
    alg = cfg.algorithm
    details = {
        "estimator": str(alg.adv_estimator),
        "norm_adv_by_std_in_grpo": bool(alg.get("norm_adv_by_std_in_grpo", True)),
    }
    return DriverInfo("verl", version("verl"), entry, dict(spec.sets), details=details)


class VerlEstimator(Built):
    """``core_algos``'s estimator function alone, called with keyword options (bypasses the trainer: its dispatch,
    its config object and its batch layout are not used).  It is called as a user's function is, with the group
    ids as its third argument (its info's ``call`` says so), not a reward-column matrix."""

    third = "ids"

    def __init__(self, spec: FrameworkSpec) -> None:
        from verl.trainer.ppo import core_algos

        try:
            self.est = core_algos.get_adv_estimator_fn(spec.estimator)
        except (ValueError, KeyError) as exc:
            raise AdapterError(f"verl {version('verl')} has no advantage estimator {spec.estimator!r}: {exc}") from None
        self.options = dict(spec.options)
        entry = f"core_algos estimator {spec.estimator!r} called directly: bypasses the trainer"
        details = {"estimator": spec.estimator, "call": _ESTIMATOR_CALL | {"call": f"{spec.estimator}{_CALLED}"}}
        super().__init__(DriverInfo("verl", version("verl"), entry, self.options, details=details), "advantage")

    def advantages(self, rewards: np.ndarray, G: int, ids: Any = None) -> np.ndarray:
        import torch

        n = len(rewards)
        order = np.random.default_rng(n).permutation(n)  # verl groups by uid, not by position
        scores, mask = token_view(rewards)  # unequal lengths, holes, the reward on each answer's last token
        token_rewards = torch.as_tensor(scores[order], dtype=torch.float32)  # (bs, T)
        groups = np.arange(n) // G if ids is None else np.asarray(ids)  # ragged groups come with ids
        index = np.array([f"uid-{groups[i]}" for i in order], dtype=object)
        response_mask = torch.as_tensor(mask[order], dtype=torch.float32)
        adv, _ = self.est(token_level_rewards=token_rewards, response_mask=response_mask, index=index, **self.options)
        out = np.empty(n, dtype=np.float64)
        out[order] = advantage_per_answer(adv.numpy(), mask[order])  # (bs,): one per answer, its tokens agreeing
        return out


#: how the audit calls the estimator function (``target_info["call"]``)
_CALLED = "(token_level_rewards=TR, response_mask=MASK, index=UIDS)"
_ESTIMATOR_CALL = {"input": "torch", "reward_dtype": "float32", "takes_ids": True, "takes_group_size": False}


# --- the optimizer step as the trainer splits it (grpo_identity.checks.measure.steps) --------------------

#: the step probe's split where the user set none of its keys (verl's own defaults, 1024 prompts on
#: 8 GPUs, size a production run): 2 ranks, micro-batches of 2 answers, the token budget
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
_ACTOR = "actor_rollout_ref.actor."
#: the split's keys, as the user writes them (and as the refusals name them)
_PROMPTS, _N = "data.train_batch_size", "actor_rollout_ref.rollout.n"
_MINI, _MICRO = _ACTOR + "ppo_mini_batch_size", _ACTOR + "ppo_micro_batch_size_per_gpu"
_TOKENS, _GPUS, _NODES = _ACTOR + "ppo_max_token_len_per_gpu", "trainer.n_gpus_per_node", "trainer.nnodes"
#: the deprecated global micro-batch size, which ``fsdp_workers`` divides by the data-parallel size
_GLOBAL_MICRO = _ACTOR + "ppo_micro_batch_size"
#: words in the names of the actor's settings that turn on sequence (context) parallelism in the releases
#: audited: ``actor.ulysses_sequence_parallel_size`` (0.6 on), ``actor.fsdp_config.ulysses_sequence_parallel_size``
#: (0.6 on; 0.7's ``FSDPActorConfig`` copies the actor's one there), ``actor.fsdp_config.turbo_config.distributed.
#: ulysses_parallel_size`` (0.9)
_SEQUENCE_PARALLEL = ("ulysses", "sequence_parallel", "context_parallel")


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
    """The split keys the user did not set: the driver's :data:`DEFAULT_SPLIT` values (and ``rollout.n``,
    :data:`~grpo_identity.checks.frameworks.STEP_GROUP_SIZE`)."""

    def whole_steps(self) -> StepSplit:
        """The worker's settings of the unsplit layout: one rank whose micro-batch holds a whole optimizer
        step of this split (``ppo_micro_batch_size_per_gpu`` = the step's answers, no dynamic batches)."""
        return replace(self, micro=self.mini * self.group_size, dynamic=False, ranks=1)

    def chosen(self) -> dict[str, Any]:
        """The split keys the user did not set, with the values the driver took for them."""
        values = {
            _PROMPTS: self.prompts,
            _N: self.group_size,
            _MINI: self.mini,
            _MICRO: self.micro,
            _ACTOR + "use_dynamic_bsz": self.dynamic,
            _TOKENS: self.max_tokens,
        }
        return {k: values.get(k, DEFAULT_SPLIT.get(k)) for k in self.defaults}

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
            f"{self.ranks} data-parallel rank(s)" + (", each a process" if self.ranks > 1 else "")
        )

    def plan(self, spec: FrameworkSpec, cfg: Any) -> StepPlan:
        """The step of this split (:class:`~grpo_identity.checks.frameworks.contract.StepPlan`)."""
        G = self.group_size
        engine = engine_path(cfg)
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
            "worker": _ENGINE_WORKER if engine else _LEGACY_WORKER,
            "trainer": _TRAINER_PATH + (_V1_NOTE if "use_v1" in cfg.trainer and cfg.trainer.use_v1 else ""),
            "stand-ins": _ENGINE_STAND_INS if engine else _LEGACY_STAND_INS,
        }
        return StepPlan(
            G,
            self.mini * G,
            self.prompts * G,
            split=self.describe(),
            unsplit="the same optimizer steps (each one the answers the split's ranks take for it: the dispatch's "
            "chunk per rank, each rank's mini-batch), each as one micro-batch holding all its answers on one GPU "
            "(ppo_micro_batch_size_per_gpu = the step's answers, use_dynamic_bsz off)",
            settings=settings,
            ranks=self.ranks,
            chosen=self.chosen(),
            objective=objective(cfg.actor_rollout_ref.actor),
            holes=True,
            export=export_recipe(spec, self),
        )


def objective(actor: Any) -> dict[str, Any] | None:
    """The documented objective of ``actor.loss_agg_mode`` (:data:`grpo_identity.objectives.LOSS_SETTINGS`), its
    constant the documented one: ``loss_scale_factor`` where set, else the batch's response length (the probe's
    responses are padded to :data:`~grpo_identity.checks.frameworks.RESPONSE_LENGTH`)."""
    from grpo_identity.objectives import objective_of

    found = objective_of("verl", "actor.loss_agg_mode", str(actor.loss_agg_mode))
    if found is None:
        return None
    factor = actor.get("loss_scale_factor", None) if hasattr(actor, "get") else None
    return found.for_step(float(factor) if factor not in (None, "null") else RESPONSE_LENGTH)


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
_RANKS = (
    "ranks: one process per rank (forked from the audit's), one torch.distributed gloo group whose collectives "
    "(verl's token counts and gathers) are torch's own; the FSDP model's gradient all-reduce is stood in: each "
    "rank's gradient divided by the number of ranks, as FSDP averages it"
)
_LEGACY_STAND_INS = (
    "model and FSDP: a one-parameter module and SGD at lr 0 (_optimizer_step runs: clip_grad_norm_, step); "
    "_forward_micro_batch: the probe's log-probabilities; " + _RANKS
)
_ENGINE_STAND_INS = (
    "FSDPEngineWithLMHead: the model forward gives the probe's log-probabilities (then ppo_loss as forward_step "
    "calls it), a one-parameter module and SGD at lr 0, train_mode without offload; "
    "TrainingWorker._postprocess_output (metrics: CUDA memory, MFU) returns none; verl 0.9's "
    "plugin.platform (no CPU platform) answers 'cpu' while the step runs; verl 0.7's utils.attention_utils "
    "(flash_attn.bert_padding, not installed) answers with plain-torch unpadding while the step runs; " + _RANKS
)


def _leaf_keys(node: Any, prefix: str = "") -> list[str]:
    """The dotted keys of a nested dict's leaves."""
    keys = []
    for key, value in node.items():
        keys += _leaf_keys(value, f"{prefix}{key}.") if isinstance(value, dict) else [f"{prefix}{key}"]
    return keys


def step_split(spec: FrameworkSpec, cfg: Any) -> StepSplit:
    """The configured step: each split key the user set, :data:`DEFAULT_SPLIT` for the others (the
    group size :data:`~grpo_identity.checks.frameworks.STEP_GROUP_SIZE` unless ``rollout.n`` was set); a
    global ``ppo_micro_batch_size`` is divided by the ranks as ``fsdp_workers`` normalises it.  Refused
    here, when the target is built: sequence parallelism (:func:`_refuse_sequence_parallel`), a setting
    below 1, and a split verl's own checks reject (:func:`_split_problem`)."""
    from omegaconf import OmegaConf

    _refuse_sequence_parallel(cfg)
    user = hydra_keys(spec)
    refused = f"verl {version('verl')} rejects the split ({spec.describe()})"

    def count(key: str) -> int:
        return whole_number(
            OmegaConf.select(cfg, key) if key in user else DEFAULT_SPLIT[key], key, who=refused, text=False
        )

    ranks = count(_GPUS) * count(_NODES)
    G = count(_N) if _N in user else STEP_GROUP_SIZE
    dynamic_key = _ACTOR + "use_dynamic_bsz"
    dynamic = bool(OmegaConf.select(cfg, dynamic_key)) if dynamic_key in user else DEFAULT_SPLIT[dynamic_key]
    unset = dynamic and _MICRO in user and OmegaConf.select(cfg, _MICRO) is None  # verl's way under dynamic bsz
    micro = DEFAULT_SPLIT[_MICRO] if unset else count(_MICRO)
    if _GLOBAL_MICRO in user and _MICRO not in user:
        micro = count(_GLOBAL_MICRO) // ranks
        if micro < 1:
            raise AdapterError(
                f"{refused}: {_GLOBAL_MICRO}={count(_GLOBAL_MICRO)} ÷ {ranks} ranks leaves micro-batches of 0 answers "
                f"per GPU (fsdp_workers' normalisation; ActorConfig.validate asks ppo_micro_batch_size >= n_gpus): "
                f"set {_GLOBAL_MICRO}={ranks}"
            )
    prompts = count(_PROMPTS) if _PROMPTS in user else None
    mini = count(_MINI) if _MINI in user else _fewest_prompts(G, ranks, micro, prompts)
    split = StepSplit(
        prompts=2 * mini if prompts is None else prompts,
        mini=mini,
        micro=micro,
        dynamic=dynamic,
        max_tokens=count(_TOKENS),
        ranks=ranks,
        group_size=G,
        defaults=tuple(k for k in (*DEFAULT_SPLIT, _N) if k not in user),
    )
    problem = _split_problem(split, engine_path(cfg))
    if problem:
        mine = [key for key in split.defaults if f"{key}=" in problem]
        note = f" ({', '.join(mine)}: the driver's default, not set by you)" if mine else ""
        raise AdapterError(f"{refused}: {problem}{note}")
    return split


def _refuse_sequence_parallel(cfg: Any) -> None:
    """Sequence parallelism (Ulysses) splits each sequence over several GPUs and divides the data-parallel
    size by their number (``fsdp_workers``: ``dp = world_size // ulysses_sequence_parallel_size``), in a
    model forward the probe does not run: any setting of the actor's that turns it on (:data:`_SEQUENCE_PARALLEL`)
    is refused.  The reference policy's own setting only changes its log-probabilities, which the probe
    holds fixed."""
    from omegaconf import OmegaConf

    actor = OmegaConf.to_container(cfg.actor_rollout_ref.actor, resolve=False)
    for key in _leaf_keys(actor, _ACTOR):
        if not any(word in key.rsplit(".", 1)[-1] for word in _SEQUENCE_PARALLEL):
            continue
        value = OmegaConf.select(cfg, key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 1:
            raise AdapterError(
                f"verl {version('verl')}: {key}={value} turns on sequence parallelism, which the driver does not "
                f"emulate: set {key}=1"
            )


def _split_problem(s: StepSplit, engine: bool) -> str | None:
    """What verl's own checks refuse in this split, with the value that fixes it, or None: ``utils.config.
    validate_config`` (real_train_batch_size % n_gpus), ``ActorConfig.validate`` (train_batch_size ≥
    ppo_mini_batch_size), and the worker's: the legacy ``fsdp_workers`` normalisation (ppo_mini_batch_size ×
    rollout.n ÷ ranks, > 0 and divisible by ppo_micro_batch_size_per_gpu), the engine's ``TrainingWorker.
    train_mini_batch`` (mini_batch_size % dp size), ``tu.make_iterator`` (a rank's answers in whole mini-batches)
    and ``prepare_micro_batches`` (a mini-batch in whole micro-batches); under dynamic batches
    ``rearrange_micro_batches`` (max_token_len ≥ the probe's sequence length)."""
    G, R, P, M = s.group_size, s.ranks, s.prompts, s.mini
    rows, odd = M * G // R, R // math.gcd(G, R)  # answers per rank per step; prompts come in multiples of odd
    where = "prepare_micro_batches" if engine else "fsdp_workers' normalisation"
    if (P * G) % R:
        return (
            f"{_PROMPTS}={P} × {_N}={G} = {P * G} answers do not cut into equal chunks for {R} data-parallel ranks "
            f"({_GPUS} × {_NODES}; validate_config: real_train_batch_size % n_gpus): set {_PROMPTS}={_up(P, odd)}"
        )
    if not s.dynamic and P < M:
        return f"{_PROMPTS}={P} is below {_MINI}={M} (ActorConfig.validate): set {_MINI}={P}"
    if engine and (M * G) % R:
        return (
            f"{_MINI}={M} × {_N}={G} = {M * G} answers per optimizer step do not split evenly over {R} ranks "
            f"(TrainingWorker.train_mini_batch: mini_batch_size % dp size): set {_MINI}={_up(M, odd)}"
        )
    if engine and P % M:
        return (
            f"{_PROMPTS}={P} is not a multiple of {_MINI}={M}: a rank's {P * G // R} answers do not cut into "
            f"mini-batches of {rows} (tu.make_iterator): set {_PROMPTS}={_up(P, M)}"
        )
    if rows < 1:
        return (
            f"normalized ppo_mini_batch_size {rows} should be larger than 0 ({_MINI}={M} × {_N}={G} ÷ {R} ranks, "
            f"fsdp_workers' normalisation): set {_MINI}={_up(R, G) // G}"
        )
    if not s.dynamic and rows % s.micro:
        fix = max(d for d in range(1, s.micro + 1) if rows % d == 0)
        return (
            f"normalized ppo_mini_batch_size {rows} ({_MINI}={M} × {_N}={G} ÷ {R} ranks) should be divisible by "
            f"ppo_micro_batch_size_per_gpu {s.micro} ({where}): set {_MICRO}={fix}"
        )
    longest = PROMPT_LENGTH + RESPONSE_LENGTH
    if s.dynamic and s.max_tokens < longest:
        return (
            f"{_TOKENS}={s.max_tokens} is below the probe's sequences ({longest} tokens, prompt included; "
            f"rearrange_micro_batches: max_token_len >= the sequence length): set {_TOKENS}={longest}"
        )
    return None


def _up(value: int, base: int) -> int:
    """The smallest multiple of ``base`` that is ``value`` or more."""
    return -(-value // base) * base


def _fewest_prompts(G: int, ranks: int, micro: int, prompts: int | None = None) -> int:
    """The fewest prompts per optimizer step that give every rank two or more whole micro-batches (one or
    more where none gives two), dividing the generation batch's ``prompts`` where the user set them."""
    limit = prompts or 2 * ranks * micro
    fits = [m for m in range(1, limit + 1) if (m * G) % (ranks * micro) == 0 and (prompts or m) % m == 0]
    two = [m for m in fits if m * G >= 2 * ranks * micro]
    return (two or fits or [limit])[0]


def step_updates(split: StepSplit, G: int) -> dict[str, Any]:
    """The trainer config's settings for the layout ``split``: its sizes, G answers per prompt, one PPO epoch."""
    return {
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


def step_run(
    cfg: Any, split: StepSplit, rewards: np.ndarray, G: int, lengths: np.ndarray, request: dict[str, Any]
) -> dict[str, np.ndarray]:
    """The rows as the trainer runs them, one generation batch (``split.prompts`` groups) after the
    other: balanced over the split's ranks, advantages computed, then the actor updated: on the ranks (one
    process each) as split (layout ``split``), or each optimizer step of that split (:func:`_step_positions`)
    handed alone to one rank whose one micro-batch holds it (layout ``unsplit``).  Per row, in the
    caller's order: its advantage, its token coefficients (−∂loss/∂log π summed over the micro-batches of
    its optimizer step and averaged over the ranks), its mask, step, rank and micro-batch (step -1: a row
    of a last, partial generation batch, which the trainer's dataloader drops, ``drop_last=True``)."""
    ray_trainer = _trainer_module()
    c = step_config(cfg, step_updates(split, G))
    r = np.asarray(rewards, dtype=np.float64).reshape(-1)
    n = r.size
    sizes = [int(s) for s in request.get("sizes") or [G] * (n // G)]
    holes = np.asarray(request.get("holes") or [0] * n, dtype=int)
    recorder = Recorder(RESPONSE_LENGTH)
    advantages, mask = np.zeros(n), np.zeros((n, RESPONSE_LENGTH))
    unsplit = request["layout"] != "split"
    layout = split.whole_steps() if unsplit else split
    layout_config = step_config(cfg, step_updates(layout, G))
    with cpu_platform(), plain_attention(), contextlib.redirect_stdout(io.StringIO()):
        dispatch = _dispatcher(layout_config, layout, recorder)
        for rows, groups in _generation_batches(sizes, split.prompts):
            data = rollout(rows, groups, r, np.asarray(lengths, dtype=int), holes, c, RESPONSE_LENGTH, PROMPT_LENGTH)
            balance(ray_trainer, c, data, split.ranks)
            data = trainer_advantage(ray_trainer, c.algorithm, data, G)
            where = (data.batch["responses"][:, 0] - MARK).numpy()
            advantages[where] = data.batch["advantages"][:, 0].double().numpy()
            mask[where] = data.batch["response_mask"].double().numpy()
            if unsplit:
                for positions in _step_positions(c, split, len(data)):
                    update_actor(ray_trainer, layout_config, data.select_idxs(positions), dispatch)
            else:
                update_actor(ray_trainer, c, data, dispatch)
            recorder.next_generation()
    return {"advantages": advantages, "mask": mask, **recorder.result(n, layout.ranks)}


def _generation_batches(sizes: list[int], prompts: int) -> list[tuple[np.ndarray, list[int]]]:
    """The rows and group sizes of each generation batch: ``prompts`` groups after the other; a last
    batch of fewer groups is never generated (the trainer's dataloader has ``drop_last=True``)."""
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    out = []
    for g in range(0, len(sizes) - prompts + 1, prompts):
        groups = sizes[g : g + prompts]
        out.append((np.arange(starts[g], starts[g] + sum(groups)), groups))
    return out


def _step_positions(c: Any, split: StepSplit, n: int) -> list[np.ndarray]:
    """The optimizer steps of a balanced generation batch of ``n`` rows as the split composes them
    (positions in the batch): verl's dispatch gives rank r the r-th of equal contiguous chunks, the rank's
    worker cuts its chunk into mini-batches (the legacy ``DataParallelPPOActor.update_policy``:
    ``data.split(ppo_mini_batch_size)``, contiguous; the engine's ``train_mini_batch``: ``tu.make_iterator``,
    shuffled under ``actor.shuffle`` with ``data_loader_seed`` + the rank), and step k is every rank's
    k-th mini-batch."""
    per_rank, rows = n // split.ranks, split.mini * split.group_size // split.ranks
    engine = engine_path(c)
    mini_batches = []
    for rank in range(split.ranks):
        chunk = np.arange(rank * per_rank, (rank + 1) * per_rank)
        if engine:
            mini_batches.append(_engine_mini_batches(c, chunk, rows, rank))
        else:
            mini_batches.append([chunk[i : i + rows] for i in range(0, per_rank, rows)])
    return [np.concatenate(parts) for parts in zip(*mini_batches)]


def _engine_mini_batches(c: Any, chunk: np.ndarray, rows: int, rank: int) -> list[np.ndarray]:
    """The mini-batches ``TrainingWorker.train_mini_batch`` draws from a rank's chunk: verl's
    ``tu.make_iterator`` over the chunk's positions, with the seed and shuffle ``_update_actor`` hands it."""
    import torch
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu

    actor = c.actor_rollout_ref.actor
    positions = TensorDict({"position": torch.as_tensor(chunk)}, batch_size=[len(chunk)])
    loader = tu.make_iterator(
        positions,
        mini_batch_size=rows,
        epochs=1,
        seed=int(actor.data_loader_seed) + rank,
        dataloader_kwargs={"shuffle": bool(actor.shuffle)},
    )
    return [batch["position"].numpy() for batch in loader]


def _dispatcher(c: Any, split: StepSplit, recorder: Recorder) -> Callable[[Any], Any]:
    """``actor_rollout_wg.update_actor``: verl's dispatch cuts the batch into one contiguous chunk per
    data-parallel rank, and each rank (a process of its own in one gloo group,
    :class:`~grpo_identity.checks.frameworks._ranks.ProcessRanks`, whose ``torch.distributed`` is torch's own)
    runs the actor worker's update on its chunk; what each recorded comes back into ``recorder``.  Rank 0's
    output is the update's (its metrics, as the trainer reads them)."""
    run = (engine_rank if engine_path(c) else legacy_rank)(c, split.ranks, recorder)

    def dispatch(batch: Any) -> Any:
        parts, since = chunks(batch, split.ranks), len(recorder.pieces)

        def rank_update(rank: int) -> tuple[Any, dict[str, Any]]:
            out = run(rank, parts[rank])
            return (out if rank == 0 else None), recorder.export(rank, since)

        replies = ProcessRanks(split.ranks).run(rank_update)
        for rank, (_, recorded) in enumerate(replies):
            recorder.absorb(rank, recorded)
        return replies[0][0]

    return dispatch
