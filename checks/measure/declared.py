"""A declared update coefficient: ``--expect "c=sigma**2/G"``, or a callable c(k, G) in Python.

A target's c(k, G) = (k/G)·Â₊ (Theorem 1) is measured on the probes of
:mod:`grpo_identity.checks.measure.infer`; instead of a preset, its user may declare the c(k, G) it should
have, and the verdict (:mod:`grpo_identity.checks.verdict`) compares the two tables.

A formula is read by walking its Python syntax tree against an allow-list (:data:`SYMBOLS`,
:data:`FUNCTIONS`, numbers, ``+ - * / **``) and building the SymPy expression node by node, and
its values are that expression with k and G replaced by SymPy floats: nothing the user wrote is
evaluated or executed.  σ and μ are the paper's
(:func:`grpo_identity.formulas.sigma`, :func:`~grpo_identity.formulas.group_mean`), never retyped
here.  Both forms are evaluated once, at every probed G and 0 < k < G, when the options record is
built, so a formula that is not a finite positive number there is an error before the audit runs.
Standard library only at import (SymPy loads when a formula is read).

>>> d = declare("c=sigma**2/G")
>>> d.name, round(d.at(2, 4), 12)
('c=sigma**2/G', 0.0625)
>>> declare("c=__import__('os')")
Traceback (most recent call last):
...
grpo_identity.foundation.OptionError: expect must be ...; __import__ is not an allowed function (got ...)
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from typing import Any, Callable

from grpo_identity.foundation import OptionError

__all__ = ["SYMBOLS", "FUNCTIONS", "MAX_FORMULA_LENGTH", "Declared", "declare", "is_declared"]

#: the names a formula may use: the group's correct answers and size, its std and mean
SYMBOLS = ("k", "G", "sigma", "σ", "mu", "μ")
#: the functions a formula may call
FUNCTIONS = ("sqrt", "Abs", "abs", "Min", "min", "Max", "max", "log", "exp")
#: the longest formula read (a formula is a line, not a program)
MAX_FORMULA_LENGTH = 200
#: the most syntax-tree nodes of a formula
_MAX_NODES = 100
#: a number a formula computes from numbers alone (2**10 …) stays below this
_MAX_NUMBER = 1e100
#: the largest size of a numeric exponent (SymPy computes powers of numbers exactly: 2**-10**99 never ends)
_MAX_EXPONENT = 1000
#: the smallest c a declared coefficient may give (a ratio against a subnormal number means nothing)
_MIN_COEFFICIENT = 1e-300
#: each allowed function's number of arguments (lowest, highest)
_ARITY = {"sqrt": (1, 1), "Abs": (1, 1), "log": (1, 1), "exp": (1, 1), "Min": (2, _MAX_NODES), "Max": (2, _MAX_NODES)}
_ALLOWED = "c=FORMULA in k, G, sigma (σ), mu (μ), numbers, + - * / ** and sqrt, Abs, Min, Max, log, exp"


@dataclass(frozen=True)
class Declared:
    """The declared c(k, G): its name as written, its values at the probed G (k = 0…G, 0 at the
    silent ends, like :attr:`~grpo_identity.checks.report.AdvantageFit.coefficients`)."""

    name: str
    """``c=sigma**2/G`` as written, or ``c=my_coefficient(k, G)`` for a callable."""
    values: dict[int, tuple[float, ...]] = field(repr=False)
    function: Callable[[int, int], float] = field(repr=False, compare=False)

    def at(self, k: int, G: int) -> float:
        """c(k, G) for 0 < k < G."""
        if G in self.values:
            return self.values[G][k]
        return self.function(k, G)


def is_declared(expect: Any) -> bool:
    """Whether ``expect`` declares a coefficient (a ``c=…`` string, a callable, a :class:`Declared`)
    rather than naming a preset."""
    from_text = isinstance(expect, str) and "=" in expect
    return from_text or isinstance(expect, Declared) or (callable(expect) and not isinstance(expect, type))


def declare(expect: Any) -> Declared:
    """The :class:`Declared` of a ``c=FORMULA`` string or a callable c(k, G), evaluated at every
    probed G; a formula off the allow-list, or a value that is not finite and positive, raises
    :class:`~grpo_identity.foundation.OptionError` (field ``expect``)."""
    if isinstance(expect, Declared):
        return expect
    if isinstance(expect, str):
        name, function = _formula(expect)
    else:
        qualname = getattr(expect, "__qualname__", type(expect).__name__)
        name, function = f"c={qualname}(k, G)", _called(expect, qualname)
    from grpo_identity.checks.measure.infer import PROBE_GROUP_SIZES

    values = {G: (0.0, *(_value(name, function, k, G) for k in range(1, G)), 0.0) for G in PROBE_GROUP_SIZES}
    return Declared(name, values, function)


def _size(number: Any) -> float:
    """|number| of a SymPy number (infinite where it is none: zoo, nan)."""
    try:
        return abs(complex(number))
    except (TypeError, ValueError, OverflowError):
        return math.inf


def _value(name: str, function: Callable[[int, int], float], k: int, G: int) -> float:
    try:
        c = function(k, G)
    except OptionError:
        raise
    except Exception as exc:  # noqa: BLE001  (a user's callable: any error is the user's to read)
        why = f"must give c(k, G); {name} raised {type(exc).__name__}: {exc} at k={k}, G={G}"
        raise OptionError("expect", why) from None
    if not (isinstance(c, float) and math.isfinite(c) and c > _MIN_COEFFICIENT):
        raise OptionError(
            "expect",
            f"must give a finite c(k, G) > {_MIN_COEFFICIENT:g} for 0 < k < G; {name} gives {c!r} at k={k}, G={G}",
        )
    return c


def _called(fn: Callable[..., Any], qualname: str) -> Callable[[int, int], float]:
    def function(k: int, G: int) -> float:
        value = fn(k, G)
        try:
            return float(value)
        except (TypeError, ValueError):
            raise OptionError("expect", f"must give a number c(k, G); {qualname} returns {value!r}") from None

    return function


# --- the formula ---------------------------------------------------------------------------------
def _bad(text: str, why: str) -> OptionError:
    return OptionError("expect", f"must be a preset name or {_ALLOWED}; {why} (got {text!r})")


def _formula(text: str) -> tuple[str, Callable[[int, int], float]]:
    """The formula's name (``c=…`` as written) and its value at (k, G), read off the allow-list."""
    if len(text) > MAX_FORMULA_LENGTH:
        raise _bad(text[:40] + "…", f"a formula is at most {MAX_FORMULA_LENGTH} characters")
    lhs, _, rhs = text.partition("=")
    if lhs.replace(" ", "") not in ("c", "c(k,G)"):
        raise _bad(text, "the left side is c (or c(k, G))")
    try:
        tree = ast.parse(rhs.strip(), mode="eval")
    except SyntaxError:
        raise _bad(text, "the right side is no formula") from None
    if sum(1 for _ in ast.walk(tree)) > _MAX_NODES:
        raise _bad(text, f"a formula has at most {_MAX_NODES} parts")
    import sympy as sp

    from grpo_identity import formulas as F

    names = {"k": F.k, "G": F.G, "sigma": F.sigma(F.k, F.G), "mu": F.group_mean(F.k, F.G)}
    names |= {"σ": names["sigma"], "μ": names["mu"]}
    expr = _Builder(text, names).build(tree.body)

    def function(k: int, G: int) -> float:
        # floats, not integers: a power like G**4096 overflows to no number instead of being computed exactly
        value = expr.xreplace({F.k: sp.Float(k, 30), F.G: sp.Float(G, 30)}).evalf(20)
        try:
            z = complex(value)
        except (TypeError, ValueError):  # zoo, nan: no number
            return math.nan
        return z.real if z.imag == 0 and math.isfinite(z.real) else math.nan

    return f"c={rhs.strip()}", function


class _Builder:
    """A SymPy expression from an allow-listed syntax tree (see the module docstring)."""

    def __init__(self, text: str, names: dict[str, Any]) -> None:
        import sympy as sp

        self.sp, self.text, self.names = sp, text, names
        self.functions = {
            "sqrt": sp.sqrt,
            "Abs": sp.Abs,
            "abs": sp.Abs,
            "Min": sp.Min,
            "min": sp.Min,
            "Max": sp.Max,
            "max": sp.Max,
            "log": sp.log,
            "exp": sp.exp,
        }
        self.ops: dict[type, Callable[[Any, Any], Any]] = {
            ast.Add: lambda a, b: a + b,
            ast.Sub: lambda a, b: a - b,
            ast.Mult: lambda a, b: a * b,
            ast.Div: lambda a, b: a / b,
            ast.Pow: self.power,
        }

    def build(self, node: ast.AST) -> Any:
        sp = self.sp
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return sp.Integer(node.value) if isinstance(node.value, int) else sp.Float(node.value)
        if isinstance(node, ast.Name):
            if node.id not in self.names:
                raise _bad(self.text, f"{node.id} is not an allowed symbol")
            return self.names[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in self.ops:
            return self.ops[type(node.op)](self.build(node.left), self.build(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = self.build(node.operand)
            return -inner if isinstance(node.op, ast.USub) else inner
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return self.call(node.func.id, node)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitXor):
            raise _bad(self.text, "a power is written **")
        raise _bad(self.text, f"{ast.unparse(node)!r} is not allowed")

    def call(self, name: str, node: ast.Call) -> Any:
        """An allowed function of as many positional arguments as it takes (SymPy reads a second argument
        of ``sqrt`` or ``log`` as something else, so none is passed on that it would misread)."""
        if name not in self.functions:
            raise _bad(self.text, f"{name} is not an allowed function")
        if node.keywords:
            raise _bad(self.text, f"{name} takes no keyword arguments")
        low, high = _ARITY[name[0].upper() + name[1:] if name in ("abs", "min", "max") else name]
        if not low <= len(node.args) <= high:
            wanted = f"{low}" if low == high else f"at least {low}"
            raise _bad(self.text, f"{name} takes {wanted} argument{'s' if low > 1 else ''}, got {len(node.args)}")
        return self.functions[name](*(self.build(a) for a in node.args))

    def power(self, base: Any, exponent: Any) -> Any:
        """base ** exponent; a numeric exponent is at most :data:`_MAX_EXPONENT` in size and a power of
        numbers alone stays below :data:`_MAX_NUMBER` (SymPy computes a power of numbers exactly, when
        the expression is built)."""
        if exponent.is_number and not _size(exponent) <= _MAX_EXPONENT:
            raise _bad(self.text, f"a numeric exponent must be a number at most {_MAX_EXPONENT} in size")
        if base.is_number and exponent.is_number:
            try:
                big = abs(float(base)) ** float(exponent)
            except (OverflowError, TypeError, ValueError, ZeroDivisionError):
                big = math.inf
            if not big < _MAX_NUMBER:
                raise _bad(self.text, f"a power of numbers must stay below {_MAX_NUMBER:g}")
        return base**exponent
