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

__all__ = ["Audit", "Grid", "parse", "load", "dump", "VERDICTS", "MAX_AUDITS", "MAX_BYTES"]

#: what an audit gives: its report's verdict, or ``error`` where it gave no report (a usage error, a crash)
VERDICTS = ("pass", "deviation", "fail", "error")
#: the most audits one grid may expand to, the largest grid file read, the deepest nesting of its collections
MAX_AUDITS, MAX_BYTES, MAX_DEPTH = 10_000, 1_000_000, 32
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
#: a target, a setting's key, an option's value: printable, no whitespace or quotes, never a flag (no leading -);
#: a setting's value may start with - (``reward.clip_range=-1000,1000``: it follows ``key=``)
_WORD = re.compile(r"[A-Za-z0-9_.:/@+,=\[\]][A-Za-z0-9_.:/@+,=\-\[\]]*")
_VALUE = re.compile(r"[A-Za-z0-9_.:/@+,=\-\[\]]+")
#: the longest audit a grid may name (its target and options as typed)
MAX_AUDIT_CHARS = 4000
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

    def files(self) -> list[str]:
        """The files the audit reads besides its target: each ``--config`` file, as the grid names it."""
        words = self.target.split()  # a grid writes an option as two words (no word of it starts with -)
        return [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--config"]

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
    if p.is_dir() or (p.exists() and not p.is_file()):
        raise UsageError(f"GRID {path}: is not a file (a folder, device or FIFO)")
    try:
        with open(p, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise UsageError(f"GRID {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"GRID {path}: cannot be read ({exc.__class__.__name__})") from None
    if len(data) > MAX_BYTES:
        raise UsageError(f"GRID {path}: larger than {MAX_BYTES // 1000} kB")
    try:
        return parse(text)
    except UsageError as exc:
        raise UsageError(f"GRID {path}: {exc}") from None


def parse(text: str) -> Grid:
    """A grid from its text, JSON (``{`` first) or YAML; every value kept as typed (strings, lists and mappings)."""
    top = _mapping(_parsed(text), "the grid", _TOP)
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


def _parsed(text: str) -> Any:
    """JSON where the text is JSON (a ``{`` first and it parses), YAML otherwise."""
    if text.lstrip().startswith("{"):
        try:
            return _json(text)
        except ValueError:
            pass  # a YAML flow mapping ({audits: [...]}), or broken either way: YAML's message
    return _yaml(text)


def _yaml(text: str) -> Any:
    """YAML's base loader (strings, lists and mappings only: no 1.1 guesses, no objects built), read as events first:
    an alias, or collections nested deeper than :data:`MAX_DEPTH`, is refused before anything is built; a key given
    twice in one mapping is refused too (the later would win silently)."""
    import yaml  # the matrix extra

    loader = getattr(yaml, "CBaseLoader", yaml.BaseLoader)  # libyaml's where PyYAML has it: the same, faster

    class Strict(loader):  # type: ignore[misc, valid-type]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            keys = [k.value for k, _ in node.value]
            twice = next((k for k in keys if keys.count(k) > 1), None)
            if twice is not None:
                raise UsageError(f"the key {twice!r} is given twice in one mapping (line {node.start_mark.line + 1})")
            return super().construct_mapping(node, deep)

    try:
        depth = 0
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.AliasEvent):
                raise UsageError("uses a YAML alias (*name): write each setting out")  # one alias can stand for many
            depth += isinstance(event, yaml.CollectionStartEvent) - isinstance(event, yaml.CollectionEndEvent)
            if depth > MAX_DEPTH:
                raise UsageError(f"is nested too deeply (more than {MAX_DEPTH} levels)")
        return yaml.load(text, Loader=Strict)  # noqa: S506 — the base loader builds no objects
    except RecursionError:
        raise UsageError("is nested too deeply") from None
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

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        twice = next((k for k in keys if keys.count(k) > 1), None)
        if twice is not None:
            raise UsageError(f"the key {twice!r} is given twice in one object")
        return dict(pairs)

    try:
        return words(json.loads(text, parse_float=str, parse_int=str, parse_constant=str, object_pairs_hook=unique))
    except RecursionError:
        raise UsageError("is nested too deeply") from None


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


def _word(value: Any, where: str, pattern: re.Pattern[str] = _WORD) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        lead = "" if pattern is _VALUE else ", not starting with -"
        raise UsageError(f"{where}: a value without spaces or quotes{lead} is required, got {str(value)[:80]!r}")
    return value


def _pairs(obj: Any, where: str) -> list[str]:
    """``{key: value}`` as ``--set key=value`` words, in the order written."""
    if obj is None:
        return []
    if not isinstance(obj, dict):
        raise UsageError(f"{where}: a mapping of settings (key: value) is required")
    return [f"{_word(k, where)}={_word(v, f'{where}.{k}', _VALUE)}" for k, v in obj.items()]


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
        columns.append([f"{_word(key, where)}={_word(v, f'{where}.{key}', _VALUE)}" for v in values])
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
            _bounded(k, v, f"{where}.{k}")
    return words


def _bounded(key: str, value: Any, where: str) -> None:
    """A numeric option (``max-examples``, ``timeout``) within the bounds ``grpo-identity audit`` gives it, checked
    as the grid loads (by the one options record the audit itself checks them with), not audit by audit."""
    from grpo_identity.checks.options import AuditOptions
    from grpo_identity.foundation import OptionError

    field = {"max-examples": "max_examples", "timeout": "timeout"}.get(key)
    if field is None:
        return
    try:
        if field == "max_examples":
            AuditOptions(max_examples=int(value))
        else:
            AuditOptions(timeout=float(value))
    except OptionError as exc:  # (a ValueError)
        raise UsageError(f"{where}: {exc.worded({field: key})}") from None
    except (ValueError, OverflowError):
        raise UsageError(f"{where}: a number, got {value!r}") from None


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
    """One entry's audits: each configuration × each combination of the axes, at each release."""
    target = _word(entry.get("target"), f"{where}.target")
    rels = _releases(entry.get("releases"), f"{where}.releases")
    fixed = _pairs(entry.get("set"), f"{where}.set")
    configs = entry.get("configs")
    if configs is not None and (not isinstance(configs, list) or not configs):
        raise UsageError(f"{where}.configs: a list of mappings of settings is required")
    variants = [_pairs(c, f"{where}.configs[{j}]") for j, c in enumerate(configs or [{}], 1)]
    columns = _axes(entry.get("axes"), f"{where}.axes")
    options = _options(entry.get("options"), f"{where}.options")
    _check_repeats(where, fixed, variants, columns)
    _check_size(where, budget, len(variants) * len(rels) * math.prod(len(c) for c in columns),
                len(target) + _chars(fixed) + max(map(_chars, variants)) + _chars(max(c, key=len) for c in columns)
                + sum(len(w) + 1 for w in options))  # fmt: skip
    dev = _flag(entry["deviation_fails"], f"{where}.deviation_fails") if "deviation_fails" in entry else default_dev
    verdicts = _verdicts(entry.get("verdict"), rels, f"{where}.verdict")
    out = []
    for variant, combo in itertools.product(variants, itertools.product(*columns)):
        words = [target, *(w for pair in [*fixed, *variant, *combo] for w in ("--set", pair)), *options]
        out += [Audit(" ".join(words), r, verdicts[r], dev) for r in rels]
    return out


def _check_repeats(where: str, fixed: list[str], variants: list[list[str]], columns: list[list[str]]) -> None:
    """A setting named in two of set, a configuration and the axes: the command line would take the later."""
    axis_keys = [c[0].split("=", 1)[0] for c in columns]
    for variant in variants:
        keys = [p.split("=", 1)[0] for p in [*fixed, *variant]] + axis_keys
        twice = next((k for k in keys if keys.count(k) > 1), None)
        if twice is not None:
            raise UsageError(f"{where}: the setting {twice!r} is given twice (in set, a configuration or the axes)")


def _releases(releases: Any, where: str) -> list[str | None]:
    if releases is None:
        return [None]
    if not isinstance(releases, list) or not releases or not all(isinstance(r, str) for r in releases):
        raise UsageError(f"{where}: a list of version numbers is required")
    bad = [r for r in releases if not _RELEASE.fullmatch(r)]
    if bad:
        raise UsageError(f"{where}: {bad[0]!r} is no version number")
    return list(dict.fromkeys(releases))


def _chars(pairs: Any) -> int:
    """The characters ``--set PAIR`` words take on the command line."""
    return sum(len(p) + 7 for p in pairs)


def _check_size(where: str, budget: int, audits: int, longest: int) -> None:
    """Refused before anything is built: more audits than the grid has left, or an audit longer than the bound."""
    if audits > budget:
        raise UsageError(f"expands to more than {MAX_AUDITS} audits (at {where}): split it into grids")
    if longest > MAX_AUDIT_CHARS:
        raise UsageError(f"{where}: an audit of {longest} characters (at most {MAX_AUDIT_CHARS}): fewer settings")


def dump(grid: Grid) -> str:
    """The expanded grid as JSON lines (target, release, expected verdict): what ``matrix --list`` prints."""
    return "".join(
        json.dumps({"target": a.target, "release": a.release, "verdict": a.verdict}) + "\n" for a in grid.audits
    )
