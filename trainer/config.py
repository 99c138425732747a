"""Run configurations of the controlled runs, and the helpers that turn them into CLI options.

Standard library only, so that the command line can build its ``--help`` without numpy or
torch.  Each field's docstring is its ``--help`` text (written once, read with :mod:`ast`).

>>> BernoulliConfig().num_prompts, field_docs(BernoulliConfig)["lr"]
(6000, 'Learning rate of the plain SGD step on θ.')
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import math
import textwrap
from dataclasses import dataclass
from typing import Any, Mapping, Sequence, TypeVar

__all__ = ["BernoulliConfig", "field_docs", "add_arguments", "from_namespace"]


@dataclass(frozen=True)
class BernoulliConfig:
    """Settings of the controlled Bernoulli-logit run (PAPER claim 9); defaults are the paper's."""

    num_prompts: int = 6000
    """Number of prompts M, each a one-parameter policy p = sigmoid(θ)."""
    group_size: int = 8
    """Rollouts per prompt and step, G."""
    lr: float = 0.5
    """Learning rate of the plain SGD step on θ."""
    steps: int = 150
    """Training steps per arm."""
    seed: int = 0
    """Random seed (initial difficulties and rollouts; every arm uses the same seed)."""
    solve_rates: str | None = None
    """Solve-rate source for the initial difficulties: bigmath (the shipped Big-Math histogram),
    a parquet/JSONL/CSV file, a histogram CSV, or hf:NAME; default: bigmath."""
    max_draws: int = 4
    """DAPO: draws of a group per prompt and step while it is silent (1 = no resampling)."""
    clip_low: float = 0.02
    """Initial solve rates are clipped to [clip_low, clip_high]."""
    clip_high: float = 0.98
    """Upper end of the clip on initial solve rates."""
    mass_draws: int = 400
    """Independent groups drawn at the initial solve rates to measure the share of gradient mass by difficulty."""

    def __post_init__(self) -> None:
        def whole(name: str, lo: int, hi: int | None = None) -> None:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
                want = f"an integer >= {lo}" if hi is None else f"an integer from {lo} to {hi:,}"
                raise ValueError(f"{name} must be {want}, got {v!r}")

        whole("num_prompts", 4)
        whole("group_size", 2)
        whole("steps", 1, 10**6)  # every option bounded: a run that could not end is refused, not started
        whole("seed", 0, 2**32 - 1)
        whole("max_draws", 1, 1000)
        whole("mass_draws", 1, 10**5)
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and 0 < self.lr <= 100):
            raise ValueError(f"lr must be a finite number in (0, 100], got {self.lr!r}")
        if not (0 < self.clip_low < self.clip_high < 1):
            raise ValueError(f"need 0 < clip_low < clip_high < 1, got {self.clip_low!r}, {self.clip_high!r}")


C = TypeVar("C")


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a dataclass, by field name."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, nxt in zip(body, body[1:]):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def add_arguments(parser: argparse.ArgumentParser, cls: type, flags: Mapping[str, Sequence[str]] | None = None) -> None:
    """One option per dataclass field, help text from the field's docstring.

    ``flags`` maps a field to its option strings (default ``--field-name``)."""
    docs = field_docs(cls)
    flags = flags or {}
    for f in dataclasses.fields(cls):
        opts = list(flags.get(f.name, [f"--{f.name.replace('_', '-')}"]))
        kind: Any = {"int": int, "float": float}.get(str(f.type), str)
        default = f.default
        parser.add_argument(
            *opts,
            dest=f.name,
            type=kind,
            default=default,
            metavar=f.name.upper() if kind is str else None,
            help=f"{docs.get(f.name, '')} (default: {default})",
        )


def from_namespace(cls: type[C], args: argparse.Namespace) -> C:
    """Build the dataclass from parsed arguments (fields absent from ``args`` keep their default)."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in vars(args).items() if k in names})
