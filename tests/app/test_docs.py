"""The generated reference pages of the documentation site (grpo_identity.app.docs), against the code."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from grpo_identity.app import docs
from grpo_identity.app.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
AUDITS = ROOT / "results" / "frameworks" / "audits.jsonl"


def _walk(parser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _walk(sub)


def _section(page: str, prog: str) -> str:
    """The text of one command's section of the CLI page."""
    head = re.search(rf"^## {re.escape(prog)} \{{#[\w-]+\}}$", page, re.M)
    assert head, f"no section for {prog}"
    rest = page[head.end() :]
    nxt = re.search(r"^## ", rest, re.M)
    return rest[: nxt.start()] if nxt else rest


def _table_rows(section: str) -> list[list[str]]:
    """The cells of every table row (header and separator rows left out)."""
    rows = []
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith("| argument |") and not line.startswith("| command |"):
            rows.append([c.strip() for c in re.split(r"(?<!\\)\|(?=(?:[^`]*`[^`]*`)*[^`]*$)", line)[1:-1]])
    return rows


def _reports() -> list[dict]:
    """Real audit reports: the stored framework audits (gradient level, each with its advantage level)."""
    rows = [json.loads(ln) for ln in AUDITS.read_text().splitlines() if ln.strip()]
    return [r["report"] for r in rows if isinstance(r.get("report"), dict)]


# --- the command line ---------------------------------------------------------------------------
def test_the_cli_page_has_every_command_and_every_option_string_of_the_real_parser():
    page = docs.cli_reference()
    progs = [p.prog for p in _walk(build_parser())]
    assert "grpo-identity train bernoulli" in progs and "grpo-identity audit" in progs
    for parser in _walk(build_parser()):
        section = _section(page, parser.prog)
        assert f"usage: {parser.prog}" in section
        for action in parser._actions:
            for option in action.option_strings:
                assert re.search(rf"`{re.escape(option)}[ `]", section), f"{parser.prog} {option}"
            if not action.option_strings and not isinstance(action, argparse._SubParsersAction):
                assert f"`{action.metavar or action.dest}`" in section, f"{parser.prog} {action.dest}"
            if isinstance(action, argparse._SubParsersAction):
                for name in action.choices:
                    assert f"[`{name}`](#" in section, f"{parser.prog} {name}"


def test_an_option_added_to_a_parser_appears_on_the_cli_page_with_its_help_in_one_table_row():
    parser = build_parser()
    audit = next(p for p in _walk(parser) if p.prog == "grpo-identity audit")
    audit.add_argument(
        "--brand-new", metavar="A|B", help="a | b with *stars*, $dollars$ and <tags> (default %(default)s)"
    )
    section = _section(docs.cli_reference(parser), "grpo-identity audit")
    (row,) = [r for r in _table_rows(section) if "--brand-new" in r[0]]
    assert row[0] == "`--brand-new A|B`"
    assert len(row) == 2  # the help's pipe did not split the row
    assert "*" not in row[1] and "$" not in row[1] and "<" not in row[1] and "default None" in row[1]
    assert "--brand-new" not in docs.cli_reference()  # the real parser has no such option


def test_the_cli_page_shows_the_help_argparse_prints_defaults_included():
    section = _section(docs.cli_reference(), "grpo-identity train bernoulli")
    assert "Rollouts per prompt and step, G. (default: 8)" in section  # ArgumentDefaultsHelpFormatter


# --- the cheat sheet and the theorems -----------------------------------------------------------
def test_every_cheat_sheet_row_links_a_theorem_the_theorems_page_has():
    from grpo_identity.registry import REGISTRY

    sheet, theorems = docs.cheat_sheet(), docs.theorems()
    for f in REGISTRY:
        (row,) = [ln for ln in sheet.splitlines() if ln.startswith(f"| `{f.name}` |")]
        assert f"[{f.proof}](theorems.md#{f.proof.lower()})" in row
        assert f"{{#{f.proof.lower()}}}" in theorems
        assert f"][{f.symbolic.replace(':', '.')}]" in row and f"][{f.twin.replace(':', '.')}]" in row


def test_the_theorems_page_states_every_theorem_with_its_declared_method_without_proving_it(monkeypatch):
    from grpo_identity.proofs import THEOREMS
    from grpo_identity.proofs.core import Theorem

    def no_proof(self, *args, **kwargs):
        raise AssertionError("the page ran a proof")

    monkeypatch.setattr(Theorem, "prove", no_proof)
    page = docs.theorems()
    for t in THEOREMS:
        section = page.split(f"## {t.name}: ", 1)[1].split("\n## ", 1)[0]
        assert f"- method: {t.method}\n" in section
        assert f"$$\n{t.latex}\n$$" in section
    assert page.count("$$\n") == 2 * len(THEOREMS)
    assert "certified numeric" in page


# --- properties and findings --------------------------------------------------------------------
def test_the_properties_page_lists_every_property_probe_and_law():
    from grpo_identity.checks.measure import offpolicy, probes
    from grpo_identity.checks.measure import properties as P
    from grpo_identity.checks.report import WEIGHTS

    page = docs.properties_and_findings()
    for prop in (*P.ADVANTAGE_PROPERTIES, *P.LAYOUT_PROPERTIES, *P.FILTER_PROPERTIES, *probes.PROBES):
        assert f"| `{prop.__name__}` |" in page, prop.__name__
    for law in (*WEIGHTS, *offpolicy.IMPORTANCE_LAWS, *offpolicy.KL_LAWS):
        assert f"| `{law}` |" in page, law


def test_every_finding_a_real_audit_reported_is_on_the_properties_page():
    from grpo_identity import dial as D
    from grpo_identity.checks import audit
    from grpo_identity.checks.findings import FINDINGS

    reports = [*_reports(), audit(lambda r, G: D.advantages(r, G, D.GRPO), max_examples=10).to_dict()]
    reported = set()
    for r in reports:
        for level in (r, r.get("advantage") or {}):
            reported |= {f["property"] for f in level.get("findings", [])}
    page = docs.properties_and_findings()
    assert len(reported) >= 5
    for name in reported:
        assert name in FINDINGS and f"| `{name}` |" in page, name


# --- the report's schema ------------------------------------------------------------------------
def test_real_reports_validate_against_the_derived_schema():
    jsonschema = pytest.importorskip("jsonschema")
    from grpo_identity import dial as D
    from grpo_identity.checks import audit

    schema = docs.report_json_schema()
    validator = jsonschema.Draft202012Validator(schema)
    validator.check_schema(schema)
    reports = [audit(lambda r, G: D.advantages(r, G, D.GRPO), max_examples=10).to_dict(), *_reports()]
    assert any("advantage" in r for r in reports)  # a gradient-level report, its advantage level nested
    for report in reports:
        validator.validate(json.loads(json.dumps(report)))


def test_the_schema_rejects_a_key_the_report_does_not_have_and_a_missing_one():
    jsonschema = pytest.importorskip("jsonschema")
    from grpo_identity import dial as D
    from grpo_identity.checks import audit

    validator = jsonschema.Draft202012Validator(docs.report_json_schema())
    report = json.loads(json.dumps(audit(lambda r, G: D.advantages(r, G, D.GRPO), max_examples=10).to_dict()))
    assert validator.is_valid(report)
    assert not validator.is_valid({**report, "unknown": 1})
    assert not validator.is_valid({k: v for k, v in report.items() if k != "verdict"})
    assert not validator.is_valid({**report, "verdict": "maybe"})
    bad_finding = {**report, "findings": [{"property": "x", "message": "m", "counterexample": {}, "severity": "bad"}]}
    assert not validator.is_valid(bad_finding)
    assert validator.is_valid({**report, "inferred": {**report["inferred"], "step": {"ranks": "processes"}}})
    for part in ("step", "off_policy", "aggregation"):  # the step's, the off-policy step's, the components' keys
        assert not validator.is_valid({**report, "inferred": {**report["inferred"], part: {"unknown": 1}}})
    assert not validator.is_valid({**report, "inferred": {**report["inferred"], "step": {"ranks": 2}}})


def test_the_schema_describes_each_field_from_its_docstring_and_its_type():
    schema = docs.report_json_schema()
    inferred = schema["$defs"]["Inferred"]["properties"]
    assert inferred["coupled"]["type"] == "boolean"
    assert inferred["eps"]["type"] == ["number", "null"]
    assert inferred["coefficients"]["additionalProperties"] == {"type": "array", "items": {"type": "number"}}
    assert "advantages of a group change with the other groups" in inferred["coupled"]["description"]
    assert inferred["keep"]["type"] == ["string", "null"] and inferred["per_sample_weight"]["type"] == [
        "string",
        "null",
    ]
    assert "advantage" not in inferred  # a gradient fit's advantage fit is written flat
    assert inferred["step"]["$ref"] == "#/$defs/StepFit" and inferred["off_policy"]["$ref"] == "#/$defs/OffPolicyFit"
    step = schema["$defs"]["StepFit"]["properties"]
    assert step["ranks"]["type"] == "string" and "objective" in step["objective"]["description"]
    assert schema["properties"]["advantage"]["anyOf"] == [{"$ref": "#"}, {"type": "null"}]  # Report | None
    assert "advantage" not in schema["required"] and "verdict" in schema["required"]
    page = docs.report_schema()
    assert json.loads(page.split("```json\n", 1)[1].split("\n```", 1)[0]) == schema


# --- the pages as the site gets them ------------------------------------------------------------
def test_generated_pages_are_the_five_reference_pages_and_the_schema_and_none_is_committed():
    pages = docs.generated_pages()
    assert set(pages) == {*docs.GENERATED, docs.SCHEMA_FILE}
    for path, text in pages.items():
        assert not (ROOT / "docs" / path).exists(), f"docs/{path} is generated, not committed"
        if path.endswith(".md"):
            assert "<!-- generated by grpo_identity.app.docs." in text[:100]
    assert json.loads(pages[docs.SCHEMA_FILE]) == docs.report_json_schema()
