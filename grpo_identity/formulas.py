"""The single source of truth: every quantity of the paper as a SymPy expression.

Each function returns an expression in the symbols it is given (defaults below carry
their assumptions).  Proofs build their statements from these functions and never retype
a formula; the fast numeric twins in :mod:`grpo_identity.closed_forms` and
:func:`grpo_identity.dial.coefficient` are tested against them.  The registry in
:mod:`grpo_identity.registry` lists each one with its paper reference, its proof and its twin.

This module imports SymPy: it is the heavy layer, imported on demand only.

>>> from grpo_identity import formulas as F
>>> F.sigma(3, 8)
sqrt(15)/8
"""

from __future__ import annotations

from typing import Any, TypeAlias

import sympy as sp

__all__ = [
    "G",
    "k",
    "m",
    "p",
    "eps",
    "batch_std",
    "n",
    "group_mean",
    "sigma",
    "advantage_correct",
    "advantage_incorrect",
    "update_coefficient",
    "silent_rate",
    "subsampled_silent_rate",
    "expected_update",
    "expected_sigma_sq",
    "fidelity",
    "attenuation_first_order",
    "attenuation_second_order",
    "group_size_law",
    "difficulty_weight",
    "arcsine_objective",
    "grad_p",
    "cov_plus",
    "cov_minus",
    "expected_score_gap",
    "expected_update_given_k",
    "update_covariance_given_k",
    "R",
    "s",
    "reward_std",
    "score_slope",
    "ratio",
    "advantage",
    "eps_low",
    "eps_high",
    "log_ratio",
    "L",
    "ref_ratio",
    "beta",
    "clipped_surrogate",
    "token_weight",
    "sequence_ratio",
    "kl_gradient_weight",
    "rollout_ratio",
    "cap",
    "mask_low",
    "mask_high",
    "truncated_weight",
    "masked_weight",
    "sequence_product_ratio",
]

# --- symbols, with their assumptions --------------------------------------------------------
#: number of answers per prompt (group size)
G = sp.Symbol("G", positive=True, integer=True)
#: number of correct answers in the group
k = sp.Symbol("k", nonnegative=True, integer=True)
#: number of incorrect answers; the interior 0 < k < G is encoded as G = k + m, k, m >= 1
m = sp.Symbol("m", positive=True, integer=True)
#: probability that one answer is correct
p = sp.Symbol("p", positive=True)
#: the epsilon added to the standard deviation
eps = sp.Symbol("epsilon", positive=True)
#: standard deviation of all rewards in the batch (the batch-std scale)
batch_std = sp.Symbol("sigma_batch", positive=True)
#: number of logged rollouts per problem from which a group of G is drawn (64 for Big-Math)
n = sp.Symbol("n", positive=True, integer=True)
#: one component of ∇p, the gradient of the success probability in the policy's parameters
grad_p = sp.Symbol(r"\nabla p", real=True)
#: covariance (one entry) of the score among correct answers, Σ₊ = Cov(s | y correct), and among incorrect ones
cov_plus = sp.Symbol(r"\Sigma_{+}", real=True)
cov_minus = sp.Symbol(r"\Sigma_{-}", real=True)
#: the rewards and the scores (one component) of a group of any size, R[i] and s[i] for i = 1 … G
R = sp.IndexedBase("R", real=True)
s = sp.IndexedBase("s", real=True)
#: a token's importance ratio ρ = π_θ/π_old and its answer's advantage Â
ratio = sp.Symbol("rho", positive=True)
advantage = sp.Symbol(r"\hat{A}", real=True)
#: the clip range [1 − ε_low, 1 + ε_high] of the surrogate (DAPO's clip-higher: ε_high > ε_low)
eps_low = sp.Symbol("epsilon_low", positive=True)
eps_high = sp.Symbol("epsilon_high", positive=True)
#: one answer's per-token log-ratios x[t] = log π_θ(y_t) − log π_old(y_t), t = 1 … L, and its length L
log_ratio = sp.IndexedBase("x", real=True)
L = sp.Symbol("L", positive=True, integer=True)
#: a token's reference ratio π_ref/π_θ and the weight β of the KL term
ref_ratio = sp.Symbol("rho_ref", positive=True)
#: a token's rollout–trainer ratio r = π_old(y)/μ(y), μ the rollout engine's policy (theorem G11)
rollout_ratio = sp.Symbol("r", positive=True)
#: the cap C of a truncated correction weight, and the bounds [α, β] of a masked one (theorem G11)
cap = sp.Symbol("C", positive=True)
mask_low = sp.Symbol("alpha", positive=True)
mask_high = sp.Symbol("beta_mask", positive=True)
beta = sp.Symbol("beta", positive=True)

#: a SymPy expression or a plain number (SymPy's own annotations are too loose to say more)
Num: TypeAlias = Any


def group_mean(k: Num = k, G: Num = G) -> sp.Expr:
    """Group mean reward μ = k/G (PAPER §Setting)."""
    return sp.Rational(1, 1) * k / G


def sigma(k: Num = k, G: Num = G) -> sp.Expr:
    """Group standard deviation of binary rewards, population (ddof 0): σ = √(k(G−k))/G.

    Paper §Setting; T1 proves it equals √(μ(1−μ)) and the group variance.
    """
    return sp.sqrt(k * (G - k)) / G


def advantage_correct(k: Num = k, G: Num = G) -> sp.Expr:
    """GRPO advantage of a correct answer: Â₊ = (G−k)/(Gσ) (Theorem 1's proof)."""
    return (G - k) / (G * sigma(k, G))


def advantage_incorrect(k: Num = k, G: Num = G) -> sp.Expr:
    """GRPO advantage of an incorrect answer: Â₋ = −k/(Gσ) (Theorem 1's proof)."""
    return -k / (G * sigma(k, G))


def _centred_correct(centre: str, k: Num, G: Num) -> sp.Expr:
    """Centred reward of a correct answer (reward 1) under the dial's centre."""
    if centre == "mean":
        return 1 - group_mean(k, G)
    if centre == "loo":  # baseline of a correct answer: mean of the other G−1 rewards
        return 1 - (k - 1) / (G - 1)
    raise ValueError(f"update coefficient is defined for centred dials only, got centre={centre!r}")


def _with_eps(std: sp.Expr, eps: Num, eps_where: str) -> sp.Expr:
    """std + ε, or √(std² + ε) when ε sits under the root."""
    if eps_where == "std":
        return std + eps
    if eps_where == "variance":
        return sp.sqrt(std**2 + eps)
    raise ValueError(f"unknown eps_where {eps_where!r}")


def _scale(scale: str, ddof: int, eps: Num, k: Num, G: Num, sigma_batch: Num, eps_where: str = "std") -> sp.Expr:
    """Divisor of the centred rewards under the dial's scale (ε added to the std or under the root)."""
    if scale == "none":
        return sp.Integer(1)
    if scale == "group_std":
        # std with `ddof` of a binary group: sqrt(Σ(R−μ)²/(G−ddof)) = sqrt(G/(G−ddof))·σ
        return _with_eps(sp.sqrt(sp.Rational(1, 1) * G / (G - ddof)) * sigma(k, G), eps, eps_where)
    if scale == "batch_std":
        return _with_eps(sigma_batch, eps, eps_where)
    raise ValueError(f"unknown scale {scale!r}")


def update_coefficient(
    centre: str = "mean",
    scale: str = "group_std",
    ddof: int = 0,
    eps: Num = 0,
    keep: str = "all",
    k: Num = k,
    G: Num = G,
    sigma_batch: Num = batch_std,
    eps_where: str = "std",
) -> sp.Expr:
    """Update coefficient c in g = c·(s̄₊ − s̄₋) for any point of the dial.

    With zero-sum advantages taking Â₊ on the k correct and Â₋ on the G−k incorrect answers,
    g = (1/G)(kÂ₊s̄₊ + (G−k)Â₋s̄₋) = (k/G)Â₊(s̄₊ − s̄₋), so c = (k/G)·Â₊.  GRPO gives σ,
    Dr. GRPO σ², DAPO 1{0<k<G}·σ (Theorem 1, PAPER §The three methods).  For k ∈ {0, G}
    every centred reward is 0 and the dial defines the advantage as 0, so c = 0 there; the
    expression returned is the interior (0 < k < G) formula, wrapped in a Piecewise for
    the keep rule ``nonzero_std``.
    """
    if isinstance(eps, float):  # a dial's float ε (Dial.params()) as an exact rational
        eps = sp.nsimplify(eps)
    c = group_mean(k, G) * _centred_correct(centre, k, G) / _scale(scale, ddof, eps, k, G, sigma_batch, eps_where)
    if keep == "nonzero_std":
        return sp.Piecewise((c, sp.And(sp.Gt(k, 0), sp.Lt(k, G))), (0, True))
    if keep != "all":
        raise ValueError(f"unknown keep rule {keep!r}")
    return c


def silent_rate(G: Num = G, p: Num = p) -> sp.Expr:
    """Probability that a group is silent, P(k ∈ {0, G}) = p^G + (1−p)^G (PAPER claim 6)."""
    return p**G + (1 - p) ** G


def subsampled_silent_rate(G: Num = G, k: Num = k, n: Num = n) -> sp.Expr:
    """Probability that G answers drawn without replacement from n logged rollouts, k of them
    correct, form a silent group: [C(k, G) + C(n−k, G)] / C(n, G) (hypergeometric; PAPER claim 8)."""
    return (sp.binomial(k, G) + sp.binomial(n - k, G)) / sp.binomial(n, G)


def expected_update(G: Num = G, p: Num = p, k: sp.Symbol = k) -> sp.Sum:
    """Exact expected GRPO update E[g] = (1/G) Σ_{k=1}^{G−1} C(G,k) p^k (1−p)^{G−k} √(k(G−k)).

    Proposition 2; kept as an unevaluated ``Sum`` (call ``.doit()`` for a concrete G).
    The summand is G·σ(k,G) weighted by the binomial probability of k.
    """
    term = sp.binomial(G, k) * p**k * (1 - p) ** (G - k) * sigma(k, G)
    return sp.Sum(term, (k, 1, G - 1))


def expected_sigma_sq(G: Num = G, p: Num = p) -> sp.Expr:
    """Expected Dr. GRPO coefficient E[σ²] = p(1−p)(1 − 1/G) (Proposition 2)."""
    return p * (1 - p) * (1 - sp.Integer(1) / G)


def fidelity(G: Num = G, p: Num = p) -> sp.Expr:
    """Fidelity φ(G,p) = E[g]/√(p(1−p)) (Corollary 2)."""
    return expected_update(G, p) / sp.sqrt(p * (1 - p))


def attenuation_first_order(G: Num = G, p: Num = p) -> sp.Expr:
    """First-order attenuation law φ ≈ 1 − 1/(8Gp(1−p)) (Corollary 1)."""
    return 1 - 1 / (8 * G * p * (1 - p))


def attenuation_second_order(G: Num = G, p: Num = p) -> sp.Expr:
    """Second-order attenuation law φ ≈ 1 − 1/(8Gp(1−p)) − (7 − 16p(1−p))/(128G²p²(1−p)²).

    The paper stops at the 1/G term (Corollary 1); the 1/G² term comes from the binomial central
    moments of μ = k/G up to the fourth.  Derived from first principles and checked against the
    exact sum in proof T11.
    """
    v = p * (1 - p)
    return attenuation_first_order(G, p) - (7 - 16 * v) / (128 * G**2 * v**2)


def group_size_law(eps: Num = eps, p: Num = p) -> sp.Expr:
    """Group-size law G* = 1/(8εp(1−p)), the G at which the first-order law reaches 1−ε (Corollary 2)."""
    return 1 / (8 * eps * p * (1 - p))


def difficulty_weight(p: Num = p) -> sp.Expr:
    """Difficulty weight w(p) = 1/√(p(1−p)) (PAPER claim 7)."""
    return 1 / sp.sqrt(p * (1 - p))


def arcsine_objective(p: Num = p) -> sp.Expr:
    """Objective that GRPO ascends per prompt, 2·arcsin√p (PAPER claim 7)."""
    return 2 * sp.asin(sp.sqrt(p))


def expected_score_gap(p: Num = p, grad_p: Num = 1) -> sp.Expr:
    """Expected score gap of a group with k correct answers, for any policy:
    E[s̄₊ − s̄₋ | k] = ∇p/p + ∇p/(1−p) = ∇p/(p(1−p)), the same for every 0 < k < G.

    Beyond the paper (theorem G7): E[s̄₊ | k] = ∇p/p and E[s̄₋ | k] = −∇p/(1−p), so the
    expected update at fixed k is E[g | k] = c(k, G)·∇p/(p(1−p)) with c the dial's coefficient
    (:func:`update_coefficient`).  ``grad_p`` is one component of ∇p (default 1: the factor).

    >>> expected_score_gap(sp.Rational(1, 2))
    4
    """
    return sp.sympify(grad_p) / (p * (1 - p))


def expected_update_given_k(k: Num = k, G: Num = G, p: Num = p, grad_p: Num = grad_p, c: Num = None) -> sp.Expr:
    """Expected update of a group with k correct answers, for any policy (one component):
    E[g | k] = c(k, G)·∇p/(p(1−p)), c the update coefficient (GRPO's σ by default; σ² for Dr. GRPO).

    Beyond the paper (theorem G7): the expected score gap :func:`expected_score_gap` times the
    coefficient, which depends on k only.  The direction is ∇p for every k.

    >>> expected_update_given_k(2, 4, sp.Rational(1, 2), 1)
    2
    """
    coef = sigma(k, G) if c is None else c
    return coef * expected_score_gap(p, grad_p)


def update_covariance_given_k(
    k: Num = k, G: Num = G, cov_plus: Num = cov_plus, cov_minus: Num = cov_minus, c: Num = None
) -> sp.Expr:
    """Covariance of the update of a group with k correct answers, for any policy (one entry):
    Cov(g | k) = c²·(Σ₊/k + Σ₋/(G−k)), c the update coefficient (GRPO's σ by default).

    Beyond the paper (theorem G8): given k, s̄₊ and s̄₋ are independent means of k and G − k
    draws from the policy restricted to the correct and to the incorrect answers.  For GRPO with
    Σ₊ = Σ₋ = Σ it is Σ/G for every k.

    >>> update_covariance_given_k(1, 4, 2, 2)
    1/2
    """
    coef = sigma(k, G) if c is None else c
    return coef**2 * (sp.sympify(cov_plus) / k + sp.sympify(cov_minus) / (G - k))


# --- any rewards (theorem G9) -----------------------------------------------------------------
#: the answers' index in a group's sums, and the index of the sums inside them (the group means)
_i, _j = sp.symbols("i j", integer=True, positive=True)


def _group_sum(term: Any, x: Any, G: Num, index: sp.Symbol = _i) -> sp.Expr:
    """Σ over the group of ``term(v)``, v an index of ``x``: a Python sum for a sequence of values
    (G is its length), an unevaluated ``Sum`` over ``index`` = 1 … G for an ``IndexedBase``."""
    if isinstance(x, sp.IndexedBase):
        return sp.Sum(term(index), (index, 1, G))
    return sp.Add(*[term(v) for v in range(len(x))])


def _group_size(x: Any, G: Num) -> Num:
    return G if isinstance(x, sp.IndexedBase) else sp.Integer(len(x))


def reward_std(R: Any = R, G: Num = G) -> sp.Expr:
    """Group standard deviation of any rewards, population (ddof 0): σ_R = √((1/G) Σᵢ (Rᵢ − R̄)²),
    R̄ = (1/G) Σᵢ Rᵢ.

    ``R`` is an ``IndexedBase`` (a group of symbolic size G, kept as ``Sum`` objects) or a sequence
    of values (G its length).  For binary rewards it is :func:`sigma`.  Beyond the paper (§Limits:
    non-binary rewards; theorem G9).

    >>> reward_std([1, 0, 0, 0]), reward_std([0, sp.Rational(1, 2), 1])
    (sqrt(3)/4, sqrt(6)/6)
    """
    n = _group_size(R, G)
    mean = _group_sum(lambda i: R[i], R, G, _j) / n
    return sp.sqrt(_group_sum(lambda i: (R[i] - mean) ** 2, R, G) / n)


def score_slope(R: Any = R, s: Any = s, G: Num = G) -> sp.Expr:
    """Least-squares slope of the scores on the rewards within a group (one score component):
    β̂ = Σᵢ (Rᵢ − R̄)(sᵢ − s̄) / Σᵢ (Rᵢ − R̄)², defined when σ_R > 0.

    Beyond the paper (theorem G9): (1/G) Σ (Rᵢ − R̄) sᵢ = σ_R²·β̂, so GRPO's update is σ_R·β̂ and
    Dr. GRPO's σ_R²·β̂ for any rewards; for binary rewards β̂ = s̄₊ − s̄₋.  ``R`` and ``s`` are both
    ``IndexedBase`` objects (symbolic G) or both sequences of one length.

    >>> score_slope([1, 0, 0], [3, 1, 2])  # binary: s̄₊ − s̄₋ = 3 − 3/2
    3/2
    """
    n = _group_size(R, G)
    r_mean = _group_sum(lambda i: R[i], R, G, _j) / n
    s_mean = _group_sum(lambda i: s[i], s, G, _j) / n
    sxy = _group_sum(lambda i: (R[i] - r_mean) * (s[i] - s_mean), R, G)
    return sxy / _group_sum(lambda i: (R[i] - r_mean) ** 2, R, G)


# --- off-policy steps: importance ratios, clipping, KL (theorem G10) ----------------------------
_t = sp.Symbol("t", integer=True, positive=True)  # a token's index in its answer


def _clip(ratio: Num, eps_low: Num, eps_high: Num) -> sp.Expr:
    """clip(ρ, 1 − ε_low, 1 + ε_high)."""
    return sp.Piecewise((1 - eps_low, ratio < 1 - eps_low), (1 + eps_high, ratio > 1 + eps_high), (ratio, True))


def clipped_surrogate(
    ratio: Num = ratio, advantage: Num = advantage, eps_low: Num = eps_low, eps_high: Num = eps_high
) -> sp.Expr:
    """PPO's clipped surrogate of one token (GRPO, DAPO): min(ρÂ, clip(ρ, 1 − ε_low, 1 + ε_high)·Â),
    ρ = π_θ/π_old the token's importance ratio, Â its answer's advantage.

    Beyond the paper (theorem G10; G6 is its first on-policy step, ρ = 1).  ε_low = ε_high is PPO's
    and GRPO's symmetric clip, ε_high > ε_low DAPO's clip-higher (Yu et al. 2025, arXiv 2503.14476).

    >>> e = sp.Rational(1, 5)
    >>> clipped_surrogate(2, 1, e, e), clipped_surrogate(2, -1, e, e)
    (6/5, -2)
    """
    clipped = _clip(ratio, eps_low, eps_high)
    return sp.Piecewise((ratio * advantage, ratio * advantage <= clipped * advantage), (clipped * advantage, True))


def token_weight(
    ratio: Num = ratio, advantage: Num = advantage, eps_low: Num = eps_low, eps_high: Num = eps_high
) -> sp.Expr:
    """Weight of a token's score in the gradient of the clipped surrogate: w = ρ, and 0 where the token
    is clipped (Â > 0 and ρ > 1 + ε_high, or Â < 0 and ρ < 1 − ε_low), so that
    ∇ min(ρÂ, clip(ρ)Â) = w·Â·∇log π_θ.

    Beyond the paper (theorem G10).  At ρ = 1 − ε_low and 1 + ε_high the surrogate has a kink; the
    value there (ρ, the unclipped side) is a convention.  With Â = 0 the weight multiplies nothing.

    >>> e = sp.Rational(1, 5)
    >>> token_weight(2, 1, e, e), token_weight(2, -1, e, e), token_weight(sp.Rational(1, 2), -1, e, e)
    (0, 2, 0)
    """
    clipped = sp.Or(sp.And(advantage > 0, ratio > 1 + eps_high), sp.And(advantage < 0, ratio < 1 - eps_low))
    return sp.Piecewise((0, clipped), (ratio, True))


def sequence_ratio(log_ratio: Any = log_ratio, L: Num = L) -> sp.Expr:
    """GSPO's sequence-level importance ratio of one answer: s = exp((1/L) Σ_t x_t), x_t = log π_θ(y_t) −
    log π_old(y_t) over its L tokens (the geometric mean of the token ratios; Zheng et al. 2025, arXiv 2507.18071).

    Beyond the paper (theorem G10): every token of the answer is weighted by the same s.  ``log_ratio``
    is an ``IndexedBase`` (symbolic length L, kept as a ``Sum``) or a sequence of values (L its length).

    >>> sequence_ratio([sp.log(2), sp.log(8)])
    4
    """
    n = _group_size(log_ratio, L)
    return sp.exp(_group_sum(lambda t: log_ratio[t], log_ratio, L, _t) / n)


def kl_gradient_weight(ref_ratio: Num = ref_ratio, beta: Num = beta) -> sp.Expr:
    """Weight of a token's score in the gradient of −β·KL₃, the k3 estimator KL₃ = ρ_ref − log ρ_ref − 1,
    ρ_ref = π_ref/π_θ: ∇(−β·KL₃) = β(ρ_ref − 1)·∇log π_θ, whatever the advantage.

    Beyond the paper (theorem G10): 0 exactly where π_θ = π_ref on the token (G6's first step);
    positive where π_θ < π_ref (the term pulls the token back up), negative where π_θ > π_ref.

    >>> kl_gradient_weight(sp.Rational(3, 2), sp.Rational(1, 25)), kl_gradient_weight(1, sp.Rational(1, 25))
    (1/50, 0)
    """
    return beta * (ref_ratio - 1)


# --- three policies: rollout–trainer mismatch corrections (theorem G11) -------------------------
def truncated_weight(rollout_ratio: Num = rollout_ratio, cap: Num = cap) -> sp.Expr:
    """Truncated importance sampling (TIS): a token's correction weight min(r, C), r = π_old/μ the ratio of the
    trainer's old policy to the rollout engine's (Yao et al. 2025, "Your efficient RL framework secretly brings
    you off-policy RL training"); with r the sequence's ratio (:func:`sequence_product_ratio` or
    :func:`sequence_ratio` of the log-ratios log π_old − log μ) it is the sequence-level truncation.

    Beyond the paper (theorem G11): the weight multiplies the token's surrogate, detached, so the token's score
    weighs min(r, C)·w·Â; 1 where μ = π_old and C ≥ 1.

    >>> truncated_weight(sp.Rational(1, 2), 2), truncated_weight(3, 2)
    (1/2, 2)
    """
    return sp.Min(rollout_ratio, cap)


def masked_weight(rollout_ratio: Num = rollout_ratio, mask_low: Num = mask_low, mask_high: Num = mask_high) -> sp.Expr:
    """Masked importance sampling: r where α ≤ r ≤ β, 0 outside (the token, or the whole answer where r is the
    sequence's ratio, is left out of the update).  α = 0 is the one-sided mask (MIS, TRL's ``token_mask``); α > 0
    the two-sided mask of IcePop (Ling Team 2025, arXiv 2510.18855).

    Beyond the paper (theorem G11): 1 where μ = π_old and α ≤ 1 ≤ β.

    >>> masked_weight(sp.Rational(1, 2), sp.Rational(1, 4), 2), masked_weight(3, sp.Rational(1, 4), 2)
    (1/2, 0)
    """
    inside = sp.And(rollout_ratio >= mask_low, rollout_ratio <= mask_high)
    return sp.Piecewise((rollout_ratio, inside), (0, True))


def sequence_product_ratio(log_ratio: Any = log_ratio, L: Num = L) -> sp.Expr:
    """An answer's sequence-level ratio as the product of its token ratios, exp(Σ_t x_t) over its L tokens
    (x_t = log π_old(y_t) − log μ(y_t) for the rollout correction): :func:`sequence_ratio` (the geometric mean)
    to the power L.

    Beyond the paper (theorem G11): the sequence-level importance ratio (unbiased where μ covers π_old's
    support, not proved here); for a mismatch that is the same
    on every token it is exp(L·x), so the answer's weight falls or grows exponentially in its length.

    >>> sequence_product_ratio([sp.log(2), sp.log(8)])
    16
    """
    return sp.exp(_group_sum(lambda t: log_ratio[t], log_ratio, L, _t))
