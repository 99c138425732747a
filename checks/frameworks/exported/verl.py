"""verl's optimizer step on one machine, as grpo-identity runs it: the trainer's rollout batch, its balancing,
``compute_advantage`` and ``_update_actor``, then the actor worker's own split into optimizer steps and
micro-batches (the legacy ``DataParallelPPOActor.update_policy`` or the engine worker's
``TrainingWorker.train_mini_batch``), with the model replaced by the probe's log-probabilities (a leaf tensor
per micro-batch, whose gradient is what the optimizer receives) and what needs a GPU stack stood in.

The verl driver (``grpo_identity.checks.frameworks.verl``) runs its split steps with these functions, each rank a
process of its own in one gloo group; an exported test pack (``grpo-identity export-tests verl``) runs them
itself on one rank, through a real one-process ``torch.distributed`` group, with ``CASE`` written in by the
exporter.  Imports: the standard library and numpy here, verl and what verl installs (torch, omegaconf, hydra,
tensordict) inside the functions.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import os
import tempfile
import types
import warnings
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any, Callable

import numpy as np

CASE: dict[str, Any] = {}  # the exporter writes the case here
#: an answer's first response token is MARK + its row in the caller's order: the probe's forward reads
#: each micro-batch's rows back from it, whatever order verl's balancing and splits left them in
MARK = 1000
#: every response token's log-probability in the probe, old and current alike (importance ratio 1)
LOG_PROB = -1.0
#: response and prompt tokens of a probe row (the driver passes its own)
WIDTH, PROMPT = 6, 2


def compose_config(overrides: list[str], config_file: str | None = None) -> Any:
    """verl's trainer config ``ppo_trainer`` with Hydra ``overrides`` (``key=value``) and a YAML file merged on
    top the way OmegaConf merges a config, the overrides then applied over the file."""
    import verl
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    GlobalHydra.instance().clear()
    cfg: Any
    try:
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            cfg = hydra_compose("ppo_trainer", overrides=list(overrides))
            if config_file:  # the file over the defaults, then the overrides over the file
                with_sets, cfg = cfg, hydra_compose("ppo_trainer")
                OmegaConf.set_struct(cfg, True)
                cfg = OmegaConf.merge(cfg, OmegaConf.load(config_file))
                for item in overrides:
                    key = item.split("=", 1)[0].lstrip("+~")
                    OmegaConf.update(cfg, key, OmegaConf.select(with_sets, key), merge=False, force_add=True)
    finally:
        GlobalHydra.instance().clear()
    return cfg


def step_config(cfg: Any, updates: dict[str, Any]) -> Any:
    """A copy of the trainer config with ``updates`` (dotted key → value, None included) set."""
    from omegaconf import OmegaConf

    c = copy.deepcopy(cfg)
    for key, value in updates.items():
        OmegaConf.update(c, key, value, merge=False)
    return c


def trainer_module() -> Any:
    """verl's ``trainer.ppo.ray_trainer`` (its dispatch: ``compute_advantage``, ``RayPPOTrainer``)."""
    from verl.trainer.ppo import ray_trainer

    return ray_trainer


def engine_path(cfg: Any) -> bool:
    """Whether the trainer's actor runs the engine worker: always where the legacy actor is gone (0.9),
    with ``trainer.use_legacy_worker_impl=disable`` where ``RayPPOTrainer._update_actor`` chooses (0.7;
    0.6's actor is always the legacy one)."""
    import verl

    legacy = os.path.exists(os.path.join(os.path.dirname(verl.__file__), "workers", "actor", "dp_actor.py"))
    if not legacy:
        return True
    chooses = hasattr(trainer_module().RayPPOTrainer, "_update_actor")
    return chooses and str(cfg.trainer.get("use_legacy_worker_impl", "auto")) == "disable"


def trainer_advantage(ray_trainer: Any, alg: Any, data: Any, G: int) -> Any:
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


def rollout(
    rows: np.ndarray,
    groups: list[int],
    rewards: np.ndarray,
    lengths: np.ndarray,
    holes: np.ndarray,
    c: Any,
    width: int = WIDTH,
    prompt: int = PROMPT,
) -> Any:
    """A generation batch as ``RayPPOTrainer.fit`` holds it after the rollout: prompts of
    ``prompt`` tokens, each group's answers together under one uid (``repeat(interleave=True)``),
    responses right-padded to ``width`` tokens with the reward on the last token (the EOS),
    ``response_mask`` 0 on ``holes[i]`` tokens from position 1 on (as a multi-turn rollout masks tool
    output), ``old_log_probs`` (and ``ref_log_prob`` under ``use_kl_loss``) at the probe's log-probability."""
    import torch
    from verl import DataProto

    n, T, P = len(rows), width, prompt
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


def balance(ray_trainer: Any, c: Any, data: Any, ranks: int) -> None:
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


def update_actor(ray_trainer: Any, c: Any, data: Any, update: Callable[[Any], Any]) -> None:
    """``RayPPOTrainer._update_actor`` where the release has it (the meta info, and for the engine
    worker the no-padding TensorDict with its mini-batch settings), else what 0.6's ``fit`` sets."""
    cls = ray_trainer.RayPPOTrainer
    group = types.SimpleNamespace(update_actor=update)
    impl = str(c.trainer.get("use_legacy_worker_impl", "auto"))
    trainer = types.SimpleNamespace(config=c, actor_rollout_wg=group, use_legacy_worker_impl=impl)
    trainer.distillation_config = None
    if hasattr(cls, "_update_actor"):
        cls._update_actor(trainer, data)
        return
    data.meta_info["multi_turn"] = c.actor_rollout_ref.rollout.multi_turn.enable
    data.meta_info["temperature"] = c.actor_rollout_ref.rollout.temperature  # the worker sets it in 0.6
    update(data)


def chunks(batch: Any, k: int) -> list[Any]:
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
    """verl's release as (major, minor, patch), each its part's leading digits (``0.7.1rc1`` → (0, 7, 1))."""
    parts = []
    for x in version("verl").split(".")[:3]:
        digits = len(x) - len(x.lstrip("0123456789"))
        parts.append(int(x[:digits]) if digits else 0)
    return tuple(parts)


def _forward_returns_dict() -> bool:
    """Whether the release's actor reads ``_forward_micro_batch``'s answer as ``{"log_probs", "entropys"}`` (0.7.1
    on) or unpacks ``(entropy, log_prob)`` (0.6, 0.7.0)."""
    return _release() >= (0, 7, 1)


def legacy_rank(c: Any, ranks: int, recorder: Recorder) -> Callable[[int, Any], Any]:
    """The legacy FSDP worker's actor on one rank: ``DataParallelPPOActor`` with the actor config as
    ``fsdp_workers.ActorRolloutRefWorker.__init__`` normalises it, a one-parameter module and SGD in
    place of the FSDP model, its ``_forward_micro_batch`` giving the probe's log-probabilities;
    ``update_policy`` itself splits, scales, accumulates and steps."""
    import torch
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    configs = [_legacy_actor_config(c, ranks) for _ in range(ranks)]  # built once, before the ranks fork
    as_dict = _forward_returns_dict()

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


def _legacy_forward(recorder: Recorder, rank: int, as_dict: bool) -> Callable[..., Any]:
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


def engine_rank(c: Any, ranks: int, recorder: Recorder) -> Callable[[int, Any], Any]:
    """The engine worker on one rank: ``TrainingWorker.train_mini_batch`` on a worker holding the
    probe engine (:func:`engine_probe_class`) and the loss ``ppo_loss`` with the actor config as
    ``engine_workers.ActorRolloutRefWorker.init_model`` builds it."""
    from functools import partial

    from omegaconf import OmegaConf
    from verl.utils.profiler import DistProfiler
    from verl.workers.engine_workers import TrainingWorker
    from verl.workers.utils.losses import ppo_loss

    probe = engine_probe_class()
    configs = [_engine_actor_config(c) for _ in range(ranks)]  # built once, before the ranks fork
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


def engine_probe_class() -> Any:
    """``FSDPEngineWithLMHead`` with what needs a GPU stack replaced: the FSDP model by a
    one-parameter module and SGD at lr 0, its forward by the probe's log-probabilities (then the loss
    as ``forward_step`` calls it), ``train_mode`` without offload.  ``forward_backward_batch``,
    ``train_batch``, ``optimizer_step`` and ``get_data_parallel_group`` are verl's."""
    import torch
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead
    from verl.workers.utils.padding import no_padding_2_padding

    base: Any = FSDPEngineWithLMHead

    def __init__(self: Any, engine_config: Any, optimizer_config: Any, rank: int, recorder: Recorder) -> None:
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

        def padded(grad: Any) -> Any:  # as a nested tensor: 0.7.0 takes no flat one
            return no_padding_2_padding(torch.nested.nested_tensor_from_jagged(grad, offsets=offsets), micro_batch)

        self.recorder.add(self.probe_rank, rows, leaf, padded)
        group = self.get_data_parallel_group()  # verl's own: the world's group, the ranks' processes
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
        "train_mode": lambda self, **_: contextlib.nullcontext(),
    }
    return type("VerlEngineProbe", (base,), methods)


@contextlib.contextmanager
def cpu_platform() -> Any:
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
def plain_attention() -> Any:
    """verl 0.7's engine worker unpads its batch with ``utils.attention_utils``'s ``unpad_input`` and
    ``index_first_axis`` (``workers.utils.padding``), which ``_get_attention_functions`` imports from
    ``flash_attn.bert_padding``, a CUDA package never installed here (verl 0.9's falls back to plain torch
    itself, ``_fallback_unpad_input`` …).  While the step runs, that one function of that one module
    returns the same plain-torch functions 0.9 falls back to; on the way out it is restored, with the four
    module globals it caches its answer in.  No ``flash_attn`` module is ever installed (``sys.modules``
    and the import system are untouched), so nothing else in the process sees one, during the step or
    after it; only verl's own attention helpers answer during the step where they would raise
    ImportError."""
    try:
        from verl.utils import attention_utils
    except ImportError:
        attention_utils = None
    names = ("_get_attention_functions", "_index_first_axis", "_pad_input", "_rearrange", "_unpad_input")
    needed = (
        attention_utils is not None
        and all(hasattr(attention_utils, name) for name in names)
        and not hasattr(attention_utils, "_fallback_unpad_input")
        and importlib.util.find_spec("flash_attn") is None
    )
    if not needed:
        yield
        return
    saved = {name: getattr(attention_utils, name) for name in names}
    attention_utils._get_attention_functions = lambda: (_index_first_axis, _pad_input, _rearrange, _unpad_input)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(attention_utils, name, value)


def _index_first_axis(tensor: Any, indices: Any) -> Any:
    """``flash_attn.bert_padding.index_first_axis`` in plain torch (verl 0.9's fallback)."""
    return tensor[indices]


def _unpad_input(hidden_states: Any, attention_mask: Any, unused_mask: Any = None) -> Any:
    """``flash_attn.bert_padding.unpad_input`` in plain torch (verl 0.9's fallback)."""
    import torch

    masks = attention_mask + unused_mask if unused_mask is not None else attention_mask
    seqlens = masks.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(masks.flatten(), as_tuple=False).flatten()
    cu_seqlens = torch.nn.functional.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return flat[indices], indices, cu_seqlens, int(seqlens.max()), attention_mask.sum(-1, dtype=torch.int32)


def _pad_input(hidden_states: Any, indices: Any, batch: int, seqlen: int) -> Any:
    """``flash_attn.bert_padding.pad_input`` in plain torch (verl 0.9's fallback)."""
    output = hidden_states.new_zeros(batch * seqlen, *hidden_states.shape[1:])
    output[indices] = hidden_states
    return output.view(batch, seqlen, *hidden_states.shape[1:])


def _rearrange(*args: Any, **kwargs: Any) -> Any:
    """``einops.rearrange`` (what ``flash_attn.bert_padding`` re-exports)."""
    from einops import rearrange

    return rearrange(*args, **kwargs)


@dataclass
class _Piece:
    """One micro-batch as the probe's forward saw it."""

    rank: int
    step: int
    micro: int
    rows: np.ndarray
    gradient: Callable[[], Any]
    """The gradient of its log-probabilities as (rows, width) response tokens (float64), None where no
    backward reached them."""


class Recorder:
    """The micro-batches of a call: each one's rank, optimizer step (counted per rank by the
    optimizer steps taken), index within (step, rank), rows and leaf log-probabilities.  A rank that
    runs in a process of its own records into its copy of the recorder; :meth:`export` and
    :meth:`absorb` carry what it recorded back."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.pieces: list[_Piece] = []
        self.steps: dict[int, int] = {}
        self.micro: dict[tuple[int, int], int] = {}
        self.base = 0

    def add(self, rank: int, rows: Any, leaf: Any, grid: Callable[[Any], Any]) -> None:
        step = self.base + self.steps.get(rank, 0)
        micro = self.micro.get((rank, step), 0)
        self.micro[(rank, step)] = micro + 1

        def gradient() -> Any:
            return None if leaf.grad is None else grid(leaf.grad).detach().double().numpy()

        self.pieces.append(_Piece(rank, step, micro, rows.numpy().copy(), gradient))

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

    def export(self, rank: int, since: int) -> dict[str, Any]:
        """What ``rank`` recorded from piece ``since`` on (its gradients read now), and its steps taken."""
        pieces = [(p.step, p.micro, p.rows, p.gradient()) for p in self.pieces[since:] if p.rank == rank]
        return {"steps": self.steps.get(rank, 0), "pieces": pieces}

    def absorb(self, rank: int, exported: dict[str, Any]) -> None:
        """Take what ``rank`` recorded in a copy of this recorder (:meth:`export`)."""
        for step, micro, rows, grad in exported["pieces"]:
            self.pieces.append(_Piece(rank, step, micro, rows, _constant(grad)))
            self.micro[(rank, step)] = micro + 1
        if exported["steps"]:
            self.steps[rank] = exported["steps"]

    def result(self, n: int, ranks: int) -> dict[str, np.ndarray]:
        """Per row: −gradient ÷ ranks (FSDP averages the ranks' gradients), step, rank, micro-batch (-1
        and no gradient for a row no micro-batch held)."""
        out: dict[str, np.ndarray] = {"coefficients": np.zeros((n, self.width))}
        out.update({key: np.full(n, -1, dtype=int) for key in ("step", "rank", "micro_batch")})
        for piece in self.pieces:
            grad = piece.gradient()
            if grad is not None:
                out["coefficients"][piece.rows] = -grad[:, : self.width] / ranks
            out["step"][piece.rows], out["rank"][piece.rows] = piece.step, piece.rank
            out["micro_batch"][piece.rows] = piece.micro
        return out


def _constant(value: Any) -> Callable[[], Any]:
    return lambda: value


@contextlib.contextmanager
def one_process_group(folder: str) -> Any:
    """A real ``torch.distributed`` group of one process (gloo) for the step's collectives; the caller's own
    group where it already has one."""
    import torch.distributed as dist

    if dist.is_initialized():
        yield
        return
    dist.init_process_group("gloo", init_method=f"file://{os.path.join(folder, 'group')}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def first_step_rows() -> dict[int, dict[str, Any]]:
    """Per answer of optimizer step 0 as the actor updated it (one rank): its coefficients −∂loss/∂log π per
    response token, its loss mask and its advantage; the generation batches of ``CASE`` one after the other."""
    warnings.filterwarnings("ignore")
    ray_trainer = trainer_module()
    with tempfile.TemporaryDirectory(prefix="exported-grpo-step-") as folder:
        config = None
        if CASE.get("config_text") is not None:
            config = os.path.join(folder, "config.yaml")
            with open(config, "w") as fh:
                fh.write(CASE["config_text"])
        c = step_config(compose_config(CASE["overrides"], config), CASE["updates"])
        G, width, prompts = int(CASE["group_size"]), int(CASE["width"]), int(CASE["prompts"])
        rewards, lengths = np.asarray(CASE["rewards"], dtype=float), np.asarray(CASE["lengths"], dtype=int)
        holes, n = np.asarray(CASE["holes"], dtype=int), len(CASE["rewards"])
        recorder, advantages, mask = Recorder(width), np.zeros(n), np.zeros((n, width))
        with one_process_group(folder), cpu_platform(), plain_attention(), contextlib.redirect_stdout(io.StringIO()):
            run = (engine_rank if engine_path(c) else legacy_rank)(c, 1, recorder)
            for start in range(0, n - prompts * G + 1, prompts * G):
                rows = np.arange(start, start + prompts * G)
                data = rollout(rows, [G] * prompts, rewards, lengths, holes, c, width, int(CASE["prompt"]))
                balance(ray_trainer, c, data, 1)
                data = trainer_advantage(ray_trainer, c.algorithm, data, G)
                where = (data.batch["responses"][:, 0] - MARK).numpy()
                advantages[where] = data.batch["advantages"][:, 0].double().numpy()
                mask[where] = data.batch["response_mask"].double().numpy()
                update_actor(ray_trainer, c, data, lambda batch: run(0, chunks(batch, 1)[0]))
                recorder.next_generation()
        out = recorder.result(n, 1)
    first = np.flatnonzero(out["step"] == 0)
    return {
        int(i): {"coefficients": out["coefficients"][i].tolist(), "mask": mask[i].tolist(), "advantage": advantages[i]}
        for i in first
    }
