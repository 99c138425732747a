"""Benchmark: wall time of a split-step audit (``checks/measure/steps.py``) of one framework release, its
environment warm.

Goal on this machine (2 cores): ≤ 30 s for the split-step audit of one release with the environment
warm (the release installed and its framework imported by an earlier audit in the same warm child).
Each case is audited twice in one process: the first audit builds the release's environment if it is
missing and imports the framework in a new child (cold), the second reuses that child (warm).  Reported:
the warm audit's whole wall time (gradient probes, the split step, the advantage audit), the split
step's own share (``inferred.step.seconds``: its split and unsplit runs) and the absolute oracle's
(``inferred.step.objective.seconds``; goal: the audit with it ≤ 1.2× the audit without it).

    python benchmarks/bench_step.py [--only trl] [--json]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from typing import Any

#: (framework, release or None for the installed one, --set pairs)
CASES: list[tuple[str, str | None, tuple[str, ...]]] = [
    ("trl", None, ("loss_type=bnpo",)),
    ("trl", None, ("loss_type=dapo", "num_processes=2", "per_device_train_batch_size=2")),
    ("trl", "0.22.2", ("loss_type=dapo", "mask_truncated_completions=true")),
    ("trl", "0.16.0", ("scale_rewards=false",)),
    ("verl", None, ("algorithm.adv_estimator=grpo",)),
    ("verl", "0.6.0", ("algorithm.adv_estimator=grpo",)),
    ("openrlhf", "0.11.2", ("algo.advantage.estimator=group_norm",)),
    ("areal", "1.0.4", ("actor.reward_norm.mean_level=group", "actor.reward_norm.std_level=group")),
]


def _audit(framework: str, release: str | None, sets: tuple[str, ...]) -> tuple[float, Any]:
    from grpo_identity.checks import audit

    t0 = time.perf_counter()
    report = audit(framework, sets=sets, release=release, max_examples=200)
    return time.perf_counter() - t0, report


def run(only: str | None) -> list[dict[str, Any]]:
    from grpo_identity.checks.calls.child import close_warm_children

    rows = []
    for framework, release, sets in CASES:
        if only and not framework.startswith(only):
            continue
        close_warm_children()
        try:
            cold, _ = _audit(framework, release, sets)
            warm, report = _audit(framework, release, sets)
        except Exception as exc:  # a release that cannot be built here (offline): said, not fatal
            rows.append({"case": f"{framework} {release or 'installed'} {' '.join(sets)}", "error": str(exc)[:200]})
            continue
        step = report.inferred.step
        rows.append(
            {
                "case": f"{framework} {report.target_info.get('version')} --set {' --set '.join(sets)}",
                "cold_s": round(cold, 1),
                "warm_s": round(warm, 1),
                "step_s": step.get("seconds"),
                # the absolute oracle's own cost in the warm audit (issue 28's goal: ≤ 1.2× the audit without it)
                "oracle_s": (step.get("objective") or {}).get("seconds"),
                "with_oracle_over_without": round(
                    warm / max(warm - ((step.get("objective") or {}).get("seconds") or 0), 1e-9), 4
                ),
                "step_weight": step.get("weight"),
                "invariant": step.get("invariant"),
                "goal_30s": warm <= 30.0,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", help="only the cases of frameworks starting with this")
    p.add_argument("--json", action="store_true", help="one JSON object with every row")
    args = p.parse_args(argv)
    rows = run(args.only)
    if args.json:
        print(json.dumps({"machine": platform.machine(), "python": platform.python_version(), "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
