"""A grid file: the audits ``grpo-identity matrix GRID.yaml`` runs, read, checked and expanded.

A grid names targets (a framework, ``verl:estimator=NAME``, a preset or ``FILE.py:FUNCTION``), the releases to
audit each at, and the ``--set`` settings: fixed ones (``set``), one audit per listed configuration (``configs``)
and every combination of the ``axes``.  Every value is read as typed (YAML's 1.1 guesses are off: ``0.10`` stays
``0.10``, ``true`` the word ``true``), as on the command line.  ``verdict`` says what an audit is expected to give
(``pass``, ``deviation``, ``fail`` or ``error``; one for every release, or one per release); without one, a fail or
an error fails the run, and a deviation too where ``deviation_fails`` is true.

>>> grid = parse('''
... title: two losses
... deviation_fails: true
... audits:
...   - target: trl
...     releases: [0.22.2, 1.16.0]
...     set: {beta: 0.04}
...     axes: {loss_type: [grpo, dr_grpo]}
...     verdict: {0.22.2: fail}
... ''')
>>> for a in grid.audits[:2]:
...     print(a.target, a.release, a.verdict)
trl --set beta=0.04 --set loss_type=grpo 0.22.2 fail
trl --set beta=0.04 --set loss_type=grpo 1.16.0 None
>>> len(grid.audits), grid.deviation_fails
(4, True)
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from grpo_identity.foundation import UsageError

__all__ = ["Audit", "Grid", "parse", "load", "VERDICTS", "MAX_AUDITS", "MAX_BYTES"]

#: what an audit gives: its report's verdict, or ``error`` where it gave no report (a usage error, a crash)
VERDICTS = ("pass", "deviation", "fail", "error")
#: the most audits one grid may expand to, and the largest grid file read
MAX_AUDITS, MAX_BYTES = 10_000, 1_000_000
#: the audit options an entry may give (``options``), as ``grpo-identity audit`` spells them
AUDIT_OPTIONS = (
    "config",
    "level",
    "kind",
    "expect",
    "max-examples",
    "timeout",
    "input",
    "reward-dtype",
    "call",
    "strict",
)
_TOP = ("title", "deviation_fails", "audits")
_ENTRY = ("target", "releases", "set", "configs", "axes", "options", "verdict", "deviation_fails")
#: a setting's key and value, a target and a release: printable, no whitespace, nothing a shell or a flag reads
_WORD = re.compile(r"[A-Za-z0-9_.:/@+,=\-\[\]]+")
_RELEASE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+\-]*")


@dataclass(frozen=True)
class Audit:
    """One audit of the grid: the target and options as typed after ``grpo-identity audit`` (``target``), the
    release (None: the framework or function as installed), the verdict it is expected to give (None: any that
    does not fail the run) and whether a deviation fails it."""

    target: str
    release: str | None
    verdict: str | None = None
    deviation_fails: bool = False

    @property
    def key(self) -> tuple[str, str]:
        """What names the audit in the results (a release of None is ``""``)."""
        return (self.target, self.release or "")

    @property
    def environment(self) -> tuple[str, str]:
        """The audits that share an interpreter (one warm child): the target's first word and the release."""
        return (self.target.split()[0].split(":")[0], self.release or "")

    def argv(self) -> list[str]:
        """``grpo-identity audit …`` as a list, with ``--release`` and ``--json``."""
        return ["audit", *self.target.split(), *(["--release", self.release] if self.release else []), "--json"]

    def passes(self, verdict: str) -> bool:
        """Whether ``verdict`` (of :data:`VERDICTS`) keeps the run passing."""
        if self.verdict is not None:
            return verdict == self.verdict
        return verdict == "pass" or (verdict == "deviation" and not self.deviation_fails)


@dataclass(frozen=True)
class Grid:
    title: str
    audits: tuple[Audit, ...]
    deviation_fails: bool = False


def load(path: str | Path) -> Grid:
    """The grid in the file ``path`` (YAML or JSON); a :class:`UsageError` naming what is wrong and where."""
    p = Path(path)
    try:
        if not p.is_file():
            raise UsageError(f"GRID {path}: no such file")
        if p.stat().st_size > MAX_BYTES:
            raise UsageError(f"GRID {path}: larger than {MAX_BYTES // 1000} kB")
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"GRID {path}: cannot be read ({exc.__class__.__name__})") from None
    try:
        return parse(text)
    except UsageError as exc:
        raise UsageError(f"GRID {path}: {exc}") from None


def parse(text: str) -> Grid:
    """A grid from its text, JSON (``{`` first) or YAML; every value kept as typed (strings, lists and mappings)."""
    top = _mapping(_json(text) if text.lstrip().startswith("{") else _yaml(text), "the grid", _TOP)
    entries = top.get("audits")
    if not isinstance(entries, list) or not entries:
        raise UsageError("audits: a list of at least one entry is required")
    default_dev = _flag(top.get("deviation_fails", "false"), "deviation_fails")
    audits: list[Audit] = []
    for i, entry in enumerate(entries, 1):
        audits += _expand(
            _mapping(entry, f"audits[{i}]", _ENTRY), f"audits[{i}]", default_dev, MAX_AUDITS - len(audits)
        )
    seen: set[tuple[str, str]] = set()
    for a in audits:
        if a.key in seen:
            raise UsageError(f"the audit {a.target!r} at release {a.release or '(installed)'} is listed twice")
        seen.add(a.key)
    title = top.get("title", "audit matrix")
    if not isinstance(title, str):
        raise UsageError("title: a line of text is required")
    return Grid(title=title, audits=tuple(audits), deviation_fails=default_dev)


def _yaml(text: str) -> Any:
    """YAML's base loader: strings, lists and mappings only (no 1.1 guesses, no objects built)."""
    import yaml  # the matrix extra

    try:
        return yaml.load(text, Loader=yaml.BaseLoader)  # noqa: S506 — the base loader builds no objects
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise UsageError(f"is not YAML{where}: {getattr(exc, 'problem', None) or 'unreadable'}") from None


def _json(text: str) -> Any:
    """JSON with every number as typed (``0.10`` stays ``0.10``) and true, false and null as those words."""

    def words(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {k: words(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [words(v) for v in obj]
        return {True: "true", False: "false", None: "null"}.get(obj, obj) if not isinstance(obj, str) else obj

    try:
        return words(json.loads(text, parse_float=str, parse_int=str, parse_constant=str))
    except ValueError as exc:
        raise UsageError(f"is not JSON: {exc}") from None


def _mapping(obj: Any, where: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise UsageError(f"{where}: a mapping ({', '.join(allowed)}) is required")
    unknown = [k for k in obj if k not in allowed]
    if unknown:
        raise UsageError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(allowed)})")
    return obj


def _flag(value: Any, where: str) -> bool:
    if value not in ("true", "false"):
        raise UsageError(f"{where}: true or false, got {value!r}")
    return value == "true"


def _word(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _WORD.fullmatch(value):
        raise UsageError(f"{where}: a value without spaces or quotes is required, got {value!r}")
    return value


def _pairs(obj: Any, where: str) -> list[str]:
    """``{key: value}`` as ``--set key=value`` words, in the order written."""
    if obj is None:
        return []
    if not isinstance(obj, dict):
        raise UsageError(f"{where}: a mapping of settings (key: value) is required")
    return [f"{_word(k, where)}={_word(v, f'{where}.{k}')}" for k, v in obj.items()]


def _axes(obj: Any, where: str) -> list[list[str]]:
    """The axes' columns, each a list of ``key=value`` words (every combination is one audit)."""
    if obj is None:
        return []
    if not isinstance(obj, dict) or not obj:
        raise UsageError(f"{where}: a mapping of settings to lists of values is required")
    columns = []
    for key, values in obj.items():
        if not isinstance(values, list) or not values:
            raise UsageError(f"{where}.{key}: a list of at least one value is required")
        columns.append([f"{_word(key, where)}={_word(v, f'{where}.{key}')}" for v in values])
    return columns


def _options(obj: Any, where: str) -> list[str]:
    if obj is None:
        return []
    opts = _mapping(obj, where, AUDIT_OPTIONS)
    words = []
    for k, v in opts.items():
        if k == "strict":  # a flag: true or false
            words += ["--strict"] if _flag(v, f"{where}.strict") else []
        else:
            words += [f"--{k}", _word(v, f"{where}.{k}")]
    return words


def _verdicts(obj: Any, releases: list[str | None], where: str) -> dict[str | None, str | None]:
    """The expected verdict of each release."""
    if obj is None:
        return {r: None for r in releases}
    if isinstance(obj, str):
        obj = {r: obj for r in releases}
    if not isinstance(obj, dict):
        raise UsageError(f"{where}: one of {', '.join(VERDICTS)}, or a mapping release: verdict")
    extra = [r for r in obj if r not in releases]
    if extra:
        raise UsageError(f"{where}: release {extra[0]!r} is not in this entry's releases")
    bad = [v for v in obj.values() if v not in VERDICTS]
    if bad:
        raise UsageError(f"{where}: {bad[0]!r} is no verdict (one of {', '.join(VERDICTS)})")
    return {r: obj.get(r) for r in releases}


def _expand(entry: Mapping[str, Any], where: str, default_dev: bool, budget: int) -> list[Audit]:
    target = _word(entry.get("target"), f"{where}.target")
    releases = entry.get("releases")
    if releases is None:
        rels: list[str | None] = [None]
    elif isinstance(releases, list) and releases and all(isinstance(r, str) for r in releases):
        bad = [r for r in releases if not _RELEASE.fullmatch(r)]
        if bad:
            raise UsageError(f"{where}.releases: {bad[0]!r} is no version number")
        rels = list(dict.fromkeys(releases))
    else:
        raise UsageError(f"{where}.releases: a list of version numbers is required")
    fixed = _pairs(entry.get("set"), f"{where}.set")
    configs = entry.get("configs")
    if configs is not None and (not isinstance(configs, list) or not configs):
        raise UsageError(f"{where}.configs: a list of mappings of settings is required")
    variants = [_pairs(c, f"{where}.configs[{j}]") for j, c in enumerate(configs or [{}], 1)]
    columns = _axes(entry.get("axes"), f"{where}.axes")
    if len(variants) * len(rels) * math.prod(len(c) for c in columns) > budget:  # before any is built
        raise UsageError(f"expands to more than {MAX_AUDITS} audits (at {where}): split it into grids")
    options = _options(entry.get("options"), f"{where}.options")
    dev = _flag(entry["deviation_fails"], f"{where}.deviation_fails") if "deviation_fails" in entry else default_dev
    verdicts = _verdicts(entry.get("verdict"), rels, f"{where}.verdict")
    out = []
    for variant, combo in itertools.product(variants, itertools.product(*columns)):
        words = [target, *(w for pair in [*fixed, *variant, *combo] for w in ("--set", pair)), *options]
        out += [Audit(" ".join(words), r, verdicts[r], dev) for r in rels]
    return out


def dump(grid: Grid) -> str:
    """The expanded grid as JSON lines (target, release, expected verdict): what ``matrix --list`` prints."""
    return "".join(
        json.dumps({"target": a.target, "release": a.release, "verdict": a.verdict}) + "\n" for a in grid.audits
    )
