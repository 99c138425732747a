"""TRL's rollout engine stood in, and the step given its log-probabilities (the three-policy probe,
:mod:`grpo_identity.checks.measure.rollout`, theorem G11).

With ``use_vllm`` TRL builds a ``VLLMGeneration`` (vLLM, GPU only); the driver puts :class:`Engine` in its place
while the trainer is built, and nothing else; its log-probabilities pass through the release's own
``extract_logprobs``, as vLLM's outputs do (a NaN becomes None there; "missing" is a NaN on every token, as vLLM
reports a log-probability it does not have).  The engine returns, per prompt, the completion and the per-token
log-probabilities the driver hands it (:func:`rollout_step`), or by default a fixed completion with the trainer's
own log-probabilities of it (an engine that agrees with the trainer, μ = π_old: the advantage and gradient probes
run on-policy, and see a cap below 1 as TRL applies it).  Everything after generation is TRL's: the ratio
``importance_sampling_ratio`` of ``vllm_importance_sampling_mode`` computed in ``_generate_and_score_completions``
from the old log-probabilities TRL recomputes, and its product with each token's loss in ``_compute_loss``.
"""

from __future__ import annotations

import contextlib
import math
from importlib.metadata import version
from types import SimpleNamespace as NS
from typing import Any, Iterator

import numpy as np

from grpo_identity.checks.frameworks import RESPONSE_LENGTH, AdapterError, patched_attributes
from grpo_identity.checks.frameworks.trl_config import DIFFERENCES

__all__ = ["ENGINE_STAND_IN", "Engine", "engine_stood_in", "correction_settings", "rollout_step", "sampler_settings"]

#: what the report lists among the stand-ins where use_vllm is set
ENGINE_STAND_IN = (
    "vLLM's VLLMGeneration: an engine that returns the probe's completions with the trainer's own log-probabilities "
    "of them over the whole vocabulary (μ = π_old), and the three-policy probe's where it asks (renormalised over the "
    "tokens a truncating sampler keeps where it asks for the sampler)"
)


class Engine:
    """``VLLMGeneration`` stood in: ``generate`` answers with :attr:`plan` (completion ids and log-probabilities
    per prompt) where the driver set one, else a fixed completion with the trainer's own log-probabilities of it."""

    def __init__(self, *args: Any, model: Any = None, processing_class: Any = None, temperature: float = 1.0,
                 max_completion_length: int = RESPONSE_LENGTH, **kwargs: Any) -> None:  # fmt: skip
        tokenizer = getattr(processing_class, "tokenizer", processing_class)
        word = int(tokenizer.convert_tokens_to_ids("a"))
        self.default = [word] * (int(max_completion_length) - 1) + [int(tokenizer.eos_token_id)]
        self.model, self.temperature = model, float(temperature or 1.0)
        self.plan: tuple[list[list[int]], list[list[float | None]]] | None = None
        self.memo: dict[tuple[int, ...], list[float]] = {}
        self.llm = NS(llm_engine=NS(model_config=NS(max_model_len=4096)))
        self.vllm_client = NS(get_server_info=lambda: {"model_config": {"logprobs_mode": "processed_logprobs"}})

    def sync_weights(self) -> None:
        """No weights to copy: the stand-in samples nothing."""
        self.memo.clear()

    def own_logps(self, prompt: list[int], completion: list[int]) -> list[float]:
        """log π(completion | prompt) per token under the trainer's own policy (at the weights of the last
        ``sync_weights``; temperature-scaled as TRL scales them): an engine that agrees with the trainer, μ = π_old,
        so the correction weighs 1 outside the three-policy probe."""
        import torch

        key = (*prompt, -1, *completion)
        if key not in self.memo:
            with torch.no_grad():
                logits = self.model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
                logps = torch.log_softmax(logits.float() / self.temperature, dim=-1)
                self.memo[key] = logps.gather(-1, torch.tensor(completion)[:, None])[:, 0].tolist()
        return self.memo[key]

    def kept_mass(self, prompt: list[int], completion: list[int], sampler: dict[str, Any]) -> list[float]:
        """Per token, the mass of the trainer's temperature-scaled distribution that vLLM's sampler keeps
        (``min_p``, then ``top_k``, then ``top_p`` on what top-k kept, renormalised, as vLLM applies them) and over
        which its ``processed_logprobs`` are renormalised; the sampled token counts as kept (it was sampled)."""
        import torch

        with torch.no_grad():
            logits = self.model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
            p = torch.softmax(logits.float() / self.temperature, dim=-1)
        keep = torch.ones_like(p, dtype=torch.bool)
        if sampler.get("min_p"):
            keep &= p >= float(sampler["min_p"]) * p.max(dim=-1, keepdim=True).values
        order = torch.argsort(torch.where(keep, p, torch.zeros_like(p)), dim=-1, descending=True)
        ranked = torch.gather(torch.where(keep, p, torch.zeros_like(p)), -1, order)
        k = int(sampler.get("top_k") or 0)
        if 0 < k < p.shape[-1]:
            ranked[:, k:] = 0.0
        share = ranked / ranked.sum(dim=-1, keepdim=True)
        before = torch.cumsum(share, dim=-1) - share  # the mass ranked above each token
        ranked = torch.where(before < float(sampler.get("top_p") or 1.0), ranked, torch.zeros_like(ranked))
        kept = torch.zeros_like(p).scatter(-1, order, (ranked > 0).float()) > 0
        kept[torch.arange(len(completion)), torch.tensor(completion)] = True
        return (p * kept).sum(dim=-1).tolist()

    def generate(self, prompts: list[Any], *args: Any, **kwargs: Any) -> tuple[Any, Any, Any, Any]:
        logps: list[list[float | None]]
        if self.plan is not None:
            ids, logps = self.plan
        else:
            ids = [list(self.default) for _ in prompts]
            logps = [list(self.own_logps(list(p), row)) for p, row in zip(prompts, ids)]  # a copy of the memo
        if len(ids) != len(prompts):
            raise RuntimeError(f"the stand-in engine was asked for {len(prompts)} completions, it holds {len(ids)}")
        per_token, token_ids = _as_vllm_reports(ids, logps)
        return list(prompts), ids, per_token, token_ids


def _as_vllm_reports(ids: list[list[int]], logps: list[list[Any]]) -> tuple[Any, Any]:
    """The per-token log-probabilities and token ids as TRL reads vLLM's outputs: through the release's own
    ``extract_logprobs`` (which turns a NaN log-probability into None) on outputs shaped as vLLM's
    ``RequestOutput``; releases without it get the nested lists directly."""
    try:
        from trl.generation.vllm_generation import extract_logprobs
    except ImportError:
        return [[[v] for v in row] for row in logps], [[[t] for t in row] for row in ids]
    outputs = [
        NS(outputs=[NS(logprobs=[{t: NS(logprob=v, rank=1)} for t, v in zip(row, lps)])])
        for row, lps in zip(ids, logps)
    ]
    return extract_logprobs(outputs)


@contextlib.contextmanager
def engine_stood_in(args: Any) -> Iterator[None]:
    """:class:`Engine` in place of TRL's ``VLLMGeneration`` while the trainer is built, where ``use_vllm`` is set."""
    if not getattr(args, "use_vllm", False):
        yield
        return
    DIFFERENCES["engine"].require(f"TRL {version('trl')}")
    import trl.trainer.grpo_trainer as module

    with patched_attributes([(module, "VLLMGeneration", Engine)]):
        yield


def correction_settings(args: Any) -> dict[str, Any] | None:
    """``info["rollout_correction"]``: TRL's ``vllm_importance_sampling_*`` as the probe's estimator, cap and floor
    (None without ``use_vllm`` or with the correction off)."""
    if not (getattr(args, "use_vllm", False) and getattr(args, "vllm_importance_sampling_correction", False)):
        return None
    mode = str(DIFFERENCES["is_mode"].value_of(args, "token_truncate"))
    cap = DIFFERENCES["is_clip_max"].value_of(args)
    cap = getattr(args, "vllm_importance_sampling_cap", None) if cap is None else cap
    low = DIFFERENCES["is_clip_min"].value_of(args)
    setting = f"vllm_importance_sampling_mode={mode}, clip_max={cap}" + (f", clip_min={low}" if low else "")
    # TRL's modes carry the probe's estimator names; its sequence level is the product of the token ratios, exp(Σ),
    # as its maintainers confirmed (trl #5814)
    found = {"estimator": mode, "cap": cap, "low": low or 0.0, "setting": setting}
    sampler = sampler_settings(args)
    return {**found, "sampler": ", ".join(f"{k}={v}" for k, v in sampler.items())} if sampler else found


def sampler_settings(args: Any) -> dict[str, Any]:
    """The generation settings that truncate vLLM's sampler (``top_p`` < 1, ``top_k`` > 0, ``min_p`` > 0; where
    ``generation_kwargs`` sets them, theirs, as TRL passes them on): vLLM's processed log-probabilities, which TRL asks
    for, are renormalised over the tokens they keep ({} where none).  Repetition, presence and frequency penalties,
    which processed log-probabilities include too, are not stood in."""
    found = {
        "top_p": getattr(args, "top_p", 1.0),
        "top_k": getattr(args, "top_k", 0),
        "min_p": getattr(args, "min_p", 0),
    }
    found |= {k: v for k, v in (getattr(args, "generation_kwargs", None) or {}).items() if k in found}  # they win
    truncating = {"top_p": lambda v: v < 1.0, "top_k": lambda v: v > 0, "min_p": lambda v: v > 0}
    return {k: v for k, v in found.items() if v is not None and truncating[k](float(v))}


def _correction(trainer: Any, on: bool) -> contextlib.AbstractContextManager[None]:
    return patched_attributes([(trainer, "vllm_importance_sampling_correction", bool(on))])


def _through_engine(trainer: Any, generate: Any, ids: list[list[int]], logps: list[list[Any]], n: int) -> Any:
    """``_generate_and_score_completions`` on ``n`` prompts, the engine answering ``ids`` and ``logps``."""
    import torch

    engine = trainer.vllm_generation
    memoised, engine.plan = trainer._generate, (ids, logps)
    trainer._generate = generate  # the sampling step itself, not the driver's memo of it
    try:
        with torch.no_grad():
            return trainer._generate_and_score_completions([{"prompt": "a b"} for _ in range(n)])
    finally:
        trainer._generate, engine.plan = memoised, None


def rollout_step(trainer: Any, generate: Any, laid: dict[str, Any], request: dict[str, Any],
                 loss_gradient: Any) -> dict[str, Any]:  # fmt: skip
    """The step given rollout log-probabilities log μ = log π_old − X (``request``: ``log_ratio`` X, or None for
    none; ``correct``: the correction on or off), on the completions of ``laid`` (the probe's answers): the engine
    answers them once (TRL recomputes log π_old), then with log μ; ``loss_gradient`` differentiates
    ``compute_loss`` on the second scoring."""
    mask = laid["completion_mask"].numpy() > 0
    ids = [[int(t) for t in row[m]] for row, m in zip(laid["completion_ids"].numpy(), mask)]
    n = len(ids)
    engine = trainer.vllm_generation
    prompt = [int(t) for t in laid["prompt_ids"][0][laid["prompt_mask"][0] > 0]]
    with _correction(trainer, True):
        first = _through_engine(trainer, generate, ids, [list(engine.own_logps(prompt, row)) for row in ids], n)
    old = first["old_per_token_logps"].double().numpy()
    x = request.get("log_ratio")
    kept = np.ones_like(old)
    if request.get("sampler"):  # vLLM's processed log-probabilities: renormalised over the tokens its sampler keeps
        sampler = sampler_settings(trainer.args)
        for i, row in enumerate(ids):
            kept[i, : len(row)] = engine.kept_mass(prompt, row, sampler)
    if x is None:  # an engine that reports no log-probability for any token: vLLM's NaN
        logps: list[list[Any]] = [[math.nan] * len(row) for row in ids]
    else:
        mu = old - np.asarray(x, dtype=np.float64)[:, : old.shape[1]] - np.log(kept)
        logps = [[float(v) for v in mu[i, : len(row)]] for i, row in enumerate(ids)]
    with _correction(trainer, bool(request.get("correct"))):
        scored = _through_engine(trainer, generate, ids, logps, n)
        if scored["completion_mask"].shape[0] != n:
            raise AdapterError(
                f"TRL {version('trl')}: the engine's {n} completions came back as {len(scored['advantages'])}"
            )
        coefficients = loss_gradient(scored)
    return {
        "advantages": scored["advantages"].detach().double().numpy(),
        "coefficients": _padded(coefficients),
        "mask": _padded(scored["completion_mask"].double().numpy()),
        "old_logps": _padded(old),
        "kept_mass": _padded(kept),
    }


def _padded(a: np.ndarray) -> np.ndarray:
    """(n, T) as (n, RESPONSE_LENGTH): zeros past the longest answer (the probe's width)."""
    out = np.zeros((a.shape[0], max(RESPONSE_LENGTH, a.shape[1])))
    out[:, : a.shape[1]] = a
    return out
