"""``grpo-identity realdata``: the paper's real-data numbers from per-problem solve rates (PAPER claim 8)."""

from __future__ import annotations

import argparse

from grpo_identity.app.options import integer

HELP = (
    "silent fractions and gradient-mass shares from per-problem solve rates "
    "(parquet/JSONL/CSV, histogram CSV, or hf:NAME)"
)


#: the largest --rollouts (the sub-sampled silent rate takes time linear in n: ~1 s at 10^5 here)
MAX_ROLLOUTS = 10_000


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "path",
        metavar="PATH",
        nargs="?",
        default="bigmath",
        help="bigmath (default: the shipped Big-Math histogram), a solve-rate file (llama8b_solve_rate column, "
        "or a solve_rate,count histogram CSV), or hf:NAME (a Hugging Face dataset, online only)",
    )
    p.add_argument(
        "--rollouts",
        type=integer(1, MAX_ROLLOUTS),
        default=64,
        help=f"rollouts n behind each solve rate k/n, 1 to {MAX_ROLLOUTS:,} (default 64, Big-Math's)",
    )
    p.add_argument("--out", metavar="DIR", help="write summary.json and realdata.png into DIR")
    p.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    from grpo_identity.analysis.realdata import plot_realdata, summarise
    from grpo_identity.analysis.solve_rates import resolve
    from grpo_identity.app.report import check_out_dir, emit_json, format_table, write_outputs
    from grpo_identity.foundation import require

    if args.out:  # before the work: the figure needs matplotlib, the folder must be writable
        check_out_dir(args.out)
        require("matplotlib")
    s = summarise(resolve(args.path), num_rollouts=args.rollouts)
    if args.out:
        write_outputs(args.out, {"summary.json": s}, ("realdata.png", lambda path: plot_realdata(s, path)))
    if args.json:
        emit_json(s)
        return 0
    pct = lambda x: f"{100 * x:.1f} %"  # noqa: E731
    print(f"{s['source']}: n = {s['n']}")
    print(
        f"p = 0: {pct(s['frac_p0'])}   p = 1: {pct(s['frac_p1'])}   "
        f"(silent at every G: {pct(s['frac_p0'] + s['frac_p1'])})"
    )
    print()
    sizes = list(s["silent_closed_form"])
    sub = s["silent_subsampled"]
    rows = [["closed form E[p^G + (1-p)^G]", *(pct(s["silent_closed_form"][g]) for g in sizes)]]
    rows.append([f"G of {s['num_rollouts']} logged rollouts", *(pct(sub[g]) if g in sub else "-" for g in sizes)])
    print(format_table(rows, ["silent fraction", *(f"G={g}" for g in sizes)]))
    print()
    ms = s["mass_share"]
    print(
        format_table(
            [
                [name, pct(ms[arm]["extreme"]), pct(ms[arm]["medium"])]
                for arm, name in (("dr_grpo", "Dr. GRPO, p(1-p)"), ("grpo", "GRPO, sqrt(p(1-p))"))
            ],
            ["gradient mass share", "extreme (p<0.1 or >0.9)", "medium (0.4-0.6)"],
        )
    )
    return 0
