"""``grpo_identity.checks``: property-based verification of advantage implementations.

Audit any advantage function (or group filter) against the group-standard-deviation identity
g = c(k, G)·(s̄₊ − s̄₋) (Theorem 1) and the dial's presets::

    from grpo_identity.checks import audit
    report = audit("my_pkg.rl:advantages", expect="grpo")   # or a callable fn(rewards, G)
    print(report.format()); assert report.verdict != "fail"

The path of an audit, one module a step: :mod:`~grpo_identity.checks.calls.spec` (what to audit,
resolved once), :mod:`~grpo_identity.checks.options` (how, checked once),
:mod:`~grpo_identity.checks.auditor` (the run), :mod:`~grpo_identity.checks.calls.target` and
:mod:`~grpo_identity.checks.calls.child` (the target, here or in a child process, over the messages of
:mod:`~grpo_identity.checks.calls.protocol`), :mod:`~grpo_identity.checks.measure.infer`,
:mod:`~grpo_identity.checks.measure.search` with :mod:`~grpo_identity.checks.measure.properties` and
:mod:`~grpo_identity.checks.measure.strategies`, :mod:`~grpo_identity.checks.measure.probes` and
:mod:`~grpo_identity.checks.gradient` (the measurements), :mod:`~grpo_identity.checks.verdict`
(the rules), :mod:`~grpo_identity.checks.report` (the result).  Frameworks:
:mod:`~grpo_identity.checks.calls.adapters`, :mod:`~grpo_identity.checks.frameworks`,
:mod:`~grpo_identity.checks.calls.releases`; pytest: :mod:`~grpo_identity.checks.plugin`.

Light on import: nothing heavy (no torch, no sympy, not even hypothesis) is loaded until a name
below is used.
"""

from __future__ import annotations

import importlib
from typing import Any

#: what an audit compares: the advantages, or the gradient of a loss
LEVELS = ("advantage", "gradient")
#: what a target computes: one advantage per reward, one keep flag per group, or one per answer
KINDS = ("advantage", "filter", "row-filter")

#: public name -> module under grpo_identity.checks that defines it
_EXPORTS: dict[str, str] = {
    "audit": "auditor",
    "run": "auditor",
    "Report": "report",
    "AuditReport": "report",
    "Finding": "report",
    "AdvantageFit": "report",
    "FilterFit": "report",
    "GradientFit": "report",
    "VERDICTS": "report",
    "AuditOptions": "options",
    "Declared": "measure.declared",
    "OptionError": "options",
    "resolve": "calls.spec",
    "FunctionSpec": "calls.spec",
    "FrameworkSpec": "frameworks",
    "infer_dial": "measure.infer",
    "infer_keep_rule": "measure.infer",
    "PropertyViolation": "measure.properties",
    "Tolerance": "measure.properties",
    "Context": "measure.properties",
    "ADVANTAGE_PROPERTIES": "measure.properties",
    "FILTER_PROPERTIES": "measure.properties",
    "RewardBatch": "measure.strategies",
    "group_sizes": "measure.strategies",
    "reward_batches": "measure.strategies",
    "score_matrices": "measure.strategies",
    "TargetError": "calls.target",
    "TargetImportError": "calls.target",
    "TargetTimeout": "calls.target",
    "TargetCrashed": "calls.target",
    "load_target": "calls.target",
    "gradient_target": "gradient",
    "CallOptions": "calls.calling",
}

__all__ = sorted(_EXPORTS)

#: names this package no longer has -> what replaced them (said when one is asked for)
_REPLACED = {
    "Inferred": "the typed fits of grpo_identity.checks.report: AdvantageFit (the dial), FilterFit (a filter's keep "
    "rule) and GradientFit (the gradient level); Report.to_dict()['inferred'] is the same flat object as before",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"grpo_identity.checks.{_EXPORTS[name]}"), name)
        globals()[name] = value
        return value
    if name in _REPLACED:
        raise AttributeError(f"grpo_identity.checks.{name} was replaced by {_REPLACED[name]}")
    raise AttributeError(f"module 'grpo_identity.checks' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
