"""The verdict rules, in one place: from what the probes measured to pass, deviation or fail.

- **advantage** (:func:`advantage`): a failing finding fails; a dial that fits no centre and
  scale fails; else the inferred dial is compared with the expected preset (or every preset):
  the same point is a ``pass``; the same family (c ∝ σ for a group std; c ∝ σ² unscaled or batch
  std) off by a bounded factor (Bessel's correction, a visible ε, ε under the root, a constant)
  is a ``deviation`` with the factor c_target / c_expected at G = 4, 8, 16, 64 — or a ``pass``
  with a note when that factor is within :data:`MATERIAL_FACTOR` of 1 everywhere; another family
  fails.  A target no point of the dial fits whose c(k, G) is a preset's times a factor of G alone
  (1/G, G, G/(G−1) …: one number per group size) is a ``deviation`` naming the preset and the
  factor (:func:`group_size_factor`), or fails when ``expect`` is of the other family.  Silent
  groups of non-binary rewards whose residue exceeds :data:`SILENT_RESIDUE_FAIL` fail; a smaller
  residue is a note.
- **declared coefficient** (``expect="c=sigma**2/G"`` or a callable c(k, G),
  :mod:`grpo_identity.checks.measure.declared`): the measured c(k, G) table against the declared one at
  every probed G and 0 < k < G: equal within the fit tolerance passes, ``matches`` the formula;
  off by a factor of G alone, or varying with k by at most :data:`DECLARED_SHAPE_TOL`, is a
  ``deviation``; more is another function of k, a fail.
- **filter** (:func:`keep_rule`): the inferred keep rule against the expected one.
- **gradient** (:func:`gradient`): a failing finding fails (a split step whose micro-batches weigh
  differently among them); a deviation finding (a split step rescaled as a whole), a per-sample weight
  other than ``constant`` and advantage coefficients off the expected preset's are deviations.
- **both levels** (:func:`combine`): the worse verdict, the advantage findings first.

Every rule takes the measured data and returns a :class:`Decision`; none prints or reads text.

>>> from grpo_identity.checks.report import AdvantageFit
>>> inf = AdvantageFit(centre="mean", scale="group_std", ddof=0, eps=0.0, alpha=1.0)
>>> advantage(inf, [], D.GRPO).verdict
'pass'
>>> advantage(AdvantageFit(centre="mean", scale="none", alpha=1.0), [], D.GRPO).findings[0].message
'wrong family: the target scales like centre mean, no std (c ∝ σ²), grpo expects c ∝ σ'
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from grpo_identity import dial as D
from grpo_identity.checks.measure.declared import Declared
from grpo_identity.checks.measure.infer import (
    PROBE_GROUP_SIZES,
    SILENT_PROBE_VALUES,
    UNIT_ROUNDOFF,
    fit_tolerance,
    silent_probe_batch,
)
from grpo_identity.checks.report import VERDICTS, WEIGHTS, AdvantageFit, FilterFit, Finding, GradientFit, Report
from grpo_identity.variants import VARIANTS, Variant

if TYPE_CHECKING:
    from grpo_identity.checks.measure.recognise import Recognition

__all__ = [
    "FACTOR_GROUP_SIZES",
    "SILENT_RESIDUE_FAIL",
    "MATERIAL_FACTOR",
    "GRADIENT_RATIO_TOL",
    "DECLARED_SHAPE_TOL",
    "GROUP_SIZE_FACTORS",
    "Decision",
    "advantage",
    "named_variant",
    "keep_rule",
    "gradient",
    "combine",
    "worst",
    "matches_preset",
    "group_size_factor",
    "name_group_size_factor",
]

#: group sizes of the reported factor c_target / c_expected
FACTOR_GROUP_SIZES = (4, 8, 16, 64)
#: silent groups of non-binary rewards: a residue above this fails (below: a note)
SILENT_RESIDUE_FAIL = 0.5
#: a deviation whose factor c_target / c_expected is within this of 1 for every probed G and k
#: changes no update by a material amount (it prints as 1.000000): a pass with a note
MATERIAL_FACTOR = 1e-6
#: the gradient level's advantage coefficients may differ from the expected preset's by this
#: much (relative) before they are a deviation
GRADIENT_RATIO_TOL = 0.1
#: c_target / c_declared may vary with k (within one G) by this much (relative) and be a bounded
#: factor (an ε, a dtype): a deviation; more is another function of k, a fail (σ against σ² varies
#: by 15 % at G = 4 and 4× at G = 64)
DECLARED_SHAPE_TOL = 0.1
#: the simple factors of G a target's c(k, G) may differ from a preset's by, named in the report
GROUP_SIZE_FACTORS: dict[str, Callable[[int], float]] = {
    "1/G": lambda G: 1 / G,
    "G": lambda G: G,
    "G/(G−1)": lambda G: G / (G - 1),
    "(G−1)/G": lambda G: (G - 1) / G,
    "1/(G−1)": lambda G: 1 / (G - 1),
    "G−1": lambda G: G - 1,
    "(G−1)/G²": lambda G: (G - 1) / G**2,
    "G²/(G−1)": lambda G: G**2 / (G - 1),
    "√G": lambda G: math.sqrt(G),
    "1/√G": lambda G: 1 / math.sqrt(G),
    "√(G/(G−1))": lambda G: math.sqrt(G / (G - 1)),
    "√((G−1)/G)": lambda G: math.sqrt((G - 1) / G),
    "1/G²": lambda G: G**-2,
    "G²": lambda G: G**2,
}


@dataclass(frozen=True)
class Decision:
    """A verdict, the preset matched, the findings (complete, in report order) and the tables."""

    verdict: str
    matches: str | None = None
    findings: list[Finding] = field(default_factory=list)
    factors: list[dict[str, Any]] = field(default_factory=list)
    coefficient_table: list[dict[str, Any]] = field(default_factory=list)


def worst(*verdicts: str) -> str:
    """The worse of ``verdicts`` (fail > deviation > pass)."""
    return max(verdicts, key=VERDICTS.index)


def _fails(findings: list[Finding]) -> bool:
    return any(f.severity == "fail" for f in findings)


# --- advantage level -----------------------------------------------------------------------------
def family(scale: str | None) -> str:
    """c ∝ σ (group std) or c ∝ σ² (no std, or one std for the whole batch)."""
    return "sigma" if scale == "group_std" else "sigma_squared"


def matches_preset(inf: AdvantageFit, d: D.Dial) -> bool:
    """Whether the inferred dial is the preset ``d`` (its keep rule aside), within ε's resolution."""
    if inf.centre != d.centre or inf.scale != d.scale or inf.alpha != 1.0 or inf.eps_inside_sqrt:
        return False
    if d.scale == "none":
        return True
    if d.scale == "batch_std" or inf.ddof != d.ddof:
        return inf.ddof == d.ddof and d.scale == "batch_std"
    return abs(float(inf.eps or 0.0) - d.eps) <= max(inf.eps_resolution, 0.02 * d.eps)


def _nearest(inf: AdvantageFit) -> D.Dial | None:
    fam = [d for d in D.PRESETS.values() if family(d.scale) == family(inf.scale) and d.keep == "all"]
    if not fam:
        return None

    def distance(d: D.Dial) -> tuple[bool, bool, float]:
        eps_gap = abs(math.log10((d.eps or 1e-12) / max(inf.eps or 0.0, 1e-12)))
        return (d.centre != inf.centre, d.ddof != inf.ddof, eps_gap)

    return min(fam, key=distance)


def coefficient_tables(inf: AdvantageFit, ref: D.Dial) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """c(k, G) of the target against ``ref`` at a few k per G, and the factor rows per G."""
    return _tables(inf, ref.name, _preset_c(ref))


def _tables(
    inf: AdvantageFit, name: str, c_ref: Callable[[int, int], float]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """c(k, G) of the target against the reference ``c_ref`` (a preset's or a declared one)."""
    table, factors = [], []
    for G in FACTOR_GROUP_SIZES:
        if G not in inf.coefficients:
            continue
        ratios = []
        for k in range(1, G):
            ct = inf.coefficients[G][k]
            cr = c_ref(k, G)
            ratio = ct / cr if cr else None
            ratios.append(float("nan") if ratio is None else ratio)
            if k in {1, max(1, G // 4), G // 2, G - 1}:
                table.append({"G": G, "k": k, "c_target": ct, "c_reference": cr, "ratio": ratio, "reference": name})
        factors.append(
            {
                "G": G,
                "factor_at_half": ratios[G // 2 - 1],
                "factor_min": float(np.nanmin(ratios)),
                "factor_max": float(np.nanmax(ratios)),
            }
        )
    return table, factors


def _ratios(inf: AdvantageFit, c_ref: Callable[[int, int], float]) -> dict[int, np.ndarray]:
    """c_target / c_reference for 0 < k < G, by probed G."""
    return {
        G: np.array([c[k] / c_ref(k, G) for k in range(1, G)], dtype=np.float64)
        for G, c in sorted(inf.coefficients.items())
    }


def group_size_factor(inf: AdvantageFit, c_ref: Callable[[int, int], float]) -> dict[int, float] | None:
    """c_target / c_reference per probed G when it is one positive number per G (the same for every
    0 < k < G within :func:`~grpo_identity.checks.measure.infer.fit_tolerance`), else None.

    >>> inf = AdvantageFit(coefficients={4: [0, 0.75 / 16, 1 / 16, 0.75 / 16, 0]})
    >>> group_size_factor(inf, lambda k, G: float(D.coefficient(k, G, D.DR_GRPO)))
    {4: 0.25}
    """
    tol = fit_tolerance(inf.precision)
    out = {}
    for G, r in _ratios(inf, c_ref).items():
        if not (np.all(np.isfinite(r)) and np.all(r > 0)) or r.max() / r.min() - 1 > tol:
            return None
        out[G] = float(np.median(r))
    return out or None


def name_group_size_factor(factor: dict[int, float], precision: str = "float64") -> str | None:
    """The factor as a form of :data:`GROUP_SIZE_FACTORS` (``1/G``), or a constant times one
    (``2·1/G``), when it is one at every G; else None.

    >>> name_group_size_factor({2: 0.5, 4: 0.25, 8: 0.125})
    '1/G'
    """
    tol = fit_tolerance(precision)
    scaled = []
    for name, form in GROUP_SIZE_FACTORS.items():
        r = np.array([f / form(G) for G, f in factor.items()])
        if r.max() / r.min() - 1 <= tol:
            alpha = float(np.median(r))
            if abs(alpha - 1) <= tol:
                return name
            scaled.append(f"{alpha:.6g}·{name}")
    return scaled[0] if scaled else None


def _measured(inf: AdvantageFit) -> bool:
    """Every probed c(k, G), 0 < k < G, finite and positive: a table to compare, fit or no fit."""
    return bool(inf.coefficients) and all(
        math.isfinite(c[k]) and c[k] > 0 for G, c in inf.coefficients.items() for k in range(1, G)
    )


def _per_g(factor: dict[int, float]) -> str:
    return ", ".join(f"G={G}: {f:.6g}" for G, f in factor.items())


def _silent_residue(inf: AdvantageFit) -> Finding | None:
    res = inf.silent_nonbinary_max_abs
    if res is None or res <= 0:
        return None
    w = inf.silent_nonbinary_worst or {}
    severity = "fail" if not math.isfinite(res) or res > SILENT_RESIDUE_FAIL else "note"
    amplified = " amplified by 1/(std + ε)" if inf.scale == "group_std" else ""
    message = (
        f"silent groups of non-binary rewards (every reward 0.1, 0.3, 1/3 …) get |Â| up to {res:.3g} instead of "
        f"exactly 0 (worst: every reward {w.get('value', float('nan')):.6g} at G = {w.get('G')}): float rounding "
        f"of the group mean{amplified}"
    )
    example = {
        "group_rewards": f"every reward {w.get('value')}",
        "group_size": w.get("G"),
        "values": list(SILENT_PROBE_VALUES),
        "group_sizes": list(PROBE_GROUP_SIZES),
    }
    return Finding("silent_nonbinary_groups_zero", message, example, severity)


def advantage(
    inf: AdvantageFit, findings: list[Finding], expect: D.Dial | None, declared: Declared | None = None
) -> Decision:
    """The advantage-level verdict (see the module docstring); a finding that is a deviation by
    itself (a lone answer pushed by its raw reward …) makes a pass a deviation.  ``declared``: a
    declared coefficient, compared instead of a preset (``expect`` is then None)."""
    decision = _advantage(inf, findings, expect, declared)
    if decision.verdict == "pass" and any(f.severity == "deviation" for f in decision.findings):
        return Decision("deviation", decision.matches, decision.findings, decision.factors, decision.coefficient_table)
    return decision


def _advantage(
    inf: AdvantageFit, findings: list[Finding], expect: D.Dial | None, declared: Declared | None
) -> Decision:
    findings = list(findings)
    residue = _silent_residue(inf)
    if residue is not None:
        findings.append(residue)
    by_g = None if inf.centre is not None or declared is not None else _group_size_preset(inf)
    comparable = _measured(inf) and not inf.coupled and (declared is not None or by_g is not None)
    skipped = any(f.property == "well_formed" for f in findings)  # no dial was inferred: the NaN says why
    if inf.centre is None and not comparable and not skipped:
        findings.append(Finding("dial", f"no point of the dial fits: {inf.why}"))
    elif inf.coupled and inf.scale != "batch_std" and not any(f.property == "groups_independent" for f in findings):
        findings.append(Finding("groups_independent", inf.why))
    if _fails(findings):
        return Decision("fail", None, findings)
    if declared is not None:
        return _against_declared(inf, findings, declared)
    if by_g is not None:
        return _by_group_size(inf, findings, expect, *by_g)
    presets = [expect] if expect else []
    found = next((d for d in presets + list(D.PRESETS.values()) if matches_preset(inf, d.replace(keep="all"))), None)
    ref = expect if expect is not None else (found or _nearest(inf))
    if ref is None:
        return Decision("fail", None, [*findings, Finding("dial", "the inferred dial is in no preset's family")])
    table, factors = coefficient_tables(inf, ref)
    if inf.scale == "batch_std":  # c = σ²/σ_batch: against an unscaled preset the factor is 1/σ_batch
        for row in table:
            row["note"] = f"batch std {inf.batch_std[row['G']]:.4g} of the probe batch"
    if expect is not None and matches_preset(inf, expect.replace(keep="all")):
        return Decision("pass", expect.name, findings, [], table)
    if expect is None and found is not None:
        return Decision("pass", found.name, findings, [], table)
    if family(inf.scale) != family(ref.scale):
        return Decision("fail", found.name if found else None, [*findings, _wrong_family(inf, ref)], [], table)
    message = _deviation_message(inf, ref, factors)
    if _immaterial(factors):
        note = (
            f"{message}: |factor − 1| < {MATERIAL_FACTOR:g} at every probed G and k, no material change of any update"
        )
        return Decision("pass", ref.name, [*findings, Finding("matches_preset", note, {}, "note")], factors, table)
    deviation = Finding("matches_preset", message, {}, "deviation")
    return Decision("deviation", found.name if found else None, [*findings, deviation], factors, table)


def _group_size_preset(inf: AdvantageFit) -> tuple[D.Dial, dict[int, float]] | None:
    """The first preset (one whose factor has a name first) whose c(k, G) the target's is times a
    factor of G alone, and that factor; None if none is."""
    found = []
    for d in D.PRESETS.values():
        if d.keep != "all" or d.centre == "none" or d.scale == "batch_std":
            continue
        factor = group_size_factor(inf, _preset_c(d))
        if factor is not None:
            found.append((d, factor))
    named = [f for f in found if name_group_size_factor(f[1], inf.precision) in GROUP_SIZE_FACTORS]
    return (named or found)[0] if found else None


def _preset_c(d: D.Dial) -> Callable[[int, int], float]:
    """The preset's c(k, G) (:func:`~grpo_identity.dial.coefficient`) as a function of (k, G)."""
    return lambda k, G: float(D.coefficient(k, G, d))


def _by_group_size(
    inf: AdvantageFit, findings: list[Finding], expect: D.Dial | None, near: D.Dial, factor: dict[int, float]
) -> Decision:
    """A target no dial fits whose c(k, G) is ``near``'s times ``factor`` (a number per G): a
    deviation from ``expect`` (or from ``near``) of the same family, a fail from the other."""
    ref = expect or near
    table, factors = coefficient_tables(inf, ref)
    form = name_group_size_factor(factor, inf.precision)
    shape = f" = {form}" if form else ""
    mine = "σ" if family(near.scale) == "sigma" else "σ²"
    if family(ref.scale) != family(near.scale):
        theirs = "σ" if family(ref.scale) == "sigma" else "σ²"
        message = (
            f"wrong family: the target's c(k, G) is {near.name}'s times a factor of G{shape} (c ∝ {mine}), "
            f"{ref.name} expects c ∝ {theirs}"
        )
        return Decision("fail", None, [*findings, Finding("matches_preset", message)], [], table)
    against = factor if ref is near else group_size_factor(inf, _preset_c(ref))
    of_ref = f"; c_target/c_{ref.name}: {_per_g(against)}" if against and ref is not near else ""
    message = (
        f"same c(k, G) as {near.name} times a factor that depends on G only{shape} "
        f"(c_target/c_{near.name}: {_per_g(factor)}){of_ref}: every group of one size is scaled alike, "
        "groups of different sizes differently"
    )
    evidence = {"factor_by_group_size": {str(G): f for G, f in factor.items()}, "reference": near.name}
    return Decision(
        "deviation", None, [*findings, Finding("matches_preset", message, evidence, "deviation")], factors, table
    )


def _against_declared(inf: AdvantageFit, findings: list[Finding], declared: Declared) -> Decision:
    """The measured c(k, G) against the declared one (see the module docstring)."""
    table, factors = _tables(inf, declared.name, declared.at)
    ratios = _ratios(inf, declared.at)
    every = np.concatenate(list(ratios.values()))
    if np.all(np.abs(every - 1) <= fit_tolerance(inf.precision)):
        return Decision("pass", declared.name, findings, [], table)
    evidence = {"c_target_over_declared": {str(G): [float(r.min()), float(r.max())] for G, r in ratios.items()}}
    if np.all(np.abs(every - 1) < MATERIAL_FACTOR):
        note = f"c_target/c_declared within {MATERIAL_FACTOR:g} of 1 at every probed G and k: no material change"
        return Decision(
            "pass", declared.name, [*findings, Finding("matches_declared", note, evidence, "note")], factors, table
        )
    factor = group_size_factor(inf, declared.at)
    if factor is not None:
        form = name_group_size_factor(factor, inf.precision)
        message = (
            f"c_target/c_declared ({declared.name}) depends on G only{f' = {form}' if form else ''}: {_per_g(factor)}"
        )
        finding = Finding("matches_declared", message, evidence, "deviation")
        return Decision("deviation", None, [*findings, finding], factors, table)
    spread = {G: float(r.max() / r.min() - 1) for G, r in ratios.items()}
    worst_g = max(spread, key=spread.__getitem__)
    lo, hi = float(ratios[worst_g].min()), float(ratios[worst_g].max())
    if spread[worst_g] <= DECLARED_SHAPE_TOL:
        message = (
            f"c_target/c_declared ({declared.name}) varies with k by up to {spread[worst_g]:.3g} "
            f"({lo:.6g}–{hi:.6g} at G={worst_g}): a bounded factor"
        )
        finding = Finding("matches_declared", message, evidence, "deviation")
        return Decision("deviation", None, [*findings, finding], factors, table)
    message = (
        f"c(k, G) is another function of k than {declared.name}: c_target/c_declared runs "
        f"{lo:.6g}–{hi:.6g} over k at G={worst_g}"
    )
    return Decision("fail", None, [*findings, Finding("matches_declared", message, evidence)], factors, table)


def _wrong_family(inf: AdvantageFit, ref: D.Dial) -> Finding:
    mine, theirs = ("σ" if family(s) == "sigma" else "σ²" for s in (inf.scale, ref.scale))
    message = f"wrong family: the target scales like {inf.describe()} (c ∝ {mine}), {ref.name} expects c ∝ {theirs}"
    return Finding("matches_preset", message)


def _immaterial(factors: list[dict[str, Any]]) -> bool:
    """Every factor c_target / c_expected (min and max over k, each probed G) within MATERIAL_FACTOR of 1."""
    vals = [v for f in factors for v in (f["factor_min"], f["factor_max"])]
    return bool(vals) and all(math.isfinite(v) and abs(v - 1.0) < MATERIAL_FACTOR for v in vals)


def _deviation_message(inf: AdvantageFit, ref: D.Dial, factors: list[dict[str, Any]]) -> str:
    why = []
    if inf.centre != ref.centre:
        why.append(f"centre {inf.centre} instead of {ref.centre}")
    if inf.scale != ref.scale:
        why.append(f"scale {inf.scale} instead of {ref.scale}")
    if inf.scale == ref.scale == "group_std":
        if inf.ddof != ref.ddof:
            why.append(f"ddof {inf.ddof} instead of {ref.ddof} (Bessel)")
        if inf.eps_inside_sqrt:
            why.append(f"eps {inf.eps:.3g} inside the square root, √(σ² + ε), instead of σ + {ref.eps:g}")
        elif abs(float(inf.eps or 0) - ref.eps) > max(inf.eps_resolution, 0.02 * ref.eps):
            why.append(f"eps {inf.eps:.3g} instead of {ref.eps:g}")
    if inf.alpha != 1.0:
        why.append(f"a constant factor {inf.alpha:.6g}")
    at_half = ", ".join(f"G={r['G']}: {r['factor_at_half']:.6g}" for r in factors)
    because = "; ".join(why) or "off by a factor"
    return f"same family as {ref.name} but {because}; c_target/c_{ref.name} at k=G/2: {at_half}"


def with_diagnosis(decision: Decision, found: Finding | None) -> Decision:
    """A failed decision with what its target does instead as its first finding: the groups it normalises as one
    (:mod:`grpo_identity.checks.measure.merging`), a per-token term in its score
    (:mod:`grpo_identity.checks.measure.shaping`)."""
    if found is None:
        return decision
    return _with(decision, decision.verdict, decision.matches, [found, *decision.findings])


# --- variants by name ----------------------------------------------------------------------------
#: findings that only say "no point of the dial": a recognised variant answers them
_DIAL_ONLY = ("dial", "matches_dial")


def named_variant(
    decision: Decision, inf: AdvantageFit, found: Recognition | None, want: Variant | None, named: bool
) -> Decision:
    """The advantage decision once the target's variant is known (:mod:`grpo_identity.checks.measure.recognise`).

    ``want``: the expected variant; ``named``: a preset or a coefficient was expected (the decision
    stands; the variant is a note).  With neither, a recognised variant is what the target
    ``matches``: the properties it gives up by design become deviations that name it, the dial's
    "no fit" is answered, and a variant without a departure at factor 1 passes.  The expected
    variant recognised passes (its departures are notes), at another factor is a deviation, not
    recognised fails."""
    if want is None and found is None:
        return decision
    if named and want is None:
        assert found is not None
        note = _variant_note(found, "note")
        return _with(decision, decision.verdict, decision.matches, [*decision.findings, note])
    if want is not None and (found is None or found.variant.name != want.name):
        other = f"; it computes {_variant_text(found)}" if found is not None else ""
        message = f"the target does not compute {want.name} ({want.citation}){other}"
        return _with(decision, "fail", None, [*decision.findings, Finding("variant", message)])
    assert found is not None
    v = found.variant
    expected = want is not None
    findings = [
        _silent_not_by_design(f, found, inf) or _by_design(f, v, found.form, expected)
        for f in decision.findings
        if f.property not in _DIAL_ONLY
    ]
    off = found.factor != 1.0 or (bool(v.departures(found.form)) and not expected) or found.form in v.readings
    off = off or found.eps is not None
    findings.append(_variant_note(found, "deviation" if off else "note"))
    verdict = "pass"
    if any(f.severity == "fail" for f in findings):
        verdict = "fail"
    elif any(f.severity == "deviation" for f in findings):
        verdict = "deviation"
    table, factors = decision.coefficient_table, decision.factors
    if v.coefficient is not None and _measured(inf):
        table, factors = _tables(inf, v.name, v.coefficient)
    elif not table:
        table, factors = _measured_table(inf), []
    return Decision(verdict, v.name, findings, factors, table)


def _measured_table(inf: AdvantageFit) -> list[dict[str, Any]]:
    """The target's c(k, G) = (k/G)·Â₊ on the probe batches, with no reference to compare (a variant
    with no per-group coefficient)."""
    return [
        {"G": G, "k": k, "c_target": inf.coefficients[G][k], "c_reference": None, "ratio": None, "reference": None}
        for G in FACTOR_GROUP_SIZES
        if G in inf.coefficients
        for k in sorted({1, max(1, G // 4), G // 2, G - 1})
    ]


def _with(decision: Decision, verdict: str, matches: str | None, findings: list[Finding]) -> Decision:
    return Decision(verdict, matches, findings, decision.factors, decision.coefficient_table)


#: the unequal response lengths a variant was recognised under (checks.frameworks.length_layouts), in words
_LENGTHS = {
    "by row": "by row (the drivers' layout)",
    "by answer": "by answer (a rollout's token layout, set by each reward)",
}


def _variant_text(found: Recognition) -> str:
    times = f" times {found.factor:.6g}" if found.factor != 1.0 else ""
    lengths = f", with response lengths that differ {_LENGTHS[found.lengths]}" if found.lengths in _LENGTHS else ""
    own = found.variant.eps_of(found.form)
    eps = f", with ε = {found.eps:.3g} where the form's is {own:.3g}" if found.eps is not None and own else ""
    return f"{found.variant.name}{times} ({found.variant.citation}; form: {found.form}{lengths}{eps})"


def _variant_note(found: Recognition, severity: str) -> Finding:
    """What the target computes and where that stands relative to the identity."""
    v = found.variant
    message = f"computes {_variant_text(found)}: {v.stands}"
    if found.form in v.readings:
        message += f"; another documented reading of {v.name}: {v.readings[found.form]}"
    if v.departures(found.form):
        message += f"; by design: {', '.join(d.replace('_', ' ') for d in v.departures(found.form))}"
    return Finding("variant", message, found.to_dict(), severity)


def _silent_not_by_design(f: Finding, found: Recognition, inf: AdvantageFit) -> Finding | None:
    """The silent groups' residue where the variant's own form (its ε and lengths as recognised) leaves far less
    on the same probe batches, their rewards blurred by the rounding of the target's precision: the target's
    rounding noise amplified (a tiny ε outside a root), not the variant's design, so the finding stands as it is;
    None otherwise (it is the variant's to excuse, or not this finding)."""
    if f.property != "silent_nonbinary_groups_zero" or inf.silent_nonbinary_max_abs is None:
        return None
    own, unit = 0.0, UNIT_ROUNDOFF.get(str(inf.precision), UNIT_ROUNDOFF["float64"])
    rng = np.random.default_rng(0)
    for G in PROBE_GROUP_SIZES:
        r = silent_probe_batch(G)
        A = np.abs(found.answers(r * (1 + 4 * unit * rng.standard_normal(r.size)), G))  # the target's rounding
        own = max(own, float(np.where(np.isfinite(A), A, np.inf).max()))
    if inf.silent_nonbinary_max_abs <= 10 * abs(found.factor) * own + SILENT_RESIDUE_FAIL / 10:
        return None
    said = f"{found.variant.name}'s own form ({found.form}) gives |Â| up to {own:.3g} there at {inf.precision}'s "
    said += "rounding: not by design"
    return Finding(f.property, f"{f.message} ({said})", f.counterexample, f.severity)


def _by_design(f: Finding, v: Variant, form: str | None, expected: bool) -> Finding:
    """A finding about a property ``v`` gives up by design: a deviation (a note when ``v`` was
    expected); one on rewards outside a binary-only variant's definition: a note."""
    if f.severity not in ("fail", "deviation"):
        return f
    if v.binary_only and not _binary_example(f.counterexample):
        message = f"outside {v.name}'s definition (binary rewards): {f.message}"
        return Finding(f.property, message, f.counterexample, "note")
    if not v.departs_from(f.property, form):
        return f
    severity = "note" if expected else "deviation"
    return Finding(f.property, f"by design of {v.name}: {f.message}", f.counterexample, severity)


def _binary_example(example: dict[str, Any]) -> bool:
    """Whether a counterexample's rewards — its group's where it names one — are all 0 or 1 (True when it
    shows none: a finding is excused only on rewards seen to be outside the definition)."""
    rewards = example.get("group_rewards", example.get("rewards"))
    if not isinstance(rewards, list):
        return True
    return all(isinstance(x, (int, float)) and x in (0, 1) for x in rewards)


# --- filters -------------------------------------------------------------------------------------
def keep_rule(inf: FilterFit, findings: list[Finding], expect: D.Dial | None) -> Decision:
    """The filter verdict: the inferred keep rule against the expected one (any preset's if none)."""
    findings = list(findings)
    want = expect.keep if expect is not None else None
    wrong = "keeps_groups_with_nonzero_std"
    if inf.keep == "other" and not any(f.property == wrong for f in findings):
        findings.append(Finding(wrong, f"wrong keep rule: {inf.why}"))
    if want == "all" and inf.keep == "all":  # a keep-all filter is right for GRPO / Dr. GRPO
        findings = [f for f in findings if f.property != wrong]
    if _fails(findings):
        return Decision("fail", None, findings)
    candidates = [expect] if expect is not None else list(D.PRESETS.values())
    match = next((d for d in candidates if d.keep == inf.keep), None)
    if match is None:
        message = f"keep rule '{inf.keep}' where '{want or 'nonzero_std'}' is expected"
        return Decision("fail", None, [*findings, Finding(wrong, message)])
    if inf.keep_tolerance is not None:  # the rule, with a setting of its own
        message = f"keep rule 'nonzero_std' {inf.why}: groups with σ > 0 that small are dropped, not trained on"
        return Decision("deviation", match.name, [*findings, Finding("keep_tolerance", message, {}, "deviation")])
    return Decision("pass", match.name, findings)


# --- gradient level ------------------------------------------------------------------------------
def gradient(inf: GradientFit, findings: list[Finding], table: list[dict[str, Any]], expect: D.Dial | None) -> Decision:
    """The gradient-level verdict: fail on a failing finding (the split step's ``split_invariance``,
    ``masked_normaliser``, ``group_slicing``; off-policy, ``off_policy_silent_groups`` and
    ``identity_off_policy`` among them); else a deviation for a deviation-severity finding (a split that
    rescales the step; off-policy, ``kl_moves_silent_groups`` and ``clip_rule``), a non-constant weight, or
    advantage coefficients off the expected preset's; else pass."""
    findings = list(findings)
    if _fails(findings):
        return Decision("fail", None, findings, [], table)
    verdict = "deviation" if any(f.severity == "deviation" for f in findings) else "pass"
    law = inf.per_sample_weight
    if law != "constant":
        verdict = "deviation"
        means = "G1 holds with the weighted means s̄±ʷ, the direction changes"
        message = f"per-sample weight {law}: {WEIGHTS.get(law or '', 'no known law')}; {means}"
        findings.append(Finding("per_sample_weight", message, {}, "deviation"))
    ratios = [row["c_advantage"] / row["c_reference"] for row in table if row["c_reference"]]
    if expect is not None and ratios and max(abs(x - 1) for x in ratios) > GRADIENT_RATIO_TOL:
        verdict = "deviation"
        message = f"the advantage-level c(k, G) is {min(ratios):.6g}–{max(ratios):.6g} × {expect.name}'s"
        findings.append(Finding("matches_preset", message, {}, "deviation"))
    return Decision(verdict, None, findings, [], table)


def combine(grad: Report, adv: Report) -> Report:
    """The gradient report with the advantage-level audit of the same run folded in: the dial
    beside the weight law, the advantage findings first, the worse verdict.  The gradient's own
    ``matches_preset`` (its probes' c(k, G) against the expected preset) is dropped: the advantage
    audit says it, with the dial."""
    own = [f for f in grad.findings if f.property != "matches_preset"]
    variant = VARIANTS.get(adv.matches or "")
    if variant is not None:  # the gradient's findings of what the variant gives up by design
        expected = adv.expected == adv.matches
        form = next((f.counterexample.get("form") for f in adv.findings if f.property == "variant"), None)
        own = [_by_design(f, variant, form, expected) for f in own]
    levels = [f.severity for f in own if f.severity in VERDICTS]
    assert isinstance(grad.inferred, GradientFit) and isinstance(adv.inferred, AdvantageFit)
    inferred = replace(grad.inferred, advantage=copy.deepcopy(adv.inferred))
    return Report(
        target=grad.target,
        level="gradient",
        kind=grad.kind,
        verdict=worst(adv.verdict, *levels),
        matches=adv.matches,
        expected=grad.expected or adv.expected,  # a variant or a declared c(k, G) is the advantage level's alone
        inferred=inferred,
        findings=[*adv.findings, *own],
        coefficient_table=grad.coefficient_table,
        examples=adv.examples,
        properties=adv.properties,
        seconds=grad.seconds,
        target_info=grad.target_info,
        advantage=adv,
    )
