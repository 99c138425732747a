"""grpo_identity.checks.findings: the one list of finding names, checked against the modules' source.

The modules' calls that name a finding (``Finding``, ``PropertyViolation``, the probes' ``_finding``) are read
with :mod:`ast` (nothing is imported to find them): every name raised is in :data:`FINDINGS`, at a severity
written there, and every name there is raised somewhere.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Any

import pytest

from grpo_identity.checks.findings import FINDINGS, STAGES, may_report, meaning
from grpo_identity.checks.report import SEVERITIES

#: the calls that name a finding, and the position of their severity argument (and its default)
_FINDING_CALLS = {"Finding": (3, "fail"), "PropertyViolation": (3, "fail"), "_finding": (2, "note")}


def _checks_modules() -> list[tuple[str, Path]]:
    import grpo_identity.checks as checks

    root = Path(checks.__file__).resolve().parent
    named = (
        (".".join(("grpo_identity.checks", *p.relative_to(root).with_suffix("").parts)), p) for p in root.rglob("*.py")
    )
    return sorted((name.removesuffix(".__init__"), p) for name, p in named)


def _enclosing_functions(tree: ast.AST) -> dict[int, ast.FunctionDef | ast.AsyncFunctionDef]:
    """id of every call node → the innermost function that holds it."""
    owner: dict[int, ast.FunctionDef | ast.AsyncFunctionDef] = {}

    def visit(node: ast.AST, fn: ast.FunctionDef | ast.AsyncFunctionDef | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else fn
            if isinstance(child, ast.Call) and inner is not None:
                owner[id(child)] = inner
            visit(child, inner)

    visit(tree, None)
    return owner


def _literal_name(node: ast.expr, fn: ast.AST | None) -> str | None:
    """A finding's name when it is a string literal, or a local variable assigned one literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and fn is not None:
        values = {
            a.value.value
            for a in ast.walk(fn)
            if isinstance(a, ast.Assign)
            and isinstance(a.value, ast.Constant)
            and isinstance(a.value.value, str)
            and any(isinstance(t, ast.Name) and t.id == node.id for t in a.targets)
        }
        if len(values) == 1:
            return values.pop()
    return None


def finding_names(modules: list[tuple[str, Path]] | None = None) -> tuple[dict[str, Any], list[str]]:
    """Every finding name the audit's modules (or ``modules``: (name, path) pairs) raise, read from their
    source, with its severities and modules; and the calls whose name is computed at run time (``module:line``)."""
    found: dict[str, dict[str, Any]] = {}
    computed: list[str] = []
    for module, path in modules if modules is not None else _checks_modules():
        tree = ast.parse(path.read_text(), filename=str(path))
        owner = _enclosing_functions(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            callee = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if callee not in _FINDING_CALLS:
                continue
            fn = owner.get(id(node))
            name = _literal_name(node.args[0], fn)
            if name is None:
                if isinstance(node.args[0], ast.JoinedStr):  # attribute pass-throughs are not new names
                    computed.append(f"{module}:{node.lineno}")
                continue
            at, default = _FINDING_CALLS[callee]
            severity_node = node.args[at] if len(node.args) > at else None
            for kw in node.keywords:
                if kw.arg == "severity":
                    severity_node = kw.value
            if severity_node is None:
                severity = default
            elif isinstance(severity_node, ast.Constant) and isinstance(severity_node.value, str):
                severity = severity_node.value
            else:
                severity = "fail, deviation or note"
            entry = found.setdefault(name, {"severities": set(), "modules": set()})
            entry["severities"].add(severity)
            entry["modules"].add(module)
    return found, computed


@functools.cache
def raised() -> tuple[dict[str, Any], list[str]]:
    """:func:`finding_names` of the audit's own modules, read once."""
    return finding_names()


def test_every_finding_name_the_modules_raise_is_in_the_list_and_every_listed_one_is_raised():
    found, computed = raised()
    assert computed == []  # every name is a literal: a computed one could be none of the list's
    assert sorted(set(found) - set(FINDINGS)) == [], "raised but not in FINDINGS"
    assert sorted(set(FINDINGS) - set(found)) == [], "in FINDINGS but raised nowhere"


@pytest.mark.parametrize("name", sorted(FINDINGS))
def test_a_finding_is_raised_only_at_the_severities_its_entry_lists(name):
    found, _ = raised()
    kind = FINDINGS[name]
    literal = {s for s in found[name]["severities"] if s in SEVERITIES}
    assert literal <= set(kind.severities), (name, literal)
    if found[name]["severities"] - literal:  # a severity chosen at run time: the entry lists the choices
        assert len(kind.severities) > 1, name
    assert kind.stage in STAGES and kind.meaning.endswith(".") and len(kind.meaning) <= 300


def test_the_reader_finds_names_given_through_a_local_variable_and_flags_computed_ones(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "def f(x):\n    wrong = 'some_name'\n    raise PropertyViolation(wrong, 'm', {}, 'deviation')\n\n"
        "def g(x):\n    return Finding(f'probe_{x}', 'm')\n"
    )
    found, computed = finding_names([("m", source)])
    assert found == {"some_name": {"severities": {"deviation"}, "modules": {"m"}}} and computed == ["m:6"]


def test_a_name_that_is_none_has_no_meaning():
    assert meaning("zero_sum_per_group").startswith("A group's advantages") and meaning("zero_sum") == ""


def _stored_findings() -> set[tuple[str, str]]:
    """(name, severity) of every finding in the stored framework table, at both levels."""
    import json

    path = Path(__file__).resolve().parents[2] / "results" / "frameworks" / "audits.jsonl"
    pairs = set()
    for line in path.read_text().splitlines():
        report = json.loads(line).get("report") or {}
        for level in (report, report.get("advantage") or {}):
            pairs |= {(f["property"], f["severity"]) for f in level.get("findings", [])}
    return pairs


def test_every_finding_the_stored_framework_audits_carry_is_one_a_report_may_carry():
    pairs = _stored_findings()
    assert len(pairs) >= 20 and ("zero_sum_per_group", "deviation") in pairs  # excused by design there
    assert sorted(p for p in pairs if not may_report(*p)) == []


def test_a_finding_is_excused_by_design_only_where_a_variant_gives_its_property_up():
    assert may_report("identity_G1", "deviation") and may_report("identity_G1", "note")
    assert not may_report("masked_tokens", "deviation") and may_report("masked_tokens", "note")
    assert not may_report("objective", "fail") and not may_report("no_such_finding", "note")
