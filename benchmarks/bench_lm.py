"""Benchmark: the LM trainer's throughput on CPU, and per-sample scores by torch.func against a loop.

Measures, for a model of the chosen named size on the addition task:

- generation: new tokens per second of the KV-cached sampler (batch of prompts, temperature 1);
- training: tokens per second of forward + backward of the batched loss;
- per-sample scores sᵢ of a batch: ``torch.func`` (functional_call + vmap + grad) against a loop
  of one backward call per sample, and the largest difference between the two (goal: ≥ 3× faster).

    python benchmarks/bench_lm.py [--config cpu-smoke] [--batch 64] [--repeat 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import platform
import time

GOAL_SPEEDUP = 3.0


def _best(fn, repeat: int) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    """Median seconds of ``repeat`` timed calls, after one untimed warm-up call."""
    times, out = [], fn()
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2], out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config", default="cpu-smoke", help="named LM config whose model size is measured (default cpu-smoke)"
    )
    parser.add_argument("--batch", type=int, default=64, help="sequences per batch (default 64)")
    parser.add_argument(
        "--repeat", type=int, default=9, help="timed repeats after one warm-up; the median is reported (default 9)"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()

    import numpy as np
    import torch

    from grpo_identity.trainer.lm.config import named_config
    from grpo_identity.trainer.lm.identity import flatten, per_sample_scores, trainable
    from grpo_identity.trainer.lm.loss import group_loss, sample_weights, surrogate
    from grpo_identity.trainer.lm.model import build_model, count_params, sample, token_logprobs
    from grpo_identity.trainer.lm.task import AdditionTask

    torch.set_num_threads(args.threads)
    cfg = named_config(args.config)
    task = AdditionTask(cfg.max_digits)
    torch.manual_seed(0)
    model = build_model(cfg, task.vocab_size, task.prompt_len + task.max_answer_len)
    B, P = args.batch, task.prompt_len
    probs = task.sample(B, np.random.default_rng(0))
    prompts = torch.as_tensor(probs.prompts)
    gen = torch.Generator().manual_seed(0)

    # generation: new tokens per second
    def generate():  # type: ignore[no-untyped-def]
        gen.manual_seed(0)
        return sample(model, prompts, task.max_answer_len, temperature=1.0, generator=gen)

    t_gen, (comp, lengths) = _best(generate, args.repeat)  # type: ignore[misc]
    new_tokens = int(lengths.sum())

    # training: forward + backward of the batched loss on full-length answers
    seqs_np, mask_np = task.supervised_batch(B, np.random.default_rng(1))
    seqs = torch.as_tensor(seqs_np)  # (B, P+T)
    mask = torch.as_tensor(mask_np[:, P:]).float()  # (B, T)
    adv = torch.randn(B)
    w = sample_weights(mask.sum(1), "seq_mean", n_groups=1, group_size=B, max_new_tokens=task.max_answer_len)

    def train_step():  # type: ignore[no-untyped-def]
        model.zero_grad(set_to_none=True)
        logp = token_logprobs(model, seqs, P)
        group_loss(surrogate(logp, logp.detach(), adv, 0.2, 0.2), mask, w, B).backward()

    t_train, _ = _best(train_step, args.repeat)

    # per-sample scores: torch.func against a loop of backward calls
    t_func, s_func = _best(lambda: per_sample_scores(model, seqs, mask, w, prompt_len=P), args.repeat)
    _, params = trainable(model)

    def loop():  # type: ignore[no-untyped-def]
        rows = []
        for i in range(B):
            lp = token_logprobs(model, seqs[i : i + 1], P)[0]
            rows.append(flatten(torch.autograd.grad(w[i] * (lp * mask[i]).sum(), params, allow_unused=True)))
        return torch.stack(rows)

    t_loop, s_loop = _best(loop, max(1, args.repeat // 2))
    diff = float((s_func - s_loop).abs().max() / s_loop.abs().max())  # type: ignore[operator]
    out = {
        "benchmark": "lm_cpu_throughput",
        "config": args.config,
        "model": cfg.model,
        "n_params": count_params(model),
        "batch": B,
        "threads": args.threads,
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "generation_new_tokens": new_tokens,
        "generation_seconds": t_gen,
        "generation_tokens_per_second": new_tokens / t_gen,
        "training_tokens": int(seqs.numel()),
        "training_seconds": t_train,
        "training_tokens_per_second": seqs.numel() / t_train,
        "per_sample_func_seconds": t_func,
        "per_sample_loop_seconds": t_loop,
        "per_sample_speedup": t_loop / t_func,
        "per_sample_max_rel_diff": diff,
        "goal_speedup": GOAL_SPEEDUP,
        "meets_goal": t_loop / t_func >= GOAL_SPEEDUP,
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{cfg.model} {out['n_params']:,} params, batch {B}, {args.threads} thread(s), torch {torch.__version__}")
        print(
            f"generation : {out['generation_tokens_per_second']:10.0f} new tok/s  "
            f"({new_tokens} tokens in {t_gen * 1e3:.1f} ms)"
        )
        print(
            f"training   : {out['training_tokens_per_second']:10.0f} tok/s      "
            f"({seqs.numel()} tokens fwd+bwd in {t_train * 1e3:.1f} ms)"
        )
        print(
            f"per-sample : torch.func {t_func * 1e3:.1f} ms, loop of {B} backward calls {t_loop * 1e3:.1f} ms "
            f"-> {out['per_sample_speedup']:.1f}x "
            f"(goal {GOAL_SPEEDUP:.0f}x: {'met' if out['meets_goal'] else 'NOT met'}); max rel diff {diff:.1e}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
