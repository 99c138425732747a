"""Live diagnostics: what the identity predicts about one training step, read off its rewards.

A step hands over n groups of G rollouts laid out group by group: rewards Rᵢ and the advantages
Âᵢ the trainer computed (for a trainer on many processes: the gathered batch). From them:

* **silent fraction**: groups whose rewards are all equal, against the prediction
  mean_x [p̂_x^G + (1 − p̂_x)^G] (PAPER claim 6) from running per-prompt solve rates p̂_x known
  *before* the step, shrunk toward the batch mean for prompts seen few times
  (:class:`SolveRateTracker`);
* **the live audit**: per group with binary rewards, the implied update coefficient
  c = (k/G)·mean(Â over the correct answers) (Theorem 1) against ``dial.coefficient(k, G)`` of
  the configured method; per group, max |Â − Â_dial|. A group *departs* when that exceeds the
  audit's float tolerance times the group's advantage scale, so a silent group departs with any
  non-zero advantage;
* **update mass** (1/G)·Σ|Âᵢ| per group (= 2c for binary rewards): its share on extreme
  (p̂ < 0.1 or > 0.9) and medium (0.4 ≤ p̂ ≤ 0.6) prompts (PAPER claim 8, live);
* **fidelity** φ(G, p̂) (Corollary 2) averaged per difficulty band, and the group-size law's
  recommended G: the smallest G whose mean fidelity over the batch's prompts reaches 1 − ε.

numpy only; every key is a plain float.

>>> import numpy as np
>>> from grpo_identity.dial import GRPO, advantages
>>> r = np.array([1., 0., 0., 0.,  1., 1., 1., 1.])
>>> m = step_metrics(r, advantages(r, 4, GRPO), 4, GRPO, prompts=["a", "b"]).metrics
>>> m["identity/silent_frac"], m["identity/coef_dev_max"], m["identity/departures"]
(0.5, 0.0, 0.0)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable, Sequence

import numpy as np
import numpy.typing as npt

from grpo_identity import dial as D
from grpo_identity.allocation import common_group_size
from grpo_identity.analysis.realdata import is_extreme, is_medium
from grpo_identity.checks.measure.properties import Tolerance, precision_of
from grpo_identity.closed_forms import fidelity, silent_rate

__all__ = [
    "PREFIX",
    "BANDS",
    "DEFAULT_EPS",
    "DEFAULT_PRIOR_ROLLOUTS",
    "SolveRateTracker",
    "StepReport",
    "step_metrics",
    "band_of",
]

#: every metric name starts with this
PREFIX = "identity/"
#: difficulty bands (symmetric in p ↔ 1 − p, like φ): extreme p̂ < 0.1 or > 0.9, medium 0.4 ≤ p̂ ≤ 0.6
BANDS = ("extreme", "intermediate", "medium")
#: the tolerance ε of the recommended G (fidelity 90 %, the first column of Corollary 2's table)
DEFAULT_EPS = 0.1
#: pseudo-rollouts at the batch mean added to every prompt's counts (the shrinkage)
DEFAULT_PRIOR_ROLLOUTS = 8.0

FloatArray = npt.NDArray[np.float64]


def band_of(p: npt.ArrayLike) -> npt.NDArray[np.str_]:
    """Difficulty band of each solve rate: 'extreme', 'medium' or 'intermediate'.

    >>> band_of([0.05, 0.5, 0.3, 0.95]).tolist()
    ['extreme', 'medium', 'intermediate', 'extreme']
    """
    pp = np.asarray(p, dtype=np.float64)
    return np.where(is_extreme(pp), "extreme", np.where(is_medium(pp), "medium", "intermediate"))


@dataclass
class SolveRateTracker:
    """Running per-prompt solve rates p̂_x = (Σ rewards + m·p̄) / (rollouts + m), shrunk toward
    the batch mean p̄ by m = ``prior_rollouts`` pseudo-rollouts (a prompt never seen gets p̄).

    >>> t = SolveRateTracker(prior_rollouts=4)
    >>> t.update(["a"], np.array([[1., 1., 1., 1.]]))
    >>> t.estimate(["a", "b"], batch_mean=0.5).tolist()
    [0.75, 0.5]
    """

    prior_rollouts: float = DEFAULT_PRIOR_ROLLOUTS
    counts: dict[Hashable, list[float]] = field(default_factory=dict)
    """prompt key -> [rollouts seen, sum of their rewards]"""

    def estimate(self, keys: Sequence[Hashable], batch_mean: float) -> FloatArray:
        m = float(self.prior_rollouts)
        n_s = np.array([self.counts.get(k, (0.0, 0.0)) for k in keys], dtype=np.float64).reshape(-1, 2)
        return (n_s[:, 1] + m * batch_mean) / (n_s[:, 0] + m)

    def prior_mean(self, fallback: float) -> float:
        """The mean reward of every rollout seen so far (``fallback`` before the first update):
        the p̄ a prediction made before a step may use without reading that step's rewards."""
        n = sum(c[0] for c in self.counts.values())
        return sum(c[1] for c in self.counts.values()) / n if n > 0 else float(fallback)

    def update(self, keys: Sequence[Hashable], rewards: FloatArray) -> None:
        """Add each group's rollouts (``rewards`` is (n_groups, G), rewards in [0, 1])."""
        for k, row in zip(keys, rewards):
            c = self.counts.setdefault(k, [0.0, 0.0])
            c[0] += row.size
            c[1] += float(row.sum())


@dataclass
class StepReport:
    """The metrics of one step and, for the live audit, a description of the first departing group."""

    metrics: dict[str, float]
    departure: str | None = None


def _coefficient_deviation(R: FloatArray, A: FloatArray, dial: D.Dial, batch_std: float | None) -> FloatArray:
    """|c_observed − c_dial| per binary group with 0 < k < G (NaN elsewhere); c = (k/G)·mean(Â₊)."""
    G = R.shape[1]
    k = R.sum(1)
    binary = np.all((R == 0) | (R == 1), axis=1) & (k > 0) & (k < G)
    out = np.full(R.shape[0], np.nan)
    if not binary.any() or dial.centre == "none":
        return out
    kb = k[binary]
    c_obs = kb / G * (A[binary] * R[binary]).sum(1) / kb
    c_dial = np.asarray(D.coefficient(kb, G, dial, batch_std=batch_std), dtype=np.float64)
    out[binary] = np.abs(c_obs - c_dial)
    return out


def _audit(R: FloatArray, A: FloatArray, dial: D.Dial, precision: str) -> tuple[FloatArray, FloatArray, float | None]:
    """Per group: max |Â − Â_dial|, whether it departs, and the batch std a batch-std dial uses."""
    G = R.shape[1]
    batch_std = None
    if dial.scale == "batch_std" and R.size > dial.ddof:
        batch_std = float(R.std(ddof=dial.ddof)) or None
    want = np.asarray(D.advantages(R.reshape(-1), G, dial), dtype=np.float64).reshape(R.shape)
    dev = np.abs(A - want).max(1)
    scale = np.abs(want).max(1)
    departs = ~(dev <= Tolerance.for_precision(precision).rtol * scale)  # a NaN advantage departs too
    return dev, departs, batch_std


def _describe(R: FloatArray, A: FloatArray, g: int) -> str:
    show = lambda x: "[" + ", ".join(f"{v:.6g}" for v in x[:8]) + (", …" if x.size > 8 else "") + "]"
    kind = "silent " if R[g].max() == R[g].min() else ""
    return f"a {kind}group of rewards {show(R[g])} has advantages {show(A[g])}"


def step_metrics(
    rewards: npt.ArrayLike,
    advantages: npt.ArrayLike,
    group_size: int,
    dial: D.Dial | None,
    *,
    prompts: Sequence[Hashable] | None = None,
    tracker: SolveRateTracker | None = None,
    eps: float = DEFAULT_EPS,
) -> StepReport:
    """The live diagnostics of one step (see the module docstring); updates ``tracker``.

    ``rewards`` and ``advantages`` are (n_groups·G,) laid out group by group; ``prompts`` one key
    per group (default: every group a new prompt). ``dial=None`` (a trainer off the dial) skips
    the audit. Solve-rate metrics need rewards in [0, 1]; the silent prediction needs binary ones.
    """
    G = int(group_size)
    R = np.asarray(rewards, dtype=np.float64).reshape(-1, G)  # (n, G)
    A = np.asarray(advantages, dtype=np.float64).reshape(R.shape)  # (n, G)
    keys = list(prompts) if prompts is not None else [object() for _ in range(R.shape[0])]
    if len(keys) != R.shape[0]:
        raise ValueError(f"{len(keys)} prompt keys for {R.shape[0]} groups")
    tracker = tracker if tracker is not None else SolveRateTracker()
    silent = R.max(1) == R.min(1)
    m: dict[str, float] = {"groups": float(R.shape[0]), "group_size": float(G), "silent_frac": float(silent.mean())}
    report = StepReport(m)
    if dial is not None:
        dev, departs, batch_std = _audit(R, A, dial, precision_of(np.asarray(advantages)))
        cdev = _coefficient_deviation(R, A, dial, batch_std)
        m["adv_dev_max"] = float(dev.max())
        m["departures"] = float(departs.sum())
        if np.isfinite(cdev).any():
            m["coef_dev_max"], m["coef_dev_mean"] = float(np.nanmax(cdev)), float(np.nanmean(cdev))
        if departs.any():
            report.departure = _describe(R, A, int(np.flatnonzero(departs)[0]))
    if R.min() >= 0 and R.max() <= 1:
        _solve_rate_metrics(m, R, A, keys, tracker, eps)
    report.metrics = {PREFIX + k: v for k, v in m.items()}
    return report


def _solve_rate_metrics(
    m: dict[str, float], R: FloatArray, A: FloatArray, keys: list[Any], tracker: SolveRateTracker, eps: float
) -> None:
    """Silent prediction, mass shares, fidelity per band and recommended G (adds to ``m``)."""
    G, mean = R.shape[1], float(R.mean())
    if np.all((R == 0) | (R == 1)):  # predicted from what was known before this step (first step: its own mean)
        m["silent_frac_pred"] = float(np.mean(silent_rate(G, tracker.estimate(keys, tracker.prior_mean(mean)))))
    tracker.update(keys, R)
    p = tracker.estimate(keys, mean)  # (n,) with this step's rollouts
    mass = np.abs(A).mean(1)
    if mass.sum() > 0:
        m["mass_share_extreme"] = float(mass[is_extreme(p)].sum() / mass.sum())
        m["mass_share_medium"] = float(mass[is_medium(p)].sum() / mass.sum())
    live = (p > 0) & (p < 1)
    if not live.any():
        return
    phi = np.asarray(fidelity(G, p), dtype=np.float64)
    bands = band_of(p)
    for b in BANDS:
        sel = live & (bands == b)
        if sel.any():
            m[f"fidelity/{b}"] = float(phi[sel].mean())
    m["fidelity"] = float(phi[live].mean())
    m["recommended_G"] = float(common_group_size(p[live], eps))
