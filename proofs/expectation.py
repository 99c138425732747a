"""Theorems T8–T10, T12, T13: expectations over k ~ Binomial(G, p) (PAPER claims 3, 5–7).

Expectations of polynomials in k are exact for symbolic G: the raw moments E[kʳ] are the
derivatives at 0 of the moment generating function (1 − p + p·eᵗ)^G
(:func:`grpo_identity.proofs.core.raw_moments`).  Where p must lie strictly inside (0, 1) it is
written p = u/(u + v) with u, v positive, so that both p and 1 − p are positive symbols.

>>> T9.prove().status
'proved'
"""

from __future__ import annotations

import math
from typing import Any

import sympy as sp

from grpo_identity import formulas as F
from grpo_identity.proofs.core import (
    Claim,
    Formulas,
    Theorem,
    binomial_pmf,
    expectation_of_polynomial,
    raw_moments,
)
from grpo_identity.proofs.identity import group_variance

__all__ = ["T8", "T9", "T10", "T12", "T13", "explicit_expected_update", "G_VALUES_EXACT"]

p = F.p
G = F.G
#: group sizes at which the exact sums are expanded (T8–T10)
G_VALUES_EXACT = range(2, 13)
_u, _v = sp.symbols("u v", positive=True)
P_OPEN = _u / (_u + _v)  # a p in (0, 1): p and 1 - p are both positive
_Greal = sp.Symbol("G", positive=True)  # G as a real variable, for limits and inversion
_theta = sp.Symbol("theta", real=True)
_x = sp.Symbol("x", real=True)


def _open(e: Any) -> Any:
    """Substitute p = u/(u+v) (0 < p < 1)."""
    return sp.sympify(e).subs(p, P_OPEN)


# --- T8 ---------------------------------------------------------------------------------------
_r, _j = sp.symbols("r j", integer=True, nonnegative=True)


def _t8(f: Formulas) -> list[Claim]:
    out = [
        Claim(
            "P(k = 0) + P(k = G) = p^G + (1-p)^G, symbolic G",
            binomial_pmf(0, G) + binomial_pmf(G, G),
            f.silent_rate(G, p),
        )
    ]
    for GG in range(2, 7):
        interior = sum(binomial_pmf(kk, GG) for kk in range(1, GG))
        out.append(Claim(f"G={GG}: P(0 < k < G) = 1 - silent rate", interior, 1 - f.silent_rate(GG, p)))
    # drawing G of n = G + r logged Bernoulli rollouts without replacement, k ~ Binomial(n, p) correct
    nn, kk = G + _r, F.k
    out.append(
        Claim(
            "sub-sampled rate x C(n, G) = C(k, G) + C(n-k, G) (the hypergeometric form)",
            f.subsampled_silent_rate(G, kk, nn) * sp.binomial(nn, G),
            sp.binomial(kk, G) + sp.binomial(nn - kk, G),
        )
    )
    # all-correct draws: C(k, G) = 0 for k < G, so the sum over k runs from G; with k = G + j
    all_correct = sp.Sum(binomial_pmf(kk, nn) * sp.binomial(kk, G) / sp.binomial(nn, G), (kk, G, nn))
    reindexed = sp.Sum(sp.binomial(_r, _j) * p ** (G + _j) * (1 - p) ** (_r - _j), (_j, 0, _r))
    out.append(
        Claim(
            "sum_k P(k) C(k,G)/C(n,G) = sum_j C(r,j) p^(G+j) (1-p)^(r-j), symbolic G and n = G + r",
            all_correct,
            reindexed,
        )
    )
    # the binomial theorem (a lemma): sum_j C(r,j) p^j (1-p)^(r-j) = 1, so the all-correct part is p^G
    out.append(
        Claim(
            "= p^G sum_j C(r,j) p^j (1-p)^(r-j)",
            reindexed,
            p**G * sp.Sum(sp.binomial(_r, _j) * p**_j * (1 - p) ** (_r - _j), (_j, 0, _r)),
        )
    )
    # all-incorrect draws: k -> n - k maps P(k; n, p) to P(k; n, 1 - p), C(n-k, G) to C(k, G)
    out.append(Claim("P(n - k; n, p) = P(k; n, 1 - p)", binomial_pmf(nn - kk, nn, p), binomial_pmf(kk, nn, 1 - p)))
    out.append(
        Claim("so E_k[sub-sampled rate] = p^G + (1-p)^G, every n >= G", p**G + (1 - p) ** G, f.silent_rate(G, p))
    )
    return out


T8 = Theorem(
    "T8",
    "silent-group rate",
    "For k ~ Binomial(G, p) the probability of a silent group (σ = 0, k ∈ {0, G}) is p^G + (1−p)^G; "
    "it is the mass DAPO discards.  Drawing G of n logged rollouts without replacement, the silent rate "
    "[C(k,G) + C(n−k,G)]/C(n,G) averages over k ~ Binomial(n, p) to the same p^G + (1−p)^G, for every n ≥ G "
    "(symbolic n = G + r).",
    "claim 6, claim 8",
    "k ~ Binomial(G, p) or Binomial(n, p); G positive integer, n = G + r with r a nonnegative integer; p positive; "
    "C(k, G) = 0 for integers 0 <= k < G (definition); the binomial theorem (lemma)",
    _t8,
    lambda f: sp.Eq(sp.Symbol(r"P(k \in \{0, G\})"), f.silent_rate(), evaluate=False),
)


# --- T9 ---------------------------------------------------------------------------------------
def _t9(f: Formulas) -> list[Claim]:
    k = F.k
    e_sig2 = expectation_of_polynomial(f.sigma(k, G) ** 2, k, raw_moments(2))
    out = [
        Claim("E[sigma^2] = p(1-p)(1 - 1/G), symbolic G (moments of the binomial)", e_sig2, f.expected_sigma_sq(G, p))
    ]
    for GG in (2, 5, 12):
        exact = sum(binomial_pmf(kk, GG) * f.sigma(kk, GG) ** 2 for kk in range(GG + 1))
        out.append(Claim(f"G={GG}: explicit sum equals p(1-p)(1 - 1/G)", exact, f.expected_sigma_sq(GG, p)))
    return out


T9 = Theorem(
    "T9",
    "expected Dr. GRPO coefficient",
    "E[σ²] = p(1−p)(1 − 1/G): Dr. GRPO's expected coefficient is the Bernoulli variance shrunk by 1 − 1/G.",
    "Proposition 2",
    "k ~ Binomial(G, p); G positive integer",
    _t9,
    lambda f: sp.Eq(sp.Symbol(r"\mathbb{E}[\sigma^2]"), f.expected_sigma_sq(), evaluate=False),
)


# --- T10 --------------------------------------------------------------------------------------
def _squarefree(nn: int) -> tuple[int, int]:
    """nn = a²·b with b square-free; returns (a, b)."""
    a, b, q = 1, 1, 2
    while q * q <= nn:
        while nn % (q * q) == 0:
            nn //= q * q
            a *= q
        q += 1
    return a, nn * b


def explicit_expected_update(GG: int) -> sp.Expr:
    """E[g] at a concrete G written term by term from integers: Σ_b √b·P_b(p), b square-free.

    Each term C(G,k)·√(k(G−k))/G·p^k(1−p)^{G−k} is formed with ``math.comb`` and an integer
    square-free split √(k(G−k)) = a√b; terms are grouped by b.  Radicals of distinct square-free
    integers are linearly independent over ℚ(p), so equality with another such form is decided
    by expanding the difference.
    """
    groups: dict[int, sp.Expr] = {}
    for kk in range(1, GG):
        a, b = _squarefree(kk * (GG - kk))
        coef = sp.Rational(math.comb(GG, kk) * a, GG)
        groups[b] = groups.get(b, sp.Integer(0)) + coef * p**kk * (1 - p) ** (GG - kk)
    return sum((sp.sqrt(b) * sp.expand(poly) for b, poly in sorted(groups.items())), sp.Integer(0))


def _t10(f: Formulas) -> list[Claim]:
    k = F.k
    # the Bernoulli-logit prompt p = sigmoid(theta), written at p = u/(u+v): theta = log(u/v)
    sig = 1 / (1 + sp.exp(-_theta))
    at_p = {_theta: sp.log(_u / _v)}
    s_correct = sp.simplify(sp.diff(sp.log(sig), _theta).subs(at_p))  # score of the correct answer
    s_incorrect = sp.simplify(sp.diff(sp.log(1 - sig), _theta).subs(at_p))
    grad = sp.simplify(sp.diff(sig, _theta).subs(at_p))  # dp/dtheta
    # E[g | k] = c(k, G)·E[s̄₊ − s̄₋ | k] (G7) with c = (k/G)·Â₊, Â₊ from the group's rewards (T1–T3)
    mean, var = group_variance(k, G - k)
    c = (k / G) * (1 - mean) / sp.sqrt(sp.factor(var))
    gap_in_p = f.expected_score_gap(p, p * (1 - p))  # G7's gap at this policy, dp/dtheta = p(1-p)
    derived = sp.Sum(binomial_pmf(k, G) * c * gap_in_p, (k, 1, G - 1))  # silent groups (k = 0, G) add 0 (T3)
    return [
        Claim(
            "Bernoulli-logit prompt: s(correct) - s(incorrect) = 1, so sbar+ - sbar- = 1 for every group",
            s_correct - s_incorrect,
            1,
        ),
        Claim("dp/dtheta = p(1-p)", grad, _open(p * (1 - p))),
        Claim("G7's expected score gap grad p/(p(1-p)) is 1 at this policy", f.expected_score_gap(P_OPEN, grad), 1),
        Claim(
            "E[g] = sum over k of P(k) c(k, G) E[sbar+ - sbar- | k], symbolic G, equals Proposition 2's sum",
            derived,
            f.expected_update(G, p),
        ),
    ]


T10 = Theorem(
    "T10",
    "exact expected GRPO update, derived",
    "Proposition 2 derived: for the Bernoulli-logit prompt p = sigmoid(θ) the scores of a correct and an incorrect "
    "answer are 1 − p and −p, so s̄₊ − s̄₋ = 1, and G7 gives E[g | k] = c(k, G)·∇p/(p(1−p)) = σ_k with c from the "
    "group's advantages (T1–T3) and ∇p = p(1−p).  Averaging over k ~ Binomial(G, p), the silent groups contributing 0: "
    "E[g] = (1/G) Σ_{k=1}^{G−1} C(G,k) p^k (1−p)^{G−k} √(k(G−k)), for symbolic G.",
    "Proposition 2",
    "k ~ Binomial(G, p); G positive integer; 0 < p < 1 (p = u/(u+v)); theta real",
    _t10,
    lambda f: sp.Eq(sp.Symbol(r"\mathbb{E}[g]"), f.expected_update(), evaluate=False),
    extra=lambda f: ([], {"closed_values": {GG: str(explicit_expected_update(GG)) for GG in (2, 3, 4)}}),
)


# --- T12 --------------------------------------------------------------------------------------
def _t12(f: Formulas) -> list[Claim]:
    e = F.eps
    roots = sp.solve(sp.Eq(f.attenuation_first_order(_Greal, p), 1 - e), _Greal)
    g_star = f.group_size_law(e, p)
    v = p * (1 - p)
    return [
        Claim("the first-order law has one root in G", len(roots), 1),
        Claim("G* solves 1 - 1/(8Gp(1-p)) = 1 - eps", roots[0] if roots else sp.nan, g_star),
        Claim("G* = w(p)^2/(8 eps)", g_star, f.difficulty_weight(p) ** 2 / (8 * e)),
        Claim(
            "the first-order law increases with G, so G* is the smallest G at which the law reaches 1 - eps",
            _open(sp.diff(f.attenuation_first_order(_Greal, p), _Greal)),
            kind="pos",
        ),
        # the law is only the first term: the next one is negative, so G* undershoots
        Claim("7 - 16p(1-p) = 3 + 16(p - 1/2)^2", 7 - 16 * v, 3 + 16 * (p - sp.Rational(1, 2)) ** 2),
        Claim(
            "3 + 16x^2 > 0 for every real x = p - 1/2: the 1/G^2 term of the series is negative for every p",
            3 + 16 * _x**2,
            kind="pos",
        ),
        Claim(
            "at G = G* the second-order law is 1 - eps - eps^2 (7 - 16p(1-p))/2",
            f.attenuation_second_order(g_star, p),
            1 - e - e**2 * (7 - 16 * v) / 2,
        ),
    ]


T12 = Theorem(
    "T12",
    "group-size law (first order), and why it undershoots",
    "Inverting the first-order attenuation law 1 − 1/(8Gp(1−p)) = 1 − ε gives G* = 1/(8εp(1−p)) = w(p)²/(8ε): the "
    "smallest G at which the *first-order law* reaches 1 − ε.  It is not a guarantee for the exact fidelity: the next "
    "term of the series (T11) is −(7 − 16p(1−p))/(128G²p²(1−p)²) < 0 for every p, and at G = G* the second-order law "
    "is 1 − ε − ε²(7 − 16p(1−p))/2 < 1 − ε.  The exact φ at ⌈G*⌉ is below 1 − ε in every cell of the paper's table "
    "(T14: 0.862 at (p, ε) = (0.5, 0.1), 0.828 at (0.05, 0.1), 0.9897 at (0.05, 0.01)).",
    "Corollary 2",
    "G real positive for the inversion; 0 < p < 1; eps > 0",
    _t12,
    lambda f: sp.Eq(sp.Symbol("G^*"), f.group_size_law(), evaluate=False),
)


# --- T13 --------------------------------------------------------------------------------------
_y, _a = sp.symbols("y a", nonnegative=True)


def _t13(f: Formulas) -> list[Claim]:
    k = F.k
    w = f.difficulty_weight(p)
    sigma_p = f.sigma(p * _Greal, _Greal)  # sigma at mu = p
    out = [
        Claim("w(p) = d/dp 2 arcsin sqrt(p)", sp.diff(f.arcsine_objective(p), p), w),
        Claim("w(p) = 1/sigma(p), sigma(p) = sqrt(p(1-p))", _open(w), _open(1 / sigma_p)),
    ]
    # Bernoulli-logit prompt p = sigmoid(theta): dp/dtheta = p(1-p); the gradients of the two objectives
    sig = 1 / (1 + sp.exp(-_theta))
    out.append(Claim("dp/dtheta = p(1-p) for p = sigmoid(theta)", sp.diff(sig, _theta), sig * (1 - sig)))
    grad_arcsine = sp.diff(f.arcsine_objective(p), p) * p * (1 - p)  # chain rule with dp/dtheta
    out.append(Claim("d/dtheta 2 arcsin sqrt(p) = sqrt(p(1-p))", _open(grad_arcsine), _open(sp.sqrt(p * (1 - p)))))
    # Dr. GRPO's large-G limit
    out.append(
        Claim(
            "lim E[sigma^2] = p(1-p) = d/dtheta p", sp.limit(f.expected_sigma_sq(_Greal, p), _Greal, sp.oo), p * (1 - p)
        )
    )
    # GRPO's large-G limit, by a squeeze with two pointwise bounds on sqrt(x), x = sigma^2 in [0, 1/4]:
    #   upper  sqrt(x) <= x/(2 sqrt a) + sqrt(a)/2              <=> (sqrt x - sqrt a)^2 >= 0
    #   lower  sqrt(x) >= 3x/(2 sqrt a) - x^2/(2 a^(3/2))       <=> y (y-1)^2 (y+2) >= 0, y = sqrt(x/a)
    out.append(Claim("upper bound: y^2 + 1 - 2y = (y-1)^2", _y**2 + 1 - 2 * _y, (_y - 1) ** 2))
    out.append(
        Claim(
            "lower bound: y - (3y^2 - y^4)/2 = y(y-1)^2(y+2)/2",
            _y - (3 * _y**2 - _y**4) / 2,
            _y * (_y - 1) ** 2 * (_y + 2) / 2,
        )
    )
    out.append(Claim("lower bound polynomial is nonnegative for y >= 0", _y * (_y - 1) ** 2 * (_y + 2), kind="nonneg"))
    # E[g] is E[sigma] (the k = 0, G terms are 0, T10): the squeeze below bounds E[sigma]
    out.append(
        Claim(
            "E[g] = sum over k = 0..G of P(k)·sigma(k, G) = E[sigma] (silent terms are 0)",
            f.expected_update(G, p),
            sp.Sum(binomial_pmf(k, G) * f.sigma(k, G), (k, 0, G)),
        )
    )
    a = _open(p * (1 - p))
    mom = [_open(mm) for mm in raw_moments(4, _Greal)]
    e2 = expectation_of_polynomial(f.sigma(k, _Greal) ** 2, k, mom)
    e4 = expectation_of_polynomial(f.sigma(k, _Greal) ** 4, k, mom)
    upper = e2 / (2 * sp.sqrt(a)) + sp.sqrt(a) / 2
    lower = 3 * e2 / (2 * sp.sqrt(a)) - e4 / (2 * a ** sp.Rational(3, 2))
    out.append(Claim("upper bound on E[g]: sqrt(p(1-p))(1 - 1/(2G))", upper, sp.sqrt(a) * (1 - 1 / (2 * _Greal))))
    out.append(Claim("lim upper bound = sqrt(p(1-p))", sp.limit(upper, _Greal, sp.oo), sp.sqrt(a)))
    out.append(
        Claim(
            "lim lower bound = sqrt(p(1-p)), so E[g] -> sqrt(p(1-p)) = d/dtheta 2 arcsin sqrt(p)",
            sp.limit(lower, _Greal, sp.oo),
            sp.sqrt(a),
        )
    )
    return out


T13 = Theorem(
    "T13",
    "difficulty weight and large-G limits",
    "w(p) = d/dp 2·arcsin√p = 1/√(p(1−p)) = 1/σ(p).  As G → ∞, E[g] → √(p(1−p)) (GRPO) and "
    "E[σ²] → p(1−p) (Dr. GRPO): for p = sigmoid(θ) these are the gradients in θ of 2·arcsin√p and of p. "
    "The GRPO limit is proved by a squeeze, which also gives the bound E[g] ≤ √(p(1−p))·(1 − 1/(2G)).",
    "claim 7",
    "0 < p < 1 (p = u/(u+v)); G real for limits; theta real",
    _t13,
    lambda f: sp.Eq(sp.Derivative(f.arcsine_objective(), p), f.difficulty_weight(), evaluate=False),
)
