"""Theorems G1–G6: what the paper sets aside, proven the same way.

Per-sample weights (length normalisation, token-level aggregation), Bessel's correction, ε in
the denominator, the batch std, two-valued rewards and the clipped surrogate with a KL term.
Same conventions as :mod:`grpo_identity.proofs.identity`: interior groups G = k + m, scores as
(d, 1) symbolic vectors through the sums over the two index sets.

>>> G2.prove().status
'proved'
"""

from __future__ import annotations

import math
from typing import Any, Callable

import sympy as sp

from grpo_identity import dial as D
from grpo_identity import formulas as F
from grpo_identity.proofs.core import Claim, Formulas, G_interior, Theorem, d, k, m, sbar_minus, sbar_plus
from grpo_identity.proofs.identity import group_update, group_variance

__all__ = ["G1", "G2", "G3", "G4", "G5", "G6", "answer_objective", "kl_k3", "gradient_at_ratio"]

GI = G_interior
_g = sp.Symbol("g")

# --- G1 ---------------------------------------------------------------------------------------
#: weighted score sums over the correct and the incorrect index sets, Σ cᵢ sᵢ
S_plus_c = sp.MatrixSymbol(r"S^{c}_{+}", d, 1)
S_minus_c = sp.MatrixSymbol(r"S^{c}_{-}", d, 1)


def _g1(f: Formulas) -> list[Claim]:
    g = group_update(
        f.advantage_correct(k, GI), f.advantage_incorrect(k, GI), s_plus=S_plus_c / k, s_minus=S_minus_c / m
    )
    out = [
        Claim("g = (1/G) sum A_i c_i s_i = sigma (S+c/k - S-c/m)", g, f.sigma(k, GI) * (S_plus_c / k - S_minus_c / m))
    ]
    # explicit groups with one weight and one scalar score per answer
    for GG in range(2, 5):
        c = sp.symbols(f"c1:{GG + 1}", positive=True)
        s = sp.symbols(f"s1:{GG + 1}")
        for kk in range(1, GG):
            A = [f.advantage_correct(kk, GG)] * kk + [f.advantage_incorrect(kk, GG)] * (GG - kk)
            g_explicit = sum(a * ci * si for a, ci, si in zip(A, c, s)) / GG
            gap = sum(ci * si for ci, si in zip(c[:kk], s[:kk])) / kk - sum(
                ci * si for ci, si in zip(c[kk:], s[kk:])
            ) / (GG - kk)
            out.append(Claim(f"explicit weights, G={GG}, k={kk}", g_explicit, f.sigma(kk, GG) * gap))
    return out


G1 = Theorem(
    "G1",
    "per-sample weights keep the factor sigma",
    "With per-answer weights cᵢ (1/|yᵢ| for length normalisation; a constant G/Σ|yᵢ| for token-level "
    "aggregation, with sᵢ the sum of token scores), g = (1/G) Σ Âᵢ cᵢ sᵢ = σ·(s̄₊ᶜ − s̄₋ᶜ), where s̄₊ᶜ, s̄₋ᶜ "
    "are the weighted score sums of each side divided by its count: the magnitude factor stays σ, only "
    "the direction changes.",
    "beyond the paper (§Limits: token-level aggregation, length normalisation)",
    "k, m positive integers, G = k + m; weighted sums are symbolic (d, 1) vectors",
    _g1,
    lambda f: sp.Eq(_g, f.sigma() * (S_plus_c / F.k - S_minus_c / (F.G - F.k)), evaluate=False),
)


# --- G2 ---------------------------------------------------------------------------------------
_k0 = sp.Symbol("k_0", nonnegative=True, integer=True)


def _g2(f: Formulas) -> list[Claim]:
    kk = _k0 + 1  # k = k0 + 1 >= 1, so that G - 1 = k0 + m is a visibly positive sum
    GG = kk + m
    _, var = group_variance(kk, m)
    std1 = sp.sqrt(sp.factor(var * GG / (GG - 1)))  # sqrt(sum (R - mu)^2 / (G - 1))
    c1 = f.update_coefficient(ddof=1, k=kk, G=GG)
    mu = f.group_mean(kk, GG)
    out = [
        Claim("Bessel std = sqrt(G/(G-1)) sigma", std1, sp.sqrt(GG / (GG - 1)) * f.sigma(kk, GG)),
        Claim("update coefficient with ddof 1 = sqrt((G-1)/G) sigma", c1, sp.sqrt((GG - 1) / GG) * f.sigma(kk, GG)),
        Claim(
            "update with ddof 1 = sqrt((G-1)/G) sigma (sbar+ - sbar-)",
            group_update((1 - mu) / std1, (0 - mu) / std1, kk, m),
            sp.sqrt((GG - 1) / GG) * f.sigma(kk, GG) * (sbar_plus - sbar_minus),
        ),
    ]
    return out


G2 = Theorem(
    "G2",
    "Bessel-corrected std (ddof 1)",
    "Dividing by the Bessel-corrected std √(Σ(Rᵢ−μ)²/(G−1)) (torch's default) gives the coefficient "
    "√((G−1)/G)·σ instead of σ: a constant factor per G, 0.935 at G = 8.",
    "beyond the paper (frameworks' convention)",
    "k = k0 + 1 with k0 a nonnegative integer, m a positive integer, G = k + m (so G >= 2)",
    _g2,
    lambda f: sp.Eq(f.update_coefficient(ddof=1), sp.sqrt((F.G - 1) / F.G) * f.sigma(), evaluate=False),
)


# --- G3 ---------------------------------------------------------------------------------------
_s = sp.Symbol("sigma", positive=True)


def _g3(f: Formulas) -> list[Claim]:
    e = F.eps
    c = f.update_coefficient(eps=e, k=k, G=GI)
    s = f.sigma(k, GI)
    out = [
        Claim("coefficient with eps = sigma^2/(sigma + eps)", c, s**2 / (s + e)),
        Claim("relative error (sigma - c)/sigma = eps/(sigma + eps)", (s - c) / s, e / (s + e)),
        Claim("eps/(sigma + eps) < eps/sigma", (e / _s - e / (_s + e)), kind="pos"),
        Claim("smallest interior sigma is at k = 1: k(G-k) - (G-1) = (k-1)(m-1)", k * m - (GI - 1), (k - 1) * (m - 1)),
        Claim("(k-1)(m-1) >= 0", (k - 1) * (m - 1), kind="nonneg"),
        Claim("so the relative error is at most eps G/sqrt(G-1)", e / f.sigma(1, F.G), e * F.G / sp.sqrt(F.G - 1)),
    ]
    return out


def _g3_extra(f: Formulas) -> tuple[list[Claim], dict[str, Any]]:
    bounds = {
        dial.name: {G: float(dial.eps * G / math.sqrt(G - 1)) for G in (8, 16, 64)}
        for dial in (D.TRL, D.VERL, D.OPENRLHF)
    }
    return [], {"relative_error_bound_by_preset_and_G": bounds}


G3 = Theorem(
    "G3",
    "epsilon added to the std",
    "With ε added to the std the coefficient is σ²/(σ+ε); its relative error against σ is ε/(σ+ε) < ε/σ "
    "≤ εG/√(G−1) (the worst case k = 1): 3.0e-4 at G = 8 for TRL's ε = 1e-4.",
    "beyond the paper (frameworks' convention)",
    "k, m positive integers, G = k + m; eps > 0",
    _g3,
    lambda f: sp.Eq(f.update_coefficient(eps=F.eps), f.sigma() ** 2 / (f.sigma() + F.eps), evaluate=False),
    extra=_g3_extra,
)


# --- G4 ---------------------------------------------------------------------------------------
def _g4(f: Formulas) -> list[Claim]:
    sb = F.batch_std
    mean, _ = group_variance(k, m)
    a_plus, a_minus = (1 - mean) / sb, (0 - mean) / sb  # (R - group mean)/batch std, from the group's rewards
    out = [
        Claim(
            "update with the batch std = (sigma^2/sigma_batch)(sbar+ - sbar-)",
            group_update(a_plus, a_minus),
            f.sigma(k, GI) ** 2 / sb * (sbar_plus - sbar_minus),
        ),
        Claim(
            "the dial's batch-std coefficient is sigma^2/sigma_batch",
            f.update_coefficient(scale="batch_std", k=k, G=GI, sigma_batch=sb),
            f.sigma(k, GI) ** 2 / sb,
        ),
    ]
    # an explicit batch of two groups of 4 (k = 1 and k = 2): the batch std from its 8 rewards
    groups = [[1, 0, 0, 0], [1, 1, 0, 0]]
    R = [r for g in groups for r in g]
    batch_mean = sp.Rational(sum(R), len(R))
    sd_batch = sp.sqrt(sum((r - batch_mean) ** 2 for r in R) / len(R))
    s = sp.symbols("s1:5")
    ratios = []
    for g in groups:
        kk = sum(g)
        mu = sp.Rational(kk, 4)
        update = sum((r - mu) / sd_batch * si for r, si in zip(g, s)) / 4
        gap = sum(s[:kk]) / kk - sum(s[kk:]) / (4 - kk)
        c = f.update_coefficient(scale="batch_std", k=kk, G=4, sigma_batch=sd_batch)
        out.append(
            Claim(
                f"batch of two groups of 4, group k={kk}: update = c (sbar+ - sbar-), c the batch-std coefficient",
                update,
                c * gap,
            )
        )
        ratios.append(c / f.sigma(kk, 4))
    out.append(
        Claim(
            "c/sigma is sigma/sigma_batch: k=2 minus k=1 equals (sigma(2,4) - sigma(1,4))/sigma_batch",
            ratios[1] - ratios[0],
            (f.sigma(2, 4) - f.sigma(1, 4)) / sd_batch,
        )
    )
    out.append(
        Claim(
            "which is > 0: the per-group scale 1/sigma of GRPO is lost",
            (sp.Rational(1, 2) - sp.sqrt(3) / 4) / sd_batch,
            kind="pos",
        )
    )
    out.append(
        Claim(
            "sigma(2,4) = 1/2 and sigma(1,4) = sqrt(3)/4",
            sp.Matrix([f.sigma(2, 4), f.sigma(1, 4)]),
            sp.Matrix([sp.Rational(1, 2), sp.sqrt(3) / 4]),
        )
    )
    return out


G4 = Theorem(
    "G4",
    "batch std loses the per-group scale",
    "Dividing the group-centred rewards by the std of the whole batch, the update is (σ²/σ_batch)(s̄₊ − s̄₋): Dr. "
    "GRPO's σ² rescaled by one batch-wide number, so the per-group division by σ that defines GRPO is lost (in an "
    "explicit batch of two groups of 4 the ratio c/σ differs between k = 1 and k = 2).",
    "beyond the paper (frameworks' convention)",
    "k, m positive integers, G = k + m; sigma_batch > 0",
    _g4,
    lambda f: sp.Eq(f.update_coefficient(scale="batch_std"), f.sigma() ** 2 / F.batch_std, evaluate=False),
)


# --- G5 ---------------------------------------------------------------------------------------
_a = sp.Symbol("a", real=True)
_delta = sp.Symbol("delta", positive=True)  # b - a > 0: b is the reward of a correct answer


def _g5(f: Formulas) -> list[Claim]:
    b = _a + _delta
    mean, var = group_variance(k, m, hi=b, lo=_a)
    sd = sp.sqrt(sp.factor(var))
    mu = f.group_mean(k, GI)
    a_plus, a_minus = (b - mean) / sd, (_a - mean) / sd
    return [
        Claim("std of {a, b} rewards = |b - a| sigma", sd, _delta * f.sigma(k, GI)),
        Claim("GRPO advantage of a correct answer equals the binary A+", a_plus, f.advantage_correct(k, GI)),
        Claim("GRPO advantage of an incorrect answer equals the binary A-", a_minus, f.advantage_incorrect(k, GI)),
        Claim(
            "GRPO update = sigma (sbar+ - sbar-)",
            group_update(a_plus, a_minus),
            f.sigma(k, GI) * (sbar_plus - sbar_minus),
        ),
        Claim(
            "Dr. GRPO advantages scale by |b - a|",
            sp.Matrix([b - mean, _a - mean]),
            _delta * sp.Matrix([1 - mu, 0 - mu]),
        ),
        Claim(
            "Dr. GRPO update = |b - a| sigma^2 (sbar+ - sbar-)",
            group_update(b - mean, _a - mean),
            _delta * f.sigma(k, GI) ** 2 * (sbar_plus - sbar_minus),
        ),
    ]


G5 = Theorem(
    "G5",
    "two-valued rewards {a, b}",
    "With rewards b (correct) and a (incorrect), b > a, GRPO's advantages equal the binary ones (so T3 holds "
    "unchanged) and Dr. GRPO's are scaled by |b − a|, its update |b − a|·σ²(s̄₊ − s̄₋).  For b < a swap the "
    "roles of the two sides.",
    "beyond the paper (§Limits: non-binary rewards)",
    "a real, b = a + delta with delta > 0; k, m positive integers, G = k + m",
    _g5,
    lambda f: sp.Eq(
        (_a + _delta - (_a + _delta * f.group_mean())) / (_delta * f.sigma()), f.advantage_correct(), evaluate=False
    ),
)


# --- G6 ---------------------------------------------------------------------------------------
_theta, _theta0 = sp.symbols("theta theta_0", real=True)
_A = sp.Symbol(r"\hat{A}", real=True)
_clip = sp.Symbol("epsilon_clip", positive=True)
_beta = sp.Symbol("beta", positive=True)


def _clip_fn(r: Any) -> Any:
    """clip(r, 1 − ε, 1 + ε)."""
    return sp.Piecewise((1 - _clip, r < 1 - _clip), (1 + _clip, r > 1 + _clip), (r, True))


def kl_k3(log_rho: Any) -> Any:
    """The k3 estimator of KL(π_θ ‖ π_ref) used by GRPO: ρ − log ρ − 1, ρ = π_ref/π_θ."""
    return sp.exp(log_rho) - log_rho - 1


def answer_objective(logprob: sp.Function, A: Any, kl: Callable[[Any], Any] = kl_k3) -> sp.Expr:
    """One answer's term of the GRPO objective: min(r·Â, clip(r)·Â) − β·KL, with
    r = π_θ/π_old = exp(ℓ(θ) − ℓ(θ₀)) and by default the k3 estimator KL₃ = ρ − log ρ − 1,
    ρ = π_ref/π_θ, at the first step (π_old = π_ref = π_θ₀)."""
    ell, ell0 = logprob(_theta), logprob(_theta0)
    r = sp.exp(ell - ell0)
    surrogate = sp.Piecewise((r * A, r * A <= _clip_fn(r) * A), (_clip_fn(r) * A, True))  # min(rA, clip(r)A)
    return surrogate - _beta * kl(ell0 - ell)


def _at_start(e: sp.Expr) -> sp.Expr:
    return sp.sympify(e).subs(_theta, _theta0).doit()


def gradient_at_ratio(objective: sp.Expr, logprob: sp.Function, log_ratio: Any) -> sp.Expr:
    """d objective/dθ where ℓ(θ) = ℓ(θ₀) + log_ratio (ratio r = e^log_ratio), the score ℓ'(θ) kept
    as ``Derivative(ℓ(θ), θ)``.  ``log_ratio = 0`` is the first on-policy step of G6; other values
    show what the clip and the KL do off-policy (the proof is specific to r = 1)."""
    score = sp.Derivative(logprob(_theta), _theta)
    x = sp.Dummy("score")
    grad = sp.diff(objective, _theta).subs(score, x)
    return sp.simplify(grad.subs(logprob(_theta), logprob(_theta0) + log_ratio)).subs(x, score)


def _g6(f: Formulas) -> list[Claim]:
    ell = sp.Function("ell")
    score = _at_start(sp.diff(ell(_theta), _theta))
    out = [
        Claim(
            "d/dtheta [min(rA, clip(r)A) - beta KL] at theta_0 = A d/dtheta log pi (any sign of A)",
            _at_start(sp.diff(answer_objective(ell, _A), _theta)),
            _A * score,
        ),
        Claim("the KL gradient vanishes at theta_0", _at_start(sp.diff(answer_objective(ell, 0), _theta)), 0),
    ]
    # a whole group, symbolic k correct and m incorrect: answer i has log-probability ell(i, theta)
    ell_i = sp.Function("ell")
    i = sp.Symbol("i", integer=True, positive=True)
    x = sp.Dummy("x")

    def grad_at_start(A: Any) -> sp.Expr:  # gradient at theta_0 of answer i's term of the objective
        return _at_start(sp.diff(answer_objective(sp.Lambda(x, ell_i(i, x)), A), _theta))

    score_i = _at_start(sp.diff(ell_i(i, _theta), _theta))
    J_grad = (
        sp.Sum(grad_at_start(f.advantage_correct(k, GI)), (i, 1, k))
        + sp.Sum(grad_at_start(f.advantage_incorrect(k, GI)), (i, k + 1, k + m))
    ) / GI
    s_plus = sp.Sum(score_i, (i, 1, k)) / k
    s_minus = sp.Sum(score_i, (i, k + 1, k + m)) / m
    out.append(
        Claim(
            "group of G = k + m answers, symbolic k and m: gradient of the full objective = sigma (sbar+ - sbar-)",
            J_grad,
            f.sigma(k, GI) * (s_plus - s_minus),
        )
    )
    return out


G6 = Theorem(
    "G6",
    "clipped surrogate with KL, first step",
    "At the first on-policy step (ratio r = 1, policy = reference) the clip is inactive and the k3 KL term's "
    "gradient vanishes, so the gradient of min(rÂ, clip(r)Â) − β·KL is Â·∇log π per answer, and T3 (with G1 "
    "for per-token averaging) holds for the full GRPO loss: for a group of any size G = k + m the objective's gradient "
    "is σ(s̄₊ − s̄₋).  θ is any one coordinate of the parameters.",
    "beyond the paper (§Limits: clipping, KL)",
    "theta real (one coordinate); log-probability a differentiable function; epsilon_clip, beta > 0; A real",
    _g6,
    lambda f: sp.Eq(
        sp.Derivative(answer_objective(sp.Function("ell"), _A), _theta).subs(_theta, _theta0),
        _A * sp.Derivative(sp.Function("ell")(_theta), _theta).subs(_theta, _theta0),
        evaluate=False,
    ),
)
