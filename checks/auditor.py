"""The audit: which dial does an advantage (or filter) implementation compute, and is it sound?

``audit(target)`` probes the target with designed reward batches (never reads its code), infers
its dial (:func:`grpo_identity.checks.infer.infer_dial`), runs every property of
:mod:`grpo_identity.checks.properties` under hypothesis, and gives a verdict:

- ``pass``: the target matches the expected preset (or, with none expected, some preset);
- ``deviation``: same family as expected (c ∝ σ for a group std; c ∝ σ² unscaled or batch std)
  but off by a bounded factor (Bessel's correction, a visible ε, a constant): the factor
  c_target / c_expected is reported at G = 4, 8, 16, 64;
- ``fail``: a property breaks (not two-valued, not zero-sum, coupled across groups, stateful,
  NaN/inf, wrong shape, wrong sign, a wrong keep rule …) or the scale is no function of σ of the
  dial's form, or the family differs from the expected one.

>>> from grpo_identity import dial as D
>>> report = audit(lambda r, G: D.advantages(r, G, D.TRL), expect="grpo", max_examples=20)
>>> report.verdict, report.matches, report.inferred.ddof
('deviation', 'trl', 1)
"""

from __future__ import annotations

import functools
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from grpo_identity import dial as D
from grpo_identity.checks import properties as P
from grpo_identity.checks.infer import PROBE_GROUP_SIZES, SILENT_PROBE_VALUES, Inferred, infer_dial, infer_keep_rule
from grpo_identity.checks.target import (
    ChildTarget,
    LocalTarget,
    TargetCrashed,
    TargetError,
    TargetMalformed,
    TargetTimeout,
    _OutputWatch,
    malformed,
    output_issue,
    to_numpy,
)

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

__all__ = ["AuditReport", "Finding", "audit", "FACTOR_GROUP_SIZES", "VERDICTS"]

VERDICTS = ("pass", "deviation", "fail")
#: group sizes of the reported factor c_target / c_expected
FACTOR_GROUP_SIZES = (4, 8, 16, 64)
#: silent groups of non-binary rewards: a residue above this fails (below: a note)
SILENT_RESIDUE_FAIL = 0.5
#: a deviation whose factor c_target / c_expected is within this of 1 for every probed G and k
#: changes no update by a material amount (it prints as 1.000000): a pass with a note
MATERIAL_FACTOR = 1e-6


@dataclass
class Finding:
    """One broken property (or a note): name, explicit message, the (shrunk) counterexample."""

    property: str
    message: str
    counterexample: dict[str, Any] = field(default_factory=dict)
    severity: str = "fail"
    """'fail' (breaks the identity), 'deviation' (a bounded factor), or 'note' (no effect on the verdict)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "property": self.property,
            "message": self.message,
            "counterexample": self.counterexample,
            "severity": self.severity,
        }


@dataclass
class AuditReport:
    """The audit's result: ``verdict``, the preset it ``matches``, the ``inferred`` dial, ``findings``."""

    target: str
    kind: str
    verdict: str
    matches: str | None
    expected: str | None
    inferred: Inferred
    findings: list[Finding]
    factors: list[dict[str, Any]] = field(default_factory=list)
    """c_target / c_expected per G in :data:`FACTOR_GROUP_SIZES` (at k = G/2, and min/max over k)."""
    coefficient_table: list[dict[str, Any]] = field(default_factory=list)
    examples: int = 0
    properties_run: list[str] = field(default_factory=list)
    seconds: float = 0.0
    target_info: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """True for 'pass' and 'deviation' (the CLI's exit code 0)."""
        return self.verdict != "fail"

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "level": "advantage",
            "kind": self.kind,
            "verdict": self.verdict,
            "matches": self.matches,
            "expected": self.expected,
            "inferred": self.inferred.to_dict(),
            "findings": [f.to_dict() for f in self.findings],
            "factors": self.factors,
            "coefficient_table": self.coefficient_table,
            "examples": self.examples,
            "properties": self.properties_run,
            "seconds": round(self.seconds, 3),
            "target_info": self.target_info,
        }

    def format(self) -> str:
        """A readable report: verdict, inferred dial, coefficient table, findings."""
        from grpo_identity.foundation import format_table

        inf = self.inferred
        info = ", ".join(
            f"{k} {v}"
            for k, v in self.target_info.items()
            if k in ("framework", "version", "entry", "estimator", "preset", "options") and v not in ({}, None)
        )
        lines = [f"audit of {self.target}" + (f" ({info})" if info else "") + f", kind {self.kind}"]
        lines.append(
            f"verdict: {self.verdict.upper()}   matches: {self.matches or '-'}   expected: {self.expected or 'any preset'}"
        )
        if self.kind == "filter":
            lines.append(f"inferred keep rule: {inf.keep} ({inf.why})")
        elif inf.centre is None:
            lines.append(f"inferred dial: none fits ({inf.why})")
        else:
            parts = [f"centre {inf.centre}", f"scale {inf.scale}"]
            if inf.scale != "none":
                parts += [
                    f"ddof {inf.ddof}",
                    f"eps {inf.eps:.3g}{' inside the square root, √(σ² + ε)' if inf.eps_inside_sqrt else ''} (resolution {inf.eps_resolution:.1g})",
                ]
            if inf.alpha != 1.0:
                parts.append(f"constant factor {inf.alpha:.6g}")
            lines.append("inferred dial: " + ", ".join(parts) + f"; computes in {inf.precision}")
            if inf.silent_nonbinary_max_abs is not None:
                binary = (
                    "NOT exactly 0 (see findings)"
                    if any(f.property == "silent_groups_exactly_zero" for f in self.findings)
                    else "exactly 0"
                )
                lines.append(
                    f"silent groups: binary {binary}; all-0.1-style groups |Â| ≤ {inf.silent_nonbinary_max_abs:.3g}"
                )
        lines.append(
            f"properties: {len(self.properties_run)} run on {self.examples} hypothesis examples in {self.seconds:.1f} s"
        )
        if self.coefficient_table:
            lines.append("")
            lines.append(
                f"update coefficient c(k, G) in g = c·(s̄₊ − s̄₋), against {self.coefficient_table[0]['reference']}:"
            )
            rows = [[r["G"], r["k"], r["c_target"], r["c_reference"], r["ratio"]] for r in self.coefficient_table]
            lines.append(format_table(rows, ["G", "k", "c target", "c reference", "ratio"]))
        if self.factors:
            lines.append("")
            lines.append(
                format_table(
                    [[f["G"], f["factor_at_half"], f["factor_min"], f["factor_max"]] for f in self.factors],
                    ["G", "factor at k=G/2", "min over k", "max over k"],
                )
            )
        if self.findings:
            lines.append("")
            lines.append("findings:")
            for f in self.findings:
                lines.append(f"  [{f.severity}] {f.property}: {f.message}")
                ce = {
                    k: v
                    for k, v in f.counterexample.items()
                    if k in ("group_size", "n_groups", "group", "group_rewards", "group_output", "rewards")
                }
                if ce:
                    lines.append(f"      counterexample: {ce}")
        else:
            lines.append("findings: none")
        return "\n".join(lines)


# --- dial comparison -----------------------------------------------------------------------------
def _family(scale: str | None) -> str:
    """c ∝ σ (group std) or c ∝ σ² (no std, or one std for the whole batch)."""
    return "sigma" if scale == "group_std" else "sigma_squared"


def _matches_preset(inf: Inferred, d: D.Dial) -> bool:
    if inf.centre != d.centre or inf.scale != d.scale or inf.alpha != 1.0 or inf.eps_inside_sqrt:
        return False
    if d.scale == "none":
        return True
    if d.scale == "batch_std" or inf.ddof != d.ddof:
        return inf.ddof == d.ddof and d.scale == "batch_std"
    return abs(float(inf.eps or 0.0) - d.eps) <= max(inf.eps_resolution, 0.02 * d.eps)


def _nearest(inf: Inferred) -> D.Dial | None:
    fam = [d for d in D.PRESETS.values() if _family(d.scale) == _family(inf.scale) and d.keep == "all"]
    if not fam:
        return None
    return min(
        fam,
        key=lambda d: (
            d.centre != inf.centre,
            d.ddof != inf.ddof,
            abs(math.log10((d.eps or 1e-12) / max(inf.eps or 0.0, 1e-12))),
        ),
    )


def _coefficient_tables(inf: Inferred, ref: D.Dial) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    table, factors = [], []
    for G in FACTOR_GROUP_SIZES:
        if G not in inf.coefficients:
            continue
        ratios = []
        for k in range(1, G):
            ct = inf.coefficients[G][k]
            cr = float(D.coefficient(k, G, ref))
            ratios.append(ct / cr if cr else float("nan"))
            if k in sorted({1, max(1, G // 4), G // 2, G - 1}):
                table.append(
                    {
                        "G": G,
                        "k": k,
                        "c_target": ct,
                        "c_reference": cr,
                        "ratio": ct / cr if cr else None,
                        "reference": ref.name,
                    }
                )
        factors.append(
            {
                "G": G,
                "factor_at_half": ratios[G // 2 - 1],
                "factor_min": float(np.nanmin(ratios)),
                "factor_max": float(np.nanmax(ratios)),
            }
        )
    return table, factors


# --- hypothesis runner ---------------------------------------------------------------------------
def _failure(exc: TargetError, where: str = "") -> str:
    """A target error in words: "the target timed out / crashed / raised{where}: …", or, for a
    malformed output, "the target returned None{where}, not an array …"."""
    if isinstance(exc, TargetMalformed):
        head, _, tail = str(exc).partition(",")
        return f"the target {head}{where},{tail}" if tail else f"the target {exc}{where}"
    what = "timed out" if isinstance(exc, TargetTimeout) else "crashed" if isinstance(exc, TargetCrashed) else "raised"
    return f"the target {what}{where}: {exc}"


class _FiniteGuard:
    """The target, except that a NaN or an inf in its advantages is one ``well_formed`` violation
    at once: every later comparison (NaN ≠ NaN) would otherwise report false findings
    ("stateless", "permutation") and an infinite silent-group residue."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    def __call__(self, rewards: np.ndarray, group_size: int) -> Any:
        out = self._target(rewards, group_size)
        A = np.asarray(out)
        if A.shape == rewards.shape and np.issubdtype(A.dtype, np.floating):
            bad = ~np.isfinite(A)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                g, G = i // group_size, int(group_size)
                row = rewards[g * G : (g + 1) * G]
                raise P.PropertyViolation(
                    "well_formed",
                    f"non-finite advantage {float(A[i])} in group {g} (G={G}, rewards {P._fmt(row)}): the identity is undefined there",
                    P._example(rewards, G, A.astype(np.float64), g),
                )
        return out


def _run_property(
    prop: Callable[..., None], target: Any, ctx: P.Context, n: int, kinds: tuple[str, ...]
) -> tuple[P.PropertyViolation | None, int]:
    """Run one property on ``n`` hypothesis examples; return its (shrunk) violation and the count."""
    from hypothesis import HealthCheck, Verbosity, given, settings
    from hypothesis import strategies as st

    count = [0]
    name = prop.__name__

    @settings(
        max_examples=n,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
        report_multiple_bugs=False,
        print_blob=False,
    )
    @given(batch=_batches(kinds), seed=st.integers(0, 2**32 - 1))
    def run(batch: Any, seed: int) -> None:
        count[0] += 1
        try:
            prop(target, batch, ctx, np.random.default_rng(seed))
        except TargetError as exc:
            raise P.PropertyViolation(name, _failure(exc), P._example(batch.contiguous(), batch.group_size)) from None

    try:
        run()
    except P.PropertyViolation as v:
        return v, count[0]
    except BaseExceptionGroup as group:  # hypothesis's Flaky: the same input failed only sometimes
        first = _first_violation(group)
        if first is None:
            raise
        return P.PropertyViolation(
            first.property,
            f"{first.message} (and not on every run of the same input: flaky, the target is not deterministic)",
            first.counterexample,
        ), count[0]
    return None, count[0]


@functools.lru_cache(maxsize=8)
def _batches(kinds: tuple[str, ...]) -> Any:
    from grpo_identity.checks.strategies import reward_batches

    return reward_batches(kinds=kinds, max_groups=6, max_total=2048)


def _first_violation(group: BaseExceptionGroup) -> P.PropertyViolation | None:
    for exc in group.exceptions:
        if isinstance(exc, P.PropertyViolation):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            found = _first_violation(exc)
            if found is not None:
                return found
    return None


def _open(
    target: Any,
    isolate: bool | None,
    timeout: float,
    kind: str,
    python: str | None = None,
    load_timeout: float | None = None,
) -> Any:
    from grpo_identity.checks.target import load_target

    if python is not None:
        return ChildTarget(
            target, kind=kind, timeout=timeout, load_timeout=load_timeout, name=_name(target), python=python
        )
    if not callable(target):  # a spec string or a framework spec
        if isolate is False:
            return LocalTarget(load_target(target, kind), name=_name(target), kind=kind)
        return ChildTarget(target, kind=kind, timeout=timeout, load_timeout=load_timeout, name=_name(target))
    if isolate:
        return ChildTarget(target, kind=kind, timeout=timeout, load_timeout=load_timeout)
    return LocalTarget(target, kind=kind)


def audit(
    target: Any,
    kind: str = "advantage",
    expect: str | D.Dial | None = None,
    max_examples: int = 200,
    timeout: float = 60.0,
    *,
    isolate: bool | None = None,
    progress: bool = False,
    level: str | None = None,
    python: str | None = None,
    load_timeout: float | None = None,
) -> Any:
    """Audit an advantage function (``kind='advantage'``) or a group filter (``kind='filter'``).

    ``target``: a callable ``fn(rewards, group_size)`` (run in this process unless ``isolate``)
    or a spec string (``file.py:fn``, ``module:fn``, an adapter name; run in a child process with
    ``timeout`` seconds per call).  ``expect``: a preset name or :class:`~grpo_identity.dial.Dial`.
    ``max_examples``: hypothesis examples in total, shared by the properties.  ``python``: the
    child's interpreter (a release's environment, :mod:`~grpo_identity.checks.releases`);
    ``load_timeout``: seconds for loading the target (default ``timeout``).  ``level``:
    'advantage' (an :class:`AuditReport`) or 'gradient' (a framework's loss gradient, a
    :class:`~grpo_identity.checks.gradient.GradientReport`, with the advantage audit of the same
    target inside); by default 'gradient' for a framework target (its spec's ``level`` if set;
    'advantage' for the estimator-function form), else 'advantage'.  Raises
    :class:`~grpo_identity.checks.target.TargetImportError` when the target cannot be loaded.
    """
    if level is None:
        level = _default_level(target)
    if level not in ("advantage", "gradient"):
        raise ValueError(f"level must be 'advantage' or 'gradient', got {level!r}")
    if kind not in ("advantage", "filter"):
        raise ValueError(f"kind must be 'advantage' or 'filter', got {kind!r}")
    if isinstance(max_examples, bool) or not isinstance(max_examples, int) or max_examples < 1:
        raise ValueError(f"max_examples must be a positive integer, got {max_examples!r}")
    if not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if level == "gradient":
        return _audit_gradient(target, expect, timeout, isolate, python, load_timeout, max_examples, progress)
    exp = D.preset(expect) if isinstance(expect, str) else expect
    t0 = time.perf_counter()
    name = _name(target)
    try:
        opened = _open(target, isolate, timeout, kind, python, load_timeout)
    except (TargetTimeout, TargetCrashed) as exc:
        report = AuditReport(
            name, kind, "fail", None, exp.name if exp else None, Inferred(why="not probed"), [Finding("load", str(exc))]
        )
        report.seconds = time.perf_counter() - t0
        return report
    with opened as tgt:
        report = _audit_open(tgt, name, kind, exp, max_examples, progress)
        report.target_info = dict(getattr(tgt, "info", {}) or {})
        if not report.target_info and isinstance(tgt, LocalTarget):
            report.target_info = dict(getattr(tgt.fn, "grpo_identity_info", {}) or {})
    report.seconds = time.perf_counter() - t0
    return report


def _default_level(target: Any) -> str:
    """Gradient for a framework target (a spec or its short form), advantage for anything else."""
    from grpo_identity.checks.frameworks import FRAMEWORKS, FrameworkSpec, parse_spec

    if isinstance(target, str) and target.split(":")[0].strip().lower() in FRAMEWORKS:
        target = parse_spec(target)
    return target.default_level() if isinstance(target, FrameworkSpec) else "advantage"


def _name(target: Any) -> str:
    from grpo_identity.checks.frameworks import FrameworkSpec

    if isinstance(target, FrameworkSpec):
        return target.describe()
    return target if isinstance(target, str) else getattr(target, "__qualname__", repr(target))


def _audit_gradient(
    target: Any,
    expect: str | D.Dial | None,
    timeout: float,
    isolate: bool | None,
    python: str | None = None,
    load_timeout: float | None = None,
    max_examples: int = 200,
    progress: bool = False,
) -> Any:
    """The gradient-level audit of a framework target (see :mod:`grpo_identity.checks.gradient`),
    then the advantage-level audit of the advantages the same target computed (one child process
    serves both): the verdict is the worse of the two."""
    from grpo_identity.checks.gradient import GradientReport, audit_gradient

    name = _name(target)
    ref = D.preset(expect) if isinstance(expect, str) else expect
    exp = ref.name if ref is not None else None
    t0 = time.perf_counter()
    try:
        opened = _open(target, isolate, timeout, "gradient", python, load_timeout)
    except (TargetTimeout, TargetCrashed) as exc:
        return GradientReport(
            name,
            "fail",
            exp,
            {"per_sample_weight": None},
            [Finding("load", str(exc))],
            seconds=time.perf_counter() - t0,
        )
    with opened as tgt:
        try:
            report = audit_gradient(tgt, expect=ref, name=name)
        except TargetError as exc:
            report = GradientReport(
                name,
                "fail",
                exp,
                {"per_sample_weight": None},
                [Finding("probe", _failure(exc, " on the gradient probes"))],
            )
        else:
            t1 = time.perf_counter()
            adv = _audit_open(_AdvantageView(tgt), name, "advantage", ref, max_examples, progress)
            adv.seconds = time.perf_counter() - t1
            _combine(report, adv)
        report.target_info = dict(getattr(tgt, "info", {}) or {}) or dict(
            getattr(getattr(tgt, "fn", None), "grpo_identity_info", {}) or {}
        )
    report.seconds = time.perf_counter() - t0
    return report


class _AdvantageView:
    """A gradient target seen as an advantage function: ``fn(rewards, G)`` → the advantages it
    computed on answers of the gradient probes' lengths.  A target whose info says
    ``lengths_optional`` (the framework drivers) is called with ``lengths=None`` and skips its
    loss; any other gets lengths and its loss is computed and ignored."""

    def __init__(self, target: Any) -> None:
        self._target = target
        self._skip_loss = bool((getattr(target, "info", None) or {}).get("lengths_optional"))
        self._watch = _OutputWatch()
        self.last_issue: str | None = None
        self.last_overwrite: str | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    def __call__(self, rewards: np.ndarray, group_size: int) -> Any:
        from grpo_identity.checks.gradient import answer_lengths

        out = self._target(rewards, group_size, None if self._skip_loss else answer_lengths(len(rewards)))
        adv = out.get("advantages") if isinstance(out, dict) else None
        bad = malformed(adv, "advantage")
        if bad is not None:
            raise TargetMalformed(f"{bad} (the 'advantages' of its gradient output)")
        # the same checks as a call at the advantage level: input untouched (the child saw it),
        # dtype kept, no shared output buffer
        self.last_overwrite = self._watch.check(adv)
        self.last_issue = getattr(self._target, "last_issue", None) or output_issue(rewards, rewards, adv)
        return np.array(to_numpy(adv), dtype=np.float64, copy=True)


_SEVERITY = {"pass": 0, "deviation": 1, "fail": 2}


def _combine(report: Any, adv: AuditReport) -> None:
    """Fold the advantage-level audit into a gradient report: the dial beside the weight law, the
    advantage findings first, the worse verdict.  The gradient audit's own ``matches_preset``
    (the probes' c(k, G) against the expected preset) is dropped: the advantage audit says it,
    with the dial."""
    report.advantage = adv
    report.matches = adv.matches
    report.inferred = {**adv.inferred.to_dict(), **report.inferred}
    own = [f for f in report.findings if f.property != "matches_preset"]
    levels = [f.severity for f in own if f.severity in _SEVERITY]
    report.findings = [*adv.findings, *own]
    report.verdict = max([adv.verdict, *levels], key=_SEVERITY.__getitem__)


def _audit_open(tgt: Any, name: str, kind: str, exp: D.Dial | None, max_examples: int, progress: bool) -> AuditReport:
    findings: list[Finding] = []
    raw = tgt
    if kind == "advantage":
        tgt = _FiniteGuard(tgt)
    inf = Inferred(why="not probed")
    try:
        if kind == "filter":
            inf.keep, inf.why = infer_keep_rule(tgt)
            inf.precision = "bool"
        else:
            inf = infer_dial(tgt)
    except P.PropertyViolation as v:
        findings.append(Finding(v.property, v.message, v.counterexample))
    except TargetError as exc:
        findings.append(
            Finding("probe", _failure(exc, " on the designed probe batches"), {"group_sizes": list(PROBE_GROUP_SIZES)})
        )
    if findings:
        return AuditReport(name, kind, "fail", None, exp.name if exp else None, inf, findings)
    precision = inf.precision if kind == "advantage" else "float64"
    ctx = P.Context(
        P.Tolerance.for_precision(precision),
        reference=inf.reference() if kind == "advantage" else None,
        batch_scale=inf.scale == "batch_std",
        keep_reference=exp if (kind == "filter" and exp is not None) else None,
    )
    props = P.ADVANTAGE_PROPERTIES if kind == "advantage" else P.FILTER_PROPERTIES
    n_each = max(1, math.ceil(max_examples / len(props)))
    examples, ran = 0, []
    from tqdm import tqdm

    for prop in tqdm(props, desc=f"audit {name}", unit="property", disable=not progress, leave=False):
        kinds = (
            ("binary", "two_valued")
            if prop in (P.two_valued_per_group, P.identity_in_vector_form, P.silent_groups_exactly_zero)
            else ("binary", "two_valued", "continuous")
        )
        if kind == "filter":
            kinds = ("binary", "two_valued", "continuous")
        violation, count = _run_property(prop, tgt, ctx, n_each, kinds)
        examples += count
        ran.append(prop.__name__)
        if violation is not None and not any(f.property == violation.property == "well_formed" for f in findings):
            findings.append(
                Finding(violation.property, violation.message, violation.counterexample, violation.severity)
            )
            if getattr(tgt, "dead", None) is not None:
                break
    if kind == "advantage" and getattr(raw, "dead", None) is None:
        from grpo_identity.checks.probes import run_probes

        findings.extend(f for f in run_probes(raw) if f is not None)
    report = AuditReport(
        name, kind, "fail", None, exp.name if exp else None, inf, findings, examples=examples, properties_run=ran
    )
    if kind == "filter":
        return _filter_verdict(report, exp)
    return _advantage_verdict(report, exp)


def _filter_verdict(report: AuditReport, exp: D.Dial | None) -> AuditReport:
    inf = report.inferred
    want = exp.keep if exp is not None else None
    if inf.keep == "other" and not any(f.property == "keeps_groups_with_nonzero_std" for f in report.findings):
        report.findings.append(Finding("keeps_groups_with_nonzero_std", f"wrong keep rule: {inf.why}"))
    if want == "all" and inf.keep == "all":  # a keep-all filter is right for GRPO / Dr. GRPO
        report.findings = [f for f in report.findings if f.property != "keeps_groups_with_nonzero_std"]
    if any(f.severity == "fail" for f in report.findings):
        report.verdict = "fail"
        return report
    rule = inf.keep
    cands = [exp] if exp is not None else [d for d in D.PRESETS.values()]
    match = next((d for d in cands if d.keep == rule), None)
    report.verdict = "pass" if match is not None else "fail"
    report.matches = match.name if match is not None else None
    if match is None:
        report.findings.append(
            Finding(
                "keeps_groups_with_nonzero_std",
                f"keep rule '{rule}' where '{exp.keep if exp else 'nonzero_std'}' is expected",
            )
        )
    return report


def _advantage_verdict(report: AuditReport, exp: D.Dial | None) -> AuditReport:
    inf = report.inferred
    res = inf.silent_nonbinary_max_abs
    if res is not None and res > 0:
        w = inf.silent_nonbinary_worst or {}
        sev = "fail" if not math.isfinite(res) or res > SILENT_RESIDUE_FAIL else "note"
        report.findings.append(
            Finding(
                "silent_nonbinary_groups_zero",
                f"silent groups of non-binary rewards (every reward 0.1, 0.3, 1/3 …) get |Â| up to {res:.3g} instead of exactly 0 (worst: every reward {w.get('value', float('nan')):.6g} at G = {w.get('G')}): float rounding of the group mean{' amplified by 1/(std + ε)' if inf.scale == 'group_std' else ''}",
                {
                    "group_rewards": f"every reward {w.get('value')}",
                    "group_size": w.get("G"),
                    "values": list(SILENT_PROBE_VALUES),
                    "group_sizes": list(PROBE_GROUP_SIZES),
                },
                sev,
            )
        )
    if inf.centre is None:
        report.findings.append(Finding("dial", f"no point of the dial fits: {inf.why}"))
    elif (
        inf.coupled
        and inf.scale != "batch_std"
        and not any(f.property == "groups_independent" for f in report.findings)
    ):
        report.findings.append(Finding("groups_independent", inf.why))
    if any(f.severity == "fail" for f in report.findings):
        report.verdict = "fail"
        return report
    found = next(
        (d for d in ([exp] if exp else []) + list(D.PRESETS.values()) if _matches_preset(inf, d.replace(keep="all"))),
        None,
    )
    report.matches = found.name if found is not None else None
    ref = exp if exp is not None else (found or _nearest(inf))
    if ref is None:
        report.verdict = "fail"
        report.findings.append(Finding("dial", "the inferred dial is in no preset's family"))
        return report
    report.coefficient_table, factors = _coefficient_tables(inf, ref)
    if inf.scale == "batch_std":  # c = σ²/σ_batch: the factor against an unscaled preset is 1/σ_batch of the batch
        for row in report.coefficient_table:
            row["note"] = f"batch std {inf.batch_std[row['G']]:.4g} of the probe batch"
    if exp is not None and _matches_preset(inf, exp.replace(keep="all")):
        report.verdict, report.matches = "pass", exp.name
    elif exp is None and found is not None:
        report.verdict = "pass"
    elif _family(inf.scale) == _family(ref.scale) and _immaterial(factors):
        report.verdict, report.matches, report.factors = "pass", ref.name, factors
        report.findings.append(
            Finding(
                "matches_preset",
                _deviation_message(inf, ref, factors)
                + f": |factor − 1| < {MATERIAL_FACTOR:g} at every probed G and k, no material change of any update",
                {},
                "note",
            )
        )
    elif _family(inf.scale) == _family(ref.scale):
        report.verdict = "deviation"
        report.factors = factors
        report.findings.append(Finding("matches_preset", _deviation_message(inf, ref, factors), {}, "deviation"))
    else:
        report.verdict = "fail"
        report.findings.append(
            Finding(
                "matches_preset",
                f"wrong family: the target scales like {_describe(inf)} (c ∝ {'σ' if _family(inf.scale) == 'sigma' else 'σ²'}), {ref.name} expects c ∝ {'σ' if _family(ref.scale) == 'sigma' else 'σ²'}",
                {},
            )
        )
    return report


def _immaterial(factors: list[dict[str, Any]]) -> bool:
    """Every factor c_target / c_expected (min and max over k, each probed G) within MATERIAL_FACTOR of 1."""
    vals = [v for f in factors for v in (f["factor_min"], f["factor_max"])]
    return bool(vals) and all(math.isfinite(v) and abs(v - 1.0) < MATERIAL_FACTOR for v in vals)


def _describe(inf: Inferred) -> str:
    if inf.scale == "none":
        return f"centre {inf.centre}, no std"
    return f"centre {inf.centre}, {inf.scale} (ddof {inf.ddof}, eps {inf.eps:.3g}{' inside √' if inf.eps_inside_sqrt else ''})"


def _deviation_message(inf: Inferred, ref: D.Dial, factors: list[dict[str, Any]]) -> str:
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
    f = ", ".join(f"G={r['G']}: {r['factor_at_half']:.6g}" for r in factors)
    return f"same family as {ref.name} but {'; '.join(why) or 'off by a factor'}; c_target/c_{ref.name} at k=G/2: {f}"
