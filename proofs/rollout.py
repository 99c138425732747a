"""Theorem G11: three policies — the rollout–trainer mismatch and its corrections.

The rollout engine (vLLM, SGLang) samples the answers from its own policy μ, which differs from the trainer's
π_old by kernels, precision and sampler settings even at the same weights.  A correction multiplies each token's
surrogate by a weight ω computed from r = π_old/μ (per token) or from the answer's log-ratios x_t = log π_old −
log μ (per answer), and treats ω as a constant of the step (detached).  G11 says what that makes of the update.

1. **Any detached weight.**  ∂/∂θ [ω·min(ρÂ, clip(ρ)Â)] = ω·w·Â·∇log π_θ in each of the six open regions of
   (sign Â, ρ) (G10's w); a weight per answer factors out of its tokens' sum, so the group update is
   c·(s̃̄₊ − s̃̄₋) with s̃ᵢ = Σ_t ω_it w_it ∇log π_it: the identity's coefficient c is unchanged.  A weight the
   same for the whole group multiplies the update by it.
2. **The estimators** (:func:`~grpo_identity.formulas.truncated_weight` min(r, C),
   :func:`~grpo_identity.formulas.masked_weight` r·1{α ≤ r ≤ β}, the sequence's product of ratios
   :func:`~grpo_identity.formulas.sequence_product_ratio` exp(Σ_t x_t) and its geometric mean
   :func:`~grpo_identity.formulas.sequence_ratio` exp((1/L) Σ_t x_t)): the product is the geometric mean to
   the power L (symbolic L); a mismatch δ on every token gives the product exp(Lδ), the mean exp(δ).
3. **The on-policy limit.**  μ = π_old (r = 1, x_t = 0) gives each weight exactly 1, for symbolic L, whenever
   the cap is C ≥ 1 and the mask's bounds α ≤ 1 ≤ β; a cap C < 1 scales even the on-policy update by C.
4. **Failure modes, stated.**  A weight recomputed from π_θ and left in the graph doubles the gradient of a
   token whose PPO clip is open (2·ω·ρ·Â·∇log π below the cap; above it the flat min carries none; where the clip
   is closed the detached gradient is 0 and the attached one is not); rollout log-probabilities filled with 0
   (log μ := 0) turn the weight into π_old(y_t) itself; where μ covers π_old's support (μ_v > 0 wherever
   π_old,v > 0: what a sampler's top-p/top-k breaks) the token ratio is unbiased, Σ_v μ_v·(π_v/μ_v) = Σ_v π_v
   (= 1) over any vocabulary of V tokens (symbolic V).
5. **A truncating sampler.**  Top-p/top-k sampling renormalised over the kept tokens (vLLM's processed
   log-probabilities: μ_v = π_v/S, S the kept mass under π_old) gives every sampled token r = S, whatever the
   token: the truncated weight is S < 1 where the policies agree, and the sequence product S^L where every
   position keeps the mass S (Πₜ Sₜ in general; trl #6789, where
   the bias is measured; replaying the truncation on the trainer's side makes r = 1 again).

**Method.**  As G10: each region of the token's ratio is a point that runs over the whole region (positive
symbols), every condition is decided by :func:`~grpo_identity.proofs.offpolicy.decide`, sums keep a symbolic
length.  Sources of the estimators: truncated IS, Yao et al. 2025 ("Your efficient RL framework secretly brings you
off-policy RL training", fengyao.notion.site); masked and sequence-level IS and the geometric mean, verl's rollout
correction documentation (docs/algo/rollout_corr.md); IcePop's two-sided mask, Ling Team 2025 (arXiv 2510.18855).

>>> G11.prove().status
'proved'
"""

from __future__ import annotations

from typing import Any

import sympy as sp

from grpo_identity import formulas as F
from grpo_identity.proofs.core import Claim, Formulas, G_interior, Theorem, k, m
from grpo_identity.proofs.offpolicy import cases, decide, ell, score, theta, token_gradient_at, token_term

__all__ = ["G11"]

GI = G_interior
x, L = F.log_ratio, F.L
_omega = sp.Symbol("omega", positive=True)  # a detached correction weight (any function of π_old and μ)
_c = sp.Symbol("c", nonnegative=True)  # C = 1 + c ≥ 1, β = 1 + c ≥ 1
_a = sp.Symbol("a", positive=True)  # α = 1/(1 + a) < 1, or C = 1/(1 + a) < 1
_lam = sp.Symbol("lambda", positive=True)  # π_old(y) = 1/(1 + λ) < 1: a token's probability
_delta = sp.Symbol("delta", real=True)  # a mismatch log-ratio the same on every token
_above = sp.Symbol("eta", positive=True)  # r = C(1 + η): above the cap
_i = sp.Symbol("i", integer=True, positive=True)
_v = sp.Symbol("v", integer=True, positive=True)
_V = sp.Symbol("V", integer=True, positive=True)
_s = sp.Function(r"\hat{s}", real=True)  # ŝ(i) = Σ_t w_it ∇ℓ_it: answer i's clip-weighted score (G10)
_d_ell = sp.Symbol(r"\nabla\ell", real=True)  # the token's score, held as a symbol
_ell_mu, _ell_old = sp.symbols(r"\ell_{\mu} \ell_{old}", real=True)


def _with(expr: Any, value: Any) -> sp.Expr:
    """``expr`` with every token's log-ratio x_t replaced by ``value``, its sums done."""
    return sp.sympify(expr).replace(lambda e: isinstance(e, sp.Indexed) and e.base == x, lambda e: value).doit()


def _weighted(f: Formulas) -> list[Claim]:
    out = [
        Claim(
            f"{label}{' (clipped)' if clipped else ''}, a detached weight omega: "
            "d/dtheta [omega min(rA, clip(r)A)] = omega w A dlog pi/dtheta",
            token_gradient_at(_omega * token_term(f, A, lo), rho),
            _omega * decide(f.token_weight(rho, A, lo, F.eps_high)) * A * score,
        )
        for label, A, lo, rho, clipped in cases()
    ]
    a_plus, a_minus, sigma = f.advantage_correct(k, GI), f.advantage_incorrect(k, GI), f.sigma(k, GI)
    weights = sp.Function("omega", positive=True)

    def update(w: Any) -> sp.Expr:
        return (sp.Sum(a_plus * w(_i) * _s(_i), (_i, 1, k)) + sp.Sum(a_minus * w(_i) * _s(_i), (_i, k + 1, k + m))) / GI

    def gap(w: Any) -> sp.Expr:
        return sp.Sum(w(_i) * _s(_i), (_i, 1, k)) / k - sp.Sum(w(_i) * _s(_i), (_i, k + 1, k + m)) / m

    uniform = sp.Lambda(_i, _omega)
    out += [
        Claim("a weight omega_i per answer: (1/G) sum A_i omega_i s_i = sigma (mean+ - mean-) of omega_i s_i",
              update(weights), sigma * gap(weights)),
        Claim("one weight omega for the group: the update is omega sigma (sbar+ - sbar-)",
              update(uniform), _omega * sigma * gap(sp.Lambda(_i, 1))),
    ]  # fmt: skip
    return out


def _estimators(f: Formulas) -> list[Claim]:
    product, mean = f.sequence_product_ratio(x, L), f.sequence_ratio(x, L)
    return [
        Claim("the product of the token ratios is their geometric mean to the power L (symbolic L)",
              product, sp.powsimp(mean**L, force=True)),
        Claim("a mismatch delta on every token: the product is exp(L delta)", _with(product, _delta),
              sp.exp(L * _delta)),
        Claim("... and the geometric mean exp(delta), whatever the answer's length", _with(mean, _delta),
              sp.exp(_delta)),
        Claim("truncated: min(r, C) = C above the cap", decide(f.truncated_weight(F.cap * (1 + _above), F.cap)),
              F.cap),
        Claim("masked: r above beta gives 0", decide(f.masked_weight(2 + _c, 1 / (1 + _a), 1 + _c)), 0),
        Claim("masked: r below alpha gives 0", decide(f.masked_weight(1 / (2 + _a), 1 / (1 + _a), 1 + _c)), 0),
    ]  # fmt: skip


def _on_policy(f: Formulas) -> list[Claim]:
    at_one = _with(f.sequence_product_ratio(x, L), 0)
    return [
        Claim("mu = pi_old: the truncated weight min(1, C) = 1 for C >= 1", f.truncated_weight(1, 1 + _c), 1),
        Claim("a cap C < 1 scales the on-policy token by C", f.truncated_weight(1, 1 / (1 + _a)), 1 / (1 + _a)),
        Claim("mu = pi_old: the masked weight is 1 for alpha <= 1 <= beta",
              decide(f.masked_weight(1, 1 / (1 + _a), 1 + _c)), 1),
        Claim("... and for the one-sided mask (alpha = 0)", decide(f.masked_weight(1, 0, 1 + _c)), 1),
        Claim("mu = pi_old: the sequence product is 1 for symbolic L", at_one, 1),
        Claim("... truncated at C >= 1 it stays 1", f.truncated_weight(at_one, 1 + _c), 1),
        Claim("mu = pi_old: the geometric mean is 1 for symbolic L", _with(f.sequence_ratio(x, L), 0), 1),
    ]  # fmt: skip


def _failures(f: Formulas) -> list[Claim]:
    rho = sp.exp(ell(theta) - _ell_old)  # π_θ/π_old
    attached = sp.exp(ell(theta) - _ell_mu)  # the weight recomputed from π_θ, in the graph

    def gradient(term: Any) -> sp.Expr:
        return sp.diff(term, theta).subs(sp.Derivative(ell(theta), theta), _d_ell)

    below = gradient(f.truncated_weight(attached, F.cap) * rho * F.advantage)
    below = decide(below.subs(ell(theta), _ell_mu + sp.log(F.cap / (1 + _above))).rewrite(sp.Piecewise))
    over = gradient(f.truncated_weight(attached, F.cap) * rho * F.advantage)
    over = decide(over.subs(ell(theta), _ell_mu + sp.log(F.cap * (1 + _above))).rewrite(sp.Piecewise))
    rho_below = sp.exp(_ell_mu + sp.log(F.cap / (1 + _above)) - _ell_old)
    rho_over = sp.exp(_ell_mu + sp.log(F.cap * (1 + _above)) - _ell_old)
    mu, pi = sp.Function("mu", positive=True), sp.Function("pi", positive=True)
    return [
        Claim("a weight recomputed from pi_theta and kept in the graph, below the cap, the PPO clip open: "
              "2x the detached gradient",
              below, 2 * f.truncated_weight(F.cap / (1 + _above), F.cap) * rho_below * F.advantage * _d_ell),
        Claim("... above the cap the flat min carries no gradient: the detached C rho A",
              over, f.truncated_weight(F.cap * (1 + _above), F.cap) * rho_over * F.advantage * _d_ell),
        Claim("rollout log-probs filled with 0 (log mu := 0): the weight is pi_old(y) itself (C >= 1)",
              decide(f.truncated_weight(1 / (1 + _lam), 1 + _c).rewrite(sp.Piecewise)), 1 / (1 + _lam)),
        Claim("mu covering pi_old's support: sum_v mu_v (pi_v/mu_v) = sum_v pi_v over V tokens (symbolic V)",
              sp.Sum(mu(_v) * (pi(_v) / mu(_v)), (_v, 1, _V)), sp.Sum(pi(_v), (_v, 1, _V))),
    ]  # fmt: skip


def _truncated_sampler(f: Formulas) -> list[Claim]:
    """A sampler that keeps part of the vocabulary (top-p, top-k, min-p) and renormalises over it, as vLLM's
    processed log-probabilities do: μ_v = π_v/S on the kept set, S its mass under π_old (trl #6789)."""
    kept = 1 / (1 + _a)  # S, 0 < S < 1
    p = kept / (1 + _lam)  # a kept token's probability under π_old (below S)
    ratio = sp.exp(sp.expand_log(sp.log(p) - sp.log(p / kept), force=True))  # π_old/μ of the sampled token
    return [
        Claim("a sampler renormalised over its kept mass S: the sampled token's ratio is S, whatever the token",
              ratio, kept),
        Claim("... so its truncated weight (C >= 1) is S < 1, not 1, at the same weights",
              decide(f.truncated_weight(ratio, 1 + _c).rewrite(sp.Piecewise)), kept),
        Claim("... and, the same kept mass S at every position, the sequence product S^L (symbolic L)",
              _with(f.sequence_product_ratio(x, L), sp.log(kept)), kept**L),
    ]  # fmt: skip


def _g11(f: Formulas) -> list[Claim]:
    return _weighted(f) + _estimators(f) + _on_policy(f) + _failures(f) + _truncated_sampler(f)


G11 = Theorem(
    "G11",
    "three policies: rollout–trainer mismatch corrections",
    "With answers sampled by a rollout policy μ ≠ π_old and a correction weight ω computed from r = π_old/μ (or "
    "from an answer's log-ratios x_t = log π_old − log μ) and detached, the gradient of ω·min(ρÂ, clip(ρ)Â) is "
    "ω·w·Â·∇log π_θ in each of the six open regions of (sign Â, ρ) (symbolic ρ, Â, ε_low, ε_high, ω), so the group "
    "update is σ(s̃̄₊ − s̃̄₋) with s̃ᵢ = Σ_t ω_it w_it ∇log π_it: the identity with importance-weighted scores, its "
    "coefficient unchanged (symbolic k, m); one weight ω for the whole group multiplies the update by ω.  "
    "The sequence's product of ratios exp(Σ_t x_t) is the geometric mean "
    "exp((1/L) Σ_t x_t) to the power L (symbolic L): a mismatch δ on every token gives exp(Lδ) against exp(δ).  "
    "At μ = π_old every estimator is exactly 1 — truncated min(r, C) for C ≥ 1, masked r·1{α ≤ r ≤ β} for "
    "α ≤ 1 ≤ β (α = 0 included), the product and the geometric mean for symbolic L — while a cap C < 1 scales the "
    "on-policy token by C.  A weight recomputed from π_θ and kept in the graph doubles the gradient of a token "
    "whose PPO clip is open, below the cap (the flat cap carries none above it); log μ filled with 0 makes the "
    "weight π_old(y); where μ covers π_old's support the token ratio is unbiased, Σ_v μ_v·π_v/μ_v = Σ_v π_v = 1 "
    "(symbolic V).  A sampler that keeps part of the vocabulary (top-p, top-k) and renormalises over it "
    "(μ_v = π_v/S, S the kept mass) gives every sampled token the ratio S, whatever the token: a truncated "
    "weight S < 1 at the same weights, a sequence product S^L where every position keeps the mass S (symbolic L; "
    "Πₜ Sₜ in general).  Not covered: the bias of a truncated "
    "or masked weight in expectation, other KL or clip forms.",
    "beyond the paper (§Limits: every step after the first)",
    "theta real (one coordinate); log-probabilities differentiable in theta; omega, C, alpha, beta positive and "
    "constant in theta (detached) except where stated; the in-graph claim without the PPO clip (rho = 1 or the "
    "clip open); mu_v > 0 wherever pi_old,v > 0 and sum_v pi_v = 1 for the unbiasedness; "
    "eps_low, eps_high > 0 as in G10; ratios off the kinks; "
    "k, m positive integers, G = k + m; answer lengths L positive integers; the advantages constant within an answer",
    _g11,
    lambda f: (
        sp.Eq(sp.Symbol(r"\omega^{TIS}"), f.truncated_weight(), evaluate=False),
        sp.Eq(sp.Symbol(r"\omega^{seq}"), f.sequence_product_ratio(), evaluate=False),
        sp.Eq(
            sp.Symbol("g"),
            f.sigma() * (sp.Symbol(r"\bar{\tilde{s}}_{+}") - sp.Symbol(r"\bar{\tilde{s}}_{-}")),
            evaluate=False,
        ),
    ),
)
