"""Benchmark: wall time of one full audit (dial inference + ≥ 200 hypothesis examples).

Goal: ≤ 10 s for one audit on this machine.  Measured for a target in this process, a target in
a child process (what ``grpo-identity audit`` does), and the real frameworks' adapters when they
are installed.

    python benchmarks/bench_audit.py [--max-examples 200] [--repeat 3] [--frameworks] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time


def _time(fn, repeat):
    times, report = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        report = fn()
        times.append(time.perf_counter() - t0)
    return times, report


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-examples", type=int, default=200)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--frameworks", action="store_true", help="also time the TRL and verl adapters (if installed)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    import numpy as np

    from grpo_identity import dial as D
    from grpo_identity.checks import audit

    def grpo_numpy(rewards, G):
        return D.advantages(rewards, G, D.GRPO)

    cases = [
        ("in-process numpy (dial grpo)", lambda: audit(grpo_numpy, expect="grpo", max_examples=args.max_examples)),
        ("child process (adapter grpo, as the CLI)", lambda: audit("grpo", expect="grpo", max_examples=args.max_examples)),
        ("in-process, expect grpo, target trl preset (deviation)", lambda: audit(lambda r, G: D.advantages(r, G, D.TRL), expect="grpo", max_examples=args.max_examples)),
    ]
    if args.frameworks:
        if importlib.util.find_spec("verl") is not None:
            cases.append(("verl:grpo (child process, verl 0.9.1)", lambda: audit("verl:grpo", max_examples=args.max_examples)))
        if importlib.util.find_spec("trl") is not None:
            cases.append(("trl (child process, GRPOTrainer)", lambda: audit("trl", max_examples=args.max_examples)))
    rows = []
    for name, fn in cases:
        times, report = _time(fn, args.repeat if "framework" not in name and ":" not in name and "trl (" not in name else 1)
        rows.append({"case": name, "median_s": statistics.median(times), "min_s": min(times), "runs": len(times), "examples": report.examples, "verdict": report.verdict, "matches": report.matches})
    if args.json:
        print(json.dumps({"benchmark": "audit", "goal_s": 10.0, "python": sys.version.split()[0], "numpy": np.__version__, "rows": rows}, indent=2))
        return 0
    print(f"one full audit (dial inference + {args.max_examples} hypothesis examples); goal <= 10 s")
    for r in rows:
        print(f"  {r['case']:<58} {r['median_s']:6.2f} s median ({r['runs']} runs, min {r['min_s']:.2f} s), {r['examples']} examples, {r['verdict']} ({r['matches']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
