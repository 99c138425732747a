"""The proofs' claims for the main job (:mod:`grpo_identity.claims`): every theorem proved, one item each.

Importing this module imports the proofs package (SymPy and every theorem): the main job imports it inside its
proofs stage, so that a failure there is that stage's item."""

from __future__ import annotations

from typing import Iterator

from grpo_identity.claims import Item, checked, running

__all__ = ["theorems", "theorem_count"]


def theorems() -> Iterator[Item]:
    """One item per theorem of :data:`grpo_identity.proofs.THEOREMS`: proved, or its residual."""
    from grpo_identity.proofs import THEOREMS

    for t in THEOREMS:
        running(f"{t.name} {t.title}")
        r = t.prove()
        note = "" if r.status == "proved" else f"residual: {r.residual}"
        yield checked(
            "proofs",
            f"{t.name} {t.title}",
            f"{t.paper_ref}",
            f"{r.status} in {r.seconds:.2f} s",
            r.status == "proved",
            note,
        )


def theorem_count() -> int:
    """How many items :func:`theorems` yields."""
    from grpo_identity.proofs import THEOREMS

    return len(THEOREMS)
