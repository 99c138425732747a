"""Theorem G9: the identity for any rewards (beyond the paper's binary verifier).

For any real rewards R₁ … R_G of a group and scores s₁ … s_G,

    (1/G) Σᵢ (Rᵢ − R̄) sᵢ = σ_R² · β̂,

σ_R the population std of the rewards and β̂ the least-squares slope of the scores on the rewards
(:func:`grpo_identity.formulas.reward_std`, :func:`~grpo_identity.formulas.score_slope`).  So GRPO's
update is σ_R·β̂, Dr. GRPO's σ_R²·β̂, RLOO's (G/(G−1))·σ_R²·β̂ and DAPO's 1{σ_R > 0}·σ_R·β̂; for
binary rewards β̂ = s̄₊ − s̄₋ and σ_R = σ, which is Theorem 1.

**Symbolic in G.**  The rewards and the scores are ``IndexedBase`` objects R[i], s[i], i = 1 … G, the
sums unevaluated ``Sum`` objects.  The zero test first applies the linearity of a finite sum
(:func:`linear_sums`): each summand is expanded, every factor free of the index leaves its sum, and
the sum of a constant over i = 1 … G is G times it.  Each remaining sum is then a sum of a product of
R[i] and s[i] alone; written as one real symbol each (``Σ[R_i s_i]`` …), the residual is a rational
function of those symbols, G and the square roots of some, and must reduce to 0.  Replacing the sums
by symbols only forgets relations between them (sound; a residual 0 is 0 for every group).  A score
of any dimension enters linearly: the statement for a real sᵢ is the statement for each component.

>>> G9.prove().status
'proved'
"""

from __future__ import annotations

from typing import Any

import sympy as sp

from grpo_identity import formulas as F
from grpo_identity.proofs.core import Claim, Formulas, Theorem, k, m, n, sbar_minus, sbar_plus

__all__ = ["G9", "linear_sums", "sums_as_symbols"]

R, s, G = F.R, F.s, F.G
_i = sp.Symbol("i", integer=True, positive=True)  # the index every normalised sum is written with
_g = sp.Symbol("g")


# --- finite sums, by linearity ------------------------------------------------------------------
def linear_sums(expr: Any) -> sp.Expr:
    """``expr`` with every ``Sum`` split by linearity, innermost first: summands expanded, factors
    free of the index taken out, Σ_{i=a}^{b} c = (b − a + 1)·c, each remaining sum over the index i.

    >>> x = sp.IndexedBase("x")
    >>> linear_sums(sp.Sum(2 * x[_i] + G, (_i, 1, G)))
    G**2 + 2*Sum(x[i], (i, 1, G))
    """
    e = sp.sympify(expr)
    if not e.args or isinstance(e, (sp.Indexed, sp.IndexedBase)):
        return e
    if isinstance(e, sp.Sum):
        return _split_sum(linear_sums(e.function), e.limits)
    return e.func(*[linear_sums(a) for a in e.args])


def _split_sum(summand: sp.Expr, limits: Any) -> sp.Expr:
    """Σ_{x=lo}^{hi} summand, the summand's own sums already split: one sum per term."""
    if len(limits) != 1:
        raise ValueError(f"one summation index per Sum, got limits {limits}")
    x, lo, hi = limits[0]
    out = sp.Integer(0)
    for term in sp.Add.make_args(sp.expand(summand)):
        free = sp.Mul(*[a for a in sp.Mul.make_args(term) if x not in a.free_symbols])
        bound = sp.Mul(*[a for a in sp.Mul.make_args(term) if x in a.free_symbols])
        if bound == 1:
            out += free * (hi - lo + 1)
        else:
            out += free * sp.Sum(bound.subs(x, _i), (_i, lo, hi))
    return out


def sums_as_symbols(expr: Any) -> sp.Expr:
    """:func:`linear_sums`, then each remaining sum written as one real symbol named by its summand
    (``Σ[R_i*s_i]``): the same sum gets the same symbol on both sides of a claim."""
    e = linear_sums(expr)
    atoms = sorted(e.atoms(sp.Sum), key=sp.default_sort_key)
    return e.subs({a: _sum_symbol(a) for a in atoms})


def _sum_symbol(a: sp.Sum) -> sp.Symbol:
    _, lo, hi = a.limits[0]
    body = str(a.function).replace("[i]", "_i")
    return sp.Symbol(f"Σ[{body}]" if (lo, hi) == (1, G) else f"Σ[{body}, i={lo}..{hi}]", real=True)


def _claim(label: str, lhs: Any, rhs: Any) -> Claim:
    """An equation between two expressions with sums, compared after :func:`sums_as_symbols`."""
    return Claim(label, sums_as_symbols(lhs), sums_as_symbols(rhs))


# --- the group's quantities, from the definitions -------------------------------------------------
def _mean(x: Any) -> sp.Expr:
    """x̄ = (1/G) Σ xᵢ."""
    return sp.Sum(x[_i], (_i, 1, G)) / G


def _update(advantage: Any) -> sp.Expr:
    """g = (1/G) Σᵢ Âᵢ sᵢ for an advantage given as a function of the index i."""
    return sp.Sum(advantage(_i) * s[_i], (_i, 1, G)) / G


def _centred(i: Any) -> sp.Expr:
    return R[i] - _mean(R)


def _at_rewards(expr: Any, values: dict[str, Any]) -> sp.Expr:
    """``expr`` (sums as symbols) at a reward pattern: the values of Σ Rᵢ, Σ Rᵢ², Σ Rᵢsᵢ, Σ sᵢ and G."""
    e = sums_as_symbols(expr)
    names = {"R_i": "R", "R_i**2": "R2", "R_i*s_i": "Rs", "s_i": "s"}
    subs = {sp.Symbol(f"Σ[{body}]", real=True): values[key] for body, key in names.items()}
    return sp.sympify(e.subs(subs).subs(G, values["G"]))


def _binary(kk: Any, mm: Any, hi: Any = 1, lo: Any = 0) -> dict[str, Any]:
    """Rewards ``hi`` on kk answers (the correct side, mean score s̄₊), ``lo`` on mm (mean score s̄₋):
    the sums over the group follow from the sums over the two sides, Σ_{correct} sᵢ = kk·s̄₊ …"""
    sp_, sm = sbar_plus[0, 0], sbar_minus[0, 0]  # one component of each side's mean score
    return {
        "R": kk * hi + mm * lo,
        "R2": kk * hi**2 + mm * lo**2,
        "Rs": hi * kk * sp_ + lo * mm * sm,
        "s": kk * sp_ + mm * sm,
        "G": kk + mm,
    }


# --- G9 -------------------------------------------------------------------------------------------
def _g9(f: Formulas) -> list[Claim]:
    sd, slope = f.reward_std(R, G), f.score_slope(R, s, G)
    out = [
        _claim("the centred rewards sum to 0: sum (R_i - Rbar) = 0", sp.Sum(_centred(_i), (_i, 1, G)), 0),
        _claim(
            "(1/G) sum (R_i - Rbar) s_i = sigma_R^2 beta_hat, any rewards (Dr. GRPO's update, A_i = R_i - Rbar)",
            _update(_centred),
            sd**2 * slope,
        ),
        _claim(
            "GRPO, A_i = (R_i - Rbar)/sigma_R: g = sigma_R beta_hat", _update(lambda i: _centred(i) / sd), sd * slope
        ),
    ]
    out += _rloo(f)
    out += _silent(f)
    out += _two_valued(f)
    out += _explicit_groups(f)
    return out


def _rloo(f: Formulas) -> list[Claim]:
    """RLOO: bᵢ = (Σⱼ Rⱼ − Rᵢ)/(G − 1), so Rᵢ − bᵢ = (G/(G−1))(Rᵢ − R̄), for G = n + 1 ≥ 2."""
    GG = n + 1
    total = sp.Sum(R[_i], (_i, 1, GG))

    def advantage(i: Any) -> sp.Expr:
        return R[i] - (total - R[i]) / (GG - 1)

    g = sp.Sum(advantage(_i) * s[_i], (_i, 1, GG)) / GG
    sd, slope = f.reward_std(R, GG), f.score_slope(R, s, GG)
    return [
        _claim("RLOO, A_i = R_i - b_i: g = (G/(G-1)) sigma_R^2 beta_hat (G >= 2)", g, GG / (GG - 1) * sd**2 * slope)
    ]


def _silent(f: Formulas) -> list[Claim]:
    """DAPO's filter: it drops the groups with σ_R = 0, i.e. every Rᵢ = R̄ (a sum of squares of reals
    is 0 only when each square is), and those groups' centred rewards, so their update, are 0 already."""
    r = sp.Symbol("r", real=True)
    silent = {"R": G * r, "R2": G * r**2, "Rs": r * sp.Symbol("Σ[s_i]", real=True), "s": sp.Symbol("Σ[s_i]", real=True)}
    return [
        Claim("sigma_R^2 is a mean of squares: (R_i - Rbar)^2 >= 0", _centred(_i) ** 2, kind="nonneg"),
        Claim("every R_i = r: sigma_R = 0", _at_rewards(f.reward_std(R, G), {**silent, "G": G}), 0),
        Claim(
            "every R_i = r: (1/G) sum (R_i - Rbar) s_i = 0, so DAPO's 1{sigma_R > 0} changes no update",
            _at_rewards(_update(_centred), {**silent, "G": G}),
            0,
        ),
    ]


def _two_valued(f: Formulas) -> list[Claim]:
    """Binary rewards (k correct, m incorrect) give β̂ = s̄₊ − s̄₋ and σ_R = σ: Theorem 1 again; rewards
    {a, b}, b = a + δ, give β̂ = (s̄₊ − s̄₋)/δ and σ_R = δσ, so GRPO's update is unchanged (G5)."""
    gap = sbar_plus[0, 0] - sbar_minus[0, 0]
    a, delta = sp.Symbol("a", real=True), sp.Symbol("delta", positive=True)
    binary, ab = _binary(k, m), _binary(k, m, hi=a + delta, lo=a)
    slope, sd = f.score_slope(R, s, G), f.reward_std(R, G)
    return [
        Claim("binary rewards: beta_hat = sbar+ - sbar-", _at_rewards(slope, binary), gap),
        Claim("binary rewards: sigma_R = sigma", _at_rewards(sd, binary), f.sigma(k, k + m)),
        Claim("rewards {a, a + delta}: beta_hat = (sbar+ - sbar-)/delta", _at_rewards(slope, ab), gap / delta),
        Claim(
            "rewards {a, a + delta}: GRPO's sigma_R beta_hat = sigma (sbar+ - sbar-)",
            _at_rewards(sd * slope, ab),
            f.sigma(k, k + m) * gap,
        ),
    ]


#: explicit groups of the cross-check: multi-valued and continuous rewards, exact rationals
EXPLICIT_REWARDS = (
    (0, sp.Rational(1, 2), 1),
    (3, -1, 2, 2),
    (sp.Rational(1, 3), 0, sp.Rational(7, 4), sp.Rational(1, 3), -2),
)


def _explicit_groups(f: Formulas) -> list[Claim]:
    """Cross-check with one scalar score symbol per answer: GRPO's update computed from the listed
    rewards (their mean and population std) equals σ_R·β̂ from the formulas on the same list."""
    out = []
    for rewards in EXPLICIT_REWARDS:
        GG = len(rewards)
        scores = sp.symbols(f"s1:{GG + 1}")
        mu = sp.Rational(1, GG) * sum(rewards)
        sd = sp.sqrt(sum((r - mu) ** 2 for r in rewards) / GG)
        g = sum((r - mu) / sd * si for r, si in zip(rewards, scores)) / GG
        rhs = f.reward_std(list(rewards)) * f.score_slope(list(rewards), list(scores))
        out.append(Claim(f"explicit group, rewards {[str(r) for r in rewards]}: g = sigma_R beta_hat", g, rhs))
    return out


G9 = Theorem(
    "G9",
    "the identity for any rewards",
    "For any real rewards R₁ … R_G (G symbolic) and scores sᵢ, (1/G) Σᵢ (Rᵢ − R̄) sᵢ = σ_R²·β̂, σ_R the "
    "population std of the rewards and β̂ = Σ(Rᵢ − R̄)(sᵢ − s̄)/Σ(Rᵢ − R̄)² the least-squares slope of the "
    "scores on the rewards (σ_R > 0).  So g = σ_R·β̂ for GRPO, σ_R²·β̂ for Dr. GRPO and, as corollaries, "
    "(G/(G−1))·σ_R²·β̂ for RLOO (G ≥ 2) and 1{σ_R > 0}·σ_R·β̂ for DAPO, whose filter drops groups "
    "with σ_R = 0; a group whose rewards are all equal has σ_R = 0 and a centred update of 0 already.  "
    "For binary rewards β̂ = s̄₊ − s̄₋ and σ_R = σ (Theorem 1); for rewards {a, a + δ}, "
    "β̂ = (s̄₊ − s̄₋)/δ and σ_R = δσ (G5).",
    "beyond the paper (§Limits: non-binary rewards)",
    "G a positive integer (n + 1 with n positive for RLOO); rewards R_i and scores s_i real (one component of a "
    "score of any dimension); sigma_R > 0 where beta_hat appears; silent GRPO advantages defined as 0",
    _g9,
    lambda f: (
        sp.Eq(
            sp.Sum((R[_i] - sp.Symbol(r"\bar{R}")) * s[_i], (_i, 1, G)) / G,
            sp.Symbol(r"\sigma_R") ** 2 * sp.Symbol(r"\hat{\beta}"),
            evaluate=False,
        ),
        sp.Eq(sp.Symbol(r"\sigma_R"), f.reward_std(), evaluate=False),
        sp.Eq(sp.Symbol(r"\hat{\beta}"), f.score_slope(), evaluate=False),
    ),
)
