"""Edge probes: batches real trainers meet that the property search does not draw.

Each probe calls the target once and returns a :class:`~grpo_identity.checks.auditor.Finding`
(a ``note`` that says what the target does, or a ``fail`` when it returns NaN/inf or changes the
whole groups' advantages), or ``None`` when there is nothing to say:

- remainder: n·G + G//2 rewards (a last, partial group), where the target accepts them;
- tiny spread: one group of 0.7 + 1e-5·noise, whose σ is far below any ε (a spread float16 or bfloat16 rewards keep);
- singleton groups (G = 1): σ = 0, so the advantage should be 0: NaN, a nonzero push (the raw
  reward) or refusing G = 1 is a note (a fixed-G target meets G = 1 only if configured).

>>> from grpo_identity import dial as D
>>> [f.message.split(":")[0] for f in run_probes(lambda r, G: D.advantages(r, G, D.GRPO))][::2]
['rejects 30 rewards at G=4 (a partial last group)', 'rejects G = 1']
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from grpo_identity.checks.measure.infer import UNIT_ROUNDOFF, probe_batch

__all__ = ["run_probes", "PROBES", "filter_singletons"]


def _finding(name: str, message: str, severity: str = "note", example: dict[str, Any] | None = None) -> Any:
    from grpo_identity.checks.report import Finding

    return Finding(name, message, example or {}, severity)


def remainder(target: Callable[..., Any]) -> Any:
    """n·G + G//2 rewards: does the target accept a partial last group, and leave the whole ones alone?"""
    G = 4
    whole = probe_batch(G)
    r = np.r_[whole, 1.0, 0.0]
    try:
        A = np.asarray(target(r, G), dtype=np.float64)
    except Exception as exc:
        return _finding(
            "probe_remainder",
            f"rejects {r.size} rewards at G={G} (a partial last group): {str(exc).splitlines()[0][:160]}",
        )
    if A.shape != r.shape or not np.all(np.isfinite(A)):
        return _finding(
            "probe_remainder",
            f"accepts {r.size} rewards at G={G} but returns {A.shape} "
            f"values{'' if A.shape != r.shape else ' with NaN/inf'}",
            "fail",
            {"group_size": G, "rewards": r.tolist()},
        )
    ref = np.asarray(target(whole, G), dtype=np.float64)
    if not np.allclose(A[: whole.size], ref, rtol=1e-4, atol=1e-6):
        return _finding(
            "probe_remainder",
            f"accepts a partial last group at G={G}, and it changes the whole groups' advantages (max change "
            f"{float(np.abs(A[: whole.size] - ref).max()):.3g})",
            "fail",
            {"group_size": G, "rewards": r.tolist()},
        )
    return _finding(
        "probe_remainder",
        f"accepts {r.size} rewards at G={G}: the partial last group [1, 0] gets {np.round(A[-2:], 6).tolist()}, the "
        "whole groups are unchanged",
    )


#: the tiny spread's rewards: 0.7 + TINY_SPREAD·noise, or a few units in the last place of the rewards' dtype where
#: it rounds 1e-5 away (float16, bfloat16; in [0.5, 1) the spacing of floats is the unit roundoff)
TINY_SPREAD = 1e-5


def tiny_spread(target: Callable[..., Any]) -> Any:
    """One group of 0.7 + s·noise (G = 8): how large does the target make a spread of s?  s is
    :data:`TINY_SPREAD`, or 4 units in the last place at 0.7 where the rewards go in a dtype that rounds it away
    (``--reward-dtype float16``: the group would be silent, and the probe would say nothing of a spread)."""
    G = 8
    noise = np.random.default_rng(0).standard_normal(G)
    dtype = str(getattr(target, "dtype", "float64"))
    spread = max(TINY_SPREAD, 4 * UNIT_ROUNDOFF.get(dtype, 0.0))
    r = np.r_[0.7 + spread * noise, np.r_[np.ones(4), np.zeros(4)]]
    A = np.asarray(target(r, G), dtype=np.float64)
    said = f"{spread:.0e}".replace("e-0", "e-")
    what = f"0.7 + {said}·noise" + (f", a spread {dtype} rewards keep" if spread > TINY_SPREAD else "")
    if not np.all(np.isfinite(A)):
        return _finding("probe_tiny_spread", f"a group of {what} gets NaN/inf advantages", "fail", {"group_size": G})
    big = float(np.abs(A[:G]).max())
    return _finding(
        "probe_tiny_spread",
        f"a group whose rewards differ by ~{said} ({what}, G={G}) gets |Â| up to {big:.3g} (a 0/1 group: "
        f"{float(np.abs(A[G:]).max()):.3g}): {'noise scaled up to full weight' if big > 0.1 else 'kept small'}",
    )


def singletons(target: Callable[..., Any]) -> Any:
    """G = 1: a lone answer has no group to centre on; σ = 0, so the identity gives it no push and
    every advantage should be exactly 0.  A target called with a fixed G meets G = 1 only if its
    user configures it (and GRPO's std and RLOO need G ≥ 2): NaN or inf there, a nonzero value (the
    raw reward: REINFORCE with no baseline) and refusing G = 1 are notes that say so.  Targets that
    take group ids meet lone answers in ragged batches: the ``ragged_groups`` property judges those
    (NaN fails there)."""
    r = np.array([1.0, 0.0, 0.7])
    try:
        A = np.asarray(target(r, 1), dtype=np.float64)
    except Exception as exc:
        return _finding("probe_singleton", f"rejects G = 1: {str(exc).splitlines()[0][:160]}")
    if A.shape == r.shape and np.all(A == 0):
        return None
    example = {"group_size": 1, "rewards": r.tolist()}
    if A.shape == r.shape and not np.all(np.isfinite(A)):
        message = (
            f"G = 1 (a lone answer, σ = 0) gives {A.tolist()}: NaN or inf would poison the step's gradient "
            "(keep G ≥ 2 in the configuration)"
        )
        return _finding("probe_singleton", message, "note", example)
    message = (
        f"G = 1 (a lone answer, σ = 0) gives {np.round(A, 6).tolist()} instead of zeros: a push by the raw "
        "reward with no baseline, where the identity gives none"
    )
    return _finding("probe_singleton", message, "note", example)


def filter_singletons(target: Callable[..., Any], keep: str | None) -> Any:
    """G = 1 for a filter: every group is one answer, σ = 0, so DAPO's rule drops them all (a keep-all
    rule keeps them).  At a fixed G this happens only if configured: what the filter does is a note."""
    r = np.array([1.0, 0.0, 0.7])
    try:
        flags = np.asarray(target(r, 1)).astype(bool).reshape(-1)
    except Exception as exc:
        return _finding("probe_filter_singleton", f"rejects G = 1: {str(exc).splitlines()[0][:160]}")
    want = np.ones(3, dtype=bool) if keep == "all" else np.zeros(3, dtype=bool)
    if flags.shape == want.shape and np.array_equal(flags, want):
        return None
    message = (
        f"G = 1 (lone answers, σ = 0): keeps {flags.tolist()}; the keep rule '{keep}' "
        f"{'keeps' if keep == 'all' else 'drops'} every one (a fixed-G filter meets G = 1 only if configured)"
    )
    return _finding("probe_filter_singleton", message, "note", {"group_size": 1, "rewards": r.tolist()})


#: the edge probes, in report order
PROBES = (remainder, tiny_spread, singletons)
#: the finding each probe reports, also when it could not run
PROBE_FINDINGS = {remainder: "probe_remainder", tiny_spread: "probe_tiny_spread", singletons: "probe_singleton"}


def run_probes(target: Callable[..., Any]) -> list[Any]:
    """Every probe's finding (or ``None``); a target error inside a probe is that probe's note."""
    out = []
    for probe in PROBES:
        try:
            out.append(probe(target))
        except Exception as exc:  # a timeout or crash in the child: say so, do not stop the audit
            out.append(_finding(PROBE_FINDINGS[probe], f"the probe could not run: {str(exc).splitlines()[0][:160]}"))
    return out
