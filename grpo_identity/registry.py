"""The registry: every formula of the project, with its paper reference, its symbolic
definition, its numeric twin and the theorem that proves it.

Names are ``module:function`` strings so that reading the registry imports nothing heavy;
:func:`resolve` loads one.  A test asserts that the registry covers every public function of
:mod:`grpo_identity.formulas`, that every twin exists and equals its definition, and that every
proof named here exists.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Literal

__all__ = ["Formula", "REGISTRY", "by_name", "resolve"]

#: the arguments a definition and its twin share, in order: ``dial`` is a :class:`grpo_identity.dial.Dial`
#: (the definition takes its parameters), ``cov`` the pair (Σ₊, Σ₋) of class score covariances, ``R`` one
#: group's rewards and ``s`` its scores (sequences: exact values for the definition, arrays for the twin); ``rho,A,eps``
#: a token's ratio, advantage and clip range (ε_low, ε_high), ``x`` one answer's per-token log-ratios, ``rho,beta``
#: a token's reference ratio π_ref/π_θ and the KL weight; ``r,cap`` a rollout–trainer ratio π_old/μ and a truncation
#: cap, ``r,low,high`` that ratio and a mask's bounds
Signature = Literal[
    "k,G",
    "G,p",
    "eps,p",
    "p",
    "k,G,dial",
    "G,k,n",
    "k,G,cov",
    "k,G,p",
    "R",
    "R,s",
    "rho,A,eps",
    "x",
    "rho,beta",
    "r,cap",
    "r,low,high",
]


@dataclass(frozen=True)
class Formula:
    """One registered quantity."""

    name: str
    """The one name of the quantity, used in code, CLI output, notebooks and README."""
    quantity: str
    """The quantity in words."""
    formula: str
    """The formula as printed in the README cheat sheet."""
    paper_ref: str
    """Where the paper states it."""
    symbolic: str
    """``module:function`` of the SymPy definition."""
    twin: str
    """``module:function`` of the fast numeric twin."""
    proof: str
    """Name of the theorem in :mod:`grpo_identity.proofs` that proves it."""
    signature: Signature
    """Arguments shared by the definition and the twin, in this order."""
    twin_part: int | None = None
    """When the twin returns a tuple, the index of this quantity in it."""


_F = "grpo_identity.formulas:"
_C = "grpo_identity.closed_forms:"

REGISTRY: tuple[Formula, ...] = (
    Formula(
        "group_mean", "group mean reward", "μ = k/G", "§Setting", _F + "group_mean", _C + "group_mean", "T1", "k,G"
    ),
    Formula(
        "sigma",
        "group standard deviation of binary rewards (ddof 0)",
        "σ = √(k(G−k))/G = √(μ(1−μ))",
        "§Setting, Theorem 1",
        _F + "sigma",
        _C + "sigma",
        "T1",
        "k,G",
    ),
    Formula(
        "advantage_correct",
        "GRPO advantage of a correct answer",
        "Â₊ = (G−k)/(Gσ)",
        "Theorem 1 (proof)",
        _F + "advantage_correct",
        _C + "advantage_values",
        "T2",
        "k,G",
        twin_part=0,
    ),
    Formula(
        "advantage_incorrect",
        "GRPO advantage of an incorrect answer",
        "Â₋ = −k/(Gσ)",
        "Theorem 1 (proof)",
        _F + "advantage_incorrect",
        _C + "advantage_values",
        "T2",
        "k,G",
        twin_part=1,
    ),
    Formula(
        "update_coefficient",
        "update coefficient c in g = c·(s̄₊ − s̄₋)",
        "GRPO σ, Dr. GRPO σ², DAPO 1{0<k<G}·σ",
        "Theorem 1, §The three methods",
        _F + "update_coefficient",
        "grpo_identity.dial:coefficient",
        "T6",
        "k,G,dial",
    ),
    Formula(
        "silent_rate",
        "probability that a group is silent (σ = 0)",
        "P(k∈{0,G}) = p^G + (1−p)^G",
        "claim 6",
        _F + "silent_rate",
        _C + "silent_rate",
        "T8",
        "G,p",
    ),
    Formula(
        "subsampled_silent_rate",
        "silent rate of G answers drawn from n logged rollouts, k correct",
        "[C(k,G) + C(n−k,G)] / C(n,G)",
        "claim 8",
        _F + "subsampled_silent_rate",
        _C + "subsampled_silent_rate",
        "T8",
        "G,k,n",
    ),
    Formula(
        "expected_update",
        "exact expected GRPO update",
        "E[g] = (1/G) Σ_{k=1}^{G−1} C(G,k) p^k (1−p)^{G−k} √(k(G−k))",
        "Proposition 2",
        _F + "expected_update",
        _C + "expected_update",
        "T10",
        "G,p",
    ),
    Formula(
        "expected_sigma_sq",
        "expected Dr. GRPO coefficient",
        "E[σ²] = p(1−p)(1 − 1/G)",
        "Proposition 2",
        _F + "expected_sigma_sq",
        _C + "expected_sigma_sq",
        "T9",
        "G,p",
    ),
    Formula(
        "fidelity",
        "fidelity of the expected update",
        "φ(G,p) = E[g]/√(p(1−p))",
        "Corollary 2",
        _F + "fidelity",
        _C + "fidelity",
        "T11",
        "G,p",
    ),
    Formula(
        "attenuation_first_order",
        "first-order attenuation law",
        "φ ≈ 1 − 1/(8Gp(1−p))",
        "Corollary 1",
        _F + "attenuation_first_order",
        _C + "attenuation_first_order",
        "T11",
        "G,p",
    ),
    Formula(
        "attenuation_second_order",
        "second-order attenuation law (beyond the paper)",
        "φ ≈ 1 − 1/(8Gp(1−p)) − (7 − 16p(1−p))/(128G²p²(1−p)²)",
        "Corollary 1 (next term)",
        _F + "attenuation_second_order",
        _C + "attenuation_second_order",
        "T11",
        "G,p",
    ),
    Formula(
        "group_size_law",
        "group-size law (first order)",
        "G* = 1/(8εp(1−p)) = w(p)²/(8ε)",
        "Corollary 2",
        _F + "group_size_law",
        _C + "group_size_law",
        "T12",
        "eps,p",
    ),
    Formula(
        "difficulty_weight",
        "difficulty weight",
        "w(p) = 1/√(p(1−p)) = d/dp 2·arcsin√p",
        "claim 7",
        _F + "difficulty_weight",
        _C + "difficulty_weight",
        "T13",
        "p",
    ),
    Formula(
        "arcsine_objective",
        "objective GRPO ascends per prompt",
        "2·arcsin√p",
        "claim 7",
        _F + "arcsine_objective",
        _C + "arcsine_objective",
        "T13",
        "p",
    ),
    Formula(
        "expected_score_gap",
        "expected score gap given k, any policy (beyond the paper)",
        "E[s̄₊ − s̄₋ | k] = ∇p/(p(1−p)); E[g | k] = c(k,G)·∇p/(p(1−p))",
        "beyond the paper (Theorem 1 in expectation)",
        _F + "expected_score_gap",
        _C + "expected_score_gap",
        "G7",
        "p",
    ),
    Formula(
        "expected_update_given_k",
        "expected update given k, any policy (beyond the paper)",
        "E[g | k] = c(k,G)·∇p/(p(1−p)); GRPO σ_k, Dr. GRPO σ_k²",
        "beyond the paper (Theorem 1 in expectation)",
        _F + "expected_update_given_k",
        _C + "expected_update_given_k",
        "G7",
        "k,G,p",
    ),
    Formula(
        "update_covariance_given_k",
        "covariance of the update given k, any policy (beyond the paper)",
        "Cov(g | k) = c²(Σ₊/k + Σ₋/(G−k)); GRPO, Σ₊ = Σ₋ = Σ: Σ/G",
        "beyond the paper",
        _F + "update_covariance_given_k",
        _C + "update_covariance_given_k",
        "G8",
        "k,G,cov",
    ),
    Formula(
        "reward_std",
        "group standard deviation of any rewards (ddof 0; beyond the paper)",
        "σ_R = √((1/G) Σ (Rᵢ − R̄)²); binary rewards: σ",
        "beyond the paper (§Limits: non-binary rewards)",
        _F + "reward_std",
        _C + "reward_std",
        "G9",
        "R",
    ),
    Formula(
        "score_slope",
        "least-squares slope of the scores on the rewards (beyond the paper)",
        "β̂ = Σ(Rᵢ − R̄)(sᵢ − s̄)/Σ(Rᵢ − R̄)²; (1/G)Σ(Rᵢ − R̄)sᵢ = σ_R²·β̂; binary: s̄₊ − s̄₋",
        "beyond the paper (§Limits: non-binary rewards)",
        _F + "score_slope",
        _C + "score_slope",
        "G9",
        "R,s",
    ),
    Formula(
        "clipped_surrogate",
        "clipped surrogate of one token (GRPO, DAPO; beyond the paper)",
        "min(ρÂ, clip(ρ, 1 − ε_low, 1 + ε_high)·Â), ρ = π_θ/π_old",
        "beyond the paper (§Limits: clipping)",
        _F + "clipped_surrogate",
        _C + "clipped_surrogate",
        "G10",
        "rho,A,eps",
    ),
    Formula(
        "token_weight",
        "weight of a token's score in the clipped surrogate's gradient (beyond the paper)",
        "w = ρ, 0 where clipped (Â > 0, ρ > 1 + ε_high or Â < 0, ρ < 1 − ε_low); ∇ = w·Â·∇log π",
        "beyond the paper (§Limits: clipping)",
        _F + "token_weight",
        _C + "token_weight",
        "G10",
        "rho,A,eps",
    ),
    Formula(
        "sequence_ratio",
        "GSPO's sequence-level importance ratio (beyond the paper)",
        "s = exp((1/L) Σ_t (log π_θ − log π_old)); every token's weight s·Â",
        "beyond the paper (§Limits: clipping)",
        _F + "sequence_ratio",
        _C + "sequence_ratio",
        "G10",
        "x",
    ),
    Formula(
        "kl_gradient_weight",
        "weight of a token's score in the gradient of −β·KL₃ (beyond the paper)",
        "β(π_ref/π_θ − 1); 0 iff π_θ = π_ref, whatever Â",
        "beyond the paper (§Limits: KL)",
        _F + "kl_gradient_weight",
        _C + "kl_gradient_weight",
        "G10",
        "rho,beta",
    ),
    Formula(
        "truncated_weight",
        "truncated importance weight of a rollout–trainer mismatch (TIS; beyond the paper)",
        "min(r, C), r = π_old/μ per token (or per answer); 1 where μ = π_old, C ≥ 1",
        "beyond the paper (§Limits: every step after the first)",
        _F + "truncated_weight",
        _C + "truncated_weight",
        "G11",
        "r,cap",
    ),
    Formula(
        "masked_weight",
        "masked importance weight of a rollout–trainer mismatch (MIS, IcePop; beyond the paper)",
        "r·1{α ≤ r ≤ β}, r = π_old/μ; 1 where μ = π_old, α ≤ 1 ≤ β",
        "beyond the paper (§Limits: every step after the first)",
        _F + "masked_weight",
        _C + "masked_weight",
        "G11",
        "r,low,high",
    ),
    Formula(
        "sequence_product_ratio",
        "an answer's product of its token ratios (beyond the paper)",
        "exp(Σ_t x_t) = (geometric mean)^L; x_t = log π_old − log μ for the rollout correction",
        "beyond the paper (§Limits: every step after the first)",
        _F + "sequence_product_ratio",
        _C + "sequence_product_ratio",
        "G11",
        "x",
    ),
)


def by_name(name: str) -> Formula:
    """The registry entry called ``name``."""
    for f in REGISTRY:
        if f.name == name:
            return f
    raise KeyError(f"no formula named {name!r}; known: {', '.join(f.name for f in REGISTRY)}")


def resolve(target: str) -> Callable[..., Any]:
    """Import ``module:function`` and return the function."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)
