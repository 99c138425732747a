"""``grpo-identity train lm``: GRPO, Dr. GRPO and DAPO on a small transformer, checking
g = c(k, G)·(s̄₊ − s̄₋) on every group's real gradient."""

from __future__ import annotations

import argparse
import typing

from grpo_identity.app import progress
from grpo_identity.app.options import budget_help

HELP = (
    "train a small transformer on addition (or split: s = a + b) with GRPO, Dr. GRPO and DAPO, "
    "checking the identity on real gradients"
)

#: short options named in the paper's letters
FLAGS = {"group_size": ["--G", "--group-size"]}


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def configure(p: argparse.ArgumentParser) -> None:
    import dataclasses

    from grpo_identity.trainer.lm.config import CONFIGS, LMConfig, lm_field_docs  # standard library only

    p.add_argument(
        "--config",
        default="cpu-smoke",
        choices=list(CONFIGS),
        help="named size the options below override (default: cpu-smoke)",
    )
    docs = lm_field_docs()
    base = CONFIGS["cpu-smoke"]
    hints = typing.get_type_hints(LMConfig)
    for f in dataclasses.fields(LMConfig):
        opts = FLAGS.get(f.name, [f"--{f.name.replace('_', '-')}"])
        hint = hints[f.name]
        kw: dict[str, typing.Any] = {"dest": f.name, "default": None}
        if typing.get_origin(hint) is typing.Literal:
            choices = list(typing.get_args(hint))
            if f.name == "mode":
                choices = ["grpo", "dr_grpo", "dapo", "all"]
            kw["choices"] = choices
        elif hint is int or hint is float:
            kw["type"] = hint
        elif f.name == "difficulty_weights":
            kw.update(type=_floats, metavar="W1,W2,...")
        p.add_argument(*opts, help=f"{docs.get(f.name, '')} (cpu-smoke: {getattr(base, f.name)!r})", **kw)
    p.add_argument(
        "--out",
        metavar="DIR",
        help="write config.json, metrics.jsonl (as the run goes), summary.json and lm_identity.png into DIR",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON (no progress bar)")
    p.description = f"{HELP}. {budget_help()}"


def memory_terms(cfg: typing.Any, vocab: int, modes: int) -> list[tuple[str, float, list[str]]]:
    """Estimated peak bytes of a run (float32), by what they hold.  With L layers of width E,
    N ≈ 12·L·E² + (vocab + S)·E parameters and S = 3·max_digits + 5 tokens per sequence: the
    model with its optimiser state and copies (8·N), a group's per-sample gradients (2·G·N), a
    step's activations (~20·S·E·L per sequence with gradients, 2·S·E·L when sampling), the
    warm-up batch, the evaluation set, and ~1 kB per step and group of records."""
    S, E, L = 3 * cfg.max_digits + 5, cfg.n_embd, cfg.n_layer
    n = 12 * L * E * E + (vocab + S) * E
    seq = 4.0 * S * E * L  # bytes per sequence per activation slot
    P, G = cfg.prompts_per_step, cfg.group_size
    return [
        ("the model and its optimiser state", 4.0 * 8 * n, ["--n-embd", "--n-layer"]),
        ("the per-sample gradients of a group (G x parameters)", 4.0 * 2 * G * n, ["--G", "--n-embd", "--n-layer"]),
        (
            "the rollouts of a step",
            seq * (20 * P * G + 2 * P * (G + cfg.probe_samples) * cfg.dapo_max_draws),
            ["--prompts-per-step", "--G", "--probe-samples"],
        ),
        ("the warm-up batch", seq * 20 * cfg.warmup_batch, ["--warmup-batch"]),
        ("the evaluation set", seq * 2 * cfg.eval_prompts_per_level * cfg.max_digits, ["--eval-prompts-per-level"]),
        ("the per-step records", 1000.0 * cfg.steps * modes * (1 + P), ["--steps", "--prompts-per-step"]),
        *_conditional_terms(cfg, n),
    ]


def _conditional_terms(cfg: typing.Any, n: float) -> list[tuple[str, float, list[str]]]:
    """The fixed-policy experiment keeps one prompt's per-group gradients (groups x parameters)
    and its reference answers' per-class score sums (a few vectors of N) for every mode."""
    if getattr(cfg, "experiment", "train") != "conditional":
        return []
    return [
        (
            "the per-group gradients of one prompt (groups x parameters)",
            4.0 * cfg.cond_groups * n,
            ["--cond-groups", "--n-embd", "--n-layer"],
        )
    ]


def run(args: argparse.Namespace) -> int:
    import dataclasses

    from grpo_identity.app.options import build_config, option_names, refuse_over_budget
    from grpo_identity.app.report import check_out_dir, emit_json
    from grpo_identity.foundation import EXIT_FAIL, EXIT_OK, require
    from grpo_identity.trainer.lm.config import LMConfig, modes_of, named_config
    from grpo_identity.trainer.lm.task import VOCAB

    overrides = {f.name: getattr(args, f.name, None) for f in dataclasses.fields(LMConfig)}
    config = build_config(lambda: named_config(args.config, **overrides), option_names(LMConfig, FLAGS), args._argv)
    refuse_over_budget(memory_terms(config, len(VOCAB), len(modes_of(config))))
    out = check_out_dir(args.out) if args.out else None  # before the run: it writes metrics.jsonl as it goes
    require("torch", "transformers", *(["matplotlib"] if out is not None else []))
    from grpo_identity.trainer.lm.identity import REL_TOL

    if config.experiment == "conditional":
        return _run_conditional(config, args, out)
    from grpo_identity.provenance import command_line
    from grpo_identity.trainer.lm.train import run_lm

    s = run_lm(config, progress=progress.wanted(args), out_dir=out, command=command_line(args._argv))
    err = s["identity_max_rel_err"]
    holds = err is not None and err <= REL_TOL  # no checked group: nothing shown to hold
    if args.json:
        emit_json(s)
    else:
        _print_summary(s)
        verdict = (
            "holds"
            if holds
            else f"FAILS the {REL_TOL:g} goal"
            if err is not None
            else "not checked (no group with 0 < k < G)"
        )
        print(
            f"identity: largest relative error {err} over {s['groups_checked']} groups: "
            f"{verdict}  ({s['seconds']:.1f} s)"
        )
        if out is not None:
            print(
                f"wrote {out / 'summary.json'}, {out / 'metrics.jsonl'}, "
                f"{out / 'config.json'}, {out / 'lm_identity.png'}"
            )
    return EXIT_OK if holds else EXIT_FAIL


def _print_summary(s: dict[str, typing.Any]) -> None:
    """The tables of a run's summary: per mode, the noise share by k, the learning speed."""
    from grpo_identity.app.report import format_table

    wu = s["warmup"]
    print(
        f"{s['model']} with {s['n_params']:,} parameters on {s['device']} "
        f"(bf16 autocast: {'on' if s['amp'] else 'off'}); "
        f"warm-up {wu['steps']} steps, greedy accuracy {wu['eval_acc']:.3f}"
    )
    rows = []
    for m, ms in s["modes"].items():
        rows.append(
            [
                m,
                ms["aggregation"],
                ms["groups_checked"],
                ms["identity_max_rel_err"],
                ms["loglog_slope"],
                ms["loglog_r2"],
                ms["gap_slope"],
                ms["silent_frac_mean"],
                ms["silent_pred_mean"],
                f"{ms['eval_acc_initial']:.3f} -> {ms['eval_acc_final']:.3f}",
                ms["samples"],
            ]
        )
    print(
        format_table(
            [[("n/a" if v is None else v) for v in r] for r in rows],
            [
                "mode",
                "aggregation",
                "groups",
                "max rel err",
                "slope |g| vs sigma",
                "R2",
                "slope |s+ - s-|",
                "silent",
                "predicted",
                "greedy acc",
                "samples",
            ],
        )
    )
    print("share of |s+ - s-|^2 that is sampling noise, (V+/k + V-/(G-k)) / |s+ - s-|^2, median over groups:")
    keys = sorted({int(k) for ms in s["modes"].values() for k in ms["by_k"]})
    nz = [
        [m, ms["gap_noise_share_median"], *[ms["by_k"].get(str(k), {}).get("noise_share_median") for k in keys]]
        for m, ms in s["modes"].items()
    ]
    print(
        format_table(
            [[("n/a" if v is None else v) for v in r] for r in nz], ["mode", "all groups", *(f"k={k}" for k in keys)]
        )
    )
    ls = s["learning_speed"]
    if ls["target_eval_acc"] is not None:
        print(
            f"samples to reach greedy accuracy {ls['target_eval_acc']:.3f}: "
            + ", ".join(
                f"{m} {v['samples_to_target'] if v['samples_to_target'] is not None else 'not reached'}"
                for m, v in ls["by_mode"].items()
            )
        )


def _run_conditional(config: typing.Any, args: argparse.Namespace, out: typing.Any) -> int:
    """``--experiment conditional``: run, print the ``conditional`` keys; exit 1 when a check misses the goal."""

    from grpo_identity.app.report import emit_json
    from grpo_identity.provenance import command_line
    from grpo_identity.trainer.lm.conditional import run_conditional
    from grpo_identity.trainer.lm.conditional_summary import goal_errors
    from grpo_identity.trainer.lm.identity import REL_TOL

    s = run_conditional(config, progress=progress.wanted(args), out_dir=out, command=command_line(args._argv))
    c = s["conditional"]
    pc = c["projected_check"]
    goal = goal_errors(pc)
    ok = all(e is not None and e <= REL_TOL for e in goal.values())
    ok = ok and pc["silent_groups_with_nonzero_grad"] == 0  # a silent group must give exactly zero gradient
    if args.json:
        emit_json(s)
        return 0 if ok else 1
    _print_conditional(s, goal, ok)
    _print_preregistered(c["preregistered"])
    if out is not None:
        print(
            f"wrote {out / 'summary.json'}, {out / 'config.json'}, {out / 'conditional.png'}, {out / 'provenance.json'}"
        )
    return 0 if ok else 1


def _print_conditional(s: dict[str, typing.Any], goal: dict[str, typing.Any], ok: bool) -> None:
    """The text report of a fixed-policy run: prompts, slopes, the ∇p comparison and the identity check."""
    from grpo_identity.app.report import format_table
    from grpo_identity.trainer.lm.identity import REL_TOL

    c = s["conditional"]
    pc = c["projected_check"]
    na = lambda v: "n/a" if v is None else v  # noqa: E731
    iv = lambda d: "n/a" if d.get("interval") is None else "[{:.3f}, {:.3f}]".format(*d["interval"])  # noqa: E731
    print(
        f"fixed policy: {s['model']} with {s['n_params']:,} parameters on {s['device']}; "
        f"{c['groups']} groups of G = {c['group_size']} "
        f"on {len(c['prompts'])} prompts (solve rates " + ", ".join(f"{p['p_ref']:.2f}" for p in c["prompts"]) + ")"
    )
    print(
        f"task {c['task']}: distinct correct answers among each prompt's groups "
        + ", ".join(str(p["correct_distinct"]) for p in c["prompts"])
    )
    rows = [
        [
            m,
            na(v["value"]),
            iv(v),
            v["predicted"],
            v["cells"],
            na(c["noise_slope_by_mode"][m]["value"]),
            iv(c["noise_slope_by_mode"][m]),
            na(c["noise_slope_by_mode"][m]["predicted_from_traces"]),
            na(c["cosine_min"]["by_mode"][m]["value"]),
            na(c["raw_slope_by_mode"][m]["slope"]),
        ]
        for m, v in c["slope_by_mode"].items()
    ]
    print(
        format_table(
            rows,
            [
                "mode",
                "slope |E[g|k]| vs sigma",
                "95% interval",
                "predicted",
                "cells",
                "noise slope",
                "interval",
                "from traces",
                "cosine min",
                "raw |g| slope",
            ],
        )
    )
    gp = c["grad_p_rel_err"]
    print(
        f"E[g|k]/c against grad p/(p(1-p)) ({na(gp.get('mode'))}): "
        f"relative difference, median over prompts {na(gp['value'])}"
    )
    print(
        f"identity along {pc['directions']} random directions: "
        f"largest relative error {na(goal['projected'])} (‖Ve‖/(√K‖g‖); ‖Ve‖/‖Vg‖ "
        f"{na(pc['projected_max_rel_err'])}) over {pc['groups_projected']} groups; "
        f"exact per-sample check {na(pc['exact_max_rel_err'])} over {pc['groups_exact']} groups: "
        + ("holds" if ok else f"FAILS the {REL_TOL:g} goal")
        + f"  ({s['seconds']:.1f} s)"
    )


def _print_preregistered(p: dict[str, typing.Any]) -> None:
    """The pre-registered slopes (the plain fit beside them) and each criterion's verdict."""
    import textwrap

    from grpo_identity.app.report import format_table
    from grpo_identity.trainer.lm.preregistered import observed_text as _observed

    commit = p["commit"][:12] if p["commit"] else "none"
    note = f"; {p['analysis']['note']}" if p["analysis"].get("note") else ""
    print(f"pre-registered analysis (trainer/lm/preregistered.py; commit {commit}{note}):")
    for m, sl in p["slope_by_mode"].items():
        print(
            f"  {m}: weighted slope {_observed(sl['value'])} {_observed(sl['interval'])}, "
            f"predicted {sl['predicted']:g} inside ({sl['bounds'][0]:g}, {sl['bounds'][1]:g}); "
            f"unweighted {_observed(sl['unweighted']['value'])} {_observed(sl['unweighted']['interval'])} (not judged)"
        )
    rows = [[name, d["status"], _observed(d["observed"])] for name, d in p["criteria_detail"].items()]
    print(format_table(rows, ["criterion", "status", "observed"]))
    for name, d in p["criteria_detail"].items():
        if d["reason"]:
            print(textwrap.fill(f"{name}: {d['reason']}", 120, initial_indent="  ", subsequent_indent="    "))
