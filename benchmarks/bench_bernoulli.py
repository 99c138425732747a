"""Benchmark: the controlled Bernoulli-logit run at the paper's settings, three arms, autograd.

Goal: the three arms (GRPO, Dr. GRPO, DAPO; M = 6000, G = 8, 150 steps, initial solve rates from
the shipped Big-Math histogram) plus the initial gradient-mass measurement (400 groups at p0) in
at most 10 s on one CPU thread, every step differentiating the real loss and checking the
identity.

    python benchmarks/bench_bernoulli.py [--repeat N] [--json]
"""

from __future__ import annotations

import argparse
import json
import platform
import time

GOAL_SECONDS = 10.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeat", type=int, default=3, help="timed runs (default 3); the best and the median are reported"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()

    t0 = time.perf_counter()
    import torch

    from grpo_identity.trainer.bernoulli import BernoulliConfig, run_bernoulli

    import_s = time.perf_counter() - t0
    config = BernoulliConfig()
    times, result = [], {}
    for _ in range(max(1, args.repeat)):
        start = time.perf_counter()
        result = run_bernoulli(config)
        times.append(time.perf_counter() - start)
    times.sort()
    steps = 3 * config.steps
    out = {
        "benchmark": "bernoulli_three_arms",
        "config": result["config"],
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "import_seconds": import_s,
        "seconds_best": times[0],
        "seconds_median": times[len(times) // 2],
        "steps_per_second": steps / times[0],
        "goal_seconds": GOAL_SECONDS,
        "meets_goal": times[len(times) // 2] <= GOAL_SECONDS,
        "identity_max_abs_err": result["identity_max_abs_err"],
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(
            f"Bernoulli-logit run, three arms, M={config.num_prompts}, G={config.group_size}, "
            f"{config.steps} steps, 1 torch thread"
        )
        rows = [
            ("import torch + trainer", f"{import_s:.2f} s"),
            (
                f"run, best of {len(times)}",
                f"{times[0]:.2f} s (median {out['seconds_median']:.2f} s, {out['steps_per_second']:.0f} steps/s)",
            ),
            (f"goal <= {GOAL_SECONDS:.0f} s (median)", "met" if out["meets_goal"] else "NOT met"),
            ("identity max abs err", f"{out['identity_max_abs_err']:.3g}"),
        ]
        for label, value in rows:
            print(f"  {label:<24} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
