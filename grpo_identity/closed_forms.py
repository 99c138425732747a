"""Fast numeric twins of the formulas in :mod:`grpo_identity.formulas`.

Vectorised over numpy arrays of p (and k), finite and accurate for every group size G from 2
to 10⁶ and every p in [0, 1].  Binomial probabilities are evaluated in log space with
Loader's saddle-point form (the one behind R's ``dbinom``), which avoids the cancellation of
``lgamma(G+1) − lgamma(k+1) − lgamma(G−k+1)`` and never forms ``comb(G, k)`` as a float
(that overflows near G = 1030).  Each twin is tested against its symbolic definition.

Only numpy is imported here.

>>> round(float(fidelity(8, 0.5)), 4)
0.9278
>>> group_size_exact(0.1, 0.5), round(group_size_law(0.1, 0.5), 6)
(7, 5.0)
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Callable, TypedDict

import numpy as np
import numpy.typing as npt

from grpo_identity import paper
from grpo_identity._validate import check_eps, check_group_size, check_num_correct, check_probability

__all__ = [
    "NoGroupSize",
    "group_mean",
    "sigma",
    "advantage_values",
    "silent_rate",
    "subsampled_silent_rate",
    "binomial_pmf",
    "expected_update",
    "expected_sigma_sq",
    "fidelity",
    "attenuation_first_order",
    "attenuation_second_order",
    "group_size_law",
    "group_size_exact",
    "difficulty_weight",
    "arcsine_objective",
    "expected_score_gap",
    "expected_update_given_k",
    "update_covariance_given_k",
    "reward_std",
    "score_slope",
    "clipped_surrogate",
    "token_weight",
    "sequence_ratio",
    "kl_gradient_weight",
    "truncated_weight",
    "masked_weight",
    "sequence_product_ratio",
]

ArrayLike = float | int | npt.ArrayLike
FloatArray = npt.NDArray[np.float64]


def _out(x: FloatArray) -> FloatArray | float:
    """Return a Python float for 0-d results, the array otherwise."""
    return float(x) if np.ndim(x) == 0 else x


# --- sigma and the two advantage values ------------------------------------------------------
def group_mean(k: ArrayLike, G: int) -> FloatArray | float:
    """Group mean reward of binary rewards, μ = k/G.

    >>> group_mean(2, 8)
    0.25
    """
    G = check_group_size(G)
    return _out(check_num_correct(k, G) / G)


def sigma(k: ArrayLike, G: int) -> FloatArray | float:
    """Group standard deviation of binary rewards, σ = √(k(G−k))/G (ddof 0).

    Twin of :func:`grpo_identity.formulas.sigma`; PAPER §Setting.

    >>> sigma(4, 8)
    0.5
    """
    G = check_group_size(G)
    kk = check_num_correct(k, G)
    return _out(np.sqrt(kk * (G - kk)) / G)


def advantage_values(k: ArrayLike, G: int) -> tuple[FloatArray | float, FloatArray | float]:
    """GRPO advantages (Â₊, Â₋) = ((G−k)/(Gσ), −k/(Gσ)); (0, 0) for silent groups.

    Twin of :func:`grpo_identity.formulas.advantage_correct` / ``advantage_incorrect``.

    >>> advantage_values(2, 4)
    (1.0, -1.0)
    """
    G = check_group_size(G)
    kk = check_num_correct(k, G)
    s = np.asarray(sigma(kk, G))
    live = s > 0
    safe = np.where(live, s, 1.0)
    pos = np.where(live, (G - kk) / (G * safe), 0.0)
    neg = np.where(live, -kk / (G * safe), 0.0)
    return _out(pos), _out(neg)


def silent_rate(G: int, p: ArrayLike) -> FloatArray | float:
    """Probability that a group is silent, p^G + (1−p)^G (PAPER claim 6).

    >>> silent_rate(2, 0.5)
    0.5
    """
    G = check_group_size(G)
    pp = check_probability(p)
    return _out(pp**G + (1.0 - pp) ** G)


#: up to this many logged rollouts the sub-sampled silent rate is formed from exact integers
EXACT_ROLLOUTS_MAX = 1024


def _log_comb(n: int, r: int) -> float:
    """log C(n, r) for 0 <= r <= n (lgamma)."""
    return math.lgamma(n + 1) - math.lgamma(r + 1) - math.lgamma(n - r + 1)


def subsampled_silent_rate(G: int, k: ArrayLike, n: int) -> FloatArray | float:
    """Silent probability of G answers drawn without replacement from n logged rollouts, k correct:
    [C(k, G) + C(n−k, G)] / C(n, G) (hypergeometric; C(a, G) = 0 for a < G).  PAPER claim 8.

    Twin of :func:`grpo_identity.formulas.subsampled_silent_rate`.  For n ≤ 1024 the ratio is
    formed from exact integers and rounded once; above, in log space, so that no huge binomial
    coefficient is formed.

    >>> subsampled_silent_rate(2, 1, 2), round(subsampled_silent_rate(2, 2, 4), 12)  # 2 of 4, 2 correct: 2/6
    (0.0, 0.333333333333)
    """
    G = check_group_size(G)
    n = check_group_size(n, name="number of rollouts n")
    if G > n:
        raise ValueError(f"group size G={G} exceeds the {n} logged rollouts")
    kk = np.asarray(k, dtype=np.float64)
    bad = ~np.isfinite(kk) | (kk < 0) | (kk > n) | (kk != np.round(kk))
    if bad.any():
        raise ValueError(f"number correct k must be an integer in [0, n={n}], got {float(kk[bad].reshape(-1)[0]):g}")
    # a table over every k in 0..n: the two all-equal branches, each 0 when fewer than G answers exist
    if n <= EXACT_ROLLOUTS_MAX:
        total = math.comb(n, G)
        table = np.array([(math.comb(j, G) + math.comb(n - j, G)) / total for j in range(n + 1)])
    else:
        log_total = _log_comb(n, G)
        table = np.array(
            [
                (math.exp(_log_comb(j, G) - log_total) if j >= G else 0.0)
                + (math.exp(_log_comb(n - j, G) - log_total) if n - j >= G else 0.0)
                for j in range(n + 1)
            ]
        )
    return _out(table[kk.astype(np.int64)])


# --- binomial probabilities in log space (Loader 2000) ---------------------------------------
_LN_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_STIRLERR_TABLE = np.array(
    [math.lgamma(n + 1.0) - (n + 0.5) * math.log(n) + n - _LN_SQRT_2PI if n > 0 else 0.0 for n in range(16)]
)


def _stirlerr(n: FloatArray) -> FloatArray:
    """Stirling-formula error log(n!) − [(n+½)log n − n + ½log 2π] for integer n ≥ 1."""
    n = np.asarray(n, dtype=np.float64)
    small = n <= 15
    nn = np.where(small, 16.0, n)
    n2 = nn * nn
    series = (1 / 12 - (1 / 360 - (1 / 1260 - (1 / 1680 - 1 / 1188 / n2) / n2) / n2) / n2) / nn
    table = _STIRLERR_TABLE[np.clip(n, 0, 15).astype(np.int64)]
    return np.where(small, table, series)


def _bd0(x: FloatArray, mean: FloatArray) -> FloatArray:
    """Deviance term x·log(x/mean) + mean − x, accurate when x ≈ mean (Loader's series)."""
    x = np.asarray(x, dtype=np.float64)
    mean = np.asarray(mean, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        direct = x * np.log(x / mean) + mean - x
        v = (x - mean) / (x + mean)
    close = np.abs(x - mean) < 0.1 * (x + mean)
    v = np.where(close, v, 0.0)
    s = (x - mean) * v
    ej = 2.0 * x * v
    v2 = v * v
    for j in range(1, 14):  # |v| < 0.1: term j is below v^(2j) < 1e-26 of the sum by j = 13
        ej = ej * v2
        s = s + ej / (2 * j + 1)
    return np.where(close, s, direct)


def binomial_pmf(k: ArrayLike, G: int, p: ArrayLike) -> FloatArray | float:
    """Binomial probability C(G,k) p^k (1−p)^{G−k}, computed without forming C(G,k).

    Relative accuracy ~1e-15 for every G up to 10⁶ and beyond; broadcasts k against p.

    >>> round(binomial_pmf(1, 2, 0.5), 12)
    0.5
    """
    G = check_group_size(G)
    kk, pp = np.broadcast_arrays(np.asarray(k, dtype=np.float64), check_probability(p))
    return _out(_binomial_pmf(kk, G, pp))


def _binomial_pmf(k: FloatArray, G: int, p: FloatArray) -> FloatArray:
    q = 1.0 - p
    interior = (k > 0) & (k < G)
    ks = np.where(interior, k, 1.0)
    ps = np.where((p > 0) & (p < 1), p, 0.5)
    qs = 1.0 - ps
    with np.errstate(divide="ignore", under="ignore"):
        lc = (
            _stirlerr(np.full_like(ks, float(G)))
            - _stirlerr(ks)
            - _stirlerr(G - ks)
            - _bd0(ks, G * ps)
            - _bd0(G - ks, G * qs)
        )
        inner = np.exp(lc) * np.sqrt(G / (2.0 * np.pi * ks * (G - ks)))
        edge0 = q**G  # k = 0
        edgeG = p**G  # k = G
    degenerate_inner = np.where(p == 0, 0.0, np.where(p == 1, 0.0, inner))
    return np.where(k == 0, edge0, np.where(k == G, edgeG, np.where(interior, degenerate_inner, 0.0)))


# --- expectations -----------------------------------------------------------------------------
_HORNER_MAX_G = 1000  # up to here: a Bernstein polynomial by Horner's rule, O(G) per p
_WINDOW_SD = 9.0  # beyond 9 standard deviations (+ a Poisson margin) terms are < 1e-17 of the sum
_WINDOW_MARGIN = 24.0
_TABLE_MAX_G = 4096  # up to here the window's log C(G, k) comes from a cached lgamma table (abs error < 1e-11)
_COARSE_SD = 8.0  # from this sd on, sum the smooth summand on a grid of step floor(sd/4) (see below)
_CHUNK_ELEMENTS = 2_000_000


def expected_update(G: int, p: ArrayLike) -> FloatArray | float:
    """Exact expected GRPO update E[g] = (1/G) Σ_{k=1}^{G−1} C(G,k) p^k (1−p)^{G−k} √(k(G−k)).

    Twin of :func:`grpo_identity.formulas.expected_update` (Proposition 2), accurate to ~1e-13
    relative for every G up to 10⁶ (tested against 40-digit sums).  The sum is symmetric in
    p ↔ 1−p, so p ≤ ½ is used throughout.  For G ≤ 1000 it is a Bernstein polynomial evaluated
    by Horner's rule in t = p/(1−p) ≤ 1 (all terms positive: no cancellation; the exact
    coefficients C(G,k)√(k(G−k)) are finite up to G = 1000).  For larger G only the k within
    ~9 standard deviations of Gp contribute above double precision; their probabilities come from
    a cached lgamma table of log C(G,k) up to G = 4096 and from Loader's saddle-point form beyond.
    Once that window is wide (sd ≥ 8) the smooth summand is summed on the integer grid of step
    h = ⌊sd/4⌋ and multiplied by h, which by Poisson summation differs from the unit-step sum by
    about exp(−2π²(sd/h)²) < 1e-130 — so the cost per p is O(1).

    >>> round(expected_update(2, 0.5), 12)  # G = 2: E[g] = p(1−p)
    0.25
    """
    G = check_group_size(G)
    pp = check_probability(p)
    flat = np.minimum(np.ravel(pp), 1.0 - np.ravel(pp))  # symmetric in p <-> 1-p
    out = np.zeros_like(flat)
    live = np.flatnonzero(flat > 0)
    if live.size:
        # Unique p values share one evaluation (real data often has few distinct solve rates).
        uniq, inverse = np.unique(flat[live], return_inverse=True)
        f = _expected_update_horner if G <= _HORNER_MAX_G else _expected_update_window
        out[live] = f(G, uniq)[inverse]
    return _out(out.reshape(np.shape(pp)))


@lru_cache(maxsize=64)
def _bernstein_coefficients(G: int) -> FloatArray:
    """a_k = C(G,k)·√(k(G−k)) for k = 1..G−1; at most 2^G·G/2, finite for G ≤ 1000."""
    k = np.arange(1, G, dtype=np.float64)
    return np.array([float(math.comb(G, int(j))) for j in k]) * np.sqrt(k * (G - k))


def _expected_update_horner(G: int, p: FloatArray) -> FloatArray:
    # G·E[g] = (1−p)^G · t · Σ_{k=1}^{G−1} a_k t^{k−1},  t = p/(1−p) ∈ (0, 1] since p ≤ ½.
    # Every term is ≥ 0 (no cancellation) and the sum lies in [a_1, Σa_k] (no overflow); the
    # small and large factors are combined in log space (no underflow).
    a = _bernstein_coefficients(G)
    log_q = np.log1p(-p)
    t = p / (1.0 - p)
    acc = np.zeros_like(p)
    for coef in a[::-1]:  # Horner over k = G−1..1
        acc = acc * t + coef
    return np.exp(np.log(p) - log_q + np.log(acc) + G * log_q) / G


@lru_cache(maxsize=16)
def _log_binomial_table(G: int) -> FloatArray:
    """log C(G, k) for k = 0..G from math.lgamma (each value within ~1e-11 absolute for G ≤ 4096)."""
    lg = np.array([math.lgamma(j + 1.0) for j in range(G + 1)])
    return lg[G] - lg - lg[::-1]


def _expected_update_window(G: int, p: FloatArray) -> FloatArray:
    sd = np.sqrt(G * p * (1 - p))
    half = np.ceil(_WINDOW_SD * sd + _WINDOW_MARGIN)
    lo = np.clip(np.floor(G * p) - half, 1, G - 1)
    hi = np.clip(np.ceil(G * p) + half, 1, G - 1)
    step = np.where(sd >= _COARSE_SD, np.floor(sd / 4.0), 1.0)
    count = (np.floor((hi - lo) / step) + 1).astype(np.int64)
    order = np.argsort(count)  # chunk p values with similar numbers of grid points together
    result = np.empty_like(p)
    start = 0
    while start < order.size:
        L = int(count[order[start]])
        rows = max(1, _CHUNK_ELEMENTS // max(L, 1))
        idx = order[start : start + rows]
        L = int(count[idx].max())
        ks = lo[idx, None] + step[idx, None] * np.arange(L)[None, :]  # (rows, L)
        valid = ks <= hi[idx, None]
        ks = np.where(valid, ks, 1.0)
        if G <= _TABLE_MAX_G:  # log C(G,k) + k log p + (G−k) log(1−p): a few passes instead of Loader's many
            log_p, log_q = np.log(p[idx, None]), np.log1p(-p[idx, None])
            pmf = np.exp(_log_binomial_table(G)[ks.astype(np.int64)] + ks * (log_p - log_q) + G * log_q)
        else:
            pmf = _binomial_pmf(ks, G, np.broadcast_to(p[idx, None], ks.shape))
        terms = np.where(valid, pmf * np.sqrt(ks * (G - ks)), 0.0)
        result[idx] = step[idx] * terms.sum(axis=1) / G
        start += idx.size
    return result


def expected_sigma_sq(G: int, p: ArrayLike) -> FloatArray | float:
    """Expected Dr. GRPO coefficient E[σ²] = p(1−p)(1 − 1/G) (Proposition 2).

    >>> expected_sigma_sq(2, 0.5)
    0.125
    """
    G = check_group_size(G)
    pp = check_probability(p)
    return _out(pp * (1 - pp) * (1 - 1 / G))


def fidelity(G: int, p: ArrayLike) -> FloatArray | float:
    """Fidelity φ(G,p) = E[g]/√(p(1−p)); 0 at p ∈ {0, 1}, its limit there (Corollary 2).

    >>> round(fidelity(8, 0.05), 4)
    0.539
    """
    G = check_group_size(G)
    pp = check_probability(p)
    eg = np.asarray(expected_update(G, pp))
    w = np.sqrt(pp * (1 - pp))
    with np.errstate(divide="ignore", invalid="ignore"):
        return _out(np.where(w > 0, eg / np.where(w > 0, w, 1.0), 0.0))


def attenuation_first_order(G: int, p: ArrayLike) -> FloatArray | float:
    """First-order attenuation law 1 − 1/(8Gp(1−p)) (Corollary 1); −inf at p ∈ {0, 1}.

    >>> attenuation_first_order(8, 0.5)
    0.9375
    """
    G = check_group_size(G)
    pp = check_probability(p)
    with np.errstate(divide="ignore"):
        return _out(1.0 - 1.0 / (8.0 * G * pp * (1 - pp)))


def attenuation_second_order(G: int, p: ArrayLike) -> FloatArray | float:
    """Second-order attenuation law 1 − 1/(8Gv) − (7 − 16v)/(128G²v²), v = p(1−p) (proof T11);
    −inf at p ∈ {0, 1}.

    >>> attenuation_second_order(8, 0.5)
    0.931640625
    """
    G = check_group_size(G)
    pp = check_probability(p)
    v = pp * (1 - pp)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = 1.0 - 1.0 / (8.0 * G * v) - (7.0 - 16.0 * v) / (128.0 * G * G * v * v)
    return _out(np.where(v > 0, out, -np.inf))


def group_size_law(eps: ArrayLike, p: ArrayLike) -> FloatArray | float:
    """Group-size law G* = 1/(8εp(1−p)), from the first-order law (Corollary 2). Not an integer.

    For the exact smallest G use :func:`group_size_exact`.

    >>> group_size_law(0.01, 0.5)
    50.0
    """
    e = check_eps(eps)
    pp = check_probability(p, open_interval=True)
    return _out(1.0 / (8.0 * e * pp * (1 - pp)))


def group_size_exact(eps: float, p: float, *, G_max: int = 10**7) -> int:
    """Smallest group size G ≥ 2 with fidelity φ(G,p) ≥ 1−ε, from the exact sum (Corollary 2 table).

    φ increases with G (tested on a grid), so the answer is found by bracketing and bisection.

    >>> [group_size_exact(e, 0.5) for e in (0.1, 0.05, 0.01)]
    [7, 11, 51]
    """
    e = float(check_eps(eps))
    if e >= 1:
        raise ValueError(f"eps must be in (0, 1), got {eps!r}")
    pf = float(check_probability(p, open_interval=True))
    target = 1.0 - e

    return smallest_group_size(
        lambda g: float(fidelity(g, pf)) >= target, G_max=G_max, what=f"fidelity {target} at p={pf}"
    )


class NoGroupSize(ValueError):
    """No group size up to the bound reaches the target (:func:`smallest_group_size`): a ValueError of its own, so
    that a caller can say which of its options set the target.

    >>> try:
    ...     smallest_group_size(lambda g: False, G_max=8, what="nothing")
    ... except NoGroupSize as exc:
    ...     print(exc)
    no G <= 8 reaches nothing
    """


def smallest_group_size(ok: Callable[[int], bool], *, G_max: int, what: str) -> int:
    """The smallest G ≥ 2 with ``ok(G)``, for a test that stays true once true (fidelity grows
    with G, T14): doubling to bracket it, then bisection.  ``what`` names the target in the error.

    >>> smallest_group_size(lambda g: g * g >= 50, G_max=100, what="g² ≥ 50")
    8
    """
    if ok(2):
        return 2
    lo, hi = 2, 4
    while not ok(hi):
        lo, hi = hi, hi * 2
        if hi > G_max:
            raise NoGroupSize(f"no G <= {G_max} reaches {what}")
    while hi - lo > 1:  # invariant: not ok(lo), ok(hi)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def difficulty_weight(p: ArrayLike) -> FloatArray | float:
    """Difficulty weight w(p) = 1/√(p(1−p)) = 1/σ(p) (PAPER claim 7); inf at p ∈ {0, 1}.

    >>> difficulty_weight(0.5)
    2.0
    """
    pp = check_probability(p)
    with np.errstate(divide="ignore"):
        return _out(1.0 / np.sqrt(pp * (1 - pp)))


def arcsine_objective(p: ArrayLike) -> FloatArray | float:
    """Per-prompt objective that GRPO ascends, 2·arcsin√p (PAPER claim 7).

    >>> round(arcsine_objective(1.0), 12) == round(math.pi, 12)
    True
    """
    pp = check_probability(p)
    return _out(2.0 * np.arcsin(np.sqrt(pp)))


def expected_score_gap(p: ArrayLike, grad_p: ArrayLike = 1.0) -> FloatArray | float:
    """Expected score gap given k, any policy: E[s̄₊ − s̄₋ | k] = ∇p/(p(1−p)) (theorem G7).

    Times the dial's coefficient it is the expected update at fixed k,
    E[g | k] = ``dial.coefficient(k, G, dial) * expected_score_gap(p, grad_p)``.

    >>> expected_score_gap(0.5)
    4.0
    """
    pp = check_probability(p)
    with np.errstate(divide="ignore"):
        return _out(np.asarray(grad_p, dtype=float) / (pp * (1 - pp)))


def expected_update_given_k(
    k: ArrayLike, G: int, p: ArrayLike, grad_p: ArrayLike = 1.0, c: ArrayLike | None = None
) -> FloatArray | float:
    """Expected update given k, any policy: E[g | k] = c(k, G)·∇p/(p(1−p)), c GRPO's σ unless
    given (``dial.coefficient(k, G, dial)`` for another dial); theorem G7.

    >>> expected_update_given_k(2, 4, 0.5)
    2.0
    """
    coef = np.asarray(sigma(k, G) if c is None else c, dtype=float)
    return _out(coef * np.asarray(expected_score_gap(p, grad_p), dtype=float))


def update_covariance_given_k(
    k: ArrayLike, G: int, cov_plus: ArrayLike, cov_minus: ArrayLike, c: ArrayLike | None = None
) -> FloatArray | float:
    """Covariance of the update given k (one entry, or elementwise for arrays), any policy:
    Cov(g | k) = c²(Σ₊/k + Σ₋/(G−k)), c GRPO's σ unless given (theorem G8); nan at k ∈ {0, G}.

    >>> round(update_covariance_given_k(1, 4, 2.0, 2.0), 12)
    0.5
    """
    kk = np.asarray(k, dtype=float)
    coef = np.asarray(sigma(kk, G) if c is None else c, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        live = (kk > 0) & (kk < G)
        out = np.where(
            live,
            coef**2 * (np.asarray(cov_plus, dtype=float) / kk + np.asarray(cov_minus, dtype=float) / (G - kk)),
            np.nan,
        )
    return _out(out)


# --- any rewards (theorem G9) -----------------------------------------------------------------
def _rewards(rewards: npt.ArrayLike) -> FloatArray:
    """Rewards as a float64 array, one group per row of the last axis; reject non-finite values."""
    R = np.asarray(rewards, dtype=np.float64)
    if R.ndim == 0 or R.shape[-1] == 0:
        raise ValueError(f"rewards must hold at least one group of at least one reward, got shape {R.shape}")
    if not np.isfinite(R).all():
        raise ValueError(f"rewards must be finite, got {R[~np.isfinite(R)].flat[0]!r}")
    return R


def reward_std(rewards: npt.ArrayLike) -> FloatArray | float:
    """Group standard deviation of any rewards, σ_R = √((1/G) Σᵢ (Rᵢ − R̄)²) (ddof 0), over the
    last axis; exactly 0 when every reward of the group is equal (theorem G9).

    Twin of :func:`grpo_identity.formulas.reward_std`; :func:`sigma` for binary rewards.

    >>> reward_std([1, 0, 0, 0]) == sigma(1, 4)
    True
    >>> reward_std([[0.0, 0.5, 1.0], [0.1, 0.1, 0.1]]).round(6)
    array([0.408248, 0.      ])
    """
    R = _rewards(rewards)
    silent = R.max(-1) == R.min(-1)  # (…,): one distinct value, σ_R = 0 exactly
    return _out(np.where(silent, 0.0, R.std(axis=-1)))


def score_slope(rewards: npt.ArrayLike, scores: npt.ArrayLike) -> FloatArray | float:
    """Least-squares slope of the scores on the rewards in each group,
    β̂ = Σᵢ (Rᵢ − R̄)(sᵢ − s̄) / Σᵢ (Rᵢ − R̄)², and 0 for a group whose rewards are all equal
    (σ_R = 0: its update is 0 too).  Theorem G9: (1/G) Σᵢ (Rᵢ − R̄) sᵢ = σ_R²·β̂, so GRPO's update is
    ``reward_std(R) * score_slope(R, s)``; β̂ = s̄₊ − s̄₋ for binary rewards.

    Twin of :func:`grpo_identity.formulas.score_slope`.  ``rewards`` has shape (…, G); ``scores``
    the same leading shape and any trailing shape (a score of any dimension); the result has the
    leading shape followed by the trailing one.

    >>> round(score_slope([1, 0, 0], [3.0, 1.0, 2.0]), 12)  # binary: s̄₊ − s̄₋
    1.5
    >>> score_slope([[0.0, 0.5, 1.0]], [[[1.0, 0.0], [2.0, 0.0], [3.0, 1.0]]])  # (1, 3) rewards, (1, 3, 2) scores
    array([[2., 1.]])
    """
    R = _rewards(rewards)
    S = np.asarray(scores, dtype=np.float64)
    if S.shape[: R.ndim] != R.shape:
        raise ValueError(f"scores of shape {S.shape} do not start with the rewards' shape {R.shape}")
    tail = (1,) * (S.ndim - R.ndim)
    centred = (R - R.mean(-1, keepdims=True)).reshape(R.shape + tail)  # (…, G, 1…)
    sxx = (centred**2).sum(axis=R.ndim - 1)  # (…, 1…)
    sxy = (centred * S).sum(axis=R.ndim - 1)  # (…, trailing): Σ (Rᵢ − R̄) sᵢ = Σ (Rᵢ − R̄)(sᵢ − s̄)
    live = (R.max(-1) != R.min(-1)).reshape(R.shape[:-1] + tail)
    return _out(np.where(live, sxy / np.where(live, sxx, 1.0), 0.0))


# --- off-policy steps: importance ratios, clipping, KL (theorem G10) ----------------------------
def _finite(x: npt.ArrayLike, name: str, *, positive: bool = False) -> FloatArray:
    """``x`` as a float64 array; reject non-finite values (and values <= 0 when ``positive``)."""
    arr = np.asarray(x, dtype=np.float64)
    bad = ~np.isfinite(arr) | ((arr <= 0) if positive else False)
    if np.any(bad):
        first = arr[bad].flat[0] if arr.ndim else arr.item()
        raise ValueError(f"{name} must be {'a positive' if positive else 'a finite'} number, got {first!r}")
    return arr


def clipped_surrogate(
    ratio: ArrayLike, advantage: ArrayLike, eps_low: ArrayLike, eps_high: ArrayLike
) -> FloatArray | float:
    """PPO's clipped surrogate of each token, min(ρÂ, clip(ρ, 1 − ε_low, 1 + ε_high)·Â) (GRPO, DAPO),
    ρ = π_θ/π_old; the arguments broadcast.

    Twin of :func:`grpo_identity.formulas.clipped_surrogate` (theorem G10).

    >>> clipped_surrogate(2.0, 1.0, 0.2, 0.28), clipped_surrogate(2.0, -1.0, 0.2, 0.28)
    (1.28, -2.0)
    """
    r, A = _finite(ratio, "ratio"), _finite(advantage, "advantage")
    lo, hi = 1.0 - _finite(eps_low, "eps_low", positive=True), 1.0 + _finite(eps_high, "eps_high", positive=True)
    return _out(np.minimum(r * A, np.clip(r, lo, hi) * A))


def token_weight(ratio: ArrayLike, advantage: ArrayLike, eps_low: ArrayLike, eps_high: ArrayLike) -> FloatArray | float:
    """Weight w of each token's score in the gradient of the clipped surrogate, ∇ = w·Â·∇log π_θ:
    ρ, and 0 where the token is clipped (Â > 0 and ρ > 1 + ε_high, or Â < 0 and ρ < 1 − ε_low).

    Twin of :func:`grpo_identity.formulas.token_weight` (theorem G10); at the two kinks the
    unclipped side's ρ, as the definition.

    >>> token_weight([0.5, 1.0, 1.5], 1.0, 0.2, 0.28).tolist(), token_weight([0.5, 1.0, 1.5], -1.0, 0.2, 0.28).tolist()
    ([0.5, 1.0, 0.0], [0.0, 1.0, 1.5])
    """
    r, A = _finite(ratio, "ratio"), _finite(advantage, "advantage")
    lo, hi = 1.0 - _finite(eps_low, "eps_low", positive=True), 1.0 + _finite(eps_high, "eps_high", positive=True)
    clipped = ((A > 0) & (r > hi)) | ((A < 0) & (r < lo))
    return _out(np.where(clipped, 0.0, r).astype(np.float64))


def sequence_ratio(log_ratio: npt.ArrayLike) -> FloatArray | float:
    """GSPO's sequence-level importance ratio of each answer, s = exp((1/L) Σ_t x_t) with
    x_t = log π_θ(y_t) − log π_old(y_t) over the last axis (the answer's L tokens).

    Twin of :func:`grpo_identity.formulas.sequence_ratio` (theorem G10): every token of the answer
    gets the same weight s in the gradient.

    >>> round(sequence_ratio(np.log([2.0, 8.0])), 12)
    4.0
    """
    x = _finite(log_ratio, "log_ratio")
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ValueError(f"log_ratio must hold at least one token per answer, got shape {x.shape}")
    return _out(np.exp(x.mean(axis=-1)))


def kl_gradient_weight(ref_ratio: ArrayLike, beta: ArrayLike) -> FloatArray | float:
    """Weight of each token's score in the gradient of −β·KL₃ (k3 estimator, ρ_ref = π_ref/π_θ):
    β(ρ_ref − 1), whatever the advantage; 0 where π_θ = π_ref.

    Twin of :func:`grpo_identity.formulas.kl_gradient_weight` (theorem G10).

    >>> kl_gradient_weight(1.5, 0.04), kl_gradient_weight(1.0, 0.04)
    (0.02, 0.0)
    """
    rr = _finite(ref_ratio, "ref_ratio", positive=True)
    return _out(_finite(beta, "beta") * (rr - 1.0))


def truncated_weight(rollout_ratio: ArrayLike, cap: ArrayLike) -> FloatArray | float:
    """Truncated importance sampling: min(r, C) per token (or per answer), r = π_old/μ.

    Twin of :func:`grpo_identity.formulas.truncated_weight` (theorem G11).

    >>> truncated_weight([0.5, 1.0, 3.0], 2.0).tolist()
    [0.5, 1.0, 2.0]
    """
    r = _finite(rollout_ratio, "rollout_ratio", positive=True)
    return _out(np.minimum(r, _finite(cap, "cap", positive=True)))


def masked_weight(rollout_ratio: ArrayLike, mask_low: ArrayLike, mask_high: ArrayLike) -> FloatArray | float:
    """Masked importance sampling: r where α ≤ r ≤ β, else 0 (α = 0: one-sided; α > 0: IcePop's two-sided mask).

    Twin of :func:`grpo_identity.formulas.masked_weight` (theorem G11).

    >>> masked_weight([0.1, 1.0, 3.0], 0.5, 2.0).tolist()
    [0.0, 1.0, 0.0]
    """
    r = _finite(rollout_ratio, "rollout_ratio", positive=True)
    low, high = _finite(mask_low, "mask_low"), _finite(mask_high, "mask_high", positive=True)
    return _out(np.where((r >= low) & (r <= high), r, 0.0))


def sequence_product_ratio(log_ratio: npt.ArrayLike) -> FloatArray | float:
    """Each answer's product of its token ratios, exp(Σ_t x_t) over the last axis: the geometric mean
    (:func:`sequence_ratio`) to the power L.

    Twin of :func:`grpo_identity.formulas.sequence_product_ratio` (theorem G11).

    >>> round(sequence_product_ratio(np.log([2.0, 8.0])), 12)
    16.0
    """
    x = _finite(log_ratio, "log_ratio")
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ValueError(f"log_ratio must hold at least one token per answer, got shape {x.shape}")
    return _out(np.exp(x.sum(axis=-1)))


# --- summaries for the CLI, the report and the notebooks ---------------------------------------
#: the paper's Corollary 2 table: solve rates and tolerances
PAPER_TABLE_P: tuple[float, ...] = tuple(paper.GROUP_SIZE_TABLE)
PAPER_TABLE_EPS: tuple[float, ...] = paper.GROUP_SIZE_EPS


#: most rows of :func:`summary`'s per-k σ table (every k up to G = SIGMA_ROWS - 1)
SIGMA_ROWS = 65


class SigmaRow(TypedDict):
    k: int
    sigma: float


class GroupSizeRow(TypedDict):
    eps: float
    G_exact: int | None
    G_law: float | None


class GroupSizeTableRow(TypedDict):
    p: float
    eps: float
    G_exact: int
    G_law: float


class Summary(TypedDict):
    G: int
    p: float
    sigma_by_k: list[SigmaRow]
    sigma_by_k_all: bool
    silent_rate: float
    expected_update: float
    expected_sigma_sq: float
    fidelity: float
    attenuation_first_order: float | None
    difficulty_weight: float | None
    arcsine_objective: float
    group_size: list[GroupSizeRow]


def sigma_table_ks(G: int, max_rows: int = SIGMA_ROWS) -> npt.NDArray[np.int64]:
    """The numbers correct k of a bounded σ table: every k in 0..G when G + 1 <= ``max_rows``,
    else at most ``max_rows`` values spread evenly over 0..G, with 0, 1, G−1 and G among them
    (σ(k) = √(k(G−k))/G gives any other k).

    >>> sigma_table_ks(4).tolist(), len(sigma_table_ks(10**6)), sigma_table_ks(10**6)[:3].tolist()
    ([0, 1, 2, 3, 4], 65, [0, 1, 16129])
    """
    G = check_group_size(G)
    if G + 1 <= max_rows:
        return np.arange(G + 1, dtype=np.int64)
    spread = np.round(np.linspace(0, G, max_rows - 2)).astype(np.int64)
    return np.unique(np.concatenate([np.array([0, 1, G - 1, G], dtype=np.int64), spread]))


def summary(G: int, p: float, eps_values: tuple[float, ...] = PAPER_TABLE_EPS) -> Summary:
    """Every closed form at one (G, p): σ for the k of :func:`sigma_table_ks` (every k when
    ``sigma_by_k_all``), silent rate, E[g], fidelity, attenuation, E[σ²], w(p), G* and the exact
    smallest G for each ε.  Memory and time grow with the table, not with G.

    >>> s = summary(8, 0.5)
    >>> len(s["sigma_by_k"]), s["sigma_by_k_all"], round(s["fidelity"], 4)
    (9, True, 0.9278)
    """
    G = check_group_size(G)
    pf = float(check_probability(p))
    ks = sigma_table_ks(G)
    interior = 0 < pf < 1
    return {
        "G": G,
        "p": pf,
        "sigma_by_k": [{"k": int(k), "sigma": float(s)} for k, s in zip(ks, np.asarray(sigma(ks, G)))],
        "sigma_by_k_all": len(ks) == G + 1,
        "silent_rate": float(silent_rate(G, pf)),
        "expected_update": float(expected_update(G, pf)),
        "expected_sigma_sq": float(expected_sigma_sq(G, pf)),
        "fidelity": float(fidelity(G, pf)),
        "attenuation_first_order": float(attenuation_first_order(G, pf)) if interior else None,
        "difficulty_weight": float(difficulty_weight(pf)) if interior else None,
        "arcsine_objective": float(arcsine_objective(pf)),
        "group_size": [
            {
                "eps": e,
                "G_exact": group_size_exact(e, pf) if interior else None,
                "G_law": float(group_size_law(e, pf)) if interior else None,
            }
            for e in eps_values
        ],
    }


def group_size_table(
    p_values: tuple[float, ...] = PAPER_TABLE_P, eps_values: tuple[float, ...] = PAPER_TABLE_EPS
) -> list[GroupSizeTableRow]:
    """Rows {p, eps, G_exact, G_law} of the group-size table (Corollary 2); G_law unrounded."""
    return [
        {"p": p, "eps": e, "G_exact": group_size_exact(e, p), "G_law": float(group_size_law(e, p))}
        for p in p_values
        for e in eps_values
    ]
