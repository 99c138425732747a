"""Time executing and rendering the five notebooks (goal: each under 60 s, all under 2 min, 2 cores).

Usage: python benchmarks/bench_render.py [--json]
Prints wall-clock seconds per notebook (execution only) and for the whole render (kernel starts,
HTML export and the MathJax copy included), into a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from grpo_identity.app.render import render

GOAL_NOTEBOOK_SECONDS = 60.0
GOAL_TOTAL_SECONDS = 120.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-render-") as tmp:
        t0 = time.perf_counter()
        r = render(Path(tmp), execute=True)
        total = time.perf_counter() - t0
    rows = [
        {"name": nb["name"], "seconds": nb["seconds"], "errors": nb["errors"], "figures": nb["figures"]}
        for nb in r["notebooks"]
    ]
    within = total <= GOAL_TOTAL_SECONDS and all(x["seconds"] <= GOAL_NOTEBOOK_SECONDS for x in rows)
    out = {
        "total_seconds": total,
        "goal_notebook_seconds": GOAL_NOTEBOOK_SECONDS,
        "goal_total_seconds": GOAL_TOTAL_SECONDS,
        "within_goal": within,
        "ok": r["ok"],
        "notebooks": rows,
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for x in rows:
            print(f"{x['name']:<22} {x['seconds']:6.2f} s  {x['figures']} figures  {x['errors']} errors")
        print(
            f"total {total:.2f} s (goals: <= {GOAL_NOTEBOOK_SECONDS:.0f} s a notebook, "
            f"<= {GOAL_TOTAL_SECONDS:.0f} s in all): {'ok' if within else 'OVER'}"
        )
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
