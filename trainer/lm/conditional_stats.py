"""The conditional experiment's statistics, from Gram matrices of per-group updates (numpy only).

At a fixed policy, one prompt's groups with the same k have i.i.d. updates g with mean
E[g | k] = c(k, G)·(μ₊ − μ₋) and covariance c²(Σ₊/k + Σ₋/(G − k)) (the conditional-expectation
theorems G7 and G8; μ±, Σ± the mean and covariance of a correct / incorrect answer's score).  From
the Gram matrix K_ab = ⟨g_a, g_b⟩ of the n groups of one cell (prompt, k):

    ‖E[g | k]‖²  ≈ U = Σ_{a≠b} K_ab / (n(n − 1))                 (unbiased: no noise term)
    tr Cov(g | k) ≈ (Σ_a K_aa − n·U) / n  = (Σ_a K_aa − Σ_ab K_ab / n) / (n − 1)
    ⟨E[g | k], E[g | k']⟩ ≈ Σ_{a∈k, b∈k'} K_ab / (n_k n_k')      (different groups: independent)

The log-log slope of √U against σ_k is fitted per prompt and pooled (one slope, one intercept
per prompt); prediction 1 for GRPO (c = σ), 2 for Dr. GRPO (c = σ²).  Intervals: the percentile
bootstrap over groups within each cell, where a resample's U uses only pairs of distinct original
groups (a tie would add ‖g‖², the noise the U-statistic removes).

>>> rng = np.random.default_rng(0)
>>> g = rng.normal(size=(400, 50)) + 3.0             # mean (3, …, 3): ‖mean‖² = 450
>>> round(float(u_statistic(g @ g.T)) / 450, 1)
1.0
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import numpy.typing as npt

__all__ = [
    "u_statistic",
    "trace_covariance",
    "bootstrap_counts",
    "bootstrap_u",
    "loglog_slope",
    "pooled_slope",
    "weighted_pooled_slope",
    "percentile_interval",
    "split_half_rel_err",
]

Array = npt.NDArray[np.float64]


def u_statistic(gram: Array) -> float:
    """‖E[g]‖² without noise bias from the Gram matrix (n, n) of n i.i.d. vectors: Σ_{a≠b} K_ab / (n(n−1))."""
    n = gram.shape[0]
    if n < 2:
        return float("nan")
    return float((gram.sum() - np.trace(gram)) / (n * (n - 1)))


def trace_covariance(gram: Array) -> float:
    """tr Cov(g), unbiased, from the Gram matrix (n, n): (Σ_a K_aa − Σ_ab K_ab / n) / (n − 1)."""
    n = gram.shape[0]
    if n < 2:
        return float("nan")
    return float((np.trace(gram) - gram.sum() / n) / (n - 1))


def bootstrap_counts(n: int, reps: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """How often each of n groups is drawn in each of ``reps`` resamples with replacement: (reps, n)."""
    return rng.multinomial(n, np.full(n, 1.0 / n), size=reps)


def bootstrap_u(gram: Array, counts: npt.NDArray[np.int64]) -> Array:
    """U of each resample (reps,), over pairs of distinct original groups.

    With counts c (reps, n): (cᵀKc − Σ_a c_a² K_aa) / (n² − Σ_a c_a²); NaN when every draw is one group.
    """
    c = counts.astype(float)
    cross = np.einsum("ra,ab,rb->r", c, gram, c)
    ties = (c**2) @ np.diag(gram)
    pairs = c.sum(1) ** 2 - (c**2).sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(pairs > 0, (cross - ties) / np.where(pairs > 0, pairs, 1.0), np.nan)


def loglog_slope(x: npt.ArrayLike, y: npt.ArrayLike) -> float | None:
    """Least-squares slope of log y on log x over positive finite pairs (None with fewer than 2 x values)."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(xa) & np.isfinite(ya) & (xa > 0) & (ya > 0)
    lx, ly = np.log(xa[ok]), np.log(ya[ok])
    if ok.sum() < 2 or np.ptp(lx) == 0:
        return None
    return float(np.polyfit(lx, ly, 1)[0])


def pooled_slope(prompt: npt.ArrayLike, x: npt.ArrayLike, y: npt.ArrayLike) -> float | None:
    """One log-log slope of y on x over several prompts, each with its own intercept.

    The within-prompt regression: log x and log y centred per prompt, then one least-squares
    slope Σ x̃ỹ / Σ x̃² (prompts with a single usable point carry no slope information).
    """
    pa, xa, ya = np.asarray(prompt), np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(xa) & np.isfinite(ya) & (xa > 0) & (ya > 0)
    pa, lx, ly = pa[ok], np.log(xa[ok]), np.log(ya[ok])
    sxy = sxx = 0.0
    for q in np.unique(pa):
        m = pa == q
        dx, dy = lx[m] - lx[m].mean(), ly[m] - ly[m].mean()
        sxy += float(dx @ dy)
        sxx += float(dx @ dx)
    return sxy / sxx if sxx > 0 else None


def weighted_pooled_slope(
    prompt: npt.ArrayLike, x: npt.ArrayLike, y: npt.ArrayLike, weight: npt.ArrayLike
) -> float | None:
    """:func:`pooled_slope` with a weight per point (inverse variance of log y): weighted centring per prompt.

    Points with a non-finite or zero weight drop out.
    """
    pa, xa, ya, wa = (
        np.asarray(prompt),
        np.asarray(x, dtype=float),
        np.asarray(y, dtype=float),
        np.asarray(weight, dtype=float),
    )
    ok = np.isfinite(xa) & np.isfinite(ya) & (xa > 0) & (ya > 0) & np.isfinite(wa) & (wa > 0)
    pa, lx, ly, wa = pa[ok], np.log(xa[ok]), np.log(ya[ok]), wa[ok]
    sxy = sxx = 0.0
    for q in np.unique(pa):
        m = pa == q
        wq = wa[m] / wa[m].sum()
        dx, dy = lx[m] - wq @ lx[m], ly[m] - wq @ ly[m]
        sxy += float((wa[m] * dx) @ dy)
        sxx += float((wa[m] * dx) @ dx)
    return sxy / sxx if sxx > 0 else None


def percentile_interval(values: Sequence[float | None], level: float = 0.95) -> list[float] | None:
    """The central ``level`` percentile interval of the finite bootstrap values (None if under 10)."""
    v = np.asarray([np.nan if x is None else x for x in values], dtype=float)
    v = v[np.isfinite(v)]
    if len(v) < 10:
        return None
    lo, hi = np.percentile(v, [50 * (1 - level), 50 * (1 + level)])
    return [float(lo), float(hi)]


def split_half_rel_err(
    gram: Array, coef: Array, dots: Array, ref_gram: Array, half: npt.NDArray[np.bool_]
) -> dict[str, Any]:
    """‖m − r‖ / ‖r‖ for m = E[g/c] and a reference r, without noise bias, by split halves.

    ``gram`` (n, n) of the groups' g, ``coef`` (n,) their c(k, G), ``dots`` (n, 2) ⟨g_a, r_A⟩ and
    ⟨g_a, r_B⟩ for two independent halves r_A, r_B of the reference, ``ref_gram`` (2, 2) their
    Gram matrix, ``half`` (n,) True for the groups of the first half m₁ (the rest: m₂).
    ‖m − r‖² ≈ ⟨m₁ − r_A, m₂ − r_B⟩ and ‖r‖² ≈ ⟨r_A, r_B⟩, each unbiased (independent factors).
    Also returns the plug-in ‖m̂ − r̂‖ / ‖r̂‖ (all groups, r̂ = (r_A + r_B)/2), biased up by noise,
    and the cosine between m and r from the unbiased inner products.
    """
    h1, h2 = half, ~half
    inv = 1.0 / coef
    kk = gram * np.outer(inv, inv)  # ⟨g_a/c_a, g_b/c_b⟩
    d = dots * inv[:, None]
    m1m2 = float(kk[np.ix_(h1, h2)].mean())
    m1rb, m2ra = float(d[h1, 1].mean()), float(d[h2, 0].mean())
    rarb = float(ref_gram[0, 1])
    diff2 = m1m2 - m1rb - m2ra + rarb
    n = len(coef)
    m_norm2 = float((kk.sum() - np.trace(kk)) / (n * (n - 1)))
    m_dot_r = float(d.mean())  # ⟨m, (r_A + r_B)/2⟩, unbiased
    rhat2 = float(ref_gram.sum()) / 4.0
    mhat2 = float(kk.sum()) / n**2
    plug = mhat2 - 2 * m_dot_r + rhat2
    ok = rarb > 0
    return {
        "rel_err": float(np.sqrt(max(diff2, 0.0) / rarb)) if ok else None,
        "rel_err_sq_signed": diff2 / rarb if ok else None,
        "rel_err_plugin": float(np.sqrt(max(plug, 0.0) / rhat2)) if rhat2 > 0 else None,
        "cosine": m_dot_r / np.sqrt(m_norm2 * rarb) if ok and m_norm2 > 0 else None,
        "norm_ratio": float(np.sqrt(m_norm2 / rarb)) if ok and m_norm2 > 0 else None,
    }
