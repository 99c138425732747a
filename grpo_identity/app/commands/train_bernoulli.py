"""``grpo-identity train bernoulli``: the controlled Bernoulli-logit run (PAPER claim 9)."""

from __future__ import annotations

import argparse

from grpo_identity.app.options import budget_help

HELP = (
    "train M scalar Bernoulli-logit policies with GRPO, Dr. GRPO and DAPO by autograd, checking the identity every step"
)

#: short options named in the paper's letters
FLAGS = {"num_prompts": ["--M", "--num-prompts"], "group_size": ["--G", "--group-size"]}


def configure(p: argparse.ArgumentParser) -> None:
    from grpo_identity.trainer.config import BernoulliConfig, add_arguments  # standard library only

    add_arguments(p, BernoulliConfig, FLAGS)
    p.add_argument(
        "--out", metavar="DIR", help="write result.json, config.json, bernoulli.png and provenance.json into DIR"
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON (no progress bar)")
    p.description = f"{HELP}. {budget_help()}"


def memory_terms(M: int, G: int, max_draws: int, steps: int) -> list[tuple[str, float, list[str]]]:
    """Estimated peak bytes of a run, by what they hold: a step's rollout draws (D, M, G) and
    per-rollout tensors (M, G) in float64, and the per-step records (measured on this machine:
    ~24 bytes per draw, ~160 per rollout, ~1 kB per step)."""
    return [
        ("the rollout draws (M x G x max-draws)", 24.0 * M * G * max_draws, ["--M", "--G", "--max-draws"]),
        ("the per-rollout tensors (M x G)", 160.0 * M * G, ["--M", "--G"]),
        ("the per-step records", 1000.0 * steps, ["--steps"]),
    ]


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from grpo_identity.app import progress
    from grpo_identity.app.options import build_config, option_names, refuse_over_budget
    from grpo_identity.app.report import check_out_dir, emit_json, format_table, write_outputs
    from grpo_identity.foundation import EXIT_FAIL, EXIT_OK, require
    from grpo_identity.trainer.config import BernoulliConfig, from_namespace

    config = build_config(
        lambda: from_namespace(BernoulliConfig, args), option_names(BernoulliConfig, FLAGS), args._argv
    )
    refuse_over_budget(memory_terms(config.num_prompts, config.group_size, config.max_draws, config.steps))
    if args.out:  # before the run, not after it
        check_out_dir(args.out)
    show = progress.wanted(args)
    with progress.loading("train bernoulli: loading torch", show):  # seconds before the bar
        require("torch", *(["matplotlib"] if args.out else []))
        from grpo_identity.trainer.bernoulli import plot_bernoulli, run_bernoulli

    result = run_bernoulli(config, progress=show)
    if args.out:
        from grpo_identity import provenance

        write_outputs(
            args.out,
            {
                "result.json": result,
                "config.json": result["config"],
                provenance.FILE: provenance.record(provenance.command_line(args._argv)),
            },
            ("bernoulli.png", lambda path: plot_bernoulli(result, path)),
        )
    from grpo_identity.trainer.claims import IDENTITY_ABS_TOL

    err = result["identity_max_abs_err"]
    holds = err <= IDENTITY_ABS_TOL  # False for NaN
    code = EXIT_OK if holds else EXIT_FAIL
    if args.json:
        emit_json(result)
        return code
    print(f"solve rates: {result['solve_rate_source']}")
    verdict = "holds" if holds else f"FAILS the {IDENTITY_ABS_TOL:g} goal"
    print(
        f"identity: max |autograd gradient - (-c(k)(s+ - s-))| = {err:.3g} over every prompt, step and arm: {verdict}"
    )
    print(
        f"silent fraction vs E[p^G + (1-p)^G]: R^2 = {result['r2_silent']:.4f} "
        f"(GRPO arm; three arms pooled {result['r2_silent_pooled']:.4f})"
    )
    print()
    es = result["extreme_share"]
    print(
        "share of gradient mass on extreme prompts (p0 < 0.1 or >= 0.9), "
        f"{result['config']['mass_draws']} groups at the initial solve rates"
    )
    print(
        format_table(
            [[arm, es[arm]["measured"], es[arm]["finite_g"], es[arm]["large_g"]] for arm in ("grpo", "dr_grpo")],
            ["arm", "measured", "finite-G form", "large-G form"],
        )
    )
    print()
    hf, fm = result["hard_final"], result["final_mean_solve_rate"]
    print(f"hardest initial quartile (mean p {result['hard_initial']:.3f} at the start): final mean solve rate")
    print(
        format_table(
            [[arm, hf[arm], fm[arm]] for arm in ("grpo", "dr_grpo", "dapo")], ["arm", "hardest quartile", "all prompts"]
        )
    )
    print()
    print(f"DAPO samples / GRPO samples: {result['dapo_oversample']:.3f}   ({result['seconds']:.2f} s)")
    if args.out:
        out = Path(args.out)
        print(f"wrote {out / 'result.json'}, {out / 'config.json'}, {out / 'bernoulli.png'}, {out / 'provenance.json'}")
    return code
