"""Theorems T1–T7: σ, the two advantage values, the identity, its baseline invariance,
Dr. GRPO, the three-mode reduction and RLOO (PAPER claims 1–2).

Interior groups (0 < k < G) are written G = k + m with k, m positive integers, so that every
square root of a product of counts splits into positive factors.  Scores enter through the
side means s̄₊, s̄₋ (symbolic (d, 1) vectors, see :mod:`grpo_identity.proofs.core`).

>>> T3.prove().status
'proved'
"""

from __future__ import annotations

from typing import Any

import sympy as sp

from grpo_identity import dial as D
from grpo_identity import formulas as F
from grpo_identity.proofs.core import (
    Claim,
    Formulas,
    G_interior,
    Theorem,
    k,
    m,
    n,
    sbar_minus,
    sbar_plus,
)

__all__ = ["T1", "T2", "T3", "T4", "T5", "T6", "T7", "group_update", "THREE_MODES"]

GI = G_interior  # G = k + m
_g = sp.Symbol("g")
_gap = sp.Symbol(r"\bar{s}_{+}") - sp.Symbol(r"\bar{s}_{-}")  # display only


def group_update(
    a_plus: Any, a_minus: Any, kk: Any = k, mm: Any = m, s_plus: Any = sbar_plus, s_minus: Any = sbar_minus
) -> Any:
    """Per-prompt update g = (1/G) Σᵢ Âᵢ sᵢ with the sum split over the two index sets.

    Σ over the kk correct answers of Â₊ sᵢ = Â₊·kk·s̄₊; over the mm incorrect, Â₋·mm·s̄₋; G = kk + mm.
    """
    return (a_plus * kk * s_plus + a_minus * mm * s_minus) / (kk + mm)


def group_variance(kk: Any, mm: Any, hi: Any = 1, lo: Any = 0) -> tuple[sp.Expr, sp.Expr]:
    """Mean and population variance of kk rewards equal to ``hi`` and mm equal to ``lo``,
    from the sums over the two index sets (the definitions of mean and variance)."""
    GG = kk + mm
    mean = (kk * hi + mm * lo) / GG
    var = (kk * (hi - mean) ** 2 + mm * (lo - mean) ** 2) / GG
    return mean, var


# --- T1 ---------------------------------------------------------------------------------------
def _t1(f: Formulas) -> list[Claim]:
    mean, var = group_variance(k, m)
    mu = f.group_mean(k, GI)
    out = [
        Claim("group mean of the rewards equals mu = k/G", mean, mu),
        Claim("sigma^2 equals the population variance of the rewards", f.sigma(k, GI) ** 2, var),
        Claim("sigma = sqrt(mu(1 - mu))", f.sigma(k, GI), sp.sqrt(mu * (1 - mu))),
    ]
    for label, kk in (("k = 0", 0), ("k = G", F.G)):  # silent groups: variance and sigma are 0
        _, v = group_variance(kk, F.G - kk)
        out.append(Claim(f"{label}: variance 0", sp.simplify(v), 0))
        out.append(Claim(f"{label}: sigma 0", f.sigma(kk, F.G), 0))
    return out


T1 = Theorem(
    "T1",
    "sigma of binary rewards",
    "For binary rewards with k correct out of G, the population variance of the rewards is σ² = k(G−k)/G², "
    "so σ = √(μ(1−μ)) with μ = k/G; σ = 0 exactly for k ∈ {0, G}.",
    "§Setting, Theorem 1",
    "k, m positive integers, G = k + m (interior); G positive integer for k ∈ {0, G}; ddof 0",
    _t1,
    lambda f: sp.Eq(f.sigma(), sp.sqrt(f.group_mean() * (1 - f.group_mean())), evaluate=False),
)


# --- T2 ---------------------------------------------------------------------------------------
def _t2(f: Formulas) -> list[Claim]:
    mu, s = f.group_mean(k, GI), f.sigma(k, GI)
    return [
        Claim("advantage of a correct answer (R = 1): (1 - mu)/sigma = A+", (1 - mu) / s, f.advantage_correct(k, GI)),
        Claim(
            "advantage of an incorrect answer (R = 0): (0 - mu)/sigma = A-", (0 - mu) / s, f.advantage_incorrect(k, GI)
        ),
        Claim(
            "advantages sum to zero over the group: k A+ + m A- = 0",
            k * f.advantage_correct(k, GI) + m * f.advantage_incorrect(k, GI),
            0,
        ),
    ]


T2 = Theorem(
    "T2",
    "two advantage values, zero sum",
    "For 0 < k < G the GRPO advantage Âᵢ = (Rᵢ−μ)/σ takes only the two values Â₊ = (G−k)/(Gσ) on the "
    "correct and Â₋ = −k/(Gσ) on the incorrect answers, and k·Â₊ + (G−k)·Â₋ = 0.",
    "Theorem 1 (proof)",
    "k, m positive integers, G = k + m; rewards in {0, 1}",
    _t2,
    lambda f: (
        sp.Eq(sp.Symbol(r"\hat{A}_{+}"), f.advantage_correct(), evaluate=False),
        sp.Eq(sp.Symbol(r"\hat{A}_{-}"), f.advantage_incorrect(), evaluate=False),
    ),
)


# --- T3 ---------------------------------------------------------------------------------------
def _explicit_groups(f: Formulas, G_max: int = 6) -> list[Claim]:
    """Independent cross-check with one scalar score symbol per answer, G = 2..G_max.

    Rewards are listed explicitly; μ and σ are computed from the list, the update is the plain
    sum (1/G) Σ Âᵢ sᵢ; compared with σ(k,G)·(s̄₊ − s̄₋) from the formulas.
    """
    out = []
    for GG in range(2, G_max + 1):
        s = sp.symbols(f"s1:{GG + 1}")
        for kk in range(1, GG):
            R = [1] * kk + [0] * (GG - kk)
            mu = sp.Rational(sum(R), GG)
            sd = sp.sqrt(sum((r - mu) ** 2 for r in R) / GG)
            g = sum((r - mu) / sd * si for r, si in zip(R, s)) / GG
            gap = sum(s[:kk]) / kk - sum(s[kk:]) / (GG - kk)
            out.append(Claim(f"explicit group G={GG}, k={kk}", g, f.sigma(kk, GG) * gap))
    return out


def _t3(f: Formulas) -> list[Claim]:
    g = group_update(f.advantage_correct(k, GI), f.advantage_incorrect(k, GI))
    out = [
        Claim(
            "g = sigma (sbar+ - sbar-) for 0 < k < G, every component of every dimension",
            g,
            f.sigma(k, GI) * (sbar_plus - sbar_minus),
        ),
        # silent groups: every centred reward is 0, the advantage is defined as 0, and sigma is 0 too
        Claim("k = 0: every centred reward R - mu is 0", 0 - f.group_mean(0, F.G), 0),
        Claim("k = G: every centred reward R - mu is 0", 1 - f.group_mean(F.G, F.G), 0),
        Claim("k = 0: coefficient sigma is 0, so g = 0 = sigma (sbar+ - sbar-)", f.sigma(0, F.G), 0),
        Claim("k = G: coefficient sigma is 0", f.sigma(F.G, F.G), 0),
    ]
    # the scalar Bernoulli-logit prompt: s_i = y_i - p, so sbar+ - sbar- = (1 - p) - (0 - p) = 1 and g = sigma
    out.append(
        Claim(
            "Bernoulli-logit prompt: g(k) = sigma",
            group_update(f.advantage_correct(k, GI), f.advantage_incorrect(k, GI), s_plus=1 - F.p, s_minus=0 - F.p),
            f.sigma(k, GI),
        )
    )
    out += _explicit_groups(f)
    return out


T3 = Theorem(
    "T3",
    "the group-standard-deviation identity",
    "For 0 < k < G the GRPO update g = (1/G) Σᵢ Âᵢ sᵢ equals σ·(s̄₊ − s̄₋) exactly, for scores of any "
    "dimension; for k ∈ {0, G} it is 0.  For the scalar Bernoulli-logit prompt g(k) = σ.",
    "Theorem 1",
    "k, m positive integers, G = k + m; scores symbolic (d, 1) vectors, d symbolic; silent advantages defined as 0",
    _t3,
    lambda f: sp.Eq(_g, f.sigma() * _gap, evaluate=False),
)


# --- T4 ---------------------------------------------------------------------------------------
_b = sp.Symbol("b", real=True)


def _t4(f: Formulas) -> list[Claim]:
    mean_b, var_b = group_variance(k, m, hi=1 + _b, lo=_b)
    sd_b = sp.sqrt(sp.factor(var_b))
    a_plus_b, a_minus_b = (1 + _b - mean_b) / sd_b, (_b - mean_b) / sd_b
    return [
        Claim("std of the shifted rewards equals sigma", sd_b, f.sigma(k, GI)),
        Claim("shifted advantage of a correct answer equals A+", a_plus_b, f.advantage_correct(k, GI)),
        Claim("shifted advantage of an incorrect answer equals A-", a_minus_b, f.advantage_incorrect(k, GI)),
        Claim(
            "update with shifted rewards equals sigma (sbar+ - sbar-)",
            group_update(a_plus_b, a_minus_b),
            f.sigma(k, GI) * (sbar_plus - sbar_minus),
        ),
    ]


T4 = Theorem(
    "T4",
    "invariance to a reward baseline",
    "Adding any constant b to every reward changes neither the advantages nor the update: the mean "
    "shifts by b and the standard deviation is unchanged, so g = σ(s̄₊ − s̄₋) still.",
    "Theorem 1",
    "b real; k, m positive integers, G = k + m",
    _t4,
    lambda f: sp.Eq((1 + _b - (f.group_mean() + _b)) / f.sigma(), f.advantage_correct(), evaluate=False),
)


# --- T5 ---------------------------------------------------------------------------------------
def _t5(f: Formulas) -> list[Claim]:
    mu = f.group_mean(k, GI)
    g = group_update(1 - mu, 0 - mu)  # Dr. GRPO advantage: R - mu
    return [
        Claim("Dr. GRPO: g = sigma^2 (sbar+ - sbar-)", g, f.sigma(k, GI) ** 2 * (sbar_plus - sbar_minus)),
        Claim(
            "k = 0 and k = G: the Dr. GRPO advantage is 0",
            (0 - f.group_mean(0, F.G)) ** 2 + (1 - f.group_mean(F.G, F.G)) ** 2,
            0,
        ),
    ]


T5 = Theorem(
    "T5",
    "Dr. GRPO update",
    "With Dr. GRPO's advantage Âᵢ = Rᵢ − μ (no division by σ) the update is g = σ²·(s̄₊ − s̄₋).",
    "§The three methods",
    "k, m positive integers, G = k + m; scores symbolic (d, 1) vectors",
    _t5,
    lambda f: sp.Eq(_g, f.sigma() ** 2 * _gap, evaluate=False),
)


# --- T6 ---------------------------------------------------------------------------------------
def _published(name: str, f: Formulas, R: Any, kk: Any, GG: Any) -> Any:
    """The published advantage of a method for a reward R in a group with kk correct."""
    mu, s = f.group_mean(kk, GG), f.sigma(kk, GG)
    if name == "grpo":
        return (R - mu) / s
    if name == "dr_grpo":
        return R - mu
    if name == "dapo":  # GRPO's advantage; groups with sigma = 0 are discarded (advantage 0)
        return sp.Piecewise(((R - mu) / s, sp.And(sp.Gt(kk, 0), sp.Lt(kk, GG))), (0, True))
    raise ValueError(name)


def _kwargs(dial: D.Dial) -> dict[str, Any]:
    return dial.params()


#: the three modes: preset, expected coefficient as a function of sigma (with the keep rule)
THREE_MODES = (D.GRPO, D.DR_GRPO, D.DAPO)


def _t6(f: Formulas) -> list[Claim]:
    out = []
    s = f.sigma(k, GI)
    expected = {"grpo": s, "dr_grpo": s**2, "dapo": s}  # interior; DAPO's indicator is 1 here
    for dial in THREE_MODES:
        kw = _kwargs(dial)
        a_plus = f._centred_correct(dial.centre, k, GI) / f._scale(
            dial.scale, dial.ddof, sp.nsimplify(kw["eps"]), k, GI, F.batch_std, dial.eps_where
        )
        if dial.keep == "nonzero_std":
            a_plus = sp.Piecewise((a_plus, sp.And(sp.Gt(k, 0), sp.Lt(k, GI))), (0, True))
        out.append(
            Claim(
                f"{dial.name}: dial advantage of a correct answer is the published one",
                a_plus,
                _published(dial.name, f, 1, k, GI),
            )
        )
        out.append(
            Claim(f"{dial.name}: update coefficient", f.update_coefficient(k=k, G=GI, **kw), expected[dial.name])
        )
    # DAPO's indicator: 0 for silent groups
    kw = _kwargs(D.DAPO)
    out.append(Claim("dapo: coefficient 0 at k = 0", f.update_coefficient(k=0, G=F.G, **kw), 0))
    out.append(Claim("dapo: coefficient 0 at k = G", f.update_coefficient(k=F.G, G=F.G, **kw), 0))
    return out


T6 = Theorem(
    "T6",
    "three operations on one number",
    "The dial family at the GRPO, Dr. GRPO and DAPO presets gives exactly each method's published "
    "advantage, and update coefficients σ, σ² and 1{0<k<G}·σ: three operations on σ.",
    "§The three methods, Theorem 1",
    "k, m positive integers, G = k + m; presets from grpo_identity.dial (population std, no epsilon)",
    _t6,
    lambda f: sp.Eq(
        sp.Matrix([f.update_coefficient(**_kwargs(d)) for d in THREE_MODES]),
        sp.Matrix(
            [f.sigma(), f.sigma() ** 2, sp.Piecewise((f.sigma(), sp.And(sp.Gt(F.k, 0), sp.Lt(F.k, F.G))), (0, True))]
        ),
        evaluate=False,
    ),
)


# --- T7 ---------------------------------------------------------------------------------------
_R = sp.Symbol("R_i", real=True)
_S = sp.Symbol("S_{-i}", real=True)  # sum of the other G - 1 rewards


def _t7(f: Formulas) -> list[Claim]:
    GG = n + 1  # G >= 2
    mu = (_R + _S) / GG
    b_loo = _S / (GG - 1)
    out = [
        Claim(
            "R_i - mu = ((G-1)/G)(R_i - b_i) for any real rewards",
            _R - mu,
            sp.Rational(1, 1) * (GG - 1) / GG * (_R - b_loo),
        )
    ]
    # binary rewards: the correct answer's baseline is (k-1)/(G-1); the mean-centred value is (G-1)/G of the LOO one
    b_correct = (k - 1) / (GI - 1)
    out.append(
        Claim(
            "binary, correct answer: 1 - mu = ((G-1)/G)(1 - b)",
            1 - f.group_mean(k, GI),
            (GI - 1) / GI * (1 - b_correct),
        )
    )
    out.append(
        Claim(
            "RLOO coefficient = G/(G-1) times Dr. GRPO's sigma^2",
            f.update_coefficient(centre="loo", scale="none", k=k, G=GI),
            GI / (GI - 1) * f.update_coefficient(centre="mean", scale="none", k=k, G=GI),
        )
    )
    # pinned to sigma, so that a coefficient wrong by the same factor on both sides cannot pass
    out.append(
        Claim(
            "RLOO coefficient = (G/(G-1)) sigma^2",
            f.update_coefficient(centre="loo", scale="none", k=k, G=GI),
            GI / (GI - 1) * f.sigma(k, GI) ** 2,
        )
    )
    return out


T7 = Theorem(
    "T7",
    "RLOO is rescaled Dr. GRPO",
    "With the leave-one-out baseline bᵢ = (1/(G−1)) Σ_{j≠i} R_j, Rᵢ − μ = ((G−1)/G)(Rᵢ − bᵢ) for any "
    "rewards and G ≥ 2, so RLOO's update is G/(G−1) times Dr. GRPO's.",
    "Proposition 1",
    "G = n + 1 with n a positive integer (G >= 2); rewards real",
    _t7,
    lambda f: sp.Eq(_R - (_R + _S) / F.G, (F.G - 1) / F.G * (_R - _S / (F.G - 1)), evaluate=False),
)
