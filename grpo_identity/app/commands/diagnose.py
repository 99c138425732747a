"""``grpo-identity diagnose LOGDIR``: the live diagnostics of a run, read back from its logs and
drawn into one HTML page (see :mod:`grpo_identity.integrations.diagnose` for what is read)."""

from __future__ import annotations

import argparse

HELP = "read the identity metrics a run logged (or per-group rewards it dumped) and draw them into one HTML page"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "logdir",
        metavar="LOGDIR",
        help="a run's folder (trainer_state.json, *.jsonl, searched recursively) or one such file",
    )
    p.add_argument(
        "--out", metavar="FILE", help="the page to write (default: LOGDIR/diagnose.html, or beside a LOGDIR file)"
    )
    p.add_argument(
        "--dial",
        metavar="PRESET",
        default="grpo",
        help="the method of per-group rewards records: grpo, dr_grpo, dapo, rloo, trl, verl, openrlhf (default grpo)",
    )
    p.add_argument(
        "--eps",
        type=float,
        default=0.1,
        metavar="EPS",
        help="recommended G for fidelity >= 1 - EPS, per-group records only (default 0.1)",
    )
    p.add_argument("--json", action="store_true", help="print the series as JSON (the page is written too)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from grpo_identity.dial import preset
    from grpo_identity.foundation import UsageError, emit_json, format_table
    from grpo_identity.integrations.diagnose import read_series, write_page

    if not 0 < args.eps < 1:
        raise UsageError(f"--eps must be in (0, 1), got {args.eps:g}")
    try:
        dial = preset(args.dial)
    except ValueError as exc:
        raise UsageError(f"--dial: {exc}") from None
    logdir = Path(args.logdir)
    if not logdir.exists():
        raise UsageError(f"LOGDIR {args.logdir} does not exist")
    out = (
        Path(args.out)
        if args.out
        else (logdir / "diagnose.html" if logdir.is_dir() else logdir.with_name("diagnose.html"))
    )
    from grpo_identity.app.report import check_out_dir

    check_out_dir(str(out.parent), flag="--out")  # before reading the logs: the page's folder must be writable
    series = read_series(logdir, dial=dial, eps=args.eps)
    write_page(series, out, title=f"grpo-identity diagnose {logdir.name}")
    if args.json:
        emit_json({"page": str(out), "series": {k: [list(p) for p in v] for k, v in series.items()}})
        return 0
    rows = [[k, len(v), v[-1][0], v[-1][1]] for k, v in sorted(series.items())]
    print(format_table(rows, ["metric", "steps", "last step", "last value"]))
    print(f"\npage: {out}")
    return 0
