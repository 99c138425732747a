"""pytest plugin: audit an advantage function against the identity in one line of a test.

Registered as the ``pytest11`` entry point ``grpo_identity``; loads only pytest at import (the
audit, numpy and hypothesis load when a test uses the fixture)::

    def test_advantages(grpo_identity):
        grpo_identity.check(my_advantages, expect="grpo")      # or grpo_identity(my_advantages, …)

    @pytest.mark.grpo_identity(expect="dapo", kind="filter", max_examples=100)
    def test_filter(grpo_identity):
        grpo_identity(my_filter)

A ``fail`` verdict fails the test with the readable report (its first line: the verdict, the
target, the deciding finding); a ``deviation`` from an expected preset fails too unless
``allow_deviation=True``; a target that cannot be loaded fails it with the reason.  A function
defined at the top of a module (a test file too) or a spec string runs in a child process, so
``timeout`` stops a hang; ``isolate=False`` runs it in this process, and a local function or
lambda always runs here (the report says so in a note).  A marker with an option it does not
know fails its own test, naming the options it knows; the rest of the session runs.  Options:
``--grpo-identity-max-examples``, ``--grpo-identity-timeout``; the header names them.  ``expect``
takes a preset or a declared coefficient, ``expect="c=sigma**2/G"`` or a callable c(k, G)
(:mod:`grpo_identity.checks.measure.declared`).
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

#: options the ``grpo_identity`` marker and ``check`` accept: the audit's, and the plugin's own
MARKER_OPTIONS = (
    "expect",
    "kind",
    "level",
    "max_examples",
    "timeout",
    "allow_deviation",
    "isolate",
    "input",
    "reward_dtype",
    "call",
)
#: the marker options that say what the target is and how to call it (the resolver's), not how to audit
_SPEC_OPTIONS = ("kind", "level", "input", "reward_dtype", "call")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("grpo-identity", "audits of advantage functions (grpo-identity)")
    from grpo_identity.checks.options import CALL_TIMEOUT, DEFAULT_MAX_EXAMPLES  # light: dial (numpy) only

    group.addoption(
        "--grpo-identity-max-examples",
        type=int,
        default=DEFAULT_MAX_EXAMPLES,
        metavar="N",
        help="hypothesis examples per audit (default 200)",
    )
    group.addoption(
        "--grpo-identity-timeout",
        type=float,
        default=CALL_TIMEOUT,
        metavar="S",
        help="seconds per call into an isolated target (default 60)",
    )


def pytest_configure(config: pytest.Config) -> None:
    options = ", ".join(MARKER_OPTIONS)
    config.addinivalue_line("markers", f"grpo_identity(**options): options for the grpo_identity fixture ({options})")
    if config.pluginmanager.hasplugin("grpo_identity") and _defaults(config) is not None:
        _check_flags(config)


def _defaults(config: pytest.Config) -> dict[str, Any] | None:
    """The audit defaults the command line sets (None when pytest was run without them)."""
    try:
        return {
            "max_examples": config.getoption("--grpo-identity-max-examples"),
            "timeout": config.getoption("--grpo-identity-timeout"),
        }
    except ValueError:  # the options were not registered (the plugin is loaded but inactive)
        return None


def _check_flags(config: pytest.Config) -> None:
    """A bad ``--grpo-identity-*`` value stops the session at once, naming the flag."""
    from grpo_identity.checks.options import AuditOptions, OptionError

    try:
        AuditOptions(**(_defaults(config) or {}))
    except OptionError as exc:
        flags = {"max_examples": "--grpo-identity-max-examples", "timeout": "--grpo-identity-timeout"}
        raise pytest.UsageError(exc.worded(flags)) from None


def pytest_report_header(config: pytest.Config) -> str:
    n = config.getoption("--grpo-identity-max-examples")
    t = config.getoption("--grpo-identity-timeout")
    return f"grpo-identity: max_examples={n}, derandomize=True, database=None, deadline=None, timeout={t:g}s"


def _unknown(options: dict[str, Any], where: str) -> str | None:
    """Why ``options`` are not the marker's, or None."""
    bad = sorted(set(options) - set(MARKER_OPTIONS))
    if not bad:
        return None
    return f"{where} got unknown option(s) {', '.join(bad)}; allowed: {', '.join(MARKER_OPTIONS)}"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    """A marker with positional arguments, an unknown option or a bad value fails its own test."""
    for mark in item.iter_markers("grpo_identity"):
        if mark.args:
            pytest.fail(f"the grpo_identity marker takes keyword options only, got {mark.args!r}", pytrace=False)
        why = _unknown(dict(mark.kwargs), "the grpo_identity marker") or _bad_value(dict(mark.kwargs))
        if why:
            pytest.fail(why, pytrace=False)


def _bad_value(options: dict[str, Any]) -> str | None:
    """Why the marker's values make no audit (the resolver's and the options record's own checks,
    without a target), or None."""
    from grpo_identity.checks.calls.calling import CallOptions
    from grpo_identity.checks.calls.spec import check_kind_level
    from grpo_identity.checks.options import AuditOptions, OptionError

    audit_options = {k: v for k, v in options.items() if k not in (*_SPEC_OPTIONS, "allow_deviation")}
    try:
        check_kind_level(options.get("kind", "advantage"), options.get("level"))
        CallOptions(options.get("input"), options.get("reward_dtype") or "float64", options.get("call"))
        AuditOptions(**audit_options)
    except OptionError as exc:
        return f"grpo_identity: {exc.worded({})} (options: {', '.join(MARKER_OPTIONS)})"
    return None


def summary(report: Any) -> str:
    """The failure's first line (what pytest's short summary shows): verdict first, then the target
    and the first finding that decided it."""
    decisive = next((f for f in report.findings if f.severity != "note"), None)
    why = f": {decisive.property}: {decisive.message}" if decisive is not None else ""
    return f"grpo_identity {report.verdict.upper()} {report.target} (expected {report.expected or 'any preset'}){why}"


class Checker:
    """The ``grpo_identity`` fixture: ``check(fn, …)`` (also callable) audits and asserts."""

    def __init__(self, defaults: dict[str, Any]) -> None:
        self.defaults = defaults
        self.reports: list[Any] = []

    def check(self, target: Callable[..., Any] | str, **options: Any) -> Any:
        """Audit ``target`` (a callable ``fn(rewards, G)`` or a spec string); fail the test on a
        ``fail`` verdict (or a ``deviation`` from ``expect`` unless ``allow_deviation``).
        Returns the :class:`~grpo_identity.checks.report.Report`."""
        from grpo_identity.checks import TargetImportError, run
        from grpo_identity.checks.calls.spec import resolve
        from grpo_identity.checks.options import AuditOptions, OptionError
        from grpo_identity.checks.report import Finding

        why = _unknown(options, "grpo_identity.check")
        if why:
            pytest.fail(why, pytrace=False)
        opts = {**self.defaults, **options}
        allow_deviation = bool(opts.pop("allow_deviation", False))
        note = None
        if opts.get("isolate") is None:  # a child process, so that the timeout can stop a hang
            opts["isolate"], note = _isolable(target)
        name = target if isinstance(target, str) else getattr(target, "__qualname__", repr(target))
        problem = None
        try:
            spec = resolve(target, **{k: opts.pop(k) for k in _SPEC_OPTIONS if k in opts})
            report = run(spec, AuditOptions(**opts))
        except OptionError as exc:
            problem = f"grpo_identity: {exc.worded({})} (options: {', '.join(MARKER_OPTIONS)})"
        except TargetImportError as exc:
            problem = f"grpo_identity FAIL {name}: the target could not be loaded: {exc}"
        if problem is not None:  # raised outside the handler: the failure is this line, nothing chained
            pytest.fail(problem, pytrace=False)
        if note:
            report.findings.append(Finding("isolate", note, {}, "note"))
        self.reports.append(report)
        if report.verdict == "fail" or (report.verdict == "deviation" and opts.get("expect") and not allow_deviation):
            pytest.fail(summary(report) + "\n" + report.format(), pytrace=False)
        return report

    __call__ = check


def _isolable(target: Any) -> tuple[bool, str | None]:
    """Whether a child process can load ``target`` (a spec, or a function at the top of a module);
    else why it runs in this process (where no timeout can stop it)."""
    if isinstance(target, str):
        return True, None
    from grpo_identity.checks.calls.target import TargetImportError, reference

    try:
        reference(target)
    except TargetImportError as exc:
        return False, f"ran in this process, where the timeout cannot stop a hang: {exc}"
    return True, None


@pytest.fixture
def grpo_identity(request: pytest.FixtureRequest) -> Checker:
    """Audit advantage functions in a test: ``grpo_identity.check(fn, expect="grpo")``."""
    defaults: dict[str, Any] = dict(_defaults(request.config) or {})
    for mark in reversed(list(request.node.iter_markers("grpo_identity"))):  # closest marker wins
        defaults.update(mark.kwargs)
    return Checker(defaults)
