"""Benchmark: the identity check's cost against one plain training step, at three model sizes.

For a batch of ``--groups`` groups of G answers on the addition task, each of:

- ``train_step``: one batched forward + backward of the batch loss (what an unchecked step does);
- ``exact_check``: the checked step as the trainer runs it with exact scores: every group's
  gradient by its own backward, its per-sample scores (G, D) by ``torch.func`` vmap, the comparison;
- ``projected_check``: the same with K random directions by forward mode (``torch.func.jvp``,
  the K passes batched by ``vmap``, all groups in one call) instead of per-sample scores;
- ``projected_extra`` / ``exact_extra``: the scores part alone (without the per-group backward).

Each measurement runs in a fresh subprocess: time is the median of ``--repeat`` calls after one
warm-up call; memory is the growth of the peak resident set (CPU, ``ru_maxrss``) or of
``torch.cuda.max_memory_allocated`` (GPU) over the state after building the model and the batch.
Goal: the projected check at most 2x a training step at every size.

    python benchmarks/bench_lm_check.py [--sizes 2x64,4x128,6x256] [--groups 4] [--directions 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from typing import Any, Callable

GOAL_RATIO = 2.0
METHODS = ("train_step", "exact_check", "projected_check", "exact_extra", "projected_extra")


def _median_seconds(fn: Callable[[], Any], repeat: int, sync: Callable[[], None]) -> float:
    fn()
    sync()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def _batch(size: str, groups: int, device: str) -> dict[str, Any]:
    """A model of ``LxW`` layers × width and ``groups`` sampled groups of G = 8 answers with rewards."""
    import numpy as np
    import torch

    from grpo_identity.dial import GRPO, advantages
    from grpo_identity.trainer.lm.config import named_config
    from grpo_identity.trainer.lm.loss import sample_weights
    from grpo_identity.trainer.lm.model import build_model, count_params, sample
    from grpo_identity.trainer.lm.task import AdditionTask

    layers, width = (int(x) for x in size.split("x"))
    cfg = named_config("cpu-smoke", n_layer=layers, n_embd=width, n_head=4)
    task = AdditionTask(cfg.max_digits)
    torch.manual_seed(0)
    dev = torch.device(device)
    model = build_model(cfg, task.vocab_size, task.prompt_len + task.max_answer_len).to(dev)
    G = 8
    prompts = torch.as_tensor(task.sample(groups, np.random.default_rng(0)).prompts, device=dev).repeat_interleave(G, 0)
    comp, lengths = sample(model, prompts, task.max_answer_len, generator=torch.Generator(device=dev).manual_seed(0))
    seqs = torch.cat([prompts, comp], 1)
    mask = (torch.arange(comp.shape[1], device=dev)[None] < lengths[:, None]).float()
    rewards = torch.as_tensor(
        np.tile([1.0, 0, 0, 1, 0, 0, 0, 1], groups), dtype=torch.float32, device=dev
    )  # k = 3 in every group
    w = sample_weights(lengths, "seq_mean", n_groups=groups, group_size=G, max_new_tokens=task.max_answer_len)
    return {
        "model": model,
        "seqs": seqs,
        "mask": mask,
        "rewards": rewards,
        "w": w,
        "adv": advantages(rewards, G, GRPO),
        "G": G,
        "P": task.prompt_len,
        "groups": groups,
        "n_params": count_params(model),
        "dial": GRPO,
    }


def _method(name: str, b: dict[str, Any], directions: int) -> Callable[[], Any]:

    from grpo_identity.trainer.lm.identity import check_identity, flatten, group_gradient, per_sample_scores
    from grpo_identity.trainer.lm.loss import rl_loss
    from grpo_identity.trainer.lm.model import token_logprobs
    from grpo_identity.trainer.lm.projected import projected_check, projected_scores, random_directions

    model, G, P, n = b["model"], b["G"], b["P"], b["groups"]
    V = random_directions(b["n_params"], directions, seed=0, device=b["seqs"].device) if "projected" in name else None

    def train_step() -> None:
        model.zero_grad(set_to_none=True)
        logp = token_logprobs(model, b["seqs"], P)
        pg, _ = rl_loss(logp, logp.detach(), b["adv"], b["mask"], b["w"], G, clip_low=0.2, clip_high=0.2)
        (pg / n).backward()

    def scores(sl: slice) -> Any:
        if V is None:
            return per_sample_scores(model, b["seqs"][sl], b["mask"][sl], b["w"][sl], prompt_len=P)
        return projected_scores(model, b["seqs"][sl], b["mask"][sl], b["w"][sl], V, prompt_len=P)

    def check() -> None:
        # exact: scores streamed group by group (G·D at a time); projected: one batched pass for all groups (N·K)
        proj = scores(slice(0, n * G)) if V is not None else None
        for j in range(n):
            sl = slice(j * G, (j + 1) * G)
            pg, _, _ = group_gradient(
                model,
                b["seqs"][sl],
                b["mask"][sl],
                b["w"][sl],
                b["adv"][sl],
                prompt_len=P,
                group_size=G,
                clip_low=0.2,
                clip_high=0.2,
            )
            g = -flatten(pg)
            if proj is None:
                check_identity(g, scores(sl), b["rewards"][sl], b["adv"][sl], b["dial"])
            else:
                projected_check(g, V, proj[sl], b["rewards"][sl], b["adv"][sl], b["dial"])

    def extra() -> None:
        if V is not None:
            scores(slice(0, n * G))
            return
        for j in range(n):
            scores(slice(j * G, (j + 1) * G))

    return {
        "train_step": train_step,
        "exact_check": check,
        "projected_check": check,
        "exact_extra": extra,
        "projected_extra": extra,
    }[name]


def worker(size: str, method: str, groups: int, directions: int, repeat: int, device: str) -> dict[str, Any]:
    """One measurement in this process: median seconds and peak-memory growth in MiB."""
    import torch

    torch.set_num_threads(1)
    b = _batch(size, groups, device)
    fn = _method(method, b, directions)
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.max_memory_allocated()
    else:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    seconds = _median_seconds(fn, repeat, sync)
    after = torch.cuda.max_memory_allocated() if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "size": size,
        "method": method,
        "n_params": b["n_params"],
        "seconds": seconds,
        "peak_mib": max(0, after - before) / 2**20,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--sizes",
        default="2x64,4x128,6x256",
        help="GPT-2 sizes as LAYERSxWIDTH, comma-separated (default 2x64,4x128,6x256)",
    )
    parser.add_argument("--groups", type=int, default=4, help="groups of G = 8 answers in the batch (default 4)")
    parser.add_argument(
        "--directions", type=int, default=2, help="random directions K of the projected check (default 2)"
    )
    parser.add_argument(
        "--repeat", type=int, default=5, help="timed calls after one warm-up; the median is reported (default 5)"
    )
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="device (default cpu)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--worker", nargs=2, metavar=("SIZE", "METHOD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker, args.groups, args.directions, args.repeat, args.device)))
        return 0
    rows = []
    for size in args.sizes.split(","):
        for method in METHODS:
            cmd = [
                sys.executable,
                __file__,
                "--worker",
                size,
                method,
                "--groups",
                str(args.groups),
                "--directions",
                str(args.directions),
                "--repeat",
                str(args.repeat),
                "--device",
                args.device,
            ]
            rows.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout))
    base = {r["size"]: r for r in rows if r["method"] == "train_step"}
    for r in rows:
        r["time_vs_train_step"] = r["seconds"] / base[r["size"]]["seconds"]
    ratios = [r["time_vs_train_step"] for r in rows if r["method"] == "projected_check"]
    out = {
        "benchmark": "lm_identity_check_cost",
        "groups": args.groups,
        "group_size": 8,
        "directions": args.directions,
        "device": args.device,
        "threads": 1,
        "machine": platform.processor() or platform.machine(),
        "rows": rows,
        "goal_ratio": GOAL_RATIO,
        "meets_goal": all(x <= GOAL_RATIO for x in ratios),
    }
    if args.json:  # stored as results/lm-check-benchmark/bench.json: the run's provenance goes inside it
        from grpo_identity import provenance

        script = f"benchmarks/{os.path.basename(__file__)}"
        out["provenance"] = provenance.record(provenance.command_line([script, *sys.argv[1:]], prog="python"))
        print(json.dumps(out, indent=2))
        return 0
    print(
        f"{args.groups} groups of G = 8, K = {args.directions} directions, {args.device}, 1 thread; "
        f"time: median of {args.repeat}"
    )
    print(f"{'size':>7} {'params':>10} {'method':>16} {'ms':>9} {'x train step':>13} {'peak MiB':>9}")
    for r in rows:
        print(
            f"{r['size']:>7} {r['n_params']:>10,} {r['method']:>16} {1e3 * r['seconds']:9.1f} "
            f"{r['time_vs_train_step']:13.2f} {r['peak_mib']:9.1f}"
        )
    print(
        f"projected check <= {GOAL_RATIO:g}x a training step at every size: {'met' if out['meets_goal'] else 'NOT met'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
