"""Adaptive group size in the controlled Bernoulli-logit run: a fixed G against
:func:`grpo_identity.allocation.allocate` at equal total samples.

Both arms train the M one-parameter prompts of :mod:`grpo_identity.trainer.bernoulli`
(p_x = sigmoid(θ_x), the same initial difficulties, plain SGD on the autograd gradient of the
GRPO loss with the dial's advantages):

* **fixed**: G rollouts per prompt and step (M·G per step);
* **allocated**: G_x = allocate(p_x, budget = M·G, ε) rollouts for prompt x, re-allocated every
  step from the current solve rates. The allocator is given the true p_x (an oracle: the upper
  bound of what running estimates would give), so no prompt is predicted silent here.

The loss is L(θ) = −Σ_x (1/G_x) Σ_i Â_{x,i} log π_θ(y_{x,i}); the identity (Theorem 1) predicts
∂L/∂θ_x = −c(k_x, G_x)·(s̄₊ − s̄₋), checked every step (``identity_max_abs_err``). Measured per
arm: the mean solve rate of the hardest initial quartile over the steps (its learning speed:
the final value and the first step at which it reaches ``hard_target``), the silent fraction of
the drawn groups and the share of rollouts spent in silent groups.

torch is imported inside :func:`run_allocation`; one torch thread, float64.

>>> r = run_allocation(BernoulliConfig(num_prompts=40, steps=3))
>>> r["identity_max_abs_err"] < 1e-12, r["samples"]["allocated"] <= r["samples"]["fixed"]
(True, True)
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
import numpy.typing as npt

from grpo_identity.foundation import write_text_atomic
from grpo_identity.trainer.bernoulli import HARD_QUANTILE, initial_solve_rates
from grpo_identity.trainer.config import BernoulliConfig

__all__ = ["ALLOCATION_ARMS", "DEFAULT_EPS", "HARD_TARGET", "run_allocation"]

#: the two arms
ALLOCATION_ARMS = ("fixed", "allocated")
#: the allocator's tolerance: fidelity ≥ 90 % (Corollary 2's first column)
DEFAULT_EPS = 0.1
#: learning speed: the first step at which the hardest quartile's mean solve rate reaches this
HARD_TARGET = 0.9

FloatArray = npt.NDArray[np.float64]


def _draw(theta: Any, sizes: npt.NDArray[np.int64], gen: Any) -> tuple[Any, list[tuple[npt.NDArray[np.int64], Any]]]:
    """One step's rollouts: for each distinct group size g > 0 the prompts that get g and their
    (n_g, g) answers (1 = correct); returns p and the blocks."""
    import torch

    p = torch.sigmoid(theta).detach()  # (M,)
    blocks = []
    for g in np.unique(sizes[sizes > 0]):
        idx = np.flatnonzero(sizes == g)
        u = torch.rand(idx.size, int(g), generator=gen, dtype=torch.float64)
        blocks.append((idx, (u < p[idx][:, None]).to(torch.float64)))  # (n_g, g)
    return p, blocks


def _identity_error(grad: FloatArray, p: Any, blocks: list[tuple[npt.NDArray[np.int64], Any]]) -> float:
    """max |∂L/∂θ_x + c(k, G_x)·(s̄₊ − s̄₋)| over the prompts drawn (Theorem 1; scores y − p)."""
    from grpo_identity.dial import GRPO, coefficient, score_gap

    err = 0.0
    for idx, y in blocks:
        g = y.shape[1]
        gap = score_gap(y.reshape(-1), (y - p[idx][:, None]).reshape(-1, 1), g)[:, 0].numpy()  # (n_g,)
        e = float(np.abs(grad[idx] + np.asarray(coefficient(y.sum(1).numpy(), g, GRPO)) * gap).max())
        err = e if not e <= err else err  # a NaN propagates
    return err


def _run_arm(arm: str, p0: FloatArray, config: BernoulliConfig, eps: float) -> dict[str, Any]:
    """Train one arm; per-step curves and totals."""
    import torch
    import torch.nn.functional as F

    from grpo_identity.allocation import allocate
    from grpo_identity.dial import GRPO
    from grpo_identity.dial import advantages as dial_advantages

    M, budget = config.num_prompts, config.num_prompts * config.group_size
    gen = torch.Generator().manual_seed(config.seed)
    theta = torch.logit(torch.as_tensor(p0, dtype=torch.float64)).requires_grad_(True)  # (M,)
    opt = torch.optim.SGD([theta], lr=config.lr)
    hard = np.argsort(p0, kind="stable")[: max(1, int(round(HARD_QUANTILE * M)))]
    curves: dict[str, list[float]] = {
        k: [] for k in ("hard_mean_p", "mean_p", "silent_frac", "silent_rollouts", "samples", "max_group")
    }
    max_err, samples = 0.0, 0
    for _ in range(config.steps):
        p_np = torch.sigmoid(theta).detach().numpy().copy()
        curves["hard_mean_p"].append(float(p_np[hard].mean()))
        curves["mean_p"].append(float(p_np.mean()))
        sizes = np.full(M, config.group_size, dtype=np.int64) if arm == "fixed" else allocate(p_np, budget, eps)
        p, blocks = _draw(theta, sizes, gen)
        loss = theta.new_zeros(())
        silent_groups = silent_rollouts = 0
        for idx, y in blocks:
            g = y.shape[1]
            adv = dial_advantages(y, g, GRPO)  # (n_g, g)
            th = theta[idx]
            log_pi = y * F.logsigmoid(th)[:, None] + (1 - y) * F.logsigmoid(-th)[:, None]  # (n_g, g)
            loss = loss - (adv * log_pi).sum() / g
            k = y.sum(1)
            silent = (k == 0) | (k == g)
            silent_groups += int(silent.sum())
            silent_rollouts += int(silent.sum()) * g
        opt.zero_grad(set_to_none=True)
        loss.backward()
        err = _identity_error(theta.grad.detach().numpy() if theta.grad is not None else np.zeros(M), p, blocks)
        max_err = err if not err <= max_err else max_err  # a NaN propagates
        n_groups, spent = int((sizes > 0).sum()), int(sizes.sum())
        samples += spent
        curves["silent_frac"].append(silent_groups / n_groups if n_groups else 1.0)
        curves["silent_rollouts"].append(silent_rollouts / spent if spent else 0.0)
        curves["samples"].append(float(samples))
        curves["max_group"].append(float(sizes.max()))
        opt.step()
    p_final = torch.sigmoid(theta).detach().numpy()
    reached = [i for i, v in enumerate(curves["hard_mean_p"] + [float(p_final[hard].mean())]) if v >= HARD_TARGET]
    return {
        "identity_max_abs_err": max_err,
        "hard_final": float(p_final[hard].mean()),
        "hard_steps_to_target": reached[0] if reached else None,
        "final_mean_p": float(p_final.mean()),
        "silent_frac": float(np.mean(curves["silent_frac"])),
        "silent_rollouts": float(np.mean(curves["silent_rollouts"])),
        "samples": samples,
        "curves": curves,
    }


def run_allocation(config: BernoulliConfig | None = None, eps: float = DEFAULT_EPS) -> dict[str, Any]:
    """Run both arms (see the module docstring). Returns a JSON-ready dict: per arm (keys
    ``fixed``, ``allocated``) ``hard_final``, ``hard_steps_to_target`` (None if never reached),
    ``silent_frac`` and ``silent_rollouts`` (means over the steps), ``samples`` (total rollouts),
    ``final_mean_p``; ``identity_max_abs_err``, ``hard_initial``, ``eps``, ``hard_target``,
    ``solve_rate_source``, ``config``, ``seconds`` and the per-step ``curves``."""
    import torch

    from grpo_identity._validate import check_eps

    config = config or BernoulliConfig()
    e = float(check_eps(eps))
    if e >= 1:
        raise ValueError(f"eps must be in (0, 1), got {eps!r}")
    start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        p0, source = initial_solve_rates(config)
        arms = {arm: _run_arm(arm, p0, config, e) for arm in ALLOCATION_ARMS}
    finally:
        torch.set_num_threads(threads)
    per = lambda key: {a: arms[a][key] for a in ALLOCATION_ARMS}
    return {
        "identity_max_abs_err": max(arms[a]["identity_max_abs_err"] for a in ALLOCATION_ARMS),
        "hard_final": per("hard_final"),
        "hard_steps_to_target": per("hard_steps_to_target"),
        "hard_initial": float(np.sort(p0)[: max(1, int(round(HARD_QUANTILE * config.num_prompts)))].mean()),
        "final_mean_solve_rate": per("final_mean_p"),
        "silent_frac": per("silent_frac"),
        "silent_rollouts": per("silent_rollouts"),
        "samples": per("samples"),
        "eps": e,
        "hard_target": HARD_TARGET,
        "solve_rate_source": source,
        "config": dataclasses.asdict(config),
        "curves": per("curves"),
        "seconds": time.perf_counter() - start,
    }


#: the option a config field is set by, for error messages
_FLAG_OF = {"num_prompts": "--M", "group_size": "--G"}


def main(argv: list[str] | None = None) -> int:
    """``python -m grpo_identity.trainer.allocation [options]``: the comparison as a table (or ``--json``)."""
    import argparse
    import sys
    from pathlib import Path

    from grpo_identity import provenance
    from grpo_identity.foundation import dumps, emit_json, format_table
    from grpo_identity.trainer.config import add_arguments, from_namespace

    ap = argparse.ArgumentParser(
        prog="python -m grpo_identity.trainer.allocation",
        description="fixed G against allocate() at equal total samples",
    )
    add_arguments(ap, BernoulliConfig, {"num_prompts": ["--M", "--num-prompts"], "group_size": ["--G", "--group-size"]})
    ap.add_argument(
        "--eps",
        type=float,
        default=DEFAULT_EPS,
        help=f"the allocator's tolerance: fidelity >= 1 - eps (default: {DEFAULT_EPS})",
    )
    ap.add_argument("--json", action="store_true", help="print the result as JSON (without the per-step curves)")
    ap.add_argument(
        "--out", metavar="FILE", help="also write the whole result, per-step curves included, as JSON to FILE"
    )
    raw = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(raw)
    if not 0 < args.eps < 1:
        ap.exit(2, f"{ap.prog}: error: --eps must be in (0, 1), got {args.eps:g}\n")
    try:
        config = from_namespace(BernoulliConfig, args)
    except ValueError as exc:  # name the option, not the field: "num_prompts must be ..." -> "--M must be ..."
        field, _, rest = str(exc).partition(" ")
        ap.exit(2, f"{ap.prog}: error: {_FLAG_OF.get(field, '--' + field.replace('_', '-'))} {rest}\n")
    if args.out and not Path(args.out).parent.is_dir():  # fail before the run, not after
        ap.exit(2, f"{ap.prog}: error: --out {args.out}: folder {Path(args.out).parent} does not exist\n")
    r = run_allocation(config, args.eps)
    if args.out:  # one file per run: its provenance (command, versions, commit) goes inside it
        command = provenance.command_line(["-m", "grpo_identity.trainer.allocation", *raw], prog="python")
        write_text_atomic(args.out, dumps(r | {"provenance": provenance.record(command)}) + "\n")
    if args.json:
        emit_json({k: v for k, v in r.items() if k != "curves"})
        return 0
    rows = [
        [
            a,
            r["samples"][a],
            r["hard_final"][a],
            r["hard_steps_to_target"][a] if r["hard_steps_to_target"][a] is not None else "never",
            r["silent_frac"][a],
            r["silent_rollouts"][a],
            r["final_mean_solve_rate"][a],
        ]
        for a in ALLOCATION_ARMS
    ]
    print(
        format_table(
            rows,
            [
                "arm",
                "samples",
                "hard quartile final p",
                f"steps to {HARD_TARGET}",
                "silent groups",
                "rollouts in silent groups",
                "final mean p",
            ],
        )
    )
    print(
        f"identity max |autograd - prediction| = {r['identity_max_abs_err']:.3g}; "
        f"hard quartile starts at {r['hard_initial']:.4f}; eps {r['eps']}; {r['solve_rate_source']}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
