"""``grpo-identity diagnose LOGDIR``: the live diagnostics of a run, read back from its logs and
drawn into one HTML page (see :mod:`grpo_identity.integrations.diagnose` for what is read)."""

from __future__ import annotations

import argparse

from grpo_identity.app.commands.closed_forms import MAX_G

#: the smallest --eps (a fidelity of 1 − 1e-6 already needs G in the hundreds of thousands)
MIN_EPS = 1e-6

HELP = (
    "read the identity metrics a run logged (or per-group rewards it dumped, or a plain TRL run's own metrics) "
    "and draw them into one HTML page"
)


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "logdir",
        metavar="LOGDIR",
        help="a run's folder (trainer_state.json, *.jsonl, searched recursively), a checkpoint-N folder or one file",
    )
    p.add_argument(
        "--G",
        "--group-size",
        dest="group_size",
        type=int,
        metavar="G",
        help="the group size (TRL's num_generations) of a plain TRL run, which trainer_state.json does not record",
    )
    p.add_argument(
        "--out",
        metavar="FILE",
        help="the page to write, an .html file (default: LOGDIR/diagnose.html, or beside a LOGDIR file)",
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
        help="recommended G for fidelity >= 1 - EPS, EPS in [1e-6, 1) (per-group records; the cost table of a TRL "
        "log) (default 0.1)",
    )
    p.add_argument("--json", action="store_true", help="print the series as JSON (the page is written too)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from grpo_identity.app.options import typed_option
    from grpo_identity.closed_forms import NoGroupSize
    from grpo_identity.dial import preset
    from grpo_identity.foundation import UsageError, emit_json, format_table
    from grpo_identity.integrations.diagnose import figures, read_run, write_page

    if args.group_size is not None and not 2 <= args.group_size <= MAX_G:
        flag = typed_option(("--G", "--group-size"), args._argv)
        raise UsageError(f"{flag} must be an integer from 2 to {MAX_G:,}, got {args.group_size}")
    if not MIN_EPS <= args.eps < 1:
        raise UsageError(f"--eps must be in [{MIN_EPS:g}, 1), got {args.eps:g}")
    try:
        dial = preset(args.dial)
    except ValueError as exc:
        raise UsageError(f"--dial: {exc}") from None
    if not args.logdir:
        raise UsageError("LOGDIR is empty: name a run's folder or a log file")
    if args.out is not None and not args.out.strip():
        raise UsageError("--out is empty: name the page to write (an .html file), or leave --out out")
    logdir = Path(args.logdir)
    if not logdir.exists():
        raise UsageError(f"LOGDIR {args.logdir} does not exist")
    if not (logdir.is_dir() or logdir.is_file()):
        raise UsageError(f"LOGDIR {args.logdir} is not a folder or a regular file")
    out = (
        Path(args.out)
        if args.out
        else (logdir / "diagnose.html" if logdir.is_dir() else logdir.with_name("diagnose.html"))
    )
    if out.suffix.lower() not in (".html", ".htm"):
        raise UsageError(f"--out {args.out} is not an .html file: the page is HTML (a log is never overwritten)")
    from grpo_identity.app.report import check_out_dir

    check_out_dir(str(out.parent), flag="--out")  # before reading the logs: the page's folder must be writable
    try:
        run_ = read_run(logdir, dial=dial, eps=args.eps, group_size=args.group_size)
    except NoGroupSize as exc:
        raise UsageError(f"--eps {args.eps:g}: {exc} (a larger --eps)") from None
    series = run_.series
    write_page(series, out, title=f"grpo-identity diagnose {logdir.name}", run=run_)
    if args.json:
        emit_json(
            {
                "page": str(out),
                "series": {k: [list(p) for p in v] for k, v in series.items()},
                "figures": {k: {"ylim": f["ylim"], "tolerance": f["tolerance"]} for k, f in figures(series).items()},
                "trl": run_.trl.as_dict() if run_.trl is not None else None,
                "ignored": run_.ignored,
                "notes": run_.notes,
            }
        )
        return 0
    rows = [[k, len(v), v[-1][0], v[-1][1]] for k, v in sorted(series.items())]
    print(format_table(rows, ["metric", "steps", "last step", "last value"]))
    if run_.trl is not None:
        _print_cost(run_.trl)
    for note in [*run_.notes, *run_.ignored]:
        print(f"note: {note}")
    print(f"\npage: {out}")
    return 0


def _print_cost(c: object) -> None:
    """The group-size cost table of a TRL log."""
    from grpo_identity.foundation import format_table
    from grpo_identity.integrations.trl_logs import Comparison

    assert isinstance(c, Comparison)
    pct = lambda x: "-" if x is None else f"{100 * x:.1f}%"
    rows = [[r.G, r.label, pct(r.silent_bound), pct(r.silent_model), f"{r.wasted_rollouts:.2f}"] for r in c.cost]
    rho = "-" if c.saturated_share is None else f"{100 * c.saturated_share:.0f}%"
    print(f"\nG = {c.group_size} ({c.group_size_source}); mean reward {c.mean_reward:.3f}; saturated prompts {rho}")
    if rows:  # none when the mean reward lies outside [0, 1] (a note says so)
        print(format_table(rows, ["G", "", "silent (bound)", "silent (model)", "rollouts/prompt silent"]))
    for note in c.notes:
        print(f"note: {note}")
