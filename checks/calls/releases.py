"""Cached environments for auditing any release of a framework without touching the user's own.

``ensure("trl", "0.22.0")`` creates (once) a virtual environment under :func:`env_root`
(``$GRPO_IDENTITY_ENVS``, else ``~/.cache/grpo-identity/envs``) and returns its interpreter.  The environment
is **complete on its own**: the release, its dependencies, the pins it needs (:data:`RELEASE_PINS`), this
project's own requirements (numpy, sympy, hypothesis …) and torch, all installed there.  Nothing of the venv
that asked for it is read, so one environment serves every install of this project (a clone, a second venv,
a wheel), and a package that happens to be installed in the caller's venv cannot break the release's imports.
This project's code itself is linked in at run time: :func:`child_environ` names the folders of the running
``grpo_identity`` package in :data:`PACKAGE_VAR`, and a ``.pth`` line in the environment imports exactly
those (:data:`LINK_MODULE`), never the caller's other packages.

**Resolved as of the release** (:func:`resolution_plans`): uv installs with ``--exclude-newer`` set to the
end of the day the release was uploaded (read from the index's JSON API, PEP 691/700), so an old release
runs beside the libraries of its day, not today's.  When that cannot be resolved, the packages that
:data:`RELEASE_PINS` names are exempted from the date (their pins say which versions on purpose); when
that fails too, or the date cannot be read, today's index is used and the environment says so.  torch is
always this machine's CPU build (:data:`TORCH_PIN`, fetched by pip from where this machine keeps it); no
CUDA stack can be pulled (:data:`NEVER`).  uv is asked to compile what it installs to bytecode (pip does by
default): where ``PYTHONDONTWRITEBYTECODE`` is set (CI images often set it) nothing else would, and every child
would compile torch and the framework from source on each start (TRL's imports: 13–15 s instead of 5–6 s).
Without uv (``pip install 'grpo-identity[releases]'``) pip installs from today's index, again with a note.

The folder's name carries a digest of the recipe and the resolution date (:func:`env_key`), so a change
in either builds a new environment instead of reusing one that no longer matches; each records how it
was made in ``environment.json`` (date, method, resolved versions), which the audit's report carries
(``target_info["environment"]``).  ``grpo-identity envs list|prune`` shows and removes them.

>>> release_pins("trl", "0.22.0")
['transformers>=4.56.1,<4.57']
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from grpo_identity.checks.frameworks.registry import FRAMEWORK_TABLE, no_deps_table, pins_table, release_key

__all__ = [
    "NO_DEPS",
    "PACKAGE_VAR",
    "RELEASE_PINS",
    "TORCH_PIN",
    "Plan",
    "ReleaseEnv",
    "child_environ",
    "ensure",
    "env_dir",
    "env_key",
    "env_root",
    "install_commands",
    "list_envs",
    "listed",
    "no_deps",
    "package_map",
    "prune",
    "python_mismatch",
    "release_pins",
    "resolution_plans",
]

#: the project's torch (this machine's CPU wheel, ``+cpu``); never PyPI's CUDA build
TORCH_PIN = "torch==2.13.0"
#: packages that must never be installed (a CUDA stack): a constraint no release satisfies
NEVER = ("vllm<0", "flash-attn<0")
#: the variable through which a release's environment finds the running project's package folders
PACKAGE_VAR = "GRPO_IDENTITY_PACKAGE"
#: pyproject's package-dir: the subpackages that live in folders of their own (a test checks they agree)
MAPPED_SUBPACKAGES = ("proofs", "checks", "trainer")
#: what the recipe of an environment means; raise it when the way environments are built changes
#: (4: installed compiled to bytecode)
RECIPE_VERSION = 4
#: what runs an exported test pack (grpo-identity export-tests) in the environment: pytest, as of the release
TEST_RUNNER = ("pytest>=8",)
#: the index whose JSON API tells a release's upload time (PEP 691/700)
SIMPLE_INDEX = "https://pypi.org/simple"
#: no date: the exemption of a package from ``--exclude-newer``
FAR_FUTURE = "2999-01-01T00:00:00Z"
#: (framework, first release, first release no longer needing them) -> extra requirements (each framework's
#: :attr:`~grpo_identity.checks.frameworks.registry.FrameworkEntry.pins`, where they are written and explained)
RELEASE_PINS: dict[tuple[str, str, str], tuple[str, ...]] = pins_table()
#: (framework, first release, first release no longer needing it) -> packages installed with ``--no-deps`` beside
#: the release, which itself then goes in with ``--no-deps`` too (each framework's ``no_deps``); what they do need
#: is then listed in :data:`RELEASE_PINS` (installed with their dependencies, under the same constraints).
NO_DEPS: dict[tuple[str, str, str], tuple[str, ...]] = no_deps_table()

#: the module a release environment imports at start-up (its ``.pth`` line): it puts the folders that
#: :data:`PACKAGE_VAR` names (``{"grpo_identity": folder, "grpo_identity.checks": folder, …}``) in front of
#: the import system for those names only
LINK_MODULE = '''"""Written by grpo-identity (checks/calls/releases.py): the running project's package, linked in."""
import importlib.abc
import importlib.util
import json
import os
import sys


class _ProjectFolders(importlib.abc.MetaPathFinder):
    def __init__(self, folders):
        self.folders = folders

    def find_spec(self, name, path=None, target=None):
        folder = self.folders.get(name)
        if folder is None:
            return None
        init = os.path.join(folder, "__init__.py")
        return importlib.util.spec_from_file_location(name, init, submodule_search_locations=[folder])


_raw = os.environ.get("GRPO_IDENTITY_PACKAGE")
if _raw:
    sys.meta_path.insert(0, _ProjectFolders(json.loads(_raw)))
'''
_PTH = "import _grpo_identity_link\n"


# --- what goes in ---------------------------------------------------------------------------------
def release_pins(framework: str, release: str) -> list[str]:
    """The extra requirements :data:`RELEASE_PINS` lists for ``framework`` at ``release``."""
    return [
        p
        for (fw, lo, hi), pins in RELEASE_PINS.items()
        if fw == framework and release_key(lo) <= release_key(release) < release_key(hi)
        for p in pins
    ]


def no_deps(framework: str, release: str) -> list[str] | None:
    """The packages :data:`NO_DEPS` installs without dependencies beside ``framework==release``,
    or None when the release installs with its own declared requirements."""
    key = release_key(release)
    rows = [
        pins for (fw, lo, hi), pins in NO_DEPS.items() if fw == framework and release_key(lo) <= key < release_key(hi)
    ]
    return None if not rows else [p for pins in rows for p in pins]


def project_requirements() -> list[str]:
    """This project's own runtime requirements (its metadata's, without the extras'): the environment
    runs this project's code, so it holds them itself."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        reqs = requires("grpo-identity") or []
    except PackageNotFoundError:
        from grpo_identity.checks.frameworks import AdapterError

        raise AdapterError("grpo-identity is not installed (pip install .): its requirements are unknown") from None
    return sorted(r.split(";")[0].strip() for r in reqs if "extra ==" not in r and "extra==" not in r)


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].strip().lower().replace("_", "-")


def install_commands(framework: str, release: str, installer: list[str], constraints: str) -> list[list[str]]:
    """The install command lines (``installer`` is ``[uv, pip, install, --python, PY, …]`` or pip's) that
    put ``framework==release`` into an environment: the release with its declared requirements, or (a
    :data:`NO_DEPS` framework) the release without them, then what it needs."""
    cmd = [*installer, "-c", constraints]
    requirement, extra = f"{framework}=={release}", release_pins(framework, release)
    ours = [*project_requirements(), *TEST_RUNNER]
    bare = no_deps(framework, release)
    if bare is None:
        return [[*cmd, TORCH_PIN, requirement, *extra, *ours]]
    return [[*cmd, "--no-deps", requirement, *bare], [*cmd, TORCH_PIN, *extra, *ours]]


# --- how it is resolved ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """One way of resolving an environment: uv as of a date (some packages exempt), or today's index."""

    method: str
    """'as of the release' | 'as of the release, pins exempt' | "today's index" | "today's index (pip)"."""
    as_of: str | None = None
    exempt: tuple[str, ...] = ()
    note: str | None = None

    def options(self) -> list[str]:
        if self.as_of is None:
            return []
        return ["--exclude-newer", self.as_of] + [a for p in self.exempt for a in ("--exclude-newer-package", p)]


def _exclude_newer(uploaded: str) -> str:
    """The end of the (UTC) day a release was uploaded: what the release's own day could install."""
    day = dt.datetime.fromisoformat(uploaded.replace("Z", "+00:00")).astimezone(dt.timezone.utc).date()
    return (day + dt.timedelta(days=1)).strftime("%Y-%m-%dT00:00:00Z")


def resolution_plans(framework: str, release: str, uploaded: str | None, uv: bool) -> list[Plan]:
    """The ways to resolve, in the order they are tried (the first that installs is kept)."""
    if not uv:
        why = "uv is not installed (pip install 'grpo-identity[releases]'): resolved against today's index"
        return [Plan("today's index (pip)", note=why)]
    if uploaded is None:
        why = f"the upload date of {framework} {release} could not be read: resolved against today's index"
        return [Plan("today's index", note=why)]
    as_of = _exclude_newer(uploaded)
    pinned = sorted({_name(p) for p in release_pins(framework, release)} | {"torch"})
    exempt = tuple(f"{p}={FAR_FUTURE}" for p in pinned)
    return [
        Plan("as of the release", as_of, ("torch=" + FAR_FUTURE,)),
        Plan(
            "as of the release, pins exempt",
            as_of,
            exempt,
            f"resolved as of {as_of[:10]} except {', '.join(pinned)} (pinned on purpose, newer than the release)",
        ),
        Plan(
            "today's index",
            note=f"could not be resolved as of {as_of[:10]} (the release's day): resolved against today's index",
        ),
    ]


def upload_time(framework: str, release: str, *, timeout: float = 15.0) -> str | None:
    """When ``framework==release`` was uploaded (its first file; ISO 8601), from the index's JSON API,
    cached in the environments' folder (an upload time never changes); None when it cannot be read."""
    cache = env_root() / "upload-times.json"
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    key = f"{framework}=={release}"
    if key in known:
        return known[key]
    found = _fetch_upload_time(framework, release, timeout)
    if found is not None:
        known[key] = found
        _write_atomic(cache, json.dumps(known, indent=1, sort_keys=True))
    return found


def _fetch_upload_time(framework: str, release: str, timeout: float) -> str | None:
    times = sorted(f["upload-time"] for f in _release_files(framework, release, timeout) if f.get("upload-time"))
    return times[0] if times else None


def _index_files(framework: str, timeout: float) -> list[dict[str, Any]] | None:
    """The index's entries (PEP 691/700) for every file of ``framework``; None where it cannot be read (offline,
    no such project, an index without the JSON API)."""
    import urllib.request

    url = f"{_index_url()}/{framework}/"
    request = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            files = json.load(response).get("files", [])
    except Exception:
        return None
    return [f for f in files if isinstance(f, dict)] if isinstance(files, list) else None


def _index_url() -> str:
    return os.environ.get("GRPO_IDENTITY_SIMPLE_INDEX", SIMPLE_INDEX).rstrip("/")


def _file_pattern(framework: str, release: str) -> re.Pattern[str]:
    """A release's file names: ``release`` a regular expression (``[^-]+?`` for any release), the first group."""
    name = "[-_.]".join(re.escape(part) for part in re.split(r"[-_.]+", framework))  # ms-swift: ms_swift-4.6.0-…whl
    return re.compile(rf"^{name}-({release})(\.tar\.gz|\.zip|-.+\.whl)$", re.I)


def _release_files(framework: str, release: str, timeout: float) -> list[dict[str, Any]]:
    """The index's entries for the files of ``framework==release``; none when it cannot be read."""
    pattern = _file_pattern(framework, re.escape(release))
    return [f for f in _index_files(framework, timeout) or [] if pattern.match(str(f.get("filename", "")))]


def listed(framework: str, release: str, *, timeout: float = 15.0) -> str:
    """The index's spelling of ``release`` (``1.16`` → ``1.16.0``: one environment per release, made as of its
    upload), or ``release`` itself where the index cannot be read.  Raises
    :class:`~grpo_identity.checks.frameworks.AdapterError` where the index lists no file of it, naming the newest
    releases it does list, before an environment is begun."""
    from grpo_identity.checks.frameworks import AdapterError
    from grpo_identity.checks.frameworks.registry import release_key

    pattern = _file_pattern(framework, "[^-]+?")
    spelt = {m.group(1) for f in _index_files(framework, timeout) or [] if (m := pattern.match(str(f.get("filename"))))}
    if not spelt or release in spelt:
        return release
    same = sorted(s for s in spelt if release_key(s) == release_key(release))
    if same:
        return same[0]
    newest = sorted(spelt, key=lambda s: (release_key(s), s))[-3:]
    raise AdapterError(
        f"{framework} {release} is not on the index ({_index_url()}): its newest releases are "
        f"{', '.join(reversed(newest))}; set --release to one of its releases"
    )


def python_mismatch(framework: str, release: str, *, timeout: float = 15.0) -> str | None:
    """Why a release cannot be installed beside the Python that runs this project (an environment is made with
    that interpreter: the project's code runs in it), from the ``requires-python`` its files declare on the
    index; None where it fits, or where that cannot be told (offline, nothing declared, no ``packaging``)."""
    try:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
    except ImportError:
        return None
    here = ".".join(map(str, sys.version_info[:3]))  # platform.python_version() may say "3.12.1+"
    fits: dict[str, bool] = {}
    for declared in {str(f.get("requires-python") or "") for f in _release_files(framework, release, timeout)}:
        try:
            spec = SpecifierSet(declared)
        except InvalidSpecifier:
            continue
        fits[str(spec)] = not declared or spec.contains(here, prereleases=True)
    if not fits or any(fits.values()):  # one file that installs here is enough
        return None
    declared = " or ".join(sorted(fits))
    return (
        f"{framework} {release} requires Python {declared}, and its environment is made with the Python that runs "
        f"grpo-identity ({here}): install and run grpo-identity under a Python {declared} to audit this release"
    )


# --- where it lives -------------------------------------------------------------------------------
def env_root() -> Path:
    """Where release environments live: ``$GRPO_IDENTITY_ENVS``, else the project's cache folder
    (``~/.cache/grpo-identity/envs``)."""
    from grpo_identity.foundation import cache_dir

    return Path(os.environ.get("GRPO_IDENTITY_ENVS") or cache_dir("envs"))


def _recipe(framework: str, release: str) -> dict[str, Any]:
    """What decides an environment's contents, besides the date it is resolved as of."""
    return {
        "recipe": RECIPE_VERSION,
        "framework": framework,
        "release": release,
        "pins": release_pins(framework, release),
        "no_deps": no_deps(framework, release),
        "torch": TORCH_PIN,
        "never": list(NEVER),
        "requirements": project_requirements(),
        "test_runner": list(TEST_RUNNER),
        "python": f"{sys.implementation.name}{sys.version_info[0]}.{sys.version_info[1]}",
    }


def env_key(framework: str, release: str, uploaded: str | None) -> str:
    """The digest in an environment's folder name: the recipe and the resolution's date (none: today)."""
    what = {**_recipe(framework, release), "uploaded": uploaded}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:10]


def env_dir(framework: str, release: str, uploaded: str | None = None) -> Path:
    """The environment of one release and resolution (``trl-0.22.0-3f2a…``)."""
    return env_root() / f"{framework}-{release}-{env_key(framework, release, uploaded)}"


@dataclass(frozen=True)
class ReleaseEnv:
    """A ready environment: the framework, the release, its interpreter, how it was resolved."""

    framework: str
    release: str
    python: str
    record: dict[str, Any] = field(default_factory=dict, compare=False)

    def summary(self) -> dict[str, Any]:
        """What a report carries of it: where, resolved how and as of when, and the versions."""
        keys = ("path", "method", "as_of", "uploaded", "note", "made", "versions")
        out = {k: self.record.get(k) for k in keys if self.record.get(k) not in (None, "", [])}
        path, home = str(out.get("path", "")), os.path.expanduser("~").rstrip("/")
        if home not in ("", "~") and path.startswith(home + "/"):  # a report may be stored or shared: home is ~
            out["path"] = "~" + path[len(home) :]
        return out


def package_map() -> dict[str, str]:
    """The folders of the running ``grpo_identity`` package and of its mapped subpackages, by name."""
    import importlib.util

    names = ["grpo_identity", *(f"grpo_identity.{s}" for s in MAPPED_SUBPACKAGES)]
    found = {}
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            found[name] = list(spec.submodule_search_locations)[0]
    return found


def child_environ() -> dict[str, str]:
    """The environment for a child under a release's interpreter: this one's, plus where the running
    project's package folders are; never ``PYTHONPATH`` (the caller's folders are not the release's)."""
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    environ[PACKAGE_VAR] = json.dumps(package_map())
    return environ


# --- building -------------------------------------------------------------------------------------
def _python_of(env: Path) -> Path:
    return env / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _write_atomic(path: Path, text: str) -> None:
    from grpo_identity.foundation import write_text_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text, flag="the environments' folder:")


def _link(python: Path) -> None:
    """(Re)write the environment's link module and ``.pth`` line (cheap; atomically, so a child starting
    meanwhile reads the old files or the new ones)."""
    from grpo_identity.checks.frameworks import AdapterError

    proc = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise AdapterError(f"the release environment's interpreter {python} does not run (grpo-identity envs prune)")
    site = Path(proc.stdout.strip())
    for name, text in (("_grpo_identity_link.py", LINK_MODULE), ("_grpo_identity_link.pth", _PTH)):
        if not (site / name).is_file() or (site / name).read_text() != text:
            _write_atomic(site / name, text)


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


def _uv() -> str | None:
    """uv, from this interpreter's environment or the PATH; None when it is not installed."""
    here = Path(sys.executable).parent / ("uv.exe" if os.name == "nt" else "uv")
    if here.is_file():
        return str(here)
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except Exception:
        return shutil.which("uv")


def _torch_wheels() -> Path:
    """A folder holding the CPU torch wheel, fetched once by this interpreter's pip from wherever this
    machine keeps it (uv reads no pip configuration; it gets the folder as ``--find-links``)."""
    from grpo_identity.checks.frameworks import AdapterError

    folder = env_root() / ".wheels"
    version = TORCH_PIN.split("==")[1]
    if any(folder.glob(f"torch-{version}+cpu-*.whl")):
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(folder), f"{TORCH_PIN}+cpu"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 and "No module named pip" in proc.stderr:
        raise AdapterError(
            f"the CPU build of torch is fetched with pip, and {sys.executable} has none: python -m ensurepip"
        )
    if proc.returncode != 0:
        raise AdapterError(
            f"pip finds no {TORCH_PIN}+cpu (the CPU build) here; set "
            "PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu"
        )
    return folder


def ensure(framework: str, release: str, *, log: Any = None) -> ReleaseEnv:
    """The cached environment of ``framework==release``, created on first use.

    Raises :class:`~grpo_identity.checks.frameworks.AdapterError` (a usage error) when the release cannot
    be installed here (no such version, a requirement no index holds, a CUDA stack).
    """
    from grpo_identity.checks.frameworks import FRAMEWORKS, AdapterError
    from grpo_identity.checks.frameworks.registry import FRAMEWORK_TABLE, release_key

    if framework not in FRAMEWORKS:
        raise AdapterError(f"--release applies to {', '.join(FRAMEWORKS)}, not {framework!r}")
    if not release or not all(ch.isalnum() or ch in ".+-" for ch in release) or not release[0].isalnum():
        raise AdapterError(f"--release: {release!r} is no version number")
    floor = FRAMEWORK_TABLE[framework].first
    if floor is not None and release_key(release) < release_key(floor[0]):
        raise AdapterError(
            f"{framework} {release} is older than the driver audits: it runs {framework} {floor[0]} and later "
            f"({floor[1]}); set --release {floor[0]} or later"
        )
    uv = _uv()
    uploaded = upload_time(framework, release)  # also without uv: an environment made with it is reused
    env = env_dir(framework, release, uploaded)
    if uploaded is None and _ready(env) is None and (spelt := listed(framework, release)) != release:
        release, uploaded = spelt, upload_time(framework, spelt)  # to be built: the index's spelling of it
        env = env_dir(framework, release, uploaded)
    python = _python_of(env)
    with _locked(env):
        record = _ready(env)
        if record is None:
            out = log if log is not None else sys.stderr
            print(f"creating the environment of {framework} {release} in {env} (once; a minute or two)", file=out)
            try:
                record = _build(env, framework, release, uploaded, uv)
            except BaseException:  # a failed or interrupted build leaves nothing half-made behind
                shutil.rmtree(env, ignore_errors=True)
                raise
        _link(python)
        (env / ".last-used").touch()
    return ReleaseEnv(framework, release, str(python), {**record, "path": str(env)})


def _ready(env: Path) -> dict[str, Any] | None:
    """The record of a built environment, or None (never built, half-made, or its interpreter gone)."""
    try:
        record = json.loads((env / "environment.json").read_text())
    except (OSError, ValueError):
        return None
    return record if _python_of(env).is_file() else None


def _build(env: Path, framework: str, release: str, uploaded: str | None, uv: str | None) -> dict[str, Any]:
    from grpo_identity.checks.frameworks import AdapterError

    failures = []
    for plan in resolution_plans(framework, release, uploaded, uv is not None):
        try:
            commands = _install(env, framework, release, plan, uv)
        except _Unresolved as exc:  # the next plan may resolve; an import that fails is final
            failures.append(f"{plan.method}: {exc}")
            continue
        _import_check(env, framework, release)
        record = _record(env, framework, release, uploaded, plan, commands, uv)
        _write_atomic(env / "environment.json", json.dumps(record, indent=1, sort_keys=True))
        return record
    # the likeliest cause of a release that resolves under no plan, said in one line where the index tells it
    why = python_mismatch(framework, release) or " | ".join(failures[-2:])
    raise AdapterError(f"{framework}=={release} cannot be installed here: {why}")


class _Unresolved(Exception):
    """An install command failed (no resolution under this plan)."""


def _install(env: Path, framework: str, release: str, plan: Plan, uv: str | None) -> list[str]:
    """A fresh environment installed by one plan; the commands it ran (paths as names)."""
    from grpo_identity.checks.frameworks import AdapterError

    python = _python_of(env)
    constraints = env.parent / f".{env.name}.constraints.txt"
    try:
        if uv is not None:
            _run([uv, "venv", "-q", "--clear", "--python", sys.executable, str(env)], "uv could not make a venv")
            constraints.write_text("\n".join([f"{TORCH_PIN}+cpu", *NEVER]) + "\n")
            installer = [uv, "pip", "install", "-q", "--python", str(python), "--compile-bytecode"]
            installer += ["--find-links", str(_torch_wheels())]
            installer += plan.options()
        else:
            _run([sys.executable, "-m", "venv", "--clear", str(env)], "could not make a venv")
            constraints.write_text("\n".join([TORCH_PIN, *NEVER]) + "\n")
            installer = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        commands = install_commands(framework, release, installer, str(constraints))
        for cmd in commands:
            try:
                _run(cmd, f"{framework}=={release} could not be installed")
            except AdapterError as exc:
                raise _Unresolved(str(exc)) from None
    finally:
        constraints.unlink(missing_ok=True)
    names = {str(python): "PYTHON", str(constraints): "CONSTRAINTS", uv or "uv": "uv"}
    if uv is not None:
        names[str(_torch_wheels())] = "TORCH_WHEELS"
    return [" ".join(names.get(a, a) for a in cmd) for cmd in commands]


def _import_check(env: Path, framework: str, release: str) -> None:
    """The driver imports what it needs under the environment's interpreter (the smoke test)."""
    python = _python_of(env)
    _link(python)
    driver = FRAMEWORK_TABLE[framework].driver
    check = f"import warnings; warnings.filterwarnings('ignore'); import {driver} as d; d.import_check()"
    _run([str(python), "-c", check], f"{framework}=={release} installed but does not import here")


def _record(
    env: Path, framework: str, release: str, uploaded: str | None, plan: Plan, commands: list[str], uv: str | None
) -> dict[str, Any]:
    """What environment.json says: the release, how it was resolved and as of when, every version."""
    python = str(_python_of(env))
    freeze = [uv, "pip", "freeze", "--python", python] if uv else [python, "-m", "pip", "freeze"]
    lines = _run(freeze, "listing the installed versions").stdout.splitlines()
    versions = dict(ln.split("==", 1) for ln in lines if "==" in ln and not ln.startswith("#"))
    tool = _run([uv, "--version"], "uv --version").stdout.strip() if uv else "pip"
    return {
        "framework": framework,
        "release": release,
        "method": plan.method,
        "as_of": plan.as_of,
        "uploaded": uploaded,
        "exempt": [e.split("=")[0] for e in plan.exempt],
        "note": plan.note,
        "made": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "made_with": tool,
        "commands": commands,
        "recipe": _recipe(framework, release),
        "versions": versions,
    }


def _run(cmd: list[str], what: str) -> subprocess.CompletedProcess:
    from grpo_identity.checks.frameworks import AdapterError

    proc = subprocess.run(cmd, capture_output=True, text=True, env=child_environ())
    if proc.returncode != 0:
        lines = [
            ln
            for ln in (proc.stderr + proc.stdout).splitlines()
            if ln.strip() and not ln.startswith("WARNING: Location")
        ]
        raise AdapterError(f"{what}: {' '.join(ln.strip() for ln in lines[-3:]) if lines else proc.returncode}")
    return proc


# --- the cache, seen and pruned -------------------------------------------------------------------
def _size(folder: Path) -> int:
    """Bytes of the files under ``folder``, each file counted once (uv hard-links from its cache)."""
    seen, total = set(), 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


_ENV_NAME = re.compile(r"(?P<framework>[a-z-]+?)-[0-9][0-9A-Za-z.+]*(-[0-9a-f]{10})?")


def _named_as_env(name: str) -> bool:
    """Whether a folder name is one :func:`env_dir` gives (``trl-0.22.0-3f2a5c9e01``; ``trl-0.22.0`` in the layout
    before keys): a folder of another name under :func:`env_root` (``$GRPO_IDENTITY_ENVS`` set to a folder of the
    user's) is never listed or pruned."""
    match = _ENV_NAME.fullmatch(name)
    return match is not None and match["framework"] in FRAMEWORK_TABLE


def list_envs() -> list[dict[str, Any]]:
    """Every environment folder under :func:`env_root` (a folder named as :func:`env_dir` names them): its
    release, resolution, size, last use, and whether the current recipe would still use it (``current``), or it
    is stale or half-made."""
    from grpo_identity.foundation import UsageError

    root = env_root()
    if root.exists() and not root.is_dir():
        raise UsageError(f"GRPO_IDENTITY_ENVS: {root} is not a folder")
    rows = []
    folders = (p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and _named_as_env(p.name))
    for env in sorted(folders) if root.is_dir() else []:
        record = _ready(env)
        row: dict[str, Any] = {"name": env.name, "path": str(env), "bytes": _size(env)}
        if record is None:
            rows.append({**row, "state": "half-made"})
            continue
        last = env / ".last-used"
        row["last_used"] = time.strftime("%Y-%m-%d", time.gmtime(last.stat().st_mtime)) if last.exists() else None
        fw, rel = record.get("framework"), record.get("release")
        row.update({k: record.get(k) for k in ("framework", "release", "method", "as_of", "note")})
        row["state"] = "current" if env.name == f"{fw}-{rel}-{_current_key(str(fw), str(rel))}" else "stale"
        rows.append(row)
    return rows


def _current_key(framework: str, release: str) -> str | None:
    """The key the current recipe gives this release, with the upload time already cached (offline)."""
    try:
        known = json.loads((env_root() / "upload-times.json").read_text())
    except (OSError, ValueError):
        known = {}
    try:
        return env_key(framework, release, known.get(f"{framework}=={release}"))
    except Exception:  # the project's metadata is unreadable: nothing counts as current
        return None


def current_env_name(framework: str, release: str) -> str | None:
    """The folder name (``trl-0.22.2-10d7344619``) an audit of ``framework==release`` would use now, offline: the
    current recipe and the upload time already cached (none cached: today's resolution); None where the recipe
    cannot be read.  ``grpo-identity matrix`` keeps an audit's stored row while its environment is this one."""
    key = _current_key(framework, release)
    return f"{framework}-{release}-{key}" if key else None


def prune(everything: bool = False, dry_run: bool = False) -> list[dict[str, Any]]:
    """Remove the stale and half-made environments (``everything``: all of them, and the torch wheel);
    the rows removed (or, ``dry_run``, that would be)."""
    gone = [row for row in list_envs() if everything or row["state"] != "current"]
    if dry_run:
        return gone
    removed = []
    for row in gone:
        env = Path(row["path"])
        with _locked(env):  # a build that was under way when the list was read has finished now: look again
            record = _ready(env)
            fw, rel = (record or {}).get("framework"), (record or {}).get("release")
            if not everything and record is not None and env.name == f"{fw}-{rel}-{_current_key(str(fw), str(rel))}":
                continue
            shutil.rmtree(env, ignore_errors=True)
        removed.append(row)
    if everything:
        shutil.rmtree(env_root() / ".wheels", ignore_errors=True)
    return removed
