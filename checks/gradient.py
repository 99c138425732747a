"""The gradient-level audit: the per-sample weight a framework's loss puts on each answer, and
whether its gradient keeps the identity g = c(k, G)·(s̄₊ʷ − s̄₋ʷ) (theorem G1).

A gradient target is ``fn(rewards, G, lengths) -> {"advantages", "coefficients", "mask"}``: the
advantages Âᵢ it computed and aᵢₜ = −∂loss/∂log π(yᵢₜ) for every response token (autograd through
the framework's own loss).  By the chain rule the parameter gradient is Σᵢₜ aᵢₜ ∇log π(yᵢₜ), so
these coefficients are the whole story:

- aᵢₜ constant over an answer's tokens: a per-answer coefficient aᵢ, and sᵢ = Σₜ ∇log π(yᵢₜ);
- the per-sample weight uᵢ = aᵢ/Âᵢ, compared across answers of different lengths and across two
  batches with different token totals: ``constant``, ``1/length`` (length bias), ``1/step_tokens`` (batch
  coupling: the weight depends on every answer of the batch) or ``1/group_tokens`` (each group's tokens: DAPO's
  per-prompt reading);
- silent groups (σ = 0) get aᵢₜ = 0 exactly;
- G1: with wᵢ the named weight, g_group = Σᵢ aᵢ sᵢ equals c·(s̄₊ʷ − s̄₋ʷ), s̄±ʷ = (1/k±)Σ± wᵢsᵢ,
  checked on random token scores; c is reported beside the advantage-level c(k, G) = (k/G)·Â₊;
- a step target (its info gives ``step``) also gets its optimizer step split and unsplit
  (:mod:`grpo_identity.checks.measure.steps`), and an off-policy target (its info gives ``off_policy``) a step after
  the policy has moved: importance weights, clip, KL (:mod:`grpo_identity.checks.measure.offpolicy`).

>>> from grpo_identity.checks.measure.infer import probe_batch
>>> def fake(r, G, L):  # constant weight 1/len(r), an outcome advantage r − mean
...     A = r - r.reshape(-1, G).mean(1).repeat(G); m = (np.arange(8) < L[:, None]) * 1.0
...     return {"advantages": A, "coefficients": (A / len(r))[:, None] * m, "mask": m}
>>> audit_gradient(fake, sizes=(2, 4)).inferred.per_sample_weight
'constant'
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, cast

import numpy as np

from grpo_identity import dial as D
from grpo_identity.checks import verdict as V
from grpo_identity.checks.calls.calling import to_numpy
from grpo_identity.checks.calls.target import Output, TargetMalformed, View, gradient_arrays, malformed, output_of
from grpo_identity.checks.frameworks import answer_lengths
from grpo_identity.checks.measure.infer import probe_batch
from grpo_identity.checks.report import (
    WEIGHTS,
    AsyncGroupsFit,
    Finding,
    GradientFit,
    OffPolicyFit,
    Report,
    StepFit,
    ThreePolicyFit,
)

__all__ = [
    "audit_gradient",
    "coefficient_precision",
    "AdvantageView",
    "WEIGHTS",
    "GRADIENT_GROUP_SIZES",
    "GradientReport",
    "gradient_target",
]

#: the gradient level's report type before both levels shared one (:class:`Report`)
GradientReport = Report
#: group sizes of the gradient probes
GRADIENT_GROUP_SIZES = (2, 3, 4, 8)
#: relative tolerance of the float32 checks
RTOL = 1e-4
#: relative tolerance of a ratio of two bfloat16 numbers (8 significant bits: each is within
#: 2⁻⁸ ≈ 3.9e-3, a ratio within ≈ 7.8e-3), for coefficients that come out of a bf16 loss
RTOL_BF16 = 1e-2


def coefficient_precision(C: np.ndarray) -> str:
    """'bfloat16' when every coefficient is a bfloat16 (or float16) number, else 'float32'.

    Values of a few significant bits are numbers of every type and are not read (:func:`precision_of`); the rest
    may still be bf16 numbers by chance, so this alone does not say a loss was computed in bf16: the audit applies
    bf16's tolerance only to a check that failed at float32's (a loss that is exact passes at float32's and is
    reported as such)."""
    from grpo_identity.checks.measure.properties import precision_of

    return "bfloat16" if precision_of(np.asarray(C, dtype=np.float64)) in ("bfloat16", "float16") else "float32"


def _call(
    target: Callable[..., Any], r: np.ndarray, G: int, L: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The advantages (n,), coefficients and mask (n × T, T at least the longest answer) of one call; an output
    of another form is :class:`TargetMalformed`, naming what is wrong."""
    out = gradient_arrays(target(r, G, L), r.size, int(L.max()))
    return out["advantages"], out["coefficients"], out["mask"]


def _per_answer(C: np.ndarray, M: np.ndarray) -> tuple[np.ndarray, float]:
    """aᵢ (mean over the answer's tokens) and the largest relative spread of aᵢₜ within an answer."""
    n_tok = np.maximum(M.sum(1), 1)
    a = (C * M).sum(1) / n_tok
    spread = np.abs((C - a[:, None]) * M).max(1)
    scale = max(float(np.abs(a).max()), 1e-30)
    return a, float(spread.max() / scale)


def _group_tokens(L: np.ndarray, G: int) -> np.ndarray:
    """Each answer's group's tokens (the answers' lengths summed over its group of G rows)."""
    return np.repeat(L.reshape(-1, G).sum(1), G)


class Law(NamedTuple):
    """A named per-sample weight law."""

    denominator: Callable[[np.ndarray, int], np.ndarray]
    """Every answer's weight is 1/denominator, from the answers' lengths L (groups of G rows)."""
    says: str
    """What its fit says, of the value uᵢ·denominator."""
    per_prompt: Callable[[np.ndarray, int], float]
    """What that value is multiplied by to give the update's scale κ relative to the mean over the batch's prompts
    of their updates (1/G)·Σᵢ Âᵢsᵢ: a loss that averages over the batch's answers (constant, 1/length) or prompts
    (1/group_tokens), or over its tokens (1/step_tokens), has κ = 1."""


#: the named per-sample weight laws; :func:`_law` tries them in this order
LAWS: dict[str, Law] = {
    "constant": Law(
        lambda L, G: np.ones_like(L), "uᵢ = {:.6g} for every answer, whatever the lengths", lambda L, G: float(L.size)
    ),
    "1/step_tokens": Law(
        lambda L, G: np.full_like(L, L.sum()), "uᵢ·(tokens in the batch) = {:.6g} in both batches", lambda L, G: 1.0
    ),
    "1/length": Law(lambda L, G: L, "uᵢ·|yᵢ| = {:.6g} for every answer", lambda L, G: float(L.size)),
    "1/group_tokens": Law(
        _group_tokens, "uᵢ·(tokens of its group) = {:.6g} for every answer", lambda L, G: float(L.size // G)
    ),
}
#: what the update's scale κ may be proportional to, besides a constant, and how the finding says it: κ·x is one
#: number over the probed batches (G answers per prompt, n prompts, N = n·G answers)
SCALE_LAWS: tuple[tuple[str, Callable[[int, int], float]], ...] = (
    ("1/G (the loss divides by the group size once more than a mean)", lambda G, n: G),
    ("G (the loss sums over each prompt's answers instead of averaging them)", lambda G, n: 1 / G),
    ("the number of prompts (the loss sums over the prompts instead of averaging them)", lambda G, n: 1 / n),
    ("the number of answers (the loss sums over the answers instead of averaging them)", lambda G, n: 1 / (n * G)),
    ("1/(number of prompts) (the loss divides by the prompts once more than a mean)", lambda G, n: n),
    ("1/(number of answers) (the loss divides by the answers once more than a mean)", lambda G, n: n * G),
)


def _law(u: list[np.ndarray], L: list[np.ndarray], G: int, rtol: float = RTOL) -> tuple[str, str, float | None]:
    """The weight law of uᵢ = aᵢ/Âᵢ over the calls (same rows, different lengths, groups of G rows): the first of
    ``constant``, ``1/step_tokens``, ``1/length``, ``1/group_tokens`` whose uᵢ·(its denominator) is one number
    over every live answer of both calls, with that number (None for a law of no name)."""

    def flat(x: np.ndarray) -> bool:
        x = x[np.isfinite(x)]
        return bool(x.size) and float(np.ptp(x)) <= 10 * rtol * float(np.abs(x).max())

    def fits(denominator: Callable[[np.ndarray, int], np.ndarray]) -> float | None:
        """The one value of uᵢ·denominator(L) over both calls, or None."""
        prods = [ui * denominator(li, G) for ui, li in zip(u, L)]
        if not all(flat(p) for p in prods):
            return None
        values = [float(np.nanmedian(p)) for p in prods]
        return values[0] if abs(values[0] - values[1]) <= 10 * rtol * abs(values[0]) else None

    for law, (denominator, why, _) in LAWS.items():
        if law == "1/group_tokens" and any(li.size % G for li in L):
            continue
        value = fits(denominator)
        if value is not None:
            return law, why.format(value), value
    if all(flat(ui) for ui in u):
        per_call, totals = [float(np.nanmedian(ui)) for ui in u], [float(li.sum()) for li in L]
        return (
            "other",
            f"one weight per batch that follows no known law ({per_call[0]:.6g} at {totals[0]:g} tokens, "
            f"{per_call[1]:.6g} at {totals[1]:g})",
            None,
        )
    if all(flat(ui * li) for ui, li in zip(u, L)):
        prod = [float(np.nanmedian(ui * li)) for ui, li in zip(u, L)]
        return (
            "other",
            f"1/length within a batch, times a factor that depends on the batch ({prod[0]:.6g}, {prod[1]:.6g})",
            None,
        )
    return "other", "uᵢ depends on the answer in no known way (neither constant, 1/length nor 1/group_tokens)", None


def _weights(law: str, L: np.ndarray, G: int) -> np.ndarray:
    """Each answer's weight wᵢ under ``law`` (:data:`LAWS`; 1 for a law of no name)."""
    return 1.0 / LAWS[law].denominator(L, G) if law in LAWS else np.ones_like(L)


def _g1(
    A: np.ndarray, a: np.ndarray, M: np.ndarray, w: np.ndarray, G: int, r: np.ndarray, rng: np.random.Generator
) -> list[dict[str, Any]]:
    """Per non-silent group: c from g = c·(s̄₊ʷ − s̄₋ʷ) on random token scores, and the residual."""
    rows = []
    S = rng.standard_normal((*M.shape, 3)) * M[..., None]  # (n, T, d) token scores, 0 past the answer
    s = S.sum(1)  # (n, d): sᵢ = Σₜ ∇log π(yᵢₜ)
    for g in range(len(r) // G):
        idx = np.arange(g * G, (g + 1) * G)
        pos, neg = idx[r[idx] == r[idx].max()], idx[r[idx] < r[idx].max()]
        if neg.size == 0:
            continue
        grad = (a[idx, None] * s[idx]).sum(0)
        gap = (w[pos, None] * s[pos]).sum(0) / pos.size - (w[neg, None] * s[neg]).sum(0) / neg.size
        c = float(grad @ gap / (gap @ gap))
        resid = float(np.linalg.norm(grad - c * gap) / max(np.linalg.norm(grad), 1e-30))
        rows.append(
            {
                "G": G,
                "k": int(pos.size),
                "c_gradient": c,
                "c_advantage": float(pos.size / G * A[pos].mean()),
                "G1_residual": resid,
            }
        )
    return rows


@dataclass
class _Evidence:
    """What the probes of one audit measured, accumulated over the probed group sizes."""

    findings: list[Finding] = field(default_factory=list)
    laws: list[tuple[int, str, str]] = field(default_factory=list)
    """(G, weight law, its evidence) per probed G."""
    scales: dict[int, tuple[float, int, int]] = field(default_factory=dict)
    """G → (the update's scale κ, the batch's prompts, its live prompts) where the weight law has a name."""
    masked: dict[int, str] = field(default_factory=dict)
    """G → what is wrong with the tokens the loss trains on, where something is."""
    table: list[dict[str, Any]] = field(default_factory=list)
    silent_ok: bool = True
    spread_max: float = 0.0
    uniform: bool = True
    bf16: bool = False

    def law(self) -> str:
        """The one weight law of every probed G, else 'other'."""
        found = {law for _, law, _ in self.laws}
        return found.pop() if len(found) == 1 else "other"


def _silent_gradient(G: int, r: np.ndarray, C: np.ndarray) -> Finding | None:
    """A finding when an answer of a silent group (σ = 0) gets a nonzero token coefficient."""
    R = r.reshape(-1, G)
    silent = np.repeat(R.max(1) == R.min(1), G)
    # zero at the coefficients' resolution: a float32 step's rounding (a batch-wide whitening) leaves ~1e-9 of the
    # live answers' size, a push is of their order
    floor = float(np.finfo(np.float32).eps) * float(np.abs(C[~silent]).max(initial=0.0))
    pushed = np.abs(C[silent]) > floor
    if not np.any(pushed):
        return None
    i = int(np.flatnonzero(np.any(pushed, axis=1))[0])
    size = float(np.abs(C[silent][i]).max())
    example = {"group_size": G, "group_rewards": R[np.flatnonzero(R.max(1) == R.min(1))[0]].tolist()}
    message = f"G={G}: a silent group's answer gets a gradient {size:.3g} (σ = 0 should give g = 0)"
    return Finding("silent_groups_zero_gradient", message, example)


def _probe_group_size(target: Callable[..., Any], G: int, ev: _Evidence, ref: D.Dial | None, rng: Any) -> None:
    """Two calls at group size G with different token totals: the weight law, the silent groups'
    gradient, masked tokens, and theorem G1 per group (rows of ``ev.table``)."""
    r = probe_batch(G)
    calls = [(answer_lengths(r.size, s), *_call(target, r, G, answer_lengths(r.size, s))) for s in (0, 2)]
    us, Ls, spread_G = [], [], 0.0
    silent = np.repeat(r.reshape(-1, G).max(1) == r.reshape(-1, G).min(1), G)
    masked: dict[str, str] = {}  # what is wrong, the first call's words for it
    for L, A, C, M in calls:
        if np.abs(C * (1 - M)).max() > 0:
            masked.setdefault("past", "tokens past the end of an answer get a gradient")
        counted = M.sum(1)  # more tokens than the answer's, or fewer where the answer is pushed (Â ≠ 0)
        wrong = (counted > L) | ((counted < L) & (A != 0))
        if wrong.any():
            i = int(np.flatnonzero(wrong)[0])
            masked.setdefault("count", f"the loss's mask counts {counted[i]:g} tokens for an answer of {L[i]:g}")
        a, spread = _per_answer(C, M)
        spread_G = max(spread_G, spread)
        finding = _silent_gradient(G, r, C)
        if finding is not None:
            ev.silent_ok = False
            ev.findings.append(finding)
        live = ~silent & (A != 0)
        us.append(np.where(live, a / np.where(A == 0, 1.0, A), np.nan))
        Ls.append(L.astype(np.float64))
    if masked:
        ev.masked[G] = "; ".join(masked.values())
    law, why, value = _law(us, Ls, G)
    coefficients = np.concatenate([C.ravel() for _, _, C, _ in calls])
    if (law == "other" or spread_G > 10 * RTOL) and coefficient_precision(coefficients) == "bfloat16":
        law, why, value = _law(us, Ls, G, RTOL_BF16)  # what failed at float32's tolerance, judged at bf16's
        ev.bf16 = True
    if value is not None:
        ev.scales[G] = (value * LAWS[law].per_prompt(Ls[0], G), r.size // G, int((~silent).sum()) // G)
    ev.uniform = ev.uniform and spread_G <= 10 * (RTOL_BF16 if ev.bf16 else RTOL)
    ev.spread_max = max(ev.spread_max, spread_G)
    ev.laws.append((G, law, why))
    L, A, C, M = calls[0]
    a, _ = _per_answer(C, M)
    for row in _g1(A, a, M, _weights(law, L.astype(np.float64), G), G, r, rng):
        row["c_reference"] = float(D.coefficient(row["k"], G, ref)) if ref is not None else None
        ev.table.append(row)


def _law_findings(ev: _Evidence) -> list[Finding]:
    """Findings about the whole probe set: tokens trained on that are not the answers', tokens weighted unevenly
    within an answer, no known weight law, theorem G1 not holding with the law found, or an update whose scale
    changes with the batch."""
    out = []
    if ev.masked:
        message = "; ".join(f"G={G}: {what}" for G, what in ev.masked.items())
        out.append(Finding("masked_tokens", message, {"group_size": next(iter(ev.masked))}))
    law = ev.law()
    if not ev.uniform:
        message = (
            f"token coefficients vary within an answer (relative spread {ev.spread_max:.3g}): no per-answer "
            "score sᵢ, the identity's form does not apply"
        )
        out.append(Finding("uniform_within_answer", message))
    bad = [row for row in ev.table if not row["G1_residual"] <= 1e3 * RTOL]
    if law == "other":
        out.append(Finding("per_sample_weight", "; ".join(f"G={G}: {why}" for G, lw, why in ev.laws if lw == "other")))
    elif bad:
        first = bad[0]
        message = (
            f"g is not c·(s̄₊ʷ − s̄₋ʷ) with weight {law}: residual {first['G1_residual']:.3g} at "
            f"G={first['G']}, k={first['k']}"
        )
        out.append(Finding("identity_G1", message, {"group_size": first["G"], "k": first["k"]}))
    scale = _scale_finding(ev)
    return out + ([scale] if scale is not None else [])


def _scale_finding(ev: _Evidence) -> Finding | None:
    """A deviation where the update's scale κ (:attr:`Law.per_prompt`) is not one number over the probed batches: the
    loss divides (or multiplies) by something of the batch that a mean over its prompts does not, so the step
    changes with the group size or the batch size (a constant κ is the learning rate's business)."""
    if len(ev.scales) < 2 or ev.law() == "other":  # no one law: per_sample_weight says so
        return None
    rtol = 10 * (RTOL_BF16 if ev.bf16 else RTOL)
    kappa = {G: k for G, (k, _, _) in ev.scales.items()}

    def one_number(x: list[float]) -> bool:
        return max(x) - min(x) <= rtol * max(abs(v) for v in x)

    # a mean over the batch's prompts, or over its live ones (DAPO's kept prompts: silent groups left out)
    if one_number(list(kappa.values())) or one_number([k * live / n for k, n, live in ev.scales.values()]):
        return None
    shown = ", ".join(f"{k:.4g} at G={G} ({n} prompts)" for G, (k, n, _) in ev.scales.items())
    law = next(
        (words for words, x in SCALE_LAWS if one_number([k * x(G, n) for G, (k, n, _) in ev.scales.items()])), ""
    )
    message = (
        f"the update is κ times the mean over the batch's prompts of (1/G)·Σᵢ Âᵢsᵢ, and κ changes with the batch: "
        f"{shown}" + (f"; κ ∝ {law}" if law else "")
    )
    return Finding("update_scale", message, {"kappa": {str(G): k for G, k in kappa.items()}}, "deviation")


def audit_gradient(
    target: Callable[..., Any],
    expect: str | D.Dial | None = None,
    sizes: tuple[int, ...] = GRADIENT_GROUP_SIZES,
    name: str | None = None,
    seed: int = 0,
) -> Report:
    """Probe a gradient target (see the module docstring) and give the gradient-level verdict.

    Parameters
    ----------
    target : callable
        ``fn(rewards, G, lengths) -> {"advantages", "coefficients", "mask"}``.
    expect : str or Dial, optional
        The preset whose c(k, G) the advantages should have.
    sizes : tuple of int
        The probed group sizes.
    name : str, optional
        The target's name in the report.
    seed : int
        Seed of the random token scores of theorem G1's check.

    Returns
    -------
    Report
        ``level == "gradient"``; ``inferred.per_sample_weight`` names the weight law.
    """
    t0 = time.perf_counter()
    ref = D.preset(expect) if isinstance(expect, str) else expect
    rng = np.random.default_rng(seed)
    ev = _Evidence()
    for G in sizes:
        _probe_group_size(target, G, ev, ref, rng)
    ev.findings += _law_findings(ev)
    step = _split_step(target, ev)
    off_policy = _off_policy(target, ev)
    three_policy = _three_policy(target, ev)
    async_groups = _async_groups(target, ev)
    inferred = GradientFit(
        per_sample_weight=ev.law(),
        coefficient_precision="bfloat16" if ev.bf16 else "float32",
        weight_by_group_size={str(G): {"law": lw, "why": why} for G, lw, why in ev.laws},
        silent_groups_zero_gradient=ev.silent_ok,
        uniform_within_answer=ev.uniform,
        update_scale={str(G): k for G, (k, _, _) in ev.scales.items()},
        step=step,
        off_policy=off_policy,
        three_policy=three_policy,
        async_groups=async_groups,
    )
    decision = V.gradient(inferred, ev.findings, ev.table, ref)
    return Report(
        target=str(name or getattr(target, "__qualname__", "target")),
        level="gradient",
        kind="advantage",
        verdict=decision.verdict,
        matches=None,
        expected=ref.name if ref else None,
        inferred=inferred,
        findings=decision.findings,
        coefficient_table=decision.coefficient_table,
        seconds=time.perf_counter() - t0,
    )


def _split_step(target: Callable[..., Any], ev: _Evidence) -> StepFit:
    """A step target's optimizer step, split as configured and unsplit (:mod:`grpo_identity.checks.measure.steps`):
    its findings go to ``ev``; the measurements come back as a
    :class:`~grpo_identity.checks.report.StepFit`.  A step the framework's own path cannot run is a note (the
    rest of the audit stands); a malformed geometry is the target's usage error."""
    from grpo_identity.checks.calls.target import TargetError, TargetImportError
    from grpo_identity.checks.measure.steps import audit_step, check_geometry

    info = getattr(target, "info", None) or getattr(target, "grpo_identity_info", None) or {}
    if info.get("step_unavailable"):
        message = f"the optimizer step was not run split: {info['step_unavailable']}"
        ev.findings.append(Finding("split_step", message, {}, "note"))
    if not info.get("step"):
        return {}
    wrong = check_geometry(info["step"])
    if wrong is not None:
        raise TargetImportError(f"the target's step geometry: {wrong}")
    t0 = time.perf_counter()
    try:
        result = audit_step(target, info["step"])
    except TargetMalformed as exc:  # the rest of the audit stands, as where the step raises
        ev.findings.append(Finding("split_step", f"the optimizer step could not be read: the target {exc}", {}, "note"))
        return {}
    except TargetError as exc:
        if type(exc) is not TargetError:  # it died or hung: the audit cannot go on with it
            raise _during(exc, "the optimizer step, split") from None
        ev.findings.append(Finding("split_step", f"the optimizer step could not be run split: {exc}", {}, "note"))
        return {}
    ev.findings += result.findings
    return {
        "seconds": round(time.perf_counter() - t0, 2),
        "weight": result.law_split,
        "weight_unsplit": result.law_unsplit,
        "invariant": result.invariant,
        "layouts": result.layouts,
        "settings": result.settings,
        "ranks": result.ranks,
        "pieces": result.pieces,
        "objective": result.objective,
    }


def _off_policy(target: Callable[..., Any], ev: _Evidence) -> OffPolicyFit:
    """An off-policy target's step after the policy has moved (:mod:`grpo_identity.checks.measure.offpolicy`): its
    findings go to ``ev``; the measurements come back as an :class:`~grpo_identity.checks.report.OffPolicyFit`."""
    from grpo_identity.checks.measure.offpolicy import audit_off_policy

    run = functools.partial(audit_off_policy, weight=ev.law())

    def note(message: str) -> Finding:
        return Finding("off_policy", message, {}, "note")

    return cast(OffPolicyFit, _announced_probe(target, ev, "off_policy", ("the off-policy step", note), run))


def _announced_probe(
    target: Callable[..., Any],
    ev: _Evidence,
    key: str,
    said: tuple[str, Callable[[str], Finding]],
    run: Callable[..., Any],
) -> Any:
    """``run(target, settings)`` where the target's info announces ``key`` (its settings), its findings added to
    ``ev``; {} where it announces none.  A target that cannot run the probe's step (``said``: the step in words, and
    the note it gets), or answers it malformed, gets that note (the rest of the audit stands); one that died or
    hung ends the audit."""
    from grpo_identity.checks.calls.target import TargetError

    what, note = said
    info = getattr(target, "info", None) or getattr(target, "grpo_identity_info", None) or {}
    settings = info.get(key)
    if not settings:
        return {}
    try:
        out, findings = run(target, dict(settings))
    except TargetMalformed as exc:
        ev.findings.append(note(f"{what} could not be read: the target {exc}"))
        return {}
    except TargetError as exc:
        if type(exc) is not TargetError:  # it died or hung: the audit cannot go on with it
            raise _during(exc, what) from None
        ev.findings.append(note(f"{what} could not be run: {exc}"))
        return {}
    except (KeyError, TypeError, ValueError) as exc:  # its output, or the settings its info announced
        ev.findings.append(note(f"{what} could not be read: {type(exc).__name__}: {exc}"))
        return {}
    ev.findings += findings
    return out


def _during(exc: Exception, what: str) -> Exception:
    """``exc`` marked with the step that was running when the target died or hung (the report names it)."""
    exc.during = what  # type: ignore[attr-defined]
    return exc


class AdvantageView(View):
    """A gradient target seen as an advantage function: ``fn(rewards, G)`` → the advantages it
    computed on answers of the gradient probes' lengths.  A target whose info says
    ``lengths_optional`` (the framework drivers) is called with ``lengths=None`` and skips its
    loss; any other gets lengths and its loss is computed and ignored.  What was wrong with a call
    besides its values (the :class:`~grpo_identity.checks.calls.target.Output`'s ``issue`` and ``overwrite``) is the
    target's own: every transport checks the advantages of a gradient output as it checks an advantage function's
    (:func:`~grpo_identity.checks.calls.target.call_once`)."""

    def __init__(self, target: Any) -> None:
        super().__init__(target)
        self._skip_loss = bool((getattr(target, "info", None) or {}).get("lengths_optional"))

    def call(self, rewards: np.ndarray, group_size: int, scores: np.ndarray | None = None) -> Output:
        """``scores``: one column per reward function (a driver whose info names ``components``)."""
        if scores is not None:
            out = output_of(self._target, rewards, group_size, None, {"scores": scores})
        else:
            lengths = None if self._skip_loss else answer_lengths(len(rewards))
            out = output_of(self._target, rewards, group_size, lengths)
        adv = out.value.get("advantages") if isinstance(out.value, dict) else None
        bad = malformed(adv, "advantage")
        if bad is not None:
            raise TargetMalformed(f"{bad} (the 'advantages' of its gradient output)")
        return Output(np.array(to_numpy(adv), dtype=np.float64, copy=True), out.issue, out.overwrite)


def gradient_target(
    advantages: Callable[..., Any], loss: Callable[..., Any], *, calling: Any = None
) -> Callable[..., dict[str, np.ndarray]]:
    """A gradient-level target from your advantage function and your loss, in a few lines:

    ``advantages`` is called as it is written (:mod:`grpo_identity.checks.calls.calling`); ``loss(logprobs,
    advantages, mask) -> scalar`` is your aggregation (a masked mean per answer, a token sum, …) on
    torch tensors: ``logprobs`` (answers × tokens, the token log-probabilities, which autograd
    differentiates), ``advantages`` (one per answer), ``mask`` (answers × tokens, 1 inside an
    answer).  The result is ``fn(rewards, G, lengths)`` for ``grpo-identity audit FILE.py:step
    --level gradient``: it returns the advantages, −∂loss/∂log π per token and the mask.

    >>> import torch
    >>> def adv(rewards, group_size):
    ...     r = rewards.reshape(-1, group_size)
    ...     return (r - r.mean(1, keepdims=True)).reshape(-1)
    >>> def seq_mean(logprobs, advantages, mask):
    ...     per_answer = (logprobs * mask).sum(1) / mask.sum(1)
    ...     return -(per_answer * advantages).mean()
    >>> step = gradient_target(adv, seq_mean)
    >>> audit_gradient(step, sizes=(2, 4)).inferred.per_sample_weight
    '1/length'
    """
    from grpo_identity.checks.calls.calling import Caller, CallOptions

    caller = Caller.for_function(advantages, calling or CallOptions())

    def step(rewards: np.ndarray, group_size: int, lengths: np.ndarray | None) -> dict[str, np.ndarray]:
        import torch

        A = caller(np.asarray(rewards, dtype=np.float64), int(group_size))
        A_np = to_numpy(A).astype(np.float64).reshape(-1)
        if lengths is None:
            return {"advantages": A_np}
        L = np.asarray(lengths, dtype=int)
        T = int(L.max())
        mask = torch.as_tensor((np.arange(T)[None, :] < L[:, None]).astype(np.float32))  # (n, T)
        logprobs = torch.zeros(mask.shape, dtype=torch.float32, requires_grad=True)  # (n, T)
        value = loss(logprobs, torch.as_tensor(A_np, dtype=torch.float32), mask)
        value.backward()
        grad = logprobs.grad if logprobs.grad is not None else torch.zeros_like(logprobs)
        return {"advantages": A_np, "coefficients": -grad.double().numpy(), "mask": mask.double().numpy()}

    name = f"{getattr(loss, '__name__', 'loss')} over {getattr(advantages, '__name__', 'advantages')}"
    step.grpo_identity_info = {"entry": name, "lengths_optional": True}  # type: ignore[attr-defined]
    return step


def _three_policy(target: Callable[..., Any], ev: _Evidence) -> ThreePolicyFit:
    """A three-policy target's step given rollout log-probabilities (:mod:`grpo_identity.checks.measure.rollout`):
    its findings go to ``ev``; the measurements come back as a :class:`~grpo_identity.checks.report.ThreePolicyFit`."""
    from grpo_identity.checks.measure.rollout import audit_rollout

    def note(message: str) -> Finding:
        return Finding("three_policy", message, {}, "note")

    said = ("the three-policy step", note)
    return cast(ThreePolicyFit, _announced_probe(target, ev, "rollout_correction", said, audit_rollout))


def _async_groups(target: Callable[..., Any], ev: _Evidence) -> AsyncGroupsFit:
    """An asynchronous trainer's groups as they arrive (:mod:`grpo_identity.checks.measure.arrival`): its findings
    go to ``ev``; the measurements come back as an :class:`~grpo_identity.checks.report.AsyncGroupsFit`."""
    from grpo_identity.checks.measure.arrival import audit_arrival

    def note(message: str) -> Finding:
        return Finding("async_groups", message, {}, "note")

    said = ("the asynchronous-groups step", note)
    return cast(AsyncGroupsFit, _announced_probe(target, ev, "async_groups", said, audit_arrival))
