"""``grpo-identity dapo-fit``: fit DAPO's all-correct curve with E_p[p^32] (PAPER claim 6)."""

from __future__ import annotations

import argparse

from grpo_identity.app import progress
from grpo_identity.app.options import integer

HELP = "fit DAPO's Fig. 3b all-correct fraction with E_p[p^32] (one timescale) and a two-parameter saturating curve"


#: the most bootstrap resamples (each refits both curves; 1,000 take seconds)
MAX_BOOTSTRAP = 10_000


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "csv",
        metavar="CSV",
        nargs="?",
        default=None,
        help="the digitised curve: step,allcorrect_fraction ('#' lines are comments); "
        "default: the copy shipped with the package",
    )
    p.add_argument(
        "--solve-rates",
        metavar="PATH",
        default=None,
        help="solve-rate distribution (bigmath, a file or hf:NAME); default: bigmath, the shipped Big-Math histogram",
    )
    p.add_argument(
        "--bootstrap",
        type=integer(0, MAX_BOOTSTRAP),
        default=1000,
        help=f"bootstrap resamples for the R^2 intervals, 0 (skip) to {MAX_BOOTSTRAP:,} (default 1000)",
    )
    p.add_argument(
        "--seed",
        type=integer(0, 2**32 - 1),
        default=0,
        help="bootstrap seed, an integer from 0 to 2**32 - 1 (default 0)",
    )
    p.add_argument("--out", metavar="DIR", help="write fit.json, dapo_fit.png and provenance.json into DIR")
    p.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:

    from grpo_identity import data
    from grpo_identity.analysis.dapo_fit import fit, plot_dapo_fit
    from grpo_identity.app.report import check_out_dir, emit_json, format_table, write_outputs
    from grpo_identity.foundation import require

    if args.out:  # before the work: the figure needs matplotlib, the folder must be writable
        check_out_dir(args.out)
        require("matplotlib")
    r = fit(
        args.csv or data.path(data.DAPO_CURVE),
        args.solve_rates,
        n_bootstrap=args.bootstrap,
        seed=args.seed,
        progress=progress.wanted(args),
    )
    if args.out:
        from grpo_identity import provenance

        record = provenance.record(provenance.command_line(args._argv))
        write_outputs(
            args.out, {"fit.json": r, provenance.FILE: record}, ("dapo_fit.png", lambda path: plot_dapo_fit(r, path))
        )
    if args.json:
        emit_json(r)
        return 0
    c, s, paper = r["competence"], r["saturating"], r["paper"]
    ci = lambda x: f"{x[0]:.3f}-{x[1]:.3f}" if x else "-"  # noqa: E731
    print(f"solve rates: {r['solve_rate_source']}")
    print(
        f"{r['n_points']} points; plateau {c['plateau']:.4f}; E[p^32] at the start {c['start']:.4f}; "
        f"T_end {c['t_end']:.3g}"
    )
    print()
    print(
        format_table(
            [
                [
                    "E[p^32], one timescale",
                    f"tau = {c['tau']:.4g}",
                    c["r2"],
                    ci(c["r2_bootstrap"]),
                    f"{paper['competence_r2']} ({ci(paper['competence_r2_bootstrap'])})",
                ],
                [
                    "a(1 - exp(-(s - s0)/tau))",
                    f"a = {s['a']:.4g}, tau = {s['tau']:.4g}",
                    s["r2"],
                    ci(s["r2_bootstrap"]),
                    paper["saturating_r2"],
                ],
            ],
            ["model", "parameters", "R^2", f"bootstrap 95 % ({r['n_bootstrap']})", "paper R^2"],
        )
    )
    return 0
