"""``grpo-identity verify``: the main job — prove, audit, reproduce, render, report."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = (
    "prove every theorem, audit the presets and frameworks, reproduce the paper's numbers, "
    "render the notebooks, write one report"
)


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out",
        default="out/verify",
        help="output folder for report.json, report.html and the notebooks (default out/verify)",
    )
    p.add_argument(
        "--solve-rates",
        metavar="PATH",
        help="solve rates for claim 8 and the controlled run: bigmath (default: the shipped Big-Math histogram), "
        "a parquet/JSONL/CSV file with llama8b_solve_rate, a solve_rate,count histogram, or hf:NAME online",
    )
    p.add_argument(
        "--dapo-curve", metavar="CSV", help="digitised DAPO Fig. 3b curve (default: the copy shipped with the package)"
    )
    p.add_argument("--no-render", action="store_true", help="skip executing and rendering the notebooks")
    p.add_argument("--no-frameworks", action="store_true", help="skip the TRL and verl audits")
    p.add_argument("--max-examples", type=int, default=200, help="hypothesis examples per audit (default 200)")
    p.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    from grpo_identity.app import progress
    from grpo_identity.app.report import emit_json
    from grpo_identity.app.verify import DEFAULT_DAPO_CURVE, format_summary, verify
    from grpo_identity.checks.options import AuditOptions, OptionError

    try:  # the audits' own bounds, checked before any work
        AuditOptions(max_examples=args.max_examples)
    except OptionError as exc:
        raise ValueError(exc.worded({"max_examples": "--max-examples"})) from None
    if args.dapo_curve is not None and not Path(args.dapo_curve).is_file():
        raise ValueError(f"--dapo-curve: no such file: {args.dapo_curve}")  # only the default may be missing (skipped)
    if args.dapo_curve is not None:  # fitted before any work: a curve no model fits is a usage error, not a late one
        from grpo_identity.analysis.dapo_fit import fit

        try:
            fit(args.dapo_curve, n_bootstrap=0)
        except (OSError, ValueError) as exc:
            raise ValueError(f"--dapo-curve: {exc}") from None
    spec = (args.solve_rates or "").strip()
    if args.solve_rates is not None and (not spec or not spec.startswith("hf:") and spec != "bigmath"):
        from grpo_identity.analysis.solve_rates import load_solve_rates

        try:  # a file read before any work (an hf: dataset is fetched by the run)
            load_solve_rates(args.solve_rates)
        except (OSError, ValueError) as exc:
            raise ValueError(f"--solve-rates: {exc}") from None
    result = verify(
        args.out,
        solve_rates=args.solve_rates,
        dapo_curve=args.dapo_curve or DEFAULT_DAPO_CURVE,
        frameworks=not args.no_frameworks,
        render=not args.no_render,
        max_examples=args.max_examples,
        progress=progress.wanted(args),
    )
    if args.json:
        emit_json(
            {
                "all_ok": result["all_ok"],
                "seconds": result["seconds"],
                "counts": result["counts"],
                "items": result["items"],
                "report": result["report"],
            }
        )
    else:
        print(format_summary(result))
        print(f"report: {result['report']['html']}")
    return 0 if result["all_ok"] else 1
