"""The policy: a small causal transformer built from a ``transformers`` config, its sampler and
its per-token log-probabilities.

No weights are downloaded: GPT-2 or Llama is built from a config sized by
:class:`~grpo_identity.trainer.lm.config.LMConfig`, with dropout off so that the batched forward,
the per-sample functional forward and a second run with the same seed agree.  Sequences are
right-padded and never given an attention mask: causal attention already hides the padding
from every real position, and HF attention under ``torch.func.vmap`` works only without one.

    log π(yᵢ|x) = Σ_t log softmax(logits_{P−1+t})[y_{i,t}]   (completion tokens only)
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any

import torch
from torch import nn

from grpo_identity.trainer.lm.config import LMConfig
from grpo_identity.trainer.lm.task import BOS, EOS, PAD

#: plain attention: sequences here are ~20 tokens, and under vmap it beats SDPA, whose backward
#: has no batching rule and falls back to a per-sample loop (measured: 46 vs 79 ms, 8 groups of 8)
ATTENTION = "eager"

__all__ = [
    "build_model",
    "count_params",
    "resolve_device",
    "autocast",
    "sample",
    "completion_logprobs",
    "token_logprobs",
]


def build_model(cfg: LMConfig, vocab_size: int, n_positions: int) -> nn.Module:
    """A fresh GPT-2 or Llama from a config (seeded by the caller), dropout off, fp32."""
    if cfg.model == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        conf = GPT2Config(
            n_layer=cfg.n_layer,
            n_embd=cfg.n_embd,
            n_head=cfg.n_head,
            vocab_size=vocab_size,
            n_positions=n_positions,
            bos_token_id=BOS,
            eos_token_id=EOS,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            attn_implementation=ATTENTION,
        )
        model: nn.Module = GPT2LMHeadModel(conf)
    else:
        from transformers import LlamaConfig, LlamaForCausalLM

        conf = LlamaConfig(
            num_hidden_layers=cfg.n_layer,
            hidden_size=cfg.n_embd,
            num_attention_heads=cfg.n_head,
            num_key_value_heads=cfg.n_head,
            intermediate_size=int(8 * cfg.n_embd / 3 + 63) // 64 * 64,
            vocab_size=vocab_size,
            max_position_embeddings=n_positions,
            bos_token_id=BOS,
            eos_token_id=EOS,
            attention_dropout=0.0,
            tie_word_embeddings=True,
            attn_implementation=ATTENTION,
        )
        model = LlamaForCausalLM(conf)
    return model.eval()  # no dropout anywhere; eval() only switches that off


def count_params(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def resolve_device(name: str) -> torch.device:
    """``auto`` → cuda when available, else cpu; ``cuda`` without a GPU is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but torch sees no CUDA device")
    return torch.device(name)


def autocast(device: torch.device, enabled: bool) -> Any:
    """bf16 autocast on ``device`` when enabled, else a no-op context."""
    if not enabled:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def _cache_name(model: nn.Module) -> str:
    """The forward's KV-cache keyword: ``cache`` (newer transformers 5.x) or ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _logits(model: nn.Module, ids: torch.Tensor, cache: Any = None) -> tuple[torch.Tensor, Any]:
    name = _cache_name(model)
    out = model(input_ids=ids, use_cache=True, **({name: cache} if cache is not None else {}))
    return out.logits, out[name]


@torch.no_grad()
def sample(
    model: nn.Module,
    prompts: torch.Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    amp: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample completions with a KV cache; temperature 0 means greedy.

    ``prompts`` (N, P) → completions (N, T ≤ max_new_tokens), PAD after the first EOS, and
    lengths (N,) counting tokens up to and including EOS (T when no EOS was sampled).
    """
    N = prompts.shape[0]
    device = prompts.device
    out = torch.full((N, max_new_tokens), PAD, dtype=torch.long, device=device)  # (N, T)
    done = torch.zeros(N, dtype=torch.bool, device=device)
    lengths = torch.full((N,), max_new_tokens, dtype=torch.long, device=device)
    if N == 0:
        return out, lengths
    with autocast(device, amp):
        logits, cache = _logits(model, prompts)
        for t in range(max_new_tokens):
            last = logits[:, -1].float()  # (N, V)
            if temperature == 0:
                nxt = last.argmax(-1)
            else:
                probs = torch.softmax(last / temperature, dim=-1)
                nxt = torch.multinomial(probs, 1, generator=generator)[:, 0]
            nxt = torch.where(done, torch.full_like(nxt, PAD), nxt)
            out[:, t] = nxt
            newly = (~done) & (nxt == EOS)
            lengths = torch.where(newly, torch.full_like(lengths, t + 1), lengths)
            done = done | newly
            if t + 1 == max_new_tokens or bool(done.all()):
                break
            logits, cache = _logits(model, nxt[:, None], cache)
    return out[:, : int(lengths.max())], lengths


def completion_logprobs(logits: torch.Tensor, seqs: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """log π of each completion token from the logits of seqs: (N, P+T, V) → (N, T), fp32."""
    logits = logits[:, prompt_len - 1 : -1].float()  # (N, T, V): the logits that predict the completion
    return torch.log_softmax(logits, dim=-1).gather(-1, seqs[:, prompt_len:, None])[..., 0]


def token_logprobs(model: nn.Module, seqs: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """log π of each completion token: seqs (N, P+T) → (N, T), in fp32 (padding included; mask it)."""
    return completion_logprobs(model(input_ids=seqs, use_cache=False).logits, seqs, prompt_len)
