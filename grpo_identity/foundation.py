"""The foundation every layer may import: the usage-error type, exit codes, the extra an import
needs, JSON that never writes NaN, and plain-text tables.

Standard library only (numpy values are converted when numpy happens to be loaded).

>>> print(dumps({"x": float("nan"), "y": [1.5]}))
{
  "x": null,
  "y": [
    1.5
  ]
}
>>> print(format_table([[1, 0.5]], ["k", "sigma"]))
k  sigma
-  -----
1    0.5
"""

from __future__ import annotations

import json
import math
import os
import sys
from typing import Any, Callable, Iterable, Mapping, Sequence, TextIO

__all__ = [
    "EXIT_OK",
    "EXIT_FAIL",
    "EXIT_USAGE",
    "EXIT_CODES_HELP",
    "UsageError",
    "OptionError",
    "EXTRAS",
    "missing_extra",
    "error_text",
    "require",
    "dumps",
    "finite",
    "cache_dir",
    "atomic_path",
    "write_text_atomic",
    "check_writable",
    "emit_json",
    "format_table",
    "minimise_scalar",
]

#: exit codes of every command: 0 success, 1 a check failed, 2 bad input (usage)
EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
#: the exit codes in words: the epilog of every ``--help``
EXIT_CODES_HELP = (
    f"exit codes: {EXIT_OK} success; {EXIT_FAIL} a check failed (a proof, an audit, the identity or a "
    f"reproduced number did not hold); {EXIT_USAGE} bad input or a missing optional package (one line on stderr)"
)


class OptionError(ValueError):
    """A bad option: ``field`` (its name in Python) and ``problem`` ("must be …, got …")."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field, self.problem = field, problem

    def worded(self, names: Mapping[str, str]) -> str:
        """The message with the option as the user wrote it (``names``: field → option)."""
        return f"{names.get(self.field, self.field)} {self.problem}"


class UsageError(Exception):
    """Bad input from the user: reported in one line, exit code 2."""


#: optional dependency (top-level module) -> the extra of grpo-identity that installs it
EXTRAS: dict[str, str] = {
    "torch": "trainer",
    "transformers": "trainer",
    "matplotlib": "notebooks",
    "nbconvert": "notebooks",
    "nbclient": "notebooks",
    "nbformat": "notebooks",
    "jupytext": "notebooks",
    "ipykernel": "notebooks",
    "IPython": "notebooks",
    "jupyter_server_mathjax": "notebooks",
    "pandas": "data",
    "pyarrow": "data",
    "pytest": "test",
    "trl": "frameworks",
    "verl": "frameworks",
    "ray": "ray",
    "yaml": "matrix",
}


def missing_extra(exc: ImportError) -> str | None:
    """One line naming the extra that installs the module ``exc`` could not import, or None
    when that module belongs to no extra of this project.

    >>> missing_extra(ModuleNotFoundError("No module named 'torch'", name="torch"))
    "this needs torch: pip install 'grpo-identity[trainer]'"
    """
    top = (getattr(exc, "name", None) or "").split(".")[0]
    if top not in EXTRAS:
        return None
    return f"this needs {top}: pip install 'grpo-identity[{EXTRAS[top]}]'"


#: words a library puts in an error that point at a traceback a report does not show
_TRACEBACK_POINTERS = (" (look up to see its traceback)",)


def error_text(exc: BaseException, limit: int = 600) -> str:
    """The whole error on one line: its type, every line of its message, and the error that caused it
    when the message does not already say it (a lazy import's "Failed to import X" hides the reason in
    its cause); at most ``limit`` characters.

    >>> try:
    ...     try:
    ...         raise ValueError("Either a revision or a version is needed.")
    ...     except ValueError as inner:
    ...         raise RuntimeError("Failed to import trl.x because of the following error "
    ...                            "(look up to see its traceback):\\n" + str(inner)) from inner
    ... except RuntimeError as exc:
    ...     print(error_text(exc))
    RuntimeError: Failed to import trl.x because of the following error: Either a revision or a version is needed.
    """

    def words(e: BaseException) -> str:
        text = " ".join(ln.strip() for ln in str(e).splitlines() if ln.strip())
        for pointer in _TRACEBACK_POINTERS:
            text = text.replace(pointer, "")
        return text

    text = f"{type(exc).__name__}: {words(exc)}" if words(exc) else type(exc).__name__

    def below(e: BaseException) -> BaseException | None:  # a context raised `from None` was hidden on purpose
        return e.__cause__ or (None if e.__suppress_context__ else e.__context__)

    cause, seen = below(exc), 0
    while cause is not None and seen < 5:
        if words(cause) and words(cause) not in text:
            text += f" (from {type(cause).__name__}: {words(cause)})"
        cause, seen = below(cause), seen + 1
    return text if len(text) <= limit else text[: limit - 1] + "…"


def require(*modules: str) -> None:
    """Import each of ``modules`` now, so that a missing optional package is reported (by the
    ``ImportError``, see :func:`missing_extra`) before any work or any file is written.

    >>> require("json")
    """
    import importlib

    for name in modules:
        importlib.import_module(name)


def cache_dir(name: str) -> str:
    """A folder of this project's cache (not created): ``$XDG_CACHE_HOME/grpo-identity/NAME``,
    else ``~/.cache/grpo-identity/NAME``.

    >>> cache_dir("envs").endswith("grpo-identity/envs")
    True
    """
    import os

    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "grpo-identity", name)


# --- JSON -------------------------------------------------------------------------------------
def _default(o: Any) -> Any:
    np = sys.modules.get("numpy")
    if np is not None:
        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def finite(o: Any) -> Any:
    """``o`` with every non-finite float (NaN, ±inf) replaced by None, recursively."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [finite(v) for v in o]
    np = sys.modules.get("numpy")
    if np is not None:
        if isinstance(o, np.floating):
            return float(o) if np.isfinite(o) else None
        if isinstance(o, np.ndarray):
            return finite(o.tolist())
    return o


def dumps(obj: Any, *, indent: int | None = 2) -> str:
    """JSON text; numpy scalars and arrays become plain numbers and lists; NaN/inf become null."""
    return json.dumps(finite(obj), indent=indent, default=_default, allow_nan=False)


def emit_json(obj: Any, stream: TextIO | None = None) -> None:
    """Print ``obj`` as JSON (see :func:`dumps`) on ``stream`` (default stdout)."""
    print(dumps(obj), file=stream or sys.stdout)


# --- tables -------------------------------------------------------------------------------------
def _cell(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if math.isinf(v) or math.isnan(v):
            return str(v)
        return f"{v:.6g}" if abs(v) < 1e6 else f"{v:.4e}"
    return str(v)


def _numeric(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def format_table(rows: Iterable[Sequence[Any]], headers: Sequence[str]) -> str:
    """A plain-text table with aligned columns (numbers right-aligned)."""
    body = [[_cell(v) for v in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in body]) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    rule = "  ".join("-" * w for w in widths)
    out = [line, rule] + ["  ".join(c.rjust(w) if _numeric(c) else c.ljust(w) for c, w in zip(r, widths)) for r in body]
    return "\n".join(s.rstrip() for s in out)


def check_writable(path: Any, flag: str = "--out") -> None:
    """``path`` is a new path or a regular file (never a link, a folder, a device or a FIFO, which a rename would
    replace or a write would follow): a :class:`UsageError` naming ``flag`` otherwise.

    >>> check_writable("/dev/null")
    Traceback (most recent call last):
    ...
    grpo_identity.foundation.UsageError: --out /dev/null is not a regular file (a link, folder, device or FIFO): ...
    """
    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isfile(path)):
        raise UsageError(
            f"{flag} {path} is not a regular file (a link, folder, device or FIFO): name a new file or a regular one"
        )


def atomic_path(path: Any, flag: str = "--out") -> Any:
    """A context manager for writing ``path`` atomically: it yields the name of a new temporary file beside it,
    created exclusively under an unpredictable name (a link planted at a guessable name cannot redirect the write),
    with ``path``'s suffix (a figure writer reads the format from it), and renames it over ``path`` when the block
    ends, with the mode ``path`` had (else the umask's); on an error the temporary file is removed and ``path``
    left as it was.  ``path`` must be a new path or a regular file (:func:`check_writable`)."""
    import contextlib

    @contextlib.contextmanager
    def writing() -> Any:
        fd, tmp = _temporary_beside(path, flag)
        os.close(fd)
        with _renamed_over(tmp, path):
            yield tmp

    return writing()


def write_text_atomic(path: Any, text: str, flag: str = "--out") -> None:
    """Write ``text`` (UTF-8) to ``path`` as :func:`atomic_path` does, through the descriptor the temporary file was
    created with (never reopened by its name)."""
    fd, tmp = _temporary_beside(path, flag)
    with _renamed_over(tmp, path), os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def _temporary_beside(path: Any, flag: str) -> tuple[int, str]:
    import tempfile

    check_writable(path, flag)
    folder, name = os.path.split(os.path.abspath(path))
    return tempfile.mkstemp(prefix=f".{name}.", suffix=f".partial{os.path.splitext(name)[1]}", dir=folder)


def _renamed_over(tmp: str, path: Any) -> Any:
    import contextlib

    @contextlib.contextmanager
    def renaming() -> Any:
        try:
            yield
            try:
                mode = os.stat(path).st_mode & 0o777  # a file kept private stays so
            except FileNotFoundError:
                mode = 0o666 & ~_UMASK  # mkstemp's 0600 would make a report only its writer can read
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    return renaming()


def _umask() -> int:
    """The process's umask, read once at import (setting it is the only way to read it: never done again later,
    when another thread may be creating files)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()


_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


def minimise_scalar(
    f: Callable[[float], float], lo: float, hi: float, *, grid: int = 41, log: bool = False, tol: float = 1e-9
) -> tuple[float, float]:
    """Bounded 1-D minimiser: the best of ``grid`` points (log-spaced if ``log``), then a
    golden-section search between its neighbours.  Returns (x, f(x)); a NaN value never wins.

    >>> x, fx = minimise_scalar(lambda t: (t - 2.0) ** 2, 0.1, 10.0)
    >>> round(x, 6), fx < 1e-12
    (2.0, True)
    """
    if not (lo < hi) or (log and lo <= 0):
        raise ValueError(f"need 0 < lo < hi (log) or lo < hi, got {lo!r}, {hi!r}")
    to = math.exp if log else (lambda u: u)
    a0, b0 = (math.log(lo), math.log(hi)) if log else (lo, hi)
    us = [a0 + (b0 - a0) * j / (grid - 1) for j in range(grid)]
    vals = [f(to(u)) for u in us]
    i = min(range(grid), key=lambda j: math.inf if math.isnan(vals[j]) else vals[j])
    a, b = us[max(i - 1, 0)], us[min(i + 1, grid - 1)]
    c, d = b - _GOLDEN * (b - a), a + _GOLDEN * (b - a)
    fc, fd = f(to(c)), f(to(d))
    while abs(b - a) > tol * (1.0 + abs(a) + abs(b)):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - _GOLDEN * (b - a)
            fc = f(to(c))
        else:
            a, c, fc = c, d, fd
            d = a + _GOLDEN * (b - a)
            fd = f(to(d))
    found = [(v, w) for v, w in ((vals[i], us[i]), (fc, c), (fd, d)) if not math.isnan(v)]
    fx, u = min(found) if found else (vals[i], us[i])
    return to(u), float(fx)
