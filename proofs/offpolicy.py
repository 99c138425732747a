"""Theorem G10: off-policy steps — per-token importance weights, clipping and KL.

G6 proves the GRPO loss at its first on-policy step, where every ratio is 1 and the policy is the
reference.  From the second optimiser step on a batch the token ratios ρ = π_θ/π_old move away from
1, the clip can bite and the KL term pulls; G10 says what the gradient is then.

1. **The token clip at any ratio.**  ∂/∂θ min(ρÂ, clip(ρ, 1 − ε_low, 1 + ε_high)Â) = w·Â·∇log π_θ
   with w = :func:`grpo_identity.formulas.token_weight`: ρ, or 0 where the token is clipped.
2. **The group.**  With s̃ᵢ = Σ_t w_it ∇log π_it the update is (1/G) Σᵢ Âᵢ s̃ᵢ = c·(s̃̄₊ − s̃̄₋), the
   coefficient c of the on-policy identity (σ for GRPO, σ² for Dr. GRPO); a silent group gets 0.
3. **GSPO.**  The sequence ratio s = exp((1/L) Σ_t x_t) (:func:`~grpo_identity.formulas.sequence_ratio`)
   gives every token of the answer the weight w(s, Â): ∂/∂x_u = w(s, Â)·Â for each u, against ρ_u·Â
   for the token ratio.
4. **KL.**  −β·KL₃ adds :func:`~grpo_identity.formulas.kl_gradient_weight`, β(π_ref/π_θ − 1), times
   ∇log π_θ on every token, whatever Â.

**Cases by substitution.**  The surrogate is a ``Piecewise``.  Each of the six open regions of
(sign Â, ρ) is a point that runs over the whole region as the positive symbol δ does: ρ = (1 − ε_low)/(1 + δ)
below the clip range (with ε_low = κ/(1 + κ), κ > 0: below 1 − ε_low there is no positive ratio
unless ε_low < 1), ρ = ((1 − ε_low) + (1 + ε_high)δ)/(1 + δ) inside it, ρ = 1 + ε_high + δ above it;
Â = ±a with a > 0.  :func:`decide` writes every condition a ⋚ b as factor(a − b) ⋚ 0, which SymPy's
assumptions decide from the signs of the symbols, so each ``Piecewise`` collapses to one branch; a
condition left undecided leaves a ``Piecewise`` in the residual, and the claim fails.

**Sums.**  GSPO's claims (and the unclipped token-ratio contrast) differentiate with respect to token
u's log-ratio x_u (= ∂/∂log π_u, π_old fixed) inside a ``Sum`` of symbolic length L = u + v.  The
clipped token ratio in a sequence is part 1 applied token by token (each term of the loss depends on
its own token only); the group claims first sum any weights w(i, t) over an answer of symbolic length
L(i), then take s̃ᵢ as an arbitrary function of i over the two sides of symbolic sizes k and m.

>>> G10.prove().status
'proved'
"""

from __future__ import annotations

from typing import Any

import sympy as sp

from grpo_identity import formulas as F
from grpo_identity.proofs.beyond import kl_k3
from grpo_identity.proofs.core import Claim, Formulas, G_interior, Theorem, k, m

__all__ = [
    "G10",
    "decide",
    "token_gradient_at",
    "REGIONS",
    "token_term",
    "gspo_token_gradient",
    "cases",
    "ell",
    "score",
    "theta",
]

GI = G_interior
el, eh, beta = F.eps_low, F.eps_high, F.beta
x, L = F.log_ratio, F.L
_a = sp.Symbol("a", positive=True)  # |Â|
_delta = sp.Symbol("delta", positive=True)  # where the ratio sits inside its region
_kappa = sp.Symbol("kappa", positive=True)  # ε_low = κ/(1 + κ) < 1 in the region below the clip range
theta = sp.Symbol("theta", real=True)  # one coordinate of the parameters
ell = sp.Function("ell")  # a token's log-probability under π_θ, as a function of θ
_ell_old, _ell_ref = sp.symbols(r"\ell_{old} \ell_{ref}", real=True)  # … under π_old and π_ref
score = sp.Derivative(ell(theta), theta)  # the token's score ∇log π_θ (one coordinate)
_t = sp.Symbol("t", integer=True, positive=True)  # a token's index in its answer
_u = sp.Symbol("u", integer=True, positive=True)  # the token whose log-probability is varied
_v = sp.Symbol("v", integer=True, nonnegative=True)  # L = u + v: token u lies in the answer
_i = sp.Symbol("i", integer=True, positive=True)  # an answer's index in its group


# --- deciding the cases -------------------------------------------------------------------------
def decide(expr: Any) -> sp.Expr:
    """``expr`` with every relational a ⋚ b written factor(a − b) ⋚ 0, which SymPy decides where the
    signs of the symbols do; a ``Piecewise`` whose conditions are decided collapses to its branch.

    >>> decide(sp.Piecewise((0, 1 + el + _delta > 1), (1, True)))
    0
    """
    return sp.sympify(expr).replace(
        lambda e: isinstance(e, sp.core.relational.Relational),
        lambda e: e.func(sp.factor(sp.together(e.lhs - e.rhs)), 0),
    )


def _below() -> tuple[Any, Any]:
    lo = _kappa / (1 + _kappa)
    return lo, (1 - lo) / (1 + _delta)


#: the three open regions of the ratio: (name, the ε_low the region is written with, a point ρ that runs
#: over the whole region as δ > 0 does)
REGIONS: tuple[tuple[str, Any, Any], ...] = (
    ("rho < 1 - eps_low", *_below()),
    ("1 - eps_low < rho < 1 + eps_high", el, ((1 - el) + (1 + eh) * _delta) / (1 + _delta)),
    ("rho > 1 + eps_high", el, 1 + eh + _delta),
)
#: the two signs of the advantage, Â = ±a with a > 0
SIGNS: tuple[tuple[str, Any], ...] = (("A > 0", _a), ("A < 0", -_a))


def _clipped(sign: str, region: str) -> bool:
    """Whether the surrogate is flat there: Â > 0 above the clip range, Â < 0 below it."""
    return (sign, region) in {("A > 0", REGIONS[2][0]), ("A < 0", REGIONS[0][0])}


def cases() -> list[tuple[str, Any, Any, Any, bool]]:
    """(label, Â, ε_low, ρ, clipped) for the six open regions of (sign Â, ρ)."""
    return [(f"{s}, {r}", A, lo, rho, _clipped(s, r)) for s, A in SIGNS for r, lo, rho in REGIONS]


# --- 1. the token clip at any ratio ------------------------------------------------------------------
def token_term(f: Formulas, A: Any, lo: Any = el) -> sp.Expr:
    """A token's clipped surrogate min(rÂ, clip(r)Â) with r = π_θ/π_old = exp(ℓ(θ) − ℓ_old)."""
    return f.clipped_surrogate(sp.exp(ell(theta) - _ell_old), A, lo, eh)


def token_gradient_at(term: Any, ratio: Any) -> sp.Expr:
    """d term/dθ where the token's ratio exp(ℓ(θ) − ℓ_old) is ``ratio``, the score kept as
    ``Derivative(ℓ(θ), θ)`` and every condition decided (:func:`decide`)."""
    held = sp.Dummy("score")
    grad = sp.diff(term, theta).subs(score, held)
    return decide(grad.subs(ell(theta), _ell_old + sp.log(ratio))).subs(held, score)


def _token_clip(f: Formulas) -> list[Claim]:
    out = []
    for label, A, lo, rho, clipped in cases():
        w = decide(f.token_weight(rho, A, lo, eh))
        out += [
            Claim(
                f"{label}{' (clipped)' if clipped else ''}: d/dtheta min(rA, clip(r)A) = w A dlog pi/dtheta",
                token_gradient_at(token_term(f, A, lo), rho),
                w * A * score,
            ),
            Claim(f"{label}: w = {'0' if clipped else 'rho'}", w, 0 if clipped else rho),
        ]
    out += [
        Claim("A = 0: d/dtheta min(rA, clip(r)A) = 0 at any ratio", sp.diff(token_term(f, 0), theta), 0),
        Claim("at ratio 1 (G6's first step) w = 1 for any A", decide(f.token_weight(1, F.advantage, el, eh)), 1),
    ]
    return out


# --- 2. the group ------------------------------------------------------------------------------------
_rho = sp.Function("rho", positive=True)  # ρ(i, t): the ratio of token t of answer i
_nabla = sp.Function(r"\nabla\ell", real=True)  # ∇ℓ(i, t): its score (one coordinate)
_length = sp.Function("L", integer=True, positive=True)  # L(i): the length of answer i
_tilde = sp.Function(r"\tilde{s}", real=True)  # s̃(i) = Σ_t w_it ∇ℓ_it: answer i's weighted score
_w = sp.Function("w", real=True)  # w(i, t): any weight of token t of answer i (the clip-masked ratio among them)


def _group(f: Formulas) -> list[Claim]:
    a_plus, a_minus = f.advantage_correct(k, GI), f.advantage_incorrect(k, GI)
    mu = f.group_mean(k, GI)
    out = [
        Claim(
            "correct answers (A+ > 0): the clip mask is rho <= 1 + eps_high",
            decide(f.token_weight(_rho(_i, _t), a_plus, el, eh)),
            decide(sp.Piecewise((0, _rho(_i, _t) > 1 + eh), (_rho(_i, _t), True))),
        ),
        Claim(
            "incorrect answers (A- < 0): the clip mask is rho >= 1 - eps_low",
            decide(f.token_weight(_rho(_i, _t), a_minus, el, eh)),
            decide(sp.Piecewise((0, _rho(_i, _t) < 1 - el), (_rho(_i, _t), True))),
        ),
        Claim(
            "answer i, L(i) tokens, any weights: sum_t w_it A_i dlog pi_it = A_i s~_i, s~_i = sum_t w_it dlog pi_it",
            sp.Sum(_w(_i, _t) * F.advantage * _nabla(_i, _t), (_t, 1, _length(_i))),
            F.advantage * sp.Sum(_w(_i, _t) * _nabla(_i, _t), (_t, 1, _length(_i))),
        ),
    ]
    advantages = {
        "GRPO: (1/G) sum A_i s~_i = sigma (s~bar+ - s~bar-), symbolic k and m": (a_plus, a_minus, f.sigma(k, GI)),
        "Dr. GRPO: (1/G) sum A_i s~_i = sigma^2 (s~bar+ - s~bar-)": (
            1 - mu,
            -mu,
            f.update_coefficient(scale="none", k=k, G=GI),
        ),
    }
    for label, (ap, am, c) in advantages.items():
        update = (sp.Sum(ap * _tilde(_i), (_i, 1, k)) + sp.Sum(am * _tilde(_i), (_i, k + 1, k + m))) / GI
        gap = sp.Sum(_tilde(_i), (_i, 1, k)) / k - sp.Sum(_tilde(_i), (_i, k + 1, k + m)) / m
        out.append(Claim(label, update, c * gap))
    out.append(
        Claim(
            "every answer of a silent group (A = 0): the surrogate's gradient is 0 at any ratios, symbolic L",
            sp.diff(_answer_objective(f, 0, kl=False), theta),
            0,
        )
    )
    return out


# --- 3. GSPO: one ratio per answer ---------------------------------------------------------------------
#: Σ_t x_t, the answer's summed log-ratio, as :func:`grpo_identity.formulas.sequence_ratio` writes it
_total = sp.Sum(x[_t], (_t, 1, L))


def gspo_token_gradient(f: Formulas, A: Any, lo: Any = el, clip: bool = True, ratio: Any = None) -> sp.Expr:
    """∂/∂x_u of GSPO's answer loss Σ_{t=1}^{L} min(sÂ, clip(s)Â) (or Σ_t s·Â without ``clip``), s the
    sequence ratio, for a token u of the answer (L = u + v); with ``ratio``, at the log-ratios whose
    mean is log ``ratio`` (Σ_t x_t = L log ``ratio``), every condition decided."""
    s = f.sequence_ratio(x, L)
    term = f.clipped_surrogate(s, A, lo, eh) if clip else s * A
    grad = sp.diff(L * term, x[_u])  # the same term on each of the L tokens: Σ_t term = L·term
    if ratio is not None:
        grad = grad.subs(_total, L * sp.log(ratio))
    return decide(grad.doit().subs(L, _u + _v))


def _gspo(f: Formulas) -> list[Claim]:
    s = f.sequence_ratio(x, L)
    out = [
        Claim(
            "GSPO, unclipped: d/dx_u sum_t s A = s A for every token u (symbolic L)",
            gspo_token_gradient(f, F.advantage, clip=False),
            (s * F.advantage).subs(L, _u + _v),
        ),
        Claim(
            "token ratio, unclipped: d/dx_u sum_t rho_t A = rho_u A (symbolic L)",
            decide(sp.diff(sp.Sum(sp.exp(x[_t]) * F.advantage, (_t, 1, L)), x[_u]).doit().subs(L, _u + _v)),
            sp.exp(x[_u]) * F.advantage,
        ),
    ]
    for label, A, lo, rho, clipped in cases():
        out.append(
            Claim(
                f"GSPO, s in {label.split(', ')[1]}, {label.split(', ')[0]}{' (clipped)' if clipped else ''}: "
                "d/dx_u sum_t min(sA, clip(s)A) = w(s, A) A for every u",
                gspo_token_gradient(f, A, lo, ratio=rho),
                decide(f.token_weight(rho, A, lo, eh)) * A,
            )
        )
    on_policy = s.replace(lambda e: isinstance(e, sp.Indexed) and e.base == x, lambda e: sp.Integer(0)).doit()
    out.append(Claim("at ratio 1 (every x_t = 0): s = 1, so both weights are A (G6)", on_policy, 1))
    return out


# --- 4. KL ----------------------------------------------------------------------------------------------
_old_t, _ref_t = sp.Function(r"\ell_{old}", real=True), sp.Function(r"\ell_{ref}", real=True)


def _answer_objective(f: Formulas, A: Any, kl: bool = True) -> sp.Sum:
    """One answer's token-summed objective Σ_{t=1}^{L} [min(r_tÂ, clip(r_t)Â) − β·KL₃_t], any ratios."""
    r = sp.exp(ell(_t, theta) - _old_t(_t))
    term = f.clipped_surrogate(r, A, el, eh) - (beta * kl_k3(_ref_t(_t) - ell(_t, theta)) if kl else 0)
    return sp.Sum(term, (_t, 1, L))


def _kl(f: Formulas) -> list[Claim]:
    ref_ratio = sp.exp(_ell_ref - ell(theta))  # π_ref/π_θ
    per_token_kl = sp.exp(_ref_t(_t) - ell(_t, theta))
    return [
        Claim(
            "d/dtheta (-beta KL3) = beta (pi_ref/pi - 1) dlog pi/dtheta, no A in it",
            sp.diff(-beta * kl_k3(_ell_ref - ell(theta)), theta),
            f.kl_gradient_weight(ref_ratio, beta) * score,
        ),
        Claim("it vanishes where pi = pi_ref (G6's first step)", f.kl_gradient_weight(1, beta), 0),
        Claim("and only there: > 0 where pi < pi_ref", f.kl_gradient_weight(1 + _delta, beta), kind="pos"),
        Claim("< 0 where pi > pi_ref", -f.kl_gradient_weight(1 / (1 + _delta), beta), kind="pos"),
        Claim(
            "silent answer (A = 0), any ratios, symbolic L: d/dtheta of its objective = "
            "sum_t beta (pi_ref,t/pi_t - 1) dlog pi_t/dtheta",
            sp.diff(_answer_objective(f, 0), theta),
            sp.Sum(f.kl_gradient_weight(per_token_kl, beta) * sp.diff(ell(_t, theta), theta), (_t, 1, L)),
        ),
    ]


def _g10(f: Formulas) -> list[Claim]:
    return _token_clip(f) + _group(f) + _gspo(f) + _kl(f)


G10 = Theorem(
    "G10",
    "off-policy steps: per-token importance weights, clipping and KL",
    "For a token with ratio ρ = π_θ/π_old and advantage Â, the gradient of the clipped surrogate "
    "min(ρÂ, clip(ρ, 1 − ε_low, 1 + ε_high)Â) is w·Â·∇log π, w = ρ, or w = 0 where the token is clipped (Â > 0 "
    "and ρ > 1 + ε_high, or Â < 0 and ρ < 1 − ε_low): proved in each of the six open regions of (sign Â, ρ) for "
    "symbolic ρ, Â, ε_low, ε_high, and for Â = 0 (gradient 0 at any ratio); at the kinks ρ = 1 − ε_low, "
    "1 + ε_high nothing is claimed.  For a group of G = k + m answers (symbolic k, m) with s̃ᵢ = Σ_t w_it∇log π_it "
    "(masks ρ ≤ 1 + ε_high on the correct side, ρ ≥ 1 − ε_low on the incorrect one) the update "
    "(1/G) Σᵢ Âᵢs̃ᵢ is σ(s̃̄₊ − s̃̄₋) for GRPO and σ²(s̃̄₊ − s̃̄₋) for Dr. GRPO, the on-policy coefficients: "
    "this step is the group algebra on the tokens' gradients of the first part (a sum of token terms "
    "differentiates term by term), not a case analysis of every token at once; a silent group (Â = 0) gets "
    "exactly 0 from the surrogate at any ratios.  GSPO's sequence ratio s = exp((1/L) Σ_t log(π_θ/π_old)), the "
    "loss summing its term over the L tokens, gives every token u the same weight, ∂/∂log π_u = w(s, Â)·Â "
    "(s·Â unclipped), against ρ_u·Â for the token ratio, for symbolic L; both are Â at ratio 1 (G6) (GSPO's "
    "own loss, one term per answer, divides each weight by L: G1's length weights).  "
    "The k3 KL term −β·KL₃ adds β(π_ref/π − 1)·∇log π per token, whatever Â: 0 iff π = π_ref on the token "
    "(G6's first step), so an answer of a silent group moves by exactly Σ_t β(π_ref,t/π_t − 1)∇log π_t "
    "(symbolic L).  Not covered: the dual clip (verl's clip_ratio_c), other KL estimators, GSPO-token.",
    "beyond the paper (§Limits: clipping, KL; every step after the first)",
    "theta real (one coordinate); log-probabilities differentiable functions of theta; eps_low, eps_high, beta > 0, "
    "eps_low < 1 where the region below 1 - eps_low is used; ratios off the kinks 1 - eps_low, 1 + eps_high; "
    "k, m positive integers, G = k + m; answer lengths positive integers, L = u + v symbolic for GSPO "
    "(1 <= u <= L the token varied); the advantages constant within an answer",
    _g10,
    lambda f: (
        sp.Eq(sp.Symbol("w"), f.token_weight(), evaluate=False),
        sp.Eq(
            sp.Symbol("g"),
            f.sigma() * (sp.Symbol(r"\bar{\tilde{s}}_{+}") - sp.Symbol(r"\bar{\tilde{s}}_{-}")),
            evaluate=False,
        ),
        sp.Eq(sp.Symbol("s"), f.sequence_ratio(), evaluate=False),
        sp.Eq(sp.Symbol(r"\kappa"), f.kl_gradient_weight(), evaluate=False),
    ),
)
