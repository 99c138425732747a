"""The numbers the paper publishes (arXiv 2607.00152), in one place, for the verify report.

These are the paper's values, not results: the project recomputes each one and compares.
Percentages are fractions here.
"""

from __future__ import annotations

from typing import Any

#: the tolerances ε of Corollary 2's columns (fidelity 90 %, 95 %, 99 %)
GROUP_SIZE_EPS: tuple[float, ...] = (0.1, 0.05, 0.01)
#: Corollary 2: p -> [(exact smallest G, G* as printed)] for ε = 0.1, 0.05, 0.01
GROUP_SIZE_TABLE: dict[float, list[tuple[int, int]]] = {
    0.50: [(7, 5), (11, 10), (51, 50)],
    0.30: [(9, 6), (14, 12), (61, 60)],
    0.10: [(22, 14), (36, 28), (144, 139)],
    0.05: [(42, 26), (69, 53), (273, 263)],
}
#: Corollary 1 / 2: fidelity φ(G, p) as printed (4 decimals)
FIDELITY = {(8, 0.5): 0.9278, (8, 0.05): 0.5390}
#: Corollary 1: the first-order law at G = 8, p = 0.05 (2 decimals)
ATTENUATION_FIRST_ORDER = {(8, 0.05): 0.67}
#: claim 7: w(0.5) = 2, w(0.05) ≈ 4.6; difficulty penalty 1/(4p(1−p)) at 0.5, 0.1, 0.05
DIFFICULTY_WEIGHT = {0.5: 2.0, 0.05: 4.6}
DIFFICULTY_PENALTY = {0.5: 1.0, 0.1: 2.8, 0.05: 5.3}
#: claim 6: DAPO Fig. 3b fits
DAPO_FIT: dict[str, Any] = {"competence_r2": 0.92, "competence_r2_bootstrap": (0.91, 0.96), "saturating_r2": 0.98}
#: claim 8: Big-Math (N = 215,608, Llama-3.1-8B over 64 rollouts)
BIG_MATH: dict[str, Any] = {
    "n": 215_608,
    "frac_p0": 0.040,
    "frac_p1": 0.072,
    "silent_closed_form": {"4": 0.59, "8": 0.44, "16": 0.32, "32": 0.23, "64": 0.17},
    "silent_subsampled": {"4": 0.59, "8": 0.43, "16": 0.30},
    "mass_share": {"grpo": {"extreme": 0.247, "medium": 0.175}, "dr_grpo": {"extreme": 0.139, "medium": 0.228}},
}
#: claim 9: the controlled run
CONTROLLED_RUN: dict[str, Any] = {
    "r2_silent": 0.999,
    "extreme_share": {"grpo": 0.170, "dr_grpo": 0.143},
    "hard_final": {"grpo": 0.99, "dr_grpo": 0.88},
    "dapo_oversample": 3.5,
}
#: decimals the paper prints each number with, in the units stored above (fractions):
#: 4.0 % -> 3, 59 % -> 2, 13.9 % -> 3; 0.999 -> 3, 0.99 -> 2, 3.5x -> 1.  verify compares the
#: project's value rounded to these decimals with the printed one.
PRINTED_DECIMALS: dict[str, int] = {
    "frac_p0": 3,
    "frac_p1": 3,
    "silent_closed_form": 2,
    "silent_subsampled": 2,
    "mass_share": 3,
    "r2_silent": 3,
    "extreme_share": 3,
    "hard_final": 2,
    "dapo_oversample": 1,
}
