"""The pre-registered analysis of the fixed-policy experiment: one estimator, four criteria, fixed
in code before the runs they judge (issue 21).  The first stored run chose its weighted fit and
its pass marks after its numbers were seen; from here on, these constants decide.

Estimator: the slope of ‖E[g | k]‖ against σ_k, one per mode, computed by
:mod:`.conditional_summary` from :mod:`.conditional_stats` as ``slope_by_mode[mode]["weighted"]``
(read here, never recomputed):

1. cells: (prompt, k) with 0 < k < G and at least ``cond_min_cell`` groups of that k;
2. ‖E[g | k]‖² of a cell: the unbiased U-statistic Σ_{a≠b} ⟨g_a, g_b⟩ / (n(n − 1)) over its n
   groups (no noise term; a cell with U ≤ 0 has no logarithm and drops out);
3. ``cond_bootstrap`` resamples of the groups within each cell, with replacement; a resample's U
   uses only pairs of distinct original groups;
4. each cell's weight: f / Var(log √U*), the inverse variance of its log ‖E[g | k]‖ over the
   resamples with U* > 0, times their share f (weight 0 with fewer than three such resamples);
5. the slope: the weighted least-squares fit of log √U on log σ_k with a free intercept per
   prompt (weighted centring within each prompt), Σ w·x̃·ỹ / Σ w·x̃²;
6. its 95 % interval: the 2.5 and 97.5 percentiles of the same fit, same weights, over the
   resamples (none with fewer than ten finite resamples).

The plain unweighted fit (the same without weights) is reported beside it and judges nothing.

Criteria (:data:`PREREGISTERED_CRITERIA`; each ``met``, ``not met`` or ``not testable``):

- ``grpo_slope``: GRPO's interval contains 1 and lies inside (0.5, 1.5);
- ``dr_grpo_slope``: Dr. GRPO's interval contains 2 and lies inside (1.5, 2.5);
- ``cosine_median``: for each mode, the median cosine between E[g | k] and E[g | k'] (k ≠ k', one
  prompt; inner products from different groups, norms from U; a pair with U ≤ 0 drops out) is at
  least 0.9;
- ``noise_ratio``: for each mode, the median over cells of tr Cov(g | k) measured (unbiased, from
  the Gram matrix) over its prediction c²(tr Σ₊/k + tr Σ₋/(G − k)) (theorem G8, measured traces)
  lies in [0.8, 1.25], over the cells of prompts whose tr Σ₊ is at least 5 % of tr Σ₊ + tr Σ₋.
  With no such prompt it is not testable: a prompt with one correct answer has Σ₊ = 0 (every
  correct answer is one sequence), so G8's Σ₊/k term is never exercised.

A criterion whose estimate is missing (a mode not measured, no interval) is not testable, with
the reason; it is never counted as met.  ``commit`` is the latest commit that changed any of
:data:`ANALYSIS_FILES` (``git log -1 --format=%H -- FILES``), read at run time from a git
checkout; from an installed package it is None, and the files' SHA-256 identifies the analysis.

>>> evaluate({"slope_by_mode": {}, "prompts": []}, commit=False)["criteria"]["grpo_slope"]
'not testable'
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = [
    "PREREGISTERED_CRITERIA",
    "SLOPE_CRITERIA",
    "COSINE_MEDIAN_MIN",
    "NOISE_RATIO_RANGE",
    "NOISE_MIN_POSITIVE_SHARE",
    "ANALYSIS_FILES",
    "MET",
    "NOT_MET",
    "NOT_TESTABLE",
    "evaluate",
    "analysis_commit",
    "observed_text",
]

#: mode -> (the predicted slope the interval must contain, the open bounds it must lie inside)
SLOPE_CRITERIA: Mapping[str, tuple[float, tuple[float, float]]] = {
    "grpo": (1.0, (0.5, 1.5)),
    "dr_grpo": (2.0, (1.5, 2.5)),
}
#: the least median cosine between E[g | k] of different k, in every mode
COSINE_MEDIAN_MIN = 0.9
#: the closed range the median measured / predicted tr Cov(g | k) must lie in, in every mode
NOISE_RATIO_RANGE = (0.8, 1.25)
#: a prompt tests G8's Σ₊ term when tr Σ₊ ≥ this share of tr Σ₊ + tr Σ₋ (its mode's scores)
NOISE_MIN_POSITIVE_SHARE = 0.05
#: each criterion's name and rule, in report order
PREREGISTERED_CRITERIA: Mapping[str, str] = {
    "grpo_slope": "GRPO's weighted slope: the 95 % interval contains 1 and lies inside (0.5, 1.5)",
    "dr_grpo_slope": "Dr. GRPO's weighted slope: the 95 % interval contains 2 and lies inside (1.5, 2.5)",
    "cosine_median": f"the median cosine between E[g|k] of different k is ≥ {COSINE_MEDIAN_MIN} in every mode",
    "noise_ratio": (
        f"the median over cells of measured / predicted tr Cov(g|k) lies in [{NOISE_RATIO_RANGE[0]}, "
        f"{NOISE_RATIO_RANGE[1]}] in every mode, over the prompts with tr Σ₊ ≥ {100 * NOISE_MIN_POSITIVE_SHARE:g} % "
        "of tr Σ₊ + tr Σ₋"
    ),
}
#: the analysis: this module, the report it reads and the statistics that report is built from
ANALYSIS_FILES = tuple(
    Path(__file__).with_name(n) for n in ("preregistered.py", "conditional_summary.py", "conditional_stats.py")
)
MET, NOT_MET, NOT_TESTABLE = "met", "not met", "not testable"


def _verdict(met: bool | None, observed: Any, reason: str = "") -> dict[str, Any]:
    status = NOT_TESTABLE if met is None else MET if met else NOT_MET
    return {"status": status, "observed": observed, "reason": reason}


def _slope(cond: Mapping[str, Any], mode: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The pre-registered slope of one mode (the weighted fit, the plain one beside it) and its verdict."""
    want, (lo, hi) = SLOPE_CRITERIA[mode]
    sl = cond.get("slope_by_mode", {}).get(mode)
    if sl is None:
        return {}, _verdict(None, None, f"mode {mode} was not measured")
    w = sl["weighted"]
    entry = {
        "value": w["value"],
        "interval": w["interval"],
        "predicted": want,
        "bounds": [lo, hi],
        "cells": sl["cells"],
        "unweighted": {"value": sl["value"], "interval": sl["interval"]},
    }
    iv = w["interval"]
    if iv is None:
        return entry, _verdict(None, None, "no bootstrap interval (fewer than ten finite resamples)")
    return entry, _verdict(bool(iv[0] <= want <= iv[1] and lo < iv[0] and iv[1] < hi), iv)


def _cosine(cond: Mapping[str, Any], modes: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    by_mode = cond.get("cosine_min", {}).get("by_mode", {})
    medians = {m: by_mode.get(m, {}).get("median") for m in modes}
    missing = [m for m, v in medians.items() if v is None]
    if not modes or missing:
        why = f"no pair of cells with U > 0 in {', '.join(missing)}" if missing else "no mode was measured"
        return medians, _verdict(None, medians, why)
    return medians, _verdict(all(v >= COSINE_MEDIAN_MIN for v in medians.values()), medians)


def _noise_mode(cond: Mapping[str, Any], mode: str) -> dict[str, Any]:
    """Median measured / predicted tr Cov(g | k) over the cells of prompts that exercise Σ₊, and over every cell."""
    testable = []
    for q, p in enumerate(cond.get("prompts", [])):
        pos, neg = max(p["trace_sigma_pos"][mode], 0.0), max(p["trace_sigma_neg"][mode], 0.0)
        if pos + neg > 0 and pos >= NOISE_MIN_POSITIVE_SHARE * (pos + neg):
            testable.append(q)
    rows = cond.get("cells", {}).get(mode, [])
    ratio = lambda rs: [r["trace_cov"] / r["trace_cov_pred"] for r in rs if r["trace_cov_pred"] > 0]  # noqa: E731
    used, every = ratio([r for r in rows if r["prompt"] in testable]), ratio(rows)
    return {
        "value": float(np.median(used)) if used else None,
        "cells": len(used),
        "prompts_testable": testable,
        "value_all_cells": float(np.median(every)) if every else None,
    }


def _noise(cond: Mapping[str, Any], modes: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    by_mode = {m: _noise_mode(cond, m) for m in modes}
    values = {m: v["value"] for m, v in by_mode.items()}
    missing = [m for m, v in values.items() if v is None]
    if not modes or missing:
        why = (
            f"no prompt has tr Σ₊ ≥ {100 * NOISE_MIN_POSITIVE_SHARE:g} % of tr Σ₊ + tr Σ₋ in {', '.join(missing)}: "
            "with one correct answer per prompt Σ₊ = 0, and G8's Σ₊/k term is not exercised"
            if missing
            else "no mode was measured"
        )
        return by_mode, _verdict(None, values, why)
    lo, hi = NOISE_RATIO_RANGE
    return by_mode, _verdict(all(lo <= v <= hi for v in values.values()), values)


def analysis_commit(files: Sequence[Path] = ANALYSIS_FILES, root: Path | None = None) -> dict[str, Any]:
    """The commit that fixed the analysis, whether the files differ from it, and their SHA-256.

    The commit is the latest that changed any of ``files`` in the checkout ``root`` (default: this
    package's), and None while one of them is in no commit or outside a git checkout: then no
    commit holds the analysis as run.
    """
    from grpo_identity import provenance

    digest = hashlib.sha256()
    for path in files:
        digest.update(path.read_bytes())
    uncommitted = [p.name for p in files if provenance.last_commit([p], root) is None]
    commit = None if uncommitted else provenance.last_commit(files, root)
    changed = provenance.modified(files, root) if commit else None
    if provenance.git("rev-parse", "HEAD", root=root) is None:
        note = "not run from a git checkout: the files' SHA-256 identifies the analysis"
    elif uncommitted:
        note = f"not committed yet: {', '.join(uncommitted)}"
    else:
        note = "the analysis files differ from that commit" if changed else ""
    return {
        "commit": commit,
        "modified": changed,
        "note": note,
        "files": [p.name for p in files],
        "sha256": digest.hexdigest(),
    }


def evaluate(cond: Mapping[str, Any], *, commit: bool = True) -> dict[str, Any]:
    """The ``conditional.preregistered`` entry from the summary's ``conditional`` entry.

    Keys: ``slope_by_mode`` (per mode ``value``, ``interval``, ``predicted``, ``bounds``,
    ``unweighted``), ``cosine_median_by_mode``, ``noise_ratio_by_mode``, ``criteria`` (name →
    ``met`` / ``not met`` / ``not testable``), ``criteria_detail`` (status, observed value,
    reason, rule), ``all_met`` (True when every criterion is met, False when one is not, None
    otherwise), ``prompts`` (how many were measured), ``commit`` and ``analysis`` (see
    :func:`analysis_commit`; skipped with ``commit=False``).
    """
    modes = [m for m in SLOPE_CRITERIA if m in cond.get("slope_by_mode", {})]
    slopes, detail = {}, {}
    for mode in SLOPE_CRITERIA:
        entry, detail[f"{mode}_slope"] = _slope(cond, mode)
        if entry:
            slopes[mode] = entry
    cosines, detail["cosine_median"] = _cosine(cond, modes)
    noise, detail["noise_ratio"] = _noise(cond, modes)
    for name, rule in PREREGISTERED_CRITERIA.items():
        detail[name]["rule"] = rule
    status = [d["status"] for d in detail.values()]
    fixed = analysis_commit() if commit else {"commit": None, "note": "not looked up"}
    return {
        "slope_by_mode": slopes,
        "cosine_median_by_mode": cosines,
        "noise_ratio_by_mode": noise,
        "criteria": {name: detail[name]["status"] for name in PREREGISTERED_CRITERIA},
        "criteria_detail": {name: detail[name] for name in PREREGISTERED_CRITERIA},
        "all_met": False if NOT_MET in status else True if set(status) == {MET} else None,
        "prompts": len(cond.get("prompts", [])),
        "commit": fixed["commit"],
        "analysis": fixed,
    }


def observed_text(value: Any) -> str:
    """A criterion's observed value as text: an interval, a number per mode, a number.

    >>> observed_text({"grpo": [0.8234, 1.1245], "dr_grpo": None})
    'grpo [0.823, 1.125], dr_grpo n/a'
    """
    if value is None:
        return "n/a"
    if isinstance(value, dict):
        return ", ".join(f"{m} {observed_text(v)}" for m, v in value.items())
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(observed_text(v) for v in value) + "]"
    return f"{value:.3f}" if isinstance(value, float) else str(value)
