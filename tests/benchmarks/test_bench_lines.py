"""The framework wing's size (benchmarks/bench_lines.py): a code line is one that holds code (not blank, not a
comment, not a docstring), every file of the wing is counted in exactly one group, and the goal's total is the
sum of its groups."""

from __future__ import annotations

import json

import pytest
from _bench import load

B = load("bench_lines")

SOURCE = '''"""A module's docstring,
on two lines."""

# a comment alone
x = 1  # a comment after code


class C:
    """A class's docstring."""

    def f(self, a,
          b):
        \'\'\'A method's docstring.\'\'\'
        text = """a string that is not a docstring
        spans two code lines"""
        return a, b, text
'''


def test_a_code_line_holds_code_and_no_docstring_comment_or_blank_counts():
    # code: x = 1; class C:; def f(self, a,; b):; text = …; spans …; return …
    assert B.count(SOURCE) == {"lines": 16, "code": 7}


def test_every_file_of_the_wing_is_in_one_group_and_the_goal_sums_its_groups(capsys):
    names = [n for group in B.GROUPS.values() for n in group]
    assert len(names) == len(set(names))
    assert {p.relative_to(B.WING).as_posix() for p in B.WING.rglob("*.py")} == set(names)
    assert B.main(["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for k in ("lines", "code"):
        assert out["in_goal"][k] == sum(out["groups"][g][k] for g in B.IN_GOAL)
        assert 0 < out["in_goal"][k] < sum(c[k] for c in out["groups"].values())


def test_a_file_in_no_group_is_named(monkeypatch, tmp_path):
    for group in B.GROUPS.values():
        for name in group:
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_text("x = 1\n")
    (tmp_path / "new_driver.py").write_text("x = 1\n")
    monkeypatch.setattr(B, "WING", tmp_path)
    with pytest.raises(SystemExit, match=r"new \['new_driver.py'\]"):
        B.measure()
