"""Time the SymPy proof suite (goal: the whole suite in <= 30 s on a 2-core machine).

Usage: python benchmarks/bench_proofs.py [--json]
Prints seconds per theorem and in total (wall clock, one process, sympy import included).
"""

from __future__ import annotations

import argparse
import json
import time

t_start = time.perf_counter()

from grpo_identity.proofs import THEOREMS  # noqa: E402  (import time is part of the measurement)

GOAL_SECONDS = 30.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    t_import = time.perf_counter() - t_start
    rows = []
    for t in THEOREMS:
        r = t.prove()
        rows.append({"name": t.name, "status": r.status, "seconds": r.seconds})
    total = time.perf_counter() - t_start
    out = {
        "import_seconds": t_import,
        "total_seconds": total,
        "goal_seconds": GOAL_SECONDS,
        "within_goal": total <= GOAL_SECONDS,
        "all_proved": all(r["status"] == "proved" for r in rows),
        "theorems": rows,
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for r in rows:
            print(f"{r['name']:<4} {r['status']:<7} {r['seconds']:7.2f} s")
        print(
            f"import {t_import:.2f} s; total {total:.2f} s "
            f"(goal <= {GOAL_SECONDS:.0f} s): {'ok' if out['within_goal'] else 'OVER'}"
        )
    return 0 if out["all_proved"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
