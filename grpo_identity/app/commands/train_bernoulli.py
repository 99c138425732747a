"""``grpo-identity train bernoulli``: the controlled Bernoulli-logit run (PAPER claim 9)."""

from __future__ import annotations

import argparse

HELP = "train M scalar Bernoulli-logit policies with GRPO, Dr. GRPO and DAPO by autograd, checking the identity every step"

#: short options named in the paper's letters
FLAGS = {"num_prompts": ["--M", "--num-prompts"], "group_size": ["--G", "--group-size"]}


def configure(p: argparse.ArgumentParser) -> None:
    from grpo_identity.trainer.config import BernoulliConfig, add_arguments  # standard library only

    add_arguments(p, BernoulliConfig, FLAGS)
    p.add_argument("--out", metavar="DIR", help="write result.json, config.json and bernoulli.png into DIR")
    p.add_argument("--json", action="store_true", help="print the result as JSON (no progress bar)")


def run(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from grpo_identity.app.report import emit_json, format_table, write_outputs
    from grpo_identity.trainer.bernoulli import plot_bernoulli, run_bernoulli
    from grpo_identity.trainer.config import BernoulliConfig, from_namespace

    config = from_namespace(BernoulliConfig, args)
    if args.out and Path(args.out).exists() and not Path(args.out).is_dir():  # fail before the run, not after
        raise ValueError(f"--out {args.out} exists and is not a directory")
    result = run_bernoulli(config, progress=not args.json and sys.stderr.isatty())
    if args.out:
        write_outputs(args.out, {"result.json": result, "config.json": result["config"]}, ("bernoulli.png", lambda path: plot_bernoulli(result, path)))
    if args.json:
        emit_json(result)
        return 0
    print(f"solve rates: {result['solve_rate_source']}")
    print(f"identity: max |autograd gradient - (-c(k)(s+ - s-))| = {result['identity_max_abs_err']:.3g} over every prompt, step and arm")
    print(f"silent fraction vs E[p^G + (1-p)^G]: R^2 = {result['r2_silent']:.4f} (GRPO arm; three arms pooled {result['r2_silent_pooled']:.4f})")
    print()
    es = result["extreme_share"]
    print(f"share of gradient mass on extreme prompts (p0 < 0.1 or >= 0.9), {result['config']['mass_draws']} groups at the initial solve rates")
    print(format_table([[arm, es[arm]["measured"], es[arm]["finite_g"], es[arm]["large_g"]] for arm in ("grpo", "dr_grpo")], ["arm", "measured", "finite-G form", "large-G form"]))
    print()
    hf, fm = result["hard_final"], result["final_mean_solve_rate"]
    print(f"hardest initial quartile (mean p {result['hard_initial']:.3f} at the start): final mean solve rate")
    print(format_table([[arm, hf[arm], fm[arm]] for arm in ("grpo", "dr_grpo", "dapo")], ["arm", "hardest quartile", "all prompts"]))
    print()
    print(f"DAPO samples / GRPO samples: {result['dapo_oversample']:.3f}   ({result['seconds']:.2f} s)")
    if args.out:
        out = Path(args.out)
        print(f"wrote {out / 'result.json'}, {out / 'config.json'}, {out / 'bernoulli.png'}")
    return 0
