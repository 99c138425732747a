"""Benchmark: the size of the framework wing (checks/frameworks/), in physical lines and in code lines.

The goal counts the four first drivers (TRL, verl, AReaL, OpenRLHF) and the machinery they share: at most
3,500 lines.  A physical line is a line of the file (``wc -l``); a code line is one that holds code: not blank,
not only a comment, not part of a docstring.  The exported runners (``exported/``: each a standalone script
an exported test runs in the release's environment, importing nothing of this package) are shown on their own
as well, and the later drivers (SkyRL, ms-swift) apart, outside the goal.

    python benchmarks/bench_lines.py [--json]
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WING = ROOT / "checks" / "frameworks"
GOAL_LINES = 3500
#: each file of the wing in one group; a file in none is an error (a new file must be placed)
GROUPS = {
    "shared": ("__init__.py", "_ranks.py", "contract.py", "registry.py", "exported/__init__.py", "exported/_check.py"),
    "drivers": ("trl.py", "trl_config.py", "trl_rollout.py", "trl_step.py", "verl.py", "areal.py", "openrlhf.py"),
    "exported runners": ("exported/trl.py", "exported/verl.py", "exported/openrlhf.py"),
    "later drivers": ("skyrl.py", "ms_swift.py"),
}
IN_GOAL = ("shared", "drivers", "exported runners")


def docstring_lines(tree: ast.AST) -> set[int]:
    """The line numbers of every docstring (a module's, a class's, a function's)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def count(source: str) -> dict[str, int]:
    """Physical lines and code lines of one file's text."""
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    code: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in skip:
            code.update(range(tok.start[0], tok.end[0] + 1))
    return {"lines": len(source.splitlines()), "code": len(code - docstring_lines(ast.parse(source)))}


def measure() -> dict[str, dict[str, int]]:
    """Each group's physical and code lines; raises where a file of the wing is in no group."""
    files = {p.relative_to(WING).as_posix() for p in WING.rglob("*.py")}
    placed = {f for names in GROUPS.values() for f in names}
    if files - placed or placed - files:
        raise SystemExit(f"bench_lines: place every file in one group: new {sorted(files - placed)}, "
                         f"gone {sorted(placed - files)}")  # fmt: skip
    out = {}
    for group, names in GROUPS.items():
        counts = [count((WING / name).read_text(encoding="utf-8")) for name in names]
        out[group] = {k: sum(c[k] for c in counts) for k in ("lines", "code")}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    groups = measure()
    goal = {k: sum(groups[g][k] for g in IN_GOAL) for k in ("lines", "code")}
    if args.json:
        print(json.dumps({"benchmark": "lines", "goal_lines": GOAL_LINES, "in_goal": goal, "groups": groups}))
        return 0
    for group, c in groups.items():
        print(f"{group:<17} {c['lines']:6,} lines  {c['code']:6,} code lines")
    ok = "within" if goal["lines"] <= GOAL_LINES else "OVER"
    print(f"{' + '.join(IN_GOAL)}: {goal['lines']:,} lines, {goal['code']:,} code lines ({ok} the goal of "
          f"{GOAL_LINES:,} lines)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
