"""TRL driver: ``GRPOTrainer`` itself, built from a ``GRPOConfig`` that TRL's own parser reads.

- config: ``trl.TrlParser((GRPOConfig,)).parse_args_and_config`` on ``--KEY VALUE`` pairs (and
  ``--config FILE``, a YAML mapping, exactly as ``trl grpo --config`` reads it); an unknown key is
  the parser's own error;
- model: a one-layer Llama built from a config and a word-level tokenizer (no download);
- advantages: the trainer's ``_generate_and_score_completions`` on n_groups × G rows (as its
  repeat sampler lays them out) with a reward function that returns the audit's rewards;
- gradient: those same inputs with completions cut to different lengths (an EOS at that position,
  the mask after it 0, as generation leaves them), then the trainer's ``compute_loss``
  differentiated by autograd with respect to each completion token's log-probability (the
  trainer's log-probability method is wrapped to keep that tensor's gradient; nothing else changes).

``num_generations`` is the group size of each probe batch: the audit sets it per call.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
import warnings
from importlib.metadata import version
from typing import Any, Callable

import numpy as np

from grpo_identity.checks.frameworks import RESPONSE_LENGTH, AdapterError, FrameworkSpec

__all__ = ["import_check", "grpo_config", "advantage_target", "gradient_target", "COMPLETION_LENGTH"]

#: completion length budget (tokens) of the gradient probes
COMPLETION_LENGTH = RESPONSE_LENGTH
#: what the driver sets before the user's config: CPU, no logging, no checkpoints, no KL model
DRIVER_DEFAULTS: dict[str, Any] = {
    "use_cpu": True,
    "bf16": False,
    "report_to": "none",
    "num_generations": 2,
    "per_device_train_batch_size": 2,
    "max_completion_length": COMPLETION_LENGTH,
    "beta": 0.0,
    "logging_steps": 1,
    "save_strategy": "no",
}


def import_check() -> None:
    """Import what the driver needs (a release environment's smoke test)."""
    import importlib

    importlib.import_module("trl")
    importlib.import_module("grpo_identity.checks.target")


def grpo_config(spec: FrameworkSpec) -> Any:
    """The ``GRPOConfig`` TRL's parser builds from ``spec`` (driver defaults, then the YAML file,
    then each ``--set``: later ones win, as on TRL's command line)."""
    warnings.filterwarnings("ignore")
    try:
        from trl import GRPOConfig, TrlParser
    except ImportError as exc:
        raise AdapterError(f"TRL {version('trl')} has no GRPOConfig / TrlParser: {exc}") from None
    parser = TrlParser((GRPOConfig,))
    parser.set_defaults(**{k: v for k, v in DRIVER_DEFAULTS.items() if any(a.dest == k for a in parser._actions)})
    argv = ["--output_dir", tempfile.mkdtemp(prefix="grpo-identity-trl-")]
    if spec.config:
        argv += ["--config", spec.config]
    for key, value in spec.sets:
        argv += [f"--{key}", value]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            (args,) = parser.parse_args_and_config(args=argv)
    except SystemExit:  # argparse: an unknown option or a value of the wrong type
        last = [ln for ln in err.getvalue().splitlines() if ln.strip()]
        raise AdapterError(
            f"TRL {version('trl')} rejects the config ({spec.describe()}): "
            f"{last[-1].split('error: ')[-1] if last else 'bad arguments'}"
        ) from None
    except Exception as exc:  # GRPOConfig.__post_init__'s checks, an unreadable YAML file
        raise AdapterError(
            f"TRL {version('trl')} rejects the config ({spec.describe()}): "
            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from None
    return args


def _trainer(args: Any, state: dict[str, Any]) -> Any:
    import torch
    from datasets import Dataset
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from trl import GRPOTrainer

    vocab = {w: i for i, w in enumerate(["<pad>", "<eos>", "<unk>", "a", "b", "c", "d"])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<eos>",
        unk_token="<unk>",
        model_input_names=["input_ids", "attention_mask"],
    )
    tokenizer.padding_side = "left"
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(vocab),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=32,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=1,
        )
    )

    def reward_fn(completions: list[Any], **kwargs: Any) -> list[float]:
        r = state["rewards"]
        if r is None or len(r) != len(completions):
            raise RuntimeError("reward batch and completion batch differ in length")
        return [float(v) for v in r]

    try:
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=reward_fn,
            args=args,
            processing_class=tokenizer,
            train_dataset=Dataset.from_dict({"prompt": ["a b"] * 2}),
        )
        _sample_once_per_shape(trainer)
        return trainer
    except Exception as exc:
        raise AdapterError(
            f"TRL {version('trl')}: GRPOTrainer rejects the config: "
            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from None


def _sample_once_per_shape(trainer: Any) -> None:
    """The trainer's sampling runs once per batch of prompts; later batches of the same prompts get
    a copy of that sample.  The completions never enter the advantages (the reward function
    returns the audit's rewards; the gradient probes lay their own completions out), and the model
    does not change between calls, so one sample per shape is what a fixed seed would give, at a
    fraction of the cost: the hypothesis search calls the trainer hundreds of times per audit.
    Releases with ``_generate`` (the sampling step of ``_generate_and_score_completions``) get it
    memoised; older ones, which call the model's ``generate`` inline, get that memoised."""
    memo: dict[Any, Any] = {}
    generate = getattr(trainer, "_generate", None)
    if generate is not None:

        def sample_once(prompts: list[Any], *args: Any, **kwargs: Any) -> Any:
            if args or kwargs:  # a signature this driver does not know: sample every time
                return generate(prompts, *args, **kwargs)
            key = (len(prompts), repr(prompts[:1]))
            if key not in memo:
                memo[key] = generate(prompts)
            return _fresh(memo[key])

        trainer._generate = sample_once
        return
    model_generate = trainer.model.generate

    def generate_once(*args: Any, **kwargs: Any) -> Any:
        ids: Any = kwargs.get("input_ids", args[0] if args else None)
        if not hasattr(ids, "shape"):
            return model_generate(*args, **kwargs)
        key = (tuple(ids.shape), ids.detach().cpu().numpy().tobytes())
        if key not in memo:
            memo[key] = model_generate(*args, **kwargs)
        out = memo[key]
        return out.clone() if hasattr(out, "clone") else out

    trainer.model.generate = generate_once


def _fresh(obj: Any) -> Any:
    """A copy of the lists, tuples and dicts in ``obj`` (what the caller may change in place); the
    leaves (token ids, strings, tensors) are shared.  Much cheaper than ``copy.deepcopy``."""
    if isinstance(obj, list):
        return [_fresh(x) for x in obj]
    if isinstance(obj, tuple):
        return tuple(_fresh(x) for x in obj)
    if isinstance(obj, dict):
        return {k: _fresh(v) for k, v in obj.items()}
    return obj


def _score(trainer: Any, state: dict[str, Any], rewards: np.ndarray, G: int) -> dict[str, Any]:
    import torch

    if not hasattr(trainer, "_generate_and_score_completions"):
        raise AdapterError(
            f"TRL {version('trl')} has no GRPOTrainer._generate_and_score_completions (the driver knows it from 0.14 "
            "on)"
        )
    trainer.num_generations = trainer.num_generations_eval = int(G)
    state["rewards"] = np.asarray(rewards, dtype=np.float64)
    inputs = [{"prompt": "a b"} for _ in range(len(rewards))]  # (n_groups·G,) rows, group by group
    with torch.no_grad():
        return trainer._generate_and_score_completions(inputs)


def advantage_target(spec: FrameworkSpec) -> Callable[..., Any]:
    """fn(rewards, G): the advantages ``GRPOTrainer`` computes under ``spec``'s config."""
    args = grpo_config(spec)
    state: dict[str, Any] = {"rewards": None}
    trainer = _trainer(args, state)

    def trl_advantage(rewards: np.ndarray, group_size: int) -> np.ndarray:
        out = _score(trainer, state, rewards, group_size)
        return out["advantages"].detach().cpu().numpy().astype(np.float64)  # TRL's fp32 values, in the caller's dtype

    info = _info(spec, args, "GRPOTrainer._generate_and_score_completions")
    trl_advantage.grpo_identity_info = info  # type: ignore[attr-defined]
    return trl_advantage


def gradient_target(spec: FrameworkSpec) -> Callable[..., Any]:
    """fn(rewards, G, lengths) → {advantages, coefficients, mask}: −∂loss/∂log π per completion
    token, autograd through ``GRPOTrainer.compute_loss``."""
    import torch

    args = grpo_config(spec)
    state: dict[str, Any] = {"rewards": None}
    trainer = _trainer(args, state)
    if not hasattr(trainer, "current_gradient_accumulation_steps"):
        trainer.current_gradient_accumulation_steps = 1  # set by the training loop before each step
    # the method compute_loss gets its log-probabilities from (before 0.20: logps alone)
    hook = next(
        (n for n in ("_get_per_token_logps_and_entropies", "_get_per_token_logps") if hasattr(trainer, n)), None
    )
    if hook is None:
        raise AdapterError(
            f"TRL {version('trl')}: GRPOTrainer has neither _get_per_token_logps_and_entropies nor "
            "_get_per_token_logps (the driver needs one)"
        )
    original = getattr(trainer, hook)
    kept: dict[str, Any] = {}

    def keep_logps(*a: Any, **k: Any) -> Any:
        out = original(*a, **k)
        logps = out[0] if isinstance(out, tuple) else out
        logps.retain_grad()
        kept["logps"] = logps
        return out

    setattr(trainer, hook, keep_logps)
    eos = trainer.processing_class.eos_token_id
    pad = trainer.processing_class.pad_token_id

    def trl_loss_gradient(rewards: np.ndarray, group_size: int, lengths: np.ndarray | None) -> dict[str, np.ndarray]:
        inputs = _score(trainer, state, rewards, group_size)
        if lengths is None:  # the advantages alone (the advantage audit of the same run)
            return {"advantages": inputs["advantages"].detach().double().numpy()}
        ids = inputs["completion_ids"].clone()  # (B, T): T is the longest completion generated
        short = int(np.max(lengths)) - ids.shape[1]
        if short > 0:  # every sampled completion ended early: pad, then lay the probe's lengths out
            ids = torch.cat([ids, torch.full((ids.shape[0], short), pad, dtype=ids.dtype)], dim=1)
        mask = torch.zeros(ids.shape, dtype=inputs["completion_mask"].dtype)
        for i, ell in enumerate(np.asarray(lengths, dtype=int)):
            ids[i, ell - 1], ids[i, ell:], mask[i, :ell] = eos, pad, 1  # EOS at ell, nothing after
        inputs = {**inputs, "completion_ids": ids, "completion_mask": mask}
        if "num_items_in_batch" in inputs:
            inputs["num_items_in_batch"] = mask.sum()
        for key in ("old_per_token_logps", "importance_sampling_ratio", "sampling_per_token_logps"):
            inputs.pop(key, None)  # on-policy first step: old = current
        trainer.model.zero_grad()
        with trainer.compute_loss_context_manager():  # as Trainer.training_step calls it (autocast under bf16)
            loss = trainer.compute_loss(trainer.model, inputs)
        loss.backward()
        grad = kept["logps"].grad
        return {
            "advantages": inputs["advantages"].detach().double().numpy(),
            "coefficients": -grad.double().numpy(),
            "mask": mask.double().numpy(),
        }

    trl_loss_gradient.grpo_identity_info = {  # type: ignore[attr-defined]
        **_info(spec, args, "GRPOTrainer.compute_loss (autograd)"),
        "loss_type": str(getattr(args, "loss_type", "none (the release has one loss)")),
        "mixed_precision": str(getattr(trainer.accelerator, "mixed_precision", "no")),
        "lengths_optional": True,
    }
    return trl_loss_gradient


def _info(spec: FrameworkSpec, args: Any, entry: str) -> dict[str, Any]:
    return {
        "framework": "trl",
        "version": version("trl"),
        "entry": entry,
        "options": dict(spec.sets),
        "scale_rewards": str(getattr(args, "scale_rewards", "")),
        "loss_type": str(getattr(args, "loss_type", "")),
        "dtype": "float32",
    }
