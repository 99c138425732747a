"""Framework targets named by their own configuration: what ``audit trl --set KEY=VALUE`` builds.

A :class:`FrameworkSpec` says which framework, which of its config keys the user set (raw
strings: the framework's own parser reads them), an optional config file, the level (advantage
or gradient) and, for verl's estimator-function form, the estimator that bypasses the trainer.
It is a small frozen record, so it travels to the audit's child process as it is; the drivers
(:mod:`.trl`, :mod:`.verl`, :mod:`.openrlhf`) import their framework only when they build a target.

>>> spec = parse_spec("verl:grpo:norm_adv_by_std_in_grpo=false")
>>> spec.sets
(('algorithm.adv_estimator', 'grpo'), ('algorithm.norm_adv_by_std_in_grpo', 'false'))
>>> spec.describe()
'verl --set algorithm.adv_estimator=grpo --set algorithm.norm_adv_by_std_in_grpo=false'
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from grpo_identity.checks.frameworks.registry import FRAMEWORK_TABLE

__all__ = [
    "FRAMEWORKS",
    "ESTIMATOR_KEY",
    "RESPONSE_LENGTH",
    "PROMPT_LENGTH",
    "STEP_GROUP_SIZE",
    "lengths_for",
    "answer_lengths",
    "length_layouts",
    "token_view",
    "lengths_by_reward",
    "FrameworkSpec",
    "AdapterError",
    "redacted",
    "is_secret",
    "without_secrets",
    "config_text",
    "parse_spec",
    "is_framework",
    "parse_set",
    "whole_number",
    "hydra_keys",
    "setting_for",
    "patched_attributes",
    "cispo_cap",
]

#: frameworks with a config-driven driver (the rows of :data:`.registry.FRAMEWORK_TABLE`)
FRAMEWORKS = tuple(FRAMEWORK_TABLE)
#: the config key a bare word of the short form sets (``verl:rloo``, ``openrlhf:group_norm``)
ESTIMATOR_KEY = {e.name: e.estimator_key for e in FRAMEWORK_TABLE.values() if e.estimator_key is not None}
#: response length budget of every driver's probe batches (tokens), and their prompts' length
RESPONSE_LENGTH = 6
PROMPT_LENGTH = 2
#: answers per prompt in a split-step run when the user's settings do not name a group size
STEP_GROUP_SIZE = 4


def lengths_for(n: int, seed: int = 0) -> Any:
    """Response lengths 1…RESPONSE_LENGTH, different from row to row (a fixed pattern per n)."""
    import numpy as np

    return 1 + (np.arange(n) * 5 + 3 * seed + n) % RESPONSE_LENGTH


def length_layouts(rewards: Any) -> dict[str, Any]:
    """The unequal response lengths an advantage probe of these rewards may carry, by name: by row position
    (:func:`lengths_for`, what the drivers lay out) or by answer (:func:`lengths_by_reward`, what
    :func:`token_view` gives a token-level estimator)."""
    import numpy as np

    r = np.asarray(rewards).reshape(-1)
    return {"by row": lengths_for(r.size), "by answer": lengths_by_reward(r)}


def _answer_keys(rewards: Any) -> Any:
    """An integer per answer, set by its reward alone (so it travels with the answer wherever the row goes)."""
    import numpy as np

    r = np.nan_to_num(np.asarray(rewards, dtype=np.float64).reshape(-1), posinf=0.0, neginf=0.0)
    k = np.mod(np.round(np.clip(r, -1e9, 1e9) * 1000).astype(np.int64) + 1, 2**32)  # the reward to 1e-3
    return (k * 2654435761 % 2**32) >> 16  # Knuth's multiplicative hash: its high bits depend on every bit of k


def answer_lengths(n: int, longer: int = 0) -> Any:
    """Answer lengths 1…RESPONSE_LENGTH (:func:`lengths_for`), ``longer`` tokens more (at most RESPONSE_LENGTH) for
    the gradient audit's second batch, so that the two batches hold different token totals."""
    import numpy as np

    return np.minimum(lengths_for(n) + longer, RESPONSE_LENGTH)


def lengths_by_reward(rewards: Any) -> Any:
    """Response lengths 1…RESPONSE_LENGTH that belong to the answer, not to the row: set by the answer's reward, so
    an answer keeps its length wherever its row is moved, its group placed or its group cut, and a variant that
    weighs by tokens keeps its groups independent and its answers exchangeable on these lengths.  A right and a
    wrong answer differ in length (1 → 5 tokens, 0 → 3, with a hole).

    >>> lengths_by_reward([1.0, 0.0, 0.5, 1.0]).tolist()
    [5, 3, 1, 5]
    """
    return 1 + (_answer_keys(rewards) >> 8) % RESPONSE_LENGTH


def token_view(rewards: Any) -> tuple[Any, Any]:
    """Rewards as a token-level estimator (verl's ``token_level_rewards, response_mask``) sees them from a
    rollout: (scores, mask), numpy (n, RESPONSE_LENGTH + 1).  Each answer holds :func:`lengths_by_reward` tokens
    (the mask's row sum); about half the answers of two tokens or more (by their rewards too) has a masked hole at
    position 1 (tool output in a multi-turn rollout), so its last token sits one further on; the reward is on
    the last token (the EOS), the rest right padding.  A function that reads the last column, or counts the span,
    reads wrong rewards or lengths here.

    >>> scores, mask = token_view([1.0, 0.0, 0.5])
    >>> mask.astype(int).tolist()
    [[1, 1, 1, 1, 1, 0, 0], [1, 0, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0]]
    >>> scores[:, :5].tolist()
    [[0.0, 0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0, 0.0], [0.5, 0.0, 0.0, 0.0, 0.0]]
    """
    import numpy as np

    r = np.asarray(rewards, dtype=np.float64).reshape(-1)
    L = lengths_by_reward(r)
    hole = (_answer_keys(r) % 2 == 1) & (L >= 2)
    span = L + hole
    mask = (np.arange(RESPONSE_LENGTH + 1)[None, :] < span[:, None]).astype(np.float64)
    mask[hole, 1] = 0.0
    scores = np.zeros_like(mask)
    scores[np.arange(r.size), span - 1] = r
    return scores, mask


#: the last word of a setting's name that makes its value a secret (``hub_token``, ``wandb_api_key``), never shown
SECRET_WORDS = ("token", "secret", "password", "passwd", "credentials", "auth", "apikey")


def is_secret(key: str) -> bool:
    """Whether a setting named ``key`` holds a secret: its last word is one of :data:`SECRET_WORDS`, or it ends in
    ``api_key``, ``private_key``, ``secret_key`` or ``access_key`` (not ``max_tokens``, ``pad_token_id``,
    ``ppo_max_token_len_per_gpu``: a count or an id is no secret).

    >>> [is_secret(k) for k in ("hub_token", "HF_TOKEN", "openai_api_key", "pad_token_id", "max_token_len_per_gpu")]
    [True, True, True, False, False]
    """
    import re

    parts = [p for p in re.split(r"[^a-z0-9]+", str(key).lower()) if p]
    if not parts:
        return False
    return parts[-1] in SECRET_WORDS or (
        parts[-1] == "key" and len(parts) > 1 and parts[-2] in ("api", "private", "secret", "access")
    )


def redacted(key: str, value: Any) -> Any:
    """A secret's value, of any type, as ``***`` (:func:`is_secret`); any other value as it is.

    >>> redacted("hub_token", "hf_abc"), redacted("hub_token", ["hf_abc"]), redacted("loss_type", "dapo")
    ('***', '***', 'dapo')
    """
    return "***" if is_secret(key) and value not in (None, "") else value


def without_secrets(node: Any) -> Any:
    """A config's nested dicts and lists without any setting named as a secret (:func:`is_secret`)."""
    if isinstance(node, dict):
        return {k: without_secrets(v) for k, v in node.items() if not is_secret(str(k))}
    if isinstance(node, list):
        return [without_secrets(v) for v in node]
    return node


def config_text(path: str | None) -> str | None:
    """A YAML config file's settings as YAML text without its secrets (None without a file): what an exported
    test pack carries of the user's file."""
    if not path:
        return None
    import yaml

    with open(path) as fh:
        loaded = yaml.safe_load(fh)
    return yaml.safe_dump(without_secrets(loaded), sort_keys=False)


class AdapterError(ValueError):
    """The driver cannot run this framework or release (an API it does not know, a config the
    framework rejects): a usage error of the audit (exit 2), never a finding about the target."""


@dataclass(frozen=True)
class FrameworkSpec:
    """A framework target: its config keys as the user typed them, and how to audit it."""

    framework: str
    sets: tuple[tuple[str, str], ...] = ()
    """(key, raw value) pairs, in order; the framework parses the values."""
    config: str | None = None
    """A YAML file, read as the framework reads its own config files."""
    level: str | None = None
    """'gradient' or 'advantage'; None: the default, gradient (advantage for the estimator form)."""
    estimator: str | None = None
    """verl only: call ``core_algos``'s estimator function directly (bypasses the trainer)."""
    options: tuple[tuple[str, Any], ...] = ()
    """Keyword options of that estimator function (bypass form only)."""
    release: str | None = None
    """Audit this release in an environment of its own (:mod:`grpo_identity.checks.calls.releases`)."""
    release_auto: bool = False
    """The release was chosen because the framework is not installed here (its tested release)."""

    @property
    def kind(self) -> str:
        """A framework computes advantages (only presets and functions are audited as filters)."""
        return "advantage"

    def describe(self) -> str:
        """The command-line form of this target."""
        if self.estimator is not None:
            opts = "".join(f",{k}={v}" for k, v in self.options)
            return f"{self.framework}:estimator={self.estimator}{opts}"
        parts = [self.framework] + [f"--set {k}={redacted(k, v)}" for k, v in self.sets]
        if self.config:
            parts.append(f"--config {self.config}")
        return " ".join(parts)

    def default_level(self) -> str:
        """The level an audit of this target runs unless told: its own, else the gradient (the
        estimator-function form has no loss: the advantages)."""
        return self.level or ("advantage" if self.estimator is not None else "gradient")

    def with_sets(
        self, sets: list[tuple[str, str]], config: str | None = None, level: str | None = None
    ) -> FrameworkSpec:
        """This spec with more ``--set`` pairs (later ones win), a config file and a level."""
        return replace(self, sets=(*self.sets, *sets), config=config or self.config, level=level or self.level)


def is_framework(target: Any) -> bool:
    """Whether ``target`` names a framework (a spec, or a string whose head is one)."""
    if isinstance(target, FrameworkSpec):
        return True
    return isinstance(target, str) and target.split(":")[0].strip().lower() in FRAMEWORKS


def parse_set(text: str, option: str = "--set") -> tuple[str, str]:
    """``KEY=VALUE`` → (key, raw value); a clear error naming ``option`` otherwise."""
    key, eq, value = text.partition("=")
    if not eq or not key.strip():
        raise AdapterError(f"{option} takes KEY=VALUE, got {text!r}")
    if not value.strip():  # `--set loss_type=`: a value lost to the shell, never the framework's default
        raise AdapterError(
            f"{option} {key.strip()}= has no value: give one (null for none), or leave {key.strip()} out for the "
            "framework's default"
        )
    return key.strip(), value.strip()


def whole_number(
    raw: Any, key: str, *, least: int = 1, most: int | None = None, who: str = "", text: bool = True
) -> int:
    """A split setting's value as a whole number from ``least`` to ``most`` (no bound above where None): an
    integer, or with ``text`` a string that Python reads as one (``--set`` values and a config's raw text: a sign,
    ASCII digits, underscores between them, spaces around); verl passes ``text=False``, since in its typed config a
    string where a count belongs is what verl itself would fail on.  Else an :class:`AdapterError` in one wording
    for every driver: ``who``, the key, the value given and one that runs.

    >>> whole_number("4", "train.batch_size"), whole_number(2, "num_processes", most=4), whole_number(" 1_024", "k")
    (4, 2, 1024)
    >>> for raw in ("0", "2.0", True, 9, "+-4"):
    ...     try:
    ...         whole_number(raw, "rollout.n", most=8, who="verl")
    ...     except AdapterError as exc:
    ...         print(exc)
    verl: rollout.n takes a whole number from 1 to 8, got '0': set rollout.n=1
    verl: rollout.n takes a whole number from 1 to 8, got '2.0': set rollout.n=1
    verl: rollout.n takes a whole number from 1 to 8, got True: set rollout.n=1
    verl: rollout.n takes a whole number from 1 to 8, got 9: set rollout.n=8
    verl: rollout.n takes a whole number from 1 to 8, got '+-4': set rollout.n=1
    """
    import numbers
    import re

    assert most is None or least <= most, (least, most)
    value = None
    if isinstance(raw, numbers.Integral) and not isinstance(raw, bool):  # numpy's integers too
        value = int(raw)
    elif text and isinstance(raw, str) and len(raw) <= 64 and re.fullmatch(r"\s*[+-]?[0-9_]+\s*", raw):
        try:
            value = int(raw)  # "1__0" and "_1" are no numbers to Python either
        except ValueError:
            pass
    if value is not None and value >= least and (most is None or value <= most):
        return value
    bound = f"≥ {least}" if most is None else f"from {least} to {most}"
    fix = most if most is not None and value is not None and value > most else least
    raise AdapterError(f"{who + ': ' if who else ''}{key} takes a whole number {bound}, got {raw!r}: set {key}={fix}")


def hydra_keys(spec: FrameworkSpec) -> set[str]:
    """The dotted config keys the user set for a framework configured through Hydra and OmegaConf (verl, AReaL):
    each ``--set`` key without Hydra's ``+``/``~`` prefix, and every key of the ``--config`` file, nodes and
    leaves (``actor``, ``actor.mb_spec``, ``actor.mb_spec.n_mbs``)."""
    keys = {k.lstrip("+~") for k, _ in spec.sets}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                keys.add(prefix + str(k))
                walk(v, f"{prefix}{k}.")

    if spec.config:
        from omegaconf import OmegaConf

        walk(OmegaConf.to_container(OmegaConf.load(spec.config)), "")
    return keys


def parse_spec(spec: str) -> FrameworkSpec:
    """The short forms: ``trl[:key=value,…]``, ``verl[:ESTIMATOR][:key=value,…]`` (trainer path;
    a key without a dot is under ``algorithm.``), ``verl:estimator=NAME[,key=value,…]``
    (the estimator function alone, bypassing the trainer) and ``openrlhf[:ESTIMATOR][:key=value,…]``
    (``train_ppo_ray`` option names: ``openrlhf:group_norm:algo.advantage.no_std_norm=true``)."""
    head, _, rest = spec.partition(":")
    framework = head.strip().lower()
    if framework not in FRAMEWORKS:
        raise AdapterError(f"{spec!r} names no framework ({', '.join(FRAMEWORKS)})")
    parts = [p.strip() for chunk in rest.split(":") for p in chunk.split(",") if p.strip()]
    pairs = [parse_set(p, framework) if "=" in p else (None, p) for p in parts]
    if framework == "verl" and any(k == "estimator" for k, _ in pairs):
        est = next(v for k, v in pairs if k == "estimator")
        opts = tuple((k, _literal(v)) for k, v in pairs if k not in (None, "estimator"))
        if any(k is None for k, _ in pairs):
            raise AdapterError(f"{spec!r}: write the estimator-function form as verl:estimator=NAME,key=value")
        return FrameworkSpec("verl", estimator=est, options=opts)
    sets: list[tuple[str, str]] = []
    for key, value in pairs:
        if key is None:
            if framework not in ESTIMATOR_KEY or any(k == ESTIMATOR_KEY[framework] for k, _ in sets):
                raise AdapterError(f"{spec!r}: {value!r} is no KEY=VALUE option")
            sets.append((ESTIMATOR_KEY[framework], value))
        elif framework == "verl" and "." not in key:
            sets.append((f"algorithm.{key}", value))
        else:
            sets.append((key, value))
    return FrameworkSpec(framework, sets=tuple(sets))


def _literal(raw: str) -> Any:
    """An estimator-function keyword's value: true/false, a number, or the string itself."""
    import ast

    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return raw


def setting_for(framework: str, what: str, value: str) -> str | None:
    """The setting of ``framework`` that gives ``value`` of ``what`` ('per_sample_weight', 'preset', or
    'split' with 'invariant'), from its registry row's ``settings``; None when the row names none."""
    entry = FRAMEWORK_TABLE.get(framework)
    return None if entry is None else entry.settings.get(what, {}).get(value)


def cispo_cap(loss_type: str, args: Any) -> tuple[float, str] | None:
    """The cap on the importance weight of ``loss_type`` 'cispo' (TRL's and ms-swift's GRPO arguments): the weight
    is clamp(ratio, max=``epsilon_high``), ``epsilon`` where that is unset; None for every other loss.

    >>> from types import SimpleNamespace as A
    >>> cispo_cap("cispo", A(epsilon=0.2, epsilon_high=None)), cispo_cap("dapo", A(epsilon=0.2, epsilon_high=5))
    ((0.2, 'epsilon_high=0.2'), None)
    """
    if loss_type != "cispo":
        return None
    high = float(args.epsilon_high if getattr(args, "epsilon_high", None) is not None else args.epsilon)
    return high, f"epsilon_high={high:g}"


@contextlib.contextmanager
def patched_attributes(patches: list[tuple[Any, str, Any]]) -> Iterator[None]:
    """``(object, name, value)``: each attribute set while the block runs, the old values back afterwards
    (how a driver lets a framework's own code meet the audit's stand-ins, and nothing else after)."""
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
    try:
        for obj, name, value in patches:
            setattr(obj, name, value)
        yield
    finally:
        for obj, name, value in reversed(saved):
            setattr(obj, name, value)
