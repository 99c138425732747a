"""Theorem T11: the attenuation law to second order, derived, and checked against the exact sum.

Fidelity φ(G,p) = E[σ]/√(p(1−p)) (Corollary 2).  With μ = k/G = p + δ,

    σ(μ)/σ(p) = √(1 + z),   z = (p+δ)(1−p−δ)/(p(1−p)) − 1 = ((1−2p)δ − δ²)/(p(1−p)),

so √(1+z) = Σₙ C(½, n) zⁿ is a power series in δ with rational coefficients (no radicals).
Taking expectations term by term with E[δʳ] = E[(k − Gp)ʳ]/Gʳ (the binomial central moments,
:func:`grpo_identity.proofs.core.central_moments`, O(G^⌊r/2⌋)) and collecting powers of 1/G:

    φ = 1 − 1/(8Gv) − (7 − 16v)/(128G²v²) − (128v² − 288v + 75)/(1024G³v³) + O(G⁻⁴),  v = p(1−p).

The 1/G term is the paper's second-order delta method (Corollary 1); the 1/G² term is
:func:`grpo_identity.formulas.attenuation_second_order`.  The series is asymptotic (f is not
analytic at μ ∈ {0, 1}); its error is checked numerically against the exact sum in mpmath.

>>> [str(c) for c in fidelity_series(2)[1:]]
['-1/(8*p*(1 - p))', '(16*p*(1 - p) - 7)/(128*p**2*(1 - p)**2)']
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache
from typing import Any, Sequence

import mpmath
import sympy as sp
from mpmath import iv

from grpo_identity import formulas as F
from grpo_identity import paper
from grpo_identity.proofs.core import Claim, Formulas, Theorem, binomial_pmf, central_moments, expectation_of_polynomial
from grpo_identity.proofs.table import certified_fidelity

__all__ = ["T11", "fidelity_series", "group_size_second_order", "G_GRID", "P_GRID", "table_comparison"]

p = F.p
_G = sp.Symbol("G", positive=True)  # real G for the asymptotic series
_u = sp.Symbol("u", positive=True)  # u = 1/G
_delta = sp.Symbol("delta", real=True)
_v = sp.Symbol("v", positive=True)  # v = p(1-p), for display of coefficients
_W = sp.Symbol("W", positive=True)  # the reciprocal of the denominator of z, in polynomial arithmetic
#: group sizes of the mpmath check (8 … 2048, doubling) and the solve rates
G_GRID: tuple[int, ...] = tuple(8 * 2**i for i in range(9))
P_GRID: tuple[float, ...] = (0.5, 0.3, 0.1)


@lru_cache(maxsize=4)
def fidelity_series(order: int) -> tuple[sp.Expr, ...]:
    """Coefficients c₀..c_order of φ(G,p) = Σ cᵢ G⁻ⁱ + O(G^-(order+1)), from first principles.

    Needs central moments up to 2·order (E[δʳ] = O(G^-⌈r/2⌉)).  Coefficients are returned in
    terms of v = p(1−p), then written back in p.
    """
    r_max = 2 * order
    ratio_sq = sp.cancel((F.sigma(_G * (p + _delta), _G) / F.sigma(_G * p, _G)) ** 2)  # (σ(μ)/σ(p))²
    num, den = sp.fraction(sp.cancel(ratio_sq - 1))  # z = num/den, den = den(p) only
    assert not den.has(_delta), den
    gens = (_delta, _u, p, _W)  # _W stands for 1/den
    one = sp.Poly(1, *gens)
    z = sp.Poly(num * _W, *gens)

    def trunc(poly: sp.Poly) -> sp.Poly:  # drop powers of delta above r_max
        return sp.Poly.from_dict({mon: c for mon, c in poly.terms() if mon[0] <= r_max} or {(0,) * 4: 0}, *gens)

    sqrt_series, zn = one, one  # √(1+z) = Σ C(½, n) zⁿ, z = O(δ)
    for nn in range(1, r_max + 1):
        zn = trunc(zn * z)
        sqrt_series += zn * sp.binomial(sp.Rational(1, 2), nn)
    # E[δʳ] = E[(k − Gp)ʳ]/Gʳ, a polynomial in u = 1/G because E[(k − Gp)ʳ] has degree ≤ r/2 in G
    mom = central_moments(r_max, _G, p)
    expect = {}
    for r in range(r_max + 1):
        terms = sp.Poly(mom[r], _G, p).terms()
        expect[r] = sp.Poly(sum((c * _u ** (r - i) * p**jj for (i, jj), c in terms), sp.Integer(0)), *gens)
    phi = sp.Poly(0, *gens)
    for (r, *rest), c in sqrt_series.terms():
        phi += expect[r] * sp.Poly.from_dict({(0, *rest): c}, *gens)
    coeffs = []
    for i in range(order + 1):
        ci = sum((c * p**jj * _W**w for (dd, ui, jj, w), c in phi.terms() if ui == i), sp.Integer(0))
        c = sp.factor(sp.cancel(ci.subs(_W, 1 / den)))
        coeffs.append(_in_v(c).subs(_v, p * (1 - p)))
    return tuple(coeffs)


def _in_v(c: sp.Expr) -> sp.Expr:
    """Rewrite a rational function of p that is symmetric under p ↔ 1−p in v = p(1−p)."""
    num, den = sp.fraction(sp.cancel(c))
    out = []
    for part in (num, den):
        poly, rest = sp.Poly(sp.expand(part), p), sp.Integer(0)
        # peel off the highest power of p with a power of v: p^(2a) ~ v^a (-1)^a up to lower terms
        while not poly.is_zero:
            deg = poly.degree()
            if deg % 2:
                raise ValueError(f"not symmetric in p <-> 1-p: {c}")
            lead = poly.LC()
            a = deg // 2
            rest += lead * (-1) ** a * _v**a
            poly = sp.Poly(sp.expand(poly.as_expr() - lead * (-1) ** a * (p * (1 - p)) ** a), p)
        out.append(sp.factor(rest))
    return out[0] / out[1]


def group_size_second_order(eps: Any = F.eps, pp: Any = p) -> sp.Expr:
    """Smallest real G at which the second-order law reaches 1 − ε: the positive root of
    εG² − G/(8v) − (7 − 16v)/(128v²) = 0 (the law increases in G; v = p(1−p))."""
    roots = sp.solve(sp.Eq(F.attenuation_second_order(_G, p), 1 - F.eps), _G)
    # the product of the two roots is −(7 − 16v)/(128εv²) < 0 (v ≤ 1/4): exactly one is positive
    # for every p and ε, so the sign at one point identifies it
    sample = {F.eps: sp.Rational(1, 10), p: sp.Rational(3, 10)}
    (root,) = [r for r in roots if r.subs(sample).is_positive]
    return root.subs({F.eps: eps, p: pp})


def _exact_fidelity(f: Formulas | None = None) -> Any:
    """The exact fidelity φ(G, p) (Corollary 2) as an mpmath function, from ``f`` (default: the formulas)."""
    fid = (f or Formulas()).fidelity(F.G, p)
    return sp.lambdify((F.G, p), fid, modules="mpmath")


def table_comparison() -> dict[str, Any]:
    """Predict the paper's exact group-size table with G* and with the second-order law.

    Predictions are the smallest integer G at which each law reaches 1 − ε, i.e. ⌈G*⌉ and the
    ceiling of :func:`group_size_second_order`.  Returns rows, exact-match counts and mean
    absolute errors for both.
    """
    g2 = sp.lambdify((F.eps, p), group_size_second_order(), modules="math")
    law = sp.lambdify((F.eps, p), F.group_size_law(), modules="math")
    rows = []
    cells = [
        (pv, e, exact) for pv, row in paper.GROUP_SIZE_TABLE.items() for e, (exact, _) in zip(paper.GROUP_SIZE_EPS, row)
    ]
    for pv, e, exact in cells:  # the paper's exact smallest G (closed_forms reproduces them; tests check that)
        first = math.ceil(law(e, pv) - 1e-12)
        second = math.ceil(g2(e, pv) - 1e-12)
        rows.append(
            {
                "p": pv,
                "eps": e,
                "G_exact": exact,
                "G_law": float(law(e, pv)),
                "G_first_order": first,
                "G_second_order_real": float(g2(e, pv)),
                "G_second_order": second,
            }
        )
    n = len(rows)
    m1 = sum(r["G_first_order"] == r["G_exact"] for r in rows)
    m2 = sum(r["G_second_order"] == r["G_exact"] for r in rows)
    a1 = sum(abs(r["G_first_order"] - r["G_exact"]) for r in rows) / n
    a2 = sum(abs(r["G_second_order"] - r["G_exact"]) for r in rows) / n
    return {
        "rows": rows,
        "exact_matches_first_order": m1,
        "exact_matches_second_order": m2,
        "mean_abs_error_first_order": a1,
        "mean_abs_error_second_order": a2,
        "second_order_better": bool(a2 < a1 and m2 >= m1),
    }


def _slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of log|y| against log x."""
    lx = [math.log(x) for x in xs]
    ly = [math.log(abs(y)) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


_t = sp.Symbol("t", nonnegative=True)  # t = σ(μ)/σ(p) ≥ 0
#: the constant of the lower bound √(1+z) ≥ T₃(z) − K z⁴ on z ≥ −1
K_LOWER = sp.Rational(5, 16)


def _taylor3(z: Any) -> Any:
    """T₃(z) = 1 + z/2 − z²/8 + z³/16, the cubic Taylor polynomial of √(1+z) at 0."""
    return 1 + z / 2 - z**2 / 8 + z**3 / 16


def remainder_bounds(f: Formulas | None = None) -> dict[str, Any]:
    """Rigorous bounds on the fidelity for every G ≥ 1 and 0 < p < 1, as polynomials in u = 1/G:
    E[T₃(z)] − K·E[z⁴] ≤ φ ≤ E[T₃(z)], z = σ(μ)²/(p(1−p)) − 1, and their differences from the
    first-order law, ``upper − law`` and ``lower − law`` (coefficients of u⁰ … in ``*_coeffs``)."""
    f = f or Formulas()
    v = p * (1 - p)
    z = f.sigma(_G * (p + _delta), _G) ** 2 / v - 1  # z as a polynomial in δ = μ − p
    c = central_moments(8, _G, p)
    mom = [sp.expand(sp.expand(c[r] * _u**r).subs(_G, 1 / _u)) for r in range(9)]  # E[δʳ] in u = 1/G
    upper = expectation_of_polynomial(sp.expand(sp.cancel(_taylor3(z) * v**3)), _delta, mom)  # × v³
    z4 = expectation_of_polynomial(sp.expand(sp.cancel(z**4 * v**4)), _delta, mom)  # × v⁴
    law = f.attenuation_first_order(1 / _u, p)
    up = sp.Poly(sp.expand(upper - law * v**3), _u)
    lo = sp.Poly(sp.expand((upper - law * v**3) * v - K_LOWER * z4), _u)
    return {
        "upper_coeffs": [sp.factor(up.coeff_monomial(_u**j) / v**3) for j in range(up.degree() + 1)],
        "lower_coeffs": [sp.factor(lo.coeff_monomial(_u**j) / v**4) for j in range(lo.degree() + 1)],
    }


def remainder_constant(bounds: dict[str, Any], pv: float, G_min: int = 1) -> float:
    """B with |φ(G,p) − (1 − 1/(8Gp(1−p)))| ≤ B/G² for every G ≥ ``G_min``, from
    :func:`remainder_bounds`: the larger over the two bounds of Σ_{j≥2} |cⱼ(p)|·G_min^(2−j)
    (for G ≥ G_min, G^(−j) ≤ G_min^(2−j)·G^(−2))."""
    return max(
        sum(abs(float(c.subs(p, pv))) * G_min ** (2 - j) for j, c in enumerate(bounds[key]) if j >= 2)
        for key in ("upper_coeffs", "lower_coeffs")
    )


def _t11_symbolic(f: Formulas) -> list[Claim]:
    c = fidelity_series(3)[:3]  # the same c0..c2 as fidelity_series(2): c2 needs moments up to 4 only
    law1 = c[0] + c[1] / _G
    law2 = law1 + c[2] / _G**2
    out = [
        Claim("leading term of the fidelity series is 1", c[0], 1),
        Claim("second-order delta method: phi = 1 - 1/(8Gp(1-p)) + O(1/G^2)", law1, f.attenuation_first_order(_G, p)),
        Claim(
            "next term: phi = 1 - 1/(8Gp(1-p)) - (7 - 16p(1-p))/(128G^2p^2(1-p)^2) + O(1/G^3)",
            law2,
            f.attenuation_second_order(_G, p),
        ),
    ]
    # the remainder, bounded for every G >= 1: with t = sigma(mu)/sigma(p) >= 0 and z = t^2 - 1,
    # T3(z) - t and t - T3(z) + K z^4 are (t-1)^4 times polynomials with nonnegative coefficients
    up_t = _taylor3(_t**2 - 1) - _t
    lo_t = _t - _taylor3(_t**2 - 1) + K_LOWER * (_t**2 - 1) ** 4
    out += [
        Claim("T3(t^2-1) - t = (t-1)^4 (t^2 + 4t + 5)/16", up_t, (_t - 1) ** 4 * (_t**2 + 4 * _t + 5) / 16),
        Claim(
            "(t-1)^4 (t^2 + 4t + 5)/16 >= 0, so sqrt(1+z) <= T3(z) for z >= -1",
            (_t - 1) ** 4 * (_t**2 + 4 * _t + 5) / 16,
            kind="nonneg",
        ),
        Claim(
            "t - T3(t^2-1) + (5/16)(t^2-1)^4 = t (t-1)^4 (5t^3 + 20t^2 + 29t + 16)/16",
            lo_t,
            _t * (_t - 1) ** 4 * (5 * _t**3 + 20 * _t**2 + 29 * _t + 16) / 16,
        ),
        Claim(
            "t (t-1)^4 (5t^3 + 20t^2 + 29t + 16)/16 >= 0, so sqrt(1+z) >= T3(z) - (5/16) z^4",
            _t * (_t - 1) ** 4 * (5 * _t**3 + 20 * _t**2 + 29 * _t + 16) / 16,
            kind="nonneg",
        ),
    ]
    b = remainder_bounds(f)
    for key, name in (("upper_coeffs", "upper"), ("lower_coeffs", "lower")):
        out.append(
            Claim(
                f"E[{name} bound] - (1 - 1/(8Gp(1-p))) has no G^0 and no G^-1 term: it is O(G^-2) for every G >= 1",
                sp.Matrix(b[key][:2]),
                sp.Matrix([0, 0]),
            )
        )
    # the cumulant route to the central moments against the explicit binomial sums at G = 7
    mom = central_moments(6)
    for r in range(2, 7):
        explicit = sum(binomial_pmf(kk, 7) * (kk - 7 * p) ** r for kk in range(8))
        out.append(Claim(f"central moment E[(k-Gp)^{r}] at G=7 equals the explicit sum", mom[r].subs(F.G, 7), explicit))
    return out


#: the working precision (decimal digits) at which the laws are compared with the exact fidelity
_DPS = 30
#: one row of that comparison: G, exact − first-order law, exact − second-order law, and the
#: second-order error × G³/c₃ (1 when the derived third-order term accounts for all of it)
ErrorRow = tuple[int, float, float, float]


def _error_rows(f: Formulas) -> dict[float, list[ErrorRow]]:
    """The errors of both laws against the exact fidelity, per solve rate of P_GRID and G of G_GRID."""
    law1 = sp.lambdify((_G, p), f.attenuation_first_order(_G, p), modules="mpmath")
    law2 = sp.lambdify((_G, p), f.attenuation_second_order(_G, p), modules="mpmath")
    third = sp.lambdify(p, fidelity_series(3)[3], modules="mpmath")
    exact = _exact_fidelity(f)
    out: dict[float, list[ErrorRow]] = {}
    with mpmath.workdps(_DPS):
        for pv in P_GRID:
            pm = mpmath.mpf(pv)
            rows = []
            for GG in G_GRID:
                phi = exact(GG, pm)
                second = phi - law2(GG, pm)
                rows.append((GG, float(phi - law1(GG, pm)), float(second), float(second * GG**3 / third(pm))))
            out[pv] = rows
    return out


def _convergence(pv: float, rows: list[ErrorRow]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The errors at one solve rate, and the floating-point evidence read off them (reported, never
    counted as proof): the slopes of log|error| against log G over G ≥ 256, the derived c₃/G³ at
    the largest G, and the second-order law beating the first from G = 16 on."""
    tail = [r for r in rows if r[0] >= 256]
    s1 = _slope([r[0] for r in tail], [r[1] for r in tail])
    s2 = _slope([r[0] for r in tail], [r[2] for r in tail])
    errors = {
        "G": [r[0] for r in rows],
        "error_first_order": [r[1] for r in rows],
        "error_second_order": [r[2] for r in rows],
        "slope_first_order": s1,
        "slope_second_order": s2,
        "error_second_order_times_G3_over_c3": [r[3] for r in rows],
    }
    ratio = rows[-1][3]
    better = all(abs(r[2]) < abs(r[1]) for r in rows if r[0] >= 16)
    evidence = [
        {"check": f"p={pv}: first-order error ~ G^-2 (slope {s1:.3f})", "holds": abs(s1 + 2) < 0.1, "value": s1},
        {"check": f"p={pv}: second-order error ~ G^-3 (slope {s2:.3f})", "holds": abs(s2 + 3) < 0.1, "value": s2},
        {
            "check": f"p={pv}: at G={G_GRID[-1]} the second-order error is the derived c3/G^3 (ratio {ratio:.4f})",
            "holds": abs(ratio - 1) < 0.05,
            "value": ratio,
        },
        {
            "check": f"p={pv}: second-order law closer to the exact fidelity than the first for every G >= 16",
            "holds": better,
            "value": better,
        },
    ]
    return errors, evidence


def _paper_fidelity_claims(f: Formulas) -> list[Claim]:
    """The paper's printed fidelities: an interval that contains the exact fidelity lies inside the
    printed rounding (± half a unit of the fourth decimal)."""
    claims = []
    for (GG, pv), printed in paper.FIDELITY.items():
        enclosure = certified_fidelity(f, GG, Fraction(str(pv)))
        lo, hi = Fraction(str(printed)) - Fraction(1, 20000), Fraction(str(printed)) + Fraction(1, 20000)
        inside = (enclosure - iv.mpf(lo.numerator) / lo.denominator > 0) is True and (
            enclosure - iv.mpf(hi.numerator) / hi.denominator < 0
        ) is True
        claims.append(
            Claim(
                f"paper's number fidelity({GG}, {pv}) = {printed}, certified",
                "interval",
                kind="certified",
                ok=inside,
                value=str(enclosure),
            )
        )
    return claims


def _paper_first_order_claims(f: Formulas) -> list[Claim]:
    """The paper's printed first-order laws: the exact rational law, rounded to the printed digits."""
    return [
        Claim(
            f"paper's number first-order law({GG}, {pv}) = {printed} (exact rational, rounded)",
            sp.Integer(round(100 * f.attenuation_first_order(GG, sp.nsimplify(pv)))),
            sp.Integer(round(100 * printed)),
        )
        for (GG, pv), printed in paper.ATTENUATION_FIRST_ORDER.items()
    ]


def _t11_numeric(f: Formulas) -> tuple[list[Claim], dict[str, Any]]:
    """T11's certified claims (the paper's printed numbers) and its details: the series, the errors
    of both laws against the exact fidelity with their evidence, the remainder constants, and the
    paper's group-size table predicted by both laws."""
    c3 = fidelity_series(3)
    bounds = remainder_bounds(f)
    errors: dict[str, Any] = {}
    evidence: list[dict[str, Any]] = []
    for pv, rows in _error_rows(f).items():
        errors[f"p={pv}"], checks = _convergence(pv, rows)
        evidence += checks
    claims = _paper_fidelity_claims(f) + _paper_first_order_claims(f)
    info = {
        "series_coefficients_in_v=p(1-p)": [str(sp.factor(_in_v(cc))) for cc in c3],
        "third_order_coefficient": str(c3[3]),
        "mpmath_dps": _DPS,
        "errors": errors,
        "evidence": evidence,
        "remainder_constant_B": {
            f"p={pv}, G>={g}": remainder_constant(bounds, pv, g) for pv in (0.5, 0.3, 0.1, 0.05) for g in (1, 8, 64)
        },
        "group_size_table": table_comparison(),
    }
    return claims, info


T11 = Theorem(
    "T11",
    "attenuation law, second and third order",
    "The delta method on f(μ) = √(μ(1−μ)) with the binomial central moments of μ = k/G gives "
    "φ(G,p) = 1 − 1/(8Gp(1−p)) + O(1/G²) (the paper's law) and, one order further, the 1/G² term "
    "−(7 − 16p(1−p))/(128G²p²(1−p)²).  The O(1/G²) remainder is bounded for every G ≥ 1 and every 0 < p < 1: "
    "with z = σ(μ)²/(p(1−p)) − 1, T₃(z) − (5/16)z⁴ ≤ √(1+z) ≤ T₃(z) (T₃ the cubic Taylor polynomial), so "
    "|φ − (1 − 1/(8Gp(1−p)))| ≤ B/G² for G ≥ G_min with B explicit in p (p = 0.5: B = 1.25 for G ≥ 8, 0.39 for "
    "G ≥ 64, against the true 1/G² coefficient 0.375; p = 0.1: 113 and 53, loose near the edges).  The paper's "
    "fidelities 0.9278 (G = 8, p = 0.5) and 0.5390 (p = 0.05) are certified by interval arithmetic.  That the errors "
    "shrink as G⁻² and G⁻³ at G = 8…2048 is numeric evidence, reported in the details, not counted as proof.",
    "Corollary 1 (and its next term, not in the paper)",
    "0 < p < 1, G >= 1 for the bound (G -> oo for the series); k ~ Binomial(G, p); intervals at 30 digits",
    _t11_symbolic,
    lambda f: sp.Eq(
        sp.Symbol(r"\varphi"), f.attenuation_second_order() + sp.Order(1 / F.G**3, (F.G, sp.oo)), evaluate=False
    ),
    extra=_t11_numeric,
    method="certified numeric",
)
