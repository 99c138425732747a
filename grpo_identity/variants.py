"""Variants by name: advantages users run that are no point of the dial, with their sources.

A :class:`Variant` is one published advantage estimator that the dial (:mod:`grpo_identity.dial`)
does not hold: its one-line citation, a reference computation written from its paper and a reference
implementation (each form a framework ships, where they differ), and where it stands relative to the
identity g = c(k, G)·(s̄₊ − s̄₋):

- a **per-group coefficient** (``coefficient``): the identity holds group by group with another
  c(k, G) for binary rewards (MaxRL's 1 − k/G);
- a **departure by design** (``departs``): the property of the identity it gives up (groups coupled
  through a batch-wide number, silent groups moved by a batch whitening, an update that is not
  zero-sum), named so that an audit says what the target computes instead of "no dial fits".

The references work on rewards laid out group by group, shape (n_groups, G), float64, with each
answer's response length (tokens; ones when lengths are not part of the computation): several
variants weigh by tokens.  Numpy only.

>>> import numpy as np
>>> R = np.array([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
>>> VARIANTS["maxrl"].advantages(R).round(4)
array([[ 3., -1., -1., -1.],
       [ 0.,  0.,  0.,  0.]])
>>> VARIANTS["maxrl"].coefficient(1, 4)
0.75
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

from grpo_identity import dial as D

__all__ = ["Variant", "VARIANTS", "DEPARTURES", "variant", "WithEps", "WHITEN_EPS", "AREAL_EPS"]

#: ε under the square root of verl's ``masked_whiten`` (OpenRLHF clamps the variance at it instead: the same
#: for any batch with a spread)
WHITEN_EPS = 1e-8
#: ε AReaL adds to a std (``Normalization``); TRL's and verl's are their presets' (``dial.TRL.eps``, ``dial.VERL.eps``)
AREAL_EPS = 1e-5

Reference = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class WithEps:
    """A reference computation with an ε of its own (what its implementation adds to a std, or puts under a square
    root): ``f(R, L)`` computes with it, ``f(R, L, eps)`` with another, as an implementation that chose another."""

    fn: Callable[[np.ndarray, np.ndarray, float], np.ndarray]
    eps: float

    def __call__(self, R: np.ndarray, L: np.ndarray, eps: float | None = None) -> np.ndarray:
        return self.fn(R, L, self.eps if eps is None else eps)


#: what a variant gives up by design, and the audit's properties and findings that show it
#: (:mod:`grpo_identity.checks.measure.properties`, the probes, the gradient level)
DEPARTURES: Mapping[str, tuple[str, ...]] = {
    "groups_coupled": ("groups_independent", "probe_remainder", "ragged_groups", "layout_independent"),
    "not_zero_sum": ("zero_sum_per_group", "two_valued_per_group", "identity_in_vector_form", "identity_G1"),
    "moves_silent_groups": (
        "silent_groups_exactly_zero",
        "silent_nonbinary_groups_zero",
        "silent_groups_zero_gradient",
    ),
    # the drivers lay response lengths out by row position: a length-weighted variant changes when rows move
    "length_weighted": ("groups_independent", "permutation_equivariant", "probe_remainder", "layout_independent"),
}


@dataclass(frozen=True)
class Variant:
    """A named advantage estimator beyond the dial; see the module docstring."""

    name: str
    citation: str
    """Paper and reference implementation, one line."""
    stands: str
    """Where it stands relative to the identity, one line."""
    forms: Mapping[str, Reference] = field(repr=False)
    """Reference computations by the implementation they follow (the first is the default):
    ``f(R, L) -> A`` on (n_groups, G) rewards and response lengths."""
    departs: tuple[str, ...] = ()
    """What it gives up by design: keys of :data:`DEPARTURES`."""
    form_departs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """What one form gives up besides (verl's token-weighted whitening …)."""
    coefficient: Callable[[int, int], float] | None = field(default=None, repr=False)
    """c(k, G) for binary rewards with k of G correct, when the identity holds group by group."""
    coefficient_text: str = ""
    """That c(k, G) in words (``1 − k/G``)."""
    uses_lengths: bool = False
    """Whether response lengths enter the advantages."""
    binary_only: bool = False
    """Defined for binary (pass/fail) rewards only: what it does with others is outside its definition."""
    readings: Mapping[str, str] = field(default_factory=dict)
    """Forms that are another documented reading of the variant (form → where it is documented and how it
    differs from the first form): recognised as the variant, and said as a deviation that names the reading."""

    def advantages(
        self, R: np.ndarray, L: np.ndarray | None = None, form: str | None = None, eps: float | None = None
    ) -> np.ndarray:
        """The variant's advantages of (n_groups, G) rewards ``R`` with response lengths ``L``
        (default: all equal) in the named ``form`` (default: the first), with the form's own ε or ``eps``
        (a form that has one: :meth:`eps_of`)."""
        R = np.asarray(R, dtype=np.float64)
        L = np.ones_like(R) if L is None else np.asarray(L, dtype=np.float64).reshape(R.shape)
        fn = self.forms[form or next(iter(self.forms))]
        if eps is None:
            return fn(R, L)
        if not isinstance(fn, WithEps):
            raise ValueError(f"{self.name}'s form {form!r} has no ε")
        return fn(R, L, eps)

    def eps_of(self, form: str | None = None) -> float | None:
        """The ε the ``form`` (default: the first) adds, where it has one; None otherwise."""
        fn = self.forms[form or next(iter(self.forms))]
        return fn.eps if isinstance(fn, WithEps) else None

    def departures(self, form: str | None = None) -> tuple[str, ...]:
        """What the variant (in ``form``) gives up by design: keys of :data:`DEPARTURES`."""
        return self.departs + self.form_departs.get(form or "", ())

    def departs_from(self, prop: str, form: str | None = None) -> bool:
        """Whether the audit's property or finding ``prop`` is one this variant (in ``form``) gives up by design."""
        return any(prop in DEPARTURES[d] for d in self.departures(form))


# --- reference computations ----------------------------------------------------------------------
def _centred(R: np.ndarray) -> np.ndarray:
    """Rᵢ − group mean, exactly 0 on silent groups: Dr. GRPO's advantages (the dial's)."""
    return np.asarray(D.advantages(R, dial=D.DR_GRPO))


def _group_std(R: np.ndarray, ddof: int) -> np.ndarray:
    return R.std(axis=1, ddof=ddof, keepdims=True)


def _whiten(A: np.ndarray, L: np.ndarray, ddof: int, eps: float = WHITEN_EPS) -> np.ndarray:
    """Batch whitening over tokens (every token of an answer carries its advantage): token-weighted
    mean, variance over the batch's tokens with ``ddof`` (verl's ``masked_whiten``: 1, OpenRLHF: 0),
    ``eps`` under the root."""
    n = L.sum()
    mean = (L * A).sum() / n
    var = (L * (A - mean) ** 2).sum() / (n - ddof)
    return (A - mean) / np.sqrt(var + eps)


def _maxrl(R: np.ndarray, L: np.ndarray) -> np.ndarray:
    mu = R.mean(axis=1, keepdims=True)
    return np.where(mu > 0, _centred(R) / np.where(mu > 0, mu, 1.0), 0.0)


def _opo(R: np.ndarray, L: np.ndarray) -> np.ndarray:
    baseline = (L * R).sum(axis=1, keepdims=True) / L.sum(axis=1, keepdims=True)
    return R - baseline


def _gpg_verl(R: np.ndarray, L: np.ndarray) -> np.ndarray:
    alpha = R.size / max(1, int(np.count_nonzero(R)))
    return alpha * _centred(R)


def _gpg_paper(R: np.ndarray, L: np.ndarray) -> np.ndarray:
    silent = R.max(axis=1) == R.min(axis=1)
    alpha = R.shape[0] / max(1, int((~silent).sum()))  # B / (B − M): one over the share of answers in live groups
    return alpha * _centred(R)


def _pkpo(K: int) -> Reference:
    """s^(loo−1) of PKPO (eq. 33) for binary rewards: a correct answer gets C(G − k, K − 1)/C(G, K), an
    incorrect one 0; a group of rewards that are not 0/1, or G < K, gives NaN (outside the definition)."""

    def pass_at_k(R: np.ndarray, L: np.ndarray) -> np.ndarray:
        G = R.shape[1]
        if G < K:
            return np.full_like(R, np.nan)
        binary = np.all((R == 0) | (R == 1), axis=1, keepdims=True)
        k = np.where(binary, R, 0).sum(axis=1, keepdims=True).astype(int)
        lead = np.vectorize(lambda c: math.comb(G - c, K - 1) / math.comb(G, K))(k)
        return np.where(binary, np.where(R == 1, lead, 0.0), np.nan)

    return pass_at_k


def _trl_normalize_then_sum(R: np.ndarray, L: np.ndarray, eps: float) -> np.ndarray:
    """TRL's ``normalize_then_sum`` of one reward: GRPO's advantages (ε added to the group std), then the batch's
    mean and std (ddof 1) + the same ε."""
    grpo = np.asarray(D.advantages(R, dial=D.TRL.replace(eps=eps)))
    return (grpo - grpo.mean()) / (grpo.std(ddof=1) + eps)


def _lite_ppo_raw(R: np.ndarray, L: np.ndarray, eps: float) -> np.ndarray:
    """TRL's ``scale_rewards="batch"``: the group mean, over the std (ddof 1) of the batch's raw rewards + ε."""
    return np.asarray(D.advantages(R, dial=D.TRL.replace(scale="batch_std", eps=eps)))


def _lite_ppo_centred(R: np.ndarray, L: np.ndarray, eps: float) -> np.ndarray:
    centred = _centred(R)
    return centred / (np.sqrt((centred**2).sum() / (R.size - 1)) + eps)


def _token_grpo(R: np.ndarray, L: np.ndarray, eps: float) -> np.ndarray:
    """GRPO over tokens: the token-weighted group mean and the token-weighted group std (Bessel's over the
    group's tokens), + ε."""
    n = L.sum(axis=1, keepdims=True)
    mean = (L * R).sum(axis=1, keepdims=True) / n
    std = np.sqrt((L * (R - mean) ** 2).sum(axis=1, keepdims=True) / (n - 1))
    silent = R.max(axis=1, keepdims=True) == R.min(axis=1, keepdims=True)
    return np.where(silent, 0.0, (R - mean) / (std + eps))


def _passk(ddof: int | None) -> Callable[[np.ndarray, np.ndarray, float], np.ndarray]:
    """The best answer's lead over the second, over the group std (``ddof``; None: no std) + ε, the others 0."""

    def best_only(R: np.ndarray, L: np.ndarray, eps: float) -> np.ndarray:
        A = np.zeros_like(R)
        top = np.argsort(-R, axis=1, kind="stable")
        rows = np.arange(R.shape[0])
        gap = R[rows, top[:, 0]] - R[rows, top[:, 1]]
        A[rows, top[:, 0]] = gap if ddof is None else gap / (_group_std(R, ddof)[:, 0] + eps)
        return A

    return best_only


def _rfpp_baseline(ddof: int) -> WithEps:
    return WithEps(lambda R, L, eps: _whiten(_centred(R), L, ddof, eps), WHITEN_EPS)


def _gdpo_one_reward(R: np.ndarray, L: np.ndarray, eps: float, ddof: int = 1) -> np.ndarray:
    """verl's ``gdpo`` of one reward: GRPO's advantages (ε added to the group std, torch's ddof 1, or numpy's 0),
    whitened over tokens."""
    return _whiten(np.asarray(D.advantages(R, dial=D.VERL.replace(eps=eps, ddof=ddof))), L, 1)


# --- the variants --------------------------------------------------------------------------------
MAXRL = Variant(
    "maxrl",
    "MaxRL, Tajwar, Zeng et al. 2026 (Maximum Likelihood Reinforcement Learning), Alg. 1: Âᵢ = (Rᵢ − μ̂)/μ̂, "
    "0 when μ̂ = 0; defined for binary rewards",
    "the identity holds group by group with c = σ²/μ = 1 − k/G (binary rewards): the update shrinks with "
    "the solve rate instead of peaking at k = G/2",
    {"paper": _maxrl},
    coefficient=lambda k, G: 1.0 - k / G,
    coefficient_text="σ²/μ = 1 − k/G",
    binary_only=True,
)
OPO = Variant(
    "opo",
    "OPO, Hao et al. 2025 (arXiv 2505.23585), verl adv_estimator=opo: baseline Σ Lᵢ Rᵢ / Σ Lᵢ",
    "zero-sum with token weights (Σ Lᵢ Âᵢ = 0), not per answer: the identity holds with length-weighted "
    "means, c = σ² (Dr. GRPO) when every answer has the same length",
    {"verl": _opo},
    departs=("not_zero_sum", "length_weighted"),
    coefficient=lambda k, G: (k / G) * (1 - k / G),
    coefficient_text="σ² at equal lengths",
    uses_lengths=True,
)
GPG = Variant(
    "gpg",
    "GPG, Chu et al. 2025 (arXiv 2504.02546): α(Rᵢ − μ), α = B/(B − M), M the answers of silent groups "
    "(official code); verl adv_estimator=gpg counts α = B / #(nonzero rewards) instead",
    "Dr. GRPO times one batch-wide α: c = α·σ² in every group, α set by the whole batch",
    {"verl": _gpg_verl, "paper": _gpg_paper},
    departs=("groups_coupled",),
)
GRPO_PASSK = Variant(
    "grpo_passk",
    "pass@k advantage of Tang et al. 2025 (arXiv 2503.19595), verl adv_estimator=grpo_passk: "
    "the best answer gets (r_max − r_second)/(std + ε), the others 0",
    "not zero-sum: only a group with one best answer moves, by Â·s_best alone (for binary rewards only k = 1)",
    {
        "verl": WithEps(_passk(1), D.VERL.eps),
        "ddof 0": WithEps(_passk(0), D.VERL.eps),
        "verl, norm_adv_by_std_in_grpo=false": lambda R, L: _passk(None)(R, L, 0.0),
    },
    departs=("not_zero_sum",),
)
RFPP_BASELINE = Variant(
    "reinforce_plus_plus_baseline",
    "REINFORCE++-baseline, Hu et al. 2025 (arXiv 2501.03262): Rᵢ − μ, then the batch whitened over tokens "
    "(verl reinforce_plus_plus_baseline, OpenRLHF reinforce_baseline)",
    "Dr. GRPO's centred rewards, then one batch-wide shift and scale: c = σ²/s_batch per group, and the "
    "token-weighted shift moves silent groups when answers differ in length",
    {"verl": _rfpp_baseline(1), "OpenRLHF": _rfpp_baseline(0)},
    departs=("groups_coupled", "moves_silent_groups", "not_zero_sum", "length_weighted"),
    uses_lengths=True,
)
GDPO = Variant(
    "gdpo",
    "GDPO, Liu et al. 2026 (arXiv 2601.05242): GRPO per reward component, weighted sum, batch-normalised "
    "(verl adv_estimator=gdpo: whitened over tokens; TRL multi_objective_aggregation=normalize_then_sum: "
    "over answers)",
    "one reward: GRPO's advantages divided by one batch-wide std (c = c_GRPO/s_batch per group); verl's "
    "token-weighted shift also moves silent groups when answers differ in length",
    {
        "verl": WithEps(_gdpo_one_reward, D.VERL.eps),
        "TRL normalize_then_sum": WithEps(_trl_normalize_then_sum, D.TRL.eps),
        "group std ddof 0": WithEps(lambda R, L, eps: _gdpo_one_reward(R, L, eps, ddof=0), D.VERL.eps),
    },
    departs=("groups_coupled",),
    form_departs={
        "verl": ("moves_silent_groups", "not_zero_sum", "length_weighted"),
        "group std ddof 0": ("moves_silent_groups", "not_zero_sum", "length_weighted"),
    },
    uses_lengths=True,
)

PKPO = Variant(
    "pkpo",
    "PKPO, Walder & Karkhanis 2025 (arXiv 2505.15201), eq. 33 (s^(loo−1), binary rewards): a correct answer "
    "gets C(G − k, K − 1)/C(G, K), an incorrect one 0; K the pass@K target",
    "not zero-sum by design (an unbiased ∇pass@K): (1/G)Σ Âᵢsᵢ = c·(s̄₊ − s̄₋) + Ā·s̄ with "
    "c = (k(G − k)/G²)·Â₊, Ā = (k/G)·Â₊",
    {f"K={K}": _pkpo(K) for K in (2, 3, 4)},  # each defined on two probed group sizes at least (G ≥ K)
    departs=("not_zero_sum",),
    binary_only=True,
)
LITE_PPO = Variant(
    "lite_ppo",
    "LitePPO, Liu et al. 2025 (arXiv 2508.08221): group mean, batch std; AReaL reward_norm group/batch reads "
    "the batch std as the pooled std of the group-centred rewards (TRL scale_rewards=batch, ROLL: of the raw "
    "rewards, another reading)",
    "Dr. GRPO divided by one batch-wide std: c = σ²/s_batch in every group",
    {"AReaL": WithEps(_lite_ppo_centred, AREAL_EPS), "TRL scale_rewards=batch": WithEps(_lite_ppo_raw, D.TRL.eps)},
    departs=("groups_coupled",),
    readings={
        "TRL scale_rewards=batch": "TRL's GRPOConfig.scale_rewards='batch' (its docs cite LitePPO) takes the std of "
        "the batch's raw rewards, not the pooled std of the group-centred rewards (AReaL's reward_norm, the paper's "
        "'batch-level std' of the group-normalised rewards): the two differ whenever group means differ",
    },
)
TOKEN_GRPO = Variant(
    "token_grpo",
    "group normalisation over tokens, AReaL adv_norm mean_level=group std_level=group (its docs' GRPO series): "
    "the token-weighted group mean (OPO's baseline) over the token-weighted group std",
    "zero-sum with token weights (Σ Lᵢ Âᵢ = 0), not per answer; GRPO with ddof 1 over tokens when every "
    "answer has the same length",
    {"AReaL": WithEps(_token_grpo, AREAL_EPS)},
    departs=("not_zero_sum", "length_weighted"),
    uses_lengths=True,
)

#: every variant, by name
VARIANTS: Mapping[str, Variant] = {
    v.name: v for v in (MAXRL, OPO, GPG, GRPO_PASSK, RFPP_BASELINE, GDPO, PKPO, LITE_PPO, TOKEN_GRPO)
}


def variant(name: str) -> Variant:
    """The variant called ``name`` (case-insensitive; '-', ' ' and '+' read as in the names)."""
    key = name.strip().lower().replace("-", "_").replace(" ", "_").replace("++", "_plus_plus")
    if key not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; choose from {', '.join(VARIANTS)}")
    return VARIANTS[key]
