"""The project's one locked environment: make it, check it, read it, and watch today's index drift.

    python scripts/lock.py lock           # `make lock`: every extra resolved together into requirements.lock
    python scripts/lock.py check          # the lock still answers its inputs (pyproject.toml, constraints.txt …)
    python scripts/lock.py pin uv         # the lock's requirement of one package: uv==0.13.9
    python scripts/lock.py torch DIR      # the locked CPU torch wheel, fetched into DIR by this machine's pip
    python scripts/lock.py imports [X…]   # the extras' modules import here (pip check does not see a broken import)
    python scripts/lock.py fresh          # `make fresh-check`: today's index in throwaway venvs, then the fast tests

The lock is a hash-pinned requirements file compiled by ``uv pip compile`` for one interpreter and platform
(:data:`PYTHON`, :data:`PLATFORM`: the machines CI runs on), not uv's project lock (``uv.lock``): torch must be
the CPU build, which is not on PyPI, and ``uv.lock`` records where each package comes from, so it would name a
folder of one machine or PyPI's multi-GB CUDA build.  A requirements file records versions and hashes only; the
CPU wheel is found where this machine's pip finds ``torch==…+cpu`` (its configured folder or index, or the
PyTorch CPU index named in ``PIP_EXTRA_INDEX_URL``) and is checked against the locked hash.

The lock's header records a digest of every input it was resolved from (each dependency table of
pyproject.toml, constraints.txt, :data:`LEFT_OUT`, the target interpreter); ``check`` recomputes them and names
the first that changed, so a dependency added to pyproject.toml without ``make lock`` fails ``make setup`` and CI
in one line.
Only the standard library is used: ``check`` runs before any environment exists.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
#: the interpreter and platform the lock is resolved for (CI's machines); pymdown-extensions wants >= 3.11.5
PYTHON = "3.11.5"
PLATFORM = "x86_64-manylinux_2_28"
#: what `make setup` checks the interpreter against before it builds .venv
PYTHON_MINOR = (3, 11)
#: the index the lock and the fresh check resolve against (uv reads no pip configuration)
INDEX = "https://pypi.org/simple"
#: packages the lock leaves out although an extra of a dependency asks for them (uv's ``--override`` with a marker
#: that never holds).  rfc3987-syntax: jupyter-events (jupyter-server, under jupyter-server-mathjax, whose MathJax
#: files `render` serves) asks for jsonschema[format-nongpl], which brings it; jsonschema then builds its Lark grammar
#: at import, 2.8 s of the 3.5 s of ``import ray`` on a 2-core machine, paid by every Ray daemon and worker and every
#: verl import.  Without it jsonschema does not check the "iri" and "iri-reference" formats at all; nothing that
#: runs here asks for them (jupyter-events validates the event schemas of a Jupyter server, which never runs here).
LEFT_OUT = ("rfc3987-syntax",)
#: a module of each extra that must import, and the names that a lazy package loads only when touched
#: (``import trl`` passed on the machine where ``from trl import GRPOConfig`` failed, issue 27)
IMPORTS: dict[str, tuple[str, ...]] = {
    "base": ("numpy", "sympy", "mpmath", "hypothesis", "tqdm", "grpo_identity.app.cli"),
    "trainer": ("torch", "transformers:Trainer", "transformers:GPT2LMHeadModel", "grpo_identity.trainer.lm.train"),
    "notebooks": ("nbconvert", "nbclient", "nbformat", "jupytext", "matplotlib.pyplot", "ipykernel"),
    "data": ("pandas", "pyarrow"),
    "test": ("pytest", "xdist", "mypy", "jsonschema"),
    "docs": ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"),
    "frameworks": ("trl:GRPOConfig", "trl:GRPOTrainer", "verl.trainer.ppo.core_algos", "verl.trainer.ppo.ray_trainer"),
    "releases": ("uv",),
    "matrix": ("yaml", "grpo_identity.app.grid"),
    "ray": ("ray",),
}


class LockError(Exception):
    """Reported in one line, exit code 1."""


# --- inputs and their digests -------------------------------------------------------------------
def _pyproject(root: Path) -> dict:
    import tomllib

    return tomllib.loads((root / "pyproject.toml").read_text())


def _requirement_lines(path: Path) -> list[str]:
    return [ln.split("#", 1)[0].strip() for ln in path.read_text().splitlines() if ln.split("#", 1)[0].strip()]


def inputs(root: Path = ROOT) -> dict[str, object]:
    """Everything the lock is resolved from, by name (the order of a list is kept: it is what uv reads)."""
    data = _pyproject(root)
    project = data["project"]
    found: dict[str, object] = {
        "requires-python": project.get("requires-python", ""),
        "dependencies": project.get("dependencies", []),
        "build-system.requires": data.get("build-system", {}).get("requires", []),
        "constraints.txt": _requirement_lines(root / "constraints.txt"),
        "left-out": list(LEFT_OUT),
        "target": [PYTHON, PLATFORM],
    }
    for extra, reqs in sorted(project.get("optional-dependencies", {}).items()):
        found[f"optional-dependencies.{extra}"] = reqs
    return found


def digests(root: Path = ROOT) -> dict[str, str]:
    return {
        name: hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]
        for name, value in inputs(root).items()
    }


def _recorded(lock_text: str) -> dict[str, str]:
    return dict(re.findall(r"^# input (\S+) (\w+)$", lock_text, re.M))


def stale_inputs(root: Path = ROOT) -> list[str]:
    """The inputs whose digest differs from the one the lock recorded (added and removed ones too)."""
    lock = root / LOCK.name
    if not lock.is_file():
        raise LockError(f"{lock.name} is missing: run `make lock`")
    now, then = digests(root), _recorded(lock.read_text())
    return sorted(k for k in set(now) | set(then) if now.get(k) != then.get(k))


def check(
    root: Path = ROOT, python: tuple[int, ...] | None = None, machine: str | None = None, system: str | None = None
) -> str:
    """One line saying the lock is current and fits this interpreter; :class:`LockError` otherwise (the interpreter
    first: Python 3.10 has no tomllib to read pyproject.toml with)."""
    python = python or sys.version_info[:3]
    machine, system = machine or platform.machine(), system or platform.system()
    lowest = tuple(int(x) for x in PYTHON.split("."))
    fits = tuple(python[:2]) == PYTHON_MINOR and tuple(python[:3]) >= lowest
    if not fits or system != "Linux" or machine not in ("x86_64", "AMD64"):
        this = f"Python {'.'.join(map(str, python))} on {system} {machine}"
        raise LockError(
            f"{LOCK.name} is for CPython >= {PYTHON} ({PYTHON_MINOR[0]}.{PYTHON_MINOR[1]}) on Linux x86_64, this is "
            f"{this}: run make with PYTHON=python{PYTHON_MINOR[0]}.{PYTHON_MINOR[1]}, or install unlocked with "
            "pip install -e '.[all,frameworks]'"
        )
    changed = stale_inputs(root)
    if changed:
        where = ", ".join(_where(k) for k in changed[:3]) + (" …" if len(changed) > 3 else "")
        raise LockError(
            f"{LOCK.name} is stale: {where} changed since it was made; run `make lock` and commit {LOCK.name}"
        )
    return f"{LOCK.name} is current ({len(pins(root))} packages)"


def _where(name: str) -> str:
    if name == "constraints.txt":
        return "constraints.txt"
    if name == "left-out":
        return "scripts/lock.py LEFT_OUT"
    if name == "target":
        return "the target interpreter (scripts/lock.py PYTHON/PLATFORM)"
    return f"pyproject.toml's {name}"


def pins(root: Path = ROOT) -> dict[str, str]:
    """package name (normalised) -> the locked ``name==version`` line."""
    out = {}
    for m in re.finditer(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", (root / LOCK.name).read_text(), re.M):
        out[_norm(m.group(1))] = f"{m.group(1)}=={m.group(2)}"
    return out


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pin(name: str, root: Path = ROOT) -> str:
    found = pins(root).get(_norm(name))
    if found is None:
        raise LockError(f"{name} is not in {LOCK.name}")
    return found


# --- making the lock ----------------------------------------------------------------------------
def _uv() -> str:
    here = Path(sys.executable).parent / "uv"
    found = str(here) if here.exists() else shutil.which("uv")
    if not found:
        raise LockError("uv is not installed: `make setup` installs the locked one into .venv")
    return found


def _run(cmd: list[str], what: str, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        raise LockError(f"{what}: {' / '.join(lines[-4:]) if lines else f'exit code {proc.returncode}'}")
    return proc


def torch_wheels(dest: Path, requirement: str) -> Path:
    """The CPU torch wheel, fetched into ``dest`` from wherever this machine's pip finds it (a local
    folder, an index); uv reads no pip configuration, so it gets the folder as ``--find-links``."""
    dest.mkdir(parents=True, exist_ok=True)
    _run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(dest), requirement],
        f"pip finds no {requirement} (the CPU build) here; elsewhere set "
        "PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu",
    )
    return dest


def compile_lock(out: Path, root: Path = ROOT, *, exclude_newer: str | None, wheels: Path) -> None:
    """``uv pip compile`` of every extra and the build requirements, for :data:`PYTHON` on :data:`PLATFORM`."""
    data = _pyproject(root)
    extras = sorted(data["project"].get("optional-dependencies", {}))
    with tempfile.TemporaryDirectory() as tmp:
        build = Path(tmp) / "build-system.in"
        build.write_text("\n".join(data.get("build-system", {}).get("requires", [])) + "\n")
        overrides = Path(tmp) / "left-out.txt"
        overrides.write_text("".join(f"{name}; sys_platform == 'never'\n" for name in LEFT_OUT))
        cmd = [_uv(), "pip", "compile", "pyproject.toml", str(build), "--quiet", "--no-header", "--generate-hashes"]
        cmd += [a for e in extras for a in ("--extra", e)]
        cmd += ["-c", "constraints.txt", "--override", str(overrides)]
        cmd += ["--python-version", PYTHON, "--python-platform", PLATFORM]
        cmd += ["--index-url", INDEX, "--find-links", str(wheels), "--no-annotate", "-o", str(out)]
        if exclude_newer:
            cmd += ["--exclude-newer", exclude_newer]
        _run(cmd, "uv could not resolve the extras together", cwd=root)


def header(root: Path, resolved: str, uv_version: str) -> str:
    lines = [
        f"# {LOCK.name}: every extra of grpo-identity resolved together, with hashes (scripts/lock.py).",
        "# Made by `make lock`; never edit it by hand: change pyproject.toml, constraints.txt or LEFT_OUT, then "
        "`make lock`.",
        f"# left out (scripts/lock.py LEFT_OUT, the reason there): {', '.join(LEFT_OUT)}",
        "# `make setup` installs exactly this (uv pip sync); `make setup` and CI refuse it once an input changed.",
        f"# resolved: {resolved} against {INDEX} with {uv_version}",
        f"# for: CPython >= {PYTHON} ({PYTHON_MINOR[0]}.{PYTHON_MINOR[1]}), {PLATFORM}",
    ]
    lines += [f"# input {k} {v}" for k, v in digests(root).items()]
    return "\n".join(lines) + "\n"


def make_lock(root: Path = ROOT, upgrade: bool = False) -> str:
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
    torch = next(r for r in _requirement_lines(root / "constraints.txt") if r.startswith("torch=="))
    with tempfile.TemporaryDirectory() as tmp:
        wheels = torch_wheels(Path(tmp) / "wheels", _cpu(torch))
        body = Path(tmp) / "body.txt"
        if (root / LOCK.name).is_file() and not upgrade:  # uv keeps the locked versions where they still resolve:
            body.write_text((root / LOCK.name).read_text())  # a new extra or pin changes what it needs, not the rest
        compile_lock(body, root, exclude_newer=now, wheels=wheels)
        uv_version = _run([_uv(), "--version"], "uv --version").stdout.split("(")[0].strip()
        text = header(root, now, uv_version) + body.read_text()
    (root / LOCK.name).write_text(text)
    return f"{LOCK.name}: {len(pins(root))} packages, {len(text) // 1024} KiB, resolved {now}"


def _cpu(torch_pin: str) -> str:
    """``torch==2.13.0`` -> ``torch==2.13.0+cpu``: the CPU build, never PyPI's CUDA one."""
    return torch_pin if "+" in torch_pin else f"{torch_pin}+cpu"


# --- the import check ---------------------------------------------------------------------------
def check_imports(extras: list[str]) -> list[str]:
    """Import what each extra promises; the failures, one line each (module: error)."""
    import importlib

    failed = []
    for extra in extras or list(IMPORTS):
        for item in IMPORTS[extra]:
            module, _, attr = item.partition(":")
            try:
                mod = importlib.import_module(module)
                if attr:
                    getattr(mod, attr)
            except Exception as exc:  # a lazy package raises RuntimeError, ValueError … on first touch
                cause = exc.__cause__ or exc
                failed.append(f"[{extra}] {item}: {type(cause).__name__}: {str(cause).splitlines()[0][:200]}")
    return failed


# --- the fresh check ----------------------------------------------------------------------------
def _versions(text: str) -> dict[str, str]:
    return {_norm(m[0]): m[1] for m in re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", text, re.M)}


def drift(locked: str, today: str) -> list[str]:
    """What today's resolution changes against the lock: ``name a -> b``, ``+name b``, ``-name a``."""
    a, b = _versions(locked), _versions(today)
    out = [f"{n} {a[n]} -> {b[n]}" for n in sorted(set(a) & set(b)) if a[n] != b[n]]
    out += [f"+{n} {b[n]}" for n in sorted(set(b) - set(a))]
    out += [f"-{n} {a[n]}" for n in sorted(set(a) - set(b))]
    return out


def fresh(root: Path, folder: Path, tests: bool) -> int:
    """Resolve the extras against today's index into a throwaway venv, import every extra, run the fast
    tests there; then install the ``frameworks`` and ``trainer`` extras with pip, one step each, as a pip
    user would.  Prints what it found; exit 0 when nothing broke."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    torch = next(r for r in _requirement_lines(root / "constraints.txt") if r.startswith("torch=="))
    wheels = torch_wheels(folder / "wheels", _cpu(torch))
    today = folder / "today.lock"
    compile_lock(today, root, exclude_newer=None, wheels=wheels)
    changes = drift((root / LOCK.name).read_text(), today.read_text())
    print(f"today's index against {LOCK.name}: {len(changes)} changes")
    for line in changes:
        print(f"  {line}")
    failures = 0
    venv = folder / "venv"
    py = str(venv / "bin" / "python")
    _run([_uv(), "venv", "-q", "--python", sys.executable, str(venv)], "uv venv")
    sync = [_uv(), "pip", "sync", "-q", "--python", py, "--compile-bytecode", "--find-links", str(wheels), str(today)]
    _run(sync, "uv pip sync")
    _run([_uv(), "pip", "install", "-q", "--python", py, "--no-deps", "--no-build-isolation", "-e", str(root)], "-e .")
    failures += _report("all extras, today's resolution", [py, __file__, "imports"])
    if tests:
        cmd = [py, "-m", "pytest", "-q", "-n", "auto", "--dist", "loadgroup", "-m", "not slow"]
        proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
        tail = [ln for ln in proc.stdout.splitlines() if ln.strip()][-1:] or ["no output"]
        print(f"fast tests under today's resolution: {tail[0]}")
        failures += proc.returncode != 0
    for extra in ("frameworks", "trainer"):
        env = folder / f"pip-{extra}"
        _run([sys.executable, "-m", "venv", str(env)], "venv")
        pip = [str(env / "bin" / "python"), "-m", "pip", "install", "-q", "-c", str(root / "constraints.txt")]
        try:
            _run([*pip, f"{root}[{extra}]"], f"pip install '.[{extra}]' in one step")
        except LockError as exc:
            print(f"pip install '.[{extra}]': {exc}")
            failures += 1
            continue
        failures += _report(f"pip install '.[{extra}]'", [str(env / "bin" / "python"), __file__, "imports", extra])
    print("fresh check: " + ("nothing broke" if not failures else f"{failures} step(s) broke (above)"))
    return 0 if not failures else 1


def _report(what: str, cmd: list[str]) -> int:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    print(f"{what}: {'imports' if proc.returncode == 0 else 'BROKEN'}")
    for line in proc.stdout.splitlines():
        print(f"  {line}")
    return int(proc.returncode != 0)


# --- the command line ---------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    lk = sub.add_parser("lock", help="resolve every extra together into requirements.lock (make lock)")
    lk.add_argument("--upgrade", action="store_true", help="today's newest releases, not the locked versions kept")
    sub.add_parser("check", help="the lock still answers its inputs and fits this interpreter")
    sub.add_parser("pin", help="the lock's requirement of one package").add_argument("name")
    sub.add_parser("imports", help="the extras' modules import here").add_argument("extras", nargs="*")
    sub.add_parser("torch", help="fetch the locked CPU torch wheel into FOLDER (for uv)").add_argument("folder")
    f = sub.add_parser("fresh", help="today's index in throwaway venvs, then the fast tests (make fresh-check)")
    f.add_argument("--folder", default=str(ROOT / "build" / "fresh"))
    f.add_argument("--no-tests", action="store_true")
    args = parser.parse_args(argv)
    try:
        if args.what == "lock":
            print(make_lock(upgrade=args.upgrade))
        elif args.what == "check":
            print(check())
        elif args.what == "pin":
            print(pin(args.name))
        elif args.what == "torch":
            torch_wheels(Path(args.folder), pin("torch"))
        elif args.what == "imports":
            unknown = [e for e in args.extras if e not in IMPORTS]
            if unknown:
                raise LockError(f"no extra {unknown[0]!r}: one of {', '.join(IMPORTS)}")
            failed = check_imports(args.extras)
            for line in failed:
                print(line)
            return 1 if failed else 0
        else:
            return fresh(ROOT, Path(args.folder), tests=not args.no_tests)
    except LockError as exc:
        print(f"{Path(__file__).name} {args.what}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
