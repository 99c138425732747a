"""Where a stored run came from: the command, the project commit and the versions it ran with.

Every writer of a stored run (``results/…``) calls :func:`write` (a ``provenance.json`` beside its
outputs) or embeds :func:`record` in its one output file; ``grpo-identity verify`` reads them back
with :func:`recorded` and names what differs from the running environment (:func:`differences`).
The layout is that of ``results/frameworks/meta.json``: ``python``, ``versions`` (package →
version, None when not installed), ``commit``, ``command``.

The commit is read from git only when this package runs from its own checkout (the work tree whose
top level holds it); from a pip install it is None and ``commit_note`` says why.  Standard library
only: versions come from the installed metadata, nothing heavy is imported.

>>> env = environment()
>>> sorted(env["versions"]) == sorted(PACKAGES)
True
>>> old = {"python": "2.7.0", "versions": env["versions"]}
>>> differences(old, env) == [f"python: 2.7.0 recorded, {env['python']} here"]
True
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import subprocess
from pathlib import Path
from typing import Any, Iterable, Sequence

__all__ = [
    "PACKAGES",
    "FILE",
    "command_line",
    "CHECKOUT",
    "COMMIT_VARIABLE",
    "versions",
    "git",
    "last_commit",
    "modified",
    "environment",
    "record",
    "write",
    "recorded",
    "differences",
]

#: the packages whose versions every stored run records (the project's own first)
PACKAGES = ("grpo-identity", "numpy", "torch", "transformers")
#: the file a stored run's folder holds its provenance in
FILE = "provenance.json"
#: the folder this package's source tree sits in (the checkout's top level when run from one)
CHECKOUT = Path(__file__).resolve().parents[1]
#: the environment variable that names the commit where no git checkout can (a copied tree)
COMMIT_VARIABLE = "GRPO_IDENTITY_COMMIT"
#: seconds a git query may take before it counts as unanswered
_GIT_TIMEOUT = 10


def command_line(argv: Sequence[str], prog: str = "grpo-identity") -> str:
    """The shell command that runs ``prog`` with ``argv``, quoted so that ``shlex.split`` gives it back.

    >>> command_line(["train", "lm", "--out", "my runs/a"])
    "grpo-identity train lm --out 'my runs/a'"
    """
    return shlex.join([prog, *argv])


def versions(packages: Iterable[str] = PACKAGES) -> dict[str, str | None]:
    """Installed version of each package (None when it is not installed), read from its metadata."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in packages:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def git(*args: str, root: Path | None = None) -> str | None:
    """Output of ``git ARGS`` in ``root`` (default :data:`CHECKOUT`; stripped), or None when
    ``root`` is not the top of a git work tree (a pip install, a copy without ``.git``), git is
    missing or the command fails."""
    root = CHECKOUT if root is None else root
    try:
        run = lambda *a: subprocess.run(  # noqa: E731
            ["git", "-C", str(root), *a], capture_output=True, text=True, timeout=_GIT_TIMEOUT, check=True
        ).stdout.strip()
        top = run("rev-parse", "--show-toplevel")
        if not top or Path(top).resolve() != root.resolve():  # e.g. site-packages inside another repository
            return None
        return run(*args)
    except (OSError, subprocess.SubprocessError):
        return None


def _relative(paths: Iterable[str | Path], root: Path | None) -> list[str]:
    """``paths`` relative to ``root`` (default :data:`CHECKOUT`), as git takes them after ``--``."""
    top = (CHECKOUT if root is None else root).resolve()
    return [str(Path(p).resolve().relative_to(top)) if Path(p).is_absolute() else str(p) for p in paths]


def last_commit(paths: Iterable[str | Path], root: Path | None = None) -> str | None:
    """The latest commit that changed any of ``paths`` (``git log -1 --format=%H -- PATHS``), or
    None outside a checkout or when no commit has them yet."""
    try:
        rel = _relative(paths, root)
    except ValueError:  # a path outside the checkout: an installed copy, no commit of ours
        return None
    return git("log", "-1", "--format=%H", "--", *rel, root=root) or None


#: what a stored run writes: not part of what made its numbers (a run writing its own folder, or
#: another run's, leaves the code unmodified)
OUTPUTS = "results"


def modified(paths: Iterable[str | Path] | None = None, root: Path | None = None) -> bool | None:
    """Whether ``paths`` (None: the whole tree but :data:`OUTPUTS`) differ from the checkout's HEAD,
    untracked files included; None outside a checkout."""
    try:
        rel = ["--", ".", f":(exclude){OUTPUTS}"] if paths is None else ["--", *_relative(paths, root)]
    except ValueError:
        return None
    out = git("status", "--porcelain", *rel, root=root)
    return None if out is None else bool(out)


def environment() -> dict[str, Any]:
    """The running environment: python, the packages' versions, the project commit, the machine.

    Outside a checkout (an installed package, a copy without ``.git`` on another machine) the
    commit is ``$GRPO_IDENTITY_COMMIT`` when the caller sets it, and ``commit_note`` says so.
    """
    commit, note = git("rev-parse", "HEAD"), ""
    if commit is None:
        commit = os.environ.get(COMMIT_VARIABLE) or None
        note = f"no git checkout: the commit is ${COMMIT_VARIABLE}, as the caller set it" if commit else ""
        note = note or "not run from a git checkout of grpo-identity (an installed package, or a copy without .git)"
    return {
        "python": platform.python_version(),
        "versions": versions(),
        "commit": commit,
        "dirty": modified() if commit and not note else None,
        "commit_note": note,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "cpu": cpu(),
    }


def cpu() -> str:
    """The processor's model and the widest vector instructions it has (``AMD EPYC, AVX2``): torch picks its CPU
    kernels by them, so a seeded run that samples gives the same numbers only on the same kind of CPU.

    >>> isinstance(cpu(), str)
    True
    """
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    isa = next((name for flag, name in (("avx512f", "AVX512"), ("avx2", "AVX2"), ("avx", "AVX")) if flag in flags), "")
    return f"{model}, {isa}" if isa else model


def record(command: str | None) -> dict[str, Any]:
    """What a stored run records: the command that made it (None: started from Python, the
    run's config file describes it) with :func:`environment` and the time (UTC)."""
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    return {"command": command, **environment(), "created": now.isoformat()}


def write(folder: str | Path, command: str | None) -> Path:
    """Write :func:`record` as ``FOLDER/provenance.json``; return its path."""
    from grpo_identity.foundation import write_text_atomic

    path = Path(folder) / FILE
    write_text_atomic(path, json.dumps(record(command), indent=2) + "\n")
    return path


def recorded(folder: str | Path) -> list[dict[str, Any]]:
    """Every provenance record a stored run's folder holds: ``provenance.json``, else the
    frameworks' ``meta.json``, else the ``provenance`` entry of its JSON files (one per file) and
    the ``provenance.json`` of its subfolders (the seeds of a replication, one per seed)."""
    folder = Path(folder)
    for name in (FILE, "meta.json"):
        path = folder / name
        if path.is_file():
            body = json.loads(path.read_text())
            if isinstance(body, dict) and "versions" in body:
                return [body]
    found = []
    for path in sorted(folder.glob("*.json")):
        body = json.loads(path.read_text())
        if isinstance(body, dict) and isinstance(body.get("provenance"), dict):
            found.append(body["provenance"] | {"file": path.name})
    for path in sorted(folder.glob(f"*/{FILE}")):
        body = json.loads(path.read_text())
        if isinstance(body, dict) and "versions" in body:
            found.append(body | {"file": path.relative_to(folder).as_posix()})
    return found


def differences(stored: dict[str, Any], current: dict[str, Any] | None = None) -> list[str]:
    """What differs between a stored record and ``current`` (default: the running environment):
    python, the CPU where the record names one, and every package of :data:`PACKAGES` the record names, as
    ``'torch: A recorded, B here'``."""
    current = environment() if current is None else current
    pairs = [("python", stored.get("python"), current.get("python"))]
    if "cpu" in stored:  # recorded since runs that sample were seen to differ from one kind of CPU to another
        pairs.append(("cpu", stored["cpu"], current.get("cpu")))
    have, now = stored.get("versions") or {}, current.get("versions") or {}
    pairs += [(name, have[name], now.get(name)) for name in PACKAGES if name in have]
    return [f"{name}: {old} recorded, {new} here" for name, old, new in pairs if old != new]
