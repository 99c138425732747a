"""Hypothesis strategies for reward batches, group sizes and score matrices.

Plural nouns, keyword-only options validated eagerly (a bad option raises ``ValueError`` when the
strategy is built, not when it is drawn).  Arrays are built by numpy from a few drawn integers
(group sizes, numbers correct, reward levels, a seed), so batches of thousands of rewards are
cheap to draw and shrink towards small groups, few groups and k = 0.

>>> from hypothesis import given
>>> @given(reward_batches(kinds=("binary",), max_groups=3))
... def test(batch):
...     assert batch.rewards.shape == (batch.n_groups * batch.group_size,)
>>> test()
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from hypothesis import strategies as st

from grpo_identity.checks.calls.calling import to_numpy
from grpo_identity.checks.measure.infer import PROBE_GROUP_SIZES

__all__ = ["RewardBatch", "group_sizes", "reward_batches", "score_matrices", "KINDS", "DTYPES", "LAYOUTS"]

#: reward kinds: {0, 1}; two values {a, b} per group (e.g. {0.1, 0.9}); any real numbers
KINDS = ("binary", "two_valued", "continuous")
#: array types and dtypes of a drawn batch
DTYPES = ("float64", "float32", "torch.float32", "torch.bfloat16")
#: contiguous blocks of G, or rows in any order with a group-id array
LAYOUTS = ("contiguous", "shuffled")
#: reward levels two-valued groups draw from (both exactly and inexactly representable numbers)
_LEVELS = (0.0, 1.0, 0.1, 0.9, 0.5, -1.0, 2.0, 0.3, 0.25, 10.0, -0.2, 1.0 / 3.0)


@dataclass(frozen=True)
class RewardBatch:
    """One drawn batch: ``rewards`` (1-D, n_groups × G) with its group layout.

    ``group_ids[i]`` is the group of row i (``None`` for contiguous blocks); ``num_correct[j]`` the
    number of rows of group j at its higher value (two-valued kinds), ``order`` the permutation
    that took the contiguous batch to this one (``None`` for contiguous).
    """

    rewards: Any
    group_size: int
    kind: str
    group_ids: Any = None
    num_correct: tuple[int, ...] = field(default=())
    order: Any = None

    @property
    def n_groups(self) -> int:
        return int(self.rewards.shape[0]) // self.group_size

    def contiguous(self) -> np.ndarray:
        """The rewards as float64 numpy, laid out group by group."""
        r = to_numpy(self.rewards).astype(np.float64)
        if self.order is None:
            return r
        out = np.empty_like(r)
        out[self.order] = r
        return out


def _check_choice(name: str, values: Sequence[str], allowed: Sequence[str]) -> tuple[str, ...]:
    if isinstance(values, str):
        values = (values,)
    values = tuple(values)
    if not values:
        raise ValueError(f"{name} must name at least one of {allowed}")
    bad = [v for v in values if v not in allowed]
    if bad:
        raise ValueError(f"{name} must be chosen from {allowed}, got {bad[0]!r}")
    return values


def _check_int(name: str, v: Any, lo: int, hi: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo or (hi is not None and v > hi):
        raise ValueError(f"{name} must be an integer in [{lo}, {hi if hi is not None else '∞'}], got {v!r}")
    return int(v)


def group_sizes(*, min_value: int = 2, max_value: int = 256) -> st.SearchStrategy[int]:
    """Group sizes G in [min_value, max_value], often the usual ones: the audit's probe sizes
    :data:`~grpo_identity.checks.measure.infer.PROBE_GROUP_SIZES` (2, 3, 4, 8, 16, 64)."""
    lo = _check_int("min_value", min_value, 2)
    hi = _check_int("max_value", max_value, lo)
    usual = [g for g in PROBE_GROUP_SIZES if lo <= g <= hi]
    ints = st.integers(lo, hi)
    return st.one_of(st.sampled_from(usual), ints) if usual else ints


def reward_batches(
    *,
    kinds: Sequence[str] = KINDS,
    group_size: st.SearchStrategy[int] | int | None = None,
    min_groups: int = 1,
    max_groups: int = 8,
    layouts: Sequence[str] = ("contiguous",),
    dtypes: Sequence[str] = ("float64",),
    max_total: int = 4096,
) -> st.SearchStrategy[RewardBatch]:
    """Reward batches of many groups, with silent groups (k = 0 or G) drawn often.

    Options are checked when the strategy is built (a bad one raises ``ValueError`` at once).

    Parameters
    ----------
    kinds : sequence of str
        Reward kinds to draw, a subset of :data:`KINDS` (binary {0, 1}, two-valued {a, b},
        continuous).
    group_size : int or SearchStrategy[int], optional
        A fixed G ≥ 2, or a strategy of them; default :func:`group_sizes`.
    min_groups, max_groups : int
        Groups per batch.
    layouts : sequence of str
        How groups are laid out in the 1-D batch, a subset of :data:`LAYOUTS`.
    dtypes : sequence of str
        Reward dtypes, a subset of :data:`DTYPES` (the torch ones need torch).
    max_total : int
        At most this many rewards per batch.

    Returns
    -------
    SearchStrategy[RewardBatch]
        Each batch knows its group size, kind and layout; ``contiguous()`` gives the rewards
        group by group.

    Examples
    --------
    >>> from hypothesis import given, settings
    >>> @settings(max_examples=5, database=None)
    ... @given(reward_batches(kinds=["binary"], group_size=4))
    ... def test(batch):
    ...     assert batch.contiguous().size % 4 == 0
    >>> test()
    """
    kinds_ = _check_choice("kinds", kinds, KINDS)
    layouts_ = _check_choice("layouts", layouts, LAYOUTS)
    dtypes_ = _check_choice("dtypes", dtypes, DTYPES)
    lo = _check_int("min_groups", min_groups, 1)
    hi = _check_int("max_groups", max_groups, lo)
    total = _check_int("max_total", max_total, 2)
    if group_size is None:
        sizes: st.SearchStrategy[int] = group_sizes()
    elif isinstance(group_size, st.SearchStrategy):
        sizes = group_size
    else:
        sizes = st.just(_check_int("group_size", group_size, 2))

    kind_st, layout_st, dtype_st = st.sampled_from(kinds_), st.sampled_from(layouts_), st.sampled_from(dtypes_)

    @st.composite
    def draw_batch(draw: Any) -> RewardBatch:
        G = draw(sizes)
        kind = draw(kind_st)
        n = draw(_n_groups(lo, max(lo, min(hi, total // G))))
        seed = draw(_SEEDS)
        rng = np.random.default_rng(seed)
        drawn = [_group(draw, rng, kind, G) for _ in range(n)]
        rows, ks = [row for row, _ in drawn], [k for _, k in drawn]
        rewards = np.concatenate(rows)  # (n·G,) group by group
        layout = draw(layout_st)
        ids, order = None, None
        if layout == "shuffled":
            order = rng.permutation(n * G)
            ids = np.repeat(np.arange(n), G)[order]
            rewards = rewards[order]
        dtype = draw(dtype_st)
        return RewardBatch(_cast(rewards, dtype), G, kind, ids, tuple(ks), order)

    return draw_batch()


def _group(draw: Any, rng: np.random.Generator, kind: str, G: int) -> tuple[np.ndarray, int]:
    """One group's rewards, and its k (−1 for continuous rewards); k at the ends (silent groups)
    as often as in the middle."""
    end = draw(_ENDS)
    k = (0, G, 1, G - 1)[end] if end < 4 else draw(_ks(G))
    if kind == "continuous":
        if draw(_BOOLS) and k in (0, G):  # a silent continuous group: one value repeated
            return np.full(G, _LEVELS[draw(_LEVEL)]), -1
        return rng.normal(size=G) * (1.0, 0.01, 100.0)[draw(_SCALE)], -1
    if kind == "binary":
        low, high = 0.0, 1.0
    else:
        i, j = draw(_LEVEL), draw(_LEVEL)
        if i == j:
            j = (j + 1) % len(_LEVELS)
        low, high = sorted((_LEVELS[i], _LEVELS[j]))
    r = np.full(G, low)
    r[rng.permutation(G)[:k]] = high
    return r, k


# strategies drawn inside the loops, built once (building one costs more than drawing from it)
_ENDS = st.integers(0, 7)  # 0-3: k ∈ {0, G, 1, G−1}; 4-7: any k
_BOOLS = st.booleans()
_LEVEL = st.integers(0, len(_LEVELS) - 1)
_SCALE = st.integers(0, 2)


_SEEDS = st.integers(0, 2**32 - 1)


@functools.lru_cache(maxsize=512)
def _n_groups(lo: int, hi: int) -> st.SearchStrategy[int]:
    return st.integers(lo, hi)


@functools.lru_cache(maxsize=512)
def _ks(G: int) -> st.SearchStrategy[int]:
    return st.integers(0, G)


def _cast(x: np.ndarray, dtype: str) -> Any:
    if dtype == "float64":
        return x
    if dtype == "float32":
        return x.astype(np.float32)
    import torch

    return torch.as_tensor(x, dtype=getattr(torch, dtype.split(".")[1]))


def score_matrices(
    n_rows: int, *, max_dims: int = 3, max_side: int = 4, dtype: str = "float64"
) -> st.SearchStrategy[Any]:
    """Score matrices with ``n_rows`` rows (one per answer) and 0…``max_dims`` trailing dimensions.

    Entries are standard normal (from a drawn seed); a score row sᵢ = ∇ log π(yᵢ|x) may have any
    shape, the identity holds row by row.
    """
    rows = _check_int("n_rows", n_rows, 1)
    nd = _check_int("max_dims", max_dims, 0, 6)
    side = _check_int("max_side", max_side, 1)
    dt = _check_choice("dtype", (dtype,), DTYPES)[0]

    @st.composite
    def draw_scores(draw: Any) -> Any:
        shape = tuple(draw(st.lists(st.integers(1, side), min_size=0, max_size=nd)))
        seed = draw(st.integers(0, 2**32 - 1))
        s = np.random.default_rng(seed).standard_normal((rows, *shape))
        return _cast(s, dt)

    return draw_scores()
