"""``grpo_identity.checks``: property-based verification of advantage implementations.

Audit any advantage function (or group filter) against the group-standard-deviation identity
g = c(k, G)·(s̄₊ − s̄₋) (Theorem 1) and the dial's presets::

    from grpo_identity.checks import audit
    report = audit("my_pkg.rl:advantages", expect="grpo")   # or a callable fn(rewards, G)
    print(report.format()); assert report.verdict != "fail"

The path of an audit, one module a step: :mod:`~grpo_identity.checks.spec` (what to audit,
resolved once), :mod:`~grpo_identity.checks.options` (how, checked once),
:mod:`~grpo_identity.checks.auditor` (the run), :mod:`~grpo_identity.checks.target` and
:mod:`~grpo_identity.checks.child` (the target, here or in a child process, over the messages of
:mod:`~grpo_identity.checks.protocol`), :mod:`~grpo_identity.checks.infer`,
:mod:`~grpo_identity.checks.search` with :mod:`~grpo_identity.checks.properties` and
:mod:`~grpo_identity.checks.strategies`, :mod:`~grpo_identity.checks.probes` and
:mod:`~grpo_identity.checks.gradient` (the measurements), :mod:`~grpo_identity.checks.verdict`
(the rules), :mod:`~grpo_identity.checks.report` (the result).  Frameworks:
:mod:`~grpo_identity.checks.adapters`, :mod:`~grpo_identity.checks.frameworks`,
:mod:`~grpo_identity.checks.releases`; pytest: :mod:`~grpo_identity.checks.plugin`.

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
    "Declared": "declared",
    "OptionError": "options",
    "resolve": "spec",
    "FunctionSpec": "spec",
    "FrameworkSpec": "frameworks",
    "infer_dial": "infer",
    "infer_keep_rule": "infer",
    "PropertyViolation": "properties",
    "Tolerance": "properties",
    "Context": "properties",
    "ADVANTAGE_PROPERTIES": "properties",
    "FILTER_PROPERTIES": "properties",
    "RewardBatch": "strategies",
    "group_sizes": "strategies",
    "reward_batches": "strategies",
    "score_matrices": "strategies",
    "TargetError": "target",
    "TargetImportError": "target",
    "TargetTimeout": "target",
    "TargetCrashed": "target",
    "load_target": "target",
    "gradient_target": "gradient",
    "CallOptions": "calling",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"grpo_identity.checks.{_EXPORTS[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'grpo_identity.checks' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
