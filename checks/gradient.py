"""The gradient-level audit: the per-sample weight a framework's loss puts on each answer, and
whether its gradient keeps the identity g = c(k, G)·(s̄₊ʷ − s̄₋ʷ) (theorem G1).

A gradient target is ``fn(rewards, G, lengths) -> {"advantages", "coefficients", "mask"}``: the
advantages Âᵢ it computed and aᵢₜ = −∂loss/∂log π(yᵢₜ) for every response token (autograd through
the framework's own loss).  By the chain rule the parameter gradient is Σᵢₜ aᵢₜ ∇log π(yᵢₜ), so
these coefficients are the whole story:

- aᵢₜ constant over an answer's tokens: a per-answer coefficient aᵢ, and sᵢ = Σₜ ∇log π(yᵢₜ);
- the per-sample weight uᵢ = aᵢ/Âᵢ, compared across answers of different lengths and across two
  batches with different token totals: ``constant``, ``1/length`` (length bias) or
  ``1/batch_tokens`` (batch coupling: the weight depends on every answer of the batch);
- silent groups (σ = 0) get aᵢₜ = 0 exactly;
- G1: with wᵢ the named weight, g_group = Σᵢ aᵢ sᵢ equals c·(s̄₊ʷ − s̄₋ʷ), s̄±ʷ = (1/k±)Σ± wᵢsᵢ,
  checked on random token scores; c is reported beside the advantage-level c(k, G) = (k/G)·Â₊.

>>> from grpo_identity.checks.infer import probe_batch
>>> def fake(r, G, L):  # constant weight 1/len(r), an outcome advantage r − mean
...     A = r - r.reshape(-1, G).mean(1).repeat(G); m = (np.arange(8) < L[:, None]) * 1.0
...     return {"advantages": A, "coefficients": (A / len(r))[:, None] * m, "mask": m}
>>> audit_gradient(fake, sizes=(2, 4)).inferred["per_sample_weight"]
'constant'
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from grpo_identity import dial as D
from grpo_identity.checks.infer import probe_batch

__all__ = ["GradientReport", "audit_gradient", "answer_lengths", "WEIGHTS", "GRADIENT_GROUP_SIZES"]

#: group sizes of the gradient probes
GRADIENT_GROUP_SIZES = (2, 3, 4, 8)
#: per-sample weight laws, and what each means for the update
WEIGHTS = {
    "constant": "every answer weighs the same (the paper's 1/G)",
    "1/length": "length bias: an answer's push scales as 1/|yᵢ| (long correct answers move less, long wrong ones are penalised less)",
    "1/batch_tokens": "batch coupling: every answer's weight is 1/(tokens in the batch), so it depends on the other groups' lengths",
}
#: relative tolerance of the float32 checks
RTOL = 1e-4
#: relative tolerance of a ratio of two bfloat16 numbers (8 significant bits: each is within
#: 2⁻⁸ ≈ 3.9e-3, a ratio within ≈ 7.8e-3), for coefficients that come out of a bf16 loss
RTOL_BF16 = 1e-2


def coefficient_precision(C: np.ndarray) -> str:
    """'bfloat16' when every coefficient is a bfloat16 (or float16) number, else 'float32'.

    Short binary fractions are bfloat16 numbers too, so this alone does not say a loss was
    computed in bf16: the audit applies bf16's tolerance only to a check that failed at
    float32's (a loss that is exact passes at float32's and is reported as such)."""
    from grpo_identity.checks.properties import precision_of

    return "bfloat16" if precision_of(np.asarray(C, dtype=np.float64)) in ("bfloat16", "float16") else "float32"


@dataclass
class GradientReport:
    """The gradient-level verdict: ``verdict``, ``level`` = 'gradient', ``inferred``, ``findings``."""

    target: str
    verdict: str
    expected: str | None
    inferred: dict[str, Any]
    findings: list[Any]
    coefficient_table: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    target_info: dict[str, Any] = field(default_factory=dict)
    level: str = "gradient"
    matches: str | None = None
    advantage: Any = None
    """The advantage-level audit of the same target (an ``AuditReport``), when it was run too."""

    @property
    def passed(self) -> bool:
        return self.verdict != "fail"

    def to_dict(self) -> dict[str, Any]:
        out = {
            "target": self.target,
            "level": self.level,
            "verdict": self.verdict,
            "matches": self.matches,
            "expected": self.expected,
            "inferred": self.inferred,
            "findings": [f.to_dict() for f in self.findings],
            "coefficient_table": self.coefficient_table,
            "seconds": round(self.seconds, 3),
            "target_info": self.target_info,
        }
        if self.advantage is not None:
            out["advantage"] = self.advantage.to_dict()
        return out

    def format(self) -> str:
        from grpo_identity.foundation import format_table

        info = ", ".join(
            f"{k} {v}"
            for k, v in self.target_info.items()
            if k in ("framework", "version", "entry", "loss_type", "loss_agg_mode") and v
        )
        inf = self.inferred
        lines = [
            f"gradient audit of {self.target}" + (f" ({info})" if info else ""),
            f"verdict: {self.verdict.upper()}   level: gradient   matches: {self.matches or '-'}   expected: {self.expected or 'any preset'}",
        ]
        lines.append(
            f"per-sample weight: {inf.get('per_sample_weight')} ({WEIGHTS.get(inf.get('per_sample_weight') or '', 'no known law')})"
        )
        lines.append(
            f"silent groups give zero gradient: {'yes' if inf.get('silent_groups_zero_gradient') else 'NO'}; token weights uniform within an answer: {'yes' if inf.get('uniform_within_answer') else 'NO'}"
        )
        if self.coefficient_table:
            lines.append("")
            lines.append(
                "effective coefficient c in g = c·(s̄₊ʷ − s̄₋ʷ) (the loss's scale included) and the advantage-level c(k, G) = (k/G)·Â₊:"
            )
            rows = [
                [
                    r["G"],
                    r["k"],
                    r["c_gradient"],
                    r["c_advantage"],
                    r["c_reference"] if r["c_reference"] is not None else "-",
                    r["G1_residual"],
                ]
                for r in self.coefficient_table
            ]
            lines.append(format_table(rows, ["G", "k", "c gradient", "c advantage", "c reference", "G1 residual"]))
        if self.advantage is not None:
            adv = self.advantage.format().splitlines()
            lines += [
                "",
                "advantage level (the same configuration's advantages, property-tested):",
                *(f"  {ln}" for ln in adv[1:] if not ln.startswith(("findings", "  ["))),
            ]
        lines.append("")
        lines.append("findings:" if self.findings else "findings: none")
        for f in self.findings:
            lines.append(f"  [{f.severity}] {f.property}: {f.message}")
            if f.counterexample:
                lines.append(f"      counterexample: {f.counterexample}")
        return "\n".join(lines)


def answer_lengths(n: int, longer: int = 0) -> np.ndarray:
    """Answer lengths 1…6 (the drivers' :func:`~grpo_identity.checks.frameworks.lengths_for`),
    ``longer`` tokens more (at most 6) for the second batch, so that the two batches hold
    different token totals."""
    from grpo_identity.checks.frameworks import RESPONSE_LENGTH, lengths_for

    return np.minimum(lengths_for(n) + longer, RESPONSE_LENGTH)


def _call(
    target: Callable[..., Any], r: np.ndarray, G: int, L: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    out = target(r, G, L)
    A = np.asarray(out["advantages"], dtype=np.float64).reshape(-1)
    C, M = np.asarray(out["coefficients"], dtype=np.float64), np.asarray(out["mask"], dtype=np.float64)
    return A, C, M


def _per_answer(C: np.ndarray, M: np.ndarray) -> tuple[np.ndarray, float]:
    """aᵢ (mean over the answer's tokens) and the largest relative spread of aᵢₜ within an answer."""
    n_tok = np.maximum(M.sum(1), 1)
    a = (C * M).sum(1) / n_tok
    spread = np.abs((C - a[:, None]) * M).max(1)
    scale = max(float(np.abs(a).max()), 1e-30)
    return a, float(spread.max() / scale)


def _law(u: list[np.ndarray], L: list[np.ndarray], rtol: float = RTOL) -> tuple[str, str]:
    """The weight law of uᵢ = aᵢ/Âᵢ over the calls (same rows, different lengths)."""

    def flat(x: np.ndarray) -> bool:
        x = x[np.isfinite(x)]
        return bool(x.size) and float(np.ptp(x)) <= 10 * rtol * float(np.abs(x).max())

    if all(flat(ui) for ui in u):
        per_call = [float(np.nanmedian(ui)) for ui in u]
        totals = [float(li.sum()) for li in L]
        if abs(per_call[0] - per_call[1]) <= 10 * rtol * abs(per_call[0]):
            return "constant", f"uᵢ = {per_call[0]:.6g} for every answer, whatever the lengths"
        if abs(per_call[0] * totals[0] - per_call[1] * totals[1]) <= 10 * rtol * abs(per_call[0] * totals[0]):
            return (
                "1/batch_tokens",
                f"uᵢ·(tokens in the batch) = {per_call[0] * totals[0]:.6g} in batches of {totals[0]:g} and {totals[1]:g} tokens",
            )
        return (
            "other",
            f"one weight per batch that follows no known law ({per_call[0]:.6g} at {totals[0]:g} tokens, {per_call[1]:.6g} at {totals[1]:g})",
        )
    if all(flat(ui * li) for ui, li in zip(u, L)):
        prod = [float(np.nanmedian(ui * li)) for ui, li in zip(u, L)]
        if abs(prod[0] - prod[1]) <= 10 * rtol * abs(prod[0]):
            return "1/length", f"uᵢ·|yᵢ| = {prod[0]:.6g} for every answer"
        return (
            "other",
            f"1/length within a batch, times a factor that depends on the batch ({prod[0]:.6g}, {prod[1]:.6g})",
        )
    return "other", "uᵢ depends on the answer in no known way (neither constant nor 1/length)"


def _weights(law: str, L: np.ndarray) -> np.ndarray:
    return 1.0 / L if law == "1/length" else np.full(L.shape, 1.0 / L.sum() if law == "1/batch_tokens" else 1.0)


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


def _verdict(findings: list[Any], law: str, table: list[dict[str, Any]], ref: D.Dial | None) -> str:
    """fail on any failing finding; else deviation for a non-constant weight or an advantage
    coefficient off the expected preset's (each appends its finding); else pass."""
    from grpo_identity.checks.auditor import Finding

    if any(f.severity == "fail" for f in findings):
        return "fail"
    verdict = "pass"
    if law != "constant":
        verdict = "deviation"
        findings.append(
            Finding(
                "per_sample_weight",
                f"per-sample weight {law}: {WEIGHTS[law]}; G1 holds with the weighted means s̄±ʷ, the direction changes",
                {},
                "deviation",
            )
        )
    if ref is not None:
        ratios = [row["c_advantage"] / row["c_reference"] for row in table if row["c_reference"]]
        if ratios and max(abs(x - 1) for x in ratios) > 1e3 * RTOL:
            verdict = "deviation"
            findings.append(
                Finding(
                    "matches_preset",
                    f"the advantage-level c(k, G) is {min(ratios):.6g}–{max(ratios):.6g} × {ref.name}'s",
                    {},
                    "deviation",
                )
            )
    return verdict


def audit_gradient(
    target: Callable[..., Any],
    expect: str | D.Dial | None = None,
    sizes: tuple[int, ...] = GRADIENT_GROUP_SIZES,
    name: str | None = None,
    seed: int = 0,
) -> GradientReport:
    """Probe a gradient target (see the module docstring) and give the gradient-level verdict."""
    from grpo_identity.checks.auditor import Finding

    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    findings: list[Finding] = []
    laws, table, silent_ok, uniform, spread_max = [], [], True, True, 0.0
    precisions: set[str] = set()
    ref = D.preset(expect) if isinstance(expect, str) else expect
    for G in sizes:
        r = probe_batch(G)
        calls = [(answer_lengths(r.size, s), *_call(target, r, G, answer_lengths(r.size, s))) for s in (0, 2)]
        us, Ls, spread_G = [], [], 0.0
        for L, A, C, M in calls:
            if np.abs(C * (1 - M)).max() > 0:
                findings.append(
                    Finding(
                        "masked_tokens", f"G={G}: tokens past the end of an answer get a gradient", {"group_size": G}
                    )
                )
            a, spread = _per_answer(C, M)
            spread_G = max(spread_G, spread)
            R = r.reshape(-1, G)
            silent = np.repeat(R.max(1) == R.min(1), G)
            if np.any(C[silent] != 0):
                silent_ok = False
                i = int(np.flatnonzero(np.any(C[silent] != 0, axis=1))[0])
                findings.append(
                    Finding(
                        "silent_groups_zero_gradient",
                        f"G={G}: a silent group's answer gets a gradient {float(np.abs(C[silent][i]).max()):.3g} (σ = 0 should give g = 0)",
                        {"group_size": G, "group_rewards": R[np.flatnonzero(R.max(1) == R.min(1))[0]].tolist()},
                    )
                )
            live = ~silent & (A != 0)
            us.append(np.where(live, a / np.where(A == 0, 1.0, A), np.nan))
            Ls.append(L.astype(np.float64))
        law, why = _law(us, Ls)
        if (law == "other" or spread_G > 10 * RTOL) and coefficient_precision(
            np.concatenate([C.ravel() for _, _, C, _ in calls])
        ) == "bfloat16":
            law, why = _law(us, Ls, RTOL_BF16)  # what failed at float32's tolerance, judged at bf16's
            precisions.add("bfloat16")
        uniform = uniform and spread_G <= 10 * (RTOL_BF16 if "bfloat16" in precisions else RTOL)
        spread_max = max(spread_max, spread_G)
        laws.append((G, law, why))
        L, A, C, M = calls[0]
        a, _ = _per_answer(C, M)
        for row in _g1(A, a, M, _weights(law, L.astype(np.float64)), G, r, rng):
            row["c_reference"] = float(D.coefficient(row["k"], G, ref)) if ref is not None else None
            table.append(row)
    law_set = {law for _, law, _ in laws}
    law = law_set.pop() if len(law_set) == 1 else "other"
    if not uniform:
        findings.append(
            Finding(
                "uniform_within_answer",
                f"token coefficients vary within an answer (relative spread {spread_max:.3g}): no per-answer score sᵢ, the identity's form does not apply",
            )
        )
    bad = [row for row in table if not row["G1_residual"] <= 1e3 * RTOL]
    if law == "other":
        findings.append(
            Finding("per_sample_weight", "; ".join(f"G={G}: {why}" for G, lw, why in laws if lw == "other"))
        )
    elif bad:
        findings.append(
            Finding(
                "identity_G1",
                f"g is not c·(s̄₊ʷ − s̄₋ʷ) with weight {law}: residual {bad[0]['G1_residual']:.3g} at G={bad[0]['G']}, k={bad[0]['k']}",
                {"group_size": bad[0]["G"], "k": bad[0]["k"]},
            )
        )
    verdict = _verdict(findings, law, table, ref)
    inferred = {
        "per_sample_weight": law,
        "coefficient_precision": "bfloat16" if "bfloat16" in precisions else "float32",
        "weight_by_group_size": {str(G): {"law": lw, "why": why} for G, lw, why in laws},
        "silent_groups_zero_gradient": silent_ok,
        "uniform_within_answer": uniform,
    }
    report = GradientReport(
        str(name or getattr(target, "__qualname__", "target")),
        verdict,
        ref.name if ref else None,
        inferred,
        findings,
        coefficient_table=table,
    )
    report.seconds = time.perf_counter() - t0
    return report
