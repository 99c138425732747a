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
# # 03 · Silent groups and DAPO
#
# A group whose answers are all correct or all wrong has $\sigma = 0$: every advantage is 0 and the
# prompt contributes nothing to the step, under GRPO and Dr. GRPO alike. DAPO's *dynamic
# sampling* discards such groups and draws new ones until the batch is full. How much it discards
# is one closed form, and DAPO's own training log follows it.
#
# The equation is printed from the proof object; numbers come from `grpo_identity.closed_forms`,
# the fit from `grpo_identity.analysis.dapo_fit`, and the paper's printed values from
# `grpo_identity.paper`.

# %%
import os

import matplotlib.pyplot as plt
import numpy as np

from grpo_identity import closed_forms as C
from grpo_identity import data, paper
from grpo_identity import dial as D
from grpo_identity.analysis.dapo_fit import fit
from grpo_identity.app.notebook import prove, statement, table

plt.rcParams.update({"figure.dpi": 100, "axes.grid": True, "grid.alpha": 0.3})

# %% [markdown]
# ## How often a group is silent

# %% tags=["hide-input"]
statement("T8")

# %%
prove("T8")

# %% [markdown]
# Checked by sampling: groups of rewards drawn at a fixed $p$, silent groups found with the dial's
# keep rule for DAPO (`grpo_identity.dial.keep_mask`), against the closed form.

# %%
rng = np.random.default_rng(2)
n_groups = 50_000
rows = []
for G, p in ((8, 0.5), (8, 0.1), (16, 0.05), (32, 0.9)):
    rewards = (rng.random((n_groups, G)) < p).astype(float)  # (n, G)
    measured = 1 - D.keep_mask(rewards.reshape(-1), G, D.DAPO).mean()
    predicted = C.silent_rate(G, p)
    se = np.sqrt(predicted * (1 - predicted) / n_groups)
    assert abs(measured - predicted) < 5 * se + 1e-12
    rows.append([G, p, f"{predicted:.4f}", f"{measured:.4f}"])
table(rows, ["G", "p", "p^G + (1−p)^G", f"measured ({n_groups:,} groups)"])

# %% [markdown]
# Near the edges most groups are silent unless $G$ is large (printed below the figure for a hard
# prompt). Raising $G$ helps slowly, because $(1-p)^G$ decays at rate $p$.

# %%
ps = np.linspace(0, 1, 401)
fig, ax = plt.subplots(figsize=(7.5, 4))
for G in (4, 8, 16, 32, 64):
    ax.plot(ps, C.silent_rate(G, ps), lw=1.4, label=f"G = {G}")
ax.set_xlabel("solve rate p")
ax.set_ylabel("P(group silent) = p^G + (1−p)^G")
ax.set_title("Silent groups: the mass that GRPO wastes and DAPO redraws", fontsize=10)
ax.legend(fontsize=8)
plt.show()
print(f"at p = 0.05 and G = 8, {C.silent_rate(8, 0.05):.1%} of groups are silent")

# %% [markdown]
# ## What dynamic sampling costs
#
# DAPO keeps drawing until a group is not silent. The number of draws is geometric with success
# probability $1 - P(\text{silent})$, so the expected number of groups drawn per kept group is
# $1/(1 - P(\text{silent}))$ when there is no cap, and $\sum_{d<D} P(\text{silent})^d$ with at most $D$
# draws (the cap of the controlled run of notebook 05, read from its configuration).

# %%
from grpo_identity.trainer.config import BernoulliConfig

max_draws = BernoulliConfig().max_draws  # D, DAPO's draws per prompt and step in the controlled run
fig, ax = plt.subplots(figsize=(7.5, 4))
ps = np.linspace(0.005, 0.995, 399)
for G in (8, 16):
    s = C.silent_rate(G, ps)
    (line,) = ax.semilogy(ps, 1 / (1 - s), lw=1.5, label=f"G = {G}, no cap")
    ax.semilogy(
        ps,
        sum(s**d for d in range(max_draws)),
        "--",
        color=line.get_color(),
        lw=1,
        label=f"G = {G}, at most {max_draws} draws",
    )
ax.set_xlabel("solve rate p")
ax.set_ylabel("groups drawn per prompt and step")
ax.set_title("Dynamic sampling pays for every silent group with a redraw", fontsize=10)
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## DAPO's own log: the all-correct fraction
#
# DAPO (Yu et al. 2025, Fig. 3b) logs the fraction of training prompts whose 32 evaluation
# samples are all correct — the all-correct branch $p^{32}$ of the silent mass, averaged over
# prompts: $\mathbb{E}_p[p^{32}]$. As the policy improves, every solve rate sharpens. The paper's
# consistency check sharpens all of them together with a single competence timescale and fits
# the logged curve; a generic two-parameter saturating curve is the baseline.
#
# The curve is the digitised Fig. 3b shipped with the package (`grpo_identity/data/`, with its
# provenance); the distribution of solve rates is the shipped Big-Math histogram (every problem
# of the paper's data set, its size printed below), or the file `GRPO_IDENTITY_SOLVE_RATES`
# names, if set.

# %%
curve = data.path(data.DAPO_CURVE)
solve_rates = os.environ.get("GRPO_IDENTITY_SOLVE_RATES") or None  # None: the shipped Big-Math histogram
result = fit(curve, solve_rates, n_bootstrap=200, seed=0)
print(f"fitted now from the shipped {curve.name} (200 bootstrap resamples)")
print("solve rates:", result["solve_rate_source"])
ci = lambda x: f"{x[0]:.2f}–{x[1]:.2f}" if x else "—"  # noqa: E731
comp, sat = result["competence"], result["saturating"]
table(
    [
        [
            "E_p[p^32], one competence timescale",
            f"τ = {comp['tau']:.0f} steps",
            f"{comp['r2']:.3f}",
            ci(comp["r2_bootstrap"]),
            f"{paper.DAPO_FIT['competence_r2']} ({ci(paper.DAPO_FIT['competence_r2_bootstrap'])})",
        ],
        [
            "a(1 − e^(−(s−s₀)/τ)), generic",
            f"a = {sat['a']:.3f}, τ = {sat['tau']:.0f}",
            f"{sat['r2']:.3f}",
            ci(sat["r2_bootstrap"]),
            paper.DAPO_FIT["saturating_r2"],
        ],
    ],
    ["model", "parameters", "R²", "bootstrap 95 %", "paper R²"],
)
assert comp["r2"] > 0.9

# %%
cv = result["curve"]
fig, ax = plt.subplots(figsize=(7.5, 4))
ax.plot(cv["step"], cv["value"], "k.", ms=5, label="DAPO Fig. 3b (digitised)")
ax.plot(cv["step"], cv["competence"], "-", lw=1.6, label=f"E_p[p^32], one timescale (R² = {comp['r2']:.3f})")
ax.plot(cv["step"], cv["saturating"], "--", lw=1.2, label=f"generic saturating curve (R² = {sat['r2']:.3f})")
ax.set_xlabel("DAPO training step")
ax.set_ylabel("fraction of prompts with all 32 samples correct")
ax.set_title("The silent mass DAPO discards grows as the policy sharpens", fontsize=10)
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# **What to take away.** Silent groups are not noise to be tuned away: their share is
# $p^G + (1-p)^G$, known before training from the solve-rate distribution. It is the work GRPO
# wastes and the redraws DAPO pays for, and DAPO's logged all-correct fraction behaves as its
# all-correct branch. The fit is a consistency check: the generic two-parameter curve fits as
# well or better, so it does not single out the competence model.
