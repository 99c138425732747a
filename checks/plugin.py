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
``allow_deviation=True``.  A function defined at the top of a module (a test file too) or a spec
string runs in a child process, so ``timeout`` stops a hang; ``isolate=False`` runs it in this
process, and a local function or lambda always runs here (the report says so in a note).
Options: ``--grpo-identity-max-examples``, ``--grpo-identity-timeout``; the header names them.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

#: options the ``grpo_identity`` marker accepts (anything else is a usage error)
MARKER_OPTIONS = ("expect", "kind", "max_examples", "timeout", "allow_deviation", "isolate")
_KINDS = ("advantage", "filter")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("grpo-identity", "audits of advantage functions (grpo-identity)")
    group.addoption(
        "--grpo-identity-max-examples",
        type=int,
        default=200,
        metavar="N",
        help="hypothesis examples per audit (default 200)",
    )
    group.addoption(
        "--grpo-identity-timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="seconds per call into an isolated target (default 60)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"grpo_identity(**options): options for the grpo_identity fixture ({', '.join(MARKER_OPTIONS)})"
    )


def pytest_report_header(config: pytest.Config) -> str:
    n = config.getoption("--grpo-identity-max-examples")
    t = config.getoption("--grpo-identity-timeout")
    return f"grpo-identity: max_examples={n}, derandomize=True, database=None, deadline=None, timeout={t:g}s"


def _validate(options: dict[str, Any], where: str) -> dict[str, Any]:
    bad = sorted(set(options) - set(MARKER_OPTIONS))
    if bad:
        raise pytest.UsageError(
            f"{where}: grpo_identity marker got unknown option(s) {', '.join(bad)}; allowed: {', '.join(MARKER_OPTIONS)}"
        )
    if "kind" in options and options["kind"] not in _KINDS:
        raise pytest.UsageError(f"{where}: grpo_identity marker kind must be one of {_KINDS}, got {options['kind']!r}")
    n = options.get("max_examples", 1)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise pytest.UsageError(f"{where}: grpo_identity marker max_examples must be a positive integer, got {n!r}")
    t = options.get("timeout", 1.0)
    if isinstance(t, bool) or not isinstance(t, (int, float)) or t <= 0:
        raise pytest.UsageError(f"{where}: grpo_identity marker timeout must be a positive number, got {t!r}")
    if "expect" in options and options["expect"] is not None and not isinstance(options["expect"], str):
        raise pytest.UsageError(
            f"{where}: grpo_identity marker expect must be a preset name, got {options['expect']!r}"
        )
    return options


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for mark in item.iter_markers("grpo_identity"):
            if mark.args:
                raise pytest.UsageError(
                    f"{item.nodeid}: grpo_identity marker takes keyword options only, got {mark.args!r}"
                )
            _validate(dict(mark.kwargs), item.nodeid)


def _isolable(target: Any) -> tuple[bool, str | None]:
    """Whether a child process can load ``target`` (a spec, or a function at the top of a module);
    else why it runs in this process (where no timeout can stop it)."""
    if isinstance(target, str):
        return True, None
    from grpo_identity.checks.target import TargetImportError, reference

    try:
        reference(target)
    except TargetImportError as exc:
        return False, f"ran in this process, where the timeout cannot stop a hang: {exc}"
    return True, None


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
        Returns the :class:`~grpo_identity.checks.AuditReport`."""
        opts = {**self.defaults, **_validate(dict(options), "grpo_identity.check")}
        allow_deviation = bool(opts.pop("allow_deviation", False))
        from grpo_identity.checks import audit
        from grpo_identity.checks.auditor import Finding

        note = None
        if opts.get("isolate") is None:  # a child process, so that the timeout can stop a hang
            opts["isolate"], note = _isolable(target)
        report = audit(target, **opts)
        if note:
            report.findings.append(Finding("isolate", note, {}, "note"))
        self.reports.append(report)
        if report.verdict == "fail" or (report.verdict == "deviation" and opts.get("expect") and not allow_deviation):
            pytest.fail(summary(report) + "\n" + report.format(), pytrace=False)
        return report

    __call__ = check


@pytest.fixture
def grpo_identity(request: pytest.FixtureRequest) -> Checker:
    """Audit advantage functions in a test: ``grpo_identity.check(fn, expect="grpo")``."""
    config = request.config
    defaults: dict[str, Any] = {
        "max_examples": config.getoption("--grpo-identity-max-examples"),
        "timeout": config.getoption("--grpo-identity-timeout"),
    }
    for mark in reversed(list(request.node.iter_markers("grpo_identity"))):  # closest marker wins
        defaults.update(mark.kwargs)
    return Checker(defaults)
