"""Benchmark: the wall time of the things people wait for — the test suite, `prove`, and the
README's framework table — each in a fresh process, on a machine otherwise idle.

Goals on this 2-core machine: the whole test suite (``make test``'s pytest) ≤ 8 minutes; ``prove``
≤ 15 s; the documentation's framework table (``grpo-identity matrix results/frameworks/grid.yaml``, every
release environment already built) ≤ 3 minutes.  One warm framework audit is ``bench_audit.py --frameworks``.

    python benchmarks/bench_suite.py [--only suite,prove,table] [--json]

The table is written to a temporary folder, never over ``results/frameworks``.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOALS = {"suite": 480.0, "prove": 15.0, "table": 180.0}


def _timed(cmd: list[str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    code = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    return time.perf_counter() - t0, code


def commands(tmp: str) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "suite": [py, "-m", "pytest", "-q", "-n", "auto", "--dist", "loadgroup", "-p", "no:cacheprovider"],
        "prove": [py, "-m", "grpo_identity", "prove"],
        "table": [py, "-m", "grpo_identity", "matrix", "results/frameworks/grid.yaml", "--out", tmp, "--fresh"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--only", default="suite,prove,table", help="comma-separated: suite, prove, table")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    wanted = [w.strip() for w in args.only.split(",") if w.strip()]
    unknown = sorted(set(wanted) - set(GOALS))
    if unknown:
        p.error(f"--only: unknown {', '.join(unknown)}; choose from {', '.join(GOALS)}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in wanted:
            seconds, code = _timed(commands(tmp)[name])
            rows.append({"what": name, "seconds": round(seconds, 1), "goal_s": GOALS[name], "exit_code": code})
    if args.json:
        print(json.dumps({"benchmark": "suite", "python": platform.python_version(), "rows": rows}, indent=2))
        return 0
    for r in rows:
        ok = "within" if r["seconds"] <= r["goal_s"] else "OVER"
        print(f"{r['what']:<6} {r['seconds']:7.1f} s  ({ok} the goal of {r['goal_s']:g} s; exit code {r['exit_code']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
