"""``grpo_identity.proofs``: SymPy proofs of every claim of the paper, and of what it leaves out.

Each theorem is a :class:`Theorem` record (name, title, statement in words, paper reference,
assumptions, LaTeX of the main equation) whose ``prove()`` returns a :class:`ProofResult`
(``proved`` / ``failed``, the first nonzero residual, seconds, details).  Statements are built
from :mod:`grpo_identity.formulas`, never retyped; ``prove(perturb={...})`` replaces formulas
to show that a wrong statement fails.

- T1–T7 (:mod:`.identity`): σ, the advantage values, the identity, baselines, Dr. GRPO, the
  three modes, RLOO.
- T8–T10, T12, T13 (:mod:`.expectation`): silent rate, E[σ²], E[g], group-size law, w(p) and
  the large-G limits.
- T14 (:mod:`.table`): Corollary 2's exact group-size table, certified by interval arithmetic.
- T11 (:mod:`.attenuation`): the attenuation law to second (and third) order, derived
  symbolically; its remainder bound and the paper's fidelities certified by interval arithmetic
  (mpmath.iv).
- G1–G6 (:mod:`.beyond`): weights, ddof 1, ε, batch std, {a, b} rewards, clip and KL.
- G7, G8 (:mod:`.policy`): the identity in expectation for any policy, E[g | k] = c(k, G)·∇p/(p(1−p)),
  and its noise Cov(g | k) = c²(Σ₊/k + Σ₋/(G−k)).
- G9 (:mod:`.rewards`): the identity for any rewards, (1/G) Σ (Rᵢ − R̄) sᵢ = σ_R²·β̂ (β̂ the
  least-squares slope of the scores on the rewards), symbolic in G; RLOO and DAPO as corollaries.
- G10 (:mod:`.offpolicy`): every step after the first: the clipped surrogate's gradient is w·Â·∇log π
  per token (w = ρ, 0 where clipped), so g = c·(s̃̄₊ − s̃̄₋) with importance-weighted, clip-masked
  scores; GSPO's sequence ratio weighs every token of an answer alike; the k3 KL term adds
  β(π_ref/π − 1)·∇log π per token, whatever Â.
- G11 (:mod:`.rollout`): three policies: a detached rollout-correction weight ω (truncated, masked, sequence
  product or geometric mean of π_old/μ) keeps g = c·(s̃̄₊ − s̃̄₋) with ω-weighted scores; every estimator is 1 at
  μ = π_old; the product is the geometric mean to the power L; a weight left in the graph doubles the gradient.

Imports SymPy (and mpmath); command-line use: ``grpo-identity prove [-k SUBSTRING] [--json]``.

>>> [r.status for r in prove_all("T2")]
['proved']
"""

from __future__ import annotations

from grpo_identity.proofs.attenuation import T11, fidelity_series, group_size_second_order, table_comparison
from grpo_identity.proofs.beyond import G1, G2, G3, G4, G5, G6
from grpo_identity.proofs.core import Claim, Formulas, ProofResult, Theorem, check_claims, check_equal
from grpo_identity.proofs.expectation import T8, T9, T10, T12, T13
from grpo_identity.proofs.identity import T1, T2, T3, T4, T5, T6, T7
from grpo_identity.proofs.offpolicy import G10
from grpo_identity.proofs.policy import G7, G8
from grpo_identity.proofs.rewards import G9
from grpo_identity.proofs.rollout import G11
from grpo_identity.proofs.table import T14

__all__ = [
    "THEOREMS",
    "Theorem",
    "ProofResult",
    "Claim",
    "Formulas",
    "by_name",
    "select",
    "prove_all",
    "check_equal",
    "check_claims",
    "fidelity_series",
    "group_size_second_order",
    "table_comparison",
]

#: every theorem, in the paper's order, then those beyond the paper
THEOREMS: tuple[Theorem, ...] = (
    T1,
    T2,
    T3,
    T4,
    T5,
    T6,
    T7,
    T8,
    T9,
    T10,
    T11,
    T12,
    T13,
    T14,
    G1,
    G2,
    G3,
    G4,
    G5,
    G6,
    G7,
    G8,
    G9,
    G10,
    G11,
)


def by_name(name: str) -> Theorem:
    """The theorem called ``name`` (e.g. ``"T3"``)."""
    for t in THEOREMS:
        if t.name == name:
            return t
    raise KeyError(f"no theorem named {name!r}; known: {', '.join(t.name for t in THEOREMS)}")


def select(substring: str | None = None) -> list[Theorem]:
    """Theorems whose name or title contains ``substring`` (case-insensitive); all when None."""
    if substring is None:
        return list(THEOREMS)
    s = substring.lower()
    return [t for t in THEOREMS if s in t.name.lower() or s in t.title.lower()]


def prove_all(select: str | None = None) -> list[ProofResult]:
    """The proof results of every theorem whose name or title contains ``select`` (all when None).

    Each theorem is proved from the SymPy definitions in :mod:`grpo_identity.formulas` and says
    its method (symbolic, certified numeric, numeric evidence).

    Parameters
    ----------
    select : str, optional
        A substring of a theorem's name or title, case-insensitive (``"T3"``, ``"baseline"``);
        None proves all of :data:`THEOREMS`.

    Returns
    -------
    list of ProofResult
        One per selected theorem, in the order of :data:`THEOREMS`: its name, status
        (``"proved"`` or ``"failed"``), residual, seconds, details (every claim checked) and
        method.  Empty when nothing matches.

    Examples
    --------
    >>> [(r.name, r.status, r.method) for r in prove_all("baseline")]
    [('T4', 'proved', 'symbolic')]
    >>> prove_all("no such theorem")
    []
    """
    return [t.prove() for t in _select(select)]


_select = select
