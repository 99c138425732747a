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
# # 01 · The identity and the three-mode reduction
#
# One prompt, $G$ sampled answers, binary verifier rewards, $k$ of them correct. GRPO turns the
# rewards into advantages by subtracting the group mean and dividing by the group standard
# deviation $\sigma$, then takes the update $g = \frac{1}{G}\sum_i \hat A_i s_i$, where $s_i$ is the
# score (the gradient of the log-probability) of answer $i$.
#
# The paper's point (arXiv 2607.00152, Theorem 1) is that with binary rewards this update
# collapses to **one number times one direction**: $\sigma$ times the difference between the mean
# score of the correct and of the incorrect answers. Dr. GRPO and DAPO are then three operations
# on that one number: $\sigma$, $\sigma^2$, and $\sigma$ with the silent groups ($k \in \{0, G\}$)
# thrown away.
#
# Each statement below is printed from its proof object in `grpo_identity.proofs` (the
# equation is SymPy's LaTeX of the project's formulas, never retyped), and the cell under it
# runs the proof: every equation is proved by reducing the residual *lhs − rhs* to exactly 0.
# Interior groups ($0 < k < G$) are written $G = k + m$ with $k, m$ positive integers; scores are
# symbolic vectors of symbolic dimension.

# %%
import matplotlib.pyplot as plt
import numpy as np

from grpo_identity import dial as D
from grpo_identity.app.notebook import prove, statement

plt.rcParams.update({"figure.dpi": 100, "axes.grid": True, "grid.alpha": 0.3})

# %% [markdown]
# ## σ and the two advantage values

# %% tags=["hide-input"]
statement("T1")

# %%
prove("T1")

# %% [markdown]
# Because a binary group has only two distinct rewards, GRPO's advantages take only two
# values, one for every correct answer and one for every incorrect one, and they cancel over
# the group.

# %% tags=["hide-input"]
statement("T2")

# %%
prove("T2")

# %% [markdown]
# ## The identity

# %% tags=["hide-input"]
statement("T3")

# %%
prove("T3")

# %% [markdown]
# The same statement checked on numbers: random groups of answers with random score vectors
# (the sizes are printed below). The left side is the update as a trainer computes it, from the
# advantages of `grpo_identity.dial` (the project's one advantage implementation); the right side
# is the dial's update coefficient times the score gap $\bar s_+ - \bar s_-$.

# %%
rng = np.random.default_rng(0)
G, n_groups, dim = 8, 2000, 5
rewards = (rng.random((n_groups, G)) < rng.random((n_groups, 1))).astype(float)  # (n, G)
scores = rng.normal(size=(n_groups * G, dim))  # (n·G, d): one score vector per answer
k = rewards.sum(1).astype(int)  # (n,)
gap = D.score_gap(rewards.reshape(-1), scores, G)  # (n, d)

fig, ax = plt.subplots(figsize=(5.5, 4.2))
for dial, marker in ((D.GRPO, "o"), (D.DR_GRPO, "x")):
    g = D.group_updates(D.advantages(rewards.reshape(-1), G, dial), scores, G)  # (n, d)
    predicted = D.coefficient(k, G, dial)[:, None] * gap  # (n, d)
    err = np.abs(g - predicted).max()
    print(f"{dial.name:8s} max |g − c(k)·(s̄₊ − s̄₋)| over {n_groups} groups × {dim} components = {err:.1e}")
    assert err < 1e-12
    live = (k > 0) & (k < G)
    ax.loglog(
        np.linalg.norm(predicted[live], axis=1),
        np.linalg.norm(g[live], axis=1),
        marker,
        ms=3,
        alpha=0.5,
        label=f"{dial.name}: c = {'σ' if dial is D.GRPO else 'σ²'}",
    )
lims = np.array(ax.get_xlim())
ax.plot(lims, lims, "k-", lw=0.8, label="equality")
ax.set_xlabel("‖c(k) · (s̄₊ − s̄₋)‖  (the identity)")
ax.set_ylabel("‖(1/G) Σ Âᵢ sᵢ‖  (the trainer's update)")
ax.set_title(f"Every non-silent group lies on the diagonal (G = {G}, d = {dim})", fontsize=10)
ax.legend(fontsize=8)
plt.show()
updates = D.group_updates(D.advantages(rewards.reshape(-1), G, D.GRPO), scores, G)
print(f"silent groups (k ∈ {{0, G}}): {int((~live).sum())}, update exactly 0: {bool(np.all(updates[~live] == 0))}")

# %% [markdown]
# Adding a constant to every reward (a baseline, or rewards in {−1, 1} shifted) changes nothing:

# %% tags=["hide-input"]
statement("T4")

# %%
prove("T4")

# %% [markdown]
# ## Dr. GRPO and the three modes
#
# Dr. GRPO drops the division by σ. The update keeps the same direction, with σ squared:

# %% tags=["hide-input"]
statement("T5")

# %%
prove("T5")

# %% [markdown]
# The dial of `grpo_identity.dial` has a centre, a scale, the std's `ddof`, an `eps` and a keep
# rule. At the GRPO, Dr. GRPO and DAPO presets its update coefficient is σ, σ² and σ with silent
# groups set to 0 (in the equation below, the left column is the dial's coefficient at the three
# presets, the right one σ, σ², 1{0<k<G}·σ):

# %% tags=["hide-input"]
statement("T6")

# %%
prove("T6")

# %% [markdown]
# What that means per group, for $G = 8$: GRPO gives the most weight to the balanced groups
# ($k = G/2$), Dr. GRPO concentrates it there even more (σ² falls faster towards the edges), and
# DAPO has GRPO's weights but discards the silent groups and redraws them. The framework
# conventions (TRL and verl: Bessel-corrected std plus a small ε) shift GRPO's σ by a factor
# $\sqrt{G/(G-1)}$, the same for every $k$ (theorems G2, G3 below).

# %%
G = 8
ks = np.arange(G + 1)
fig, ax = plt.subplots(figsize=(7, 3.6))
width = 0.27
for i, dial in enumerate((D.GRPO, D.DR_GRPO, D.DAPO)):
    ax.bar(
        ks + (i - 1) * width,
        D.coefficient(ks, G, dial),
        width,
        label={"grpo": "GRPO: σ", "dr_grpo": "Dr. GRPO: σ²", "dapo": "DAPO: 1{0<k<G}·σ (silent groups redrawn)"}[
            dial.name
        ],
    )
ax.plot(ks, D.coefficient(ks, G, D.TRL), "k_", ms=14, mew=2, label="TRL convention (ddof 1, ε = 1e-4)")
ax.set_xticks(ks)
ax.set_xlabel(f"number correct k in a group of G = {G}")
ax.set_ylabel("update coefficient c(k)")
ax.set_title("Three operations on one number: g = c(k) · (s̄₊ − s̄₋)", fontsize=10)
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# RLOO's leave-one-out baseline is the mean baseline rescaled, so RLOO is Dr. GRPO up to the
# constant $G/(G-1)$:

# %% tags=["hide-input"]
statement("T7")

# %%
prove("T7")
print(
    "RLOO / Dr. GRPO coefficient, G = 8, k = 1..7:",
    np.round(D.coefficient(ks[1:-1], G, D.RLOO) / D.coefficient(ks[1:-1], G, D.DR_GRPO), 12),
)

# %% [markdown]
# ## Beyond the paper
#
# The paper sets aside per-token weights, Bessel's correction, ε, the batch std, non-binary
# rewards, clipping and KL. Each is proved the same way: what survives of the identity, and
# what breaks.

# %% tags=["hide-input"]
statement("G1")

# %%
prove("G1")

# %% tags=["hide-input"]
statement("G2")

# %%
prove("G2")

# %% tags=["hide-input"]
statement("G3")

# %%
prove("G3")

# %% tags=["hide-input"]
statement("G4")

# %%
prove("G4")

# %% tags=["hide-input"]
statement("G5")

# %%
prove("G5")

# %% tags=["hide-input"]
statement("G6")

# %%
prove("G6")

# %% [markdown]
# ## The identity for any rewards
#
# G5 keeps two reward values. With partial credit or a reward model the rewards of a group take
# any real values, and there is no $k$, no $\bar s_+$, no $\bar s_-$. The identity survives in the form
# every statistician knows: the centred-reward sum $\frac{1}{G}\sum_i (R_i - \bar R)\,s_i$ is the
# covariance of the rewards and the scores, that is $\sigma_R^2$ times $\hat\beta$, the least-squares
# slope of the scores on the rewards. GRPO's update is $\sigma_R\hat\beta$, Dr. GRPO's
# $\sigma_R^2\hat\beta$; with binary rewards $\hat\beta = \bar s_+ - \bar s_-$ and $\sigma_R = \sigma$.
# Proved for a symbolic group size.

# %% tags=["hide-input"]
statement("G9")

# %%
prove("G9")

# %% [markdown]
# A group of partial-credit rewards with two-dimensional scores: the update computed from GRPO's
# advantages equals $\sigma_R\hat\beta$ from the closed forms, while a σ taken from the binary formula
# $\sqrt{\mu(1-\mu)}$ (right on $\{0, 1\}$ rewards only) gives another coefficient; the audit's identity
# property reports such an implementation with this kind of counterexample. Numbers, not a proof.

# %%
from grpo_identity import closed_forms as C

rng = np.random.default_rng(0)
rewards = np.array([0.0, 0.25, 0.5, 1.0, 1.0, 0.75, 0.0, 0.5])  # one group of G = 8
scores = rng.standard_normal((8, 2))  # (G, 2): one score vector per answer
g = D.group_updates(D.advantages(rewards, 8, D.GRPO), scores, 8)[0]
sigma_r, slope = C.reward_std(rewards), C.score_slope(rewards, scores)
mu = rewards.mean()
print("g (GRPO advantages)      :", np.round(g, 6))
print("sigma_R * beta_hat       :", np.round(sigma_r * slope, 6))
print("sigma_R, sqrt(mu(1 - mu)):", round(sigma_r, 6), round(float(np.sqrt(mu * (1 - mu))), 6))
print("binary-formula update    :", np.round(sigma_r**2 / np.sqrt(mu * (1 - mu)) * slope, 6))

# %% [markdown]
# ## Every step after the first: importance weights, clipping and KL
#
# G6 holds at the first step on a batch, where every ratio $\rho = \pi_\theta/\pi_{old}$ is 1 and the policy
# is the reference. From the second step on the ratios move, the clip can bite and the KL term pulls. Token by
# token, the clipped surrogate's gradient is $w\,\hat A\,\nabla\log\pi$ with $w = \rho$, or $w = 0$ where
# the token is clipped; summed over a group it is the identity again, with the same coefficient ($\sigma$ for
# GRPO) and importance-weighted, clip-masked scores $\tilde s_i = \sum_t w_{it}\nabla\log\pi_{it}$. GSPO's
# sequence ratio gives every token of an answer one weight; the k3 KL term adds
# $\beta(\pi_{ref}/\pi - 1)\nabla\log\pi$ per token whatever $\hat A$, so it moves silent groups too.

# %% tags=["hide-input"]
statement("G10")

# %%
prove("G10")

# %% [markdown]
# The weight $w$ of one token against its ratio for DAPO's clip-higher range ($\varepsilon_{low} = 0.2$,
# $\varepsilon_{high} = 0.28$), from the closed forms, beside the slope of the surrogate in $\log\rho$ measured
# by central differences (numbers, not a proof): a correct answer's token stops counting above
# $1 + \varepsilon_{high}$, an incorrect answer's below $1 - \varepsilon_{low}$; in between both keep their ratio.

# %%
eps_low, eps_high, h = 0.2, 0.28, 1e-6
ratios = np.linspace(0.5, 1.6, 221)  # (n,)
off_kinks = (np.abs(ratios - (1 - eps_low)) > 1e-3) & (np.abs(ratios - (1 + eps_high)) > 1e-3)
fig, ax = plt.subplots(figsize=(6.5, 3.4))
for A, style, side in ((1.0, "-", "correct answer, Â > 0"), (-1.0, "--", "incorrect answer, Â < 0")):
    w = C.token_weight(ratios, A, eps_low, eps_high)  # (n,)
    up = C.clipped_surrogate(ratios * np.exp(h), A, eps_low, eps_high)
    down = C.clipped_surrogate(ratios * np.exp(-h), A, eps_low, eps_high)
    slope = (up - down) / (2 * h * A)  # (1/Â) d surrogate / d log ρ
    print(f"{side}: max |slope/Â − w| off the kinks = {np.abs(slope - w)[off_kinks].max():.1e}")
    ax.plot(ratios, w, style, label=f"w, {side}")
for kink in (1 - eps_low, 1 + eps_high):
    ax.axvline(kink, color="grey", lw=0.8)
ax.set_xlabel("token ratio ρ = π_θ / π_old")
ax.set_ylabel("weight w of the token's score")
ax.set_title("The clipped surrogate's gradient is w·Â·∇log π", fontsize=10)
ax.legend(fontsize=8)
plt.show()
print("KL weight β(π_ref/π − 1), β = 0.04, at π_ref/π = 0.5, 1, 2:", C.kl_gradient_weight(np.array([0.5, 1, 2]), 0.04))

# %% [markdown]
# ## Three policies: the rollout engine's $\mu$, the trainer's $\pi_{old}$ and $\pi_\theta$
#
# The answers are sampled by a rollout engine whose policy $\mu$ differs from the trainer's $\pi_{old}$ even at
# the same weights. A correction multiplies each token's surrogate by a weight $\omega$ made of
# $r = \pi_{old}/\mu$: truncated $\min(r, C)$, masked $r\,\mathbb 1\{\alpha \le r \le \beta\}$, or one weight per
# answer, the product of its token ratios or their geometric mean. Detached, $\omega$ only reweighs the scores:
# the update is still $c(\bar{\tilde s}_+ - \bar{\tilde s}_-)$ with the on-policy $c$; every estimator is exactly 1
# where $\mu = \pi_{old}$; the product is the geometric mean to the power $L$.

# %% tags=["hide-input"]
statement("G11")

# %%
prove("G11")

# %% [markdown]
# What the two sequence-level weights do to answers of different lengths when the engine and the trainer
# disagree by the same small amount on every token (numbers, not a proof): the product decays exponentially in
# the length, the geometric mean does not move with it.

# %%
lengths = np.array([16, 64, 256, 1024])
for delta in (-0.001, -0.01):
    x = [np.full(n, delta) for n in lengths]
    product = [C.sequence_product_ratio(v) for v in x]
    mean = [C.sequence_ratio(v) for v in x]
    print(f"log(pi_old/mu) = {delta} per token, L = {lengths.tolist()}:")
    print("  product       ", np.round(product, 4), " truncated at 2:", np.round(C.truncated_weight(product, 2.0), 4))
    print("  geometric mean", np.round(mean, 4))

# %% [markdown]
# ## The identity in expectation, for any policy
#
# Everything above holds group by group. For a language model the score gap $\bar s_+ - \bar s_-$ is a
# random vector, not the constant 1 of the Bernoulli-logit prompt. Conditioning on $k$ takes its
# expectation: the correct answers of a group are independent draws from the policy restricted to
# the correct answers, so $\mathbb{E}[\bar s_+ \mid k] = \nabla p / p$ and
# $\mathbb{E}[\bar s_- \mid k] = -\nabla p/(1-p)$, whatever $k$ is. The expected update at fixed $k$
# therefore points along $\nabla p$ for every $k$, with size exactly $c(k, G)$ times $1/(p(1-p))$:
# $\sigma_k$ for GRPO, $\sigma_k^2$ for Dr. GRPO. This is the prediction a language-model run can
# measure (bin groups by $k$, average their updates).

# %% tags=["hide-input"]
statement("G7")

# %%
prove("G7")

# %% [markdown]
# The noise around that mean: given $k$, $\bar s_+$ and $\bar s_-$ are independent means of $k$ and
# $G - k$ draws, so their covariances add. For GRPO with equal class covariances the noise is
# $\Sigma/G$ at every $k$: dividing by σ makes the signal grow with σ while the noise stays flat.

# %% tags=["hide-input"]
statement("G8")

# %%
prove("G8")

# %% [markdown]
# **What to take away.** With binary rewards, a GRPO step on one prompt is σ times the score
# gap between the correct and the incorrect answers; Dr. GRPO uses σ², DAPO σ without the silent
# groups. Everything the three methods disagree about is how they weigh σ, which depends only on
# $k$ and $G$; and for any policy the expected update at fixed $k$ is that weight times one
# direction, $\nabla p/(p(1-p))$ (G7). Notebook 02 takes the expectation over $k$.
