"""Cached environments for auditing any release of a framework without touching the user's own.

``ensure("trl", "0.22.0")`` creates (once) a virtual environment under :func:`env_root`
(``$GRPO_IDENTITY_ENVS``, else ``~/.cache/grpo-identity/envs``), installs that release there with
pip under the project's torch pin (``torch==2.13.0`` on the same command line, and constraints that
refuse ``vllm`` and ``flash-attn`` outright, so no CUDA stack can be pulled), plus the pins the
release needs (:data:`RELEASE_PINS`: e.g. TRL before 1.0 imports vLLM under transformers 5), and
returns its interpreter.  The environment is layered over the project's own: its site-packages
come first, and what it does not install itself (torch, numpy, this project) is found in the
project's environment, which pip never writes to from there.  Which project environment is not
baked into the release's: its ``.pth`` line reads :data:`BASE_SITE_VAR`, which
:func:`child_environ` sets to the running interpreter's site-packages, so one cached release
serves every clone and virtual environment that uses it (and a deleted one leaves nothing stale).
The audit's child process then runs under that interpreter with that environment.

>>> release_pins("trl", "0.22.0")
['transformers>=4.56.1,<4.57']
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

__all__ = [
    "BASE_SITE_VAR",
    "NO_DEPS",
    "RELEASE_PINS",
    "TORCH_PIN",
    "child_environ",
    "env_root",
    "env_dir",
    "install_commands",
    "no_deps",
    "release_pins",
    "ensure",
    "ReleaseEnv",
]

#: the project's torch (this machine's CPU wheel); named on every pip command line
TORCH_PIN = "torch==2.13.0"
#: packages that must never be installed (a CUDA stack): a constraint no release satisfies
NEVER = ("vllm===never-install", "flash-attn===never-install", "flash_attn===never-install")
#: the variable through which a release's environment finds the project's site-packages
BASE_SITE_VAR = "GRPO_IDENTITY_BASE_SITE"
#: the release environment's ``.pth`` line: add the site-packages the variable names, if any
_BASE_PTH = f"import os, site; _b = os.environ.get({BASE_SITE_VAR!r}); _b and site.addsitedir(_b)\n"
#: (framework, first release, first release no longer needing them) -> extra requirements
RELEASE_PINS: dict[tuple[str, str, str], tuple[str, ...]] = {
    # TRL 0.x imports trl/extras/vllm_client.py, which wants vllm under transformers 5; releases before 0.17
    # run under the transformers of their time (4.56's Trainer calls _get_train_sampler(dataset), which
    # 0.16's override does not take)
    ("trl", "0.0", "0.17"): ("transformers>=4.50,<4.52",),
    ("trl", "0.17", "0.23"): ("transformers>=4.56.1,<4.57",),
    ("trl", "0.23", "1.0"): ("transformers<5",),
    # verl before 0.8 imports transformers names that 5.x removed (AutoModelForVision2Seq), and
    # pins numpy < 2, which the newest pyarrow (and the datasets built on it) no longer import with
    ("verl", "0.0", "0.8"): ("transformers<5", "pyarrow<21", "datasets<4"),
    # the trainer module (ray_trainer) imports these beyond verl's declared requirements
    ("verl", "0.0", "99"): ("cachetools", "uvicorn", "fastapi", "pillow", "torchdata"),
    # what ``import areal.trainer.ppo.actor`` / ``areal.api.cli_args`` needs (areal/__init__ imports
    # its whole infra: loggers, stats backends, the launcher), at AReaL's own pins where it has them
    ("areal", "0.0", "99"): (
        "omegaconf==2.4.0.dev2",
        "hydra-core==1.4.0.dev1",
        "colorlog",
        "tenacity",
        "flask",
        "uvloop>=0.21.0",
        "numba",
        "einops",
        "aiofiles",
        "openai",
        "swanlab==0.6.12",
        "trackio",
        "tensorboardX",
        "tabulate",
        "pybase64",
    ),
    # OpenRLHF goes in with --no-deps (it requires flash-attn); what its experience maker and its
    # train_ppo_ray module import, at the versions 0.11.2 declares (ray without [default]: no dashboard)
    ("openrlhf", "0.0", "99"): ("ray", "deepspeed", "transformers", "peft", "pylatexenc", "aiohttp"),
    ("openrlhf", "0.10", "0.11"): ("ray==2.48.0", "deepspeed==0.18.9", "transformers==5.5.4"),
    ("openrlhf", "0.11", "0.12"): ("ray==2.55.0", "deepspeed==0.19.6", "transformers==5.15.0"),
}
#: (framework, first release, first release no longer needing it) -> packages installed with
#: ``--no-deps`` beside the release, which itself then goes in with ``--no-deps`` too: for
#: frameworks whose declared requirements cannot install here (a CUDA stack, another torch).
#: What they do need is then listed in :data:`RELEASE_PINS` (installed with their dependencies,
#: under the same constraints).
NO_DEPS: dict[tuple[str, str, str], tuple[str, ...]] = {
    # AReaL declares torch<2.11 and ~80 requirements (agent SDKs, litellm, openhands, sglang's
    # stack); its advantage path needs only what RELEASE_PINS lists
    ("areal", "0.0", "99"): (),
    # OpenRLHF declares flash-attn==2.8.3 (CUDA only) and vllm in extras; torchdata's own
    # requirements would resolve torch again
    ("openrlhf", "0.0", "99"): ("torchdata",),
}


def _key(v: str) -> tuple[int, ...]:
    out = []
    for part in v.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def release_pins(framework: str, release: str) -> list[str]:
    """The extra requirements :data:`RELEASE_PINS` lists for ``framework`` at ``release``."""
    return [
        p
        for (fw, lo, hi), pins in RELEASE_PINS.items()
        if fw == framework and _key(lo) <= _key(release) < _key(hi)
        for p in pins
    ]


def no_deps(framework: str, release: str) -> list[str] | None:
    """The packages :data:`NO_DEPS` installs without dependencies beside ``framework==release``,
    or None when the release installs with its own declared requirements."""
    rows = [pins for (fw, lo, hi), pins in NO_DEPS.items() if fw == framework and _key(lo) <= _key(release) < _key(hi)]
    return None if not rows else [p for pins in rows for p in pins]


def install_commands(framework: str, release: str, python: str, constraints: str) -> list[list[str]]:
    """The pip command lines that install ``framework==release`` into a release environment."""
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-c", constraints]
    requirement, extra = f"{framework}=={release}", release_pins(framework, release)
    bare = no_deps(framework, release)
    if bare is None:
        return [[*pip, TORCH_PIN, requirement, *extra]]
    return [[*pip, "--no-deps", requirement, *bare], [*pip, TORCH_PIN, *extra]]


def env_root() -> Path:
    """Where release environments live: ``$GRPO_IDENTITY_ENVS``, else the project's cache folder
    (``~/.cache/grpo-identity/envs``)."""
    from grpo_identity.foundation import cache_dir

    return Path(os.environ.get("GRPO_IDENTITY_ENVS") or cache_dir("envs"))


def env_dir(framework: str, release: str) -> Path:
    """The environment of one release (``trl-0.22.0``)."""
    return env_root() / f"{framework}-{release}"


@dataclass(frozen=True)
class ReleaseEnv:
    """A ready environment: the framework, the release, its interpreter."""

    framework: str
    release: str
    python: str


def child_environ() -> dict[str, str]:
    """The environment for a child under a release's interpreter: this one's, plus where the
    project's site-packages are (the ones this interpreter runs from)."""
    return {**os.environ, BASE_SITE_VAR: sysconfig.get_paths()["purelib"]}


def _link_base(python: Path) -> None:
    """(Re)write the release environment's ``.pth`` line (cheap; also updates environments made
    by earlier versions, which named one project environment's path); atomically, so a child
    starting meanwhile reads the old line or the new one."""
    from grpo_identity.checks.frameworks import AdapterError

    proc = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise AdapterError(
            f"the release environment's interpreter {python} does not run (remove {python.parent.parent} to rebuild it)"
        )
    pth = Path(proc.stdout.strip()) / "_grpo_identity_base.pth"
    if not pth.is_file() or pth.read_text() != _BASE_PTH:
        tmp = pth.with_name(f".{pth.name}.{os.getpid()}")
        tmp.write_text(_BASE_PTH)
        os.replace(tmp, pth)


@contextlib.contextmanager
def _locked(env: Path) -> Iterator[None]:
    """One process at a time checks and builds ``env`` (an advisory lock beside it; another
    audit of the same release waits for the build instead of clearing it halfway).  A lock whose
    environment was not built (the build failed) is removed with it."""
    env.parent.mkdir(parents=True, exist_ok=True)
    lock = env.parent / f".{env.name}.lock"
    while True:
        fh = open(lock, "a")
        try:
            import fcntl

            fcntl.flock(fh, fcntl.LOCK_EX)
        except ImportError:  # no fcntl (Windows): unlocked
            break
        try:  # the file locked is still the lock's file (not one a failed build removed meanwhile)
            if os.fstat(fh.fileno()).st_ino == os.stat(lock).st_ino:
                break
        except FileNotFoundError:
            pass
        fh.close()
    try:
        yield
    finally:
        if not env.exists():
            lock.unlink(missing_ok=True)
        fh.close()


def _recipe(framework: str, release: str) -> str:
    """What the stamp records: the pip commands that build the environment (a change in the pins
    rebuilds it instead of reusing one that no longer matches)."""
    return (
        "\n".join(" ".join(cmd[1:]) for cmd in install_commands(framework, release, "python", "constraints.txt")) + "\n"
    )


def _python_of(env: Path) -> Path:
    return env / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure(framework: str, release: str, *, log: Any = None) -> ReleaseEnv:
    """The cached environment of ``framework==release``, created on first use.

    Raises :class:`~grpo_identity.checks.frameworks.AdapterError` (a usage error) when pip cannot
    install the release here (no such version, a requirement no offline index holds, a CUDA stack).
    """
    from grpo_identity.checks.frameworks import FRAMEWORKS, AdapterError

    if framework not in FRAMEWORKS:
        raise AdapterError(f"--release applies to {', '.join(FRAMEWORKS)}, not {framework!r}")
    if not release or not all(ch.isalnum() or ch in ".+-" for ch in release):
        raise AdapterError(f"--release: {release!r} is no version number")
    env = env_dir(framework, release)
    python = _python_of(env)
    stamp = env / ".grpo-identity-ready"
    with _locked(env):
        if stamp.is_file() and python.is_file() and stamp.read_text() == _recipe(framework, release):
            _link_base(python)
            return ReleaseEnv(framework, release, str(python))
        out = log if log is not None else sys.stderr
        print(f"creating the environment of {framework} {release} in {env} (once; pip, a few minutes)", file=out)
        try:
            _build(env, framework, release)
        except BaseException:  # a failed or interrupted build leaves nothing half-made behind
            shutil.rmtree(env, ignore_errors=True)
            raise
        stamp.write_text(_recipe(framework, release))
    return ReleaseEnv(framework, release, str(python))


def _build(env: Path, framework: str, release: str) -> None:
    python = _python_of(env)
    _run(
        [sys.executable, "-m", "venv", "--clear", str(env)], f"creating a virtual environment for {framework} {release}"
    )
    _link_base(python)  # the project's environment, below the release's own packages
    constraints = env / "constraints.txt"
    constraints.write_text("\n".join([TORCH_PIN, *NEVER]) + "\n")
    requirement = f"{framework}=={release}"
    for cmd in install_commands(framework, release, str(python), str(constraints)):
        _run(cmd, f"pip could not install {requirement} here")
    driver = f"grpo_identity.checks.frameworks.{framework}"
    check = f"import warnings; warnings.filterwarnings('ignore'); import {driver} as d; d.import_check()"
    _run([str(python), "-c", check], f"{requirement} installed but does not import here")


def _run(cmd: list[str], what: str) -> None:
    from grpo_identity.checks.frameworks import AdapterError

    proc = subprocess.run(cmd, capture_output=True, text=True, env=child_environ())
    if proc.returncode != 0:
        lines = [
            ln
            for ln in (proc.stderr + proc.stdout).splitlines()
            if ln.strip() and not ln.startswith("WARNING: Location")
        ]
        raise AdapterError(f"{what}: {lines[-1].strip() if lines else f'exit code {proc.returncode}'}")
