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
  :func:`~grpo_identity.checks.calls.releases.current_env_name`) from the same ``--config`` files
  (:func:`input_digest`); functions and installed frameworks are always run again (nothing names their
  environment).
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
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from grpo_identity.app.grid import VERDICTS, Audit, Grid
from grpo_identity.foundation import UsageError, write_text_atomic

__all__ = [
    "run",
    "run_audit",
    "run_batch",
    "project_version",
    "input_digest",
    "verdict_of",
    "Outcome",
    "LocalPool",
    "RayPool",
    "read_rows",
    "rewrite",
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
    row: dict[str, Any] = {"target": target, "release": release or "", "inputs": None}
    try:
        row["inputs"] = input_digest(audit)  # the files as this audit is about to read them
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli(audit.argv())
        report = json.loads(out.getvalue()) if code in (0, 1) and out.getvalue().strip() else None
    except Exception as exc:  # whatever the audit raised or printed instead of its report: this row's error
        code, report = None, None
        err.write(f"grpo-identity audit: error: {type(exc).__name__}: {str(exc)[:300]}\n")
    row["exit_code"], row["wall_seconds"] = code, round(time.perf_counter() - t0, 1)
    if isinstance(report, dict) and "verdict" in report:
        row["report"] = report
        row["verdict"] = report["verdict"]
    else:
        lines = [ln for ln in err.getvalue().splitlines() if "error:" in ln] or err.getvalue().splitlines()
        row["error"] = (lines or [f"exit code {code}"])[-1]
        row["verdict"] = "error"
    env = ((row.get("report") or {}).get("target_info") or {}).get("environment") or {}
    row["resolution"] = Path(env["path"]).name if env.get("path") else None
    return row


def run_batch(audits: Sequence[tuple[str, str | None]]) -> Iterator[dict[str, Any]]:
    """The rows of a batch of audits, one by one as each finishes: a worker's task.  Each row names the worker
    and the project code that made it (a Ray node's may differ from the command's)."""
    project = project_version()
    for target, release in audits:
        yield {**run_audit(target, release), "worker": os.getpid(), "project": project}


# --- where the batches run -------------------------------------------------------------------------------------------
#: what a pool reports: ("row", batch id, row), ("done", batch id, None) or ("lost", batch id, why)
Event = tuple[str, int, Any]


def _local_worker(conn: Any, audits: list[tuple[str, str | None]]) -> None:
    """A local worker process: Ctrl-C is the parent's to handle; SIGTERM ends it, its warm children first."""
    from grpo_identity.checks.calls.child import close_warm_children

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    _end_with_parent()
    try:
        for row in run_batch(audits):
            conn.send(row)
    finally:
        close_warm_children()
        conn.close()


def _end_with_parent() -> None:
    """Linux: SIGTERM to this worker when the command that started it dies (a SIGKILL gives it no time to end its
    workers); elsewhere nothing (the worker ends at its next row, the pipe gone)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


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
        """Rows as they come; a batch's end once its worker has exited (its exit code tells done from lost)."""
        from multiprocessing.connection import wait

        out: list[Event] = []
        waiting = {(conn if conn is not None else proc.sentinel): b for b, (proc, conn) in self._running.items()}
        for ready in wait(list(waiting), timeout=timeout):
            batch = waiting[ready]
            proc, conn = self._running[batch]
            if conn is not None:
                try:
                    out.append(("row", batch, conn.recv()))
                    continue
                except (EOFError, OSError):  # the worker closed its end: it ends, or it is gone
                    conn.close()
                    self._running[batch] = (proc, None)
                    proc.join(timeout=0.1)
            if proc.exitcode is not None:
                del self._running[batch]
                out.append(("done", batch, None) if proc.exitcode == 0 else ("lost", batch, _exit_words(proc)))
        return out

    def close(self) -> None:
        """End every worker still running (SIGTERM, then SIGKILL after 5 s): their warm children end with them."""
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


def _exit_words(proc: Any) -> str:
    code = proc.exitcode
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"the worker was killed ({name})"
    return f"the worker exited with code {code}"


def _ray_batch(audits: list[tuple[str, str | None]], cwd: str) -> Iterator[dict[str, Any]]:
    """A Ray task: :func:`run_batch` in a Ray worker (a streaming generator, one row per audit), in the folder the
    command runs in where the node has it (a grid's ``config`` paths are read from there), as a local worker."""
    from grpo_identity.checks.calls.child import close_warm_children

    here = os.getcwd()
    if os.path.isdir(cwd):
        os.chdir(cwd)
    try:
        yield from run_batch(audits)
    finally:  # Ray keeps its worker for other tasks: not the frameworks' interpreters this batch warmed
        close_warm_children()
        os.chdir(here)


#: seconds a Ray head's address has to accept a connection before ``ray.init`` is tried (which retries a dead
#: address for minutes)
RAY_CONNECT_TIMEOUT = 10.0


def _answers(address: str) -> None:
    """A one-line UsageError where ``address`` (``host:port`` or ``ray://host:port``; ``auto`` is Ray's to find)
    takes no TCP connection within :data:`RAY_CONNECT_TIMEOUT` seconds."""
    import socket

    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if address.startswith("ray://") and not host:  # a client address without a port: Ray's default port
        return
    if not (host and port.isdigit() and 0 < int(port) < 65536):
        raise UsageError(f"--ray {address}: an address is host:port (a port from 1 to 65535), or auto")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=RAY_CONNECT_TIMEOUT):
            return
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise UsageError(
            f"--ray {address}: nothing answers there ({why}); start a head (ray start --head) and give its "
            "address, or leave --ray out to run on this machine"
        ) from None


class RayPool:
    """Batches as Ray tasks on the cluster at ``address`` (``auto``: the one this machine knows), one CPU each, at
    most ``jobs`` at once (default: the cluster's CPUs).  Each task runs the audits as this machine would: the
    worker's ``grpo-identity`` runs each release in its environment's interpreter (built on that node if missing).
    The variables ``GRPO_IDENTITY_*`` of this process go to the tasks."""

    def __init__(self, address: str, jobs: int | None) -> None:
        _answers(address)
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
                cause = (str(exc).strip().splitlines() or [""])[-1][:200]
                out.append(("lost", batch, f"Ray: {type(exc).__name__}: {cause}"))
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


def input_digest(audit: Audit) -> str | None:
    """A digest of the files the audit reads besides its target (:meth:`Audit.files`: its ``--config`` files, as
    this process finds them), None where it reads none: a row made from other file contents is run again."""
    files = audit.files()
    if not files:
        return None
    digest = hashlib.sha256()
    for name in files:
        digest.update(name.encode() + b"\0" + _content_digest(name) + b"\0")
    return digest.hexdigest()[:16]


def _content_digest(name: str) -> bytes:
    """The digest of a config file's bytes, or a word for one the audit refuses to read (missing, not a regular
    file, over :data:`~grpo_identity.checks.calls.spec.CONFIG_BYTES`): opened without blocking and checked on the
    open file, so that a FIFO put there cannot hold the run and a device cannot fill the memory."""
    import stat

    from grpo_identity.checks.calls.spec import CONFIG_BYTES

    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return f"unreadable: {type(exc).__name__}".encode()
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b"not a regular file"
        try:
            data = fh.read(CONFIG_BYTES + 1)
        except OSError as exc:
            return f"unreadable: {type(exc).__name__}".encode()
    return b"over the size limit" if len(data) > CONFIG_BYTES else hashlib.sha256(data).digest()


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
        if _is_row(row):
            rows[(row["target"], row["release"])] = row
    return rows


def _is_row(row: Any) -> bool:
    """Whether ``row`` has what a row has: target, release, wall time, and a report with a verdict or an error."""
    if not isinstance(row, dict) or not isinstance(row.get("target"), str) or not isinstance(row.get("release"), str):
        return False
    if not isinstance(row.get("wall_seconds"), (int, float)):
        return False
    if "report" in row:
        report = row["report"]
        return isinstance(report, dict) and report.get("verdict") in VERDICTS[:-1]  # a report's: not "error"
    return isinstance(row.get("error"), str)


def _reusable(row: dict[str, Any] | None, audit: Audit, project: str) -> bool:
    from grpo_identity.checks.calls.releases import current_env_name

    if row is None or "report" not in row or row.get("project") != project or not audit.release:
        return False
    if row.get("inputs") != input_digest(audit):
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
    missing: list[Audit] = field(default_factory=list)
    """The audits asked for (``only``) that have no row: not run, the run interrupted."""


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
    project, log = project_version(), out / ROWS
    history = read_rows(log)  # also under fresh: its wall times order the batches
    wanted = [a for a in grid.audits if not only or a.target.startswith(only)]
    kept = set() if fresh else {a.key for a in wanted if _reusable(history.get(a.key), a, project)}
    todo = [a for a in wanted if a.key not in kept]
    result = Outcome(rows=dict(history), kept=len(kept))  # a row not run again stays as it was
    loop = _Loop(pool, project, result, on_event, _batches(todo, history, pool.slots))
    loop.counts["kept"] = len(kept)
    on_event("start", {"audits": len(todo), "kept": len(kept), "workers": pool.slots}, loop.counts)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        with _terminate_as_interrupt(), open(log, "a", encoding="utf-8") as fh:
            if fh.tell() and not log.read_bytes().endswith(b"\n"):  # a line cut short: the next row on its own
                fh.write("\n")
            loop.run(fh)
    except KeyboardInterrupt:
        result.interrupted = True
    finally:
        with _shielded(raise_after=False) as caught:  # a second Ctrl-C while the workers end: still wrapped up
            pool.close()
        result.interrupted = result.interrupted or bool(caught)
        result.ran, result.retried = loop.counts["done"], loop.counts["retried"]
        result.seconds = round(time.perf_counter() - t0, 1)
        result.missing = [a for a in wanted if a.key not in result.rows]
    rewrite(log, grid, result.rows)
    return result


def _batches(todo: list[Audit], history: dict[tuple[str, str], dict[str, Any]], slots: int) -> deque[list[Audit]]:
    """The audits by environment, the longest batches first (by an earlier run's wall times); while there are fewer
    batches than workers, the longest is cut in two (one more import, two workers busy)."""
    by_env: dict[tuple[str, str], list[Audit]] = {}
    for a in todo:
        by_env.setdefault(a.environment, []).append(a)
    batches = list(by_env.values())
    while len(batches) < slots and any(len(b) > 1 for b in batches):
        longest = max(batches, key=lambda b: _expected_seconds(b, history))
        if len(longest) < 2:
            break
        batches.remove(longest)
        batches += [longest[: len(longest) // 2], longest[len(longest) // 2 :]]
    return deque(sorted(batches, key=lambda b: _expected_seconds(b, history), reverse=True))


def rewrite(log: Path, grid: Grid, rows: dict[tuple[str, str], dict[str, Any]]) -> None:
    """``audits.jsonl`` whole, in the grid's order, each row with the grid's expectation now; rows of audits the grid
    does not name (another grid's) kept after them."""
    by_key = {a.key: a for a in grid.audits}
    for key, row in rows.items():
        if key in by_key:
            row.update(expected=by_key[key].verdict, ok=by_key[key].passes(verdict_of(row)))
    ordered = [rows[a.key] for a in grid.audits if a.key in rows] + [r for k, r in rows.items() if k not in by_key]
    write_text_atomic(log, "".join(json.dumps(r) + "\n" for r in ordered), flag="--out")


class _Loop:
    """The one place rows are appended, audits retried and counted: batches started while the pool has room, each
    event of the pool handled as it comes."""

    def __init__(self, pool: Any, project: str, result: Outcome, on_event: Callable[..., None], queue: Any) -> None:
        self.pool, self.project, self.result, self.on_event, self.queue = pool, project, result, on_event, queue
        self.counts = {"audits": sum(map(len, queue)), "done": 0, "kept": 0, "retried": 0, "errors": 0}
        self.tries: dict[tuple[str, str], int] = {}
        self.running: dict[int, list[Audit]] = {}
        self.next_id = 0

    def run(self, fh: Any) -> None:
        while self.queue or self.running:
            while self.queue and len(self.running) < self.pool.slots:
                batch = self.queue.popleft()
                with _shielded():  # a worker is started and counted, or not started
                    self.running[self.next_id] = list(batch)
                    self.pool.start(self.next_id, batch)
                self.next_id += 1
            for kind, batch_id, payload in self.pool.events(timeout=1.0):
                self.handle(kind, batch_id, payload, fh)
            self.on_event("tick", {}, self.counts)

    def handle(self, kind: str, batch_id: int, payload: Any, fh: Any) -> None:
        left = self.running[batch_id]
        if kind == "row":
            audit = left.pop(0)
            self.tries[audit.key] = self.tries.get(audit.key, 0) + 1
            if payload.get("target") != audit.target:
                payload = _error_row(audit, "the worker answered for another audit")
            self.retry_or_record(audit, payload, fh) if "error" in payload else self.record(audit, payload, fh)
            return
        del self.running[batch_id]
        if left:  # lost, or ended with audits left: the one it was running once more, alone; the rest as a batch
            why = payload if kind == "lost" else "the worker ended before its batch did"
            audit, rest = left[0], left[1:]
            self.tries[audit.key] = self.tries.get(audit.key, 0) + 1
            self.retry_or_record(audit, _error_row(audit, f"{why} while running this audit"), fh)
            if rest:
                self.queue.append(rest)

    def record(self, audit: Audit, row: dict[str, Any], fh: Any) -> None:
        row = {"project": self.project, **row, "attempts": self.tries[audit.key], "expected": audit.verdict}
        if "inputs" not in row:  # a row no worker made (an error row of this loop's own)
            row["inputs"] = input_digest(audit)
        row["ok"] = audit.passes(verdict_of(row))
        self.result.rows[audit.key] = row
        fh.write(json.dumps(row) + "\n")
        fh.flush()
        self.counts["done"] += 1
        self.counts["errors"] += verdict_of(row) == "error"
        self.on_event("audit", row, self.counts)

    def retry_or_record(self, audit: Audit, row: dict[str, Any], fh: Any) -> None:
        if self.tries[audit.key] < ATTEMPTS:
            self.counts["retried"] += 1
            why = {"target": audit.target, "release": audit.release or "", "why": row["error"]}
            self.on_event("retry", why, self.counts)
            self.queue.append([audit])
        else:
            self.record(audit, row, fh)


@contextlib.contextmanager
def _shielded(raise_after: bool = True) -> Iterator[list[int]]:
    """Ctrl-C and SIGTERM held back while the block runs (a worker started and counted, the workers ended), then
    raised as KeyboardInterrupt (``raise_after``), unless SIGINT was ignored before; the signals caught are in the
    list the block gets.  Nothing is held back outside the main thread (signals go to it alone)."""
    caught: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    before = {sig: signal.signal(sig, lambda n, _f: caught.append(n)) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield caught
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    if caught and raise_after and not (set(caught) == {signal.SIGINT} and before[signal.SIGINT] is signal.SIG_IGN):
        raise KeyboardInterrupt


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (a CI job's timeout, ``kill``) ends the run as Ctrl-C does: the workers ended, the rows kept (main
    thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(*_: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def verdict_of(row: dict[str, Any]) -> str:
    """A row's verdict: its report's, or ``error`` where it has none."""
    return str((row.get("report") or {}).get("verdict") or "error") if "report" in row else "error"


def _error_row(audit: Audit, why: str) -> dict[str, Any]:
    return {"target": audit.target, "release": audit.release or "", "exit_code": None, "wall_seconds": 0.0,
            "error": why, "verdict": "error", "resolution": None}  # fmt: skip
