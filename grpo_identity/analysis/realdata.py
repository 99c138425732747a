"""The paper's real-data numbers from a distribution of solve rates (PAPER claim 8).

From per-problem solve rates p̂ = k/n (Big-Math: n = 64 rollouts of Llama-3.1-8B):

* the fractions of problems at p̂ = 0 and p̂ = 1 (silent at every G);
* the silent fraction E[p̂^G + (1−p̂)^G] for G = 4, 8, 16, 32, 64 (closed form, claim 6);
* the silent fraction when G of the n logged rollouts are drawn without replacement, exact
  (hypergeometric): P(silent | k) = [C(k, G) + C(n−k, G)] / C(n, G);
* the share of gradient mass on extreme (p̂ < 0.1 or > 0.9) and medium (0.4 ≤ p̂ ≤ 0.6)
  prompts, with the large-G weights √(p(1−p)) (GRPO) and p(1−p) (Dr. GRPO) (claim 7).

numpy only.

>>> s = summarise([0.0, 0.5, 0.5, 1.0])
>>> s["frac_p0"], s["frac_p1"], s["silent_closed_form"]["4"]
(0.25, 0.25, 0.5625)
>>> from grpo_identity.analysis.solve_rates import big_math
>>> b = summarise(big_math())
>>> extreme_share = b["mass_share"]["grpo"]["extreme"]
>>> round(100 * b["frac_p0"], 1), round(100 * b["silent_closed_form"]["8"]), round(100 * extreme_share, 1)
(4.0, 44, 24.7)
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import numpy.typing as npt

from grpo_identity._validate import check_group_size, check_probability
from grpo_identity.analysis.solve_rates import SolveRates, from_values
from grpo_identity.closed_forms import (
    EXACT_ROLLOUTS_MAX,
    difficulty_weight,
    expected_sigma_sq,
    expected_update,
    silent_rate,
    subsampled_silent_rate,
)

__all__ = [
    "EXTREME_LOW",
    "EXTREME_HIGH",
    "MEDIUM_LOW",
    "MEDIUM_HIGH",
    "CLOSED_FORM_GROUP_SIZES",
    "SUBSAMPLED_GROUP_SIZES",
    "EXACT_ROLLOUTS_MAX",
    "is_extreme",
    "is_medium",
    "gradient_weights",
    "mass_share",
    "subsampled_silent_rate",
    "summarise",
    "plot_realdata",
]

#: extreme prompts: p < 0.1 or p > 0.9; medium prompts: 0.4 <= p <= 0.6 (PAPER claim 8)
EXTREME_LOW, EXTREME_HIGH = 0.1, 0.9
MEDIUM_LOW, MEDIUM_HIGH = 0.4, 0.6
CLOSED_FORM_GROUP_SIZES = (4, 8, 16, 32, 64)
SUBSAMPLED_GROUP_SIZES = (4, 8, 16)

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def is_extreme(p: npt.ArrayLike) -> BoolArray:
    """Extreme prompts, p < 0.1 or p > 0.9."""
    pp = np.asarray(p, dtype=np.float64)
    return (pp < EXTREME_LOW) | (pp > EXTREME_HIGH)


def is_medium(p: npt.ArrayLike) -> BoolArray:
    """Medium prompts, 0.4 <= p <= 0.6."""
    pp = np.asarray(p, dtype=np.float64)
    return (pp >= MEDIUM_LOW) & (pp <= MEDIUM_HIGH)


def gradient_weights(p: npt.ArrayLike, group_size: int | None = None) -> dict[str, FloatArray]:
    """Expected gradient magnitude per prompt for GRPO and Dr. GRPO.

    ``group_size=None``: the large-G forms √(p(1−p)) = 1/w(p) and p(1−p) = 1/w(p)² (claim 7);
    an integer G: the finite-G forms E[g] (Proposition 2) and E[σ²] = p(1−p)(1 − 1/G).
    Weights are 0 at p ∈ {0, 1}.

    >>> w = gradient_weights([0.0, 0.5])
    >>> w["grpo"].tolist(), w["dr_grpo"].tolist()
    ([0.0, 0.5], [0.0, 0.25])
    """
    pp = check_probability(p)
    if group_size is None:
        with np.errstate(divide="ignore"):
            inv_w = np.where((pp > 0) & (pp < 1), 1.0 / np.asarray(difficulty_weight(pp)), 0.0)
        return {"grpo": inv_w, "dr_grpo": inv_w**2}
    G = check_group_size(group_size)
    return {
        "grpo": np.asarray(expected_update(G, pp), dtype=np.float64),
        "dr_grpo": np.asarray(expected_sigma_sq(G, pp), dtype=np.float64),
    }


def mass_share(weights: npt.ArrayLike, mask: npt.ArrayLike, counts: npt.ArrayLike | None = None) -> float:
    """Share Σ c·w·1{mask} / Σ c·w of the gradient mass on the masked prompts (0 if no mass)."""
    w = np.asarray(weights, dtype=np.float64)
    c = np.ones_like(w) if counts is None else np.asarray(counts, dtype=np.float64)
    total = float((c * w).sum())
    return float((c * w * np.asarray(mask, dtype=bool)).sum() / total) if total > 0 else 0.0


def _as_solve_rates(solve_rates: SolveRates | npt.ArrayLike) -> SolveRates:
    return solve_rates if isinstance(solve_rates, SolveRates) else from_values(solve_rates)


#: solve rates off the k/n grid that the sub-sampled rate rounds to the nearest k, as a share of
#: the problems (Big-Math has 6 of 215,608 on a /9 grid; the paper rounds them); more is an error
OFF_GRID_MAX_SHARE = 0.01


def _num_correct(values: FloatArray, weights: FloatArray, n: int, source: str) -> tuple[FloatArray, float]:
    """k = round(n·p̂) (the paper's discretisation) and the share of problems off the k/n grid."""
    k = np.round(values * n)
    off = np.abs(values * n - k) > 1e-6
    share = float(weights[off].sum())
    if share > OFF_GRID_MAX_SHARE:
        raise ValueError(
            f"{100 * share:.3g} % of the solve rates in {source} are not multiples of 1/{n} "
            f"(e.g. {float(values[off][0])!r}); set the number of rollouts"
        )
    return k, share


def _check_rollouts(num_rollouts: Any) -> int:
    if isinstance(num_rollouts, bool) or not isinstance(num_rollouts, (int, np.integer)) or num_rollouts < 1:
        raise ValueError(f"num_rollouts must be an integer >= 1, got {num_rollouts!r}")
    return int(num_rollouts)


def summarise(
    solve_rates: SolveRates | npt.ArrayLike,
    *,
    num_rollouts: int = 64,
    group_sizes: Sequence[int] = CLOSED_FORM_GROUP_SIZES,
    subsample_sizes: Sequence[int] = SUBSAMPLED_GROUP_SIZES,
) -> dict[str, Any]:
    """Every real-data number of PAPER claim 8 for one distribution of solve rates.

    ``solve_rates`` is a :class:`SolveRates` (e.g. ``solve_rates.big_math()``, the shipped
    Big-Math histogram) or per-problem rates.  The sub-sampled silent
    fractions need p̂ = k/n with n = ``num_rollouts`` (subsample sizes above n are skipped); up
    to ``OFF_GRID_MAX_SHARE`` of the problems may lie off that grid and are rounded to the nearest
    k, as the paper does (their share is ``off_grid_share``).
    Returns ``{"n", "source", "frac_p0", "frac_p1", "silent_closed_form": {"4": …},
    "silent_subsampled": {"4": …}, "mass_share": {"grpo": {"extreme", "medium"}, "dr_grpo": …}}``.
    """
    num_rollouts = _check_rollouts(num_rollouts)
    sr = _as_solve_rates(solve_rates)
    v, c = sr.values, sr.weights  # (n_distinct,)
    total = sr.total
    out: dict[str, Any] = {
        "n": int(round(total)) if abs(total - round(total)) < 1e-9 else total,
        "source": sr.source,
        "num_rollouts": num_rollouts,
        "frac_p0": float(c[v == 0].sum()),
        "frac_p1": float(c[v == 1].sum()),
        "silent_closed_form": {str(G): float((c * silent_rate(G, v)).sum()) for G in group_sizes},
    }
    sizes = [G for G in subsample_sizes if G <= num_rollouts]
    if sizes:
        k, out["off_grid_share"] = _num_correct(v, c, num_rollouts, sr.source)
        out["silent_subsampled"] = {
            str(G): float((c * subsampled_silent_rate(G, k, num_rollouts)).sum()) for G in sizes
        }
    else:
        out["silent_subsampled"], out["off_grid_share"] = {}, 0.0
    w = gradient_weights(v)
    ext, med = is_extreme(v), is_medium(v)
    out["mass_share"] = {
        arm: {"extreme": mass_share(w[arm], ext, c), "medium": mass_share(w[arm], med, c)}
        for arm in ("grpo", "dr_grpo")
    }
    return out


def plot_realdata(summary: dict[str, Any], path: str) -> None:
    """Two panels: silent fraction against G (closed form and sub-sampled), and the shares of
    gradient mass on extreme and medium prompts for Dr. GRPO and GRPO.  Writes a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
    cf = summary["silent_closed_form"]
    a.plot([int(g) for g in cf], [100 * x for x in cf.values()], "o-", label="closed form E[p^G + (1-p)^G]")
    ss = summary["silent_subsampled"]
    if ss:
        a.plot([int(g) for g in ss], [100 * x for x in ss.values()], "s--", label="G of n logged rollouts")
    a.axhline(100 * (summary["frac_p0"] + summary["frac_p1"]), color="grey", lw=0.8, label="p = 0 or 1")
    a.set_xscale("log", base=2)
    a.set_xlabel("group size G")
    a.set_ylabel("silent fraction (%)")
    a.legend(fontsize=7)
    ms = summary["mass_share"]
    x = np.arange(2)
    for i, arm in enumerate(("dr_grpo", "grpo")):
        b.bar(
            x + 0.38 * i,
            [100 * ms[arm]["extreme"], 100 * ms[arm]["medium"]],
            0.38,
            label={"grpo": "GRPO √(p(1-p))", "dr_grpo": "Dr. GRPO p(1-p)"}[arm],
        )
    b.set_xticks(x + 0.19, ["extreme (p<0.1 or >0.9)", "medium (0.4-0.6)"])
    b.set_ylabel("share of gradient mass (%)")
    b.legend(fontsize=7)
    fig.suptitle(f"{summary['source']} (n = {summary['n']})", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
