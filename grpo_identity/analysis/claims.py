"""The paper's numbers that train nothing, as claims for the main job (:mod:`grpo_identity.claims`): the closed
forms, the 14 Big-Math numbers of claim 8 and the fit of DAPO's curve.  Each passes where the project's value,
rounded to the paper's printed decimals (``paper.PRINTED_DECIMALS``), equals the printed one."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from grpo_identity import paper
from grpo_identity.claims import Item, checked, running, skipped

__all__ = ["closed_forms", "closed_form_count", "big_math", "big_math_count", "dapo_fit"]


def closed_forms() -> Iterator[Item]:
    """The group-size table, φ, the first-order law and the difficulty weights, against the paper's."""
    from grpo_identity import closed_forms as C

    for row in C.group_size_table():
        exact, law = paper.GROUP_SIZE_TABLE[row["p"]][C.PAPER_TABLE_EPS.index(row["eps"])]
        name = f"group size p={row['p']}, fidelity {1 - row['eps']:.0%}"
        project = f"{row['G_exact']} ({round(row['G_law'])})"
        yield checked(
            "closed forms", name, f"{exact} ({law})", project, row["G_exact"] == exact and round(row["G_law"]) == law
        )
    for (G, p), value in paper.FIDELITY.items():
        v = round(float(C.fidelity(G, p)), 4)
        yield checked("closed forms", f"fidelity φ(G={G}, p={p})", f"{value:.4f}", f"{v:.4f}", v == value)
    for (G, p), value in paper.ATTENUATION_FIRST_ORDER.items():
        v = round(float(C.attenuation_first_order(G, p)), 2)
        yield checked("closed forms", f"first-order law at G={G}, p={p}", value, v, v == value)
    for p, value in paper.DIFFICULTY_WEIGHT.items():
        v = round(float(C.difficulty_weight(p)), 1)
        yield checked("closed forms", f"difficulty weight w({p})", value, v, v == value)
    for p, value in paper.DIFFICULTY_PENALTY.items():
        v = round(float(C.difficulty_weight(p)) ** 2 / 4, 1)
        yield checked("closed forms", f"difficulty penalty 1/(4p(1−p)) at p={p}", value, v, v == value)


def closed_form_count() -> int:
    """How many items :func:`closed_forms` yields."""
    n = sum(len(v) for v in paper.GROUP_SIZE_TABLE.values()) + len(paper.FIDELITY) + len(paper.ATTENUATION_FIRST_ORDER)
    return n + len(paper.DIFFICULTY_WEIGHT) + len(paper.DIFFICULTY_PENALTY)


def dapo_fit(curve: Path | None, solve_rates: str | None) -> Iterator[Item]:
    """The fit of DAPO's Fig. 3b with E_p[p^32] under one timescale, and the saturating curve beside it."""
    ref = paper.DAPO_FIT
    if curve is None:
        yield skipped(
            "DAPO", "fit of Fig. 3b with E_p[p^32] (one timescale)", ref["competence_r2"], "no DAPO curve given"
        )
        return
    from grpo_identity.analysis.dapo_fit import fit

    running("fit with 200 bootstrap resamples")
    r = fit(curve, solve_rates, n_bootstrap=200)
    c, s = r["competence"], r["saturating"]
    lo, hi = c["r2_bootstrap"]
    yield checked(
        "DAPO",
        "R² of E_p[p^32] under one timescale",
        f"{ref['competence_r2']} ({ref['competence_r2_bootstrap'][0]}–{ref['competence_r2_bootstrap'][1]})",
        f"{c['r2']:.3f} ({lo:.3f}–{hi:.3f})",
        c["r2"] >= ref["competence_r2_bootstrap"][0],
        f"pass: at least the paper's bootstrap lower bound; solve rates: {r['solve_rate_source']}",
    )
    yield checked(
        "DAPO",
        "R² of the two-parameter saturating curve (better)",
        ref["saturating_r2"],
        f"{s['r2']:.3f}",
        round(s["r2"], 2) == ref["saturating_r2"] and s["r2"] >= c["r2"],
        "independent of the solve rates: the paper's value to 2 decimals",
    )


def big_math_count() -> int:
    """How many items :func:`big_math` yields."""
    ref = paper.BIG_MATH
    return (
        2
        + len(ref["silent_closed_form"])
        + len(ref["silent_subsampled"])
        + sum(len(v) for v in ref["mass_share"].values())
    )


def big_math(solve_rates: str | None) -> Iterator[Item]:
    """The 14 Big-Math numbers of claim 8, each rounded to the paper's printed decimals."""
    from grpo_identity.analysis.realdata import summarise
    from grpo_identity.analysis.solve_rates import resolve

    ref, dec = paper.BIG_MATH, paper.PRINTED_DECIMALS
    s = summarise(resolve(solve_rates))
    note = f"{s['source']}; the project's value rounded to the paper's printed digits"

    def printed(name: str, key: str, want: float, got: float) -> Item:
        d = dec[key]
        shown = f"{100 * want:.{max(d - 2, 0)}f} %"
        return checked(
            "Big-Math", name, shown, f"{100 * got:.{max(d - 2, 0) + 2}f} %", round(got, d) == round(want, d), note
        )

    yield printed("fraction with p̂ = 0", "frac_p0", ref["frac_p0"], s["frac_p0"])
    yield printed("fraction with p̂ = 1", "frac_p1", ref["frac_p1"], s["frac_p1"])
    for G, want in ref["silent_closed_form"].items():
        yield printed(f"silent fraction, closed form, G={G}", "silent_closed_form", want, s["silent_closed_form"][G])
    for G, want in ref["silent_subsampled"].items():
        yield printed(
            f"silent fraction, G={G} of 64 logged rollouts", "silent_subsampled", want, s["silent_subsampled"][G]
        )
    for arm, shares in ref["mass_share"].items():
        for part, want in shares.items():
            label = {"grpo": "GRPO", "dr_grpo": "Dr. GRPO"}[arm]
            yield printed(
                f"{label} gradient-mass share on {part} prompts", "mass_share", want, s["mass_share"][arm][part]
            )
