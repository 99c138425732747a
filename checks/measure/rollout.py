"""The three-policy probe: the rollout engine's policy μ, the trainer's π_old and π_θ (theorem G11).

A gradient target whose info carries ``"rollout_correction"`` (a dict: the documented ``estimator`` of
:data:`ESTIMATORS`, its ``cap`` C and, for a two-sided mask, its lower bound ``low`` α; the ``setting`` that chose
it) takes ``request = {"rollout": {"log_ratio": X, "correct": b}}`` as a fourth argument.  It scores the batch at
the current weights (ρ = π_θ/π_old = 1), gives the step rollout log-probabilities log μ = log π_old − X (X an
(n, T) array; ``None``: the rollout engine returned none), with the correction on (``correct`` true) or switched
off, and returns per row ``advantages`` (n,), ``mask`` (n, T), ``coefficients`` (n, T) (aᵢₜ = −∂loss/∂log π(yᵢₜ))
and ``old_logps`` (n, T), the trainer's log π_old.  What is measured, with ωᵢₜ = aᵢₜ/a⁰ᵢₜ the correction's factor
on each live token of a non-silent answer (a⁰ the step with the correction off):

- **the estimator**: ω at a seeded mismatch X against each estimator of :data:`ESTIMATORS` at the configured cap,
  also as it would be with the weight recomputed from π_θ and left in the graph (twice the detached weight below
  the cap, G11; 1 + L for a product over L tokens, by the same differentiation);
- **the on-policy limit**: ω at X = 0 is exactly 1 (G11), or the rollout log-probabilities are shifted by a token
  against the trainer's (ω then fits the estimator of log π_old,t − log π_old,t±1: found for the token-level
  estimators; an answer-level one reads as a failed on-policy limit);
- **missing and non-finite** rollout log-probabilities: refused (the target raises), or named: filled with 0
  (ω fits the estimator of log π_old), run as if on-policy, or non-finite coefficients;
- **a truncating sampler** (where ``settings["sampler"]`` names one: top-p, top-k): the step given the engine's
  log-probabilities as such a sampler reports them, renormalised over the tokens it keeps (``"sampler": true`` in the
  request; the target returns each token's ``kept_mass`` S), at X = 0: ω = 1 where the trainer replays the
  truncation, the estimator of log S where it does not (G11: every sampled token's ratio is its kept mass; trl #6789);
- **the identity with importance-weighted scores** (G11): per binary group, on random token scores, the corrected
  update is c·(s̃̄₊ − s̃̄₋), s̃ᵢ = uᵢ Σₜ ωᵢₜ Sᵢₜ with ω the *documented* estimator's weights (the fitted one's where
  none is documented), and c the uncorrected step's: an update that departs from the documented correction fails.

>>> out, findings = audit_rollout(numpy_rollout_target, {"estimator": "token_truncate", "cap": 2.0})
>>> out["estimator"], out["on_policy_weight_one"], out["missing"], out["identity_holds"], findings
('token_truncate', True, 'refused', True, [])
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable

import numpy as np

from grpo_identity import closed_forms as C
from grpo_identity.checks.report import Finding

__all__ = [
    "ESTIMATORS",
    "MISMATCH",
    "attempt",
    "audit_rollout",
    "estimator_weights",
    "numpy_rollout_target",
    "seeded_old_logps",
]

#: the correction estimators and what each does to the update (r = π_old/μ per token)
ESTIMATORS = {
    "none": "no correction: every token weighs 1, whatever the rollout engine sampled",
    "token_truncate": "min(r, C) per token (truncated importance sampling; clamp(r, α, C) where a floor α is set)",
    "token_mask": "r per token where α ≤ r ≤ C, else 0 (masked importance sampling; IcePop's two-sided mask, α > 0)",
    "sequence_truncate": "min(Πₜ rₜ, C) per answer: the product of its token ratios, exp(L·δ) for a mismatch δ a token",
    "sequence_mask": "Πₜ rₜ per answer where α ≤ Π ≤ C, else 0",
    "geometric_truncate": "min(exp(meanₜ log rₜ), C) per answer: the geometric mean, exp(δ) for a mismatch δ per token",
    "geometric_mask": "exp(meanₜ log rₜ) per answer where α ≤ it ≤ C, else 0",
    "geometric_gate": "rₜ per token, the answer kept only where α ≤ exp(meanₜ log rₜ) ≤ C (else 0)",
}
#: the seeded mismatch: log π_old − log μ ~ N(0, MISMATCH²) per token
MISMATCH = 0.5
#: group sizes of the probe (each one batch of :func:`~grpo_identity.checks.measure.infer.probe_batch`)
GROUP_SIZES = (4,)
#: what the non-finite probe puts in place of log π_old − log μ on three tokens: μ = 0, NaN, an overflowing ratio
NON_FINITE = (np.inf, np.nan, 90.0)
NON_FINITE_NAMES = ("log mu = -inf", "log mu = NaN", "r = e^90")
#: the cap of an estimator configured without one
_NO_CAP = 1e300
#: tolerance of every fit: float32 losses
TOL = 1e-3


def seeded_old_logps(shape: tuple[int, ...]) -> np.ndarray:
    """A trainer's log π_old per token for a probe that builds its own batch: seeded, varied across tokens (so that
    a shifted engine is told from an aligned one), log U(0.05, 0.95)."""
    return np.log(np.random.default_rng(7).uniform(0.05, 0.95, shape))


def estimator_weights(name: str, x: np.ndarray, M: np.ndarray, cap: float, low: float = 0.0) -> np.ndarray:
    """ωᵢₜ of estimator ``name`` at log-ratios ``x`` = log π_old − log μ (n, T) on the live tokens ``M``
    (:data:`ESTIMATORS`; the formulas are theorem G11's twins in :mod:`grpo_identity.closed_forms`)."""
    live = M > 0
    if name == "none":
        return np.ones_like(x)
    level, _, mode = name.partition("_")
    if level == "token":
        r = np.exp(np.where(live, x, 0.0))
    else:
        rows = [x[i][live[i]] if live[i].any() else np.zeros(1) for i in range(x.shape[0])]
        ratio = C.sequence_product_ratio if level == "sequence" else C.sequence_ratio
        r = np.array([float(ratio(v)) for v in rows])[:, None] * np.ones_like(x)
    r = np.clip(r, 1e-300, 1e300)
    if mode == "gate":
        kept = np.asarray(C.masked_weight(r, low, cap)) > 0
        return np.where(kept, estimator_weights("token_mask", x, M, _NO_CAP), 0.0)
    if mode == "truncate":
        return np.maximum(np.asarray(C.truncated_weight(r, cap), dtype=np.float64), low)
    return np.asarray(C.masked_weight(r, low, cap), dtype=np.float64)


def _in_graph(name: str, w: np.ndarray, x: np.ndarray, M: np.ndarray, cap: float, low: float) -> np.ndarray:
    """ω as measured where the weight is recomputed from π_θ and left in the graph (G11): the detached weight
    times 2 (a token's ratio, a geometric mean) or 1 + L (a product of L ratios) where it is open (not capped,
    not masked out)."""
    if name == "none":
        return w
    level, _, mode = name.partition("_")
    raw = estimator_weights(f"{level}_mask", x, M, _NO_CAP, 0.0)  # the ratio itself
    open_ = ((raw < cap) & (raw > low)) if mode == "truncate" else (w != 0)
    factor = (1.0 + M.sum(1, keepdims=True)) if level == "sequence" else 2.0
    return np.where(open_, w * factor, w)


class _Calls:
    """The probe's calls of one group size: the step with the correction off, at X = 0, at the seeded X."""

    def __init__(self, target: Callable[..., Any], G: int, seed: int) -> None:
        from grpo_identity.checks.frameworks import RESPONSE_LENGTH, answer_lengths
        from grpo_identity.checks.measure.infer import probe_batch

        self.target, self.G = target, G
        self.r = probe_batch(G)
        self.L = answer_lengths(self.r.size)
        n = self.r.size
        self.zero = np.zeros((n, RESPONSE_LENGTH))
        self.x = np.random.default_rng(seed).normal(0.0, MISMATCH, (n, RESPONSE_LENGTH))
        self.off = self.call(self.zero, correct=False)
        self.M, self.A, self.old = self.off["mask"], self.off["advantages"], self.off["old_logps"]
        R = self.r.reshape(-1, G)
        silent = np.repeat(R.max(1) == R.min(1), G)
        self.live = (~silent & (self.A != 0))[:, None] & (self.M > 0) & (self.off["coefficients"] != 0)

    def call(self, x: np.ndarray | None, correct: bool = True, sampler: bool = False) -> dict[str, Any]:
        spec = {"log_ratio": x, "correct": correct, **({"sampler": True} if sampler else {})}
        out = self.target(self.r, self.G, self.L, {"rollout": spec})
        keys = ("advantages", "coefficients", "mask", "old_logps", *(("kept_mass",) if sampler else ()))
        got = {k: np.asarray(out[k], dtype=np.float64) for k in keys}
        got["advantages"] = got["advantages"].reshape(-1)
        return got

    def weights(self, out: dict[str, Any]) -> np.ndarray:
        """ω on the live tokens (1 elsewhere)."""
        base = np.where(self.live, self.off["coefficients"], 1.0)
        return np.where(self.live, out["coefficients"] / base, 1.0)


def _residual(measured: np.ndarray, expected: np.ndarray, where: np.ndarray) -> float:
    if not where.any():
        return float("nan")
    return float(np.max(np.abs(measured[where] - expected[where]) / np.maximum(np.abs(expected[where]), 1.0)))


def _fit(batches: list[_Calls], omegas: list[np.ndarray], xs: list[np.ndarray], cap: float, low: float,
         where: list[np.ndarray] | None = None, documented: str | None = None) -> tuple[str, bool, float]:  # fmt: skip
    """The estimator (and whether it is in the graph) that explains ω, and its residual: the documented one where
    it does (estimators can agree on a probe: a mask whose bound no weight reaches is its truncation), else the
    best of the others."""
    best = ("other", False, float("inf"))
    first = [documented] if documented in ESTIMATORS else []
    for name in [*first, *(e for e in ESTIMATORS if e != documented)]:
        for attached in (False, True):
            worst = 0.0
            for i, b in enumerate(batches):
                w = estimator_weights(name, xs[i], b.M, cap, low)
                w = _in_graph(name, w, xs[i], b.M, cap, low) if attached else w
                res = _residual(omegas[i], w, b.live if where is None else where[i])
                worst = max(worst, res if res == res else 0.0)
            if worst < best[2]:
                best = (name, attached, worst)
            if name == documented and not attached and worst <= TOL:
                return best
    return best if best[2] <= TOL else ("other", False, best[2])


def _shifted(old: np.ndarray, M: np.ndarray, step: int) -> tuple[np.ndarray, np.ndarray]:
    """log π_old,t − log π_old,t−step: the log-ratio an engine's log-probabilities shifted by ``step`` tokens give
    at μ = π_old, and the tokens where the shift stays inside the answer."""
    moved = np.roll(old, step, axis=1)
    inside = np.roll(M, step, axis=1) * M > 0
    if step > 0:
        inside[:, :step] = False
    else:
        inside[:, step:] = False
    return np.where(inside, old - moved, 0.0), inside


def audit_rollout(
    target: Callable[..., Any], settings: dict[str, Any], sizes: tuple[int, ...] = GROUP_SIZES, seed: int = 0
) -> tuple[dict[str, Any], list[Finding]]:
    """Probe a three-policy target (the module docstring): the measurements and their findings.  ``settings``:
    the target's ``info["rollout_correction"]`` (``estimator``, ``cap``, ``low``, ``setting``)."""
    t0 = time.perf_counter()
    cap, low = float(settings.get("cap") or _NO_CAP), float(settings.get("low") or 0.0)
    batches = [_Calls(target, G, seed) for G in sizes]
    documented = settings.get("estimator")
    corrected = [b.call(b.x) for b in batches]
    mismatch = [b.weights(out) for b, out in zip(batches, corrected)]
    equal = [b.weights(b.call(b.zero)) for b in batches]
    on_policy = max(_residual(w, np.ones_like(w), b.live) for w, b in zip(equal, batches)) <= TOL
    # a cap below 1 (a mask that leaves 1 out) weighs equal log-probabilities so, as configured (G11)
    configured = not on_policy and _explained(
        _fit(batches, equal, [b.zero for b in batches], cap, low, None, documented)
    )
    shift = None if on_policy or configured else _shift(batches, equal, cap, low)
    xs, where = [b.x for b in batches], None
    if shift:  # the weights the step computes: log π_old,t − log μ of the token shift places before
        pairs = [_shifted(b.old, b.M, shift) for b in batches]
        xs = [x + np.roll(b.x, shift, axis=1) for b, (x, _) in zip(batches, pairs)]
        where = [b.live & inside for b, (_, inside) in zip(batches, pairs)]
    name, attached, residual = _fit(batches, mismatch, xs, cap, low, where, documented)
    out: dict[str, Any] = {
        "estimator": name,
        "estimator_means": ESTIMATORS.get(name, "no known estimator"),
        "in_graph": attached,
        "fit_residual": residual,
        "documented": documented,
        "on_policy_weight_one": on_policy,
        "on_policy_as_configured": on_policy or configured,
        "on_policy_weight_range": _live_range(equal, batches),
        "shift": shift,
        **_missing(batches, equal, cap, low),
        **_non_finite(batches),
    }  # fmt: skip
    judge = documented if documented in ESTIMATORS else name  # the documented objective, else what the code computes
    checked = judge != "other"
    if settings.get("sampler"):
        out.update(_support(batches, equal, judge if checked else "token_truncate", cap, low))
    weights = [estimator_weights(judge, b.x, b.M, cap, low) for b in batches] if checked else []
    out["identity_estimator"] = judge if checked else None
    out["identity"] = _identity(batches, corrected, weights, np.random.default_rng(seed)) if checked else []
    out["identity_holds"] = not any(map(_off, out["identity"])) if checked else None
    out["mismatch"] = {"seed": seed, "scale": MISMATCH, "group_sizes": list(sizes)}
    out["settings"] = dict(settings)
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out, _findings(out)


def _shift(batches: list[_Calls], equal: list[np.ndarray], cap: float, low: float) -> int | None:
    """The shift (±1 token) whose log-ratios explain ω at μ = π_old, or None."""
    for step in (1, -1):
        pairs = [_shifted(b.old, b.M, step) for b in batches]
        where = [b.live & inside for b, (_, inside) in zip(batches, pairs)]
        if _explained(_fit(batches, equal, [x for x, _ in pairs], cap, low, where)):
            return step
    return None


def _explained(fit: tuple[str, bool, float]) -> bool:
    """Whether a fit names an estimator that weighs something (not 'other', not 'none')."""
    return fit[0] not in ("other", "none")


def _missing(batches: list[_Calls], equal: list[np.ndarray], cap: float, low: float) -> dict[str, Any]:
    """What the step does without rollout log-probabilities: 'refused', 'on-policy' (ω as with equal ones),
    'filled with 0' (ω fits the estimator of log π_old − 0), 'non-finite', 'crashed' or 'other'."""
    outs, (outcome, message) = _attempt_step(lambda: [b.call(None) for b in batches])
    if outs is None:
        return {"missing": outcome, "missing_message": message}
    got = [b.weights(out) for b, out in zip(batches, outs)]
    if not all(np.isfinite(w).all() for w in got):
        return {"missing": "non-finite"}
    if max(_residual(w, e, b.live) for w, e, b in zip(got, equal, batches)) <= TOL:
        return {"missing": "on-policy"}
    filled = _explained(_fit(batches, got, [b.old for b in batches], cap, low))
    return {"missing": "filled with 0" if filled else "other"}


def attempt(call: Callable[[], Any]) -> tuple[Any, tuple[str, str]]:
    """``call()``'s output and ('', ''), or None and how the target declined: ('refused', its message) for a
    ValueError, ('crashed', its message) for any other exception, ('unsupported', its message) where the driver
    could not run the step (:func:`_driver_failed`: that says nothing of the framework).  A target that died, hung
    or answered malformed ends the probe."""
    from grpo_identity.checks.calls.target import TargetError

    try:
        return call(), ("", "")
    except (TargetError, ValueError, TypeError, KeyError, RuntimeError, AttributeError, AssertionError) as exc:
        if isinstance(exc, TargetError) and type(exc) is not TargetError:  # it died, hung or answered malformed
            raise
        outcome = "unsupported" if _driver_failed(exc) else "refused" if _refusal(exc) else "crashed"
        return None, (outcome, _said(exc))


def _attempt_step(call: Callable[[], Any]) -> tuple[Any, tuple[str, str]]:
    """:func:`attempt`, a driver that could not run the step ending the probe (a note)."""
    from grpo_identity.checks.calls.target import TargetError

    got, (outcome, message) = attempt(call)
    if outcome == "unsupported":
        raise TargetError(f"the driver could not run the three-policy step: {message}")
    return got, (outcome, message)


def _driver_failed(exc: BaseException) -> bool:
    """Whether the driver raised it: it could not run the step (an ``AdapterError``, a method it does not have)."""
    from grpo_identity.checks.calls.target import TargetError
    from grpo_identity.checks.frameworks import AdapterError

    text = str(exc)
    return isinstance(exc, (AdapterError, NotImplementedError)) or (
        type(exc) is TargetError and text.startswith(("AdapterError", "NotImplementedError"))
    )


def _refusal(exc: BaseException) -> bool:
    """A refusal is a ValueError, raised here or (a plain TargetError naming it) in the target's child process;
    any other exception is a crash."""
    from grpo_identity.checks.calls.target import TargetError

    return isinstance(exc, ValueError) or (type(exc) is TargetError and str(exc).startswith("ValueError"))


def _said(exc: BaseException) -> str:
    text = str(exc) if type(exc).__name__ == "TargetError" else f"{type(exc).__name__}: {exc}"
    return text.splitlines()[0] if text else type(exc).__name__


def _non_finite(batches: list[_Calls]) -> dict[str, Any]:
    """The step given each of log μ = −inf, NaN and log π_old − 90 (a ratio that overflows float32) on one token,
    one call each: per value its outcome (``non_finite_weights``: the token's weight, or 'refused', 'crashed',
    'non-finite'), and overall 'crashed' or 'non-finite' where any was, 'finite' where μ = 0 or NaN was given a
    weight, else 'refused' (the large ratio may be weighed: its estimator caps it)."""
    b = batches[0]
    row = int(np.flatnonzero(b.live.any(1))[0])
    t = int(np.flatnonzero(b.live[row])[0])
    outcomes: dict[str, Any] = {}
    said = ""
    for name, value in zip(NON_FINITE_NAMES, NON_FINITE):
        x = b.x.copy()
        x[row, t] = value
        got, (outcome, message) = _attempt_step(functools.partial(b.call, x))
        if got is None:
            outcomes[name], said = outcome, said or message
            continue
        finite = np.isfinite(got["coefficients"]).all()
        outcomes[name] = float(b.weights(got)[row, t]) + 0.0 if finite else "non-finite"  # (no −0)
    kinds = {v if isinstance(v, str) else "finite" for v in outcomes.values()}
    taken = any(not isinstance(outcomes[k], str) for k in NON_FINITE_NAMES[:2])  # μ = 0 or NaN given a weight
    overall = next((k for k in ("non-finite", "crashed") if k in kinds), "finite" if taken else "refused")
    return {"non_finite": overall, "non_finite_weights": outcomes, **({"non_finite_message": said} if said else {})}


def _support(batches: list[_Calls], equal: list[np.ndarray], estimator: str, cap: float, low: float
             ) -> dict[str, Any]:  # fmt: skip
    """The step given the engine's log-probabilities as the configured truncating sampler reports them (renormalised
    over its kept tokens), the policies otherwise equal: 'replayed' (ω as with equal log-probabilities, ``equal``:
    the trainer renormalises its own over the same tokens), 'truncated' (ω is ``estimator`` of log S, S each token's
    kept mass: G11), 'other', 'untruncated' (the sampler kept the whole distribution at every probed token) or
    'indistinguishable' (the estimator weighs log S as it weighs 0 there: a cap below every kept mass)."""
    outs = [b.call(b.zero, sampler=True) for b in batches]
    got = [b.weights(out) for b, out in zip(batches, outs)]
    mass = [np.where(b.M > 0, out["kept_mass"], 1.0) for b, out in zip(batches, outs)]
    spread = _live_range(mass, batches)
    if spread[0] > 1 - TOL:  # the sampler kept every token's whole distribution here: nothing to tell
        return {"support": "untruncated", "kept_mass_range": spread}
    expected = [estimator_weights(estimator, np.log(m), b.M, cap, low) for m, b in zip(mass, batches)]
    at_one = [estimator_weights(estimator, np.zeros_like(m), b.M, cap, low) for m, b in zip(mass, batches)]
    if max(_residual(e, o, b.live) for e, o, b in zip(expected, at_one, batches)) <= TOL:
        return {"support": "indistinguishable", "kept_mass_range": spread}
    if max(_residual(w, e, b.live) for w, e, b in zip(got, equal, batches)) <= TOL:
        return {"support": "replayed", "kept_mass_range": spread}
    fits = max(_residual(w, e, b.live) for w, e, b in zip(got, expected, batches)) <= TOL
    weights = _live_range(got, batches)
    return {"support": "truncated" if fits else "other", "kept_mass_range": spread, "support_weight_range": weights}


def _live_range(values: list[np.ndarray], batches: list[_Calls]) -> list[float]:
    """The least and the greatest of ``values`` on the live tokens of every batch."""
    return [float(min(v[b.live].min() for v, b in zip(values, batches))),
            float(max(v[b.live].max() for v, b in zip(values, batches)))]  # fmt: skip


def _identity(
    batches: list[_Calls], corrected: list[dict[str, Any]], omegas: list[np.ndarray], rng: np.random.Generator
) -> list[dict[str, Any]]:
    """Per binary group: c of the corrected step (its measured coefficients, ``corrected``) over c of the uncorrected
    one, with s̃ᵢ = uᵢ Σₜ ωᵢₜ Sᵢₜ and ω the weights of the estimator the step is judged by (not the measured ones)."""
    from grpo_identity.checks.measure.offpolicy import group_coefficient

    rows = []
    for b, step, omega in zip(batches, corrected, omegas):
        a = np.where(b.live, step["coefficients"], 0.0)
        per_token = np.where(b.live, b.off["coefficients"] / np.where(b.A == 0, 1.0, b.A)[:, None], 0.0)
        u = per_token.sum(1) / np.maximum(b.live.sum(1), 1)  # (n,): the answer's weight uᵢ, a⁰ᵢₜ = uᵢÂᵢ
        S = rng.standard_normal((*b.M.shape, 3)) * b.live[..., None]
        on, off = b.off["coefficients"][..., None] * S, a[..., None] * S
        s_on, s_off = u[:, None] * S.sum(1), u[:, None] * (omega[..., None] * S).sum(1)
        for g in range(len(b.r) // b.G):
            idx = np.arange(g * b.G, (g + 1) * b.G)
            pos, neg = idx[b.r[idx] == b.r[idx].max()], idx[b.r[idx] < b.r[idx].max()]
            if neg.size == 0:
                continue
            c_on, res_on = group_coefficient(on[idx].sum((0, 1)), s_on, pos, neg)
            c_off, res_off = group_coefficient(off[idx].sum((0, 1)), s_off, pos, neg)
            ratio = c_off / c_on if c_on else float("nan")
            rows.append({"G": b.G, "k": int(pos.size), "ratio": ratio, "residual": max(res_on, res_off)})
    return rows


def _findings(out: dict[str, Any]) -> list[Finding]:
    found = []
    name, documented = out["estimator"], out["documented"]
    if out["in_graph"]:
        message = (
            f"the rollout correction ({name}) is recomputed from π_θ and left in the graph: below its cap each token's "
            "gradient is twice the detached weight's (theorem G11; 1 + L for a product of L ratios)"
        )
        found.append(Finding("correction_in_graph", message, {"estimator": name}))
    if name == "other":
        message = f"the rollout correction's weights fit no known estimator (best residual {out['fit_residual']:.3g})"
        found.append(Finding("correction_estimator", message, {}, "deviation"))
    elif documented and name != documented:
        message = (
            f"the rollout correction computes {name} ({ESTIMATORS[name]}), not the documented {documented} "
            f"({ESTIMATORS.get(documented, '?')})"
        )
        found.append(Finding("correction_estimator", message, {"documented": documented}, "deviation"))
    if out["shift"]:
        message = (
            f"the rollout log-probabilities are shifted by {out['shift']:+d} token against the trainer's: with equal "
            "policies the weights are π_old,t/π_old,t∓1, not 1"
        )
        found.append(Finding("rollout_logps_shifted", message, {"shift": out["shift"]}))
    elif not out["on_policy_weight_one"] and not out["in_graph"]:
        lo, hi = out["on_policy_weight_range"]
        message = (
            f"with rollout log-probabilities equal to the trainer's the correction weighs tokens {lo:.4g} … {hi:.4g}, "
            "not 1 (theorem G11: every estimator is 1 there, for a cap C ≥ 1 and a mask's bounds α ≤ 1 ≤ β)"
        )
        if out["on_policy_as_configured"]:
            message += f"; so configured ({(out['settings'] or {}).get('setting') or 'its cap or bounds'})"
        severity = "deviation" if out["on_policy_as_configured"] else "fail"
        found.append(Finding("correction_on_policy", message, {"range": [lo, hi]}, severity))
    missing = out["missing"]
    if missing == "filled with 0":
        message = "missing rollout log-probabilities are filled with 0 (μ := 1): each token weighs π_old(y) itself"
        found.append(Finding("rollout_logps_filled", message, {}))
    elif missing in ("on-policy", "other", "non-finite", "crashed"):
        said = f" ({out['missing_message']})" if out.get("missing_message") else ""
        how = "crashes" if missing == "crashed" else f"runs ({missing})"
        message = f"without rollout log-probabilities the step {how}{said} instead of refusing with a ValueError"
        severity = "note" if missing == "on-policy" else "fail"
        found.append(Finding("rollout_logps_missing", message, {"missing": missing}, severity))
    outcomes = ", ".join(
        f"{k}: {v if isinstance(v, str) else f'{v:.4g}'}" for k, v in out["non_finite_weights"].items()
    )
    if out["non_finite"] in ("non-finite", "crashed"):
        said = f"; {out['non_finite_message']}" if out.get("non_finite_message") else ""
        message = "non-finite rollout log-probabilities reach the gradient as inf or NaN, or crash the step "
        message += f"({outcomes}{said})"
        found.append(Finding("correction_non_finite", message, dict(out["non_finite_weights"])))
    elif out["non_finite"] == "finite":
        message = f"non-finite rollout log-probabilities are taken without a word, their tokens weighed ({outcomes})"
        found.append(Finding("rollout_logps_non_finite", message, dict(out["non_finite_weights"]), "deviation"))
    if out.get("support") in ("truncated", "other"):
        lo, hi = out["support_weight_range"]
        how = (
            f"each token weighs {out.get('identity_estimator') or 'its estimator'} of its position's kept mass S"
            if out["support"] == "truncated"
            else "the weights follow no rule of the kept mass"
        )
        message = (
            f"the rollout engine's log-probabilities are renormalised over the tokens its sampler keeps "
            f"({(out['settings'] or {}).get('sampler')}) and the trainer's over the whole vocabulary: with equal "
            f"policies {how} ({lo:.4g} … {hi:.4g}), not what equal log-probabilities give (G11)"
        )
        found.append(Finding("rollout_support_truncated", message, {"weights": [lo, hi]}))
    if out["identity_holds"] is False:
        bad = next(filter(_off, out["identity"]))
        message = (
            f"with the rollout correction the update is not c·(s̃̄₊ − s̃̄₋) with the uncorrected c and ω-weighted scores: "
            f"at G={bad['G']}, k={bad['k']} c is {bad['ratio']:.6g}× it, residual {bad['residual']:.3g}"
        )
        found.append(Finding("identity_three_policy", message, {"group_size": bad["G"], "k": bad["k"]}))
    return found


def _off(row: dict[str, Any]) -> bool:
    """Whether a row of the identity's check fails it: a residual or a ratio off by more than TOL, or not a number."""
    return not (row["residual"] <= TOL and abs(row["ratio"] - 1) <= TOL)


# --- a reference target, for tests and the docs -------------------------------------------------------------
def numpy_rollout_target(
    rewards: np.ndarray,
    G: int,
    lengths: np.ndarray,
    request: dict[str, Any] | None = None,
    *,
    estimator: str = "token_truncate",
    cap: float = 2.0,
    low: float = 0.0,
    plant: str | None = None,
) -> dict[str, Any]:
    """A three-policy target made of numpy: TRL's advantages, a token-mean loss of ω·ρ·Â with ω the estimator's
    weight of log π_old − log μ (written out here, not taken from the probe's formulas), differentiated by central
    differences in each token's log-probability.  ``plant`` breaks it as released code has: ``in_graph`` (ω from
    log π_θ, not detached), ``shift`` (log μ of the token before), ``fill`` (missing log μ taken as 0), ``skip``
    (no correction without log μ), ``unguarded`` (no check of non-finite log μ), ``nan_as_equal`` (a NaN log μ
    taken as log π_old, an infinite one kept), ``cap_below_one`` (the cap at 0.5), ``product`` (the product where
    the geometric mean is asked), ``full_vocab`` (given a truncating sampler's log-probabilities, renormalised over
    the tokens it keeps, it weighs them against its own over the whole vocabulary: trl #6789; by default it
    renormalises its log π_old over the same tokens).  Its sampler keeps a seeded mass S ∈ [0.7, 1) at each token."""
    from grpo_identity.checks.measure.offpolicy import reference_batch, token_gradient

    A, M = reference_batch(rewards, G, lengths)
    n, T = M.shape
    old = seeded_old_logps((n, T))
    spec = (request or {}).get("rollout") or {"log_ratio": np.zeros((n, T)), "correct": False}
    x = spec["log_ratio"]
    if x is None and plant not in ("fill", "skip"):
        raise ValueError("the rollout correction needs the rollout engine's log-probabilities; none were given")
    if x is None and plant == "skip":
        spec, x = {"correct": False}, np.zeros((n, T))
    mu = np.zeros((n, T)) if x is None else old - np.asarray(x, dtype=np.float64)
    if plant == "nan_as_equal":
        mu = np.where(np.isnan(mu), old, mu)
    elif plant != "unguarded" and not np.isfinite(mu[M > 0]).all():
        raise ValueError("non-finite rollout log-probabilities")
    mu = np.roll(mu, 1, axis=1) if plant == "shift" else mu
    kept = np.where(M > 0, np.random.default_rng(11).uniform(0.7, 1.0, (n, T)), 1.0)
    if spec.get("sampler"):  # the engine's log-probabilities renormalised over the tokens its sampler keeps
        mu = mu - np.log(kept)
    reference = old - np.log(kept) if spec.get("sampler") and plant != "full_vocab" else old  # replays the truncation
    computed = estimator.replace("geometric", "sequence") if plant == "product" else estimator
    rule = functools.partial(_weight, estimator=computed, cap=0.5 if plant == "cap_below_one" else cap, low=low, M=M)

    def loss(lp: np.ndarray) -> np.ndarray:
        omega = rule((lp if plant == "in_graph" else reference) - mu) if spec.get("correct") else np.ones_like(lp)
        with np.errstate(invalid="ignore", over="ignore"):
            return (omega * np.exp(lp - old) * A[:, None] * M).sum(1)

    grad = token_gradient(loss, old)
    return {"advantages": A, "coefficients": grad / M.sum() * M, "mask": M, "old_logps": old, "kept_mass": kept}


def _weight(x: np.ndarray, *, estimator: str, cap: float, low: float, M: np.ndarray) -> np.ndarray:
    """The correction weight per token, written out in numpy (the reference target's own arithmetic)."""
    level, _, mode = estimator.partition("_")
    with np.errstate(over="ignore", invalid="ignore"):
        if level == "token":
            r = np.exp(x)
        elif level == "sequence":
            r = np.exp((x * M).sum(1, keepdims=True)) * np.ones_like(x)
        else:
            r = np.exp((x * M).sum(1, keepdims=True) / M.sum(1, keepdims=True)) * np.ones_like(x)
        if mode == "truncate":
            return np.clip(r, low, cap)
        if mode == "gate":
            return np.where((r >= low) & (r <= cap), np.exp(x), 0.0)
        return np.where((r >= low) & (r <= cap), r, 0.0)
