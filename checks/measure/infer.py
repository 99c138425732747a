"""Dial inference: which point of the dial a black-box advantage function computes.

The target is probed with designed binary batches — for each G of :data:`PROBE_GROUP_SIZES` one call
holding a group with k correct for every k = 0…G — and its two advantage levels Â₊, Â₋ are read
per group.  With gap d = Â₊ − Â₋ and the centre's factor f (1 for the group mean, G/(G−1) for
leave-one-out, Prop. 1), every scale of the family is linear in a known x:

    f/d = x/α + ε/α,   x = σ_ddof(k, G) (group std), σ_ddof(batch) (batch std), or 0 (none),

so one weighted least-squares line per candidate (centre, scale, ddof) gives α (ideally 1) and ε;
the candidate that fits within the precision's tolerance is the inferred dial.  The update
coefficient c(k, G) = (k/G)·Â₊ (Theorem 1) is recorded for the report.

>>> from grpo_identity import dial as D
>>> inf = infer_dial(lambda r, G: D.advantages(r, G, D.TRL))
>>> inf.centre, inf.scale, inf.ddof, round(inf.eps, 8)
('mean', 'group_std', 1, 0.0001)
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from grpo_identity import closed_forms
from grpo_identity.checks.calls.target import TargetCrashed, TargetError, TargetTimeout
from grpo_identity.checks.measure.properties import (
    PropertyViolation,
    Tolerance,
    call_filter,
    call_target,
    kept_by_definition,
    precision_of,
)
from grpo_identity.checks.report import AdvantageFit, FilterFit

__all__ = [
    "PROBE_GROUP_SIZES",
    "SILENT_PROBE_VALUES",
    "NEAR_SILENT_OFFSETS",
    "UNIT_ROUNDOFF",
    "silent_probe_batch",
    "infer_dial",
    "fit_tolerance",
    "infer_keep_rule",
    "infer_filter",
    "keep_tolerance",
    "probe_batch",
]

#: group sizes of the designed probes; the strategies draw these often too (their one home)
PROBE_GROUP_SIZES = (2, 3, 4, 8, 16, 64)
#: rewards of the silent non-binary probe (float rounding of the mean may leave a residue)
SILENT_PROBE_VALUES = (0.1, 0.3, 1.0 / 3.0, 0.7, -0.2, 2.5)
#: live groups of the filter probe: G − 1 rewards 0.1 and one 0.1 + offset (σ > 0, tiny)
NEAR_SILENT_OFFSETS = (1e-6, 1e-9)
#: the unit roundoff of each precision (half the spacing of floats in [1, 2); the spacing in [0.5, 1))
UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}


#: all-wrong groups appended to each probe batch: without them its std would be 1/2 at every G,
#: and a batch std could not be told from a constant
PROBE_EXTRA_SILENT = 2


def probe_batch(G: int) -> np.ndarray:
    """One group per k = 0…G (k ones first, then zeros), then two all-wrong groups: (G+3)·G rewards."""
    return np.concatenate(
        [np.r_[np.ones(k), np.zeros(G - k)] for k in range(G + 1)] + [np.zeros(G * PROBE_EXTRA_SILENT)]
    )


def silent_probe_batch(G: int) -> np.ndarray:
    """One silent group of G rewards per :data:`SILENT_PROBE_VALUES` value (the non-binary silent probe)."""
    return np.repeat(np.array(SILENT_PROBE_VALUES), G)


def _levels(A: np.ndarray, G: int) -> tuple[np.ndarray, np.ndarray]:
    """Â₊(k), Â₋(k) for k = 1…G−1 from a probe output laid out like :func:`probe_batch`."""
    M = A.reshape(-1, G)
    pos = np.array([M[k, :k].mean() for k in range(1, G)])
    neg = np.array([M[k, k:].mean() for k in range(1, G)])
    return pos, neg


def _fit_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Weighted (relative) least squares y ≈ βx + γ; returns β, γ, max relative residual."""
    w = 1.0 / y
    M = np.stack([x * w, w], 1)
    (beta, gamma), *_ = np.linalg.lstsq(M, np.ones_like(y), rcond=None)
    resid = float(np.max(np.abs((beta * x + gamma) / y - 1)))
    return float(beta), float(gamma), resid


def infer_dial(
    target: Callable[[np.ndarray, int], np.ndarray], sizes: tuple[int, ...] = PROBE_GROUP_SIZES
) -> AdvantageFit:
    """Probe ``target`` with designed binary batches and fit the dial (see the module docstring).

    Raises :class:`PropertyViolation` when the output is malformed (shape, dtype); returns an
    :class:`~grpo_identity.checks.report.AdvantageFit` with ``centre = None`` and ``why`` when no point of the
    dial fits.
    """
    outs = {G: call_target(target, probe_batch(G), G, "well_formed") for G in sizes}
    inf = AdvantageFit(precision=precision_of(np.concatenate(list(outs.values()))))
    for G, A in outs.items():
        M = A.reshape(-1, G)  # (G+3, G): one group per k, then the all-wrong groups
        inf.coefficients[G] = [float(k / G * M[k, :k].mean()) if 0 < k else 0.0 for k in range(G + 1)]
        inf.batch_std[G] = float(probe_batch(G).std())
    inf.silent_nonbinary_max_abs, inf.silent_nonbinary_worst = _silent_residue(target, sizes)
    inf.coupled = _coupled(target, outs, Tolerance.for_precision(inf.precision))
    if any(not np.all(np.isfinite(A)) for A in outs.values()):
        inf.why = "non-finite advantages on the probe batches"
        return inf
    data = _gap_rows(outs, inf.batch_std)
    if np.any(data[:, 2] <= 0):
        inf.why = "the higher reward does not get the higher advantage (sign)"
        return inf
    best = _best_fit(_fits(data, inf), UNIT_ROUNDOFF[inf.precision])
    if best is None:
        inf.why = (
            "no centre (mean, leave-one-out) and scale (group std ddof 0/1 + ε, batch std, none) fits the probes: "
            "the scale is no function of σ of the dial's form"
        )
        return inf
    _adopt(inf, best)
    if inf.coupled and inf.scale != "batch_std":
        inf.why = "coupled across groups, but not through a batch std"
    _read_small_eps(target, inf, sizes)
    return inf


#: the reward scale of the probes that read again an ε the unit-scale ones cannot resolve (:func:`_read_small_eps`)
EPS_PROBE_SCALE = 1e-2


def _read_small_eps(target: Callable[[np.ndarray, int], np.ndarray], inf: AdvantageFit, sizes: tuple[int, ...]) -> None:
    """In float32, ε read again where the unit-scale probes leave it unresolved: their σ runs from 0.12 to 0.5,
    where ε = 1e-6 under the root changes an advantage by 3e-5 of itself at most, yet a group of σ = 1e-3 (the
    property search draws such) by 29 %.  The same probes with rewards × :data:`EPS_PROBE_SCALE` give, for the
    dial's family (whose advantages change with the rewards' scale only through ε), the same line for f/d with
    intercept ε/s (ε/s² under the root).  That reading is adopted only where it resolves an ε > 0 with the same
    centre, scale, ddof and α; an answer it cannot use (an exception, a NaN) leaves the unit-scale fit as it was.
    Not below float32: at that scale float16's variance is subnormal and bfloat16's rounding lets the wrong form
    fit."""
    if inf.precision != "float32" or inf.why or inf.scale != "group_std" or (inf.eps or 0.0) > 0:
        return
    s = EPS_PROBE_SCALE
    try:
        outs = {G: call_target(target, s * probe_batch(G), G, "well_formed") for G in sizes}
    except (TargetCrashed, TargetTimeout):
        raise
    except (PropertyViolation, TargetError):
        return
    if any(not np.all(np.isfinite(A)) for A in outs.values()):
        return
    data = _gap_rows(outs, inf.batch_std)  # unit-scale x throughout: every intercept is ε/s (or ε/s²)
    if np.any(data[:, 2] <= 0):
        return
    best = _best_fit(_fits(data, inf), UNIT_ROUNDOFF[inf.precision])
    if best is None:
        return
    p = best[2]
    same = (p["centre"], p["scale"], p["ddof"]) == (inf.centre, inf.scale, inf.ddof)
    if not same or p["eps"] <= 0 or abs(p["alpha"] - inf.alpha) > _alpha_tolerance(inf.precision, best[1]):
        return
    unit = s * s if p["inside"] else s  # ε in the rewards' own units
    inf.eps, inf.eps_resolution, inf.eps_inside_sqrt = p["eps"] * unit, p["eps_resolution"] * unit, p["inside"]


def _silent_residue(
    target: Callable[[np.ndarray, int], np.ndarray], sizes: tuple[int, ...]
) -> tuple[float, dict[str, float] | None]:
    """Largest |Â| on silent groups of :data:`SILENT_PROBE_VALUES` (float rounding of the mean may
    leave one), and the reward value and G where it appeared (``None`` when it is 0 everywhere)."""
    worst, where = 0.0, None
    for G in sizes:
        r = silent_probe_batch(G)
        S = np.abs(call_target(target, r, G, "well_formed"))
        S = np.where(np.isfinite(S), S, np.inf)
        i = int(np.argmax(S))
        if S[i] > worst:
            worst, where = float(S[i]), {"value": float(r[i]), "G": G}
    return worst, where


def _coupled(target: Callable[[np.ndarray, int], np.ndarray], outs: dict[int, np.ndarray], tol: Tolerance) -> bool:
    """Whether the k = 1 group gets other advantages alone than inside its probe batch."""
    for G, A in outs.items():
        alone = call_target(target, probe_batch(G)[G : 2 * G], G, "groups_independent")
        if not tol.close(alone, A[G : 2 * G], float(np.abs(A[G : 2 * G]).max())):
            return True
    return False


def _gap_rows(outs: dict[int, np.ndarray], batch_std: dict[int, float]) -> np.ndarray:
    """One row (G, k, gap Â₊ − Â₋, batch std ddof 0, ddof 1) per probed 0 < k < G: (rows, 5)."""
    rows = []
    for G, A in outs.items():
        pos, neg = _levels(A, G)
        n = probe_batch(G).size
        s0 = batch_std[G]
        for k in range(1, G):
            rows.append((G, k, pos[k - 1] - neg[k - 1], s0, s0 * np.sqrt(n / (n - 1))))
    return np.array(rows, dtype=np.float64)


#: a candidate scale: (rank, scale, ddof, x, ε under the root); rank orders the simpler forms first
_Candidate = tuple[int, str, int | None, np.ndarray | None, bool]


def _candidates(data: np.ndarray, coupled: bool) -> list[_Candidate]:
    """Every scale of the family as a known x per row: none, group std (ddof 0/1, ε added or under
    the root), and the batch std when the groups are coupled."""
    Gs, ks = data[:, 0], data[:, 1]
    sigma = np.array([closed_forms.sigma(int(k), int(G)) for G, k in zip(Gs, ks)])
    cands: list[_Candidate] = [(0, "none", None, None, False)]
    for d in (0, 1):
        x_d = sigma * np.sqrt(Gs / (Gs - d))
        cands.append((1, "group_std", d, x_d, False))
        cands.append((2, "group_std", d, x_d, True))  # √(σ² + ε): (f/d)² = σ²/α² + ε/α²
        if coupled:
            cands.append((1, "batch_std", d, data[:, 3 + d], False))
    return cands


def _fit_one(centre: str, y: np.ndarray, cand: _Candidate, u: float) -> tuple[float, dict[str, Any]] | None:
    """Fit f/d = x/α + ε/α (or its square, ε under the root) for one candidate: (residual, params),
    or ``None`` when α or ε comes out negative."""
    _, scale, ddof, x, inside = cand
    if x is None:  # no scale: f/d is the constant 1/α
        gamma = float(np.median(y))
        return float(np.max(np.abs(y / gamma - 1))), {
            "centre": centre,
            "scale": scale,
            "ddof": None,
            "eps": 0.0,
            "alpha": 1.0 / gamma,
            "eps_resolution": 0.0,
            "inside": False,
        }
    xx, yy = (x * x, y * y) if inside else (x, y)
    beta, gamma, resid = _fit_line(xx, yy)
    if inside:
        resid /= 2  # relative residual of y² is twice y's
    if beta <= 0:
        return None
    res_eps = 3 * max(resid, u) * float(np.max(xx)) * (2 if inside else 1)
    eps = gamma / beta
    if eps < -res_eps:
        return None
    alpha = 1.0 / (np.sqrt(beta) if inside else beta)
    return resid, {
        "centre": centre,
        "scale": scale,
        "ddof": ddof,
        "eps": max(eps, 0.0) if abs(eps) > res_eps else 0.0,
        "alpha": float(alpha),
        "eps_resolution": res_eps,
        "inside": inside,
    }


def fit_tolerance(precision: str) -> float:
    """The relative residual within which measured coefficients fit a form (a point of the dial,
    a declared c(k, G), a factor of G): 30 rtol of the precision, at most 10 %."""
    return max(min(30 * Tolerance.for_precision(precision).rtol, 0.1), 1e-12)


def _fits(data: np.ndarray, inf: AdvantageFit) -> list[tuple[int, float, dict[str, Any]]]:
    """(rank, residual, params) of every (centre, scale) candidate that fits within the precision's tolerance."""
    Gs, gap = data[:, 0], data[:, 2]
    fit_tol = fit_tolerance(inf.precision)
    u = UNIT_ROUNDOFF[inf.precision]
    fits = []
    for centre in ("mean", "loo"):
        y = (1.0 if centre == "mean" else Gs / (Gs - 1)) / gap  # f/d, f the centre's factor (Prop. 1)
        for cand in _candidates(data, inf.coupled):
            fit = _fit_one(centre, y, cand, u)
            if fit is not None and fit[0] <= fit_tol:
                fits.append((cand[0], fit[0], fit[1]))
    return fits


def _best_fit(fits: list[tuple[int, float, dict[str, Any]]], u: float) -> tuple[int, float, dict[str, Any]] | None:
    """The simplest form among those that fit about as well as the best one (``None`` if none fits)."""
    if not fits:
        return None
    floor = max(4 * min(f[1] for f in fits), 100 * u)
    best = min((f for f in fits if f[1] <= floor), key=lambda f: (f[0], f[1]))
    if best[2]["inside"] and best[2]["eps"] == 0.0:  # ε unresolved: the plain group std
        best = (1, best[1], {**best[2], "inside": False})
    return best


def _adopt(inf: AdvantageFit, best: tuple[int, float, dict[str, Any]]) -> None:
    """Write the chosen fit into ``inf``; α within its resolution of 1 reads as exactly 1."""
    p = best[2]
    inf.centre, inf.scale, inf.ddof, inf.eps, inf.eps_resolution = (
        p["centre"],
        p["scale"],
        p["ddof"],
        float(p["eps"]),
        float(p["eps_resolution"]),
    )
    inf.eps_inside_sqrt = bool(p["inside"])
    inf.alpha = 1.0 if abs(p["alpha"] - 1) <= _alpha_tolerance(inf.precision, best[1]) else float(p["alpha"])
    inf.fit_residual = best[1]


def _alpha_tolerance(precision: str, residual: float) -> float:
    """How far a fitted α may be from another and still read as the same (the precision's and the fit's)."""
    return max(min(1e3 * UNIT_ROUNDOFF[precision], 0.03), 3 * residual, 1e-12)


def infer_keep_rule(
    target: Callable[[np.ndarray, int], np.ndarray], sizes: tuple[int, ...] = PROBE_GROUP_SIZES
) -> tuple[str, str]:
    """The keep rule of a group filter: ('nonzero_std' | 'all' | 'other', description)."""
    inf = infer_filter(target, sizes)
    return str(inf.keep), inf.why


def infer_filter(
    target: Callable[[np.ndarray, int], np.ndarray],
    sizes: tuple[int, ...] = PROBE_GROUP_SIZES,
    rounding: Callable[[np.ndarray], np.ndarray] | None = None,
) -> FilterFit:
    """The keep rule of a group filter, and the tolerance it keeps σ > 0 with.

    Designed batches of binary, silent and near-silent groups (σ > 0, tiny) say whether the filter
    keeps exactly the groups with σ > 0 ('nonzero_std'), every group ('all'), or something else
    ('other').  A filter that agrees except that it drops near-silent groups keeps σ > 0 up to a
    tolerance: :func:`keep_tolerance` measures it.  ``rounding``: how the rewards reach the filter
    (``--reward-dtype``); the definition is taken on what the filter sees."""
    seen = rounding or (lambda r: r)
    agree_dapo, agree_all, only_near, first_bad = True, True, True, ""
    for G in sizes:
        silent = silent_probe_batch(G)
        near = [np.r_[np.full(G - 1, 0.1), 0.1 + d] for d in NEAR_SILENT_OFFSETS]  # σ > 0, tiny
        r = np.concatenate([probe_batch(G), silent, *near])
        keep = call_filter(target, r, G, "filter_well_formed")
        want = kept_by_definition(seen(r), G, "nonzero_std")
        agree_all &= bool(keep.all())
        wrong = np.flatnonzero(keep != want)
        if wrong.size:
            agree_dapo = False
            n_exact = probe_batch(G).size // G + len(SILENT_PROBE_VALUES)
            only_near &= bool(np.all(wrong >= n_exact) and not keep[wrong].any())  # near-silent ones dropped
            if not first_bad or (keep[wrong].any() and "is dropped" in first_bad):
                kept = wrong[keep[wrong]]  # a silent group kept says more than a near-silent one dropped
                g = int(kept[0] if kept.size else wrong[0])
                row = r[g * G : (g + 1) * G]
                shown = ", ".join(f"{v:.12g}" for v in row[:8])  # 12 digits: 0.1 + 1e-9 reads apart from 0.1
                first_bad = f"G={G}: group [{shown}{', …' if G > 8 else ''}] is {'kept' if keep[g] else 'dropped'}"
    if agree_dapo:
        return FilterFit(keep="nonzero_std", why="keeps exactly the groups with σ > 0")
    if agree_all:
        return FilterFit(keep="all", why="keeps every group")
    if only_near:
        tol = keep_tolerance(target, seen)
        if tol is not None:
            return FilterFit("nonzero_std", tol["tolerance"], tol["measure"], why=tol["why"])
    return FilterFit(keep="other", why=first_bad)


#: spreads of the tolerance ladder: 1 down to 1e-12, 16 a decade
TOLERANCE_LADDER = 10.0 ** (-np.arange(0, 193) / 16)
#: a group [0, …, 0, 1] of G rewards under each measure a keep rule may threshold
_MEASURES: dict[str, Callable[[np.ndarray], float]] = {
    "max − min": lambda x: float(np.ptp(x)),
    "std (ddof 0)": lambda x: float(np.std(x)),
    "std (ddof 1)": lambda x: float(np.std(x, ddof=1)),
}


def _largest_dropped(
    target: Callable[..., Any], G: int, base: float, seen: Callable[[np.ndarray], np.ndarray]
) -> float:
    """The largest spread s of the ladder whose group [base, …, base, base + s] the filter drops
    (0 when it drops none): one call with every rung."""
    r = np.concatenate([np.r_[np.full(G - 1, base), base + s] for s in TOLERANCE_LADDER])
    keep = call_filter(target, r, G, "filter_well_formed")
    live = kept_by_definition(seen(r), G, "nonzero_std")  # rungs still two values as the filter sees them
    dropped = TOLERANCE_LADDER[~keep & live]
    return float(dropped.max()) if dropped.size else 0.0


def tolerance_rule(tol: float, measure: str) -> Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]:
    """The keep rule :func:`keep_tolerance` found, as a reference for the filter properties: which
    groups it keeps, and which lie within a factor 2 of its threshold (the ladder's estimate is that
    close, so those are not judged)."""

    def rule(r: np.ndarray, G: int) -> tuple[np.ndarray, np.ndarray]:
        R = np.asarray(r, dtype=np.float64).reshape(-1, G)
        spread = np.ptp(R, 1)
        if measure.endswith("resolution"):
            dtype = measure.split()[0]
            ulp = np.spacing(np.abs(R).max(1).astype(dtype)).astype(np.float64)
            keep = np.ptp(R.astype(dtype).astype(np.float64), 1) > 0
            return keep, (spread > 0) & (spread < 4 * ulp)
        if measure == "relative":
            m = spread / np.maximum(np.abs(R).max(1), 1e-300)
        else:
            m = np.array([_MEASURES[measure](row) for row in R])
        return m > tol, (m > tol / 2) & (m < tol * 2)

    return rule


def keep_tolerance(target: Callable[..., Any], seen: Callable[[np.ndarray], np.ndarray]) -> dict[str, Any] | None:
    """How far below σ > 0 a filter drops groups: the tolerance, the measure it is taken in (max − min
    or a std; a threshold that grows with the rewards' size is a floating-point resolution), and a
    sentence.  ``None`` when it drops no group the definition keeps."""
    at = {(G, base): _largest_dropped(target, G, base, seen) for G in (2, 8) for base in (0.5, 0.75, 100.0)}
    t2, t8, t2_big = at[(2, 0.5)], at[(8, 0.5)], at[(2, 100.0)]
    if max(at.values()) == 0.0:
        return None
    # a floating-point resolution is one value across a binade (0.5 and 0.75), a relative tolerance grows
    scales = t2 > 0 and t2_big / t2 > 20  # it grows with the rewards' size
    same_binade = scales and at[(2, 0.75)] > 0 and abs(np.log(at[(2, 0.75)] / t2)) < np.log(1.25)
    if same_binade:  # a resolution, if it is one dtype's spacing
        for dtype in ("float32", "float16"):
            ulp = float(np.spacing(np.array(0.5, dtype=dtype)))
            if 0.2 * ulp <= t2 <= 8 * ulp:
                why = (
                    f"keeps σ > 0 at {dtype}'s resolution: groups whose rewards differ by less than about "
                    f"{ulp:.2g} at 0.5 ({float(np.spacing(np.array(100.0, dtype=dtype))):.2g} at 100) are one value "
                    f"to it and dropped (it computes in {dtype})"
                )
                return {"tolerance": ulp, "measure": f"{dtype} resolution", "why": why}
    if scales:
        why = f"drops groups whose spread is below about {t2 / 0.5:.2g} of their size (a relative tolerance)"
        return {"tolerance": t2 / 0.5, "measure": "relative", "why": why}
    unit = np.r_[np.zeros(7), 1.0]
    pair = np.r_[0.0, 1.0]

    def mismatch(m: Callable[[np.ndarray], float]) -> float:
        return abs(np.log(max(t2 * m(pair), 1e-300)) - np.log(max(t8 * m(unit), 1e-300)))

    measure = min(_MEASURES, key=lambda name: mismatch(_MEASURES[name]))
    lo = t2 * _MEASURES[measure](pair)  # the largest rung dropped; the next one up is kept
    hi = lo * float(TOLERANCE_LADDER[0] / TOLERANCE_LADDER[1])
    why = f"keeps σ > 0 with a tolerance: drops groups whose {measure} is at most between {lo:.2g} and {hi:.2g}"
    return {"tolerance": float(np.sqrt(lo * hi)), "measure": measure, "why": why}
