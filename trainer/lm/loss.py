"""The real GRPO-family loss: per-token ratio and clipping, optional KL, three aggregations.

For a batch of n groups of G completions, with ratio r_{i,t} = π_θ/π_old of token t of answer i,

    ℓ_{i,t} = −min(r_{i,t} Âᵢ, clip(r_{i,t}, 1−ε_low, 1+ε_high) Âᵢ)          (PPO-clip surrogate)
    ℓ_group = (1/G) Σᵢ wᵢ Σ_t m_{i,t} ℓ_{i,t}                                  (one group)
    L      = (1/n) Σ_groups ℓ_group  [+ β (1/n)(1/G) Σᵢ wᵢ Σ_t m_{i,t} KL_{i,t}]

with m the completion mask and the aggregation weight wᵢ:

- ``seq_mean`` (GRPO): wᵢ = 1/|yᵢ|, the mean over each answer's tokens;
- ``token_mean`` (DAPO): wᵢ = nG/N_tok, i.e. L = Σ ℓ_{i,t}/N_tok over the batch's N_tok tokens;
- ``constant`` (Dr. GRPO): wᵢ = 1/T_max, a fixed length.

At ratio 1 (the first on-policy step) clipping is inactive and −∇ℓ_group = (1/G) Σᵢ Âᵢ sᵢ with
the per-sample score sᵢ = ∇_θ (wᵢ Σ_t log π(y_{i,t})) — the generalised identity of
:mod:`grpo_identity.trainer.lm.identity` holds with these sᵢ.  KL is the k3 estimator
e^{ref−logp} − (ref−logp) − 1 to the post-warm-up policy; its gradient is 0 where the policy
equals the reference and is logged apart from the identity check.
"""

from __future__ import annotations

import torch

__all__ = ["sample_weights", "surrogate", "kl_k3", "group_loss", "rl_loss"]


def sample_weights(
    lengths: torch.Tensor, aggregation: str, *, n_groups: int, group_size: int, max_new_tokens: int
) -> torch.Tensor:
    """Aggregation weights wᵢ (N,) of a batch of N = n_groups·G answers with token counts ``lengths``."""
    L = lengths.to(torch.float32)
    if aggregation == "seq_mean":
        return 1.0 / L.clamp_min(1.0)
    if aggregation == "token_mean":
        return torch.full_like(L, n_groups * group_size / float(L.sum().clamp_min(1.0)))
    if aggregation == "constant":
        return torch.full_like(L, 1.0 / max_new_tokens)
    raise ValueError(f"aggregation must be seq_mean, token_mean or constant, got {aggregation!r}")


def surrogate(
    logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, clip_low: float, clip_high: float
) -> torch.Tensor:
    """Per-token PPO-clip loss −min(r Â, clip(r) Â): logp, old_logp (N, T), adv (N,) → (N, T)."""
    ratio = torch.exp(logp - old_logp)
    a = adv[:, None]  # (N, 1)
    return -torch.minimum(ratio * a, ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * a)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 KL estimate e^{ref−logp} − (ref−logp) − 1 (≥ 0), shape of logp."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


def group_loss(per_token: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor, group_size: int) -> torch.Tensor:
    """Σ over groups of ℓ_group = (1/G) Σᵢ wᵢ Σ_t m_{i,t} per_token_{i,t}; (N, T) → scalar.

    Divide by the number of groups for the batch loss L.
    """
    per_sample = (per_token * mask).sum(-1) * weights  # (N,)
    return per_sample.sum() / group_size


def rl_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    weights: torch.Tensor,
    group_size: int,
    *,
    clip_low: float,
    clip_high: float,
    ref_logp: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The GRPO-family loss summed over groups: (Σ ℓ_group, β·Σ KL_group or None); divide by n for L.

    The one place the loss is assembled: the batched step, the PPO epochs and each checked
    group's gradient (:func:`.identity.group_gradient`) all call it.  logp, old_logp, mask (N, T);
    adv, weights (N,).  The KL term is None without a reference or with ``kl_coef`` 0.
    """
    pg = group_loss(surrogate(logp, old_logp, adv, clip_low, clip_high), mask, weights, group_size)
    if ref_logp is None or kl_coef <= 0:
        return pg, None
    return pg, kl_coef * group_loss(kl_k3(logp, ref_logp), mask, weights, group_size)
