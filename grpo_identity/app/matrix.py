"""``grpo-identity matrix``: every audit of a grid (:mod:`grpo_identity.app.grid`), on this machine or on a Ray
cluster, into one JSONL of rows and a rendered table.

The audits that share an interpreter (a framework at one release) form a batch, run one after the other by one
worker, so the framework is imported once, in that worker's warm child.  Workers are processes of this machine
(:class:`LocalPool`, at most ``jobs`` at once) or Ray tasks (:class:`RayPool`, each batch a streaming task, in the
release's environment through its interpreter).  Both send back one row per audit as it finishes; the
:func:`run` loop is the one place that appends rows, retries and counts:

- an audit that gives no report (an error), and the audit a worker was running when it was lost (killed, out of
  memory, its node gone), is run once more, alone; a second failure is recorded as an error row, never lost;
- each row is appended to ``audits.jsonl`` as it comes (one line, flushed: Ctrl-C or a kill leaves whole lines),
  and the file is rewritten in the grid's order at the end;
- a row already in ``audits.jsonl`` is kept, not redone, where it has a report made by the same project code
  (:func:`project_version`) in the same release environment (the folder the current recipe resolves to,
  :func:`~grpo_identity.checks.calls.releases.current_env_name`); functions and installed frameworks are always
  run again (nothing names their environment).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from grpo_identity.app.grid import Audit, Grid
from grpo_identity.foundation import UsageError, write_text_atomic

__all__ = [
    "run",
    "run_audit",
    "run_batch",
    "project_version",
    "verdict_of",
    "Outcome",
    "LocalPool",
    "RayPool",
    "read_rows",
]

#: the files a run writes into its folder
ROWS, TABLE, PAGE, META = "audits.jsonl", "table.md", "table.html", "meta.json"
#: runs of one audit at most (the first and one retry)
ATTEMPTS = 2


# --- one audit ----------------------------------------------------------------------------------------------------
def run_audit(target: str, release: str | None) -> dict[str, Any]:
    """One audit through the CLI in this process (what a user's script or CI job runs): its row — the JSON report
    (or the error line), the exit code, the wall time, the verdict (``error`` where no report came) and the release
    environment it ran in."""
    from grpo_identity.app.cli import main as cli

    audit = Audit(target, release)
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli(audit.argv())
    row: dict[str, Any] = {"target": target, "release": release or "", "exit_code": code}
    row["wall_seconds"] = round(time.perf_counter() - t0, 1)
    if code in (0, 1) and out.getvalue().strip():
        row["report"] = json.loads(out.getvalue())
        row["verdict"] = row["report"].get("verdict")
    else:
        lines = [ln for ln in err.getvalue().splitlines() if "error:" in ln] or err.getvalue().splitlines()
        row["error"] = (lines or [f"exit code {code}"])[-1]
        row["verdict"] = "error"
    env = ((row.get("report") or {}).get("target_info") or {}).get("environment") or {}
    row["resolution"] = Path(env["path"]).name if env.get("path") else None
    return row


def run_batch(audits: Sequence[tuple[str, str | None]]) -> Iterator[dict[str, Any]]:
    """The rows of a batch of audits, one by one as each finishes: a worker's task."""
    for target, release in audits:
        yield {**run_audit(target, release), "worker": os.getpid()}


# --- where the batches run -------------------------------------------------------------------------------------------
#: what a pool reports: ("row", batch id, row), ("done", batch id, None) or ("lost", batch id, why)
Event = tuple[str, int, Any]


def _local_worker(conn: Any, audits: list[tuple[str, str | None]]) -> None:
    """A local worker process: Ctrl-C is the parent's to handle, SIGTERM ends it through its exit handlers (which end
    its warm children)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    for row in run_batch(audits):
        conn.send(row)
    conn.close()


class LocalPool:
    """Worker processes of this machine, at most ``jobs`` at once, each running one batch."""

    def __init__(self, jobs: int) -> None:
        import multiprocessing as mp

        self.slots = jobs
        self._ctx: Any = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        self._running: dict[int, tuple[Any, Any]] = {}  # batch id -> (process, connection)

    def start(self, batch: int, audits: list[Audit]) -> None:
        ours, theirs = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(target=_local_worker, args=(theirs, [(a.target, a.release) for a in audits]))
        proc.daemon = False  # a worker starts children (the audits' own)
        proc.start()
        theirs.close()
        self._running[batch] = (proc, ours)

    def events(self, timeout: float) -> list[Event]:
        from multiprocessing.connection import wait

        by_conn = {conn: batch for batch, (_, conn) in self._running.items()}
        out: list[Event] = []
        for ready in wait(list(by_conn), timeout=timeout):
            batch = by_conn[ready]
            conn = self._running[batch][1]
            proc = self._running[batch][0]
            try:
                out.append(("row", batch, conn.recv()))
            except (EOFError, OSError):  # the worker closed its end: finished, or gone
                proc.join(timeout=30)
                del self._running[batch]
                code = proc.exitcode
                out.append(("done", batch, None) if code == 0 else ("lost", batch, _exit_words(code)))
        return out

    def close(self) -> None:
        """End every worker still running (SIGTERM, then SIGKILL after 5 s)."""
        procs = [p for p, _ in self._running.values()]
        for p in procs:
            if p.is_alive():
                p.terminate()
        deadline = time.monotonic() + 5
        for p in procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        self._running.clear()


def _exit_words(code: int | None) -> str:
    if code is None:
        return "the worker did not exit"
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        return f"the worker was killed ({name})"
    return f"the worker exited with code {code}"


def _ray_batch(audits: list[tuple[str, str | None]], cwd: str) -> Iterator[dict[str, Any]]:
    """A Ray task: :func:`run_batch` in a Ray worker (a streaming generator, one row per audit), in the folder the
    command runs in where the node has it (a grid's ``config`` paths are read from there), as a local worker."""
    here = os.getcwd()
    if os.path.isdir(cwd):
        os.chdir(cwd)
    try:
        yield from run_batch(audits)
    finally:
        os.chdir(here)


class RayPool:
    """Batches as Ray tasks on the cluster at ``address`` (``auto``: the one this machine knows), one CPU each, at
    most ``jobs`` at once (default: the cluster's CPUs).  Each task runs the audits as this machine would: the
    worker's ``grpo-identity`` runs each release in its environment's interpreter (built on that node if missing).
    The variables ``GRPO_IDENTITY_*`` of this process go to the tasks."""

    def __init__(self, address: str, jobs: int | None) -> None:
        import ray

        env = {k: v for k, v in os.environ.items() if k.startswith("GRPO_IDENTITY_")}
        try:
            ray.init(
                address=address,
                log_to_driver=False,
                logging_level=logging.ERROR,
                runtime_env={"env_vars": env} if env else None,
            )
        except Exception as exc:  # no cluster there, or one that refuses us
            raise UsageError(
                f"--ray {address}: no Ray cluster could be joined ({type(exc).__name__}: {str(exc)[:200]}); start one "
                "(ray start --head) or leave --ray out to run on this machine"
            ) from None
        self._ray = ray
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.slots = max(1, jobs or cpus)
        self._task = ray.remote(num_cpus=1, max_retries=0)(_ray_batch)
        self._running: dict[int, Any] = {}  # batch id -> its ObjectRefGenerator

    def start(self, batch: int, audits: list[Audit]) -> None:
        self._running[batch] = self._task.remote([(a.target, a.release) for a in audits], os.getcwd())

    def events(self, timeout: float) -> list[Event]:
        ray = self._ray
        if not self._running:
            return []
        ready, _ = ray.wait(list(self._running.values()), num_returns=1, timeout=timeout)
        out: list[Event] = []
        for gen in ready:
            batch = next(b for b, g in self._running.items() if g is gen)
            try:
                out.append(("row", batch, ray.get(next(gen))))
            except StopIteration:
                del self._running[batch]
                out.append(("done", batch, None))
            except ray.exceptions.RayError as exc:  # the worker or its node is gone
                del self._running[batch]
                out.append(("lost", batch, f"Ray: {type(exc).__name__}"))
        return out

    def close(self) -> None:
        for gen in self._running.values():
            with contextlib.suppress(Exception):
                self._ray.cancel(gen, force=True)
        self._running.clear()
        with contextlib.suppress(Exception):
            self._ray.shutdown()


# --- the run ----------------------------------------------------------------------------------------------------------
def project_version() -> str:
    """This project's version and a digest of its code (every ``.py`` of its package folders): rows made by other
    code are run again."""
    from grpo_identity import __version__
    from grpo_identity.checks.calls.releases import package_map

    digest = hashlib.sha256()
    for folder in sorted(set(package_map().values())):
        for path in sorted(Path(folder).rglob("*.py")):
            digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return f"{__version__}+{digest.hexdigest()[:12]}"


def read_rows(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The rows of a JSONL file by (target, release), the last of a key winning; a line cut short (a run killed
    while writing it) or not a row is skipped."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    if not path.is_file():
        return rows
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("target"), str):
            rows[(row["target"], row.get("release") or "")] = row
    return rows


def _reusable(row: dict[str, Any] | None, audit: Audit, project: str) -> bool:
    from grpo_identity.checks.calls.releases import current_env_name

    if row is None or "report" not in row or row.get("project") != project or not audit.release:
        return False
    return row.get("resolution") is not None and row["resolution"] == current_env_name(*audit.environment)


def _expected_seconds(batch: list[Audit], old: dict[tuple[str, str], dict[str, Any]]) -> float:
    """How long a batch should take: its audits' wall times in the rows of an earlier run, 10 s for one never run
    (the longest batches start first, so that the last to finish is not a long one started late)."""
    return sum(float((old.get(a.key) or {}).get("wall_seconds") or 10.0) for a in batch)


@dataclass
class Outcome:
    """What a run did: rows by key (kept and new), how many were run, kept, retried, and whether Ctrl-C ended it."""

    rows: dict[tuple[str, str], dict[str, Any]]
    ran: int = 0
    kept: int = 0
    retried: int = 0
    interrupted: bool = False
    seconds: float = 0.0


def run(
    grid: Grid,
    out: Path,
    pool: Any,
    *,
    only: str | None = None,
    fresh: bool = False,
    on_event: Callable[[str, dict[str, Any], dict[str, int]], None] = lambda *a: None,
) -> Outcome:
    """Run the grid's audits (those whose target starts with ``only``) not already done into ``out``."""
    project = project_version()
    log = out / ROWS
    history = read_rows(log)  # also under fresh: its wall times order the batches
    old = {} if fresh else history
    wanted = [a for a in grid.audits if not only or a.target.startswith(only)]
    kept = [a for a in wanted if _reusable(old.get(a.key), a, project)]
    todo = [a for a in wanted if a not in kept]
    result = Outcome(rows=dict(history), kept=len(kept))  # a row not run again stays as it was
    batches: dict[tuple[str, str], list[Audit]] = {}
    for a in todo:
        batches.setdefault(a.environment, []).append(a)
    queue = deque(sorted(batches.values(), key=lambda b: _expected_seconds(b, history), reverse=True))  # longest first
    counts = {"audits": len(todo), "done": 0, "kept": len(kept), "retried": 0, "errors": 0}
    on_event("start", {"audits": len(todo), "kept": len(kept), "workers": pool.slots}, counts)
    tries: dict[tuple[str, str], int] = {}
    running: dict[int, list[Audit]] = {}
    next_id, t0 = 0, time.perf_counter()

    def record(audit: Audit, row: dict[str, Any], fh: Any) -> None:
        row = {**row, "attempts": tries[audit.key], "project": project, "expected": audit.verdict}
        row["ok"] = audit.passes(verdict_of(row))
        result.rows[audit.key] = row
        fh.write(json.dumps(row) + "\n")
        fh.flush()
        counts["done"] += 1
        counts["errors"] += row["verdict"] == "error"
        on_event("audit", row, counts)

    def retry_or_record(audit: Audit, row: dict[str, Any], fh: Any) -> None:
        if tries[audit.key] < ATTEMPTS:
            counts["retried"] += 1
            on_event("retry", {"target": audit.target, "release": audit.release or "", "why": row["error"]}, counts)
            queue.append([audit])
        else:
            record(audit, row, fh)

    out.mkdir(parents=True, exist_ok=True)
    try:
        with open(log, "a", encoding="utf-8") as fh:
            while queue or running:
                while queue and len(running) < pool.slots:
                    batch = queue.popleft()
                    running[next_id] = list(batch)
                    pool.start(next_id, batch)
                    next_id += 1
                for kind, batch_id, payload in pool.events(timeout=1.0):
                    left = running[batch_id]
                    if kind == "row":
                        audit = left.pop(0)
                        tries[audit.key] = tries.get(audit.key, 0) + 1
                        if payload.get("target") != audit.target:
                            payload = _error_row(audit, "the worker answered for another audit")
                        retry_or_record(audit, payload, fh) if "error" in payload else record(audit, payload, fh)
                    elif kind == "lost":
                        del running[batch_id]
                        if left:  # the audit it was running: once more, alone; the others as a batch
                            audit, rest = left[0], left[1:]
                            tries[audit.key] = tries.get(audit.key, 0) + 1
                            retry_or_record(audit, _error_row(audit, f"{payload} while running this audit"), fh)
                            if rest:
                                queue.append(rest)
                    else:
                        del running[batch_id]
                on_event("tick", {}, counts)
    except KeyboardInterrupt:
        result.interrupted = True
    finally:
        pool.close()
        result.ran, result.retried = counts["done"], counts["retried"]
        result.seconds = round(time.perf_counter() - t0, 1)
    order = [a.key for a in grid.audits]
    rows = [result.rows[k] for k in order if k in result.rows]
    write_text_atomic(log, "".join(json.dumps(r) + "\n" for r in rows), flag="--out")
    return result


def verdict_of(row: dict[str, Any]) -> str:
    """A row's verdict: its report's, or ``error`` where it has none."""
    return str((row.get("report") or {}).get("verdict") or "error") if "report" in row else "error"


def _error_row(audit: Audit, why: str) -> dict[str, Any]:
    return {"target": audit.target, "release": audit.release or "", "exit_code": None, "wall_seconds": 0.0,
            "error": why, "verdict": "error", "resolution": None}  # fmt: skip
