"""The conditional experiment's report: slopes, cosines, ∇p comparison and noise, with intervals.

Input: one record per prompt from :func:`.conditional.measure_prompt` (numbers, numpy Gram
matrices).  Output: the JSON-ready ``conditional`` entry, keys

- ``slope_by_mode``: pooled log-log slope of ‖E[g | k]‖ against σ_k (one intercept per prompt),
  bootstrap interval, per-prompt slopes; prediction 1 (GRPO), 2 (Dr. GRPO); ``weighted``: the
  same fit with each cell weighted by the inverse bootstrap variance of its log ‖E[g | k]‖ (cells
  where the signal is buried in noise count less);
- ``cosine_min``: the smallest cosine between E[g | k] and E[g | k'] of one prompt (prediction 1);
- ``grad_p_rel_err``: ‖E[g | k]/c − ∇p/(p(1−p))‖ / ‖∇p/(p(1−p))‖, median over prompts, for the
  modes with unweighted scores (constant aggregation); the class-mean comparison for every mode;
- ``noise_slope_by_mode``: log-log slope of tr Cov(g | k) against k (one intercept per prompt),
  and the slope predicted from c²(tr Σ₊/k + tr Σ₋/(G − k)) with the measured traces (GRPO:
  ((G − k) tr Σ₊ + k tr Σ₋)/G², flat when tr Σ₊ = tr Σ₋, slope 1 when tr Σ₊ = 0); against σ_k
  under ``vs_sigma`` (0 for GRPO, 2 for Dr. GRPO when tr Σ₊ = tr Σ₋);
- ``groups``: groups whose g was computed (per mode); ``projected_check``: the two checks (the
  projected error both as ‖Ve‖/‖Vg‖ and normalised as ‖Ve‖/(√K‖g‖)).

:func:`goal_errors` decides, once, which errors the 1e-4 goal applies to: the normalised projected error and
the exact one.  ‖Ve‖/‖Vg‖ is not a statistic to take the maximum of: with K directions ‖Vg‖² is ‖g‖² times a
χ²_K variable, so over thousands of groups its smallest draws are hundreds of times below their mean and
inflate the largest ratio by an order of magnitude whatever the error; ‖Ve‖/(√K‖g‖) has the noise in the
numerator only (E‖Ve‖² = K‖e‖²) and estimates the exact ‖e‖/‖g‖.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from grpo_identity import closed_forms
from grpo_identity.dial import coefficient
from grpo_identity.trainer.lm.conditional_stats import (
    bootstrap_counts,
    bootstrap_u,
    loglog_slope,
    percentile_interval,
    pooled_slope,
    split_half_rel_err,
    trace_covariance,
    u_statistic,
    weighted_pooled_slope,
)
from grpo_identity.trainer.lm.config import LMConfig, conditional_modes, dial_of
from grpo_identity.trainer.lm.identity import loglog_fit

__all__ = ["summarise", "goal_errors", "PREDICTED_SLOPE", "PREDICTED_NOISE_SLOPE_IF_EQUAL"]

#: the exponent of σ in c(k, G): ‖E[g | k]‖ ∝ σ_k^e
PREDICTED_SLOPE = {"grpo": 1, "dr_grpo": 2}
#: log-log slope of tr Cov(g | k) against σ_k when tr Σ₊ = tr Σ₋ (c²/(Gσ²)·tr Σ)
PREDICTED_NOISE_SLOPE_IF_EQUAL = {"grpo": 0, "dr_grpo": 2}


def goal_errors(projected_check: dict[str, Any]) -> dict[str, float | None]:
    """The errors the identity's goal applies to: the normalised projected error and the exact one.

    Runs stored before the normalised error was recorded fall back to ‖Ve‖/‖Vg‖ (stricter, see the module).

    >>> pc = {"projected_max_rel_err": 1e-3, "projected_max_rel_err_normalised": 2e-5, "exact_max_rel_err": 1e-6}
    >>> goal_errors(pc)
    {'projected': 2e-05, 'exact': 1e-06}
    """
    pc = projected_check
    normalised = pc.get("projected_max_rel_err_normalised")
    projected = normalised if normalised is not None else pc.get("projected_max_rel_err")
    return {"projected": projected, "exact": pc.get("exact_max_rel_err")}


def _cells(measured: list[dict[str, Any]], G: int, min_cell: int) -> list[tuple[int, int, np.ndarray]]:
    """(prompt, k, row indices into that prompt's live groups) for every cell with ≥ min_cell groups."""
    out = []
    for q, m in enumerate(measured):
        k_live = np.asarray(m["k"])[np.asarray(next(iter(m["modes"].values()))["live"], dtype=int)]
        for kk in range(1, G):
            rows = np.flatnonzero(k_live == kk)
            if len(rows) >= min_cell:
                out.append((q, kk, rows))
    return out


def summarise(measured: list[dict[str, Any]], config: LMConfig, rng: np.random.Generator) -> dict[str, Any]:
    """The ``conditional`` entry of the summary (see the module docstring)."""
    G = config.group_size
    cells = _cells(measured, G, config.cond_min_cell)
    counts = [bootstrap_counts(len(rows), config.cond_bootstrap, rng) for _, _, rows in cells]  # shared by the modes
    slope, noise, cosine, cell_rows = {}, {}, {}, {}
    for mode in conditional_modes(config):
        est = _cell_estimates(measured, cells, counts, mode, G)
        cell_rows[mode] = est["rows"]
        slope[mode] = _slope_report(est, mode, len(measured))
        noise[mode] = _noise_report(est, mode)
        cosine[mode] = _cosine_report(measured, cells, counts, mode, est)
    mins = [c["value"] for c in cosine.values() if c["value"] is not None]
    n_groups = sum(len(m["k"]) for m in measured)
    return {
        "slope_by_mode": slope,
        "cosine_min": {"value": min(mins) if mins else None, "by_mode": cosine},
        "grad_p_rel_err": _grad_p_report(measured, config),
        "noise_slope_by_mode": noise,
        "groups": n_groups,
        "groups_nonsilent": sum(len(next(iter(m["modes"].values()))["live"]) for m in measured),
        "prompts": [
            {
                "level": m["level"],
                "p_probe": m["p_probe"],
                "p_ref": m["p_ref"],
                "n_groups": len(m["k"]),
                "k_counts": np.bincount(np.asarray(m["k"]), minlength=G + 1).tolist(),
                "trace_sigma_pos": {mode: mm["tr_pos"] for mode, mm in m["modes"].items()},
                "trace_sigma_neg": {mode: mm["tr_neg"] for mode, mm in m["modes"].items()},
            }
            for m in measured
        ],
        "raw_slope_by_mode": {mode: _raw_slope(measured, mode, G) for mode in conditional_modes(config)},
        "projected_check": _projected_report(measured, config),
        "cells": cell_rows,
        "group_size": G,
    }


def _cell_estimates(
    measured: list[dict[str, Any]],
    cells: list[tuple[int, int, np.ndarray]],
    counts: list[np.ndarray],
    mode: str,
    G: int,
) -> dict[str, Any]:
    """Per cell: σ_k, U = ‖E[g | k]‖², tr Cov(g | k), its prediction, and their bootstrap replicates."""
    dial = dial_of(mode)
    rows, boot_u, boot_tr = [], [], []
    for (q, kk, idx), cnt in zip(cells, counts):
        m = measured[q]["modes"][mode]
        gram = m["gram"][np.ix_(idx, idx)]
        c = float(coefficient(kk, G, dial))
        pred_tr = float(
            closed_forms.update_covariance_given_k(kk, G, m["tr_pos"], m["tr_neg"], c=c)
        )  # theorem G8, traces
        rows.append(
            {
                "prompt": q,
                "k": kk,
                "n": len(idx),
                "sigma": float(closed_forms.sigma(kk, G)),
                "coef": c,
                "mean_sq": u_statistic(gram),
                "trace_cov": trace_covariance(gram),
                "trace_cov_pred": pred_tr,
                "g_norm_sq_mean": float(np.trace(gram) / len(idx)),
            }
        )
        boot_u.append(bootstrap_u(gram, cnt))
        n = len(idx)
        boot_tr.append(((cnt * np.diag(gram)).sum(1) - np.einsum("ra,ab,rb->r", cnt, gram, cnt) / n) / (n - 1))
    return {
        "rows": rows,
        "boot_u": np.array(boot_u).T if rows else np.zeros((0, 0)),
        "boot_tr": np.array(boot_tr).T if rows else np.zeros((0, 0)),
    }


def _sqrt_pos(x: Any) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    return np.where(a > 0, np.sqrt(np.abs(a)), np.nan)


def _slope_report(est: dict[str, Any], mode: str, n_prompts: int) -> dict[str, Any]:
    """Pooled and per-prompt slopes of ‖E[g | k]‖ against σ_k with percentile-bootstrap intervals."""
    rows = est["rows"]
    q = np.array([r["prompt"] for r in rows])
    s = np.array([r["sigma"] for r in rows])
    u = np.array([r["mean_sq"] for r in rows])
    value = pooled_slope(q, s, _sqrt_pos(u))
    boots = [pooled_slope(q, s, _sqrt_pos(b)) for b in est["boot_u"]]
    interval = percentile_interval(boots)
    by_prompt = []
    for p in range(n_prompts):
        sel = q == p
        by_prompt.append(
            {
                "value": loglog_slope(s[sel], _sqrt_pos(u[sel])),
                "cells": int(sel.sum()),
                "interval": percentile_interval([loglog_slope(s[sel], _sqrt_pos(b[sel])) for b in est["boot_u"]]),
            }
        )
    pred = PREDICTED_SLOPE[mode]
    # inverse-variance weights from the bootstrap spread of log ‖E[g | k]‖ (a cell whose resamples
    # often give U ≤ 0 has no usable log: its weight shrinks with the share of finite resamples)
    with np.errstate(invalid="ignore", divide="ignore"):
        logs = np.log(_sqrt_pos(est["boot_u"])) if len(rows) else np.zeros((0, 0))
        finite = np.isfinite(logs).mean(0) if len(rows) else np.zeros(0)
        var = (
            np.array([np.nanvar(col) if np.isfinite(col).sum() > 2 else np.nan for col in logs.T])
            if len(rows)
            else np.zeros(0)
        )
        wts = finite / var
    weighted = weighted_pooled_slope(q, s, _sqrt_pos(u), wts)
    w_iv = percentile_interval([weighted_pooled_slope(q, s, _sqrt_pos(b), wts) for b in est["boot_u"]])
    for r, se in zip(rows, np.sqrt(var)):
        r["log_norm_se"] = float(se) if np.isfinite(se) else None
    return {
        "value": value,
        "interval": interval,
        "predicted": pred,
        "contains_prediction": None if interval is None else bool(interval[0] <= pred <= interval[1]),
        "weighted": {
            "value": weighted,
            "interval": w_iv,
            "contains_prediction": None if w_iv is None else bool(w_iv[0] <= pred <= w_iv[1]),
        },
        "cells": len(rows),
        "cells_nonpositive": int((u <= 0).sum()),
        "by_prompt": by_prompt,
    }


def _noise_report(est: dict[str, Any], mode: str) -> dict[str, Any]:
    """Log-log slope of tr Cov(g | k) against k (pooled, one intercept per prompt), measured and
    predicted from the traces of Σ±; the same against σ_k under ``vs_sigma``."""
    rows = est["rows"]
    q = np.array([r["prompt"] for r in rows])
    k = np.array([r["k"] for r in rows], dtype=float)
    s = np.array([r["sigma"] for r in rows])
    tr = np.array([r["trace_cov"] for r in rows])
    pred = np.array([r["trace_cov_pred"] for r in rows])
    ratio = tr / pred
    vs_sigma = {
        "value": pooled_slope(q, s, tr),
        "interval": percentile_interval([pooled_slope(q, s, b) for b in est["boot_tr"]]),
        "predicted_from_traces": pooled_slope(q, s, pred),
        "predicted_if_equal": PREDICTED_NOISE_SLOPE_IF_EQUAL[mode],
    }
    return {
        "value": pooled_slope(q, k, tr),
        "interval": percentile_interval([pooled_slope(q, k, b) for b in est["boot_tr"]]),
        "predicted_from_traces": pooled_slope(q, k, pred),
        "vs_sigma": vs_sigma,
        "measured_over_predicted_median": float(np.median(ratio)) if len(ratio) else None,
        "measured_over_predicted_range": [float(ratio.min()), float(ratio.max())] if len(ratio) else None,
    }


def _cosine_report(
    measured: list[dict[str, Any]],
    cells: list[tuple[int, int, np.ndarray]],
    counts: list[np.ndarray],
    mode: str,
    est: dict[str, Any],
) -> dict[str, Any]:
    """Cosines between E[g | k] and E[g | k'] of one prompt: ⟨·,·⟩ from different groups, norms from U."""
    cos, boot = [], []
    for a in range(len(cells)):
        for b in range(a + 1, len(cells)):
            (qa, _, ia), (qb, _, ib) = cells[a], cells[b]
            if qa != qb:
                continue
            block = measured[qa]["modes"][mode]["gram"][np.ix_(ia, ib)]
            ua, ub = est["rows"][a]["mean_sq"], est["rows"][b]["mean_sq"]
            cos.append(float(block.mean()) / np.sqrt(ua * ub) if ua > 0 and ub > 0 else np.nan)
            cross = np.einsum("ra,ab,rb->r", counts[a], block, counts[b]) / (len(ia) * len(ib))
            with np.errstate(invalid="ignore"):
                boot.append(cross / np.sqrt(est["boot_u"][:, a] * est["boot_u"][:, b]))
    c = np.array(cos, dtype=float)
    ok = np.isfinite(c)
    mins = np.nanmin(np.array(boot), axis=0) if boot else []
    return {
        "value": float(c[ok].min()) if ok.any() else None,
        "median": float(np.median(c[ok])) if ok.any() else None,
        "interval": percentile_interval(list(mins)),
        "pairs": int(ok.sum()),
    }


def _grad_p_report(measured: list[dict[str, Any]], config: LMConfig) -> dict[str, Any]:
    """E[g | k]/c against ∇p/(p(1−p)) (constant aggregation) and against μ₊ − μ₋ (every mode), split halves."""
    G = config.group_size
    by_mode: dict[str, Any] = {}
    for mode in conditional_modes(config):
        dial = dial_of(mode)
        per: dict[str, list[dict[str, Any]]] = {"grad_p": [], "class": []}
        for m in measured:
            mm = m["modes"][mode]
            k_live = np.asarray(m["k"])[np.asarray(mm["live"], dtype=int)]
            coef = np.asarray(coefficient(k_live, G, dial), dtype=float)
            half = np.arange(len(k_live)) % 2 == 0
            for name in per:
                per[name].append(split_half_rel_err(mm["gram"], coef, mm["dots"][name], mm["ref_gram"][name], half))
        agg = measured[0]["modes"][mode]["aggregation"]
        by_mode[mode] = {
            "aggregation": agg,
            "grad_p": per["grad_p"] if agg == "constant" else None,
            "class_mean": per["class"],
            "class_mean_rel_err_median": _median([r["rel_err"] for r in per["class"]]),
        }
    unweighted = [m for m, v in by_mode.items() if v["grad_p"] is not None]
    if not unweighted:
        return {"value": None, "reason": "no mode with constant aggregation (unweighted scores)", "by_mode": by_mode}
    rows = by_mode[unweighted[0]]["grad_p"]
    return {
        "value": _median([r["rel_err"] for r in rows]),
        "mode": unweighted[0],
        "max": max((r["rel_err"] for r in rows if r["rel_err"] is not None), default=None),
        "plugin_median": _median([r["rel_err_plugin"] for r in rows]),
        "cosine_median": _median([r["cosine"] for r in rows]),
        "norm_ratio_median": _median([r["norm_ratio"] for r in rows]),
        "by_mode": by_mode,
    }


def _median(x: list[Any]) -> float | None:
    v = [float(a) for a in x if a is not None and np.isfinite(a)]
    return float(np.median(v)) if v else None


def _raw_slope(measured: list[dict[str, Any]], mode: str, G: int) -> dict[str, Any]:
    """The per-group ‖g‖ against σ fit the training runs report: dominated by noise."""
    s: list[float] = []
    n: list[float] = []
    for m in measured:
        mm = m["modes"][mode]
        k_live = np.asarray(m["k"])[np.asarray(mm["live"], dtype=int)]
        s.extend(float(closed_forms.sigma(int(kk), G)) for kk in k_live)
        n.extend(np.sqrt(np.maximum(np.diag(mm["gram"]), 0)).tolist())
    return loglog_fit(s, n)


def _projected_report(measured: list[dict[str, Any]], config: LMConfig) -> dict[str, Any]:
    """Largest relative error of the projected check (every group) and of the exact one (the first few)."""
    proj = [e for m in measured for mm in m["modes"].values() for e in mm["projected_errs"]]
    exact = [e for m in measured for mm in m["modes"].values() for e in mm["exact_errs"]]
    normed = [e for m in measured for mm in m["modes"].values() for e in mm.get("projected_norm_errs", [])]
    return {
        "directions": config.cond_directions,
        "groups_projected": len(proj),
        "groups_exact": len(exact),
        "projected_max_rel_err": max(proj) if proj else None,
        "exact_max_rel_err": max(exact) if exact else None,
        "projected_max_rel_err_normalised": max(normed) if normed else None,
        "projected_median_rel_err": float(np.median(proj)) if proj else None,
        "silent_groups_with_nonzero_grad": sum(mm["silent_nonzero"] for m in measured for mm in m["modes"].values()),
    }
