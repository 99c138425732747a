"""The off-policy probe: the update of a step taken after the policy has moved, where the importance ratio,
the clip and the KL term act (at the first on-policy step, theorem G6, they do not).

A gradient target whose info carries ``"off_policy"`` (a dict of the settings the step runs under, shown in
the report) takes ``request = {"off_policy": {"seed": s, "scale": σ}}`` as a fourth argument: it scores the
batch at the current weights (advantages; old and reference log-probabilities as the framework computes them
there), moves the policy's parameters by a fixed noise (seeded by ``s``, of size ``σ``; ``σ = 0`` leaves them
where they are), runs its loss at the moved weights, restores them, and returns per row:

- ``advantages`` (n,), ``mask`` (n, T), ``coefficients`` (n, T): aᵢₜ = −∂loss/∂log π(yᵢₜ), as the gradient
  level reads them;
- ``log_ratio_old`` (n, T): log π − log π_old; ``log_ratio_ref`` (n, T) or None: log π − log π_ref;
- ``beta``: the KL coefficient β; ``clip``: ``{"epsilon", "epsilon_high", "delta"}`` (None where there is none).

What is measured, from the step at σ = 0 (aᵢₜ⁰) and at σ = :data:`PERTURBATION` (aᵢₜ), with wᵢₜ the loss's own
per-token weight (aᵢₜ⁰ = wᵢₜ·Âᵢ where the reference is the policy):

- the **importance-weight law**: rᵢₜ = (aᵢₜ/wᵢₜ − β·fᵢₜ)/Âᵢ, the surrogate's factor on answer i's token t, is
  ``token`` ρᵢₜ = π/π_old, ``sequence`` sᵢ = exp(meanₜ log ρᵢₜ) (GSPO: one weight per answer), ``none`` (1: the
  ratio ignored) on the tokens the surrogate does not clip, or ``other``; fᵢₜ is the KL term's
  −∂KL/∂log π of the law that fits (:data:`KL_LAWS`);
- the **clipped share**: live tokens of non-silent answers with zero surrogate gradient (rᵢₜ = 0), and whether
  they are those that min(ρÂ, clip(ρ, 1 − ε, 1 + ε_high)·Â) clips (with ρ capped at δ in the first term, a
  two-sided clip, where δ is set: :func:`clipped`);
- **silent groups**: exactly zero gradient, or (β > 0) the KL term's push, independent of the advantage, with
  its size relative to the non-silent answers' update;
- **the identity with importance-weighted scores** (theorem G10, generalising G6): per binary group, on random
  token scores Sᵢₜ, the surrogate's update Σᵢₜ (aᵢₜ − wᵢₜβfᵢₜ)Sᵢₜ is c·(s̃₊ʷ − s̃₋ʷ), the means of each side's
  importance-weighted scores s̃ᵢʷ = uᵢ Σₜ ωᵢₜ 1{t unclipped} Sᵢₜ (ω the law's weight, uᵢ the per-sample weight
  the gradient level named), with c the on-policy step's (whose update is c·(s̄₊ʷ − s̄₋ʷ), theorem G1).

>>> out, findings = audit_off_policy(numpy_off_policy_target, {"beta": 0.0})
>>> out["importance_weight"], out["clip_rule_matches"], out["silent_groups_zero_gradient"], findings
('token', True, True, [])
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable

import numpy as np

from grpo_identity import closed_forms as C
from grpo_identity import dial as D
from grpo_identity.checks.report import Finding

__all__ = [
    "PERTURBATION",
    "GROUP_SIZES",
    "IMPORTANCE_LAWS",
    "KL_LAWS",
    "audit_off_policy",
    "clipped",
    "numpy_off_policy_target",
    "group_coefficient",
    "token_gradient",
    "reference_batch",
]

#: the noise that moves the policy (the driver's unit: TRL adds σ·N(0, 1) to every parameter)
PERTURBATION = 0.1
#: group sizes of the off-policy probe (each one batch of :func:`~grpo_identity.checks.measure.infer.probe_batch`)
GROUP_SIZES = (4, 8)
#: relative tolerance of the law's fit, of a zero surrogate factor and of the identity's check (float32 losses)
TOL = 1e-3
#: a ratio this close (relative) to a clip boundary is not used to judge the clip rule
BOUNDARY = 1e-4
#: per-sample weight laws the identity is checked with (each constant within a batch, or 1/|yᵢ|)
IDENTITY_WEIGHTS = ("constant", "1/length", "1/step_tokens")
#: importance-weight laws and what each means for the update
IMPORTANCE_LAWS = {
    "token": "each token weighs its own ratio ρᵢₜ = π/π_old (GRPO's token-level PPO surrogate)",
    "sequence": "each answer weighs sᵢ = exp(meanₜ log ρᵢₜ), one weight for all its tokens (GSPO)",
    "none": "the ratio is ignored: the update is the on-policy one however stale the answers",
    "other": "no known law",
}
#: KL terms: −∂(KL term)/∂log π per token, over β and the loss's per-token weight
KL_LAWS = {
    "k3": "β(π_ref/π − 1)∇log π per token (k3 = π_ref/π − log(π_ref/π) − 1, differentiated)",
    "k3·ratio": "β·ρ·log(π_ref/π)∇log π per token (k3 times the importance ratio, differentiated through it: "
    "the unbiased reverse-KL gradient; fitted, not proved by G10, which covers k3)",
}


def _importance(law: str, lr_old: np.ndarray, M: np.ndarray) -> np.ndarray:
    """ωᵢₜ of ``law``: ρᵢₜ, sᵢ (broadcast over the answer) or 1."""
    if law == "token":
        return np.exp(lr_old)
    if law == "sequence":
        mean = (lr_old * M).sum(1) / np.maximum(M.sum(1), 1.0)  # (n,)
        return np.exp(mean)[:, None] * np.ones_like(lr_old)
    return np.ones_like(lr_old)


def _kl_push(kl: str | None, law: str, lr_old: np.ndarray, lr_ref: np.ndarray | None, M: np.ndarray) -> np.ndarray:
    """fᵢₜ = −∂KL/∂log π(yᵢₜ) of the KL term ``kl`` under importance law ``law`` (0 without a KL term)."""
    if kl is None or lr_ref is None:
        return np.zeros_like(lr_old)
    x = -lr_ref  # log π_ref − log π
    if kl == "k3" or law in ("none", "other"):
        return np.asarray(C.kl_gradient_weight(np.exp(x), 1.0))  # β(π_ref/π − 1), over β (theorem G10's twin)
    if law == "token":  # −d(ρ·k3)/d log π = ρ·x
        return np.exp(lr_old) * x
    k3 = (np.exp(x) - x - 1) * M  # sequence: sᵢ·k3ᵢₜ summed over the answer, sᵢ a mean over its tokens
    s = _importance("sequence", lr_old, M)
    return s * (np.expm1(x) - (k3.sum(1) / np.maximum(M.sum(1), 1.0))[:, None])


def _call(target: Callable[..., Any], r: np.ndarray, G: int, L: np.ndarray, scale: float, seed: int) -> dict[str, Any]:
    out = target(r, G, L, {"off_policy": {"seed": int(seed), "scale": float(scale)}})
    got: dict[str, Any] = {
        k: np.asarray(out[k], dtype=np.float64) for k in ("advantages", "coefficients", "mask", "log_ratio_old")
    }
    got["advantages"] = got["advantages"].reshape(-1)
    ref = out.get("log_ratio_ref")
    got["log_ratio_ref"] = None if ref is None else np.asarray(ref, dtype=np.float64)
    got["beta"] = float(out.get("beta") or 0.0)
    got["clip"] = dict(out.get("clip") or {})
    return got


class _Batch:
    """One group size's two steps (σ = 0 and σ = PERTURBATION) and what they share."""

    def __init__(self, G: int, r: np.ndarray, base: dict[str, Any], moved: dict[str, Any]) -> None:
        self.G, self.r, self.base, self.moved = G, r, base, moved
        self.A = moved["advantages"]
        self.M = moved["mask"]
        R = r.reshape(-1, G)
        self.silent = np.repeat(R.max(1) == R.min(1), G)  # (n,)
        self.live = (~self.silent & (self.A != 0))[:, None] & (self.M > 0)  # (n, T): the law's evidence
        self.beta = moved["beta"]

    def factor(self, law: str, kl: str | None) -> tuple[np.ndarray, np.ndarray]:
        """wᵢₜ (from σ = 0) and rᵢₜ (at σ = PERTURBATION) under an importance law and a KL law."""
        A = self.A[:, None]
        b, m = self.base, self.moved
        f0 = _kl_push(kl, law, b["log_ratio_old"], b["log_ratio_ref"], self.M)
        denominator = A * _importance(law, b["log_ratio_old"], self.M) + self.beta * f0
        w = np.where(self.live, b["coefficients"] / np.where(denominator == 0, 1.0, denominator), 0.0)
        f = _kl_push(kl, law, m["log_ratio_old"], m["log_ratio_ref"], self.M)
        safe_w = np.where(w == 0, 1.0, w)
        r = np.where(self.live, (m["coefficients"] / safe_w - self.beta * f) / np.where(A == 0, 1.0, A), 0.0)
        return w, r


def _fit(batches: list[_Batch]) -> dict[str, Any]:
    """The importance law and KL law whose rᵢₜ is ω on every unclipped token, the best of the candidates."""
    kls: list[str | None] = [None]
    if any(b.beta != 0 and b.moved["log_ratio_ref"] is not None for b in batches):
        kls = ["k3", "k3·ratio"]
    best: dict[str, Any] = {}
    for law in ("token", "sequence", "none"):
        for kl in kls:
            worst, kept = 0.0, 0
            for b in batches:
                _, r = b.factor(law, kl)
                omega = _importance(law, b.moved["log_ratio_old"], b.M)
                free = b.live & (np.abs(r) > TOL)
                kept += int(free.sum())
                if free.any():
                    worst = max(worst, float(np.max(np.abs(r[free] - omega[free]) / np.abs(omega[free]))))
            if kept and (not best or worst < best["residual"]):
                best = {"law": law, "kl": kl, "residual": worst}
    if not best:
        return {"law": "other", "kl": None, "residual": float("nan")}
    if best["residual"] > TOL:
        best = {**best, "law": "other", "nearest": best["law"]}
    return best


def clipped(ratio: np.ndarray, A: np.ndarray, low: float, high: float, delta: float | None = None) -> np.ndarray:
    """Where min(min(ρ, δ)·Â, clip(ρ, 1 − ε, 1 + ε_high)·Â) has zero gradient in ρ: Â > 0 above min(δ, 1 + ε_high);
    Â < 0 below 1 − ε or above max(δ, 1 + ε_high) (δ, a two-sided clip of the unclipped term, None for none).

    >>> clipped(np.array([0.7, 1.1, 1.3]), np.array([-1.0, 1.0, 1.0]), 0.2, 0.2).tolist()
    [True, False, True]
    """
    cut = np.asarray(C.token_weight(ratio, A, low, high)) == 0  # the clip of theorem G10 (its numeric twin)
    if delta is None:
        return cut
    capped = ((A > 0) & (ratio > delta)) | ((A < 0) & (ratio > max(float(delta), 1 + high)))
    return cut | capped


def _clip_rule(batches: list[_Batch], fit: dict[str, Any]) -> dict[str, Any]:
    """The observed zero-surrogate tokens against those the configured clip predicts under the fitted law."""
    law = fit.get("nearest", fit["law"])  # the zeros are read under the nearest law; the rule judged where one fits
    observed = predicted = live = mismatched = 0
    example: dict[str, Any] = {}
    clip = batches[0].moved["clip"]
    low, delta = clip.get("epsilon"), clip.get("delta")
    high = clip.get("epsilon_high") or low  # unset: the symmetric clip
    judged = low is not None and fit["law"] in ("token", "sequence")
    for b in batches:
        _, r = b.factor(law, fit["kl"])
        zero = b.live & (np.abs(r) <= TOL)
        observed += int(zero.sum())
        live += int(b.live.sum())
        if not judged:
            continue
        omega = _importance(law, b.moved["log_ratio_old"], b.M)
        cut = clipped(omega, b.A[:, None] * np.ones_like(omega), low, high, delta)
        bounds = [1 + high, 1 - low] + ([] if delta is None else [float(delta)])
        near = np.zeros(omega.shape, dtype=bool)
        for edge in bounds:
            near |= np.abs(omega - edge) <= BOUNDARY * abs(edge)
        predicted += int((cut & b.live).sum())
        wrong = b.live & ~near & (cut != zero)
        mismatched += int(wrong.sum())
        if wrong.any() and not example:
            i, t = (int(x) for x in np.argwhere(wrong)[0])
            example = {
                "group_size": b.G,
                "advantage": float(b.A[i]),
                "ratio": float(omega[i, t]),
                "surrogate_factor": float(r[i, t]),
                "clipped_by_config": bool(cut[i, t]),
            }
    return {
        "clipped_share": observed / live if live else float("nan"),
        "clip_predicted_share": predicted / live if (live and judged) else None,
        "clip_rule_matches": (mismatched == 0) if judged else None,
        "clip_mismatched_tokens": mismatched if judged else None,
        "clip_example": example,
        "clip": {"epsilon": low, "epsilon_high": high, "delta": delta},
    }


def _silent(batches: list[_Batch], fit: dict[str, Any]) -> dict[str, Any]:
    """The silent answers' coefficients at the moved weights: zero, or their size and the KL law they follow."""
    silent_max = non_max = silent_sq = non_sq = 0.0
    fits: dict[str, float] = {}
    law = fit.get("nearest", fit["law"])
    for b in batches:
        C, M = b.moved["coefficients"], b.M
        rows = b.silent[:, None] & (M > 0)
        others = (~b.silent & (b.A != 0))[:, None] & (M > 0)
        silent_max = max(silent_max, float(np.abs(C[rows]).max(initial=0.0)))
        non_max = max(non_max, float(np.abs(C[others]).max(initial=0.0)))
        silent_sq += float((C[rows] ** 2).sum())
        non_sq += float((C[others] ** 2).sum())
        for kl in KL_LAWS:
            f = _kl_push(kl, law, b.moved["log_ratio_old"], b.moved["log_ratio_ref"], M)
            fits[kl] = max(fits.get(kl, 0.0), _proportional(C, f, rows))
    # zero at the coefficients' resolution (float32 rounding of a batch-wide whitening leaves ~1e-9 of the live size)
    silent_max = 0.0 if silent_max <= float(np.finfo(np.float32).eps) * non_max else silent_max
    out: dict[str, Any] = {"silent_groups_zero_gradient": silent_max == 0.0}
    if silent_max:
        nearest = min(fits, key=fits.__getitem__)
        out["silent_size"] = {
            "max_ratio": silent_max / non_max if non_max else float("inf"),
            "norm_ratio": float(np.sqrt(silent_sq / non_sq)) if non_sq else float("inf"),
            "max_abs": silent_max,
            "kl_law": nearest if fits[nearest] <= TOL else "other",
            "kl_residual": fits[nearest],
        }
    return out


def _proportional(C: np.ndarray, f: np.ndarray, rows: np.ndarray) -> float:
    """Worst relative residual of Cᵢₜ = cᵢ·fᵢₜ (one cᵢ per answer, least squares) over ``rows``."""
    worst = 0.0
    for i in np.flatnonzero(rows.any(1)):
        c, x = C[i][rows[i]], f[i][rows[i]]
        if not np.any(x):
            if np.any(c):
                return float("inf")
            continue
        k = float(c @ x / (x @ x))
        worst = max(worst, float(np.abs(c - k * x).max() / max(np.abs(c).max(), 1e-300)))
    return worst


def _identity(
    batches: list[_Batch], fit: dict[str, Any], weight: str, rng: np.random.Generator
) -> list[dict[str, Any]]:
    """Per binary group: c of the on-policy step and of the moved one's surrogate on random token scores, with the
    per-sample weight ``weight`` and the importance-weighted scores of the fitted law (theorem G10), and the
    worse residual of the two fits."""
    law = fit.get("nearest", fit["law"])
    rows = []
    for b in batches:
        w, r = b.factor(law, fit["kl"])  # w per token: only to take the KL term out
        u = 1.0 / np.maximum(b.M.sum(1), 1.0) if weight == "1/length" else np.ones(b.M.shape[0])  # (n,) uᵢ
        omega = _importance(law, b.moved["log_ratio_old"], b.M)
        f = _kl_push(fit["kl"], law, b.moved["log_ratio_old"], b.moved["log_ratio_ref"], b.M)
        f0 = _kl_push(fit["kl"], law, b.base["log_ratio_old"], b.base["log_ratio_ref"], b.M)
        unclipped = b.live & (np.abs(r) > TOL)
        S = rng.standard_normal((*b.M.shape, 3)) * b.M[..., None]  # (n, T, d) token scores
        on = (b.base["coefficients"] - b.beta * w * f0)[..., None] * S
        off = (b.moved["coefficients"] - b.beta * w * f)[..., None] * S
        s_on = u[:, None] * S.sum(1)  # (n, d): sᵢʷ = uᵢ Σₜ Sᵢₜ
        s_off = u[:, None] * ((omega * unclipped)[..., None] * S).sum(1)  # (n, d): s̃ᵢʷ = uᵢ Σₜ ωᵢₜ 1{unclipped} Sᵢₜ
        for g in range(len(b.r) // b.G):
            idx = np.arange(g * b.G, (g + 1) * b.G)
            pos, neg = idx[b.r[idx] == b.r[idx].max()], idx[b.r[idx] < b.r[idx].max()]
            if neg.size == 0:
                continue
            c_on, res_on = group_coefficient(on[idx].sum((0, 1)), s_on, pos, neg)
            c_off, res_off = group_coefficient(off[idx].sum((0, 1)), s_off, pos, neg)
            rows.append(
                {
                    "G": b.G,
                    "k": int(pos.size),
                    "c_on_policy": c_on,
                    "c_off_policy": c_off,
                    "ratio": c_off / c_on if c_on else float("nan"),
                    "residual": max(res_on, res_off),
                }
            )
    return rows


def group_coefficient(grad: np.ndarray, s: np.ndarray, pos: np.ndarray, neg: np.ndarray) -> tuple[float, float]:
    """The c of ``grad`` ≈ c·(s̄₊ − s̄₋) over the answers ``pos`` and ``neg`` of ``s`` (least squares), and the
    relative residual of that fit."""
    gap = s[pos].mean(0) - s[neg].mean(0)
    c = float(grad @ gap / max(float(gap @ gap), 1e-300))
    return c, float(np.linalg.norm(grad - c * gap) / max(float(np.linalg.norm(grad)), 1e-300))


def audit_off_policy(
    target: Callable[..., Any],
    settings: dict[str, Any],
    sizes: tuple[int, ...] = GROUP_SIZES,
    seed: int = 0,
    weight: str = "constant",
) -> tuple[dict[str, Any], list[Finding]]:
    """Probe an off-policy target (see the module docstring): the measurements (:attr:`GradientFit.off_policy
    <grpo_identity.checks.report.GradientFit.off_policy>`) and their findings.  ``settings``: the target's
    ``info["off_policy"]``, shown in the report; ``weight``: the per-sample weight law the gradient level
    named (:data:`~grpo_identity.checks.report.WEIGHTS`; 'constant', '1/length' or '1/step_tokens', constant
    within a batch), with which the identity is checked (another law: the identity is not checked)."""
    from grpo_identity.checks.frameworks import answer_lengths
    from grpo_identity.checks.measure.infer import probe_batch

    t0 = time.perf_counter()
    batches = []
    for G in sizes:
        r = probe_batch(G)
        L = answer_lengths(r.size)
        base, moved = (_call(target, r, G, L, scale, seed) for scale in (0.0, PERTURBATION))
        batches.append(_Batch(G, r, base, moved))
    fit = _fit(batches)
    out: dict[str, Any] = {
        "importance_weight": fit["law"],
        "importance_weight_means": IMPORTANCE_LAWS[fit["law"]],
        "fit_residual": fit["residual"],
        "nearest_law": fit.get("nearest"),
        "kl_law": fit["kl"],
        "beta": batches[0].beta,
        **_clip_rule(batches, fit),
        **_silent(batches, fit),
    }
    checked = fit["law"] != "other" and weight in IDENTITY_WEIGHTS
    table = _identity(batches, fit, weight, np.random.default_rng(seed)) if checked else []
    out["identity"] = table
    out["identity_weight"] = weight
    out["identity_holds"] = (
        all(row["residual"] <= TOL and abs(row["ratio"] - 1) <= TOL for row in table) if checked else None
    )
    out["perturbation"] = {"seed": seed, "scale": PERTURBATION, "group_sizes": list(sizes)}
    out["settings"] = dict(settings)
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out, _findings(out)


def _findings(out: dict[str, Any]) -> list[Finding]:
    found = []
    size = out.get("silent_size")
    if size and out["beta"] > 0 and size.get("kl_law") in KL_LAWS:
        found.append(Finding("kl_moves_silent_groups", _kl_message(out), dict(size), "deviation"))
    elif size:
        why = "with β = 0" if not out["beta"] else "that no KL law explains (neither k3 nor k3·ratio)"
        message = (
            f"off-policy, silent groups (σ = 0) get a gradient {why}: token coefficients up to "
            f"{size['max_abs']:.3g} ({size['max_ratio']:.3g}× the largest of the non-silent answers')"
        )
        found.append(Finding("off_policy_silent_groups", message, dict(size)))
    law = out["importance_weight"]
    if law in ("none", "other"):
        nearest = f" (nearest: {out['nearest_law']}, residual {out['fit_residual']:.3g})" if law == "other" else ""
        message = f"off-policy importance weight: {law}{nearest}: {IMPORTANCE_LAWS[law]}"
        found.append(Finding("importance_weight", message, {}, "note"))
    if out["clip_rule_matches"] is False:
        clip = out["clip"]
        delta = "" if clip["delta"] is None else f", δ = {clip['delta']}"
        message = (
            f"the loss does not clip as configured (ε = {clip['epsilon']}, ε_high = {clip['epsilon_high']}{delta}): "
            f"{out['clip_mismatched_tokens']} tokens "
            f"differ from min(ρÂ, clip(ρ)·Â)'s zero-gradient set (clipped share {out['clipped_share']:.3g}, the "
            f"configured rule's {out['clip_predicted_share']:.3g})"
        )
        found.append(Finding("clip_rule", message, dict(out["clip_example"]), "deviation"))
    if out["identity_holds"] is False:
        bad = [row for row in out["identity"] if row["residual"] > TOL or abs(row["ratio"] - 1) > TOL][0]
        message = (
            f"off-policy, the surrogate's update is not c·(s̃̄₊ʷ − s̃̄₋ʷ) with the on-policy c and importance-weighted "
            f"scores: at G={bad['G']}, k={bad['k']} c is {bad['ratio']:.6g}× the on-policy c, residual "
            f"{bad['residual']:.3g}"
        )
        found.append(Finding("identity_off_policy", message, {"group_size": bad["G"], "k": bad["k"]}))
    return found


def _kl_message(out: dict[str, Any]) -> str:
    size = out["silent_size"]
    fitted = size["kl_law"]
    law = KL_LAWS.get(fitted, "a form that is neither k3's nor k3·ratio's")
    return (
        f"off-policy, the KL term moves silent groups (σ = 0, zero advantage): their token coefficients reach "
        f"{size['max_ratio']:.3g}× the largest of the non-silent answers' (norm {size['norm_ratio']:.3g}× theirs) at "
        f"β = {out['beta']:g}; the k3 KL gradient is β(π_ref/π − 1)∇log π per token, independent of the advantage "
        f"(fitted here: {fitted}, {law}); the identity holds for the surrogate, the KL adds a push of its own"
    )


def numpy_off_policy_target(
    rewards: np.ndarray,
    G: int,
    lengths: np.ndarray,
    request: dict[str, Any] | None = None,
    *,
    law: str = "token",
    beta: float = 0.0,
    kl: str = "k3",
    clip: bool = True,
    epsilon: float = 0.2,
) -> dict[str, Any]:
    """An off-policy target made of numpy, for tests and the docs: TRL's advantages (the dial's ``TRL`` preset),
    a token-mean loss (every token weighs 1/(tokens of the batch)) of the clipped surrogate with importance law
    ``law`` (``token``, ``sequence`` or ``none``), ``clip`` or not, and β times the KL term ``kl`` (``k3`` or
    ``k3·ratio``), written out as a loss and differentiated by central differences in each token's
    log-probability (not from the probe's own laws).  The policy "moves" by seeded log-ratios of size
    ``3·scale`` to the old policy, which is also the reference."""
    A, M = reference_batch(rewards, G, lengths)
    n, T = M.shape
    spec = (request or {}).get("off_policy") or {"seed": 0, "scale": 0.0}
    lr = np.random.default_rng(spec["seed"]).normal(0.0, 3 * float(spec["scale"]), (n, T)) * M  # log π − log π_old
    objective = functools.partial(
        _written_objective,
        old=-lr,
        ref=-lr if beta else None,
        A=A,
        M=M,
        law=law,
        kl=kl,
        clip=clip,
        eps=epsilon,
        beta=beta,
    )
    grad = token_gradient(objective, np.zeros((n, T)))
    return {
        "advantages": A,
        "coefficients": grad / M.sum() * M,
        "mask": M,
        "log_ratio_old": lr,
        "log_ratio_ref": lr if beta else None,
        "beta": beta,
        "clip": {"epsilon": epsilon, "epsilon_high": epsilon, "delta": None},
    }


def reference_batch(rewards: np.ndarray, G: int, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The reference targets' batch: TRL's advantages (the dial's ``TRL`` preset), (n,), and the answers' token
    mask, (n, RESPONSE_LENGTH)."""
    from grpo_identity.checks.frameworks import RESPONSE_LENGTH

    r = np.asarray(rewards, dtype=np.float64)
    A = np.asarray(D.advantages(r.reshape(-1, G), dial=D.TRL)).reshape(-1)
    M = (np.arange(RESPONSE_LENGTH)[None, :] < np.asarray(lengths, dtype=int)[:, None]).astype(float)
    return A, M


def token_gradient(objective: Callable[[np.ndarray], np.ndarray], at: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """∂ objective/∂ lp per token (n, T) at log-probabilities ``at``, by central differences, one column at a time:
    ``objective(lp)`` gives each answer's objective (n,), and each answer's depends on its own tokens only."""
    grad = np.zeros_like(at, dtype=np.float64)
    for t in range(at.shape[1]):
        step = np.zeros_like(grad)
        step[:, t] = h
        grad[:, t] = (objective(at + step) - objective(at - step)) / (2 * h)
    return grad


def _written_objective(
    lp: np.ndarray,
    *,
    old: np.ndarray,
    ref: np.ndarray | None,
    A: np.ndarray,
    M: np.ndarray,
    law: str,
    kl: str,
    clip: bool,
    eps: float,
    beta: float = 1.0,
) -> np.ndarray:
    """Each answer's objective, (n,): Σₜ [min(ωÂ, clip(ω)Â) − β·KLₜ] over its tokens, at log-probabilities
    ``lp`` (0 is the moved policy's own), ω the token ratio, GSPO's sequence ratio or 1 (``law``)."""
    x = lp - old  # log ρ per token
    if law == "token":
        omega = np.exp(x)
    elif law == "sequence":
        omega = np.exp((x * M).sum(1, keepdims=True) / M.sum(1, keepdims=True)) * np.ones_like(x)
    else:
        omega = np.exp(lp)  # the ratio ignored: ∂/∂lp = 1 at the moved policy
    Ac = A[:, None] * np.ones_like(x)
    surrogate = C.clipped_surrogate(omega, Ac, eps, eps) if clip else omega * Ac
    term = np.asarray(surrogate)
    if ref is not None:
        y = ref - lp  # log(π_ref/π)
        k3 = np.exp(y) - y - 1
        term = term - beta * (omega * k3 if kl == "k3·ratio" else k3)
    return (term * M).sum(1)
