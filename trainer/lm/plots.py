"""The LM run's figure: ‖g‖ against σ (log-log, fitted slopes), identity errors, learning curves,
and the silent fraction against its prediction.

    (a) log ‖g‖ vs log σ per mode, non-silent groups, with the least-squares line (slope in the
        legend) — the identity predicts slope 1 (GRPO, DAPO), 2 (Dr. GRPO) when ‖s̄₊ − s̄₋‖ is flat;
    (b) histogram of log10 ‖g − c(k,G)(s̄₊ − s̄₋)‖/‖g‖ over checked groups;
    (c) greedy accuracy against training samples, per mode;
    (d) measured silent fraction per step against the probe's prediction E[p^G + (1−p)^G].
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["plot_run"]

_COLOURS = {"grpo": "tab:blue", "dr_grpo": "tab:orange", "dapo": "tab:green"}


def plot_run(results: dict[str, dict[str, Any]], summary: dict[str, Any], path: str | Path) -> Path:
    """Draw the four panels for the per-mode ``results`` of :func:`.lm_train.run_lm` into ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 2, figsize=(11, 8.5))
    a, b, c, d = ax.ravel()
    for mode, res in results.items():
        col = _COLOURS.get(mode, None)
        live = [g for g in res["groups"] if not g["silent"] and g["g_norm"] > 0]
        s = np.array([g["sigma"] for g in live])
        n = np.array([g["g_norm"] for g in live])
        ms = summary["modes"][mode]
        jitter = np.exp(np.random.default_rng(0).normal(0, 0.01, len(s)))
        a.scatter(s * jitter, n, s=8, alpha=0.4, color=col)
        fit_slope = ms["loglog_slope"]
        if fit_slope is not None and len(s) > 2:
            k, c0 = np.polyfit(np.log(s), np.log(n), 1)
            xs = np.linspace(s.min(), s.max(), 20)
            a.plot(
                xs,
                np.exp(c0) * xs**k,
                color=col,
                label=f"{mode}: slope {k:.2f} (R² {ms['loglog_r2']:.2f}); gap slope "
                + ("n/a" if ms["gap_slope"] is None else f"{ms['gap_slope']:.2f}"),
            )
        errs = np.array([g["rel_err"] for g in res["groups"] if "rel_err" in g])
        if len(errs):
            b.hist(
                np.log10(np.maximum(errs, 1e-17)), bins=30, alpha=0.5, color=col, label=f"{mode}: max {errs.max():.1e}"
            )
        curve = np.array(ms["eval_curve"], dtype=float)
        c.plot(curve[:, 1], curve[:, 2], marker="o", ms=3, color=col, label=mode)
        sf = np.array([st["silent_frac"] for st in res["steps"]], dtype=float)
        sp = np.array([st["silent_pred"] for st in res["steps"]], dtype=float)
        d.scatter(sp, sf, s=10, alpha=0.6, color=col, label=mode)
    a.set(
        xscale="log",
        yscale="log",
        xlabel="group std σ",
        ylabel="‖g‖ (autograd of the group's loss)",
        title="(a) gradient norm against σ, non-silent groups",
    )
    b.axvline(-4, color="k", ls="--", lw=1)
    b.set(
        xlabel="log10 relative error of g = c(k,G)(s̄₊ − s̄₋)",
        ylabel="groups",
        title="(b) identity error (fp32 goal 1e-4)",
    )
    c.set(xlabel="training samples", ylabel="greedy accuracy (fixed eval set)", title="(c) learning curves")
    lim = [0, 1]
    d.plot(lim, lim, color="k", lw=1)
    d.set(
        xlabel="predicted silent fraction (independent probes)",
        ylabel="measured silent fraction (first draw)",
        title="(d) silent groups per step",
        xlim=lim,
        ylim=lim,
    )
    for panel in (a, b, c, d):
        if panel.get_legend_handles_labels()[0]:
            panel.legend(fontsize=7)
    fig.suptitle(
        f"LM trainer, {summary['model']} {summary['n_params']:,} params on {summary['device']}: "
        f"max identity error {summary['identity_max_rel_err']:.1e} over {summary['groups_checked']} groups",
        fontsize=10,
    )
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_conditional(summary: dict[str, Any], path: str | Path) -> Path:
    """The fixed-policy experiment's figure: per mode, ‖E[g | k]‖ against σ_k (log-log, one colour per
    prompt, the predicted slope drawn through the points), and tr Cov(g | k) measured against predicted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cond = summary["conditional"]
    modes = list(cond["slope_by_mode"])
    fig, ax = plt.subplots(2, len(modes), figsize=(5.5 * len(modes), 8.5), squeeze=False)
    for col, mode in enumerate(modes):
        draw_expected_update(ax[0, col], cond, mode)
        a = ax[1, col]
        rows = cond["cells"][mode]
        cmap = matplotlib_cmap()
        for q in sorted({r["prompt"] for r in rows}):
            pts = sorted((r["k"], r["trace_cov"], r["trace_cov_pred"]) for r in rows if r["prompt"] == q)
            k, tr, pred = np.array(pts).T
            a.plot(k, tr, "o", ms=4, color=cmap(q % 10))
            a.plot(k, pred, "--", lw=0.8, color=cmap(q % 10))
        ns = cond["noise_slope_by_mode"][mode]
        a.set(
            xscale="log",
            yscale="log",
            xlabel="k (correct answers in the group)",
            ylabel="tr Cov(g | k)",
            title=f"{mode}: noise (dots) and c²(tr Σ₊/k + tr Σ₋/(G−k)) (dashed); slope {_fmt(ns['value'])}, "
            f"from traces {_fmt(ns['predicted_from_traces'])}",
        )
        a.title.set_fontsize(8)
    fig.suptitle(
        f"fixed policy, {summary['model']} {summary['n_params']:,} params: "
        f"{cond['groups']} groups of G = {cond['group_size']} "
        f"on {len(cond['prompts'])} prompts",
        fontsize=10,
    )
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _fmt(x: Any) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def draw_expected_update(a: Any, cond: dict[str, Any], mode: str) -> None:
    """One panel: ‖E[g | k]‖ = √U against σ_k per prompt (log-log), with the predicted slope drawn."""
    rows = [r for r in cond["cells"][mode] if r["mean_sq"] > 0]
    sl = cond["slope_by_mode"][mode]
    cmap = matplotlib_cmap()
    for q in sorted({r["prompt"] for r in rows}):
        pts = sorted((r["sigma"], np.sqrt(r["mean_sq"]), r.get("log_norm_se") or 0.0) for r in rows if r["prompt"] == q)
        s, n, se = np.array(pts).T
        # error bars: ± one bootstrap standard error of log ‖E[g | k]‖
        a.errorbar(
            s, n, yerr=[n - n * np.exp(-se), n * np.exp(se) - n], fmt="o", ms=4, lw=0.8, capsize=2, color=cmap(q % 10)
        )
        # the prediction through this prompt's geometric centre: ‖E[g | k]‖ ∝ σ_k^e
        xs = np.linspace(s.min(), s.max(), 10)
        centre_x, centre_y = np.exp(np.log(s).mean()), np.exp(np.log(n).mean())
        a.plot(xs, centre_y * (xs / centre_x) ** sl["predicted"], color="k", lw=0.8, ls="--")
    iv, wt = sl["interval"], sl.get("weighted") or {}
    wiv = wt.get("interval")
    a.set(
        xscale="log",
        yscale="log",
        xlabel="σ_k = √(k(G−k))/G",
        ylabel="‖E[g | k]‖ (U-statistic)",
        title=f"{mode}: pooled slope {_fmt(sl['value'])}"
        + (f" [{iv[0]:.2f}, {iv[1]:.2f}]" if iv else "")
        + f", weighted {_fmt(wt.get('value'))}"
        + (f" [{wiv[0]:.2f}, {wiv[1]:.2f}]" if wiv else "")
        + f"; predicted {sl['predicted']} (dashed)",
    )
    a.title.set_fontsize(8)


def matplotlib_cmap() -> Any:
    import matplotlib.pyplot as plt

    return plt.get_cmap("tab10")
