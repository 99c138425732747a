"""What to audit, decided once: :func:`resolve` turns what the user wrote into one typed spec.

A target is a function (``FILE.py:FUNCTION``, ``MODULE:FUNCTION``, a preset of the dial, or a
callable: a :class:`FunctionSpec`) or a framework configured as its users configure it (``trl``,
``verl``, ``areal``, ``openrlhf`` with their config keys: a
:class:`~grpo_identity.checks.frameworks.FrameworkSpec`).  The resolver is the only place that
tells the two apart, that defaults the level (the gradient for a framework's trainer path, the
advantages for anything else), that checks which options apply to which target, and that picks
the release of a framework that is not installed here.  Everything later reads the spec.

A bad combination raises :class:`~grpo_identity.foundation.OptionError` naming the option;
a target string that cannot name a target raises
:class:`~grpo_identity.checks.calls.target.TargetImportError`.

>>> resolve("verl:grpo").level, resolve("grpo").level
('gradient', 'advantage')
>>> resolve("grpo", sets=["loss_type=grpo"])
Traceback (most recent call last):
...
grpo_identity.foundation.OptionError: sets applies to the framework targets (trl, ...), not to 'grpo'
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable

from grpo_identity.checks import KINDS, LEVELS
from grpo_identity.checks.calls.calling import CallOptions
from grpo_identity.checks.frameworks import FRAMEWORKS, AdapterError, FrameworkSpec, is_framework, parse_set, parse_spec
from grpo_identity.foundation import OptionError

__all__ = ["FunctionSpec", "Spec", "resolve", "check_kind_level"]


@dataclass(frozen=True)
class FunctionSpec:
    """A function target: a spec string or a callable, what it computes, the level to audit."""

    target: str | Callable[..., Any]
    kind: str = "advantage"
    """'advantage' (one advantage per reward) or 'filter' (one keep flag per group)."""
    level: str = "advantage"
    """'advantage', or 'gradient': the target is ``fn(rewards, G, lengths)`` returning the
    advantages and the token coefficients of its loss (:mod:`grpo_identity.checks.gradient`)."""
    calling: CallOptions | None = None
    """How to call it (:mod:`grpo_identity.checks.calls.calling`); None at the gradient level, whose
    contract is fixed."""

    def describe(self) -> str:
        """The target as the user wrote it (a callable by its qualified name)."""
        if isinstance(self.target, str):
            return self.target
        return str(getattr(self.target, "__qualname__", repr(self.target)))

    @property
    def builtin(self) -> bool:
        """A preset of the dial (built by the project, stateless: safe in a warm child)."""
        from grpo_identity.checks.calls.adapters import is_adapter

        return isinstance(self.target, str) and is_adapter(self.target)


#: what :func:`resolve` returns
Spec = FunctionSpec | FrameworkSpec


def check_kind_level(kind: Any, level: Any) -> None:
    """``kind`` one of :data:`~grpo_identity.checks.KINDS`, ``level`` None or one of
    :data:`~grpo_identity.checks.LEVELS`; else :class:`OptionError`."""
    if kind not in KINDS:
        raise OptionError("kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")
    if level is not None and level not in LEVELS:
        raise OptionError("level", f"must be one of {', '.join(LEVELS)}, got {level!r}")


def resolve(
    target: Any,
    *,
    sets: Iterable[str | tuple[str, str]] = (),
    config: str | None = None,
    level: str | None = None,
    kind: str = "advantage",
    release: str | None = None,
    input: str | None = None,
    reward_dtype: str | None = None,
    call: str | None = None,
) -> Spec:
    """The one spec of an audit (see the module docstring).

    Parameters
    ----------
    target : str, callable or FrameworkSpec
        ``FILE.py:FUNCTION``, ``MODULE:FUNCTION``, a preset (``grpo``, ``preset:trl`` …), a
        framework (``trl``, ``verl:grpo``, ``verl:estimator=NAME`` …) or a callable.
    sets : iterable of ``"KEY=VALUE"`` or (key, value)
        A framework's config keys, as the framework names them; later ones win.
    config : str, optional
        A framework's config file (YAML), read as the framework reads it.
    level : {'advantage', 'gradient'}, optional
        What to compare; None: the gradient for a framework's trainer path, else the advantages.
    kind : {'advantage', 'filter'}
        What a function target computes.
    release : str, optional
        A framework release to audit in an environment of its own.
    input, reward_dtype, call : str, optional
        How to call a function: its rewards as 'numpy', 'torch' or 'list'; in which dtype; or a
        template such as ``fn(rewards=R, num_generations=G)`` (:mod:`grpo_identity.checks.calls.calling`).

    Returns
    -------
    FunctionSpec or FrameworkSpec
        With its level set.
    """
    check_kind_level(kind, level)
    pairs = list(sets)
    calling_given = {"input": input, "reward_dtype": reward_dtype, "call": call}
    if is_framework(target):
        for field, given in calling_given.items():
            if given is not None:
                raise OptionError(field, "applies to functions (FILE.py:FUNCTION, MODULE:FUNCTION, a callable)")
        return _framework(target, pairs, config, level, kind, release)
    name = target if isinstance(target, str) else getattr(target, "__qualname__", repr(target))
    for field, value in (("sets", pairs), ("config", config), ("release", release)):
        if value:
            raise OptionError(field, f"applies to the framework targets ({', '.join(FRAMEWORKS)}), not to {name!r}")
    if isinstance(target, str):
        from grpo_identity.checks.calls.target import check_spec

        check_spec(target)
    elif not callable(target):
        raise OptionError("target", f"must be a function, a spec string or a framework, got {type(target).__name__}")
    spec = FunctionSpec(target, kind, level or "advantage")
    if spec.builtin and call is not None:  # the project's own preset: called as it is written, by its signature
        raise OptionError("call", f"applies to your functions (FILE.py:FUNCTION, MODULE:FUNCTION), not to {name!r}")
    if spec.level == "gradient" and (kind != "advantage" or spec.builtin):
        what = "a filter" if kind != "advantage" else f"the preset {name!r}"
        raise OptionError("level", f"gradient: {what} has no loss; audit it at the advantage level")
    if spec.level == "gradient":
        for field, given in calling_given.items():
            if given is not None:
                why = "applies at the advantage level (the gradient level calls fn(rewards, G, lengths))"
                raise OptionError(field, why)
        return spec
    calling = CallOptions(input=input, reward_dtype=reward_dtype or "float64", call=call)
    return replace(spec, calling=calling)


def _framework(
    target: Any, sets: list[Any], config: str | None, level: str | None, kind: str, release: str | None
) -> FrameworkSpec:
    try:
        spec = target if isinstance(target, FrameworkSpec) else parse_spec(target)
    except AdapterError as exc:
        raise OptionError("target", str(exc)) from None
    pairs = [_pair(s) for s in sets]
    name = target if isinstance(target, str) else spec.describe()
    if config and not os.path.isfile(config):
        raise OptionError("config", f"names no file: {config}")
    if config:  # the framework reads it in the audit's child, whose working directory may differ
        check_config(config)
        config = os.path.abspath(config)
    if kind != "advantage":
        message = f"filter: {name!r} computes advantages; only presets and functions can be audited as filters"
        raise OptionError("kind", message)
    if spec.estimator is not None:
        trainer_path = "write verl --set algorithm.adv_estimator=NAME for the trainer path"
        if pairs or config:
            field = "sets" if pairs else "config"
            raise OptionError(
                field, f"configures the trainer path; {name!r} is the estimator function alone ({trainer_path})"
            )
        if (level or spec.level) == "gradient":
            raise OptionError(
                "level", f"gradient: {name!r} is the estimator function alone, it has no loss ({trainer_path})"
            )
    spec = spec.with_sets(pairs, config=config, level=level)
    return replace(spec, level=spec.default_level(), **_release(spec.framework, release or spec.release))


def _pair(item: str | tuple[str, str]) -> tuple[str, str]:
    if isinstance(item, tuple) and len(item) == 2:
        return str(item[0]), str(item[1])
    try:
        key, value = parse_set(str(item))
    except AdapterError as exc:  # its words, without the option's name (OptionError names the option typed)
        raise OptionError("sets", str(exc).removeprefix("--set ")) from None
    return key, value


def _release(framework: str, release: str | None) -> dict[str, Any]:
    """The release to audit: the one asked for, else the tested release of a framework that is not
    installed here (OpenRLHF and AReaL never are: their requirements clash with this environment)."""
    if release is not None:
        if not release or not all(ch.isalnum() or ch in ".+-" for ch in release):
            raise OptionError("release", f"must be a version number, got {release!r}")
        return {"release": release, "release_auto": False}
    if importlib.util.find_spec(framework) is not None:
        return {"release": None, "release_auto": False}
    from grpo_identity.checks.calls.adapters import TESTED_VERSIONS

    tested = TESTED_VERSIONS.get(framework)
    return {"release": tested, "release_auto": tested is not None}


#: the largest config file read, and the most YAML nodes it may expand to (aliases counted where they point)
CONFIG_BYTES = 1 << 20
CONFIG_NODES = 100_000


def check_config(path: str) -> None:
    """Refuse a config file the frameworks' parsers would choke on before any of them reads it: over
    :data:`CONFIG_BYTES`, not YAML, or expanding past :data:`CONFIG_NODES` nodes through its aliases (a
    "billion laughs" file is a few hundred bytes that OmegaConf or a dict copy expands to gigabytes)."""
    size = os.path.getsize(path)
    if size > CONFIG_BYTES:
        raise OptionError("config", f"{path} is {size} bytes; a config file is at most {CONFIG_BYTES} bytes")
    try:
        import yaml
    except ImportError:  # no framework here reads YAML either: the audit's own error says what to install
        return
    try:
        with open(path, encoding="utf-8") as fh:
            root = yaml.compose(fh, Loader=yaml.SafeLoader)
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise OptionError("config", f"{path} is not YAML: {str(exc).splitlines()[0]}") from None
    if _expanded_nodes(root, CONFIG_NODES) > CONFIG_NODES:
        raise OptionError(
            "config", f"{path} expands to more than {CONFIG_NODES} YAML nodes through its aliases: not a config file"
        )


def _expanded_nodes(node: Any, limit: int) -> int:
    """Nodes of the YAML tree with every alias expanded, counted until ``limit`` is passed (memoised per node: a
    shared anchor costs its size at every use without being walked again)."""
    sizes: dict[int, int] = {}

    def size(n: Any) -> int:
        if n is None:
            return 0
        if id(n) in sizes:
            return sizes[id(n)]
        sizes[id(n)] = limit + 1  # a node that contains itself expands without end
        value = n.value if isinstance(n.value, list) else []
        parts = [p for item in value for p in (item if isinstance(item, tuple) else (item,))]
        total = 1
        for part in parts:
            total += size(part)
            if total > limit:
                break
        sizes[id(n)] = total
        return total

    return size(node)
