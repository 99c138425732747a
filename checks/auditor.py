"""The audit: which dial does an advantage (or filter) implementation compute, and is it sound?

``audit(target)`` resolves what to audit once (:func:`grpo_identity.checks.calls.spec.resolve`), builds
its options once (:class:`~grpo_identity.checks.options.AuditOptions`), loads the target (in a
child process unless it is a callable), and runs the level the spec names:

- **advantage**: infer the dial from designed reward batches (never reading the code,
  :func:`~grpo_identity.checks.measure.infer.infer_dial`), run every property of
  :mod:`grpo_identity.checks.measure.properties` under hypothesis (:mod:`grpo_identity.checks.measure.search`),
  probe the edges trainers meet (:mod:`grpo_identity.checks.measure.probes`);
- **filter**: infer the keep rule, run the filter properties;
- **gradient**: the per-sample weight of the target's loss and theorem G1
  (:mod:`grpo_identity.checks.gradient`), then the advantage audit of the advantages the same
  run computed.

The verdict (pass, deviation, fail) comes from :mod:`grpo_identity.checks.verdict`; the result is
one :class:`~grpo_identity.checks.report.Report`.

>>> from grpo_identity import dial as D
>>> report = audit(lambda r, G: D.advantages(r, G, D.TRL), expect="grpo", max_examples=20)
>>> report.verdict, report.matches, report.inferred.ddof
('deviation', 'trl', 1)
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
import time
from collections.abc import Iterator
from typing import Any, Callable, Iterable, cast

from grpo_identity import dial as D
from grpo_identity.checks import verdict as V
from grpo_identity.checks.calls.spec import FunctionSpec, Spec, resolve
from grpo_identity.checks.calls.target import LocalTarget, RoundedRewards, TargetError, load_target, round_rewards
from grpo_identity.checks.frameworks import AdapterError, FrameworkSpec
from grpo_identity.checks.measure import properties as P
from grpo_identity.checks.measure.infer import PROBE_GROUP_SIZES, infer_dial, infer_filter, tolerance_rule
from grpo_identity.checks.measure.merging import merged_groups
from grpo_identity.checks.measure.search import AnswerMemo, FiniteGuard, failure, run_property
from grpo_identity.checks.measure.shaping import folded_score
from grpo_identity.checks.options import CALL_TIMEOUT, DEFAULT_MAX_EXAMPLES, AuditOptions, OptionError
from grpo_identity.checks.report import (
    VERDICTS,
    AdvantageFit,
    AggregationFit,
    AuditReport,
    FilterFit,
    Finding,
    Fit,
    GradientFit,
    Report,
)

#: the names this module had before the report moved to :mod:`grpo_identity.checks.report`
__all__ = ["audit", "run", "AuditReport", "VERDICTS"]

#: properties whose statement needs two-valued rewards (the others see continuous rewards too)
_TWO_VALUED = (P.two_valued_per_group, P.identity_in_vector_form, P.silent_groups_exactly_zero)


def audit(
    target: Any,
    *,
    expect: str | D.Dial | Callable[[int, int], float] | None = None,
    kind: str = "advantage",
    level: str | None = None,
    sets: Iterable[str | tuple[str, str]] = (),
    config: str | None = None,
    release: str | None = None,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    timeout: float = CALL_TIMEOUT,
    load_timeout: float | None = None,
    isolate: bool | None = None,
    python: str | None = None,
    progress: bool = False,
    input: str | None = None,
    reward_dtype: str | None = None,
    call: str | None = None,
) -> Report:
    """Audit an advantage function, a group filter, or a framework as its users configure it.

    Parameters
    ----------
    target : callable, str or FrameworkSpec
        A callable (run in this process unless ``isolate``); ``FILE.py:fn``, ``module:fn``, a preset
        (``grpo``) or a framework (``trl``, ``verl:grpo`` …), each run in a child process.
    expect : str, Dial or callable, optional
        The expected preset, or a declared coefficient ``"c=sigma**2/G"`` or c(k, G)
        (:mod:`~grpo_identity.checks.measure.declared`); None: any preset.
    kind, level : str
        'advantage', 'filter' (a flag per group) or 'row-filter' (a flag per answer); 'advantage'
        or 'gradient' (None: the gradient for a framework's trainer path).
    sets, config, release
        A framework's config keys (``"loss_type=dr_grpo"``), its YAML file, a release to audit.
    max_examples, timeout, load_timeout, isolate, python, progress
        The run (:class:`~grpo_identity.checks.options.AuditOptions`, which bounds them).
    input, reward_dtype, call : str, optional
        How to call a function (:mod:`grpo_identity.checks.calls.calling`); by default its signature, its
        annotation and a first call decide.

    Returns
    -------
    Report
        ``verdict`` ('pass', 'deviation', 'fail'), ``matches``, ``inferred``, ``findings`` …

    Raises
    ------
    OptionError
        A bad option (a ``ValueError`` naming it).
    TargetImportError
        The target cannot be loaded or called: a bad spec, a missing file or function, a module
        that fails, hangs, exits or crashes while it is imported, inputs it refuses.

    Examples
    --------
    >>> from grpo_identity import dial as D
    >>> audit(lambda r, G: D.advantages(r, G, D.DR_GRPO), max_examples=10).matches
    'dr_grpo'
    """
    spec = resolve(
        target,
        sets=sets,
        config=config,
        level=level,
        kind=kind,
        release=release,
        input=input,
        reward_dtype=reward_dtype,
        call=call,
    )
    options = AuditOptions(
        expect=expect,
        max_examples=max_examples,
        timeout=timeout,
        load_timeout=load_timeout,
        isolate=isolate,
        python=python,
        progress=progress,
    )
    return run(spec, options)


def run(spec: Spec, options: AuditOptions) -> Report:
    """The audit of a resolved spec under checked options (what :func:`audit`, the CLI and the
    pytest plugin all call)."""
    t0 = time.perf_counter()
    name = spec.describe()
    if options.declared is not None and (spec.kind != "advantage"):
        raise OptionError(
            "expect", f"{options.declared.name}: a declared coefficient applies to advantages, not filters"
        )
    calling = spec.calling if isinstance(spec, FunctionSpec) else None
    dtype = calling.reward_dtype if calling is not None else "float64"
    with open_target(spec, options) as (opened, release):
        tgt = opened if dtype == "float64" else RoundedRewards(opened, dtype)
        if spec.level == "gradient":
            report = _gradient(tgt, name, options)
        elif spec.kind in ("filter", "row-filter"):
            report = _keep_rule(P.WholeGroups(tgt) if spec.kind == "row-filter" else tgt, name, options, spec.kind)
        else:
            report = _advantages(tgt, name, options)
        report.target_info = _redact(dict(getattr(opened, "info", {}) or {}))
    if release is not None:  # where the release ran: resolved how, as of when, every version
        report.target_info["environment"] = release.summary()
    if isinstance(spec, FrameworkSpec):
        report.findings += _settings_notes(spec.framework, report, options.expected)
    if options.declared is not None:  # the gradient level's own record names no preset
        report.expected = options.declared.name
    report.seconds = time.perf_counter() - t0
    return report


def _redact(info: Any) -> Any:
    """``info`` with every secret's value as ``***``, however deep: under a secret's key (a token, an API key), and
    the second item of a (key, value) pair whose key is a secret's."""
    from grpo_identity.checks.frameworks import is_secret, redacted

    if isinstance(info, dict):
        return {k: _secret(str(k), v) if is_secret(str(k)) else _redact(v) for k, v in info.items()}
    if isinstance(info, (list, tuple)):
        if len(info) == 2 and isinstance(info[0], str) and is_secret(info[0]):
            return [info[0], redacted(info[0], info[1])]
        return [_redact(v) for v in info]
    return info


def _secret(key: str, value: Any) -> Any:
    """A secret's value as ``***``; a record of it (``{"driver": None, "yours": …}``) with each value so."""
    from grpo_identity.checks.frameworks import redacted

    if isinstance(value, dict):
        return {k: redacted(key, v) for k, v in value.items()}
    return redacted(key, value)


def _settings_notes(framework: str, report: Report, expected: D.Dial | None) -> list[Finding]:
    """Notes naming the framework's setting that gives what the report did not find: a constant
    per-sample weight, the expected preset."""
    from grpo_identity.checks.frameworks import setting_for

    notes = []
    fit = report.inferred if isinstance(report.inferred, GradientFit) else GradientFit()
    weight = fit.per_sample_weight
    if weight not in (None, "constant", "other"):
        hint = setting_for(framework, "per_sample_weight", "constant")
        if hint:
            notes.append(Finding("setting", f"for a constant per-sample weight (the paper's 1/G): {hint}", {}, "note"))
    step = fit.step
    if step.get("invariant") is False:
        hint = setting_for(framework, "split", str(step.get("weight"))) or setting_for(framework, "split", "invariant")
        if hint:
            notes.append(Finding("setting", f"for an update that does not depend on the split: {hint}", {}, "note"))
    if expected is not None and report.matches != expected.name:
        hint = setting_for(framework, "preset", expected.name)
        known = (
            f"for {expected.name}: {hint}" if hint else f"no {framework} setting the driver knows gives {expected.name}"
        )
        notes.append(Finding("setting", known, {}, "note"))
    return notes


# --- the target ----------------------------------------------------------------------------------
@contextlib.contextmanager
def open_target(spec: Spec, options: AuditOptions) -> Iterator[tuple[Any, Any]]:
    """The target of ``spec`` opened as the audit opens it (in its release's environment where it names one), and
    that environment (None: this interpreter or ``options.python``)."""
    release = _release_env(spec, options)
    with _open(spec, options, release.python if release is not None else options.python) as opened:
        yield opened, release


def _release_env(spec: Spec, options: AuditOptions) -> Any:
    """The environment of the release a framework spec names (built on first use), or None."""
    if options.python is not None or not isinstance(spec, FrameworkSpec) or spec.release is None:
        return None
    from grpo_identity.checks.calls.releases import ensure

    if spec.release_auto:
        print(
            f"{spec.framework} is not installed here: auditing its release {spec.release} in an environment of "
            "its own (--release VERSION for another)",
            file=sys.stderr,
        )
    try:
        return ensure(spec.framework, spec.release)
    except AdapterError as exc:
        if spec.release_auto:
            where = f"{spec.framework} {spec.release} (its tested release; it is not installed here)"
            raise AdapterError(f"{where}: {exc}") from None
        raise OptionError("release", f"{spec.release}: {exc}") from None


def _open(spec: Spec, options: AuditOptions, python: str | None) -> Any:
    """The target, called here (a callable, or ``isolate=False``) or in a child process."""
    from grpo_identity.checks.calls.child import ChildTarget

    kind = "gradient" if spec.level == "gradient" else spec.kind
    name = spec.describe()
    framework = isinstance(spec, FrameworkSpec)
    payload: Any = spec if framework else spec.target  # type: ignore[union-attr]
    calling = spec.calling if isinstance(spec, FunctionSpec) else None
    if python is None and (options.isolate is False or (callable(payload) and not options.isolate)):
        fn = payload if callable(payload) else load_target(payload, kind)
        return LocalTarget(fn, name=name, kind=kind, calling=calling, spec=payload)
    warm = framework or (isinstance(spec, FunctionSpec) and spec.builtin)
    return ChildTarget(
        payload,
        kind=kind,
        timeout=options.timeout,
        load_timeout=options.load_timeout_for(framework),
        name=name,
        python=python,
        warm=warm,
        calling=calling,
    )


# --- the levels ----------------------------------------------------------------------------------
def _gradient(tgt: Any, name: str, options: AuditOptions) -> Report:
    """The gradient level, then the advantage level on the advantages of the same run."""
    from grpo_identity.checks.gradient import AdvantageView, audit_gradient

    expected = options.expected
    try:
        grad = audit_gradient(tgt, expect=expected, name=name)
    except TargetError as exc:
        finding = Finding("probe", failure(exc, f" on {getattr(exc, 'during', 'the gradient probes')}"))
        unprobed = GradientFit(advantage=AdvantageFit(why="not probed"))
        return _failed(name, "gradient", "advantage", options.expected_name, unprobed, [finding])
    adv = _advantages(AdvantageView(tgt), name, options)
    return V.combine(grad, adv)


def _advantages(tgt: Any, name: str, options: AuditOptions) -> Report:
    """The advantage level: dial inference, the property search, the edge probes."""
    t0 = time.perf_counter()
    expected = options.expected
    memo = AnswerMemo(tgt)
    guarded = FiniteGuard(memo)
    first: list[Finding] = []
    try:
        inf = infer_dial(guarded)
    except (P.PropertyViolation, TargetError) as exc:
        why = [_probe_failure(exc)]
        if not (isinstance(exc, P.PropertyViolation) and exc.property == "well_formed"):
            return _failed(name, "advantage", "advantage", options.expected_name, AdvantageFit(why="not probed"), why)
        # a NaN, an inf or a wrong shape on the designed batches: a finding, and the properties still run on the
        # batches where the target gives numbers (they tell a wrong axis from a wrong formula); no dial is inferred
        # from it
        malformed = "no dial inferred: the target's answers to the designed batches are malformed (well_formed)"
        first, inf = why, AdvantageFit(why=malformed)
    ctx = _context(tgt, inf)
    props = P.ADVANTAGE_PROPERTIES + (P.LAYOUT_PROPERTIES if ctx.reference_ids is not None else ())
    searched = FiniteGuard(memo, skip=True) if first else guarded
    findings, examples, ran = _search(searched, memo, props, ctx, options, name)
    findings = first + findings
    if getattr(tgt, "dead", None) is None and not first:  # (the edge probes of a target that gives NaN say NaN)
        from grpo_identity.checks.measure.probes import run_probes

        findings.extend(f for f in run_probes(tgt) if f is not None)
    findings += _aggregation(tgt, inf)
    decision = V.advantage(inf, findings, expected, options.declared)
    want = options.expected_variant
    if want is not None or decision.verdict == "fail":
        named = expected is not None or options.declared is not None
        decision = V.named_variant(decision, inf, _recognised(guarded, tgt, inf, want), want, named)
    if decision.verdict == "fail" and decision.matches is None and getattr(tgt, "dead", None) is None:
        decision = V.with_diagnosis(
            decision, merged_groups(guarded, inf.precision) or folded_score(guarded, inf.precision)
        )
    return _report(name, "advantage", inf, decision, options.expected_name, examples, ran, time.perf_counter() - t0)


def _aggregation(tgt: Any, inf: AdvantageFit) -> list[Finding]:
    """How a target whose driver scores several reward components combines them
    (:mod:`grpo_identity.checks.measure.aggregation`), into ``inf.aggregation``; its findings (none where the
    target's info announces no components)."""
    components = (getattr(tgt, "info", None) or {}).get("components")
    if not components or getattr(tgt, "dead", None) is not None:
        return []
    from grpo_identity.checks.measure.aggregation import audit_aggregation

    try:
        out = audit_aggregation(lambda C, G: tgt(C[:, 0].copy(), G, C), tuple(components["weights"]))
    except (TargetError, ValueError) as exc:  # a crash or a hang too: a note, and the audit goes on without it
        return [Finding("reward_aggregation", f"the reward components could not be probed: {exc}", {}, "note")]
    inf.aggregation = cast(AggregationFit, {k: v for k, v in out.items() if k != "findings"})
    return list(out["findings"])


def _recognised(guarded: Any, tgt: Any, inf: AdvantageFit, want: Any) -> Any:
    """The named variant the target computes (:mod:`grpo_identity.checks.measure.recognise`), or None; a
    target that fails on the recognition batches is recognised as nothing."""
    from grpo_identity.checks.measure.recognise import recognise

    if getattr(tgt, "dead", None) is not None:
        return None
    dtype = getattr(tgt, "dtype", None)
    try:
        return recognise(guarded, inf.precision, (lambda r: round_rewards(r, dtype)) if dtype else None, prefer=want)
    except TargetError:
        return None


def _context(tgt: Any, inf: AdvantageFit) -> P.Context:
    """What the properties compare against: the inferred dial, and, for a target that takes group
    ids, the same dial on rows in any order (groups of any size unless it also takes G)."""
    call = (getattr(tgt, "info", None) or {}).get("call") or {}
    with_ids = bool(call.get("takes_ids"))
    rounding = getattr(tgt, "dtype", None)
    reference, reference_ids = inf.reference(), inf.reference_ids() if with_ids else None
    if rounding is not None:  # the references see the rewards the target sees
        reference = _rounded(reference, rounding)
        reference_ids = _rounded(reference_ids, rounding)
    return P.Context(
        P.Tolerance.for_precision(inf.precision),
        reference=reference,
        batch_scale=inf.scale == "batch_std",
        reference_ids=reference_ids,
        ragged=with_ids and not call.get("takes_group_size"),
    )


def _rounded(fn: Any, dtype: str) -> Any:
    from grpo_identity.checks.calls.target import round_rewards

    return None if fn is None else (lambda r, *rest: fn(round_rewards(r, dtype), *rest))


def _keep_rule(tgt: Any, name: str, options: AuditOptions, kind: str = "filter") -> Report:
    """The filter audit: the keep rule inferred, the filter properties searched."""
    t0 = time.perf_counter()
    expected = options.expected
    inf = FilterFit(why="not probed")
    dtype = getattr(tgt, "dtype", None)
    memo = AnswerMemo(tgt)  # remembers the inference's answers too
    try:
        inf = infer_filter(memo, rounding=(lambda r: round_rewards(r, dtype)) if dtype else None)
    except (P.PropertyViolation, TargetError) as exc:
        return _failed(name, "advantage", kind, options.expected_name, inf, [_probe_failure(exc)])
    rule = tolerance_rule(inf.keep_tolerance, str(inf.keep_measure)) if inf.keep_tolerance is not None else None
    ctx = P.Context(P.Tolerance.for_precision("float64"), keep_reference=expected, keep_rule=rule)
    findings, examples, ran = _search(memo, memo, P.FILTER_PROPERTIES, ctx, options, name)
    if getattr(tgt, "dead", None) is None:
        from grpo_identity.checks.measure.probes import filter_singletons

        lone = filter_singletons(tgt, inf.keep)
        findings += [lone] if lone is not None else []
    decision = V.keep_rule(inf, findings, expected)
    return _report(name, kind, inf, decision, options.expected_name, examples, ran, time.perf_counter() - t0)


def _search(
    tgt: Any, memo: AnswerMemo, props: tuple[Any, ...], ctx: P.Context, options: AuditOptions, name: str
) -> tuple[list[Finding], int, list[str]]:
    """Each property on its share of the examples; its violation (shrunk) a finding.  A target
    that died stops the search; one non-finite output is one finding, not one per property.  The properties that
    judge answers get them from ``memo``, which sits beneath ``tgt`` (``tgt`` is ``memo`` or wraps it), where the
    target gave one for the same input before (:class:`~grpo_identity.checks.measure.search.AnswerMemo`)."""
    from tqdm import tqdm

    n_each = max(1, math.ceil(options.max_examples / len(props)))
    ctx = dataclasses.replace(ctx, earlier=memo.earlier)
    findings: list[Finding] = []
    examples, ran = 0, []
    bar = tqdm(props, desc=f"audit {name}", unit="property", disable=not options.progress, leave=False)
    for prop in bar:
        two_valued = prop in _TWO_VALUED
        kinds = ("binary", "two_valued") if two_valued else ("binary", "two_valued", "continuous")
        with memo.serve(prop not in P.CALL_PROPERTIES):
            violation, count = run_property(prop, tgt, ctx, n_each, kinds)
        examples += count
        ran.append(prop.__name__)
        if violation is None or any(f.property == violation.property == "well_formed" for f in findings):
            continue
        findings.append(Finding(violation.property, violation.message, violation.counterexample, violation.severity))
        if getattr(tgt, "dead", None) is not None:
            break
    return findings, examples, ran


def _probe_failure(exc: Exception) -> Finding:
    if isinstance(exc, P.PropertyViolation):
        return Finding(exc.property, exc.message, exc.counterexample)
    assert isinstance(exc, TargetError)
    where = " on the designed probe batches"
    return Finding("probe", failure(exc, where), {"group_sizes": list(PROBE_GROUP_SIZES)})


def _failed(name: str, level: str, kind: str, expected: str | None, inf: Fit, findings: list[Finding]) -> Report:
    return Report(name, level, kind, "fail", None, expected, inf, findings)


def _report(
    name: str,
    kind: str,
    inf: AdvantageFit | FilterFit,
    decision: V.Decision,
    expected: str | None,
    examples: int,
    ran: list[str],
    seconds: float,
) -> Report:
    return Report(
        target=name,
        level="advantage",
        kind=kind,
        verdict=decision.verdict,
        matches=decision.matches,
        expected=expected,
        inferred=inf,
        findings=decision.findings,
        factors=decision.factors,
        coefficient_table=decision.coefficient_table,
        examples=examples,
        properties=ran,
        seconds=seconds,
    )
