"""Theorem T14: Corollary 2's exact group-size table, certified by interval arithmetic.

For each cell (p, ε) of the paper's table, with p and ε the exact rationals printed, the exact
fidelity φ(G, p) = E[g]/√(p(1−p)) is evaluated at G_exact and at G_exact − 1 in interval
arithmetic (``mpmath.iv``): the enclosure of φ(G_exact) − (1 − ε) lies above 0 and that of
φ(G_exact − 1) − (1 − ε) below 0.  That G_exact is the *smallest* such G follows because φ is
nondecreasing in G (proved symbolically here: the mean of G + 1 draws is the average of its G + 1
leave-one-out means, and σ(μ) = √(μ(1−μ)) is concave, so Jensen's inequality gives
E σ(μ_{G+1}) ≥ E σ(μ_G)).  φ is evaluated from :func:`grpo_identity.formulas.fidelity` itself
(lambdified with interval arithmetic), never from a second implementation.

>>> T14.method
'certified numeric'
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import sympy as sp
from mpmath import iv

from grpo_identity import formulas as F
from grpo_identity import paper
from grpo_identity.proofs.core import Claim, Formulas, Theorem

__all__ = ["T14", "certified_fidelity", "CELLS"]

p = F.p
_u, _v = sp.symbols("u v", positive=True)
_Gs = sp.Symbol("G", positive=True)
_S, _R = sp.symbols("S R", real=True)
#: interval precision (decimal digits); every enclosure below is far narrower than its margin
DPS = 30
#: the table's cells: (p, ε, exact smallest G, G* as printed), p and ε as exact rationals
CELLS: tuple[tuple[Fraction, Fraction, int, int], ...] = tuple(
    (Fraction(str(pv)), Fraction(str(e)), exact, law)
    for pv, row in paper.GROUP_SIZE_TABLE.items()
    for e, (exact, law) in zip(paper.GROUP_SIZE_EPS, row)
)


def _iv_sqrt(x: Any) -> Any:
    return iv.sqrt(x if isinstance(x, iv.mpf) else iv.mpf(x))


def certified_fidelity(f: Formulas, G: int, pv: Fraction) -> Any:
    """An interval that contains φ(G, p) exactly: ``f.fidelity`` lambdified into ``mpmath.iv``
    (binomials as exact integers, p as the interval of the rational pv)."""
    fn = sp.lambdify(
        (F.G, p),
        f.fidelity(F.G, p),
        modules=[
            {"binomial": lambda n, r: iv.mpf(math.comb(int(n), int(r))), "sqrt": _iv_sqrt, "mpf": iv.mpf},
            "mpmath",
        ],
    )
    saved, iv.dps = iv.dps, DPS
    try:
        return fn(G, iv.mpf(pv.numerator) / pv.denominator)
    finally:
        iv.dps = saved


def _monotone(f: Formulas) -> list[Claim]:
    mu = _u / (_u + _v)  # a μ in (0, 1)
    sig = f.sigma(mu * _Gs, _Gs)  # σ as a function of μ = k/G
    GG = sp.Symbol("G", positive=True, integer=True)
    return [
        Claim("sigma(mu)^2 = mu(1 - mu) (T1), as a function of mu", sig**2, mu * (1 - mu)),
        Claim(
            "the mean of G+1 rewards is the average of its G+1 leave-one-out means",
            ((GG + 1) * _S - _S) / GG / (GG + 1),
            _S / (GG + 1),
        ),
        Claim(
            "sigma(mu) is concave on (0, 1): -d^2 sigma/d mu^2 > 0",
            sp.factor(-sp.diff(f.sigma(_Gs * sp.Symbol("x"), _Gs), sp.Symbol("x"), 2).subs(sp.Symbol("x"), mu)),
            kind="pos",
        ),
    ]


def _cells(f: Formulas) -> tuple[list[Claim], dict[str, Any]]:
    out, rows = [], []
    for pv, e, exact, printed in CELLS:
        target = 1 - e
        t_iv = iv.mpf(target.numerator) / target.denominator
        at = certified_fidelity(f, exact, pv)
        below = certified_fidelity(f, exact - 1, pv)
        g_star = f.group_size_law(sp.Rational(e.numerator, e.denominator), sp.Rational(pv.numerator, pv.denominator))
        ceil_star = int(sp.ceiling(g_star))
        at_ceil = certified_fidelity(f, ceil_star, pv)
        label = f"p={float(pv):g}, eps={float(e):g}"
        out.append(
            Claim(
                f"{label}: phi(G={exact}) >= {float(target):g}, certified",
                "interval",
                kind="certified",
                ok=(at - t_iv > 0) is True,
                value=str(at),
            )
        )
        out.append(
            Claim(
                f"{label}: phi(G={exact - 1}) < {float(target):g}, certified",
                "interval",
                kind="certified",
                ok=(below - t_iv < 0) is True,
                value=str(below),
            )
        )
        out.append(
            Claim(
                f"{label}: ceil(G*) = {ceil_star} undershoots the exact G = {exact}",
                sp.Integer(exact - ceil_star),
                kind="pos",
            )
        )
        out.append(Claim(f"{label}: the paper prints G* = {printed}", sp.Integer(round(g_star)), sp.Integer(printed)))
        rows.append(
            {
                "p": float(pv),
                "eps": float(e),
                "G_exact": exact,
                "phi_at_G_exact": str(at),
                "phi_below": str(below),
                "G_star": float(g_star),
                "ceil_G_star": ceil_star,
                "phi_at_ceil_G_star": str(at_ceil),
            }
        )
    return out, {"cells": rows, "interval_dps": DPS}


T14 = Theorem(
    "T14",
    "the exact group-size table, certified",
    "For each (p, ε) of Corollary 2's table (p = 0.5, 0.3, 0.1, 0.05; ε = 0.1, 0.05, 0.01, as exact rationals) the "
    "smallest G with φ(G, p) ≥ 1 − ε is the printed one (7/11/51, 9/14/61, 22/36/144, 42/69/273): φ(G_exact) ≥ 1 − ε "
    "and φ(G_exact − 1) < 1 − ε by interval arithmetic, and φ is nondecreasing in G (concavity of σ(μ) and the "
    "leave-one-out means), so no smaller G reaches 1 − ε.  ⌈G*⌉ undershoots G_exact in every cell.  By the symmetry "
    "k ↔ G − k the same G holds at 1 − p.",
    "Corollary 2 (table)",
    "p, eps the exact rationals of the table; intervals at 30 digits (mpmath.iv); Jensen's inequality for the "
    "concave sigma(mu) (a lemma); phi(G, p) = phi(G, 1 - p) by k <-> G - k",
    _monotone,
    lambda f: sp.Eq(
        sp.Symbol(r"G_{\mathrm{exact}}(\varepsilon, p)"),
        sp.Symbol(r"\min\{G : \varphi(G, p) \ge 1 - \varepsilon\}"),
        evaluate=False,
    ),
    extra=_cells,
    method="certified numeric",
)
