"""The property search: each property of :mod:`grpo_identity.checks.measure.properties` run under
hypothesis on reward batches, its violation shrunk to a small counterexample.

Hypothesis runs from one fixed seed (:data:`SEARCH_SEED`), with no example database, no deadline and
no explain phase (:func:`_phases`).  Its examples then depend on the strategies alone: the constants
hypothesis otherwise collects from every "local" module loaded in the process (the caller's own code,
a test session's modules) are left out while the audit searches, so the same target gets the same
examples whatever else is loaded, and nothing is written into a ``.hypothesis/`` folder of the
caller's working directory (what hypothesis does write goes to this project's cache folder).  See
:func:`quiet_hypothesis`.

>>> from grpo_identity import dial as D
>>> from grpo_identity.checks.measure.properties import Context, Tolerance, zero_sum_per_group
>>> ctx = Context(Tolerance.for_precision("float64"))
>>> run_property(zero_sum_per_group, lambda r, G: D.advantages(r, G, D.GRPO), ctx, 20, ("binary",))[0] is None
True
"""

from __future__ import annotations

import contextlib
import functools
import operator
import sys
import threading
from typing import Any, Callable, Iterator

import numpy as np

from grpo_identity.checks.calls.target import (
    Output,
    TargetCrashed,
    TargetError,
    TargetMalformed,
    TargetTimeout,
    View,
    output_of,
)
from grpo_identity.checks.measure import properties as P
from grpo_identity.foundation import cache_dir

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

__all__ = ["AnswerMemo", "FiniteGuard", "failure", "quiet_hypothesis", "run_property"]

#: the search's seed: every audit draws the same examples.  Under ``derandomize`` alone hypothesis seeds from a
#: hash of the test's source, decorators included here (a nested function), so any edit of :func:`run_property`
#: drew new examples for every audit
SEARCH_SEED = 0

_QUIET_LOCK = threading.Lock()
#: how many audits are inside :func:`quiet_hypothesis` now, and what to restore when none is
_quiet: dict[str, Any] = {"depth": 0, "restore": None}


@contextlib.contextmanager
def quiet_hypothesis() -> Iterator[None]:
    """While the audit searches: hypothesis's storage in this project's cache folder, and no
    constants drawn from the process's local modules.  Restored when the last audit inside leaves
    (audits in several threads share one patch), so a test session's own hypothesis tests are left
    as they were.  The second reaches into hypothesis's provider (no public setting exists); where
    a release lacks it, only the storage moves."""
    with _QUIET_LOCK:
        if _quiet["depth"] == 0:
            _quiet["restore"] = _patch_hypothesis()
        _quiet["depth"] += 1
    try:
        yield
    finally:
        with _QUIET_LOCK:
            _quiet["depth"] -= 1
            if _quiet["depth"] == 0:
                _quiet["restore"]()
                _quiet["restore"] = None


def _patch_hypothesis() -> Callable[[], None]:
    """Patch hypothesis (see :func:`quiet_hypothesis`); return the function that undoes it."""
    from hypothesis import configuration

    before = getattr(configuration, "__hypothesis_home_directory", None)
    configuration.set_hypothesis_home_dir(cache_dir("hypothesis"))
    providers: Any = None
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:  # pragma: no cover
        pass
    local = getattr(providers, "_get_local_constants", None)
    cache: Any = getattr(getattr(providers, "CONSTANTS_CACHE", None), "cache", None)
    patch = local is not None and cache is not None and hasattr(providers, "Constants")
    if patch:
        cache.clear()
        providers._get_local_constants = providers.Constants

    def restore() -> None:
        if patch:
            providers._get_local_constants = local
            cache.clear()
        configuration.set_hypothesis_home_dir(before)

    return restore


def failure(exc: TargetError, where: str = "") -> str:
    """A target error in words: "the target timed out / crashed / raised{where}: …", or, for a
    malformed output, "the target returned None{where}, not an array …"."""
    if isinstance(exc, TargetMalformed):
        head, _, tail = str(exc).partition(",")
        return f"the target {head}{where},{tail}" if tail else f"the target {exc}{where}"
    what = "timed out" if isinstance(exc, TargetTimeout) else "crashed" if isinstance(exc, TargetCrashed) else "raised"
    return f"the target {what}{where}: {exc}"


class FiniteGuard(View):
    """The target, except that a NaN or an inf in its advantages is one ``well_formed`` violation
    at once: every later comparison (NaN ≠ NaN) would otherwise report false findings
    ("stateless", "permutation") and an infinite silent-group residue."""

    def __init__(self, target: Any, skip: bool = False) -> None:
        super().__init__(target)
        self._skip = skip
        """Once a non-finite output is a finding: skip such a batch (the property judges the batches with numbers)."""

    def call(self, rewards: np.ndarray, group_size: int, *extra: Any) -> Output:
        out = output_of(self._target, rewards, group_size, *extra)
        A = np.asarray(out.value)
        if not extra and A.shape == rewards.shape and np.issubdtype(A.dtype, np.floating):
            bad = ~np.isfinite(A)
            if bad.any() and self._skip:
                from hypothesis import reject

                reject()
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                g, G = i // group_size, int(group_size)
                row = rewards[g * G : (g + 1) * G]
                message = (
                    f"non-finite advantage {float(A[i])} in group {g} (G={G}, rewards {P._fmt(row)}): "
                    "the identity is undefined there"
                )
                raise P.PropertyViolation("well_formed", message, P._example(rewards, G, A.astype(np.float64), g))
        return out


class AnswerMemo(View):
    """The target, which answers an input it answered before from memory while :attr:`serving` is set.

    Every property draws its examples from the same seed, so the search asks a target the same batch many times
    (a 200-example TRL audit: 436 calls of 166 distinct inputs; 66,000 rows scored, 34,000 of them distinct).
    While a property that judges answers runs, an input the target answered before (rewards, group size and the
    extra arguments, byte for byte) gets a copy of that answer; the properties that judge the calls themselves
    (:data:`~grpo_identity.checks.measure.properties.CALL_PROPERTIES`: ``well_formed`` and ``stateless`` among them)
    run with :attr:`serving` off, and see a target that keeps state, hands out one buffer or changes its input as
    before.  What the memo costs: a target whose answers change only after many calls, or flip back and forth, is
    called fewer times with the same input, and a non-deterministic target's findings lose their "flaky" remark
    (hypothesis replays them from memory); ``stateless`` still calls such a target twice in a row, and compares
    the first answer with the one remembered from before the calls between (:meth:`earlier`).  Every call that
    reaches the target is remembered, its first answer kept (up to :data:`_MEMO_NUMBERS` numbers); a call that
    raises is not."""

    def __init__(self, target: Any) -> None:
        super().__init__(target)
        self._answers: dict[tuple[Any, ...], np.ndarray] = {}
        self._numbers = 0  # how many are remembered: inputs, extra arguments and answers
        self.serving = False

    def call(self, rewards: np.ndarray, group_size: int, *extra: Any) -> Output:
        key = _input_key(rewards, group_size, extra)
        if self.serving and key in self._answers:
            return Output(self._answers[key].copy())
        out = output_of(self._target, rewards, group_size, *extra)
        value = out.value
        if key is not None and isinstance(value, np.ndarray) and key not in self._answers:
            size = value.size + sum(a.size for a in (rewards, *extra) if isinstance(a, np.ndarray))
            if self._numbers + size <= _MEMO_NUMBERS:
                self._answers[key] = value.copy()
                self._numbers += size
        return out

    def earlier(self, rewards: np.ndarray, group_size: int, *extra: Any) -> np.ndarray | None:
        """A copy of the target's first answer to this input (byte for byte), served or not; None where none is
        remembered."""
        key = _input_key(rewards, group_size, extra)
        answer = self._answers.get(key) if key is not None else None
        return None if answer is None else answer.copy()

    @contextlib.contextmanager
    def serve(self, on: bool) -> Iterator[None]:
        """Answers from memory (``on``) for the calls inside the block; as before after it."""
        before, self.serving = self.serving, on
        try:
            yield
        finally:
            self.serving = before


#: the most numbers (inputs and answers) one audit remembers: 32 MiB of float64; a 200-example audit of TRL
#: remembers 34,000 rewards and their answers
_MEMO_NUMBERS = 1 << 22


def _input_key(rewards: Any, group_size: Any, extra: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The input of one call, byte for byte, or None where the group size is no integer or an argument is neither
    an array nor None."""
    try:
        parts: list[Any] = [operator.index(group_size)]
    except TypeError:
        return None
    for a in (rewards, *extra):
        if a is None:
            parts.append(None)
        elif isinstance(a, np.ndarray) and a.dtype != object:
            parts.append((a.dtype.str, a.shape, a.tobytes()))
        else:
            return None
    return tuple(parts)


def run_property(
    prop: Callable[..., None], target: Any, ctx: P.Context, n: int, kinds: tuple[str, ...]
) -> tuple[P.PropertyViolation | None, int]:
    """Run one property on ``n`` hypothesis examples; return its (shrunk) violation and the count."""
    from hypothesis import HealthCheck, Verbosity, given, seed, settings
    from hypothesis import strategies as st

    count = [0]
    name = prop.__name__

    @seed(SEARCH_SEED)
    @settings(
        max_examples=n,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
        report_multiple_bugs=False,
        print_blob=False,
        phases=_phases(),
    )
    @given(batch=_batches(kinds), seed=st.integers(0, 2**32 - 1))
    def run(batch: Any, seed: int) -> None:
        count[0] += 1
        try:
            prop(target, batch, ctx, np.random.default_rng(seed))
        except TargetError as exc:
            met = _met(exc) or P._example(batch.contiguous(), batch.group_size)
            raise P.PropertyViolation(name, failure(exc), met) from None

    from hypothesis.errors import Unsatisfiable

    try:
        with quiet_hypothesis():
            run()
    except P.PropertyViolation as v:
        return v, count[0]
    except Unsatisfiable:  # every batch was skipped (a target non-finite everywhere): nothing judged, nothing found
        return None, 0
    except BaseExceptionGroup as group:  # hypothesis's Flaky: the same input failed only sometimes
        first = _first_violation(group)
        if first is None:
            raise
        return P.PropertyViolation(
            first.property,
            f"{first.message} (and not on every run of the same input: flaky, the target is not deterministic)",
            first.counterexample,
        ), count[0]
    return None, count[0]


def _met(exc: TargetError) -> dict[str, Any] | None:
    """The counterexample of a call that raised: the input the property passed (rows in its order, with their
    group ids where it passed them), not the batch it drew; None where the error does not tell it."""
    met = getattr(exc, "called_with", None)
    if met is None:
        return None
    rewards, group_size, extra = met
    ids = extra[0] if len(extra) == 1 and isinstance(extra[0], np.ndarray) else None
    if ids is None or ids.shape != np.shape(rewards):
        n_groups = len(rewards) // max(int(group_size), 1)
        return {"group_size": int(group_size), "n_groups": n_groups, "rewards": P._list(np.asarray(rewards))}
    return {
        "group_size": int(group_size),
        "n_groups": len(np.unique(ids)),
        "rewards": P._list(np.asarray(rewards)),
        "group_ids": P._list(ids),
    }


def _phases() -> tuple[Any, ...]:
    """Hypothesis's phases but ``explain``, which varies the shrunk example's parts after shrinking to write
    comments into a failure pytest prints; the audit prints none.  With it on, Python 3.11's hypothesis also
    traces every call after the first failure (``sys.settrace``), the shrink included: the two together were
    90 % of a failing property's time (2.7 s a property here).  Without it the reported example is exactly the
    shrinker's (explain's own calls could replace it by a smaller failure they met), and a failing audit's
    ``examples`` counts fewer calls (it counts every call of the target, the shrink's included)."""
    from hypothesis import Phase

    return tuple(p for p in Phase if p is not Phase.explain)


@functools.lru_cache(maxsize=8)
def _batches(kinds: tuple[str, ...]) -> Any:
    from grpo_identity.checks.measure.strategies import reward_batches

    return reward_batches(kinds=kinds, max_groups=6, max_total=2048)


def _first_violation(group: BaseExceptionGroup) -> P.PropertyViolation | None:
    for exc in group.exceptions:
        if isinstance(exc, P.PropertyViolation):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            found = _first_violation(exc)
            if found is not None:
                return found
    return None
