"""ms-swift driver: ms-swift's own ``GRPOTrainer``, built from its arguments as ``swift rlhf --rlhf_type grpo`` reads
them, on a tiny model on the CPU.

- config: the user's ``--set KEY=VALUE`` pairs as ``--KEY VALUE`` (and ``--config FILE``, a YAML or JSON file, as
  ``swift rlhf FILE`` reads it: ``swift.cli.main.parse_yaml_args``), parsed by ms-swift's own ``SwiftRLHF``
  pipeline (``RLHFArguments``), which also builds the model, template, dataset and trainer exactly as a run does;
  an unknown key or a value ms-swift refuses is its own error, one line;
- model: a one-layer Qwen2 with a byte-level tokenizer, written from a config to a temporary folder (no download);
  ms-swift loads it (and its reference model) from there, as it loads a user's checkpoint, and caches its dataset
  there too (``MODELSCOPE_CACHE``); what the build sets in the environment is undone after it;
- generation: the trainer's rollout engine (``trainer.engine.infer``, HF generate) is stood in by the probe's
  answers: answer *i* is its row's marker token, then filler, ``lengths[i]`` tokens in all, finish reason 'stop'
  (or 'length' for an answer cut at the budget); everything after generation is ms-swift's own: the reward
  call, ``_compute_advantages`` (gathered over the ranks), encoding and collation, the old and reference
  log-probabilities, ``num_items_in_batch``;
- rewards: a reward function registered in ms-swift's ``orms`` that returns the audit's reward of each row;
- advantages: ``_rollout_samples``, ``_score_completions`` and ``_compute_advantages`` on the whole batch (the
  whole ``_generate_and_score_completions`` where ``kl_in_reward`` reads the log-probabilities);
- gradient: ``_generate_and_score_completions`` on the whole batch as one micro-batch, then the trainer's
  ``compute_loss`` differentiated by autograd with respect to each completion token's log-probability, as
  ``Trainer.training_step`` runs it with one accumulation step;
- step (:mod:`grpo_identity.checks.measure.steps`): ``GRPOTrainer.train()`` itself: the sampler, ``_prepare_inputs``
  (generation batches of ``steps_per_generation`` micro-batches), the ``Trainer``'s gradient accumulation (its
  division by the accumulation steps) and ``accelerate``'s data parallelism over ``NPROC_PER_NODE`` CPU processes
  of one gloo group, at ``learning_rate`` 0 (every micro-batch on-policy).

``num_generations`` is the group size of each probe batch; the step runs the user's (4 where unset), with a
micro-batch of one group unless the user sets ``per_device_train_batch_size``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any, Iterator

import numpy as np

from grpo_identity.checks.frameworks import (
    RESPONSE_LENGTH,
    STEP_GROUP_SIZE,
    AdapterError,
    FrameworkSpec,
    cispo_cap,
    patched_attributes,
    whole_number,
)
from grpo_identity.checks.frameworks._ranks import (
    ProcessRanks,
    RankProcessError,
    accelerate_rank,
    gather_objects,
    rank_index,
)
from grpo_identity.checks.frameworks.contract import Built, Difference, DriverInfo, DriverSettings, StepPlan, per_row

__all__ = ["DIFFERENCES", "import_check", "build", "SwiftTarget"]

_TRAINER = "swift.rlhf_trainers.grpo_trainer"
#: where ms-swift's releases differ in the code the driver reads
DIFFERENCES = {
    "layout": Difference(
        _TRAINER,
        "4.0.0",
        "the GRPO trainer's module (3.x: swift.trainers.rlhf_trainer.grpo_trainer), which the "
        "driver builds through SwiftRLHF",
    ),
    "samples": Difference(
        f"{_TRAINER}:GRPOTrainer._rollout_samples",
        "4.4.0",
        "the rollout as samples (to_samples, then generation), which _score_completions scores and "
        "_compute_advantages reads: the driver's advantage path (before it the rollout works on dicts)",
    ),
    "undo_accumulation": Difference(
        f"{_TRAINER}:GRPOTrainer._undo_gradient_accumulation_scaling",
        "4.6.0",
        "dapo, cispo and fipo multiply their loss by the accumulation steps, which the Trainer then divides by "
        "(ms-swift PR #10116 for issue #10117; before it those losses were divided by them twice)",
    ),
}

#: the reward function's name in ms-swift's ``orms``
REWARD = "grpo_identity_probe"
#: rows a step may hold (each has a marker token of its own in the tiny tokenizer)
MAX_ROWS = 512
#: the launcher's setting (``NPROC_PER_NODE=N swift rlhf …``), with its bounds on this machine
LAUNCH_KEY, MAX_RANKS = "NPROC_PER_NODE", 4
#: what the driver sets whatever the user set: the tiny model and its data, the CPU, short answers, no logging,
#: checkpoints or Hub; learning rate 0 and one pass over each generation batch (every micro-batch on-policy)
FORCED = {
    "rlhf_type": "grpo", "model_type": "qwen2", "template": "qwen2_5", "tuner_type": "full", "torch_dtype": "float32",
    "use_cpu": "true", "check_model": "false", "split_dataset_ratio": "0", "reward_funcs": REWARD,
    "max_completion_length": str(RESPONSE_LENGTH), "use_vllm": "false", "report_to": "none", "save_strategy": "no",
    "logging_steps": "1000000", "disable_tqdm": "true", "dataloader_num_workers": "0",
    "dataloader_persistent_workers": "false", "learning_rate": "0", "num_iterations": "1",
}  # fmt: skip
#: the driver's folder-valued settings (its own temporary folder), reported as forced
PATHS = ("model", "dataset", "output_dir")
#: ms-swift's generation-batch settings (it takes either, or both where they agree)
_SPLIT = ("steps_per_generation", "generation_batch_size")
#: the step's split settings, and the driver's value where the user set none
SPLIT_KEYS = {
    "num_generations": STEP_GROUP_SIZE,
    "per_device_train_batch_size": STEP_GROUP_SIZE,
    "gradient_accumulation_steps": 2,
}
#: settings whose code the driver does not run: (setting, the values it runs, why)
UNSUPPORTED = (
    ("dynamic_sample", (False,), "it resamples groups with a generator the driver stands in"),
    ("multi_turn_scheduler", (None,), "multi-turn rollouts"),
    ("sequence_parallel_size", (1,), "sequence parallelism needs GPUs"),
    ("deepspeed", (None,), "DeepSpeed needs GPUs"),
    ("use_liger_kernel", (False,), "the Liger loss needs GPUs"),
    ("teacher_model", (None,), "a teacher model"),
    ("use_gym_env", (False, None), "a gym environment's rewards"),
)
_STATE: dict[str, Any] = {"rewards": None}


def import_check() -> None:
    """Import what the driver needs (a release environment's smoke test)."""
    import importlib

    _quiet()
    DIFFERENCES["layout"].require(f"ms-swift {version('ms-swift')}")
    DIFFERENCES["samples"].require(f"ms-swift {version('ms-swift')}")
    importlib.import_module(_TRAINER)
    importlib.import_module("swift.pipelines.train.rlhf")


def build(spec: FrameworkSpec, level: str) -> SwiftTarget:
    """The target of ``spec`` at ``level`` (:mod:`.contract`)."""
    return SwiftTarget(spec, level)


def _quiet() -> None:
    """ms-swift's INFO lines (from its import on) and transformers' progress bars and notes are not the audit's."""
    os.environ.setdefault("LOG_LEVEL", "ERROR")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


# --- the tiny model, its data and the reward -------------------------------------------------------------------------
def _write_model(folder: str, groups: int) -> None:
    """A one-layer Qwen2 and a byte-level tokenizer (the 256 bytes, three specials, :data:`MAX_ROWS` row markers)
    saved to ``folder``, and a dataset of ``groups`` prompts ``g0``, ``g1``, … (``data.jsonl``)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    _quiet()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = {t: i for i, t in enumerate(specials + sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", additional_special_tokens=specials[1:]
    )
    tokenizer.add_tokens([f"<r{i}>" for i in range(MAX_ROWS)])
    tokenizer.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    tokenizer.save_pretrained(folder)
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=64, tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    Qwen2ForCausalLM(config).save_pretrained(folder)
    with open(os.path.join(folder, "data.jsonl"), "w") as fh:
        fh.writelines(json.dumps({"messages": [{"role": "user", "content": f"g{g}"}]}) + "\n" for g in range(groups))


def _register_reward() -> None:
    """The audit's rewards as an ms-swift reward function: each answer's text is its row (``r12``)."""
    from swift.rewards import orms

    try:
        from swift.rewards import ORM
    except ImportError:
        from swift.rewards.orm import ORM

    class ProbeReward(ORM):
        def __call__(self, completions: list[str], **kwargs: Any) -> list[float]:
            return [float(_STATE["rewards"][int(c.split()[0][1:])]) for c in completions]

    orms[REWARD] = ProbeReward


# --- the configuration -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Config:
    """A ``swift rlhf`` config file as ms-swift reads it (``parse_yaml_args``): its arguments, in argv form, and the
    launcher's ``NPROC_PER_NODE`` from its ``ENV`` block (which is otherwise not applied here)."""

    argv: tuple[str, ...] = ()
    ranks: str | None = None

    @classmethod
    def read(cls, path: str | None) -> _Config:
        if path is None:
            return cls()
        from swift.cli.main import parse_yaml_args

        if not path.endswith((".yaml", ".yml", ".json")):
            raise AdapterError(f"--config {path}: ms-swift reads a .yaml, .yml or .json file (swift rlhf FILE)")
        with _environment_restored():
            os.environ.pop(LAUNCH_KEY, None)
            try:
                argv = [path]
                parse_yaml_args(argv)  # the path replaced by the file's --key value pairs; its ENV block applied
                ranks = os.environ.get(LAUNCH_KEY)
            except (OSError, ValueError, TypeError, AttributeError) as exc:
                raise AdapterError(f"--config {path}: not a mapping of swift rlhf arguments ({exc})") from None
        if argv == [path]:
            raise AdapterError(f"--config {path}: the file holds no arguments")
        return cls(tuple(str(a) for a in argv), ranks)

    def keys(self) -> dict[str, str]:
        """key → value (a list's items joined by spaces), and ``NPROC_PER_NODE`` where the ENV block sets it."""
        keys: dict[str, str] = {}
        key = None
        for arg in self.argv:
            if arg.startswith("--"):
                key = arg[2:]
                keys[key] = ""
            elif key is not None:
                keys[key] = f"{keys[key]} {arg}".strip()
        return keys if self.ranks is None else {**keys, LAUNCH_KEY: self.ranks}


def _user_keys(spec: FrameworkSpec) -> dict[str, str]:
    """The user's arguments, key → value: the config file's, then the ``--set`` pairs (they win)."""
    return {**_Config.read(spec.config).keys(), **dict(spec.sets)}


def _split_values(user: dict[str, str]) -> tuple[dict[str, int], dict[str, int]]:
    """The split settings of :data:`SPLIT_KEYS` (the user's, else the driver's: a micro-batch of one group, two
    accumulated), and those the driver chose."""
    values = {k: whole_number(user[k], k, who="ms-swift") if k in user else v for k, v in SPLIT_KEYS.items()}
    if "per_device_train_batch_size" not in user:
        values["per_device_train_batch_size"] = values["num_generations"]
    return values, {k: v for k, v in values.items() if k not in user}


def _settings(spec: FrameworkSpec) -> DriverSettings:
    """What the driver sets beside the user (the report's driver settings)."""
    user = _user_keys(spec)
    shown = {k: {"driver": v, "yours": user.get(k)} for k, v in FORCED.items()}
    shown.update({k: {"driver": "a temporary folder of the driver's", "yours": user.get(k)} for k in PATHS})
    return DriverSettings(forced=shown, defaults=_split_values(user)[1], note="num_generations set by each probe")


def _trainer(spec: FrameworkSpec, folder: str, split: dict[str, int]) -> Any:
    """ms-swift's GRPOTrainer as ``swift rlhf`` builds it from the user's arguments, then ``split`` and
    :data:`FORCED` (they win), on the model and data in ``folder`` (:func:`_write_model`), before it trains; its
    engine stood in.  The build's changes to the environment are undone, its dataset cache is ``folder``'s."""
    _quiet()
    from swift.pipelines.train.rlhf import SwiftRLHF
    from swift.utils import get_logger

    class Build(SwiftRLHF):
        def train(self, trainer: Any) -> Any:  # SwiftRLHF.run() ends by training: hand the trainer back instead
            return trainer

    get_logger().setLevel("ERROR")
    _register_reward()
    paths = {"model": folder, "dataset": os.path.join(folder, "data.jsonl"), "output_dir": os.path.join(folder, "out")}
    argv = [*_Config.read(spec.config).argv, *(a for k, v in spec.sets if k != LAUNCH_KEY for a in (f"--{k}", v))]
    argv += [a for k, v in {**split, **paths, **FORCED}.items() for a in (f"--{k}", str(v))]
    try:
        with (
            _environment_restored(),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            os.environ["MODELSCOPE_CACHE"] = os.path.join(folder, "cache")  # where ms-swift's dataset loader caches
            trainer = Build(argv).run()
    except (ValueError, TypeError, AssertionError, SystemExit) as exc:  # its arguments' checks and its parser
        raise AdapterError(f"ms-swift {version('ms-swift')} rejects the arguments: {_last_line(exc)}") from None
    except Exception as exc:
        why = f"{type(exc).__name__}: {_last_line(exc)}"
        raise AdapterError(f"ms-swift {version('ms-swift')} could not build its trainer here: {why}") from None
    _refuse_unsupported(trainer.args)
    trainer.engine.infer = Rollout(trainer)
    return trainer


@contextlib.contextmanager
def _environment_restored() -> Iterator[None]:
    """The process environment as it was before the block, whatever ms-swift set or removed inside it."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _last_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1] if text else repr(exc)


def _refuse_unsupported(args: Any) -> None:
    for key, runs, why in UNSUPPORTED:
        value = getattr(args, key, runs[0])
        if value not in runs:
            raise AdapterError(f"ms-swift: the driver does not run {key}={value} ({why}): leave {key} unset")


# --- generation, stood in -------------------------------------------------------------------------------------------
class Rollout:
    """``engine.infer`` of a trainer: for each request, its row's answer (:data:`_STATE`'s lengths, truncation and
    group size).  A request's row is its prompt's group (``gN``) and the answer's member index, counted in the order
    the trainer gathers the ranks' rows (each answer of a group its own member)."""

    def __init__(self, trainer: Any) -> None:
        self.marker = int(trainer.processing_class.convert_tokens_to_ids("<r0>"))
        self.filler = int(trainer.processing_class.convert_tokens_to_ids("a"))
        self.members: dict[int, int] = {}
        #: per row, the log-probabilities the engine reports as vLLM's (``choice.logprobs``; None: none)
        self.logps: dict[int, list[float] | None] | None = None

    def __call__(self, requests: list[Any], request_config: Any = None, **kwargs: Any) -> list[Any]:
        from swift.infer_engine import protocol as p

        rows = self._members([_group_of(r.messages) for r in requests])
        out = []
        for row in rows:
            ell = int(_STATE["lengths"][row])
            ids = [self.marker + row % MAX_ROWS] + [self.filler] * (ell - 1)
            finish = "length" if _STATE["truncated"][row] else "stop"
            message = p.ChatMessage(role="assistant", content=f"r{row}")
            choice = p.ChatCompletionResponseChoice(index=0, message=message, finish_reason=finish, token_ids=ids)
            if self.logps is not None:
                lps = self.logps[row]
                content = None if lps is None else [{"token": "", "logprob": v, "bytes": []} for v in lps]
                choice.logprobs = None if content is None else {"content": content}
            usage = p.UsageInfo(prompt_tokens=0, completion_tokens=ell, total_tokens=ell)
            out.append(p.ChatCompletionResponse(model="tiny", choices=[choice], usage=usage))
        return out

    def _members(self, groups: list[int]) -> list[int]:
        """The rows of this rank's requests (``groups``: each one's prompt group), counted across the ranks."""
        everyone = gather_objects(groups)
        counts = dict(self.members)
        for g in [g for part in everyone[: rank_index()] for g in part]:
            counts[g] = counts.get(g, 0) + 1
        rows = []
        for g in groups:
            rows.append(g * _STATE["G"] + min(counts.get(g, 0), _STATE["G"] - 1))
            counts[g] = counts.get(g, 0) + 1
        for g in [g for part in everyone for g in part]:
            self.members[g] = self.members.get(g, 0) + 1
        return rows


def _group_of(messages: list[dict[str, Any]]) -> int:
    prompt = next(m["content"] for m in messages if m["role"] == "user")
    return int(str(prompt).split()[-1][1:])


def _set_probe(rewards: Any, lengths: Any, G: int, truncated: Any = None) -> None:
    """The answers the reward function and the engine stand-in read (:data:`_STATE`)."""
    r = np.asarray(rewards, dtype=np.float64).reshape(-1)
    _STATE.update(rewards=r, lengths=np.asarray(lengths, dtype=int), G=int(G))
    _STATE["truncated"] = np.zeros(r.size, dtype=bool) if truncated is None else np.asarray(truncated, dtype=bool)


# --- the target --------------------------------------------------------------------------------------------------
class SwiftTarget(Built):
    """ms-swift's GRPOTrainer from ``spec``'s arguments (module docstring)."""

    def __init__(self, spec: FrameworkSpec, level: str) -> None:
        self.spec, self.layout = spec, _Layout.of(spec, "split")
        self._folder = tempfile.TemporaryDirectory(prefix="grpo-identity-swift-")
        _write_model(self._folder.name, MAX_ROWS // 2)
        # one process holding every rank's batch: ms-swift checks its batch sizes against the world it sees
        bs = self.layout.sets["per_device_train_batch_size"]
        self.trainer = _trainer(
            spec, self._folder.name, {**self.layout.sets, "per_device_train_batch_size": bs * self.layout.ranks}
        )
        args = self.trainer.args
        self.layout.check(args)
        details = {
            "estimator": str(getattr(args, "advantage_estimator", "grpo")),
            "scale_rewards": str(getattr(args, "scale_rewards", "")),
            "loss_type": str(args.loss_type),
            "beta": float(args.beta),
            "window_losses_undo_accumulation": DIFFERENCES["undo_accumulation"].present(),
        }
        info = DriverInfo(
            "ms-swift", version("ms-swift"), "GRPOTrainer._rollout_samples, _score_completions, _compute_advantages",
            dict(spec.sets), _settings(spec), ("the rollout engine (engine.infer)",), details=details,
        )  # fmt: skip
        if level == "gradient":
            entry = "GRPOTrainer._generate_and_score_completions, then compute_loss (autograd); the step: train()"
            self.correction = rollout_settings(args)
            if self.correction:  # ms-swift turns its correction on by the installed vLLM's version
                details["rollout_log_probs"] = "the probe's step only: the engine reports them, vLLM >= 0.10.2 stood in"
            info = info.with_step(self.layout.plan(spec, args), entry=entry, lengths_optional=True,
                                  rollout_correction=self.correction)  # fmt: skip
        super().__init__(info, level)

    @contextlib.contextmanager
    def _probe(self, rewards: np.ndarray, G: int, lengths: Any) -> Iterator[list[dict[str, Any]]]:
        """The trainer set for one probe batch (contiguous groups of G, one generation batch of one micro-batch)
        and the batch's dataset rows."""
        import torch

        trainer = self.trainer
        _set_probe(rewards, lengths, G)
        trainer.num_generations = trainer.num_generations_eval = int(G)
        trainer.engine.infer.members.clear()
        spg = trainer.args.steps_per_generation
        trainer.args.steps_per_generation = 1
        trainer.model.train()
        try:
            with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
                yield [{"messages": [{"role": "user", "content": f"g{i // G}"}]} for i in range(len(rewards))]
        finally:
            trainer.args.steps_per_generation = spg

    def advantages(self, rewards: np.ndarray, G: int, scores: Any = None) -> np.ndarray:
        """``_rollout_samples``, ``_score_completions`` and ``_compute_advantages``, as the trainer runs them; the
        encoding and the log-probabilities the advantages do not read are left out, except where ``kl_in_reward``
        subtracts the KL (then the whole ``_generate_and_score_completions``)."""
        r = np.asarray(rewards, dtype=np.float64).reshape(-1)
        trainer = self.trainer
        with self._probe(r, G, np.ones(r.size, dtype=int)) as rows:
            if trainer.kl_in_reward and trainer.beta != 0.0:
                return trainer._generate_and_score_completions(rows)[0]["grpo_batch"].advantages[:, 0].double().numpy()
            samples = trainer._score_completions(trainer._rollout_samples(rows))
            return trainer._compute_advantages(samples, trainer._rewards_per_func, []).double().numpy()

    def gradient(self, rewards: np.ndarray, G: int, lengths: np.ndarray) -> dict[str, Any]:
        """−∂loss/∂log π per token of the batch as one micro-batch (``Trainer.training_step`` with one accumulation
        step: ``current_gradient_accumulation_steps`` 1)."""
        r = np.asarray(rewards, dtype=np.float64).reshape(-1)
        with self._probe(r, G, np.asarray(lengths, dtype=int)) as rows:
            batch = self.trainer._generate_and_score_completions(rows)[0]
        record = _loss_record(self.trainer, batch, accumulation=1)
        out = per_row([record], r.size, 1, f"ms-swift {version('ms-swift')}")
        return {k: out[k] for k in ("advantages", "coefficients", "mask")}

    def three_policy(self, rewards: np.ndarray, G: int, lengths: np.ndarray, rollout: dict[str, Any]) -> dict[str, Any]:
        """Two scorings of the batch: the first reads ms-swift's log π_old of the probe's answers; in the second the
        engine stand-in reports log π_old − X as vLLM's log-probabilities (None: none), which ms-swift turns into
        ``rollout_per_token_logps``, with the correction as configured (vLLM ≥ 0.10.2 stood in: ms-swift enables it
        by the installed vLLM's version) or off (the mode None); then ``compute_loss``."""
        if not self.correction:
            raise NotImplementedError("ms-swift: this config sets no rollout_importance_sampling_mode")
        r, lengths = np.asarray(rewards, dtype=np.float64).reshape(-1), np.asarray(lengths, dtype=int)
        trainer, x = self.trainer, rollout["log_ratio"]
        with self._probe(r, G, lengths) as rows:
            first = trainer._generate_and_score_completions(rows)[0]["grpo_batch"]
        mask = first.completion_mask.detach().double().numpy()
        old = first.old_per_token_logps.detach().double().numpy() * mask
        live = [np.flatnonzero(m > 0) for m in mask]
        reported = {i: None if x is None else (old[i, t] - np.asarray(x, dtype=np.float64)[i, : t.size]).tolist()
                    for i, t in enumerate(live)}  # fmt: skip
        mode = trainer.rollout_importance_sampling_mode if rollout["correct"] else None
        patches = [(trainer.engine.infer, "logps", reported), (trainer, "rollout_importance_sampling_mode", mode),
                   (trainer, "disable_rollout_importance_sampling", False)]  # fmt: skip
        with patched_attributes(patches):
            with self._probe(r, G, lengths) as rows:
                batch = trainer._generate_and_score_completions(rows)[0]
            record = _loss_record(trainer, batch, accumulation=1)
        out = per_row([record], r.size, 1, f"ms-swift {version('ms-swift')}")
        logps = np.zeros_like(out["mask"])
        logps[:, : old.shape[1]] = old
        cols = slice(0, RESPONSE_LENGTH)
        return {"advantages": out["advantages"], "coefficients": out["coefficients"][:, cols],
                "mask": out["mask"][:, cols], "old_logps": logps[:, cols]}  # fmt: skip

    def step(self, rewards: np.ndarray, G: int, lengths: np.ndarray, request: dict[str, Any]) -> dict[str, Any]:
        layout = _Layout.of(self.spec, request.get("layout", "split"))
        if int(G) != layout.group_size:
            layout = _Layout.of(self.spec, request.get("layout", "split"), int(G))
        job = _Job(
            np.asarray(rewards, dtype=float).reshape(-1), np.asarray(lengths, dtype=int), request.get("truncated")
        )
        if job.rewards.size > MAX_ROWS:
            raise AdapterError(f"ms-swift: the driver's step holds at most {MAX_ROWS} answers")
        with tempfile.TemporaryDirectory(prefix="grpo-identity-swift-step-") as folder:
            _write_model(folder, job.rewards.size // layout.group_size)  # once: the ranks load it as one run does
            if layout.ranks == 1:
                records = _run_here(self.spec, layout, job, folder)
            else:
                try:
                    replies = ProcessRanks(layout.ranks).run(
                        lambda rank: _run_here(self.spec, layout, job, folder, accelerate_rank(rank, layout.ranks))
                    )
                except RankProcessError as exc:
                    raise AdapterError(f"ms-swift {version('ms-swift')} on {layout.ranks} processes: {exc}") from None
                records = [rec for reply in replies for rec in reply]
        return per_row(records, job.rewards.size, layout.ranks, f"ms-swift {version('ms-swift')}")


#: ms-swift's modes as its documentation defines them (docs/source_en/Instruction/GRPO/AdvancedResearch/
#: training_inference_mismatch.md: the sequence level is the geometric mean [π/π_vLLM]^(1/|y|) broadcast to each
#: token; truncate min(w, τ); mask w where w ≤ τ, else 0)
DOCUMENTED_ESTIMATORS = {
    "token_truncate": "token_truncate",
    "token_mask": "token_mask",
    "sequence_truncate": "geometric_truncate",
    "sequence_mask": "geometric_mask",
}


def rollout_settings(args: Any) -> dict[str, Any] | None:
    """``info["rollout_correction"]``: ``rollout_importance_sampling_mode`` as its documentation defines it
    (:data:`DOCUMENTED_ESTIMATORS`), capped at ``rollout_importance_sampling_threshold``; None where no mode is set."""
    mode = getattr(args, "rollout_importance_sampling_mode", None)
    if mode is None:
        return None
    cap = float(args.rollout_importance_sampling_threshold)
    setting = f"rollout_importance_sampling_mode={mode}, rollout_importance_sampling_threshold={cap:g}"
    return {"estimator": DOCUMENTED_ESTIMATORS.get(str(mode)), "cap": cap, "low": 0.0, "setting": setting}


# --- the loss, read -----------------------------------------------------------------------------------------------
def _loss_record(trainer: Any, batch: dict[str, Any], accumulation: int) -> dict[str, Any]:
    """One micro-batch through ``compute_loss`` as ``training_step`` runs it (the loss divided by ``accumulation``,
    the Trainer's ``current_gradient_accumulation_steps``), differentiated: its rows and their coefficients."""
    from grpo_identity.checks.frameworks.exported.trl import retain_logps

    kept: dict[str, Any] = {}
    retain_logps(trainer, kept)
    trainer.current_gradient_accumulation_steps = accumulation
    trainer.model.zero_grad()
    try:
        with trainer.compute_loss_context_manager():
            loss = trainer.compute_loss(trainer.model, batch)
        (loss / accumulation).backward()
    finally:
        del trainer._get_per_token_logps_and_entropies  # the instance's wrapper: the class's method again
    record = _record(trainer, batch, kept["logps"], step=0, micro=0)
    n = len(record["rows"])  # one micro-batch in the probe's order: its markers repeat past MAX_ROWS answers
    if record["rows"] != [i % MAX_ROWS for i in range(n)]:
        raise AdapterError(f"ms-swift {version('ms-swift')}: the probe's micro-batch is not in the order it was given")
    return {**record, "rows": list(range(n))}


def _record(trainer: Any, batch: dict[str, Any], logps: Any, step: int, micro: int) -> dict[str, Any]:
    """A micro-batch's rows (the marker token of each answer: the row modulo :data:`MAX_ROWS`), advantages,
    coefficients and loss mask."""
    ids = batch["model_inputs"]["input_ids"]
    marker = int(trainer.processing_class.convert_tokens_to_ids("<r0>"))
    rows = [int(next(t for t in row.tolist() if marker <= t < marker + MAX_ROWS)) - marker for row in ids]
    grpo = batch["grpo_batch"]
    if logps.grad is None:
        raise AdapterError(f"ms-swift {version('ms-swift')}: compute_loss's log-probabilities got no gradient")
    return {
        "rows": rows,
        "step": step,
        "micro": micro,
        "rank": rank_index(),
        "advantages": grpo.advantages.detach().double().reshape(len(rows), -1)[:, 0].tolist(),
        "coefficients": (-logps.grad).detach().double().tolist(),
        "mask": grpo.completion_mask.detach().double().tolist(),
    }


# --- the step ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Layout:
    """A step layout: the split settings every rank's arguments get, and the step's numbers."""

    sets: dict[str, int]
    ranks: int
    group_size: int
    step_rows: int
    generation_rows: int
    chosen: dict[str, int] = field(default_factory=dict)

    @property
    def per_generation(self) -> int:
        """Micro-batches per generation batch."""
        return max(1, self.generation_rows // (self.sets["per_device_train_batch_size"] * self.ranks))

    @classmethod
    def of(cls, spec: FrameworkSpec, name: str, group_size: int | None = None) -> _Layout:
        """The user's split (the driver's :data:`SPLIT_KEYS` where unset) or the unsplit one: each optimizer step of
        the split as one micro-batch on one process."""
        user = _user_keys(spec)
        values, chosen = _split_values(user)
        if group_size is not None:
            values["num_generations"] = group_size
        ranks = whole_number(user.get(LAUNCH_KEY, "1"), LAUNCH_KEY, most=MAX_RANKS, who="ms-swift")
        per_generation = whole_number(
            user.get(_SPLIT[0], values["gradient_accumulation_steps"]), _SPLIT[0], who="ms-swift"
        )
        if "generation_batch_size" in user:
            rows = whole_number(user["generation_batch_size"], "generation_batch_size", who="ms-swift")
            per_generation = max(1, rows // (values["per_device_train_batch_size"] * ranks))
        bs, ga = values["per_device_train_batch_size"], values["gradient_accumulation_steps"]
        step_rows, generation_rows = bs * ga * ranks, bs * per_generation * ranks
        if name == "split":
            return cls(values, ranks, values["num_generations"], step_rows, generation_rows, chosen)
        unsplit = {"num_generations": values["num_generations"], "per_device_train_batch_size": step_rows}
        per_step = max(1, generation_rows // step_rows)  # both of ms-swift's generation settings, consistent
        unsplit.update(gradient_accumulation_steps=1, steps_per_generation=per_step)
        unsplit.update(generation_batch_size=per_step * step_rows)
        return cls(unsplit, 1, values["num_generations"], step_rows, generation_rows)

    def check(self, args: Any) -> None:
        """The layout's generation batch is the one ms-swift derived from the same settings (its arguments, parsed
        with every rank's batch in one process)."""
        theirs = (int(args.generation_batch_size), int(args.steps_per_generation))
        if theirs != (self.generation_rows, self.per_generation):
            raise AdapterError(
                f"ms-swift {version('ms-swift')}: its generation batch is {theirs[0]} answers in {theirs[1]} "
                f"micro-batches, the driver read {self.generation_rows} in {self.per_generation}: it cannot read "
                "this step"
            )

    def plan(self, spec: FrameworkSpec, args: Any) -> StepPlan:
        unsplit = _Layout.of(spec, "unsplit", self.group_size)
        settings = {**self.sets, LAUNCH_KEY: self.ranks}
        return StepPlan(
            self.group_size, self.step_rows, self.generation_rows,
            split=", ".join(f"{k}={v}" for k, v in settings.items()),
            unsplit=", ".join(f"{k}={v}" for k, v in unsplit.sets.items()),
            settings=settings, ranks=self.ranks, chosen=self.chosen, objective=objective(args), truncation=True,
        )  # fmt: skip


def objective(args: Any) -> dict[str, Any] | None:
    """The documented objective of ``loss_type`` (:data:`grpo_identity.objectives.LOSS_SETTINGS`), its length
    budget ``max_completion_length``; cispo's importance-weight cap ``epsilon_high`` (``epsilon`` where unset)."""
    from grpo_identity.objectives import objective_of

    found = objective_of("ms-swift", "loss_type", str(args.loss_type))
    if found is None:
        return None
    return found.for_step(float(args.max_completion_length or RESPONSE_LENGTH), cispo_cap(str(args.loss_type), args))


@dataclass(frozen=True)
class _Job:
    """A step request's answers: rewards, lengths, and which were cut at the budget (None: none)."""

    rewards: np.ndarray
    lengths: np.ndarray
    truncated: Any = None


def _run_here(spec: FrameworkSpec, layout: _Layout, job: _Job, folder: str, rank: int = 0) -> list[dict[str, Any]]:
    """One process's share of the step: ``GRPOTrainer.train()`` for the rows' optimizer steps, each micro-batch's
    record."""
    import warnings

    warnings.filterwarnings("ignore")
    n = job.rewards.size
    _set_probe(job.rewards, job.lengths, layout.group_size, job.truncated)
    steps = max(1, n // layout.step_rows)
    trainer = _trainer(spec, folder, {**layout.sets, "max_steps": steps})  # the layout's settings win
    records: list[dict[str, Any]] = []
    with _kept(trainer, records), contextlib.redirect_stdout(io.StringIO()):
        trainer.train()
    for rec in records:
        rec["rank"] = rank
        rec["generation"] = (
            rec["step"] * layout.sets["gradient_accumulation_steps"] + rec["micro"]
        ) // layout.per_generation
    return records


@contextlib.contextmanager
def _kept(trainer: Any, records: list[dict[str, Any]]) -> Iterator[None]:
    """Each ``compute_loss`` call's micro-batch kept with its log-probabilities, read after the step's backward
    (:func:`_record`): the gradient the optimizer receives, accumulation included."""
    from grpo_identity.checks.frameworks.exported.trl import retain_logps

    pending: dict[str, Any] = {}
    retain_logps(trainer, pending)
    kept: list[tuple[int, Any, Any]] = []
    original = trainer.compute_loss

    def compute_loss(model: Any, inputs: Any, *a: Any, **k: Any) -> Any:
        pending.clear()
        value = original(model, inputs, *a, **k)
        kept.append((trainer.state.global_step, pending.get("logps"), inputs))
        return value

    trainer.compute_loss = compute_loss
    yield
    micro, last = 0, None
    for step, logps, inputs in kept:
        micro, last = (micro + 1 if step == last else 0), step
        if logps is None:
            raise AdapterError(
                f"ms-swift {version('ms-swift')}: compute_loss read no log-probabilities the driver knows"
            )
        records.append(_record(trainer, inputs, logps, step, micro))
