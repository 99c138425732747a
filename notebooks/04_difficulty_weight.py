# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 · The difficulty weight and real data
#
# Dividing by σ is a choice about *which prompts matter*. With many answers per prompt, GRPO's
# expected update on a Bernoulli-logit prompt is $\sqrt{p(1-p)}$ and Dr. GRPO's is $p(1-p)$: the
# gradients of two different objectives. GRPO ascends $\mathbb{E}_x[2\arcsin\sqrt{p_x}]$, whose
# slope in $p$ is the *difficulty weight* $w(p) = 1/\sigma(p)$, large for the prompts a model almost
# never or almost always solves; Dr. GRPO ascends the plain mean solve rate.
#
# The second half applies this to a distribution of real solve rates: which share of the gradient
# each method spends on extreme prompts, and how many groups are silent at each $G$.

# %%
import os

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display

from grpo_identity import closed_forms as C
from grpo_identity import paper
from grpo_identity.analysis.realdata import gradient_weights, summarise
from grpo_identity.analysis.solve_rates import resolve
from grpo_identity.app.notebook import prove, statement, table

plt.rcParams.update({"figure.dpi": 100, "axes.grid": True, "grid.alpha": 0.3})

# %% [markdown]
# ## The difficulty weight

# %% tags=["hide-input"]
statement("T13")

# %%
prove("T13")

# %%
rows = []
for p, printed in paper.DIFFICULTY_WEIGHT.items():
    w = C.difficulty_weight(p)
    assert round(w, 1) == printed
    rows.append([p, f"{w:.3f}", printed])
table(rows, ["p", "w(p) = 1/√(p(1−p))", "paper"])

# %% [markdown]
# Left: the two objectives per prompt, scaled to $[0, 1]$. GRPO's rises steeply at both ends: a
# few points of solve rate on a hard prompt are worth as much as many on a balanced one (printed
# below the figure). Right: the expected update per prompt at large $G$, relative to a balanced
# prompt. GRPO keeps more of the signal on hard and easy prompts than Dr. GRPO, by the factor
# $w(p)/2$.

# %%
ps = np.linspace(0.0005, 0.9995, 500)
w_large = gradient_weights(ps)  # √(p(1−p)) (GRPO) and p(1−p) (Dr. GRPO)
mid = gradient_weights(0.5)
fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.8))
a.plot(ps, C.arcsine_objective(ps) / C.arcsine_objective(1.0), lw=1.6, label="GRPO: 2·arcsin√p (÷ π)")
a.plot(ps, ps, lw=1.6, label="Dr. GRPO: p")
a.set_xlabel("solve rate p")
a.set_ylabel("objective per prompt (scaled)")
a.set_title("What each method ascends", fontsize=10)
a.legend(fontsize=8)
b.plot(ps, w_large["grpo"] / mid["grpo"], lw=1.6, label="GRPO: √(p(1−p)) / ½")
b.plot(ps, w_large["dr_grpo"] / mid["dr_grpo"], lw=1.6, label="Dr. GRPO: p(1−p) / ¼")
for lo, hi in ((0, 0.1), (0.9, 1)):
    b.axvspan(lo, hi, color="grey", alpha=0.12)
b.text(0.015, 0.05, "extreme", fontsize=7, color="dimgrey")
b.set_xlabel("solve rate p")
b.set_ylabel("expected update, relative to p = ½")
b.set_title("Where the gradient goes (large G)", fontsize=10)
b.legend(fontsize=8)
plt.show()

gain = C.arcsine_objective(0.05) - C.arcsine_objective(0.01)  # GRPO's objective, 1 % -> 5 %
p_to = np.interp(C.arcsine_objective(0.40) + gain, C.arcsine_objective(ps), ps)
p_to_dr = 0.40 + (0.05 - 0.01)  # Dr. GRPO's objective is p itself: equal gains are equal steps in p
print(
    f"GRPO: raising a prompt from 1 % to 5 % gains as much as raising one from 40 % to {100 * p_to:.1f} %; "
    f"Dr. GRPO counts it as 40 % to {100 * p_to_dr:.0f} %"
)

# %% [markdown]
# ## Real solve rates
#
# The paper measures this on Big-Math (each problem with the solve rate of Llama-3.1-8B over 64
# rollouts). Its exact solve-rate histogram ships with the package (`grpo_identity/data/`, every
# problem of the paper's count; its header says how it was recovered from the paper's figure), so
# the numbers below are Big-Math's and should match the paper's to the digits it prints. Set
# `GRPO_IDENTITY_SOLVE_RATES` to a local file (parquet, JSONL or CSV with a `llama8b_solve_rate`
# column, or a `solve_rate,count` histogram) to use other solve rates.

# %%
spec = os.environ.get("GRPO_IDENTITY_SOLVE_RATES") or None  # None: the shipped Big-Math histogram
solve_rates = resolve(spec)
summary = summarise(solve_rates)
display(
    Markdown(
        f"Source: {summary['source']}; n = {summary['n']:,} problems. "
        f"The paper's Big-Math: n = {paper.BIG_MATH['n']:,} problems."
    )
)

pct = lambda x: f"{100 * x:.1f} %"  # noqa: E731
big, dec = paper.BIG_MATH, paper.PRINTED_DECIMALS


def printed(x: float, key: str) -> str:
    """x as the paper prints the quantity ``key`` (4.0 %, 59 %, 13.9 %)."""
    return f"{100 * x:.{dec[key] - 2}f} %"


def row(name: str, key: str, ours: float, theirs: float) -> list[str]:
    return [name, pct(ours), printed(theirs, key), "yes" if printed(ours, key) == printed(theirs, key) else "NO"]


rows = [
    row("p̂ = 0 (never solved)", "frac_p0", summary["frac_p0"], big["frac_p0"]),
    row("p̂ = 1 (always solved)", "frac_p1", summary["frac_p1"], big["frac_p1"]),
]
rows += [
    row(f"silent at G = {g}, E[p̂^G + (1−p̂)^G]", "silent_closed_form", v, big["silent_closed_form"][g])
    for g, v in summary["silent_closed_form"].items()
]
rows += [
    row(f"silent at G = {g}, G of 64 logged rollouts", "silent_subsampled", v, big["silent_subsampled"][g])
    for g, v in summary["silent_subsampled"].items()
]
for arm, name in (("dr_grpo", "Dr. GRPO, p(1−p)"), ("grpo", "GRPO, √(p(1−p))")):
    for part in ("extreme", "medium"):
        rows.append(
            row(
                f"gradient mass on {part} prompts, {name}",
                "mass_share",
                summary["mass_share"][arm][part],
                big["mass_share"][arm][part],
            )
        )
table(rows, ["quantity", "this distribution", "paper (Big-Math)", "same at the paper's digits"])
if spec is None:  # the shipped histogram reproduces every printed digit (PAPER claim 8)
    assert all(r[3] == "yes" for r in rows), [r for r in rows if r[3] != "yes"]
ratio = summary["mass_share"]["grpo"]["extreme"] / summary["mass_share"]["dr_grpo"]["extreme"]
paper_ratio = big["mass_share"]["grpo"]["extreme"] / big["mass_share"]["dr_grpo"]["extreme"]
print(f"GRPO puts {ratio:.2f}× Dr. GRPO's share of gradient mass on extreme prompts (paper: {paper_ratio:.2f}×)")
assert ratio > 1

# %% [markdown]
# The distribution, and where each method's gradient mass lies on it. Bars: the share of
# problems at each solve rate; lines: the share of the total expected update (large $G$) that
# each solve rate receives.

# %%
v, c = solve_rates.values, solve_rates.weights  # distinct solve rates and their shares
edges = np.linspace(0, 1, 17)
which = np.clip(np.digitize(v, edges) - 1, 0, len(edges) - 2)
centres = 0.5 * (edges[1:] + edges[:-1])
share = np.bincount(which, weights=c, minlength=len(centres))
w = gradient_weights(v)
fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.8))
a.bar(centres, 100 * share, width=np.diff(edges) * 0.9, color="lightgrey", label="problems")
for arm, name in (("dr_grpo", "Dr. GRPO"), ("grpo", "GRPO")):
    mass = np.bincount(which, weights=c * w[arm], minlength=len(centres))
    a.plot(centres, 100 * mass / mass.sum(), "o-", ms=3, label=f"{name}: gradient mass")
a.set_xlabel("solve rate p̂")
a.set_ylabel("share (%)")
a.set_title(
    "Big-Math: problems and gradient mass" if spec is None else "your solve rates: problems and gradient mass",
    fontsize=10,
)
a.legend(fontsize=8)
Gs = [int(g) for g in summary["silent_closed_form"]]
b.plot(Gs, [100 * x for x in summary["silent_closed_form"].values()], "o-", label="closed form E[p̂^G + (1−p̂)^G]")
b.plot(
    [int(g) for g in summary["silent_subsampled"]],
    [100 * x for x in summary["silent_subsampled"].values()],
    "s--",
    label="G of the 64 logged rollouts",
)
b.plot(
    [int(g) for g in big["silent_closed_form"]],
    [100 * x for x in big["silent_closed_form"].values()],
    "k^:",
    ms=4,
    label="paper, Big-Math",
)
b.axhline(100 * (summary["frac_p0"] + summary["frac_p1"]), color="grey", lw=0.8, label="floor: p̂ ∈ {0, 1}")
b.set_xscale("log", base=2)
b.set_xlabel("group size G")
b.set_ylabel("silent groups (%)")
b.set_title("Silent fraction against G", fontsize=10)
b.legend(fontsize=7)
plt.show()

# %% [markdown]
# **What to take away.** Switching from GRPO to Dr. GRPO (or back) is not a normalisation detail:
# it moves gradient mass between the extreme and the medium prompts of the training set, by a
# factor you can compute from the solve-rate distribution before training. A data set with many
# near-0 and near-1 prompts also has a silent-group floor that no group size removes.
