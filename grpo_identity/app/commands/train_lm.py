"""``grpo-identity train lm``: GRPO, Dr. GRPO and DAPO on a small transformer, checking
g = c(k, G)·(s̄₊ − s̄₋) on every group's real gradient."""

from __future__ import annotations

import argparse
import typing

HELP = "train a small transformer on addition with GRPO, Dr. GRPO and DAPO, checking the identity on real gradients"

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

    p.add_argument("--config", default="cpu-smoke", choices=list(CONFIGS), help="named size the options below override (default: cpu-smoke)")
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
    p.add_argument("--out", metavar="DIR", help="write config.json, metrics.jsonl (as the run goes), summary.json and lm_identity.png into DIR")
    p.add_argument("--json", action="store_true", help="print the summary as JSON (no progress bar)")


def run(args: argparse.Namespace) -> int:
    import dataclasses
    import sys
    from pathlib import Path

    from grpo_identity.app.report import emit_json, format_table
    from grpo_identity.trainer.lm.config import LMConfig, named_config

    overrides = {f.name: getattr(args, f.name, None) for f in dataclasses.fields(LMConfig)}
    config = named_config(args.config, **overrides)
    out = Path(args.out) if args.out else None
    if out is not None and out.exists() and not out.is_dir():
        raise ValueError(f"--out {args.out} exists and is not a directory")
    if config.experiment == "conditional":
        return _run_conditional(config, args, out)
    from grpo_identity.trainer.lm.train import run_lm

    s = run_lm(config, progress=not args.json and sys.stderr.isatty(), out_dir=out)
    if args.json:
        emit_json(s)
        return 0
    wu = s["warmup"]
    print(f"{s['model']} with {s['n_params']:,} parameters on {s['device']} (bf16 autocast: {'on' if s['amp'] else 'off'}); "
          f"warm-up {wu['steps']} steps, greedy accuracy {wu['eval_acc']:.3f}")
    rows = []
    for m, ms in s["modes"].items():
        rows.append([m, ms["aggregation"], ms["groups_checked"], ms["identity_max_rel_err"], ms["loglog_slope"], ms["loglog_r2"],
                     ms["gap_slope"], ms["silent_frac_mean"], ms["silent_pred_mean"], f"{ms['eval_acc_initial']:.3f} -> {ms['eval_acc_final']:.3f}",
                     ms["samples"]])
    print(format_table([[("n/a" if v is None else v) for v in r] for r in rows],
                       ["mode", "aggregation", "groups", "max rel err", "slope |g| vs sigma", "R2", "slope |s+ - s-|",
                        "silent", "predicted", "greedy acc", "samples"]))
    print("share of |s+ - s-|^2 that is sampling noise, (V+/k + V-/(G-k)) / |s+ - s-|^2, median over groups:")
    keys = sorted({int(k) for ms in s["modes"].values() for k in ms["by_k"]})
    nz = [[m, ms["gap_noise_share_median"], *[ms["by_k"].get(str(k), {}).get("noise_share_median") for k in keys]] for m, ms in s["modes"].items()]
    print(format_table([[("n/a" if v is None else v) for v in r] for r in nz], ["mode", "all groups", *(f"k={k}" for k in keys)]))
    ls = s["learning_speed"]
    if ls["target_eval_acc"] is not None:
        print(f"samples to reach greedy accuracy {ls['target_eval_acc']:.3f}: "
              + ", ".join(f"{m} {v['samples_to_target'] if v['samples_to_target'] is not None else 'not reached'}" for m, v in ls["by_mode"].items()))
    from grpo_identity.trainer.lm.identity import REL_TOL

    verdict = "holds" if s["identity_max_rel_err"] is not None and s["identity_max_rel_err"] <= REL_TOL else f"FAILS the {REL_TOL:g} goal"
    print(f"identity: largest relative error {s['identity_max_rel_err']} over {s['groups_checked']} groups: {verdict}  ({s['seconds']:.1f} s)")
    if out is not None:
        print(f"wrote {out / 'summary.json'}, {out / 'metrics.jsonl'}, {out / 'config.json'}, {out / 'lm_identity.png'}")
    return 0


def _run_conditional(config: typing.Any, args: argparse.Namespace, out: typing.Any) -> int:
    """``--experiment conditional``: run, print the ``conditional`` keys; exit 1 when a check misses the goal."""
    import sys

    from grpo_identity.app.report import emit_json, format_table
    from grpo_identity.trainer.lm.conditional import run_conditional
    from grpo_identity.trainer.lm.identity import REL_TOL

    s = run_conditional(config, progress=not args.json and sys.stderr.isatty(), out_dir=out)
    c = s["conditional"]
    pc = c["projected_check"]
    ok = all(e is not None and e <= REL_TOL for e in (pc["projected_max_rel_err"], pc["exact_max_rel_err"]))
    if args.json:
        emit_json(s)
        return 0 if ok else 1
    na = lambda v: "n/a" if v is None else v  # noqa: E731
    iv = lambda d: "n/a" if d.get("interval") is None else f"[{d['interval'][0]:.3f}, {d['interval'][1]:.3f}]"  # noqa: E731
    print(f"fixed policy: {s['model']} with {s['n_params']:,} parameters on {s['device']}; {c['groups']} groups of G = {c['group_size']} "
          f"on {len(c['prompts'])} prompts (solve rates " + ", ".join(f"{p['p_ref']:.2f}" for p in c["prompts"]) + ")")
    rows = [[m, na(v["value"]), iv(v), v["predicted"], v["cells"], na(c["noise_slope_by_mode"][m]["value"]), iv(c["noise_slope_by_mode"][m]),
             na(c["noise_slope_by_mode"][m]["predicted_from_traces"]), na(c["cosine_min"]["by_mode"][m]["value"]),
             na(c["raw_slope_by_mode"][m]["slope"])] for m, v in c["slope_by_mode"].items()]
    print(format_table(rows, ["mode", "slope |E[g|k]| vs sigma", "95% interval", "predicted", "cells", "noise slope", "interval",
                              "from traces", "cosine min", "raw |g| slope"]))
    gp = c["grad_p_rel_err"]
    print(f"E[g|k]/c against grad p/(p(1-p)) ({na(gp.get('mode'))}): relative difference, median over prompts {na(gp['value'])}")
    print(f"identity along {pc['directions']} random directions: largest relative error {na(pc['projected_max_rel_err'])} over "
          f"{pc['groups_projected']} groups; exact per-sample check {na(pc['exact_max_rel_err'])} over {pc['groups_exact']} groups: "
          + ("holds" if ok else f"FAILS the {REL_TOL:g} goal") + f"  ({s['seconds']:.1f} s)")
    if out is not None:
        print(f"wrote {out / 'summary.json'}, {out / 'config.json'}, {out / 'conditional.png'}")
    return 0 if ok else 1
