"""Benchmark: the wall time of the things people wait for — the test suite, `prove`, and the
README's framework table — each in a fresh process, on a machine otherwise idle.

Goals on this 2-core machine: the whole test suite (``make test``'s pytest) ≤ 8 minutes; ``prove``
≤ 15 s; the documentation's framework table (``grpo-identity matrix results/frameworks/grid.yaml``, every
release environment already built) ≤ 3 minutes.  One warm framework audit is ``bench_audit.py --frameworks``.

    python benchmarks/bench_suite.py [--only suite,prove,table] [--json]

The table is written to a temporary folder, never over ``results/frameworks``.  For the suite it also
reports the tests' summed time and what the wall time holds beyond an even share of it over the workers
(collection, and a worker left waiting at the end): this machine's speed changes from run to run by up to a
quarter, and that remainder does not scale with it the way the wall time does.

Each row also gives the CPU seconds (user + system) of the command and of every process it waited for, and the
kind of CPU they ran on: machines of one name can differ in speed by a factor of two, so a change is measured as
the same command's wall and CPU before and after on one machine, and a goal in seconds is read on the machine it
was set on.  (A process left to run on its own, a Ray daemon say, is not counted.)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grpo_identity import provenance

ROOT = Path(__file__).resolve().parents[1]
GOALS = {"suite": 480.0, "prove": 15.0, "table": 180.0}


def _timed(cmd: list[str]) -> tuple[float, float, int, str]:
    """The command's wall seconds, CPU seconds (its own and its waited-for descendants'), exit code and output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return seconds, cpu, done.returncode, done.stdout


def _suite_shares(junit: Path, seconds: float, output: str) -> dict[str, float]:
    """The tests' summed seconds (pytest's junit report), the workers xdist started (its ``N workers [M items]``
    line), and the wall time beyond an even share of the sum over them."""
    import re
    import xml.etree.ElementTree as ET

    started = re.search(r"^(\d+) workers \[", output, re.M)
    try:
        summed = sum(float(t.get("time", 0)) for t in ET.parse(junit).getroot().iter("testcase"))
    except (OSError, ET.ParseError):
        return {}
    if started is None:  # no xdist line (the run stopped before its workers started): no share to give
        return {"summed_s": round(summed, 1)}
    workers = int(started.group(1))
    return {"summed_s": round(summed, 1), "workers": workers, "beyond_share_s": round(seconds - summed / workers, 1)}


def commands(tmp: str) -> dict[str, list[str]]:
    py = sys.executable
    junit = f"--junitxml={Path(tmp) / 'suite.xml'}"
    return {
        "suite": [py, "-m", "pytest", "-n", "auto", "--dist", "loadgroup", "-p", "no:cacheprovider", junit],
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
            seconds, cpu, code, output = _timed(commands(tmp)[name])
            rows.append({"what": name, "seconds": round(seconds, 1), "cpu_s": round(cpu, 1), "goal_s": GOALS[name],
                         "exit_code": code})  # fmt: skip
            if name == "suite":
                rows[-1].update(_suite_shares(Path(tmp) / "suite.xml", seconds, output))
    if args.json:
        machine = {"python": platform.python_version(), "cpu": provenance.cpu()}
        print(json.dumps({"benchmark": "suite", **machine, "rows": rows}, indent=2))
        return 0
    print(f"on {provenance.cpu()}, {os.cpu_count()} CPUs")
    for r in rows:
        ok = "within" if r["seconds"] <= r["goal_s"] else "OVER"
        print(f"{r['what']:<6} {r['seconds']:7.1f} s, CPU {r['cpu_s']:.1f} s  ({ok} the goal of {r['goal_s']:g} s; "
              f"exit code {r['exit_code']})")  # fmt: skip
        if "beyond_share_s" in r:
            print(
                f"       tests {r['summed_s']:.1f} s summed over {r['workers']} workers; beyond an even share of them: "
                f"{r['beyond_share_s']:.1f} s (collection, a worker waiting)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
