"""Benchmark: wall time of one full audit (dial inference + ≥ 200 hypothesis examples).

Goal: ≤ 10 s for one audit of a function on this machine, ≤ 20 s for one framework audit.
Measured for a target in this process, a target in a child process (what ``grpo-identity audit``
does), and, with ``--frameworks``, the real frameworks as their users configure them (the default
gradient level, which runs the advantage audit of the same run too, and the advantage level
alone; each audit starts a fresh child process, so the framework's import is included every time).

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
    p.add_argument("--framework-repeat", type=int, default=1, help="runs of each framework case (default 1)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    import numpy as np

    from grpo_identity import dial as D
    from grpo_identity.checks import audit

    def grpo_numpy(rewards, G):
        return D.advantages(rewards, G, D.GRPO)

    cases = [
        ("in-process numpy (dial grpo)", lambda: audit(grpo_numpy, expect="grpo", max_examples=args.max_examples)),
        (
            "child process (adapter grpo, as the CLI)",
            lambda: audit("grpo", expect="grpo", max_examples=args.max_examples),
        ),
        (
            "in-process, expect grpo, target trl preset (deviation)",
            lambda: audit(lambda r, G: D.advantages(r, G, D.TRL), expect="grpo", max_examples=args.max_examples),
        ),
    ]
    if args.frameworks:
        from grpo_identity.checks.frameworks import FrameworkSpec

        verl = FrameworkSpec("verl", sets=(("algorithm.adv_estimator", "grpo"),))
        trl = FrameworkSpec("trl", sets=(("loss_type", "grpo"),))
        if importlib.util.find_spec("verl") is not None:
            cases.append(
                (
                    "framework: verl --set algorithm.adv_estimator=grpo (default: gradient + advantages)",
                    lambda: audit(verl, level="gradient", max_examples=args.max_examples),
                )
            )
            cases.append(
                (
                    "framework: verl ... --level advantage (trainer path)",
                    lambda: audit(verl, level="advantage", max_examples=args.max_examples),
                )
            )
            cases.append(
                (
                    "framework: verl:estimator=grpo (bypasses the trainer)",
                    lambda: audit("verl:estimator=grpo", max_examples=args.max_examples),
                )
            )
        if importlib.util.find_spec("trl") is not None:
            cases.append(
                (
                    "framework: trl --set loss_type=grpo (default: gradient + advantages)",
                    lambda: audit(trl, level="gradient", max_examples=args.max_examples),
                )
            )
            cases.append(
                (
                    "framework: trl ... --level advantage (GRPOTrainer)",
                    lambda: audit(trl, level="advantage", max_examples=args.max_examples),
                )
            )
    rows = []
    for name, fn in cases:
        times, report = _time(fn, args.repeat if not name.startswith("framework") else args.framework_repeat)
        rows.append(
            {
                "case": name,
                "median_s": statistics.median(times),
                "min_s": min(times),
                "runs": len(times),
                "examples": getattr(getattr(report, "advantage", None) or report, "examples", 0),
                "verdict": report.verdict,
                "matches": report.matches,
            }
        )
    if args.json:
        print(
            json.dumps(
                {
                    "benchmark": "audit",
                    "goal_s": 10.0,
                    "framework_goal_s": 20.0,
                    "python": sys.version.split()[0],
                    "numpy": np.__version__,
                    "rows": rows,
                },
                indent=2,
            )
        )
        return 0
    print(
        f"one full audit (dial inference + {args.max_examples} hypothesis examples); goal <= 10 s (a function), <= 20 s (a framework)"
    )
    for r in rows:
        print(
            f"  {r['case']:<70} {r['median_s']:6.2f} s median ({r['runs']} runs, min {r['min_s']:.2f} s), {r['examples']} examples, {r['verdict']} ({r['matches']})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
