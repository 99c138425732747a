"""The audited target: an advantage (or filter) function called ``fn(rewards, group_size)``.

A target is named by a spec — ``path/to/file.py:function``, ``package.module:function`` or a
built-in adapter name (:data:`grpo_identity.checks.calls.adapters.ADAPTERS`) — or given as a callable.
This module loads it (:func:`load_target`, which checks the spec first: :func:`check_spec`) and
calls it.  Every layer of the audit calls a :class:`Target`: ``target.call(rewards, G, *extra)`` returns one
typed :class:`Output` (the output as numpy: a 1-D array, float for advantages, bool for filters, or a dict of
arrays at the gradient level; what was wrong with the call besides its values, :func:`output_issue`; whether it
overwrote the previous call's output), and ``target(rewards, G, *extra)`` its value alone.  Two transports
carry the call: this process (:class:`LocalTarget`) and a child interpreter
(:class:`grpo_identity.checks.calls.child.ChildTarget`), where a crash or a hang in someone else's code becomes a
clear finding, never a hung audit; both make every check of :func:`call_once` where the target runs.  A
:class:`View` is a target seen through another (rounded rewards, a gradient target's advantages, a row filter's
whole groups, the search's memo and finite guard): it answers ``call`` itself and reads every other attribute from
the target under it.

>>> t = LocalTarget(lambda r, G: r - r.reshape(-1, G).mean(1).repeat(G))
>>> t(__import__("numpy").array([1., 0.]), 2).tolist()
[0.5, -0.5]
>>> t.call(__import__("numpy").array([1., 0.]), 2).issue is None
True
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import os
import stat
import sys
import traceback
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from grpo_identity.checks.calls.calling import to_numpy
from grpo_identity.dial import is_torch

__all__ = [
    "TargetError",
    "TargetCrashed",
    "TargetTimeout",
    "TargetMalformed",
    "TargetImportError",
    "Output",
    "Target",
    "View",
    "as_target",
    "output_of",
    "load_target",
    "called_as_written",
    "call_once",
    "settle",
    "round_rewards",
    "RoundedRewards",
    "check_spec",
    "target_folder",
    "LocalTarget",
    "OutputWatch",
    "last_line",
    "resolve_reference",
    "output_issue",
    "malformed",
    "not_a_gradient",
    "gradient_arrays",
    "declared_info",
    "reference",
    "FILE_MODULE_PREFIX",
]

#: the start of the private name a target file is imported under (see :func:`_load_file`)
FILE_MODULE_PREFIX = "_grpo_identity_target_"


class TargetError(Exception):
    """The target raised an exception on some input (message: its last traceback line)."""


class TargetCrashed(TargetError):
    """The target's process died (segfault, ``os._exit``, out of memory …)."""


class TargetTimeout(TargetError):
    """One call into the target ran past the timeout."""


class TargetMalformed(TargetError):
    """The target returned something that is not an array of numbers (``None``, objects, strings)."""


class TargetImportError(Exception):
    """The target could not be loaded: a bad spec, a missing file, module, function or package,
    a module that fails, hangs or exits while it is imported.  A usage error (exit code 2)."""


def load_target(spec: Any, kind: str = "advantage") -> Callable[..., Any]:
    """The callable named by ``spec`` (file path or module, then ``:function``; or an adapter name)."""
    from grpo_identity.checks.calls import adapters

    if not isinstance(spec, str) or adapters.is_adapter(spec):
        try:
            return adapters.build(spec, kind)
        except ImportError as exc:
            message = f"adapter {adapters.describe(spec)!r} needs a package that is not installed: {exc}"
            raise TargetImportError(message) from None
    check_spec(spec)
    where, _, name = spec.rpartition(":")
    try:
        module = _load_file(where) if _is_path(where) else importlib.import_module(where)
    except TargetImportError:
        raise
    except ModuleNotFoundError as exc:
        hint = f" (and no file {where} here)" if exc.name == where.split(".")[0] and "." in where else ""
        raise TargetImportError(f"importing {where} failed: ModuleNotFoundError: {exc}{hint}") from None
    except SystemExit as exc:
        raise TargetImportError(f"importing {where} called sys.exit({exc.code!r})") from None
    except BaseException as exc:  # an import error, or anything the target's module raises at import
        raise TargetImportError(f"importing {where} failed: {type(exc).__name__}: {exc}".splitlines()[0]) from None
    return _attribute(module, where, name)


def _attribute(module: Any, where: str, name: str) -> Callable[..., Any]:
    """``module``'s callable ``name``, or its path of attributes (``Estimators.grpo``: a class's static or class
    method, an object's method); :class:`TargetImportError` naming what is missing or not callable."""
    owner, parts = module, name.split(".")
    for i, part in enumerate(parts):
        held = ".".join(parts[:i])
        if not part or not hasattr(owner, part):
            whose = f"{where}: {held}" if held else where
            raise TargetImportError(f"{whose} has no function {part or name!r}{_did_you_mean(owner, part)}")
        if isinstance(owner, type) and _takes_self(inspect.getattr_static(owner, part)):
            raise TargetImportError(
                f"{where}: {'.'.join(parts[: i + 1])} is a method of {held}'s instances: give FILE.py:OBJECT.{part} "
                f"where the file makes OBJECT = {held}(…), or make {part} a staticmethod"
            )
        owner = getattr(owner, part)
    if isinstance(owner, type):
        methods = [k for k, v in sorted(vars(owner).items()) if isinstance(v, (staticmethod, classmethod))]
        named = f" (its static and class methods: {', '.join(methods)})" if methods else ""
        raise TargetImportError(f"{where}: {name!r} is a class: name one of its functions, {name}.FUNCTION{named}")
    if not callable(owner):
        typename = type(owner).__name__
        raise TargetImportError(f"{where}: {name!r} is not a function (type {typename}){_did_you_mean(module, name)}")
    return owner


def _takes_self(attribute: Any) -> bool:
    """A plain function of a class whose first parameter is ``self``: called on the class, it lacks one."""
    if not inspect.isfunction(attribute):
        return False
    params = list(inspect.signature(attribute).parameters)
    return bool(params) and params[0] == "self"


def _did_you_mean(module: Any, name: str) -> str:
    """'; did you mean 'advantage'?' for a near miss, else the module's public functions."""
    if isinstance(module, types.ModuleType):
        names = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_"))
    else:  # a class or an object: what it inherits too
        names = sorted(k for k in dir(module) if not k.startswith("_") and callable(getattr(module, k, None)))
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f" (it has {', '.join(names[:8])}{', …' if len(names) > 8 else ''})" if names else ""


def _is_path(where: str) -> bool:
    """A file path (``dir/x.py``, ``x.py``, or an existing file such as ``notes.txt``), not a module name."""
    if where.endswith(".py") or os.sep in where or "/" in where:
        return True
    return os.path.lexists(where) and not os.path.isdir(where)


def check_spec(spec: str) -> None:
    """Reject a malformed spec, or a file that is missing, not a regular file or not Python, at
    once (before any child process starts; a FIFO or a device is never opened)."""
    from grpo_identity.checks.calls import adapters

    if not isinstance(spec, str) or adapters.is_adapter(spec):
        return
    where, colon, name = spec.rpartition(":")
    if not colon or not where or not name:
        forms = ", ".join(adapters.names())
        raise TargetImportError(
            f"target {spec!r} is neither FILE.py:FUNCTION, MODULE:FUNCTION nor an adapter ({forms})"
        )
    if not _is_path(where):
        return
    try:
        mode = os.stat(where).st_mode
    except OSError:
        raise TargetImportError(f"no such file: {where}") from None
    if stat.S_ISDIR(mode):
        raise TargetImportError(f"{where} is a folder: give FILE.py:FUNCTION")
    if not stat.S_ISREG(mode):
        raise TargetImportError(f"{where} is not a regular file (a FIFO, a device …): give FILE.py:FUNCTION")
    if not where.endswith(".py"):
        raise TargetImportError(f"{where} is not a Python file (.py): give FILE.py:FUNCTION")


def target_folder(spec: Any) -> str | None:
    """The folder the target lives in, first on the child's ``sys.path``: a ``FILE.py:FUNCTION`` spec's folder (as
    ``python FILE.py`` would put it), or the current folder for a ``MODULE:FUNCTION`` whose top-level module is a file
    or package there; else ``None`` (the caller's folder is then not on the child's path at all)."""
    if not isinstance(spec, str):
        return None
    where, colon, _ = spec.rpartition(":")
    if not colon or not where:
        return None
    if _is_path(where):
        return os.path.dirname(os.path.abspath(where))
    top = where.split(".")[0]
    here = os.path.isfile(f"{top}.py") or os.path.isfile(os.path.join(top, "__init__.py"))
    return os.getcwd() if here else None


def malformed(out: Any, kind: str = "advantage") -> str | None:
    """Why ``out`` is no array of numbers (advantages) or flags (filter), or ``None`` when it is one.

    >>> malformed(None)
    'returned None, not an array of advantages'
    """
    what = "advantages" if kind == "advantage" else "keep flags"
    if out is None:
        return f"returned None, not an array of {what}"
    try:
        arr = to_numpy(out)
    except Exception as exc:
        return f"returned a {type(out).__name__} that cannot be read as an array of {what}: {last_line(exc)}"
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        first = next(iter(arr.reshape(-1)), None) if arr.size else None
        inner = f" (elements of type {type(first).__name__})" if first is not None else ""
        return f"returned an array of {arr.dtype}{inner}, not an array of {what}"
    return None


def output_issue(rewards: np.ndarray, passed: np.ndarray, out: Any, kind: str = "advantage") -> str | None:
    """What is wrong with one call besides the values, or ``None``: the input modified in place, or
    a list instead of an array.  A float dtype other than the rewards' is no issue: the target is
    judged at the precision it computes in (``AdvantageFit.precision``).

    ``rewards``: the caller's array; ``passed``: the copy the target received; ``out``: its raw output.
    """
    if passed.shape != rewards.shape or not np.array_equal(passed, rewards, equal_nan=True):
        return "modified its input rewards in place (the caller's rewards are overwritten)"
    if kind != "advantage":
        return None
    mod = type(out).__module__.split(".")[0]
    if mod == "torch":
        dtype = str(out.dtype).replace("torch.", "")
    elif isinstance(out, np.ndarray):
        dtype = str(out.dtype)
    else:
        kept = "the dtype and shape of the rewards are not kept"
        return f"returned a {type(out).__name__}, not an array (numpy or torch): {kept}"
    if "float" not in dtype:
        return f"returned {mod}.{dtype} advantages: advantages are floating point"
    return None


class OutputWatch:
    """Remembers the previous output and its values: a target that returns one shared buffer
    overwrites what it returned before (the caller's advantages change under it)."""

    def __init__(self) -> None:
        self._prev: tuple[Any, np.ndarray] | None = None

    def check(self, out: Any) -> str | None:
        issue = None
        if self._prev is not None:
            raw, snap = self._prev
            now = to_numpy(raw)
            if now.shape != snap.shape or not np.array_equal(now, snap, equal_nan=True):
                issue = "overwrote the advantages it returned on the call before (it hands out one shared buffer)"
        arr = to_numpy(out)
        self._prev = (
            (out, np.array(arr, copy=True)) if type(out).__module__.split(".")[0] in ("numpy", "torch") else None
        )
        return issue


def declared_info(fn: Any) -> dict[str, Any]:
    """What ``fn`` declares of itself (``fn.grpo_identity_info``: a dict, empty where unset); anything else is a
    :class:`TargetImportError` that names it.

    >>> def fn(rewards, G): ...
    >>> fn.grpo_identity_info = "step"
    >>> declared_info(fn)
    Traceback (most recent call last):
    grpo_identity.checks.calls.target.TargetImportError: the target's grpo_identity_info must be a dict, got str
    """
    try:
        info = getattr(fn, "grpo_identity_info", None)
    except Exception as exc:  # an object whose attribute lookup raises
        raise TargetImportError(f"reading the target's grpo_identity_info raised {last_line(exc)}") from None
    if info is None:
        return {}
    if not isinstance(info, Mapping):
        raise TargetImportError(f"the target's grpo_identity_info must be a dict, got {type(info).__name__}")
    return dict(info)


@dataclass(frozen=True, eq=False)
class Output:
    """One call's result as the audit reads it."""

    value: Any
    """The output as numpy: a 1-D array (advantages, keep flags), or a dict of arrays at the gradient level."""
    issue: str | None = None
    """What was wrong with the call besides its values (:func:`output_issue`): its input changed, a list …"""
    overwrite: str | None = None
    """Set when the call overwrote the output of the call before (a shared buffer)."""


class Target:
    """A loaded target as the audit calls it: :meth:`call` gives an :class:`Output`, calling the object its value.
    ``name``, ``kind`` ('advantage', 'filter', 'row-filter', 'gradient'), ``info`` (what it declares and how it is
    called) and ``calls`` (how many calls reached it) are read by the report."""

    name: str
    kind: str
    info: dict[str, Any]
    calls: int

    def call(self, rewards: np.ndarray, group_size: int, *extra: Any) -> Output:
        raise NotImplementedError

    def __call__(self, rewards: np.ndarray, group_size: int, *extra: Any) -> Any:
        return self.call(rewards, group_size, *extra).value

    def close(self) -> None:
        pass

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class View(Target):
    """A target seen through another: a subclass answers :meth:`call`; every other attribute (``name``, ``info``,
    ``calls`` …) is the target's under it.  Closing a view closes nothing: whoever opened the target closes it."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def __getattr__(self, name: str) -> Any:
        if name == "_target":  # not set yet (a copy, an unpickling): no endless lookup
            raise AttributeError(name)
        return getattr(self._target, name)


def output_of(target: Any, rewards: np.ndarray, group_size: int, *extra: Any) -> Output:
    """One call of ``target``: a :class:`Target`'s own :class:`Output`; a plain function's output as it returned
    it, nothing checked (a view over a plain function, as tests build them, sees what the function gives).  A
    :class:`TargetError` leaves with the call's input as ``called_with`` (rewards, group size, extra arguments)."""
    try:
        if isinstance(target, Target):
            return target.call(rewards, group_size, *extra)
        return Output(target(rewards, group_size, *extra))
    except TargetError as exc:  # the input it met, as the outermost view was given it (each view on the way out)
        exc.called_with = (rewards, group_size, extra)  # type: ignore[attr-defined]
        raise


def as_target(fn: Any, kind: str = "advantage") -> Target:
    """``fn`` as a :class:`Target`: itself when it is one, else called in this process (:class:`LocalTarget`)."""
    return fn if isinstance(fn, Target) else LocalTarget(fn, kind=kind)


class LocalTarget(Target):
    """A target called in this process (no timeout can stop it: a child process can,
    :class:`grpo_identity.checks.calls.child.ChildTarget`)."""

    def __init__(
        self,
        fn: Callable[..., Any],
        name: str | None = None,
        kind: str = "advantage",
        calling: Any = None,
        spec: Any = None,
    ) -> None:
        self.name = str(name or getattr(fn, "__qualname__", repr(fn)))
        self.kind = kind
        self.info = declared_info(fn)
        self.fn = called_as_written(fn, calling, self.info, spec)
        self.calls = 0
        self._watch = OutputWatch()

    def call(self, rewards: np.ndarray, group_size: int, *extra: Any) -> Output:
        self.calls += 1
        return settle(self, call_once(self.fn, rewards, group_size, extra, self.kind, self._watch))


def call_once(
    fn: Callable[..., Any],
    rewards: np.ndarray,
    group_size: int,
    extra: tuple[Any, ...],
    kind: str,
    watch: OutputWatch,
    interrupt_is_finding: bool = False,
) -> Any:
    """One call of a loaded target and the checks every transport makes of it, as a
    :mod:`~grpo_identity.checks.calls.protocol` reply: ``Returned`` (the output as numpy, what was wrong with it
    besides its values, whether it overwrote the previous output, the call plan when this call settled it),
    ``Raised``, ``Rejected`` (it takes none of the inputs tried) or ``Malformed``.  In this process and in a
    child alike (:class:`LocalTarget`, :class:`~grpo_identity.checks.calls.child.ChildTarget`); only a child, in a
    session of its own, reads a ``KeyboardInterrupt`` as the target's (``interrupt_is_finding``): here it is the
    user's."""
    from grpo_identity.checks.calls import protocol as M
    from grpo_identity.checks.calls.calling import CallError

    passed = rewards.copy()
    plan_before = _plan(fn)
    try:
        out = fn(passed, int(group_size), *extra)
        passed = seen_input(fn, passed)
        return _checked(out, rewards, passed, kind, watch, _plan(fn), plan_before)
    except CallError as exc:  # it takes none of the inputs tried: a usage error
        return M.Rejected(str(exc))
    except SystemExit as exc:  # sys.exit() in the target: a finding, not the end of the audit
        return M.Raised(f"called sys.exit({exc.code!r})")
    except KeyboardInterrupt:
        if not interrupt_is_finding:
            raise
        return M.Raised("raised KeyboardInterrupt")
    except Exception as exc:  # the target's own bug, or an output no check can read: a finding, not an audit crash
        return M.Raised(last_line(exc))


def _plan(fn: Any) -> Any:
    """The call plan of a :class:`~grpo_identity.checks.calls.calling.Caller` (how the rewards go in), else None."""
    plan = getattr(fn, "plan", None)
    return plan if callable(getattr(plan, "to_dict", None)) else None


def _checked(
    out: Any, rewards: np.ndarray, passed: np.ndarray, kind: str, watch: OutputWatch, plan: Any, before: Any
) -> Any:
    """:func:`call_once`'s reply to the output ``out`` of a call whose input was ``rewards`` (``passed``: as the
    function holds it after the call)."""
    from grpo_identity.checks.calls import protocol as M

    call = plan.to_dict() if plan is not None and plan != before else None
    if kind == "gradient":  # a dict of arrays (grpo_identity.checks.gradient); its tensors as numpy, as at every level
        bad = not_a_gradient(out)
        if bad is not None:
            return M.Malformed(bad)
        issue, overwrite = _advantage_issues(rewards, passed, out.get("advantages"), watch)
        return M.Returned({k: to_numpy(v) if is_torch(v) else v for k, v in out.items()}, issue, overwrite, call)
    bad = malformed(out, kind)
    if bad is not None:
        return M.Malformed(bad)
    issue = output_issue(rewards, passed, out, kind)
    return M.Returned(np.array(to_numpy(out), copy=True), issue, watch.check(out), call)


def _advantage_issues(rewards: np.ndarray, passed: np.ndarray, adv: Any, watch: OutputWatch) -> tuple[Any, Any]:
    """The advantage level's checks of a gradient output's 'advantages' (:func:`output_issue`, and whether they
    overwrote the previous call's), made where the target runs: only there is a shared buffer one object.  An
    output without readable advantages is :func:`gradient_arrays`' finding: (None, None)."""
    if adv is None or malformed(adv) is not None:
        return None, None
    return output_issue(rewards, passed, adv), watch.check(adv)


def not_a_gradient(out: Any) -> str | None:
    """Why a gradient target's output ``out`` is no dict, or ``None`` when it is one.

    >>> not_a_gradient([1.0]), not_a_gradient({"advantages": [1.0]})
    ("returned a value of type list, not a dict of 'advantages', 'coefficients' and 'mask'", None)
    """
    if isinstance(out, dict):
        return None
    what = "None" if out is None else f"a value of type {type(out).__name__}"
    return f"returned {what}, not a dict of 'advantages', 'coefficients' and 'mask'"


def gradient_arrays(out: Any, rows: int, longest: int, per_row: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """A gradient target's output as float64 arrays, each checked: 'advantages' (``rows``,), 'coefficients' and
    'mask' (``rows`` × T, T ≥ ``longest``), and each key of ``per_row`` (``rows``,: a step's 'step', 'rank' …),
    each an array of numbers; a finite mask, and finite coefficients inside it wherever the answer's advantage is
    finite (a NaN advantage is the advantage audit's finding); else :class:`TargetMalformed`, naming what is wrong.

    >>> gradient_arrays({"advantages": [1.0], "coefficients": [[0.5]], "mask": [[1]]}, 1, 1)["coefficients"]
    array([[0.5]])
    >>> gradient_arrays({"advantages": [1.0]}, 1, 1)
    Traceback (most recent call last):
    grpo_identity.checks.calls.target.TargetMalformed: returned a dict without 'coefficients', which the audit ...
    """
    bad = not_a_gradient(out)
    if bad is not None:
        raise TargetMalformed(bad)
    keys = ("advantages", "coefficients", "mask", *per_row)
    arrays = {key: _numbers(out, key, keys) for key in keys}
    C, M = arrays["coefficients"], arrays["mask"]
    ok = C.ndim == 2 and C.shape[0] == rows and C.shape[1] >= longest and M.shape == C.shape
    if not ok or any(arrays[k].size != rows for k in ("advantages", *per_row)):
        shapes = " · ".join("×".join(map(str, a.shape)) or "a number" for a in arrays.values())
        wanted = " · ".join(f"{rows}×T" if k in ("coefficients", "mask") else str(rows) for k in keys)
        raise TargetMalformed(
            f"returned shapes {shapes} for {' · '.join(keys)}, not {wanted} with T ≥ {longest} (one value per "
            "answer; answers × tokens)"
        )
    if not np.all(np.isfinite(M)):
        raise TargetMalformed(f"returned NaN or inf in {int((~np.isfinite(M)).sum())} entries of its mask")
    A = arrays["advantages"].reshape(-1)
    non_finite = int((~np.isfinite(C) & (M != 0) & np.isfinite(A)[:, None]).sum())
    if non_finite:
        raise TargetMalformed(
            f"returned NaN or inf in {non_finite} coefficients of tokens inside the mask whose answers' advantages are "
            "finite (a step with them moves every parameter to NaN)"
        )
    return {k: v.reshape(-1) if k not in ("coefficients", "mask") else v for k, v in arrays.items()}


def _numbers(out: dict[str, Any], key: str, keys: tuple[str, ...]) -> np.ndarray:
    """``out[key]`` as a float64 array (tensors as :func:`to_numpy` gives them); :class:`TargetMalformed` where
    it is missing or holds anything but numbers (None, text, objects)."""
    if key not in out:
        listed = ", ".join(map(repr, out)) or "none"
        others = ", ".join(repr(k) for k in keys if k != key)
        raise TargetMalformed(f"returned a dict without {key!r}, which the audit reads beside {others} (its keys: "
                              f"{listed})")  # fmt: skip
    try:
        value = to_numpy(out[key])
    except Exception as exc:
        raise TargetMalformed(f"returned {key!r} as no array of numbers, {last_line(exc)}") from None
    if not (np.issubdtype(value.dtype, np.number) or value.dtype == np.bool_) or np.iscomplexobj(value):
        raise TargetMalformed(f"returned {key!r} as an array of {value.dtype}, not of real numbers")
    return value.astype(np.float64)


def settle(target: Any, reply: Any) -> Output:
    """A :func:`call_once` reply as the audit takes it: its :class:`Output` (the call plan, when this call settled
    it, goes into ``target.info["call"]``); or the error the reply stands for."""
    from grpo_identity.checks.calls import protocol as M

    if isinstance(reply, M.Raised):
        raise TargetError(reply.message)
    if isinstance(reply, M.Malformed):
        raise TargetMalformed(reply.message)
    if isinstance(reply, M.Rejected):
        raise TargetImportError(reply.message)
    if reply.call is not None:
        target.info["call"] = reply.call
    return Output(reply.out, reply.issue, reply.overwrite)


def seen_input(fn: Any, passed: np.ndarray) -> np.ndarray:
    """The rewards as the function holds them after its call (a :class:`~grpo_identity.checks.calls.calling.Caller`
    converts them: its copy shows an in-place change), else ``passed``."""
    held = getattr(fn, "passed", None)
    return held if isinstance(held, np.ndarray) else passed


def called_as_written(
    fn: Callable[..., Any], calling: Any, info: dict[str, Any], spec: Any = None
) -> Callable[..., Any]:
    """``fn`` behind a :class:`~grpo_identity.checks.calls.calling.Caller` when ``calling`` (its
    :class:`~grpo_identity.checks.calls.calling.CallOptions`) is given; the plan goes into ``info["call"]``, named
    as the ``FILE.py:NAME`` spec names it where one is given (an object, a decorator's wrapper have no name of
    their own).  A function no plan can call raises :class:`TargetImportError` (a usage error)."""
    if calling is None:
        return fn
    from grpo_identity.checks.calls import adapters
    from grpo_identity.checks.calls.calling import Caller, CallError

    try:
        named = isinstance(spec, str) and ":" in spec and not adapters.is_adapter(spec)  # FILE.py:NAME, MODULE:NAME
        name = spec.rpartition(":")[2] if named else None
        caller = Caller.for_function(fn, calling, name)
    except CallError as exc:
        raise TargetImportError(str(exc)) from None
    info["call"] = caller.plan.to_dict()
    return caller


def round_rewards(rewards: np.ndarray, dtype: str) -> np.ndarray:
    """``rewards`` rounded to ``dtype`` (float32, float16, bfloat16), as float64 values."""
    if dtype == "float64":
        return rewards
    if dtype == "bfloat16":
        b = rewards.astype(np.float32).view(np.uint32)
        b = (b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)  # to nearest even
        return b.view(np.float32).astype(np.float64)
    return rewards.astype(dtype).astype(np.float64)


class RoundedRewards(View):
    """The target, called with rewards rounded to the dtype it is handed them in (``--reward-dtype``),
    so that every reference the audit computes sees the rewards the target sees."""

    def __init__(self, target: Any, dtype: str) -> None:
        super().__init__(target)
        self.dtype = dtype

    def call(self, rewards: np.ndarray, group_size: int, *extra: Any) -> Output:
        return output_of(self._target, round_rewards(rewards, self.dtype), group_size, *extra)


def last_line(exc: BaseException) -> str:
    lines = traceback.format_exception_only(type(exc), exc)
    return (lines[-1] if lines else type(exc).__name__).strip()


def reference(fn: Callable[..., Any]) -> tuple[Any, ...]:
    """How a child process finds the callable ``fn``: ('ref', module, file, qualname) for a
    function defined at the top of a module (a test file included: the child loads the file when
    the module cannot be imported by name), else ('pickle', bytes).  A local function or a lambda
    cannot be found: :class:`TargetImportError`."""
    import pickle

    qualname, module = getattr(fn, "__qualname__", None), getattr(fn, "__module__", None)
    if isinstance(qualname, str) and isinstance(module, str):
        if "<locals>" in qualname or "<lambda>" in qualname:
            raise TargetImportError(
                f"{qualname} is a local function or a lambda: a child process cannot load it (define it at "
                "the top of a module, or run it in this process with isolate=False)"
            )
        return ("ref", module, getattr(sys.modules.get(module), "__file__", None), qualname)
    try:
        return ("pickle", pickle.dumps(fn))
    except Exception as exc:
        raise TargetImportError(f"cannot send the target to a child process: {last_line(exc)}") from None


def resolve_reference(ref: tuple[Any, ...]) -> Callable[..., Any]:
    """The callable that :func:`reference` describes (in the child process)."""
    import pickle

    if ref[0] == "pickle":
        return pickle.loads(ref[1])
    _, module_name, file, qualname = ref
    module: Any = None
    if module_name != "__main__":
        try:
            module = importlib.import_module(module_name)
        except Exception:
            module = None
    if module is None:
        if not file:
            raise TargetImportError(f"cannot import the module {module_name!r} of {qualname} in a child process")
        module = _load_file(file)
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise TargetImportError(f"{file or module_name} has no {qualname}")
    return obj


def _load_file(where: str) -> Any:
    """Import a file as a module under a private name (never as ``__main__``), its folder first on
    ``sys.path`` while it loads, as ``python FILE.py`` would have it (a child process keeps it
    there: :class:`grpo_identity.checks.calls.child.ChildTarget`)."""
    mod_name = FILE_MODULE_PREFIX + os.path.splitext(os.path.basename(where))[0]
    loader_spec = importlib.util.spec_from_file_location(mod_name, where)
    if loader_spec is None or loader_spec.loader is None:
        raise TargetImportError(f"cannot import {where}")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[mod_name] = module
    folder = os.path.dirname(os.path.abspath(where))
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        loader_spec.loader.exec_module(module)
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)
    return module
