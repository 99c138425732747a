"""Benchmark: wall time of one full audit (dial inference + ≥ 200 hypothesis examples).

Goals on this machine: ≤ 10 s for one audit of a function; for a framework, ≤ 3 s for an audit in
a warm child (the framework already imported by an earlier audit of this process) and ≤ 20 s for
the first, cold one.  Measured for a target in this process, a target in a child process (what
``grpo-identity audit`` does) and, with ``--frameworks``, TRL and verl as their users configure
them at the default gradient level: the first audit of each framework in a new child (cold: the
framework's import included), then ``--repeat`` audits of other configurations in the warm child.

    python benchmarks/bench_audit.py [--max-examples 200] [--repeat 3] [--frameworks] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import statistics
import sys
import time
from typing import Any, Callable

#: configurations audited per framework: the first cold, the others warm
FRAMEWORK_CASES = {
    "verl": [
        ("algorithm.adv_estimator=grpo",),
        ("algorithm.adv_estimator=grpo", "algorithm.norm_adv_by_std_in_grpo=false"),
        ("algorithm.adv_estimator=rloo",),
        ("algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum"),
    ],
    "trl": [
        ("loss_type=grpo",),
        ("loss_type=dr_grpo", "scale_rewards=none"),
        ("loss_type=bnpo",),
        ("scale_rewards=batch",),
    ],
}


def _time(fn: Callable[[], Any], repeat: int) -> tuple[list[float], Any]:
    times, report = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        report = fn()
        times.append(time.perf_counter() - t0)
    return times, report


def _function_rows(max_examples: int, repeat: int) -> list[dict[str, Any]]:
    from grpo_identity import dial as D
    from grpo_identity.checks import audit

    def grpo_numpy(rewards: Any, G: int) -> Any:
        return D.advantages(rewards, G, D.GRPO)

    cases = [
        ("in-process numpy (dial grpo)", lambda: audit(grpo_numpy, expect="grpo", max_examples=max_examples)),
        ("child process (adapter grpo, as the CLI)", lambda: audit("grpo", expect="grpo", max_examples=max_examples)),
    ]
    rows = []
    for name, fn in cases:
        times, report = _time(fn, repeat)
        rows.append({"case": name, "median_s": statistics.median(times), "min_s": min(times), "runs": len(times)})
        rows[-1].update(verdict=report.verdict, examples=report.examples)
    return rows


def _framework_rows(framework: str, max_examples: int, repeat: int) -> list[dict[str, Any]]:
    from grpo_identity.checks import audit
    from grpo_identity.checks.calls.child import close_warm_children

    close_warm_children()  # the first audit below starts a new child: cold
    rows, warm = [], []
    for i, sets in enumerate(FRAMEWORK_CASES[framework][: 1 + repeat]):
        t0 = time.perf_counter()
        report = audit(framework, sets=sets, max_examples=max_examples)
        seconds = time.perf_counter() - t0
        label = f"{framework} --set {' --set '.join(sets)}"
        if i == 0:
            case = f"{label} (cold: new child, import)"
            rows.append({"case": case, "median_s": seconds, "min_s": seconds, "runs": 1})
        else:
            warm.append((label, seconds, report.verdict))
    times = [s for _, s, _ in warm]
    if times:
        rows.append(
            {
                "case": f"{framework}: {len(times)} other configurations in the warm child",
                "median_s": statistics.median(times),
                "min_s": min(times),
                "runs": len(times),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--max-examples", type=int, default=200)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--frameworks", action="store_true", help="also time TRL and verl, cold and warm (if installed)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    rows = _function_rows(args.max_examples, args.repeat)
    if args.frameworks:
        for framework in FRAMEWORK_CASES:
            if importlib.util.find_spec(framework) is not None:
                rows += _framework_rows(framework, args.max_examples, args.repeat)
    goals = {"function_s": 10.0, "framework_warm_s": 3.0, "framework_cold_s": 20.0}
    if args.json:
        print(json.dumps({"benchmark": "audit", "goals": goals, "python": platform.python_version(), "rows": rows}))
        return 0
    print(f"one full audit ({args.max_examples} hypothesis examples); goals: {goals}")
    for r in rows:
        print(f"  {r['case']:<92} {r['median_s']:6.2f} s median ({r['runs']} runs, min {r['min_s']:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
