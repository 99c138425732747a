"""The measurement: a group's real gradient against c(k, G)·(s̄₊ − s̄₋), with per-sample scores.

For one group of G answers with binary rewards, the trainer's loss (:mod:`.lm_loss`) at ratio 1
has the ascent direction

    g = −∇_θ ℓ_group = (1/G) Σᵢ Âᵢ sᵢ,    sᵢ = ∇_θ (wᵢ Σ_t log π_θ(y_{i,t} | x, y_{i,<t}))

with wᵢ the aggregation weight.  Theorem 1 (generalised to any per-sample vector sᵢ) gives

    g = c(k, G) · (s̄₊ − s̄₋),   c = σ (GRPO, DAPO), σ² (Dr. GRPO),   c = 0 for k ∈ {0, G}.

:func:`group_gradient` computes g by autograd of the group's loss (the number the optimiser
uses); :func:`per_sample_scores` computes every sᵢ at once with ``torch.func`` (functional_call +
vmap + grad); :func:`check_identity` compares g with ``dial.coefficient(k, G)·score_gap`` and
with ``dial.group_updates`` — both from :mod:`grpo_identity.dial`, never retyped here.

    rel_err = ‖g − c·(s̄₊ − s̄₋)‖ / ‖g‖       (fp32 goal ≤ 1e-4)
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import nn

from grpo_identity import closed_forms
from grpo_identity.dial import Dial, coefficient, group_updates, score_gap
from grpo_identity.trainer.lm.loss import rl_loss
from grpo_identity.trainer.lm.model import completion_logprobs, token_logprobs

#: float32 goal for the identity on real transformer gradients: ‖g − c·(s̄₊ − s̄₋)‖/‖g‖ at most this
REL_TOL = 1e-4

__all__ = [
    "REL_TOL",
    "GroupCheck",
    "trainable",
    "flatten",
    "group_gradient",
    "per_sample_scores",
    "check_identity",
    "loglog_fit",
    "gap_noise_share",
    "silent_estimate",
]


def trainable(model: nn.Module) -> tuple[list[str], list[torch.Tensor]]:
    """Names and tensors of the trainable parameters (tied weights once)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return [n for n, _ in named], [p for _, p in named]


def flatten(grads: Sequence[torch.Tensor]) -> torch.Tensor:
    """Concatenate gradients into one fp32 vector (D,)."""
    return torch.cat([g.reshape(-1).float() for g in grads])


def group_gradient(
    model: nn.Module,
    seqs: torch.Tensor,
    mask: torch.Tensor,
    weights: torch.Tensor,
    adv: torch.Tensor,
    *,
    prompt_len: int,
    group_size: int,
    clip_low: float,
    clip_high: float,
    ref_logp: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> tuple[list[torch.Tensor], list[torch.Tensor] | None, torch.Tensor]:
    """Gradients of one group's loss at ratio 1, in fp32: (∇ℓ_pg, ∇ℓ_kl or None, old log-probs).

    seqs (G, P+T), mask/weights/adv as in :mod:`.lm_loss`.  The ascent direction of the identity
    is g = −flatten(∇ℓ_pg).  ``old log-probs`` (G, T) are the detached log π used as π_old.
    """
    _, params = trainable(model)
    logp = token_logprobs(model, seqs, prompt_len)  # (G, T)
    old = logp.detach()
    loss, kl_loss = rl_loss(
        logp,
        old,
        adv,
        mask,
        weights,
        group_size,
        clip_low=clip_low,
        clip_high=clip_high,
        ref_logp=ref_logp,
        kl_coef=kl_coef,
    )
    grads = torch.autograd.grad(loss, params, retain_graph=kl_loss is not None, allow_unused=True)
    pg = [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params)]
    kl = None
    if kl_loss is not None:
        kgrads = torch.autograd.grad(kl_loss, params, allow_unused=True)
        kl = [torch.zeros_like(p) if g is None else g for g, p in zip(kgrads, params)]
    return pg, kl, old


def per_sample_scores(
    model: nn.Module, seqs: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor, *, prompt_len: int
) -> torch.Tensor:
    """Per-sample scores sᵢ = ∇_θ(wᵢ Σ_t m_{i,t} log π(y_{i,t})) for every row at once: (N, D) fp32.

    ``torch.func.vmap`` over ``grad`` of a ``functional_call`` of the model on one sequence.
    """
    from torch.func import functional_call, grad, vmap

    names, params = trainable(model)
    frozen = {n: p.detach() for n, p in model.named_parameters() if not p.requires_grad}
    frozen.update(dict(model.named_buffers()))
    theta = {n: p.detach() for n, p in zip(names, params)}

    def weighted_logp(
        theta: dict[str, torch.Tensor], seq: torch.Tensor, m: torch.Tensor, w: torch.Tensor
    ) -> torch.Tensor:
        ids = seq[None]  # (1, P+T)
        logits = functional_call(model, (theta, frozen), args=(), kwargs={"input_ids": ids, "use_cache": False}).logits
        lp = completion_logprobs(logits, ids, prompt_len)[0]  # (T,)
        return w * (lp * m).sum()

    with (
        warnings.catch_warnings()
    ):  # torch has no batching rule for CPU flash-attention backward: a slower fallback, same numbers
        warnings.filterwarnings("ignore", message="There is a performance drop")
        per = vmap(grad(weighted_logp), in_dims=(None, 0, 0, 0))(theta, seqs, mask.to(torch.float32), weights)
    return torch.cat([per[n].reshape(seqs.shape[0], -1).float() for n in names], dim=1)  # (N, D)


@dataclass(frozen=True)
class GroupCheck:
    """One group's identity check."""

    num_correct: int
    """k"""
    sigma: float
    """σ = √(k(G−k))/G"""
    coef: float
    """c(k, G) of the dial"""
    g_norm: float
    """‖g‖, g by autograd of the group's loss"""
    gap_norm: float
    """‖s̄₊ − s̄₋‖"""
    rel_err: float
    """‖g − c·(s̄₊ − s̄₋)‖ / ‖g‖"""
    rel_err_sum: float
    """‖g − (1/G)Σ Âᵢ sᵢ‖ / ‖g‖ (the scores are the right ones)"""
    noise_share: float
    """share of ‖s̄₊ − s̄₋‖² that is sampling noise (:func:`gap_noise_share`)"""


def check_identity(
    g: torch.Tensor, scores: torch.Tensor, rewards: torch.Tensor, adv: torch.Tensor, dial: Dial
) -> GroupCheck:
    """Compare a non-silent group's gradient g (D,) with c(k, G)·(s̄₊ − s̄₋) from scores (G, D).

    ``dial`` is the dial the run *claims*; ``adv`` the advantages it actually used.  Work in
    float64 so that the comparison adds no rounding of its own.
    """
    G = int(rewards.shape[0])
    k = int(round(float(rewards.sum())))
    s = scores.double()
    g64 = g.double()
    gap = score_gap(rewards.double(), s, G)[0]  # (D,)
    c = float(coefficient(k, G, dial))
    g_norm = float(g64.norm())
    denom = g_norm if g_norm > 0 else 1.0
    via_sum = group_updates(adv.double(), s, G)[0]  # (D,)
    return GroupCheck(
        num_correct=k,
        sigma=float(closed_forms.sigma(k, G)),
        coef=c,
        g_norm=g_norm,
        gap_norm=float(gap.norm()),
        rel_err=float((g64 - c * gap).norm()) / denom,
        rel_err_sum=float((g64 - via_sum).norm()) / denom,
        noise_share=gap_noise_share(s, rewards),
    )


def loglog_fit(x: Sequence[float], y: Sequence[float]) -> dict[str, float | int | None]:
    """Least-squares slope, intercept and R² of log y against log x over positive pairs."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = (xa > 0) & (ya > 0) & np.isfinite(xa) & np.isfinite(ya)
    lx, ly = np.log(xa[ok]), np.log(ya[ok])
    n = int(ok.sum())
    if n < 3 or np.ptp(lx) == 0:
        return {"slope": None, "intercept": None, "r2": None, "n": n}
    slope, intercept = np.polyfit(lx, ly, 1)
    resid = ly - (slope * lx + intercept)
    sst = float(((ly - ly.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / sst if sst > 0 else 1.0
    return {"slope": float(slope), "intercept": float(intercept), "r2": r2, "n": n}


def gap_noise_share(scores: torch.Tensor, rewards: torch.Tensor) -> float:
    """Share of ‖s̄₊ − s̄₋‖² that is sampling noise, estimated inside one group: (G, D), (G,) → float.

    With class scatters V₊, V₋ (trace of each class's covariance, unbiased, k − 1 and G − k − 1
    degrees of freedom), E‖s̄₊ − s̄₋‖² = ‖μ₊ − μ₋‖² + V₊/k + V₋/(G−k); with V₊ = V₋ = V the noise
    term is V/(Gσ²), since 1/k + 1/(G−k) = 1/(Gσ²).  Where noise dominates, ‖s̄₊ − s̄₋‖ falls as σ
    grows and ‖g‖ = σ‖s̄₊ − s̄₋‖ (GRPO) grows slower than σ; only a flat gap gives slope 1
    (GRPO) / 2 (Dr. GRPO).  Returns (V₊/k + V₋/(G−k)) / ‖s̄₊ − s̄₋‖² (≈ 1: all noise, ≈ 0: all
    signal; can exceed 1 by chance); NaN when a class has fewer than two members.
    """
    s = scores.double()
    pos = rewards.bool()
    G, k = int(rewards.shape[0]), int(pos.sum())
    if k < 2 or G - k < 2:
        return float("nan")
    sp, sn = s[pos], s[~pos]  # (k, D), (G−k, D)
    v_pos = float(((sp - sp.mean(0)) ** 2).sum()) / (k - 1)
    v_neg = float(((sn - sn.mean(0)) ** 2).sum()) / (G - k - 1)
    gap2 = float(((sp.mean(0) - sn.mean(0)) ** 2).sum())
    noise = float(
        closed_forms.update_covariance_given_k(k, G, v_pos, v_neg, c=1.0)
    )  # V₊/k + V₋/(G−k), theorem G8 with c = 1
    return noise / gap2 if gap2 > 0 else float("nan")


def silent_estimate(num_success: int, num_probe: int, G: int) -> float:
    """Estimate of a prompt's silent rate p^G + (1−p)^G from j successes in n independent probes.

    Unbiased when n ≥ G: ``closed_forms.subsampled_silent_rate(G, j, n)``, the chance that G of the
    n probes drawn without replacement all agree.  With n < G, the plug-in ``closed_forms.silent_rate(G, j/n)``.
    """
    j, n = int(num_success), int(num_probe)
    if n >= G:
        return float(closed_forms.subsampled_silent_rate(G, j, n))
    return float(closed_forms.silent_rate(G, j / n))
