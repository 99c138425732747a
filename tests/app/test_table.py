"""grpo_identity.app.table: every row of the framework table has one cell per column, whatever the row holds."""

from __future__ import annotations

from grpo_identity.app.table import COLUMNS, render


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_a_row_without_a_report_or_with_one_of_another_shape_still_fills_every_column():
    rows = [
        {"target": "trl", "release": "1.0", "wall_seconds": 3.0, "error": "grpo-identity audit: error: boom"},
        {"target": "verl", "release": "", "wall_seconds": "?", "report": {"verdict": "pass", "inferred": "odd"}},
    ]
    error, odd = render(rows).splitlines()[2:]
    assert len(_cells(error)) == len(_cells(odd)) == len(COLUMNS)
    assert _cells(error)[2] == "adapter error" and _cells(error)[-2] == "boom" and _cells(error)[-1] == "3"
    assert _cells(odd)[2] == "unreadable row" and "rerun this audit" in _cells(odd)[-2] and _cells(odd)[-1] == "-"
