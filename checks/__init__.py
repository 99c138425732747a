"""``grpo_identity.checks``: property-based verification of advantage implementations.

Audit any advantage function (or group filter) against the group-standard-deviation identity
g = c(k, G)·(s̄₊ − s̄₋) (Theorem 1) and the dial's presets::

    from grpo_identity.checks import audit
    report = audit("my_pkg.rl:advantages", expect="grpo")   # or a callable fn(rewards, G)
    print(report.format()); assert report.verdict != "fail"

Modules: :mod:`~grpo_identity.checks.strategies` (hypothesis strategies),
:mod:`~grpo_identity.checks.properties` (one function per property),
:mod:`~grpo_identity.checks.infer` (dial inference from designed probes),
:mod:`~grpo_identity.checks.auditor` (the verdict), :mod:`~grpo_identity.checks.adapters` (TRL,
verl, the presets), :mod:`~grpo_identity.checks.target` (child-process runner),
:mod:`~grpo_identity.checks.plugin` (the pytest plugin).

Light on import: nothing heavy (no torch, no sympy, not even hypothesis) is loaded until a name
below is used.
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> module under grpo_identity.checks that defines it
_EXPORTS: dict[str, str] = {
    "audit": "auditor",
    "AuditReport": "auditor",
    "Finding": "auditor",
    "VERDICTS": "auditor",
    "Inferred": "infer",
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
