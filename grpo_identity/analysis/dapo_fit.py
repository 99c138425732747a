"""DAPO consistency check: the all-correct mass E_p[p^32] fitted to DAPO's Fig. 3b (PAPER claim 6).

DAPO logs the fraction of prompts whose avg@32 accuracy is 1, the all-correct branch of the
silent mass p^G + (1−p)^G.  Two fits of its time course y(s) (s = training step):

* **one-timescale competence model** (the paper's): every solve rate sharpens as p ↦ p^{1/T};
  T runs from 1 to T_end, the value at which E[p^{32/T_end}] equals the curve's late plateau
  (mean of its last 8 points); the competence c(s) = 1 − e^{−(s−s₀)/τ}, rescaled to [0, 1] over
  the logged steps (which removes s₀), moves T linearly: T(s) = 1 + (T_end − 1)·c̃(s), and the
  prediction is ŷ(s) = E_p[p^{32/T(s)}].  τ is the only free parameter.
* **generic saturating curve** a·(1 − e^{−(s−s₀)/τ}) with s₀ fixed at the first logged step;
  two free parameters, a (solved in closed form for each τ) and τ.

Both are least-squares fits; each reports R² and a percentile bootstrap interval of R² (pairs
resampled with replacement and the free parameters refitted; what the curve fixes, s₀ / the
logged step range and the plateau, stays that of the full curve).  The paper reports R² = 0.92 (bootstrap
0.91–0.96) for the competence model against 0.98 for the saturating curve.  The expectation
E_p runs over the interior solve rates (0 < p < 1) of the given distribution (the prompts a
training run can still move), by default the shipped Big-Math histogram
(:func:`grpo_identity.analysis.solve_rates.big_math`).  The bootstrap has at most
``MAX_BOOTSTRAP`` resamples and keeps two floats per resample.

numpy only: a bounded 1-D minimiser (log-spaced grid, then golden-section search) does the fits.

>>> x, fx = minimise_scalar(lambda t: (t - 2.0) ** 2, 0.1, 10.0)
>>> round(x, 6), fx < 1e-12
(2.0, True)
"""

from __future__ import annotations

import csv
import math
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from grpo_identity import paper
from grpo_identity.analysis.solve_rates import SolveRates, resolve
from grpo_identity.analysis.stats import r_squared
from grpo_identity.foundation import minimise_scalar

__all__ = [
    "AVG_AT",
    "MAX_BOOTSTRAP",
    "PLATEAU_POINTS",
    "read_curve",
    "minimise_scalar",
    "all_correct_mass",
    "plateau_temperature",
    "rescaled_competence",
    "competence_prediction",
    "fit_competence",
    "fit_saturating",
    "fit",
    "plot_dapo_fit",
]

#: DAPO's metric: a prompt counts when all of its 32 samples are correct (avg@32 = 1)
AVG_AT = 32
#: the late plateau is the mean of the curve's last 8 points
PLATEAU_POINTS = 8
#: the most bootstrap resamples one fit accepts (each refits both models: ~ms of CPU apiece)
MAX_BOOTSTRAP = 10_000

FloatArray = npt.NDArray[np.float64]


#: the largest curve file read (a digitised figure is a few kB)
MAX_CURVE_BYTES = 4 * 2**20
#: the largest |step| of a curve (a training run's steps; the fit's differences of steps stay finite)
MAX_STEP = 1e12


def read_curve(path: str | Path) -> tuple[FloatArray, FloatArray]:
    """(steps, values) from a two-column CSV; ``#`` lines (quoted or not) are comments.

    The first row is a header unless it holds two numbers.  Values are fractions of prompts:
    finite and in [0, 1]; steps finite.
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no such file: {path}")
    if not p.is_file():
        raise ValueError(f"{path} is not a file")
    if p.stat().st_size > MAX_CURVE_BYTES:
        raise ValueError(f"{p.name} is {p.stat().st_size:,} bytes; a digitised curve is at most {MAX_CURVE_BYTES:,}")
    try:
        text = p.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{p.name} is not UTF-8 text (undecodable byte at offset {exc.start}); expected a CSV"
        ) from None
    rows = [r for r in csv.reader(text.splitlines()) if r and r[0].strip() and not r[0].lstrip().startswith("#")]
    if rows and _numeric_pair(rows[0]) is None:
        rows = rows[1:]  # the header
    if not rows:
        raise ValueError(f"{p.name} has no data rows")
    pairs = [_numeric_pair(r) for r in rows]
    if any(x is None for x in pairs):
        raise ValueError(f"{p.name}: every row after the header needs two numbers (step, value)")
    data = np.array(pairs, dtype=np.float64)
    bad = ~np.isfinite(data).all(axis=1) | (np.abs(data[:, 0]) > MAX_STEP) | (data[:, 1] < 0) | (data[:, 1] > 1)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(
            f"{p.name}: need a step of at most {MAX_STEP:g} in size and a fraction in [0, 1], got step {data[i, 0]:g}, "
            f"value {data[i, 1]:g}"
        )
    order = np.argsort(data[:, 0], kind="stable")
    steps, values = data[order, 0], data[order, 1]
    if len(steps) < PLATEAU_POINTS + 2:
        raise ValueError(f"{p.name} has {len(steps)} points; need at least {PLATEAU_POINTS + 2}")
    if np.ptp(steps) <= 0:
        raise ValueError(f"{p.name}: the steps must not all be equal")
    return steps, values


def _numeric_pair(row: list[str]) -> tuple[float, float] | None:
    """The first two cells of a CSV row as numbers, or None."""
    try:
        return float(row[0]), float(row[1])
    except (ValueError, IndexError):
        return None


def all_correct_mass(
    values: FloatArray, weights: FloatArray, temperature: npt.ArrayLike, n: int = AVG_AT
) -> FloatArray:
    """All-correct mass E_p[p^{n/T}] after sharpening p ↦ p^{1/T}; broadcasts over T."""
    T = np.asarray(temperature, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.sum(weights * np.power(values, n / T[..., None]), axis=-1)  # (..., V) -> (...)


def plateau_temperature(values: FloatArray, weights: FloatArray, target: float, n: int = AVG_AT) -> float:
    """T_end ≥ 1 with E_p[p^{n/T_end}] = target (bisection in log T; the mass rises with T)."""
    start = float(all_correct_mass(values, weights, 1.0, n))
    ceiling = float(weights[values > 0].sum())
    if not (start < target < ceiling):
        raise ValueError(f"the plateau {target:.4g} must lie between E[p^{n}] = {start:.4g} and {ceiling:.4g}")
    lo, hi = 0.0, 1.0
    while float(all_correct_mass(values, weights, math.exp(hi), n)) < target:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if float(all_correct_mass(values, weights, math.exp(mid), n)) < target:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-13:
            break
    return math.exp(0.5 * (lo + hi))


def rescaled_competence(steps: FloatArray, tau: float, step_range: tuple[float, float] | None = None) -> FloatArray:
    """c̃(s) = (1 − e^{−(s−s₁)/τ}) / (1 − e^{−(s_N−s₁)/τ}): competence rescaled to [0, 1] over the
    logged steps s₁ … s_N (s₀ cancels); ``step_range`` = (s₁, s_N), default the steps' range."""
    s = np.asarray(steps, dtype=np.float64)
    first, last = step_range if step_range is not None else (float(s.min()), float(s.max()))
    return np.expm1(-(s - first) / tau) / np.expm1(-(last - first) / tau)


def competence_prediction(
    steps: FloatArray,
    tau: float,
    values: FloatArray,
    weights: FloatArray,
    t_end: float,
    n: int = AVG_AT,
    step_range: tuple[float, float] | None = None,
) -> FloatArray:
    """ŷ(s) = E_p[p^{n/T(s)}] with T(s) = 1 + (T_end − 1)·c̃(s)."""
    return all_correct_mass(values, weights, 1.0 + (t_end - 1.0) * rescaled_competence(steps, tau, step_range), n)


def _tau_bounds(steps: FloatArray) -> tuple[float, float]:
    span = float(np.ptp(steps))
    return span / 1000.0, span * 100.0


def fit_competence(
    steps: FloatArray,
    y: FloatArray,
    solve_rates: SolveRates,
    n: int = AVG_AT,
    *,
    plateau: float | None = None,
    step_range: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """Least-squares fit of the one-timescale competence model; returns tau, t_end, plateau,
    start, r2, prediction.  ``plateau`` (default: mean of the last 8 points) and ``step_range``
    (default: the steps' range) are fixed by the curve, not fitted; the bootstrap passes the
    full curve's values."""
    sr = solve_rates.interior()
    v, w = sr.values, sr.weights
    if plateau is None:
        plateau = float(y[np.argsort(steps, kind="stable")][-PLATEAU_POINTS:].mean())
    t_end = plateau_temperature(v, w, plateau, n)

    def sse(tau: float) -> float:
        return float(((competence_prediction(steps, tau, v, w, t_end, n, step_range) - y) ** 2).sum())

    tau, _ = minimise_scalar(sse, *_tau_bounds(steps), log=True)
    pred = competence_prediction(steps, tau, v, w, t_end, n, step_range)
    return {
        "tau": tau,
        "t_end": t_end,
        "plateau": plateau,
        "start": float(all_correct_mass(v, w, 1.0, n)),
        "r2": r_squared(y, pred),
        "prediction": pred,
    }


def fit_saturating(steps: FloatArray, y: FloatArray, *, s0: float | None = None) -> dict[str, Any]:
    """Least-squares fit of a·(1 − e^{−(s−s₀)/τ}), s₀ fixed (default: the first step); a in
    closed form per τ."""
    s0 = float(np.min(steps)) if s0 is None else float(s0)

    def curve(tau: float) -> tuple[float, FloatArray]:
        h = -np.expm1(-(steps - s0) / tau)
        hh = float((h * h).sum())
        a = float((h * y).sum()) / hh if hh > 0 else 0.0
        return a, a * h

    def sse(tau: float) -> float:
        return float(((curve(tau)[1] - y) ** 2).sum())

    tau, _ = minimise_scalar(sse, *_tau_bounds(steps), log=True)
    a, pred = curve(tau)
    return {"a": a, "tau": tau, "s0": s0, "r2": r_squared(y, pred), "prediction": pred}


def _interval(samples: list[float], level: float = 0.95) -> list[float]:
    arr = np.asarray([x for x in samples if np.isfinite(x)])
    q = (1.0 - level) / 2.0
    return [float(np.quantile(arr, q)), float(np.quantile(arr, 1.0 - q))] if arr.size else [float("nan")] * 2


def fit(
    curve_path: str | Path,
    solve_rates: SolveRates | str | Path | None = None,
    *,
    n_bootstrap: int = 1000,
    seed: int = 0,
    progress: bool = False,
) -> dict[str, Any]:
    """Fit DAPO's all-correct curve with both models, with bootstrap intervals of R².

    ``solve_rates``: a :class:`SolveRates`, a spec (``bigmath``, a file, ``hf:NAME``), or None
    for the shipped Big-Math histogram.  ``n_bootstrap``: 0 to ``MAX_BOOTSTRAP`` resamples.
    Returns ``{"competence": {"tau", "t_end", "plateau", "start", "r2", "r2_bootstrap"},
    "saturating": {"a", "tau", "s0", "r2", "r2_bootstrap"}, "paper": …,
    "curve": {"step", "value", "competence", "saturating"}, "solve_rate_source", "n_points",
    "n_bootstrap", "seed"}``.
    """
    if isinstance(n_bootstrap, bool) or not isinstance(n_bootstrap, int) or not 0 <= n_bootstrap <= MAX_BOOTSTRAP:
        raise ValueError(f"n_bootstrap must be an integer from 0 to {MAX_BOOTSTRAP:,}, got {n_bootstrap!r}")
    steps, y = read_curve(curve_path)
    sr = resolve(solve_rates)
    comp = fit_competence(steps, y, sr)
    sat = fit_saturating(steps, y)
    step_range = (float(steps.min()), float(steps.max()))
    rng = np.random.default_rng(seed)
    boot: dict[str, list[float]] = {"competence": [], "saturating": []}
    iterator: Any = range(n_bootstrap)
    if progress and n_bootstrap:
        from tqdm import tqdm

        iterator = tqdm(iterator, desc="bootstrap", unit="fit", leave=False)
    for _ in iterator:
        idx = np.sort(rng.integers(0, steps.size, steps.size))
        s_b, y_b = steps[idx], y[idx]
        if np.ptp(s_b) <= 0:
            continue
        boot["competence"].append(fit_competence(s_b, y_b, sr, plateau=comp["plateau"], step_range=step_range)["r2"])
        boot["saturating"].append(fit_saturating(s_b, y_b, s0=sat["s0"])["r2"])
    return {
        "competence": {k: v for k, v in comp.items() if k != "prediction"}
        | {"r2_bootstrap": _interval(boot["competence"]) if n_bootstrap else None},
        "saturating": {k: v for k, v in sat.items() if k != "prediction"}
        | {"r2_bootstrap": _interval(boot["saturating"]) if n_bootstrap else None},
        "paper": {**paper.DAPO_FIT, "competence_r2_bootstrap": list(paper.DAPO_FIT["competence_r2_bootstrap"])},
        "curve": {
            "step": steps.tolist(),
            "value": y.tolist(),
            "competence": comp["prediction"].tolist(),
            "saturating": sat["prediction"].tolist(),
        },
        "solve_rate_source": sr.interior().source,
        "n_points": int(steps.size),
        "n_bootstrap": n_bootstrap,
        "seed": seed,
    }


def plot_dapo_fit(result: dict[str, Any], path: str) -> None:
    """DAPO's all-correct fraction against step with both fitted curves.  Writes a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cv = result["curve"]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot(cv["step"], cv["value"], "k.", ms=4, label="DAPO Fig. 3b (digitised)")
    ax.plot(cv["step"], cv["competence"], "-", label=f"E[p^32], one timescale (R² = {result['competence']['r2']:.3f})")
    ax.plot(cv["step"], cv["saturating"], "--", label=f"a(1 - e^(-(s-s0)/τ)) (R² = {result['saturating']['r2']:.3f})")
    ax.set_xlabel("training step")
    ax.set_ylabel("fraction of prompts with avg@32 = 1")
    ax.set_title("\n".join(textwrap.wrap("solve rates: " + result["solve_rate_source"], 95)), fontsize=7)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
