"""The audited target: an advantage (or filter) function called ``fn(rewards, group_size)``.

A target is named by a spec — ``path/to/file.py:function``, ``package.module:function`` or a
built-in adapter name (:data:`grpo_identity.checks.adapters.ADAPTERS`) — or given as a callable.
:class:`ChildTarget` runs it in a child interpreter so that a crash or a hang in someone
else's code becomes a clear finding, never a hung audit; :class:`LocalTarget` calls it in this
process.  Both return a 1-D ``numpy`` array (float for advantages, bool for filters).

>>> t = LocalTarget(lambda r, G: r - r.reshape(-1, G).mean(1).repeat(G))
>>> t(__import__("numpy").array([1., 0.]), 2).tolist()
[0.5, -0.5]
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
import traceback
from multiprocessing.connection import Connection
from typing import Any, Callable

import numpy as np

__all__ = [
    "TargetError",
    "TargetCrashed",
    "TargetTimeout",
    "TargetMalformed",
    "TargetImportError",
    "load_target",
    "LocalTarget",
    "ChildTarget",
    "to_numpy",
    "output_issue",
    "malformed",
    "reference",
]


#: seconds allowed for the child interpreter to start (python, numpy, torch), before the target loads
STARTUP_TIMEOUT = 120.0


class TargetError(Exception):
    """The target raised an exception on some input (message: its last traceback line)."""


class TargetCrashed(TargetError):
    """The target's process died (segfault, ``os._exit``, out of memory …)."""


class TargetTimeout(TargetError):
    """One call into the target ran past the timeout."""


class TargetMalformed(TargetError):
    """The target returned something that is not an array of numbers (``None``, objects, strings)."""


class TargetImportError(Exception):
    """The target could not be loaded: a bad spec, a missing file, module, function or package."""


def load_target(spec: Any, kind: str = "advantage") -> Callable[..., Any]:
    """The callable named by ``spec`` (file path or module, then ``:function``; or an adapter name)."""
    from grpo_identity.checks import adapters

    if not isinstance(spec, str) or adapters.is_adapter(spec):
        try:
            return adapters.build(spec, kind)
        except ImportError as exc:
            raise TargetImportError(
                f"adapter {adapters.describe(spec)!r} needs a package that is not installed: {exc}"
            ) from None
    check_spec(spec)
    where, _, name = spec.rpartition(":")
    try:
        if _is_path(where):
            module = _load_file(where)
        else:
            module = importlib.import_module(where)
    except TargetImportError:
        raise
    except BaseException as exc:  # an import error, or anything the target's module raises at import
        raise TargetImportError(f"importing {where} failed: {type(exc).__name__}: {exc}".splitlines()[0]) from None
    fn = getattr(module, name, None)
    if fn is None or not callable(fn):
        raise TargetImportError(f"{where} has no function {name!r}")
    return fn


def _is_path(where: str) -> bool:
    return where.endswith(".py") or os.sep in where or "/" in where


def check_spec(spec: str) -> None:
    """Reject a malformed spec or a missing file at once (before any child process starts)."""
    from grpo_identity.checks import adapters

    if not isinstance(spec, str) or adapters.is_adapter(spec):
        return
    where, colon, name = spec.rpartition(":")
    if not colon or not where or not name:
        raise TargetImportError(
            f"target {spec!r} is neither FILE.py:FUNCTION, MODULE:FUNCTION nor an adapter ({', '.join(adapters.names())})"
        )
    if _is_path(where) and not os.path.isfile(where):
        raise TargetImportError(f"no such file: {where}")


def to_numpy(out: Any) -> np.ndarray:
    """The target's output as a numpy array (torch tensors detached, bf16/fp16 widened to fp32)."""
    if type(out).__module__.split(".")[0] == "torch":
        t = out.detach().cpu()
        if t.dtype.is_floating_point and t.dtype.itemsize < 4:
            t = t.float()
        return t.numpy()
    return np.asarray(out)


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
        return f"returned a {type(out).__name__} that cannot be read as an array of {what}: {_last_line(exc)}"
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        first = next(iter(arr.reshape(-1)), None) if arr.size else None
        inner = f" (elements of type {type(first).__name__})" if first is not None else ""
        return f"returned an array of {arr.dtype}{inner}, not an array of {what}"
    return None


def output_issue(rewards: np.ndarray, passed: np.ndarray, out: Any, kind: str = "advantage") -> str | None:
    """What is wrong with one call besides the values, or ``None``: the input modified in place,
    a list instead of an array, or (advantages) a dtype other than the rewards' float64.

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
        return f"returned a {type(out).__name__}, not an array (numpy or torch): the dtype and shape of the rewards are not kept"
    if dtype != str(rewards.dtype) and ("float" in dtype or "bfloat" in dtype):
        return (
            f"returned {mod}.{dtype} advantages for {rewards.dtype} rewards: the dtype is not kept (precision is lost)"
        )
    return None


class _OutputWatch:
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


class LocalTarget:
    """A target called in this process (no timeout enforcement: use :class:`ChildTarget` for that)."""

    def __init__(self, fn: Callable[..., Any], name: str | None = None, kind: str = "advantage") -> None:
        self.fn = fn
        self.name = name or getattr(fn, "__qualname__", repr(fn))
        self.kind = kind
        self.info: dict[str, Any] = dict(getattr(fn, "grpo_identity_info", {}) or {})
        self.calls = 0
        self.last_issue: str | None = None
        """:func:`output_issue` of the latest call."""
        self.last_overwrite: str | None = None
        """Set when the latest call overwrote the previous call's output (a shared buffer)."""
        self._watch = _OutputWatch()

    def __call__(self, rewards: np.ndarray, group_size: int, *extra: Any) -> Any:
        self.calls += 1
        passed = rewards.copy()
        try:
            out = self.fn(passed, int(group_size), *extra)
        except Exception as exc:  # the target's own bug: a finding, not an audit crash
            raise TargetError(_last_line(exc)) from None
        if self.kind == "gradient":  # a dict of arrays (grpo_identity.checks.gradient)
            return out
        bad = malformed(out, self.kind)
        if bad is not None:
            raise TargetMalformed(bad)
        self.last_overwrite = self._watch.check(out)
        self.last_issue = output_issue(rewards, passed, out, self.kind)
        return np.array(to_numpy(out), copy=True)

    def close(self) -> None:
        pass

    def __enter__(self) -> LocalTarget:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _last_line(exc: BaseException) -> str:
    lines = traceback.format_exception_only(type(exc), exc)
    return (lines[-1] if lines else type(exc).__name__).strip()


def _worker(conn: Any) -> None:
    """Child process: load the target, then answer ('call', rewards, G) messages until 'close'."""
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass
    conn.send(("started", None))  # the interpreter is up: from here on the clock is the target's
    _, spec, kind, path = conn.recv()
    sys.path[:] = list(dict.fromkeys([*path, *sys.path]))
    try:
        fn = _resolve(spec) if isinstance(spec, tuple) else load_target(spec, kind)
        conn.send(("ok", dict(getattr(fn, "grpo_identity_info", {}) or {})))
    except (TargetImportError, ValueError) as exc:
        conn.send(("import_error", str(exc)))
        return
    except Exception as exc:
        conn.send(("import_error", _last_line(exc)))
        return
    watch = _OutputWatch()
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg[0] == "close":
            return
        _, rewards, G, extra = msg
        passed = rewards.copy()
        try:
            out = fn(passed, G, *extra)
            if kind == "gradient":  # a dict of arrays (grpo_identity.checks.gradient)
                conn.send(("ok", (out, None, None)))
                continue
            bad = malformed(out, kind)
            if bad is not None:
                conn.send(("malformed", bad))
                continue
            conn.send(("ok", (to_numpy(out), output_issue(rewards, passed, out, kind), watch.check(out))))
        except Exception as exc:
            conn.send(("error", _last_line(exc)))


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
                f"{qualname} is a local function or a lambda: a child process cannot load it (define it at the top of a module, or run it in this process with isolate=False)"
            )
        return ("ref", module, getattr(sys.modules.get(module), "__file__", None), qualname)
    try:
        return ("pickle", pickle.dumps(fn))
    except Exception as exc:
        raise TargetImportError(f"cannot send the target to a child process: {_last_line(exc)}") from None


def _resolve(ref: tuple[Any, ...]) -> Callable[..., Any]:
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
    """Import a file as a module under a private name (never as ``__main__``)."""
    mod_name = "_grpo_identity_target_" + os.path.splitext(os.path.basename(where))[0]
    loader_spec = importlib.util.spec_from_file_location(mod_name, where)
    if loader_spec is None or loader_spec.loader is None:
        raise TargetImportError(f"cannot import {where}")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[mod_name] = module
    loader_spec.loader.exec_module(module)
    return module


def _child_main(read_fd: int, write_fd: int) -> None:
    """Entry point of the child interpreter (``python -c``): one duplex channel over two pipes."""
    from multiprocessing.connection import Connection

    class _Duplex:
        def __init__(self) -> None:
            self.r, self.w = Connection(read_fd, writable=False), Connection(write_fd, readable=False)

        def recv(self) -> Any:
            return self.r.recv()

        def send(self, obj: Any) -> None:
            self.w.send(obj)

    _worker(_Duplex())


class ChildTarget:
    """A target running in a child process; every call (and the import) has a timeout.

    After a crash or a timeout the child is gone: later calls raise the same error at once, so a
    property search that hits it cannot hang or slow down.
    """

    def __init__(
        self,
        spec: Any,
        *,
        kind: str = "advantage",
        timeout: float = 60.0,
        load_timeout: float | None = None,
        name: str | None = None,
        python: str | None = None,
    ) -> None:
        self.name = name or (spec if isinstance(spec, str) else getattr(spec, "__qualname__", repr(spec)))
        self.timeout = float(timeout)
        self.calls = 0
        self.last_issue: str | None = None
        """:func:`output_issue` of the latest call."""
        self.last_overwrite: str | None = None
        """Set when the latest call overwrote the previous call's output (a shared buffer)."""
        self.dead: TargetError | None = None
        if not callable(spec):  # a spec string, or a framework spec (a small frozen record)
            check_spec(spec)
        payload = reference(spec) if callable(spec) else spec
        # a fresh interpreter (not multiprocessing's spawn, which re-runs the caller's __main__)
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        code = f"from grpo_identity.checks.target import _child_main; _child_main({to_child_r}, {from_child_w})"
        try:  # the target's prints go to stderr, never into the report on stdout (--json)
            out: Any = sys.stderr.fileno()
        except (AttributeError, OSError, ValueError):
            out = subprocess.DEVNULL
        # ``python``: another interpreter (a release's environment, grpo_identity.checks.releases),
        # which then finds its own packages first: this process's sys.path is not handed down
        from grpo_identity.checks.releases import child_environ

        environ = child_environ() if python else dict(os.environ)
        # not "under pytest" in the child: frameworks branch on it (verl 0.6.0 picks the CPU when
        # PYTEST_CURRENT_TEST is set), and the audit must see what the user's run sees
        environ.pop("PYTEST_CURRENT_TEST", None)
        self._proc = subprocess.Popen(
            [python or sys.executable, "-c", code],
            pass_fds=(to_child_r, from_child_w),
            stdin=subprocess.DEVNULL,
            stdout=out,
            env=environ,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._out = Connection(to_child_w, readable=False)
        self._in = Connection(from_child_r, writable=False)
        try:
            self._out.send(("load", payload, kind, [] if python else [p for p in sys.path if p]))
        except Exception as exc:  # an unpicklable callable
            self.close()
            raise TargetImportError(f"cannot send the target to a child process: {_last_line(exc)}") from None
        # the child interpreter's own start (numpy, torch) is not the target's time; loading the
        # target (importing its module, building a framework's trainer) then has ``load_timeout``,
        # by default the same as a call's: a module that hangs on import is stopped in time
        self._receive(STARTUP_TIMEOUT, loading=True, what="starting the child interpreter")
        status, payload = self._receive(self.timeout if load_timeout is None else float(load_timeout), loading=True)
        if status == "import_error":
            self.close()
            raise TargetImportError(payload)
        self.info: dict[str, Any] = payload

    def _receive(self, timeout: float, loading: bool = False, what: str | None = None) -> tuple[str, Any]:
        what = what or ("loading the target" if loading else "a call into the target")
        try:
            ready = self._in.poll(timeout)
        except (EOFError, OSError):
            ready = True
        if not ready:
            self.dead = TargetTimeout(f"{what} ran past the {timeout:g} s timeout (killed)")
            self.close()
            raise self.dead
        try:
            return self._in.recv()
        except (EOFError, OSError):
            try:
                code = self._proc.wait(1.0)
            except subprocess.TimeoutExpired:
                code = None
            self.dead = TargetCrashed(f"the target's process died during {what} (exit code {code})")
            self.close()
            if loading:
                raise TargetImportError(str(self.dead)) from None
            raise self.dead from None

    def __call__(self, rewards: np.ndarray, group_size: int, *extra: Any) -> Any:
        if self.dead is not None:
            raise type(self.dead)(str(self.dead))
        self.calls += 1
        try:
            self._out.send(("call", np.ascontiguousarray(rewards), int(group_size), extra))
        except (BrokenPipeError, OSError):
            self.dead = TargetCrashed(f"the target's process died (exit code {self._proc.poll()})")
            raise self.dead from None
        status, payload = self._receive(self.timeout)
        if status == "error":
            raise TargetError(payload)
        if status == "malformed":
            raise TargetMalformed(payload)
        out, self.last_issue, self.last_overwrite = payload
        return out

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self._out.send(("close",))
            except (BrokenPipeError, OSError, ValueError):
                pass
            try:
                self._proc.wait(0.5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5.0)
        for c in (self._out, self._in):
            c.close()

    def __enter__(self) -> ChildTarget:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
