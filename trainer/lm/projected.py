"""The identity checked along K random directions: memory O(K·D) instead of the scores' O(G·D).

For a direction v, the identity g = c(k, G)·(s̄₊ − s̄₋) implies the scalar identity

    ⟨g, v⟩ = c(k, G)·(⟨s̄₊, v⟩ − ⟨s̄₋, v⟩),     ⟨sᵢ, v⟩ = d/dε [wᵢ Σ_t log π_{θ+εv}(y_{i,t})] at ε = 0,

and every ⟨sᵢ, v⟩ of a batch comes from one forward-mode pass (``torch.func.jvp``) of the
per-sample weighted log-probabilities: K directions cost K passes (batched by ``vmap``) and no
per-sample gradient is ever stored.  g itself comes from the reverse-mode autograd of the group's real loss, as in the
exact check, so forward and reverse mode are compared.  The comparison is the exact check's own
:func:`.identity.check_identity`, applied to the projected vectors (Vg, V sᵢ), V the (K, D)
matrix of directions:

    rel_err_K = ‖V(g − c·(s̄₊ − s̄₋))‖ / ‖Vg‖.

With Gaussian directions E‖Ve‖² = K‖e‖², so rel_err_K estimates the exact relative error (the
two are equal when the error is parallel to g, e.g. a wrongly scaled advantage); a planted error
orthogonal to every direction has probability zero.
"""

from __future__ import annotations

import itertools
import warnings

import torch
from torch import nn

from grpo_identity.dial import Dial
from grpo_identity.trainer.lm.identity import GroupCheck, check_identity, trainable
from grpo_identity.trainer.lm.model import completion_logprobs

__all__ = ["random_directions", "projected_scores", "projected_check"]


def random_directions(dim: int, count: int, *, seed: int, device: torch.device) -> torch.Tensor:
    """K standard-Gaussian directions in parameter space: (K, D) fp32, reproducible from ``seed``."""
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(count, dim, generator=gen, device=device)


def projected_scores(
    model: nn.Module,
    seqs: torch.Tensor,
    mask: torch.Tensor,
    weights: torch.Tensor,
    directions: torch.Tensor,
    *,
    prompt_len: int,
) -> torch.Tensor:
    """⟨sᵢ, v_k⟩ for every row i and direction k by forward-mode AD: (N, K) fp32.

    sᵢ = ∇_θ(wᵢ Σ_t m_{i,t} log π(y_{i,t})) as in :func:`.identity.per_sample_scores`; seqs (N, P+T),
    mask (N, T), weights (N,), directions (K, D) in the order of :func:`.identity.trainable`.
    """
    from torch.func import functional_call, jvp, vmap

    names, params = trainable(model)
    frozen = {n: p.detach() for n, p in model.named_parameters() if not p.requires_grad}
    frozen.update(dict(model.named_buffers()))
    theta = {n: p.detach() for n, p in zip(names, params)}
    sizes = [p.numel() for p in params]
    m = mask.to(torch.float32)

    def weighted_logp(theta: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = functional_call(model, (theta, frozen), args=(), kwargs={"input_ids": seqs, "use_cache": False}).logits
        return weights * (completion_logprobs(logits, seqs, prompt_len) * m).sum(-1)  # (N,)

    # each parameter's block of every direction, as a (K, *shape) view of ``directions``
    K, offsets = directions.shape[0], [0, *itertools.accumulate(sizes)]
    tangents = {
        n: directions[:, a:b].reshape(K, *p.shape).to(p.dtype)
        for n, p, a, b in zip(names, params, offsets, offsets[1:])
    }
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*forward AD.*")
        dots = vmap(lambda t: jvp(weighted_logp, (theta,), (t,))[1])(tangents)  # (K, N): the K passes batched
    return dots.float().T  # (N, K)


def projected_check(
    g: torch.Tensor,
    directions: torch.Tensor,
    score_proj: torch.Tensor,
    rewards: torch.Tensor,
    adv: torch.Tensor,
    dial: Dial,
) -> GroupCheck:
    """The exact check's comparison on projections: g (D,), directions (K, D), score_proj (G, K).

    Returns a :class:`.identity.GroupCheck` whose norms and errors are those of the projected
    vectors (``noise_share`` is that of the projections, not of the scores).
    """
    return check_identity(directions @ g.float(), score_proj, rewards, adv, dial)
