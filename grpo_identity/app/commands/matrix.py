"""``grpo-identity matrix GRID.yaml``: every audit a grid file names, at every release, into one folder.

    grpo-identity matrix results/frameworks/grid.yaml --out results/frameworks   # the documentation's table
    grpo-identity matrix nightly.yaml --out audits --ray auto                     # on the Ray cluster you run on

The folder gets ``audits.jsonl`` (one row per audit, appended as each finishes), ``table.md``, ``table.html`` and
``meta.json`` (the command, the grid, the versions).  Running the same command again resumes: an audit already in
``audits.jsonl``, made by the same project code in the same release environment from the same config files, is
kept.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any

from grpo_identity.app import progress
from grpo_identity.foundation import EXIT_FAIL, EXIT_OK, UsageError

HELP = "run every audit of a grid file (targets × releases × --set settings) and write one table of their results"
EPILOG = (
    "exit codes: 0 every audit gave its expected verdict (without one: pass, or deviation unless the grid's "
    "deviation_fails); 1 an audit did not (listed, one line each); 2 bad input (the grid, an option, no Ray cluster); "
    "130 Ctrl-C (the rows so far are kept; the same command resumes)"
)
#: at most this many local workers; the runs meta.json remembers
MAX_JOBS, KEEP_RUNS = 64, 50


def configure(p: argparse.ArgumentParser) -> None:
    from grpo_identity.app.options import integer

    p.add_argument("grid", metavar="GRID", help="the grid file (YAML or JSON; docs/how-to/matrix.md)")
    p.add_argument("--out", metavar="DIR", help="the folder of the results (default: out/matrix/GRID's name)")
    p.add_argument(
        "--jobs",
        type=integer(1, MAX_JOBS),
        metavar="N",
        help=f"audits at once, 1 to {MAX_JOBS} (default: one per core here; with --ray, the cluster's CPUs)",
    )
    p.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run each release's audits as a Ray task on this cluster (auto: the one this machine is part of); "
        "needs pip install 'grpo-identity[ray]'",
    )
    p.add_argument("--only", metavar="PREFIX", help="run only the audits whose target starts with PREFIX")
    p.add_argument("--fresh", action="store_true", help="run every audit again, none kept from an earlier run")
    p.add_argument("--list", action="store_true", help="print the audits the grid expands to (JSON lines), run none")
    p.add_argument("--render-only", action="store_true", help="write the tables from audits.jsonl, run nothing")
    p.add_argument("--json", action="store_true", help="print one JSON line per event (start, audit, retry, summary)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from grpo_identity.app import grid as G
    from grpo_identity.app import matrix as M
    from grpo_identity.app.report import check_out_dir
    from grpo_identity.app.table import render, render_html
    from grpo_identity.foundation import check_writable, dumps, write_text_atomic
    from grpo_identity.provenance import command_line, record

    _check_options(args)
    grid = G.load(args.grid)
    if args.list:
        sys.stdout.write(G.dump(grid))
        return EXIT_OK
    if args.only is not None and not any(a.target.startswith(args.only) for a in grid.audits):
        raise UsageError(f"--only {args.only!r}: no audit of the grid starts with it")
    out = Path(args.out or Path("out") / "matrix" / Path(args.grid).stem)
    if out.exists() and not out.is_dir() or out.is_symlink():
        raise UsageError(f"--out {out} is not a folder: name a new folder or one of yours")
    for name in (M.ROWS, M.TABLE, M.PAGE, M.META):
        check_writable(out / name, "--out")
    check_out_dir(out, "--out")  # a file can be made there (a read-only mount refuses one whatever the modes say)
    outcome, workers = _outcome(args, grid, out)
    rows = [outcome.rows[a.key] for a in grid.audits if a.key in outcome.rows]
    missing = [a for a in grid.audits if a.key not in outcome.rows]
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / M.TABLE, render(rows))
    write_text_atomic(out / M.PAGE, render_html(rows, grid.title))
    failing = _failing(rows, grid, [] if outcome.interrupted else missing)
    summary = {
        "title": grid.title,
        "audits": len(grid.audits),
        "recorded": len(rows),
        "missing": len(missing),
        "ran": outcome.ran,
        "kept": outcome.kept,
        "retried": outcome.retried,
        "seconds": outcome.seconds,
        "verdicts": {v: sum(M.verdict_of(r) == v for r in rows) for v in G.VERDICTS},
        "failing": failing,
        "interrupted": outcome.interrupted,
        "out": str(out),
    }
    if not args.render_only:
        executor = {"executor": f"ray {args.ray}" if args.ray else "local", "workers": workers}
        this = {**record(command_line(args._argv)), **executor, "grid": args.grid, **summary}
        meta = {**this, "runs": [*_earlier_runs(out / M.META), {k: v for k, v in this.items() if k != "failing"}]}
        write_text_atomic(out / M.META, dumps(meta) + "\n")
    _print_summary(args, summary)
    if outcome.interrupted:
        raise KeyboardInterrupt
    return EXIT_FAIL if failing else EXIT_OK


def _outcome(args: argparse.Namespace, grid: Any, out: Any) -> tuple[Any, int]:
    """The grid's rows: read (``--render-only``, rewritten with the grid's expectations now) or run; the workers."""
    from grpo_identity.app import matrix as M

    if args.render_only:
        if not (out / M.ROWS).is_file():
            raise UsageError(f"--render-only: {out / M.ROWS} does not exist: run the grid first")
        outcome = M.Outcome(rows=M.read_rows(out / M.ROWS))
        M.rewrite(out / M.ROWS, grid, outcome.rows)
        return outcome, 0
    show = _Show(args)  # its lines go to stdout as it is now; anything else printed there while the grid runs
    try:  # goes to stderr: Ray's driver prints its raylet's messages to sys.stdout, from a thread of its own
        with contextlib.redirect_stdout(sys.stderr):
            pool = M.RayPool(args.ray, args.jobs) if args.ray else M.LocalPool(args.jobs or min(_cores(), MAX_JOBS))
            return M.run(grid, out, pool, only=args.only, fresh=args.fresh, on_event=show), pool.slots
    finally:
        show.finish()


def _cores() -> int:
    """The cores this process may run on (its affinity, a container's limit where it sets one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _check_options(args: argparse.Namespace) -> None:
    """Options that go together: --list and --render-only run nothing, so what only a run reads is refused."""
    run_only = (("--fresh", args.fresh), ("--ray", args.ray is not None), ("--jobs", args.jobs is not None))
    for mode, on in (("--list", args.list), ("--render-only", args.render_only)):
        given = [flag for flag, set_ in (*run_only, ("--only", args.only is not None)) if set_]
        if on and given:
            raise UsageError(f"{mode} runs nothing: leave out {given[0]}")
    if args.list and args.render_only:
        raise UsageError("--list and --render-only: one of them")
    if args.ray is not None and not args.ray.strip():
        raise UsageError("--ray: an address (host:port) or auto")


def _earlier_runs(path: Any) -> list[dict[str, Any]]:
    """The runs an earlier meta.json recorded (the last :data:`KEEP_RUNS`): the rows of a folder may come from
    several runs (``--only``, a resumed run), each named here with its command, commit and counts."""
    import json

    try:
        runs = json.loads(path.read_text()).get("runs")
    except (OSError, ValueError, AttributeError):
        return []
    return [r for r in runs if isinstance(r, dict)][-(KEEP_RUNS - 1) :] if isinstance(runs, list) else []


def _failing(rows: list[dict[str, Any]], grid: Any, unrun: list[Any]) -> list[dict[str, Any]]:
    """The audits that fail the run: a verdict other than expected, or asked for and not run (not interrupted)."""
    from grpo_identity.app.matrix import verdict_of

    by_key = {a.key: a for a in grid.audits}
    wrong = [(by_key[(r["target"], r["release"])], verdict_of(r)) for r in rows]
    wrong = [(a, v) for a, v in wrong if not a.passes(v)] + [(a, "not run") for a in unrun]
    return [{"target": a.target, "release": a.release or "", "verdict": v, "expected": a.verdict} for a, v in wrong]


def _print_summary(args: argparse.Namespace, summary: dict[str, Any]) -> None:
    from grpo_identity.foundation import dumps

    if args.json:
        print(dumps({"event": "summary", **summary}, indent=None), flush=True)
        return
    v = summary["verdicts"]
    counts = ", ".join(f"{n} {name}" for name, n in v.items() if n)
    print(
        f"{summary['recorded']} of {summary['audits']} audits recorded ({counts or 'none'}); ran {summary['ran']}, "
        f"kept {summary['kept']}, retried {summary['retried']}, {summary['seconds']:.0f} s; "
        f"results in {summary['out']}"
    )
    for f in summary["failing"]:
        wanted = f"expected {f['expected']}" if f["expected"] else "fails the run"
        print(f"  {f['verdict'].upper()} ({wanted}): {f['target']} @ {f['release'] or 'installed'}")
    if summary["missing"] and summary["interrupted"]:
        print(f"  {summary['missing']} audits have no row yet: the same command runs them")


class _Show:
    """Events for people (a line per audit on stdout, a progress line on a terminal) or machines (--json), written to
    stdout as it was when the events began (the run sends everything else printed there to stderr)."""

    def __init__(self, args: argparse.Namespace) -> None:
        import time

        self.json, self.bar, self.quiet, self.out = args.json, progress.wanted(args), False, sys.stdout
        self.t0, self.clock = time.monotonic(), time.monotonic

    def __call__(self, kind: str, data: dict[str, Any], counts: dict[str, int]) -> None:
        try:
            self._show(kind, data, counts)
        except BrokenPipeError:  # the reader went away (| head): the run goes on, its files are the record
            self.quiet = True

    def _show(self, kind: str, data: dict[str, Any], counts: dict[str, int]) -> None:
        from grpo_identity.foundation import dumps

        if self.quiet:
            return
        if self.json and kind != "tick":
            fields = {k: v for k, v in data.items() if k != "report"}
            print(dumps({"event": kind, **fields}, indent=None), file=self.out, flush=True)
        elif not self.json and kind == "audit":
            self._clear()
            where = data.get("release") or "installed"
            line = f"{data['wall_seconds']:6.1f} s  {data['target']} @ {where}: {data['verdict'].upper()}"
            print(line, file=self.out, flush=True)
        elif not self.json and kind == "retry":
            self._clear()
            why = f"  retrying {data['target']} @ {data['release'] or 'installed'}: {data['why']}"
            print(why, file=self.out, flush=True)
        if self.bar and kind in ("audit", "tick", "start"):
            self._line(counts)

    def _line(self, counts: dict[str, int]) -> None:
        done, total = counts["done"], counts["audits"]
        elapsed = self.clock() - self.t0
        eta = f", about {_duration(elapsed / done * (total - done))} left" if done else ""
        extra = "".join(f", {counts[k]} {k}" for k in ("retried", "errors") if counts[k])
        sys.stderr.write(f"\rmatrix: {done}/{total} audits{extra}, {_duration(elapsed)}{eta}\033[K")
        sys.stderr.flush()

    def _clear(self) -> None:
        if self.bar:
            sys.stderr.write("\r\033[K")

    def finish(self) -> None:
        self._clear()


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"
