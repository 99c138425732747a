"""Proof machinery: theorem records, claims, the zero test, symbolic score vectors.

A theorem is a list of :class:`Claim` objects built from :mod:`grpo_identity.formulas`.  A
claim is an equation ``lhs = rhs`` (proved when the residual ``lhs − rhs`` reduces to exactly
0), a sign statement ``expr ≥ 0`` / ``expr > 0`` (proved when SymPy's assumption system
decides it from the symbols' assumptions), or a numeric check (an explicit computation,
reported with its value).  Nothing is proved by sampling: an equation is proved only when the
residual is the zero expression.

**Scores in every dimension.**  The answers' scores sᵢ enter only through the sums over the
correct and the incorrect index sets, Σ_{i correct} sᵢ = k·s̄₊ and Σ_{i incorrect} sᵢ = m·s̄₋
(the definitions of the side means), so the update is g = (1/G)(Â₊·k·s̄₊ + Â₋·m·s̄₋).  s̄₊ and
s̄₋ are ``MatrixSymbol`` column vectors of symbolic length d.  A vector residual is reduced to
its j-th component for a symbolic index j: every component of a linear combination of vectors
is the same linear combination of their j-th components, with the same scalar coefficients.
The coefficients do not depend on j or d, so a residual that is 0 for a symbolic j is 0 in
every component of every dimension.

>>> import sympy as sp
>>> check_equal(sp.sqrt(4) * k, 2 * k).status
'proved'
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

import sympy as sp
from sympy.core.evalf import PrecisionExhausted
from sympy.core.function import AppliedUndef
from sympy.matrices.expressions.matexpr import MatrixElement

from grpo_identity import formulas as F

__all__ = [
    "ProofResult",
    "Claim",
    "Theorem",
    "Formulas",
    "check_equal",
    "check_claims",
    "reduce_to_zero",
    "combine_sums",
    "Method",
    "METHODS",
    "weakest",
    "k",
    "m",
    "n",
    "G_interior",
    "d",
    "j",
    "sbar_plus",
    "sbar_minus",
    "component",
    "binomial_pmf",
    "central_moments",
    "raw_moments",
]

Status = Literal["proved", "failed"]
#: how a theorem (or a claim) is established, strongest first: ``symbolic`` (a residual reduced
#: to exactly 0, or a sign decided from the symbols' assumptions), ``certified numeric`` (interval
#: arithmetic whose enclosure decides the statement), ``numeric evidence`` (floating-point
#: computations that agree, which prove nothing)
Method = Literal["symbolic", "certified numeric", "numeric evidence"]
METHODS: tuple[Method, ...] = ("symbolic", "certified numeric", "numeric evidence")
_KIND_METHOD: dict[str, Method] = {
    "eq": "symbolic",
    "nonneg": "symbolic",
    "pos": "symbolic",
    "certified": "certified numeric",
    "numeric": "numeric evidence",
}


def weakest(methods: Iterable[Method]) -> Method:
    """The weakest of some methods (``symbolic`` when there are none): a theorem is only as
    strong as its weakest claim."""
    return max(methods, key=METHODS.index, default="symbolic")


# --- symbols ----------------------------------------------------------------------------------
#: number correct, interior case: a positive integer
k = sp.Symbol("k", positive=True, integer=True)
#: number incorrect, interior case: a positive integer; 0 < k < G is encoded as G = k + m
m = sp.Symbol("m", positive=True, integer=True)
#: G − 1 for statements that need G ≥ 2 only (RLOO)
n = sp.Symbol("n", positive=True, integer=True)
#: the group size of an interior group
G_interior = k + m
#: score dimension and a component index, both symbolic
d = sp.Symbol("d", positive=True, integer=True)
j = sp.Symbol("j", nonnegative=True, integer=True)
#: mean score of the correct answers and of the incorrect answers, (d, 1) column vectors
sbar_plus = sp.MatrixSymbol(r"\bar{s}_{+}", d, 1)
sbar_minus = sp.MatrixSymbol(r"\bar{s}_{-}", d, 1)


def component(expr: Any) -> sp.Expr:
    """The j-th component (symbolic j) of a (d, 1) matrix expression; scalars unchanged."""
    if isinstance(expr, sp.MatrixExpr) and not isinstance(expr, sp.MatrixBase):
        return sp.expand(expr[j, 0])
    return sp.sympify(expr)


# --- results and claims -----------------------------------------------------------------------
@dataclass(frozen=True)
class ProofResult:
    """Outcome of one proof: ``proved`` only if every claim holds exactly."""

    name: str
    status: Status
    residual: sp.Expr | None
    """The first nonzero residual (``None`` when proved, or for a failed numeric or certified claim; for a failed
    sign claim the expression whose sign was not proved)."""
    seconds: float
    details: dict[str, Any] = field(default_factory=dict)
    method: Method = "symbolic"
    """The weakest method among the claims (see :data:`METHODS`)."""

    @property
    def proved(self) -> bool:
        return self.status == "proved"


@dataclass(frozen=True)
class Claim:
    """One statement inside a proof.

    ``kind='eq'``: lhs = rhs.  ``kind='nonneg'`` / ``'pos'``: lhs ≥ 0 / lhs > 0 (rhs unused).
    ``kind='certified'``: an interval-arithmetic computation; ``ok`` says whether its enclosure
    decides the statement.  ``kind='numeric'``: a floating-point computation, evidence only;
    ``ok`` says whether it agreed.  ``value`` is reported for both.
    """

    label: str
    lhs: Any
    rhs: Any = 0
    kind: Literal["eq", "nonneg", "pos", "certified", "numeric"] = "eq"
    ok: bool = True
    value: Any = None

    @property
    def method(self) -> Method:
        """How this claim is established (``symbolic``, ``certified numeric``, ``numeric evidence``)."""
        return _KIND_METHOD[self.kind]


def reduce_to_zero(expr: Any, *, residual: bool = True) -> sp.Expr:
    """Try targeted rewrites until ``expr`` is 0; return the last (simplest) form found.

    Cheap steps first (expand, together, radsimp, powsimp), ``simplify`` only as a last resort
    on small expressions.  A nonzero return does not by itself prove inequality; the theorems
    are set up so that their residuals are rational functions of the symbols (with radicals of
    positive symbols), where these rewrites are complete.

    ``residual``: ``expr`` is an equality claim's residual, so where it evaluates to a nonzero number
    at one of the probe points (:func:`_clearly_nonzero`, piecewise residuals included) the claim has
    failed and the rewrites are skipped.  An expression reduced for its sign (``residual=False``, where
    nonzero is the normal case) skips them only where its first probe point is nonzero and it has no
    piecewise part.
    """
    if isinstance(expr, sp.MatrixBase):  # an explicit matrix: every entry must vanish
        entries = [reduce_to_zero(x, residual=residual) for x in expr]
        return sp.Integer(0) if all(x == 0 for x in entries) else sp.Matrix(expr.shape[0], expr.shape[1], entries)
    e = component(expr)
    if e == 0:
        return sp.Integer(0)
    if e.has(sp.Sum):
        return _reduce_with_sums(e, residual)
    nonzero = _clearly_nonzero(e) if residual else _clearly_nonzero(e, points=1, piecewise=False)
    if nonzero:  # a failed claim, or a sign to read: skip the expensive rewrites
        return e
    steps: list[Callable[[sp.Expr], sp.Expr]] = [
        sp.expand,
        lambda x: sp.expand(sp.powsimp(sp.expand_power_base(x, force=False))),
        lambda x: sp.cancel(sp.together(x)),
        lambda x: sp.expand(sp.radsimp(sp.together(x))),
        lambda x: sp.factor(sp.expand(x)),
    ]
    if e.has(sp.binomial, sp.factorial, sp.gamma):  # ratios of binomials: gamma-function identities
        steps.insert(0, lambda x: sp.expand(sp.gammasimp(x)))
    best = e
    for step in steps:
        try:
            e2 = step(best)
        except (TypeError, NotImplementedError, ValueError, sp.PolynomialError):  # pragma: no cover
            continue
        if e2 == 0:
            return sp.Integer(0)
        if sp.count_ops(e2) <= sp.count_ops(best):
            best = e2
    if sp.count_ops(best) < 400:
        e2 = sp.simplify(best)
        if e2 == 0:
            return sp.Integer(0)
        best = e2 if sp.count_ops(e2) < sp.count_ops(best) else best
    return best


# --- sums: one sum per family of ranges, boundary terms peeled off --------------------------
_i = sp.Dummy("i", integer=True)


def _as_coefficient_times_sum(term: sp.Expr) -> tuple[sp.Expr, sp.Sum] | None:
    """``c·Sum(f, (i, a, b))`` with c free of sums, or None."""
    sums = [a for a in sp.Mul.make_args(term) if isinstance(a, sp.Sum)]
    if len(sums) != 1 or len(sums[0].limits) != 1:
        return None
    coef = sp.Mul(*[a for a in sp.Mul.make_args(term) if a is not sums[0]])
    return (coef, sums[0]) if not coef.has(sp.Sum) else None


def _integer_offset(a: sp.Expr, b: sp.Expr) -> int | None:
    """a − b when it is an integer constant, else None."""
    d = sp.expand(a - b)
    return int(d) if d.is_Integer else None


def combine_sums(expr: sp.Expr, shift: bool = False) -> list[tuple[sp.Expr, tuple[sp.Expr, sp.Expr]]] | None:
    """Write an Add of single-index Sums (times sum-free coefficients) plus sum-free terms as
    ``[(summand, (lo, hi)), …]`` and a remainder: Sums whose limits differ by integer constants
    are merged into one Sum over their common range, the terms outside it peeled off into the
    remainder (returned as the entry with range ``None``).  With ``shift``, each Sum's index is
    first shifted so that the lower limits agree.  None when a term is not of that form.

    >>> i = sp.Symbol("i", integer=True)
    >>> parts = combine_sums(sp.Sum(i, (i, 0, F.G)) - sp.Sum(i, (i, 1, F.G - 1)))
    >>> [(sp.simplify(s), r) for s, r in parts]
    [(0, (1, G - 1)), (G, None)]
    """
    families: list[list[tuple[sp.Expr, sp.Expr, sp.Expr, sp.Expr]]] = []  # (coef, summand in _i, lo, hi)
    rest = sp.Integer(0)
    for term in sp.Add.make_args(expr):
        if not term.has(sp.Sum):
            rest += term
            continue
        split = _as_coefficient_times_sum(term)
        if split is None:
            return None
        coef, s = split
        var, lo, hi = s.limits[0]
        f = s.function.subs(var, _i)
        if shift:
            f, lo, hi = f.subs(_i, _i + lo), sp.Integer(0), hi - lo
        for fam in families:
            if _integer_offset(lo, fam[0][2]) is not None and _integer_offset(hi, fam[0][3]) is not None:
                fam.append((coef, f, lo, hi))
                break
        else:
            families.append([(coef, f, lo, hi)])
    out: list[tuple[sp.Expr, Any]] = []
    for fam in families:
        lo0, hi0 = fam[0][2], fam[0][3]
        L = max((t[2] for t in fam), key=lambda x: int(sp.expand(x - lo0)))  # offsets are integers within a family
        H = min((t[3] for t in fam), key=lambda x: int(sp.expand(x - hi0)))
        summand = sp.Integer(0)
        for coef, f, lo, hi in fam:
            summand += coef * f
            outside = [lo + r for r in range(_integer_offset(L, lo) or 0)] + [
                H + 1 + r for r in range(_integer_offset(hi, H) or 0)
            ]
            rest += sum((coef * f.subs(_i, x) for x in outside), sp.Integer(0))
        out.append((summand, (L, H)))
    out.append((rest, None))
    return out


def _reduce_with_sums(e: sp.Expr, residual: bool = True) -> sp.Expr:
    """Zero test for residuals with Sums: merge Sums over equal, extended or (failing that)
    shifted ranges, reduce each merged summand and the boundary terms to 0."""
    best: sp.Expr = e
    for shift in (False, True):
        parts = combine_sums(sp.expand(e), shift=shift)
        if parts is None:
            return e
        reduced = [(reduce_to_zero(s, residual=residual), r) for s, r in parts]
        if all(s == 0 for s, _ in reduced):
            return sp.Integer(0)
        if not shift:  # report the unshifted form: its index means what the statement's does
            best = sp.Add(*[s if r is None else sp.Sum(s, (_i, *r)) for s, r in reduced if s != 0])
    return best


_PROBE_INTEGERS = (2, 3, 5, 7, 11, 13, 17, 19)
_PROBE_REALS = (
    sp.Rational(3, 10),
    sp.Rational(7, 13),
    sp.Rational(5, 17),
    sp.Rational(11, 23),
    sp.Rational(2, 29),
    sp.Rational(13, 31),
)


def _clearly_nonzero(e: sp.Expr, points: int | None = None, piecewise: bool = True) -> bool:
    """True when ``e`` evaluates, at one of ``points`` probe points (all of them by default), to a
    number of magnitude > 1e-12 with 30 significant digits (evalf's strict mode: a cancellation that
    leaves no digits is not a number): then ``e`` is not the zero function.

    The probe values are positive (integers for integer symbols): every symbol of the theorems is
    positive, nonnegative, real, integer or unconstrained, so each point is one its assumptions
    allow.  A theorem with a symbol assumed negative would need other values.  Used to stop
    :func:`reduce_to_zero` early; no claim is proved by it.  A piecewise residual is evaluated too
    (its conditions decided at the point), at several points because a wrong piecewise claim can
    vanish on some branches.
    """
    skipped = (MatrixElement, sp.Derivative, sp.Sum, sp.Subs, AppliedUndef) + (() if piecewise else (sp.Piecewise,))
    if e.atoms(*skipped):
        return False
    symbols = sorted(e.free_symbols, key=lambda s: s.name)
    return any(_nonzero_at(e, symbols, shift) for shift in range(points or _PROBE_POINTS))


#: how many points :func:`_clearly_nonzero` tries: the probe values rotated, in (0, 1), beyond 1 and near 0
_PROBE_POINTS = 4


def _nonzero_at(e: sp.Expr, symbols: list[sp.Symbol], shift: int) -> bool:
    reals = _PROBE_REALS[shift:] + _PROBE_REALS[:shift]
    if shift % 2:  # beyond 1
        reals = tuple(1 / r for r in reals)
    elif shift:  # near 0
        reals = tuple(r / 47 for r in reals)
    ints, real_values = iter(_PROBE_INTEGERS[shift:] + _PROBE_INTEGERS[:shift]), iter(reals)
    try:
        point = {x: next(ints) if x.is_integer else next(real_values) for x in symbols}
    except StopIteration:
        return False
    try:
        v = e.subs(point).evalf(30, strict=True)
    except (TypeError, ValueError, ZeroDivisionError, PrecisionExhausted):  # no digits left: not a number
        return False
    return bool(v.is_number and v.is_finite and abs(v) > sp.Float("1e-12"))


def _check_one(c: Claim) -> tuple[bool, sp.Expr | None, str]:
    if c.kind == "eq":
        diff = c.lhs - c.rhs if (_is_mat(c.lhs) or _is_mat(c.rhs)) else sp.sympify(c.lhs) - sp.sympify(c.rhs)
        r = reduce_to_zero(diff)
        zero = not isinstance(r, sp.MatrixBase) and r == 0
        return zero, (None if zero else r), "0" if zero else str(r)
    if c.kind in ("nonneg", "pos"):
        e = sp.factor(reduce_to_zero(c.lhs, residual=False)) if c.kind == "nonneg" else sp.factor(sp.sympify(c.lhs))
        truth = e.is_nonnegative if c.kind == "nonneg" else e.is_positive
        return truth is True, (None if truth else e), f"{'>= 0' if c.kind == 'nonneg' else '> 0'}: {truth}"
    if c.kind in ("numeric", "certified"):
        return bool(c.ok), None, str(c.value)
    raise ValueError(f"unknown claim kind {c.kind!r}")


def _is_mat(x: Any) -> bool:
    return isinstance(x, sp.MatrixExpr) or getattr(x, "is_Matrix", False)


def check_claims(
    name: str, claims: Sequence[Claim], details: Mapping[str, Any] | None = None, *, first_failure: bool = False
) -> ProofResult:
    """Check every claim; proved iff all hold.  ``details['claims']`` lists each outcome, in the claims' order.

    ``first_failure``: stop at the first claim that fails, the numeric and certified claims (computed already)
    looked at first: for a statement perturbed to fail, where it matters that it fails, not where.  The status
    and method are the same either way, and so is a proved result's every detail; a failed one lists only the
    claims checked, and its residual is that of the claim it stopped at (``None`` for a numeric or certified
    one)."""
    t0 = time.perf_counter()
    outcomes: dict[int, dict[str, Any]] = {}
    residual: sp.Expr | None = None
    ok_all = True
    order = list(range(len(claims)))
    if first_failure:  # the computed claims first (a stable sort: each kind in its own order)
        order.sort(key=lambda i: claims[i].kind not in ("numeric", "certified"))
    for i in order:
        c = claims[i]
        ok, r, text = _check_one(c)
        outcomes[i] = {"claim": c.label, "kind": c.kind, "method": c.method, "holds": ok, "result": text}
        if not ok:
            ok_all = False
            if residual is None and r is not None:
                residual = r
            if first_failure:
                break
    info = dict(details or {})
    info["claims"] = [outcomes[i] for i in sorted(outcomes)]
    method = weakest(c.method for c in claims)
    return ProofResult(name, "proved" if ok_all else "failed", residual, time.perf_counter() - t0, info, method)


def check_equal(lhs: Any, rhs: Any, assumptions: str = "", *, name: str = "check") -> ProofResult:
    """Prove ``lhs = rhs`` exactly: the residual ``lhs − rhs`` must reduce to 0.

    Matrix (score-vector) sides are compared componentwise for a symbolic component index.
    ``assumptions`` is recorded in the details; the symbols themselves carry them.

    >>> check_equal(F.sigma(k, k + m)**2, k * m / (k + m)**2).status
    'proved'
    >>> check_equal(F.sigma(k, k + m), 2 * F.sigma(k, k + m)).status
    'failed'
    """
    return check_claims(name, [Claim(f"{name}: lhs = rhs", lhs, rhs)], {"assumptions": assumptions})


# --- formula overrides, for statements that must be able to fail ---------------------------
class Formulas:
    """:mod:`grpo_identity.formulas` with some functions replaced (to perturb a statement).

    Every formula a proof takes from it is recorded in :attr:`read`, so that a perturbation of
    a formula the proof never reads is reported instead of silently ignored.  Besides the public
    formulas, the two pieces of the dial's coefficient (``_centred_correct``, ``_scale``) can be
    read and replaced.

    >>> f = Formulas({"sigma": lambda k, G: 2 * F.sigma(k, G)})
    >>> f.sigma(1, 2), f.group_mean(1, 2)
    (1, 1/2)
    >>> sorted(f.read)
    ['group_mean', 'sigma']
    """

    PRIVATE = ("_centred_correct", "_scale")

    def __init__(self, overrides: Mapping[str, Callable[..., Any]] | None = None) -> None:
        self._overrides = dict(overrides or {})
        self.read: set[str] = set()
        unknown = [name for name in self._overrides if name not in F.__all__ and name not in self.PRIVATE]
        if unknown:
            raise ValueError(f"unknown formula {unknown[0]!r} in perturb; known: {', '.join(F.__all__)}")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") and name not in self.PRIVATE:
            raise AttributeError(name)
        value = self._overrides.get(name, getattr(F, name))
        self.read.add(name)
        return value


# --- theorems ---------------------------------------------------------------------------------
ClaimBuilder = Callable[[Formulas], Sequence[Claim]]


@dataclass(frozen=True)
class Theorem:
    """One theorem: statement in words, paper reference, assumptions and a proof.

    ``build(f)`` returns the claims with formulas taken from ``f``; ``equation(f)`` the main
    equation (an unevaluated ``Eq``, or a tuple of them) for display.  ``extra(f)`` may return claims and details
    that need numbers (mpmath sums, tables).
    """

    name: str
    title: str
    statement: str
    paper_ref: str
    assumptions: str
    build: ClaimBuilder = field(repr=False)
    equation: Callable[[Formulas], sp.Basic | tuple[sp.Basic, ...]] = field(repr=False)
    extra: Callable[[Formulas], tuple[Sequence[Claim], dict[str, Any]]] | None = field(default=None, repr=False)
    method: Method = "symbolic"
    """How the theorem is established: the weakest method among its claims (a test checks the
    declared method against the claims)."""

    @cached_property
    def latex(self) -> str:
        """LaTeX of the main equation, printed by ``sympy.latex`` from the formulas."""
        eq = self.equation(Formulas())
        if isinstance(eq, tuple):  # several displayed equations
            return r",\quad ".join(sp.latex(e) for e in eq)
        return sp.latex(eq)

    def prove(
        self, perturb: Mapping[str, Callable[..., Any]] | None = None, *, first_failure: bool = False
    ) -> ProofResult:
        """Check every claim (with ``first_failure``, up to the first that fails: :func:`check_claims`).
        ``perturb`` maps formula names to replacements (to test failure); naming a formula this theorem does
        not read is an error.

        >>> from grpo_identity.proofs import by_name
        >>> by_name("T9").prove().status
        'proved'
        >>> by_name("T9").prove(perturb={"expected_sigma_sq": lambda G, p: p * (1 - p)}).status
        'failed'
        """
        t0 = time.perf_counter()
        f = Formulas(perturb)
        claims, details = self._claims(f)
        unread = sorted(set(perturb or {}) - f.read)
        if unread:
            raise ValueError(
                f"{self.name} does not read {unread[0]!r}, so perturbing it tests nothing; "
                f"{self.name} reads: {', '.join(sorted(f.read))}"
            )
        r = check_claims(self.name, claims, details, first_failure=first_failure)
        return ProofResult(self.name, r.status, r.residual, time.perf_counter() - t0, r.details, r.method)

    def _claims(self, f: Formulas) -> tuple[list[Claim], dict[str, Any]]:
        claims = list(self.build(f))
        details: dict[str, Any] = {"assumptions": self.assumptions}
        if self.extra is not None:
            more, info = self.extra(f)
            claims += list(more)
            details.update(info)
        return claims, details

    def reads(self) -> set[str]:
        """The formulas this theorem's claims are built from (the names ``prove(perturb=...)`` accepts)."""
        f = Formulas()
        self._claims(f)
        return set(f.read)

    def render_markdown(self) -> str:
        """A markdown cell: name, title, statement, the equation, reference and assumptions."""
        return (
            f"**{self.name}. {self.title}** ({self.paper_ref}; method: {self.method})\n\n{self.statement}\n\n"
            f"$$\n{self.latex}\n$$\n\n*Assumptions:* {self.assumptions}\n"
        )


# --- binomial moments, symbolic in G ------------------------------------------------------------
def binomial_pmf(kk: Any, GG: Any, pp: Any = F.p) -> sp.Expr:
    """P(k correct) for k ~ Binomial(G, p): C(G,k) p^k (1−p)^{G−k} (the model of PAPER §Setting)."""
    return sp.binomial(GG, kk) * pp**kk * (1 - pp) ** (GG - kk)


_t = sp.Symbol("t")


def central_moments(order: int, GG: Any = F.G, pp: Any = F.p) -> list[sp.Expr]:
    """E[(k − Gp)^r] for r = 0..order, k ~ Binomial(G, p), as polynomials in G and p.

    The cumulant generating function of k is G·log(1 − p + p·eᵗ): every cumulant is G times
    the Bernoulli cumulant.  The central moment generating function is exp(Σ_{r≥2} κ_r tʳ/r!);
    its Taylor coefficients are the central moments, for symbolic G.
    """
    gens = (_t, GG, pp) if isinstance(GG, sp.Symbol) else (_t, pp)

    def trunc(poly: sp.Poly) -> sp.Poly:  # drop the powers of t above ``order``
        return sp.Poly.from_dict({mon: c for mon, c in poly.terms() if mon[0] <= order} or {(0,) * len(gens): 0}, *gens)

    one = sp.Poly(1, *gens)
    # log(1 + y) = Σ (−1)^(n+1) yⁿ/n with y = p(eᵗ − 1) = O(t), as truncated polynomials in t
    y = sp.Poly(pp * sum((_t**i / sp.factorial(i) for i in range(1, order + 1)), sp.Integer(0)), *gens)
    K, yn = sp.Poly(0, *gens), one
    for nn in range(1, order + 1):
        yn = trunc(yn * y)
        K += yn * sp.Rational((-1) ** (nn + 1), nn)
    # central cumulants: drop t¹ (the mean), multiply by G (k is a sum of G Bernoulli draws)
    x = sp.Poly.from_dict({mon: c for mon, c in K.terms() if mon[0] >= 2} or {(0,) * len(gens): 0}, *gens) * sp.Poly(
        GG, *gens
    )
    # exp(x) = Σ xⁿ/n!, x = O(t²): n ≤ order/2 suffices
    M, xn = one, one
    for nn in range(1, order // 2 + 1):
        xn = trunc(xn * x)
        M += xn * sp.Rational(1, math.factorial(nn))
    Me = M.as_expr()
    return [sp.expand(Me.coeff(_t, r) * sp.factorial(r)) for r in range(order + 1)]


def raw_moments(order: int, GG: Any = F.G, pp: Any = F.p) -> list[sp.Expr]:
    """E[k^r] for r = 0..order from the moment generating function (1 − p + p·eᵗ)^G."""
    M = (1 - pp + pp * sp.exp(_t)) ** GG
    return [sp.expand(sp.diff(M, _t, r).subs(_t, 0)) for r in range(order + 1)]


def expectation_of_polynomial(expr: sp.Expr, var: sp.Symbol, moments: Sequence[sp.Expr]) -> sp.Expr:
    """E[expr] for expr a polynomial in ``var``, given E[var^r] = moments[r] (linearity)."""
    poly = sp.Poly(sp.expand(expr), var)
    return sp.expand(sum((coef * moments[deg[0]] for deg, coef in poly.terms()), sp.Integer(0)))
