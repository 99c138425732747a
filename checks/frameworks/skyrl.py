"""SkyRL driver: its trainer's and its policy worker's own code, from its own config.

- config: ``SkyRLTrainConfig.from_cli_overrides`` (``skyrl/train/config/config.py``) over the user's ``--set`` keys,
  as ``python -m skyrl.train.entrypoints.main_base KEY=VALUE …`` takes them (an OmegaConf dot-list: an unknown key
  or a bad value is SkyRL's own error); ``generator.n_samples_per_prompt`` is the group size of each probe batch;
- advantages: the trainer's ``RayPPOTrainer.compute_advantages_and_returns`` (a trainer holding the config alone)
  on a ``TrainingInputBatch`` of one answer per row (the reward on its last response token, ``uids`` the group);
- gradient: the whole batch as one mini-batch of one micro-batch on one rank, as the step runs it (below);
- step (a request of :mod:`grpo_identity.checks.measure.steps`): the rows one generation batch
  (``trainer.train_batch_size`` × G answers) after another: the trainer's advantages, then (0.2.0 on) its
  ``_normalize_advantages`` per mini-batch (``trainer.policy_mini_batch_size`` × G answers), each mini-batch cut
  into one contiguous chunk per data-parallel rank, and on each rank the policy worker's own
  ``PolicyWorkerBase.forward_backward`` (its micro-batches of ``trainer.micro_train_batch_size_per_gpu``) and
  ``optim_step``.  The ranks are processes of one gloo group
  (:class:`~grpo_identity.checks.frameworks._ranks.ProcessRanks`), so the worker's own all-reduces are torch's.
  What needs a GPU is a stand-in, and the target's info says so (:data:`STEP_STAND_INS`): the model (a table of
  log-probabilities, one row per answer: :func:`_policy`) and the FSDP strategy (:func:`_strategy`: ``backward``,
  and an ``optimizer_step`` that averages the gradient over the ranks as FSDP's reduce-scatter does, then records
  it).  The unsplit layout runs each optimizer step of the split again as one micro-batch on one rank, with the
  advantages the trainer hands the workers.  Settings whose code the driver does not run (Megatron, sequence
  parallelism, dynamic sampling, an entropy loss, step-wise trajectories) are refused by name (:data:`UNSUPPORTED`).

SkyRL's import chain reaches ``flash_attn`` (GPU only), which an empty stand-in answers while SkyRL imports;
releases 0.2.0 and 0.3.0 declare Python 3.11 but build pydantic models on ``typing.TypedDict``, which pydantic
takes only from Python 3.12 on: ``typing_extensions.TypedDict`` stands in for it while SkyRL imports.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import re
import sys
import typing
from dataclasses import dataclass, replace
from importlib.metadata import version
from typing import Any

import numpy as np

from grpo_identity.checks.frameworks import (
    PROMPT_LENGTH,
    RESPONSE_LENGTH,
    STEP_GROUP_SIZE,
    AdapterError,
    FrameworkSpec,
    lengths_for,
    patched_attributes,
    whole_number,
)
from grpo_identity.checks.frameworks._ranks import ProcessRanks
from grpo_identity.checks.frameworks.contract import Built, Difference, DriverInfo, DriverSettings, StepPlan

__all__ = ["DIFFERENCES", "import_check", "build", "SkyRLTarget"]

#: where SkyRL's releases differ in the code the driver reads
DIFFERENCES = {
    "normalize_advantages": Difference(
        "skyrl.train.trainer:RayPPOTrainer._normalize_advantages",
        "0.2.0",
        "the loss reduction applied to the advantages per mini-batch, the loss a masked sum (SkyRL PR #1296); "
        "before it each micro-batch's loss is reduced on its own and optim_step divides by the micro-batches",
    ),
    "mini_batch_boundaries": Difference(
        "skyrl.train.dataset.preprocess:compute_prompt_mini_batch_boundaries",
        "0.2.0",
        "the mini-batches as prompt boundaries (before it, slices of policy_mini_batch_size × G rows)",
    ),
    "token_budget": Difference(
        "skyrl.train.config.config:TrainerConfig.max_tokens_per_microbatch",
        "0.3.0",
        "micro-batches cut by a token budget (trainer.max_tokens_per_microbatch), padded to one count over the ranks",
    ),
    "prompt_boundaries": Difference(
        "skyrl.train.dataset.preprocess:compute_prompt_boundaries",
        "0.3.0",
        "each prompt's rows, which loss_reduction=prompt_mean normalises by",
    ),
}

#: the modules the driver calls
MODULES = {
    "config": "skyrl.train.config.config",
    "trainer": "skyrl.train.trainer",
    "worker": "skyrl.backends.skyrl_train.workers.worker",
    "batch": "skyrl.backends.skyrl_train.training_batch",
    "ppo": "skyrl.backends.skyrl_train.utils.ppo_utils",
    "strategy": "skyrl.backends.skyrl_train.distributed.strategy",
}
#: what SkyRL imports that needs a GPU: empty stand-ins while it imports
GPU_ONLY = ("flash_attn", "vllm", "flashinfer")
#: imported before the stand-ins go in
BEFORE_STAND_INS = ("transformers.modeling_utils", "transformers.integrations.flash_attention")
_LOADED: dict[str, Any] = {}


def release() -> str:
    """The installed release, in words."""
    from importlib.metadata import PackageNotFoundError

    try:
        return f"SkyRL {version('skyrl')}"
    except PackageNotFoundError:
        return "SkyRL (not installed here)"


def modules() -> dict[str, Any]:
    """SkyRL's modules the driver calls (imported once, under the stand-ins); ``stand_ins`` names them."""
    if not _LOADED:
        import warnings

        from grpo_identity.checks.frameworks.exported.openrlhf import stand_ins

        warnings.filterwarnings("ignore")
        for name in BEFORE_STAND_INS:  # transformers asks the stand-in's distribution for its version otherwise
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
        typed = sys.version_info < (3, 12)  # pydantic takes typing.TypedDict only from Python 3.12 on
        patch = [(typing, "TypedDict", importlib.import_module("typing_extensions").TypedDict)] if typed else []
        with stand_ins(GPU_ONLY) as finder, patched_attributes(patch):
            try:
                loaded = {k: importlib.import_module(v) for k, v in MODULES.items()}
            except ImportError as exc:
                raise AdapterError(f"{release()} does not import here: {exc}") from None
        from loguru import logger

        logger.disable("skyrl")  # its INFO lines on every batch
        made = sorted({m.partition(".")[0] for m in finder.made})
        _LOADED.update(loaded, stand_ins=tuple(made) + (("typing.TypedDict",) if typed else ()))
    return _LOADED


def import_check() -> None:
    """Import what the driver needs and compute one group's advantages (a release environment's smoke test)."""
    fn = build(FrameworkSpec("skyrl", sets=(("trainer.algorithm.advantage_estimator", "grpo"),)), "advantage")
    fn(np.array([1.0, 0.0]), 2)
    importlib.import_module("grpo_identity.checks.calls.target")


def config(spec: FrameworkSpec, group_size: int) -> Any:
    """The ``SkyRLTrainConfig`` SkyRL's own CLI parsing builds from ``spec``'s keys, G answers per prompt."""
    if spec.config:
        raise AdapterError(f"{release()}: give SkyRL's settings with --set KEY=VALUE (its CLI takes no config file)")
    overrides = [f"{k}={v}" for k, v in spec.sets] + [f"generator.n_samples_per_prompt={int(group_size)}"]
    cls = modules()["config"].SkyRLTrainConfig
    try:
        return cls.from_cli_overrides(overrides)
    except Exception as exc:  # noqa: BLE001 (SkyRL's own refusal of a key or a value: the user's error)
        raise AdapterError(f"{release()} refuses the configuration ({spec.describe()}): {exc}") from None


def build(spec: FrameworkSpec, level: str) -> SkyRLTarget:
    """The target of ``spec`` at ``level`` (:mod:`.contract`)."""
    return SkyRLTarget(spec, level)


class SkyRLTarget(Built):
    """SkyRL's trainer from ``spec``'s keys (module docstring)."""

    def __init__(self, spec: FrameworkSpec, level: str) -> None:
        self.spec = spec
        self.configs: dict[Any, Any] = {}
        cfg = self.config(2)
        _refuse_unsupported(cfg, level)
        info = _info(spec, cfg, "RayPPOTrainer.compute_advantages_and_returns")
        if level == "gradient":
            self.split = _step_split(spec, cfg)
            entry = "compute_advantages_and_returns, then PolicyWorkerBase.forward_backward and optim_step"
            if DIFFERENCES["normalize_advantages"].present():
                entry = entry.replace(", then", ", _normalize_advantages,")
            stand_ins = (*info.stand_ins, *STEP_STAND_INS)
            self.correction = rollout_settings(cfg)
            info = info.with_step(self.split.plan(cfg), entry=entry, lengths_optional=True, stand_ins=stand_ins,
                                  rollout_correction=self.correction)  # fmt: skip
        super().__init__(info, level)

    def config(self, G: int, split: _Split | None = None) -> Any:
        """The config at G answers per prompt; with ``split``, its step settings in force."""
        key = (G, split)
        if key not in self.configs:
            sets = self.spec.sets if split is None else (*self.spec.sets, *split.sets())
            self.configs[key] = config(replace(self.spec, sets=sets), G)
        return self.configs[key]

    def gradient(self, rewards: np.ndarray, G: int, lengths: np.ndarray) -> dict[str, Any]:
        """The whole batch as one optimizer step of one micro-batch on one rank."""
        r = np.asarray(rewards, dtype=np.float64).reshape(-1)
        one = _Split(G, r.size // G, r.size // G, r.size, 1).whole_steps()
        out = _run_step(self.config(G, one), one, r, np.asarray(lengths, dtype=int), [0] * r.size)
        return {k: out[k] for k in ("advantages", "coefficients", "mask")}

    def three_policy(self, rewards: np.ndarray, G: int, lengths: np.ndarray, rollout: dict[str, Any]) -> dict[str, Any]:
        """The gradient's path with the trainer's log π_old (seeded: ``action_log_probs`` and the policy's table,
        so ρ = 1; the reference the same, so the KL term is 0) and the rollout engine's log π_old − X
        (``rollout_logprobs``, X 0 off the answer; None: none), ``off_policy_correction`` as configured or all off."""
        from grpo_identity.checks.measure.rollout import seeded_old_logps

        if not self.correction:
            raise NotImplementedError(f"{release()}: this config turns no {_OPC} on")
        r, lengths = np.asarray(rewards, dtype=np.float64).reshape(-1), np.asarray(lengths, dtype=int)
        one = _Split(G, r.size // G, r.size // G, r.size, 1).whole_steps()
        live = np.arange(RESPONSE_LENGTH)[None, :] < lengths[:, None]
        old = seeded_old_logps((r.size, RESPONSE_LENGTH)) * live
        x = rollout["log_ratio"]
        opc = _correction(self.config(G, one))
        if x is None and rollout["correct"] and (opc.tis_ratio_type or opc.sequence_mask_metric):
            # convert_to_training_input's sanity check (skyrl/train/trainer.py), on the path _batch stands in for
            raise AssertionError("expected non-null rollout logprobs tensor when off_policy_correction is enabled")
        engine = None if x is None else old - np.where(live, np.asarray(x, dtype=np.float64), 0.0)
        cfg = _with_correction(self.config(G, one), bool(rollout["correct"]))
        out = _run_step(cfg, one, r, lengths, [0] * r.size, logps=(old, engine))
        return {**{k: out[k] for k in ("advantages", "coefficients", "mask")}, "old_logps": old}

    def step(self, rewards: np.ndarray, G: int, lengths: np.ndarray, request: dict[str, Any]) -> dict[str, Any]:
        r = np.asarray(rewards, dtype=np.float64).reshape(-1)
        holes = [int(h) for h in request.get("holes") or [0] * r.size]
        sizes = [int(n) for n in request.get("sizes") or [G] * (r.size // G)]
        if any(n != G for n in sizes):
            raise AdapterError(f"{release()}: the trainer's groups all hold G answers (its rollout has no short group)")
        split = replace(self.split, group_size=G)
        cfg, lengths = self.config(G, split), np.asarray(lengths, dtype=int)
        if request.get("layout", "split") == "split":
            return _run_step(cfg, split, r, lengths, holes)
        return _run_step(cfg, split, r, lengths, holes, unsplit=self.config(G, split.whole_steps()))

    def advantages(self, rewards: np.ndarray, G: int, scores: Any = None) -> np.ndarray:
        r = np.asarray(rewards, dtype=np.float64).reshape(-1)
        data = _batch(r, G, lengths_for(r.size))
        data = _trainer_advantages(self.config(G), data)
        return data["advantages"][:, 0].double().numpy()


def _batch(rewards: np.ndarray, G: int, lengths: np.ndarray, holes: Any = None, first: int = 0, logps: Any = None
           ) -> Any:  # fmt: skip
    """A ``TrainingInputBatch`` of the rows, as the trainer's ``convert_to_training_input`` leaves it: each row a
    prompt of PROMPT_LENGTH tokens and an answer of ``lengths[i]`` tokens (right-padded to RESPONSE_LENGTH), its
    tokens the row's marker (1 + ``first`` + its row), the reward on its last token, ``holes[i]`` tokens from
    position 1 on out of the loss mask (tool output), ``uids`` its group.  ``logps``: (log π_old, the rollout
    engine's or None) of the whole request's rows, for the old and reference log-probabilities and
    ``rollout_logprobs`` (else 0, 0 and None)."""
    import torch

    mods = modules()
    n = rewards.size
    width = PROMPT_LENGTH + RESPONSE_LENGTH
    live = torch.as_tensor(np.arange(RESPONSE_LENGTH)[None, :] < np.asarray(lengths)[:, None], dtype=torch.long)
    sequences = torch.zeros(n, width, dtype=torch.long)
    sequences[:, :PROMPT_LENGTH] = 7
    sequences[:, PROMPT_LENGTH:] = live * torch.arange(first + 1, first + n + 1)[:, None]
    loss_mask = live.clone()
    for i, h in enumerate(holes if holes is not None else ()):
        loss_mask[i, 1 : 1 + int(h)] = 0
    token_rewards = torch.zeros(n, RESPONSE_LENGTH)
    token_rewards[torch.arange(n), torch.as_tensor(lengths) - 1] = torch.as_tensor(rewards, dtype=torch.float32)
    data = mods["batch"].TrainingInputBatch(
        {
            "sequences": sequences,
            "attention_mask": torch.cat([torch.ones(n, PROMPT_LENGTH, dtype=torch.long), live], dim=1),
            "response_mask": live,
            "loss_mask": loss_mask,
            "rewards": token_rewards,
            "values": None,
            "action_log_probs": torch.zeros(n, RESPONSE_LENGTH),
            "base_action_log_probs": torch.zeros(n, RESPONSE_LENGTH),
            "rollout_logprobs": None,
        }
    )
    if logps is not None:
        old, engine = logps
        rows = slice(first, first + n)
        data["action_log_probs"] = torch.as_tensor(old[rows], dtype=torch.float32)
        data["base_action_log_probs"] = data["action_log_probs"].clone()  # the reference equal: no KL term
        data["rollout_logprobs"] = None if engine is None else torch.as_tensor(engine[rows], dtype=torch.float32)
    data.metadata = {
        "uids": [str((first + i) // G) for i in range(n)],
        "response_length": RESPONSE_LENGTH,
        "avg_response_length": float(np.mean(lengths)),
    }
    return data


def _trainer_advantages(cfg: Any, data: Any) -> Any:
    """``RayPPOTrainer.compute_advantages_and_returns`` as the trainer runs it, on a trainer that holds ``cfg``."""
    from types import SimpleNamespace

    trainer = SimpleNamespace(cfg=cfg, all_metrics={})
    return modules()["trainer"].RayPPOTrainer.compute_advantages_and_returns(trainer, data)


def _info(spec: FrameworkSpec, cfg: Any, entry: str) -> DriverInfo:
    algo = cfg.trainer.algorithm
    details = {
        "estimator": str(algo.advantage_estimator),
        "grpo_norm_by_std": bool(algo.grpo_norm_by_std),
        "loss_reduction": str(algo.loss_reduction),
        "policy_loss_type": str(algo.policy_loss_type),
        "group_size": "each probe batch's G (generator.n_samples_per_prompt)",
    }
    user = dict(spec.sets)
    settings = DriverSettings(
        forced={k: {"driver": v, "yours": user.get(k)} for k, v in FORCED},
        note="generator.n_samples_per_prompt set by each probe (2, 3, 4, 8 …), last",
    )
    return DriverInfo("skyrl", version("skyrl"), entry, user, settings, modules()["stand_ins"], details=details)


# --- the step ------------------------------------------------------------------------------------------------------
#: the step's settings (SkyRL's keys), and the driver's value of each the user did not set (SkyRL's defaults,
#: 1024 prompts a batch, are far beyond a probe)
SPLIT_KEYS = {
    "trainer.train_batch_size": 4,
    "trainer.policy_mini_batch_size": 2,
    "trainer.micro_train_batch_size_per_gpu": 2,
    "trainer.placement.policy_num_gpus_per_node": 1,
}
#: what the driver sets whatever the user set: one pass over each batch (the probes' first, on-policy, step); the
#: ranks of every node on one (their count is the nodes' × the GPUs per node)
FORCED = (("trainer.update_epochs_per_batch", "1"), ("trainer.placement.policy_num_nodes", "1"))
#: the most data-parallel ranks a step runs (each a process on this machine)
MAX_RANKS = 8
#: what the step stands in for, as the report lists it
STEP_STAND_INS = ("policy model (a table of log-probabilities)", "FSDP strategy", "torch.cuda.current_device")
#: settings whose code the driver does not run -> (the values that run, the one to set, why): refused by name
UNSUPPORTED = {
    "trainer.strategy": (("fsdp", "fsdp2"), "fsdp2", "the Megatron worker is other code than the FSDP worker's"),
    "trainer.policy.sequence_parallel_size": ((1,), "1", "sequence parallelism splits answers over ranks"),
    "trainer.algorithm.dynamic_sampling.type": ((None,), "null", "it filters or replaces groups before the step"),
    "trainer.algorithm.use_entropy_loss": ((False,), "false", "the stood-in model has no entropy"),
    "generator.step_wise_trajectories": ((False,), "false", "the probes' answers are single-turn"),
    "trainer.algorithm.zero_variance_filter": ((False,), "false", "it masks silent groups' tokens out of the loss"),
    "generator.apply_overlong_filtering": ((False,), "false", "it masks truncated answers out of the loss"),
}
UNSPLIT = "each optimizer step of the split as one mini-batch of one micro-batch on one rank"


@dataclass(frozen=True)
class _Split:
    """The configured step: G answers per prompt, ``prompts`` per generation batch (``trainer.train_batch_size``),
    ``mini`` per optimizer step (``trainer.policy_mini_batch_size``), ``micro`` answers per micro-batch
    (``trainer.micro_train_batch_size_per_gpu``), ``dp`` data-parallel ranks; ``chosen``: what the driver set."""

    group_size: int
    prompts: int
    mini: int
    micro: int
    dp: int
    chosen: tuple[tuple[str, Any], ...] = ()
    budget: int | None = None
    """Tokens per micro-batch (``trainer.max_tokens_per_microbatch``, 0.3.0 on; -1: none); None: the user's."""

    def whole_steps(self) -> _Split:
        """The unsplit layout's settings: each optimizer step one micro-batch on one rank (no token budget)."""
        budget = -1 if DIFFERENCES["token_budget"].present() else None
        return replace(self, micro=self.mini * self.group_size, dp=1, budget=budget)

    def sets(self) -> tuple[tuple[str, str], ...]:
        values = (self.prompts, self.mini, self.micro, self.dp)
        budget = (("trainer.max_tokens_per_microbatch", str(self.budget)),) if self.budget is not None else ()
        return (*((k, str(v)) for k, v in zip(SPLIT_KEYS, values)), *FORCED, *budget)

    def plan(self, cfg: Any) -> StepPlan:
        tokens = int(DIFFERENCES["token_budget"].value_of(cfg.trainer, -1))
        micro = f"micro-batches of {self.micro} answers (trainer.micro_train_batch_size_per_gpu)"
        if tokens > 0:
            micro = (
                f"micro-batches of at most {tokens} tokens (trainer.max_tokens_per_microbatch: "
                "TokenBasedBatchIterator, padded to one count over the ranks)"
            )
        split = (
            f"{self.prompts} prompts × G per generation batch (trainer.train_batch_size); optimizer steps of "
            f"{self.mini} prompts (trainer.policy_mini_batch_size), each cut into {self.dp} contiguous chunk(s), one "
            f"per data-parallel rank (MeshDispatch{'; each rank a process' if self.dp > 1 else ''}); on each rank "
            f"PolicyWorkerBase.forward_backward's {micro}, then optim_step"
        )
        return StepPlan(
            self.group_size,
            self.mini * self.group_size,
            self.prompts * self.group_size,
            split=split,
            unsplit=UNSPLIT,
            settings={
                **dict(zip(SPLIT_KEYS, (self.prompts, self.mini, self.micro, self.dp))),
                **({"trainer.max_tokens_per_microbatch": tokens} if tokens > 0 else {}),
                "G": self.group_size,
            },
            ranks=self.dp,
            chosen=dict(self.chosen),
            objective=objective(cfg),
            holes=True,
        )


def _step_split(spec: FrameworkSpec, cfg: Any) -> _Split:
    """The split of ``spec``'s step: the user's settings, the driver's (:data:`SPLIT_KEYS`) where they set none (a
    micro-batch of one answer where two do not cut a rank's share); G is the user's
    ``generator.n_samples_per_prompt``, else :data:`STEP_GROUP_SIZE`; the ranks are nodes × GPUs per node."""
    user = dict(spec.sets)
    t = cfg.trainer
    given = (t.train_batch_size, t.policy_mini_batch_size, t.micro_train_batch_size_per_gpu)
    nodes = whole_number(t.placement.policy_num_nodes, "trainer.placement.policy_num_nodes", who=release())
    values = dict(zip(SPLIT_KEYS, (*given, t.placement.policy_num_gpus_per_node)))
    prompts, mini, micro, gpus = (
        whole_number(values[k], k, who=release()) if k in user else d for k, d in SPLIT_KEYS.items()
    )
    key = "generator.n_samples_per_prompt"
    G = whole_number(user[key], key, least=2, who=release()) if key in user else STEP_GROUP_SIZE
    if nodes * gpus > MAX_RANKS:
        raise AdapterError(
            f"{release()}: {nodes * gpus} ranks (nodes × GPUs per node): the step runs at most {MAX_RANKS}"
        )
    micro_key = "trainer.micro_train_batch_size_per_gpu"
    if micro_key not in user and (mini * G // (nodes * gpus)) % micro:
        micro = 1
    chosen = tuple((k, v) for k, v in zip(SPLIT_KEYS, (prompts, mini, micro, gpus)) if k not in user)
    split = _Split(G, prompts, mini, micro, nodes * gpus, chosen=chosen)
    algo = cfg.trainer.algorithm
    if str(algo.loss_reduction) == "seq_mean_token_sum_norm" and algo.max_seq_len is None:
        # 0.1.0's config fills in a default; from 0.2.0 on SkyRL's validate_cfg refuses it unset, as here
        raise AdapterError(
            f"{release()}: trainer.algorithm.loss_reduction=seq_mean_token_sum_norm divides by "
            "trainer.algorithm.max_seq_len, which SkyRL requires set: set trainer.algorithm.max_seq_len (your budget)"
        )
    problem = _split_problem(split)
    if problem:
        named = set(re.findall(r"[a-z_]+_size(?:_per_gpu)?", problem))  # the settings the message names, whole
        mine = [k for k, _ in chosen if k.rpartition(".")[2] in named]
        why = f" ({', '.join(mine)}: the driver's default, you set none)" if mine else ""
        raise AdapterError(f"{release()} cannot split the step as configured: {problem}{why}")
    return split


def _split_problem(s: _Split) -> str | None:
    """What SkyRL's batch-size checks refuse in ``s`` (its validate_batch_sizes), naming a setting that runs."""
    if s.prompts % s.mini:
        return (
            f"trainer.train_batch_size={s.prompts} is no multiple of policy_mini_batch_size={s.mini}: set "
            f"trainer.train_batch_size={s.mini * max(1, s.prompts // s.mini)}"
        )
    rows = s.mini * s.group_size
    if rows % s.dp:
        return (
            f"an optimizer step's {rows} answers (policy_mini_batch_size × G) do not divide over {s.dp} ranks: set "
            f"trainer.policy_mini_batch_size to a multiple of {s.dp // math.gcd(s.dp, s.group_size)}"
        )
    if (rows // s.dp) % s.micro:
        return (
            f"a rank's {rows // s.dp} answers per step do not cut into micro_train_batch_size_per_gpu={s.micro}: set "
            "trainer.micro_train_batch_size_per_gpu=1"
        )
    return None


def _refuse_unsupported(cfg: Any, level: str) -> None:
    """An :class:`AdapterError` for a setting whose code the driver does not run (:data:`UNSUPPORTED`; the critic
    of gae), naming the value that runs."""
    if str(cfg.trainer.algorithm.advantage_estimator) == "gae":
        raise AdapterError(
            f"{release()}: trainer.algorithm.advantage_estimator=gae needs a critic's values; the driver audits "
            "the critic-free estimators (grpo, rloo, reinforce++ …)"
        )
    for key, (runs, value, why) in UNSUPPORTED.items():
        node: Any = cfg
        for part in key.split("."):
            node = getattr(node, part, runs[0])  # a key this release does not have: its behaviour is the one that runs
        if node not in runs and (level == "gradient" or key.startswith("generator.")):
            raise AdapterError(f"{release()}: the driver does not run {key}={node} ({why}): set {key}={value}")
    budget = cfg.trainer.algorithm.max_seq_len
    if budget is not None:
        whole_number(budget, "trainer.algorithm.max_seq_len", who=release())


#: where SkyRL's rollout correction is configured
_OPC = "trainer.algorithm.off_policy_correction"
#: the policy losses that read the rollout log-probabilities themselves (the correction cannot be switched off)
_READS_ENGINE = ("importance_sampling", "rollout_is", "dppo")


def _correction(cfg: Any) -> Any:
    """``off_policy_correction`` as SkyRL's ``validate_cfg`` leaves it: the deprecated ``use_tis`` is token-level
    TIS capped at ``tis_imp_ratio_cap`` (the driver does not run ``validate_cfg``, which needs a logger)."""
    algo = cfg.trainer.algorithm
    if getattr(algo, "use_tis", False):
        return replace(
            algo.off_policy_correction, tis_ratio_type="token", token_tis_ratio_clip_high=algo.tis_imp_ratio_cap
        )
    return algo.off_policy_correction


def _with_correction(cfg: Any, on: bool) -> Any:
    """``cfg`` with its correction as configured (``on``) or every correction off (the config class's defaults)."""
    opc = _correction(cfg)
    deprecated = {"use_tis": False} if hasattr(cfg.trainer.algorithm, "use_tis") else {}
    algo = replace(cfg.trainer.algorithm, off_policy_correction=opc if on else type(opc)(), **deprecated)
    return replace(cfg, trainer=replace(cfg.trainer, algorithm=algo))


def rollout_settings(cfg: Any) -> dict[str, Any] | None:
    """``info["rollout_correction"]``: token-level TIS min(r, C) and sequence-level TIS min(Πₜ rₜ, C) as the probe's
    estimators; with a mask whose bounds the TIS cap never cuts (C ≥ its upper bound), the masked estimator (token
    ratios in [α, β]: ``token_mask``; the product in its bounds: ``sequence_mask``); other masks (outlier, the
    geometric mean's) document none (the probe names what it finds).  None where no correction is on, or the
    policy loss reads the rollout log-probabilities itself."""
    opc, algo = _correction(cfg), cfg.trainer.algorithm
    masks = {k: v for k, v in vars(opc).items() if v is not None and ("mask" in k or "outlier" in k) and
             not k.startswith(("geo_mask", "product_mask"))}  # fmt: skip
    tis = opc.tis_ratio_type
    if (tis is None and not masks) or str(algo.policy_loss_type) in _READS_ENGINE:
        return None
    cap = {"token": opc.token_tis_ratio_clip_high, "sequence": opc.sequence_tis_ratio_clip_high}.get(tis)
    estimator, low = (None if masks or tis is None else f"{tis}_truncate"), 0.0
    token_mask = (opc.token_mask_is_threshold_low, opc.token_mask_is_threshold_high)
    if tis == "token" and set(masks) == {"token_mask_is_threshold_low", "token_mask_is_threshold_high"}:
        estimator, (low, high) = ("token_mask", token_mask) if cap >= token_mask[1] else (None, (0.0, cap))
        cap = high
    if tis == "sequence" and masks == {"sequence_mask_metric": "product"} and cap >= opc.product_mask_high:
        estimator, low, cap = "sequence_mask", opc.product_mask_low, opc.product_mask_high
    said = [f"tis_ratio_type={tis}"] + ([f"clip_high={cap:g}"] if cap is not None else [])
    said += [f"{k}={v}" for k, v in masks.items()]
    return {
        "estimator": estimator,
        "cap": None if cap is None else float(cap),
        "low": float(low),
        "setting": f"{_OPC}: {', '.join(said)}"
        + (" (use_tis, as validate_cfg maps it)" if getattr(algo, "use_tis", False) else ""),
    }


def objective(cfg: Any) -> dict[str, Any] | None:
    """The documented objective of ``trainer.algorithm.loss_reduction``; seq_mean_token_sum_norm's constant is
    ``trainer.algorithm.max_seq_len`` (the probe's response budget where unset)."""
    from grpo_identity.objectives import objective_of

    algo = cfg.trainer.algorithm
    found = objective_of("skyrl", "trainer.algorithm.loss_reduction", str(algo.loss_reduction))
    if found is None:
        return None
    return found.for_step(float(algo.max_seq_len) if algo.max_seq_len else RESPONSE_LENGTH)


class _Record:
    """A step request's answer, filled optimizer step by optimizer step (rows no step held: step -1)."""

    def __init__(self, n: int) -> None:
        self.advantages, self.coefficients = np.zeros(n), np.zeros((n, RESPONSE_LENGTH))
        self.mask = np.zeros((n, RESPONSE_LENGTH))
        self.where = {k: np.full(n, -1, dtype=np.int64) for k in ("step", "rank", "micro_batch")}

    def read(self, data: Any, rows: np.ndarray) -> None:
        self.advantages[rows] = data["advantages"][:, 0].double().numpy()
        self.mask[rows] = data["loss_mask"].double().numpy()

    def read_step(self, step: int, grad: Any, micro: list[list[list[int]]]) -> None:
        """One optimizer step: the gradient averaged over the ranks, each rank's micro-batches' rows."""
        for rank, batches in enumerate(micro):
            for m, rows in enumerate(batches):
                for i in rows:
                    self.where["step"][i], self.where["rank"][i], self.where["micro_batch"][i] = step, rank, m
                    self.coefficients[i] = -grad[i].double().numpy()

    def result(self) -> dict[str, np.ndarray]:
        return {"advantages": self.advantages, "coefficients": self.coefficients, "mask": self.mask, **self.where}


def _mini_batches(data: Any, split: _Split) -> list[tuple[int, int]]:
    """The optimizer steps of a generation batch, as the trainer cuts it."""
    if DIFFERENCES["mini_batch_boundaries"].present():
        from skyrl.train.dataset.preprocess import compute_prompt_mini_batch_boundaries

        return compute_prompt_mini_batch_boundaries(
            data.metadata["uids"], split.mini, split.prompts, False, split.group_size
        )
    rows = split.mini * split.group_size
    return [(k * rows, (k + 1) * rows) for k in range(len(data) // rows)]


def _normalized(cfg: Any, data: Any, bounds: list[tuple[int, int]]) -> Any:
    """The advantages as the trainer hands them to the workers: 0.2.0 on, its ``_normalize_advantages`` (the batch's
    z-score where ``advantage_batch_normalize``, then the loss reduction per mini-batch); before it,
    ``normalize_advantages_dict`` where ``advantage_batch_normalize`` (each worker reduces its loss itself)."""
    from types import SimpleNamespace

    if not DIFFERENCES["normalize_advantages"].present():
        if cfg.trainer.algorithm.advantage_batch_normalize:
            return modules()["ppo"].normalize_advantages_dict(data)
        return data
    extra = {}
    if DIFFERENCES["prompt_boundaries"].present():
        from skyrl.train.dataset.preprocess import compute_prompt_boundaries

        extra["prompt_boundaries"] = compute_prompt_boundaries(data.metadata["uids"])
    trainer = SimpleNamespace(cfg=cfg)
    return modules()["trainer"].RayPPOTrainer._normalize_advantages(trainer, data, bounds, **extra)


def _run_step(
    cfg: Any, split: _Split, r: np.ndarray, lengths: np.ndarray, holes: list[int], unsplit: Any = None,
    logps: tuple[np.ndarray, np.ndarray | None] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The rows one generation batch after another as the trainer and its policy workers run them (module
    docstring); a last, partial generation batch is never trained (step -1).  ``unsplit`` (a config): the unsplit
    layout, the same optimizer steps each one micro-batch on one rank under that config.  ``logps``: the
    three-policy probe's (log π_old, rollout engine's) per row (:func:`_batch`; the policy's table at log π_old)."""
    n, per = r.size, split.prompts * split.group_size
    record, step = _Record(n), 0
    for start in range(0, n - per + 1, per):
        rows = np.arange(start, start + per)
        batch = _batch(r[rows], split.group_size, lengths[rows], holes[start : start + per], start, logps)
        data = _trainer_advantages(cfg, batch)
        record.read(data, rows)
        bounds = _mini_batches(data, split)
        data = _normalized(unsplit if unsplit is not None else cfg, data, bounds)
        table = None if logps is None else logps[0]
        if unsplit is None:
            done = _on_ranks(cfg, split.dp, n, [data[a:b].chunk((b - a) // split.dp) for a, b in bounds], table)
        else:
            done = _on_ranks(unsplit, 1, n, [[data[a:b]] for a, b in bounds], table)
        for grad, micro in done:
            record.read_step(step, grad, micro)
            step += 1
    return record.result()


def _on_ranks(cfg: Any, dp: int, n: int, steps: list[list[Any]], table: np.ndarray | None = None
              ) -> list[tuple[Any, list[list[list[int]]]]]:  # fmt: skip
    """Each optimizer step (its chunk per rank) through a policy worker per rank, the ranks processes of one gloo
    group: per step, the gradient (averaged over the ranks) and each rank's micro-batches' rows.  ``table``: the
    policy's log-probabilities per row (else 0)."""

    def rank_body(rank: int) -> list[tuple[Any, list[list[int]]]]:
        worker = _worker(cfg, dp, n, table)
        with patched_attributes(_cpu_patches()):
            for chunks in steps:
                worker.forward_backward(chunks[rank])
                worker.optim_step()
        return worker.strategy.steps

    replies = ProcessRanks(dp).run(rank_body)
    return [(replies[0][k][0], [reply[k][1] for reply in replies]) for k in range(len(steps))]


def _cpu_patches() -> list[tuple[Any, str, Any]]:
    """``torch.cuda.current_device`` answers the CPU, where the worker moves each micro-batch."""
    import torch

    return [(torch.cuda, "current_device", lambda: "cpu")]


def _worker(cfg: Any, dp: int, n: int, table: np.ndarray | None = None) -> Any:
    """SkyRL's own ``PolicyWorkerBase``, its model and strategy stood in (:class:`_Policy`, :func:`_strategy`)."""
    from types import SimpleNamespace

    mods = modules()
    base = mods["worker"].PolicyWorkerBase
    worker = base.__new__(base)  # its __init__ belongs to the Ray actor that would place it on a GPU
    worker.cfg, worker.record_memory = cfg.trainer, False
    worker.model, worker.strategy, worker.optimizer = _policy(n, table), _strategy(dp), None
    worker.scheduler = SimpleNamespace(get_last_lr=lambda: [0.0])
    worker.policy_loss_fn = mods["ppo"].PolicyLossRegistry.get(cfg.trainer.algorithm.policy_loss_type)
    worker.mesh_rank = SimpleNamespace(dp_size=dp, dp=0, sp=0, tp=0, pp=0)
    worker.device_mesh = SimpleNamespace(get_group=lambda name: None)
    worker._micro_batches_accumulated = 0  # releases before 0.2.0 count the micro-batches to divide by
    return worker


def _policy(n: int, table: np.ndarray | None = None) -> Any:
    """The model: a table of log-probabilities, one row per answer (the answer its tokens mark), all zero (the
    step's first, on-policy pass) or ``table``'s; it records the rows of each micro-batch it is called on.  A
    padding row (``TokenBasedBatchIterator``'s, random tokens, no attention past position 0) reads the spare row
    ``n``."""
    import torch

    class Policy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            start = torch.zeros(n + 1, RESPONSE_LENGTH)
            if table is not None:
                start[:n] = torch.as_tensor(table, dtype=torch.float32)
            self.leaf = torch.nn.Parameter(start)
            self.micro: list[list[int]] = []

        def forward(self, sequences: Any, num_actions: int, *args: Any, **kwargs: Any) -> Any:
            mask = kwargs.get("attention_mask")
            real = mask[:, PROMPT_LENGTH] > 0 if mask is not None else torch.ones(len(sequences), dtype=torch.bool)
            rows = torch.where(real, sequences[:, PROMPT_LENGTH].long() - 1, n)
            self.micro.append(rows[real].tolist())
            logp = self.leaf[rows, :num_actions]
            out = {"entropy": torch.zeros(sequences.shape, dtype=logp.dtype)}
            return (logp, out) if kwargs.get("return_output") else logp

    return Policy()


def _strategy(dp: int) -> Any:
    """SkyRL's ``DistributedStrategy`` (its all-reduce as written) with FSDP's part stood in: ``backward`` is the
    loss's, ``optimizer_step`` averages the gradient over the ranks (FSDP's reduce-scatter averages) and records
    it with the rows of each micro-batch, then clears both."""
    import torch
    import torch.distributed as dist

    base = modules()["strategy"].DistributedStrategy

    class Strategy(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            self.world_size = dp
            self.steps: list[tuple[Any, list[list[int]]]] = []

        def setup_distributed(self) -> None:
            pass

        def backward(self, loss: Any, model: Any, optimizer: Any, **kwargs: Any) -> None:
            loss.backward()

        def optimizer_step(self, optimizer: Any, model: Any, scheduler: Any, name: str = "model", **kw: Any) -> Any:
            grad = model.leaf.grad if model.leaf.grad is not None else torch.zeros_like(model.leaf)
            grad = grad.detach().clone()
            dist.all_reduce(grad, op=dist.ReduceOp.SUM)
            self.steps.append((grad / dp, model.micro))
            model.leaf.grad, model.micro = None, []
            return torch.zeros(())

        def save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
            raise NotImplementedError

        def load_checkpoint(self, *args: Any, **kwargs: Any) -> None:
            raise NotImplementedError

        def save_hf_model(self, *args: Any, **kwargs: Any) -> None:
            raise NotImplementedError

    return Strategy()
