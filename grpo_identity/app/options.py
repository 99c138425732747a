"""Option checks of the command layer: argparse types that reject bad numbers in one line,
config errors told in the options the user typed, and the memory budget of the training runs.

Standard library only (the CLI builds its ``--help`` from these).

>>> integer(2, 10)("11")
Traceback (most recent call last):
argparse.ArgumentTypeError: must be an integer from 2 to 10, got 11
>>> flags = {"group_size": ["--G", "--group-size"]}
>>> in_options("group_size must be an integer >= 2, got 1", flags, ["--group-size", "1"])
'--group-size must be an integer >= 2, got 1'
>>> over_budget([("rollouts", 3 * 2**40, ["--G", "--M"])]) is not None
True
"""

from __future__ import annotations

import argparse
import math
import re
from typing import Callable, Mapping, Sequence, TypeVar

__all__ = [
    "MEMORY_BUDGET",
    "MEMORY_BUDGET_VARIABLE",
    "memory_budget",
    "budget_help",
    "integer",
    "number",
    "in_options",
    "typed_option",
    "option_names",
    "build_config",
    "over_budget",
    "refuse_over_budget",
    "human_bytes",
]

C = TypeVar("C")

#: the most memory (bytes) a training run of the CLI may need by its estimate; larger settings
#: are refused before any work (the library's run functions have no such limit)
MEMORY_BUDGET = 16 * 2**30
#: environment variable that sets another budget, in GiB (e.g. on a large GPU)
MEMORY_BUDGET_VARIABLE = "GRPO_IDENTITY_MEMORY_GIB"


def memory_budget() -> int:
    """The budget in bytes: :data:`MEMORY_BUDGET`, or ``$GRPO_IDENTITY_MEMORY_GIB`` GiB when set."""
    import os

    from grpo_identity.foundation import UsageError

    text = os.environ.get(MEMORY_BUDGET_VARIABLE, "").strip()
    if not text:
        return MEMORY_BUDGET
    try:
        gib = float(text)
    except ValueError:
        gib = math.nan
    if not (math.isfinite(gib) and gib > 0):
        raise UsageError(f"{MEMORY_BUDGET_VARIABLE} must be a number of GiB > 0, got {text!r}")
    return int(gib * 2**30)


def budget_help() -> str:
    """The sentence of a training command's ``--help`` that states the budget."""
    return (
        f"Settings whose estimated memory exceeds {human_bytes(MEMORY_BUDGET)} are refused before the run "
        f"(set {MEMORY_BUDGET_VARIABLE} to another number of GiB to change that)."
    )


def _fmt(x: float) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def integer(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An argparse ``type``: an integer in [lo, hi] (no upper end when ``hi`` is None)."""

    def parse(text: str) -> int:
        want = f"an integer >= {lo}" if hi is None else f"an integer from {lo} to {_fmt(hi)}"
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {want}, got {text!r}") from None
        if v < lo or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"must be {want}, got {v}")
        return v

    parse.__name__ = "integer"
    return parse


def number(lo: float | None = None, hi: float | None = None) -> Callable[[str], float]:
    """An argparse ``type``: a finite float in [lo, hi] (either end may be open-ended)."""

    def parse(text: str) -> float:
        want = "a finite number" + (
            f" in [{_fmt(lo)}, {_fmt(hi)}]"
            if lo is not None and hi is not None
            else f" >= {_fmt(lo)}"
            if lo is not None
            else f" <= {_fmt(hi)}"
            if hi is not None
            else ""
        )
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {want}, got {text!r}") from None
        if not math.isfinite(v) or (lo is not None and v < lo) or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"must be {want}, got {text}")
        return v

    parse.__name__ = "number"
    return parse


def typed_option(aliases: Sequence[str], argv: Sequence[str]) -> str:
    """The one of ``aliases`` (``["--G", "--group-size"]``) that ``argv`` used, else the first."""
    for arg in argv:
        name = arg.split("=", 1)[0]
        if name in aliases:
            return name
    return aliases[0]


def in_options(message: str, flags: Mapping[str, Sequence[str]], argv: Sequence[str]) -> str:
    """``message`` (from a config record, naming fields such as ``group_size``) with each field
    name replaced by the option the user typed for it (``--G``)."""
    for field, aliases in flags.items():
        message = re.sub(rf"(?<![\w-]){re.escape(field)}(?!\w)", typed_option(aliases, argv), message)
    return message


def human_bytes(n: float) -> str:
    """``n`` bytes in the largest unit that keeps it >= 1 (``'1.5 GiB'``)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    raise AssertionError("unreachable")


def over_budget(terms: Sequence[tuple[str, float, Sequence[str]]], budget: int = MEMORY_BUDGET) -> str | None:
    """None when the estimated memory (the sum of ``terms``: ``(what, bytes, options it grows
    with)``) fits ``budget``; else one line naming the options of the largest term."""
    total = sum(b for _, b, _ in terms)
    if total <= budget:
        return None
    what, _, options = max(terms, key=lambda t: t[1])
    named = ", ".join(options[:-1]) + " or " + options[-1] if len(options) > 1 else options[0]
    return (
        f"these settings need about {human_bytes(total)} of memory, mostly {what}, over the budget of "
        f"{human_bytes(budget)}: lower {named} (or raise {MEMORY_BUDGET_VARIABLE})"
    )


def option_names(cls: type, flags: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """Each field of the dataclass ``cls`` -> its option strings (``flags``, else ``--field-name``)."""
    import dataclasses

    return {f.name: list(flags.get(f.name, [f"--{f.name.replace('_', '-')}"])) for f in dataclasses.fields(cls)}


def build_config(make: Callable[[], C], flags: Mapping[str, Sequence[str]], argv: Sequence[str]) -> C:
    """``make()`` (a config record built from the options), its ValueError told in the options
    the user typed (:func:`in_options`) as a UsageError."""
    from grpo_identity.foundation import UsageError

    try:
        return make()
    except (TypeError, ValueError) as exc:
        raise UsageError(in_options(str(exc).splitlines()[0], flags, argv)) from None


def refuse_over_budget(terms: Sequence[tuple[str, float, Sequence[str]]]) -> None:
    """Raise a UsageError with :func:`over_budget`'s line when ``terms`` exceed :func:`memory_budget`."""
    from grpo_identity.foundation import UsageError

    line = over_budget(terms, memory_budget())
    if line is not None:
        raise UsageError(line)
