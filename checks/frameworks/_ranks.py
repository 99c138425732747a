"""Data-parallel ranks for a driver's split step: the ``torch.distributed`` its framework's code meets.

A framework's loss reduces its token counts across ranks (``all_reduce``) and its buffers gather
objects (``all_gather_object``); that is what decides how a split step normalises, so those calls
must meet real values from every rank.

:class:`ProcessRanks` runs ``fn(rank)`` in real processes, one per rank: each a fork of this one (so it
holds the framework already imported and the step's state as built), a member of one
``torch.distributed`` gloo group on the loopback, whose collectives are torch's own.  ``fn``'s result
comes back pickled; a rank's error is raised in the caller, its type kept.  Used by all four drivers
(TRL's ranks also get the environment ``accelerate launch`` gives a rank).  A fork costs milliseconds;
what a rank imported the caller then imports too (the framework's lazy imports), so that the next fork
starts warm.

>>> ProcessRanks(3).run(lambda rank: rank * 10)
[0, 10, 20]
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import os
import pickle
import select
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

__all__ = ["ProcessRanks", "die_with_parent"]

#: seconds a rank waits at a collective for the others before the step is abandoned
BARRIER_SECONDS = 120
#: seconds the other rank processes get to answer once one has failed
GRACE_SECONDS = 10


def die_with_parent() -> None:
    """Linux: this process gets SIGKILL when its parent exits, so no rank outlives an audit that was
    stopped (elsewhere: nothing; the audit's process group is still ended as a whole)."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class ProcessRanks:
    """``size`` ranks as real processes in one gloo group (see the module's docstring)."""

    def __init__(self, size: int, seconds: float = BARRIER_SECONDS) -> None:
        if size < 1:
            raise ValueError(f"ranks must be at least 1, got {size}")
        if not hasattr(os, "fork"):
            raise RuntimeError("ranks as processes need os.fork (Linux or macOS)")
        self.size, self.seconds = size, seconds

    def run(self, fn: Callable[[int], Any]) -> list[Any]:
        """``fn(rank)`` in every rank's process, results in rank order.  The first rank to fail fails the
        run, its own exception raised here, and the other ranks (waiting at a collective it will never
        reach) are ended; so is every rank past ``seconds``."""
        with tempfile.TemporaryDirectory(prefix="grpo-identity-ranks-") as folder:
            store = os.path.join(folder, "group")
            started: dict[int, tuple[int, int]] = {}  # rank -> (pid, read end)
            try:
                for rank in range(self.size):
                    started[rank] = self._fork(fn, rank, store)
                return self._collect(started)
            finally:
                for pid, fd in started.values():
                    _end(pid)
                    os.close(fd)

    def _fork(self, fn: Callable[[int], Any], rank: int, store: str) -> tuple[int, int]:
        read, write = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the rank: never returns into the caller's code
            code = 1
            try:
                os.close(read)
                _rank_main(fn, rank, self.size, store, write, self.seconds)
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        return pid, read

    def _collect(self, started: dict[int, tuple[int, int]]) -> list[Any]:
        """Every rank's reply; where ranks failed, the error of the one that failed first (the others' are
        mostly their collectives losing it), after the others answered or :data:`GRACE_SECONDS` passed."""
        results: list[Any] = [None] * self.size
        errors: list[tuple[float, BaseException]] = []
        data = {fd: bytearray() for _, fd in started.values()}
        rank_of = {fd: rank for rank, (_, fd) in started.items()}
        deadline = time.monotonic() + self.seconds
        while data and time.monotonic() < deadline:
            ready, _, _ = select.select(list(data), [], [], max(0.0, deadline - time.monotonic()))
            for fd in ready:
                chunk = os.read(fd, 1 << 20)
                if chunk:
                    data[fd] += chunk
                    continue
                rank = rank_of[fd]
                reply = _loaded(bytes(data.pop(fd)), rank)
                _preload(reply.get("modules", ()))
                if reply["ok"]:
                    results[rank] = reply["value"]
                    continue
                errors.append((reply["stamp"], reply["value"]))
                deadline = min(deadline, time.monotonic() + GRACE_SECONDS)
        if errors:
            raise min(errors, key=lambda e: e[0])[1]
        if data:
            raise TimeoutError(f"the {self.size} rank processes did not finish in {self.seconds:g} s")
        return results


def _rank_main(fn: Callable[[int], Any], rank: int, size: int, store: str, fd: int, seconds: float) -> None:
    """One rank's process: join the group, run ``fn(rank)``, write its reply (:func:`_loaded`)."""
    import torch
    import torch.distributed as dist

    die_with_parent()
    torch.set_num_threads(1)
    if sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    timeout = datetime.timedelta(seconds=seconds)
    before = set(sys.modules)
    reply: dict[str, Any] = {"ok": False, "stamp": 0.0}
    try:
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=size, timeout=timeout)
    except BaseException as exc:  # noqa: BLE001 (handed to the caller's process, with when it happened)
        reply.update(value=exc, stamp=time.monotonic())
    else:
        try:
            reply.update(ok=True, value=fn(rank))
        except BaseException as exc:  # noqa: BLE001 (as above; stamped before the group ends)
            reply.update(value=exc, stamp=time.monotonic())
            with contextlib.suppress(Exception):  # where it was raised: a pickled error has no traceback
                frames = [(f.filename, f.lineno, f.name) for f in traceback.extract_tb(exc.__traceback__)]
                setattr(exc, "rank_frames", frames)  # noqa: B010 (an attribute no exception class declares)
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
    reply["modules"] = [name for name in sys.modules if name not in before]
    try:
        payload = pickle.dumps(reply)
    except Exception as exc:  # noqa: BLE001 (an unpicklable result or error: its text instead)
        error = RuntimeError(f"rank {rank}: {type(exc).__name__}: {exc}")
        payload = pickle.dumps({"ok": False, "value": error, "stamp": time.monotonic()})
    with os.fdopen(fd, "wb") as out:
        out.write(payload)


def _preload(modules: Any) -> None:
    """Import here what a rank's process imported (the framework's lazy imports, ``torch._dynamo`` …), so
    that the next fork starts with them instead of importing them again; what fails to import is left."""
    for name in modules:
        if name not in sys.modules:
            with contextlib.suppress(Exception):
                importlib.import_module(name)


def _loaded(payload: bytes, rank: int) -> dict[str, Any]:
    """A rank's reply (ok, value: its result or error, stamp: when the error happened, modules: what it
    imported); an empty reply (the process ended first) and an error whose class does not unpickle (a
    required argument) as errors of their own."""
    if not payload:
        return {"ok": False, "value": RuntimeError(f"rank {rank}'s process ended before it answered"), "stamp": 0.0}
    try:
        return pickle.loads(payload)
    except Exception as exc:  # noqa: BLE001
        text = f"rank {rank} answered what does not unpickle here: {type(exc).__name__}: {exc}"
        return {"ok": False, "value": RuntimeError(text), "stamp": time.monotonic()}


def _end(pid: int) -> None:
    """End a rank's process (if it still runs) and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
