"""The audits' claims for the main job (:mod:`grpo_identity.claims`): the built-in presets audited against
themselves, and each framework registry row's ``verify`` audits where the framework is installed."""

from __future__ import annotations

import importlib.util
from typing import Iterator

from grpo_identity.checks.frameworks.registry import FRAMEWORK_TABLE
from grpo_identity.claims import Item, checked, running, skipped
from grpo_identity.foundation import EXTRAS, error_text

__all__ = ["PRESET_AUDITS", "FRAMEWORK_AUDITS", "audits", "audit_count"]


#: (preset, expected preset, kind): the presets audited against themselves
PRESET_AUDITS = (
    ("grpo", "grpo", "advantage"),
    ("dr_grpo", "dr_grpo", "advantage"),
    ("rloo", "rloo", "advantage"),
    ("dapo", "dapo", "filter"),
)
#: the paper audits no framework: what the report's paper column says for TRL and verl
_FRAMEWORK_PAPER = "beyond the paper"
#: (package, target, expected preset): each registry row's ``verify`` audits
FRAMEWORK_AUDITS = tuple((e.name, t, x) for e in FRAMEWORK_TABLE.values() for t, x in e.verify)


def audits(frameworks: bool, max_examples: int) -> Iterator[Item]:
    """The presets' audits, then the frameworks' (skipped, naming the extra, where one is not installed)."""
    from grpo_identity.checks import audit

    for target, expect, kind in PRESET_AUDITS:
        running(f"audit preset {target}")
        rep = audit(target, kind=kind, expect=expect, max_examples=max_examples)
        yield checked(
            "audits",
            f"audit preset {target} ({kind})",
            "identity holds (Theorem 1): pass",
            f"{rep.verdict} (matches {rep.matches})",
            rep.verdict == "pass",
        )
    for package, target, expect in FRAMEWORK_AUDITS:
        name = f"audit {target} against {expect} (expected: GRPO up to Bessel's ddof 1 and ε)"
        if not frameworks:
            yield skipped("audits", name, _FRAMEWORK_PAPER, "frameworks not requested")
            continue
        if importlib.util.find_spec(package) is None:
            why = f"{package} is not installed: pip install 'grpo-identity[{EXTRAS[package]}]'"
            yield skipped("audits", name, _FRAMEWORK_PAPER, why)
            continue
        running(f"audit {target}")
        try:
            rep = audit(target, kind="advantage", expect=expect, max_examples=max_examples)
        except Exception as exc:  # this framework's audit broke: say all of why, and audit the others
            yield checked("audits", name, _FRAMEWORK_PAPER, error_text(exc), False, f"{package} {_version(package)}")
            continue
        inf = rep.to_dict()["inferred"]
        project = (
            f"{rep.verdict}: centre {inf.get('centre')}, {inf.get('scale')}, ddof {inf.get('ddof')}, "
            f"ε ≈ {inf.get('eps', 0):.2g}"
        )
        silent = inf.get("silent_nonbinary_max_abs")
        note = f"{package} {_version(package)}" + (
            f"; silent groups of 0.1 rewards in fp32: max |Â| = {silent:.2g}" if silent is not None else ""
        )
        yield checked("audits", name, _FRAMEWORK_PAPER, project, rep.verdict in ("pass", "deviation"), note)


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "?"


def audit_count() -> int:
    """How many items :func:`audits` yields."""
    return len(PRESET_AUDITS) + len(FRAMEWORK_AUDITS)
