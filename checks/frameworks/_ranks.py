"""Data-parallel ranks for a driver's split step: the ``torch.distributed`` its framework's code meets.

A framework's loss reduces its token counts across ranks (``all_reduce``) and its buffers gather
objects (``all_gather_object``); that is what decides how a split step normalises, so those calls
must meet real values from every rank.

- :class:`ProcessRanks` runs ``fn(rank)`` in real processes, one per rank: each a fork of this one
  (so it holds the framework already imported and the step's state as built), a member of one
  ``torch.distributed`` gloo group on the loopback, whose collectives are torch's own.  ``fn``'s result
  comes back pickled.  Used by the verl driver.
- :class:`ThreadRanks` runs ``fn(rank)`` for every rank, each in its own thread, and its collectives meet
  at a barrier and hand every rank the reduction of all ranks' values, in rank order, as the collective
  would.  Any other ``torch.distributed`` call is refused by name rather than faked.  Used by the AReaL
  driver (OpenRLHF's ranks run one after another, so its driver replays recorded reductions instead).

>>> ranks = ThreadRanks(3)
>>> ranks.run(lambda rank: rank * 10)
[0, 10, 20]
"""

from __future__ import annotations

import contextlib
import datetime
import os
import pickle
import select
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from grpo_identity.checks.frameworks import patched_attributes

__all__ = ["ProcessRanks", "ThreadRanks", "die_with_parent"]

#: seconds a rank waits at a collective for the others before the step is abandoned
BARRIER_SECONDS = 120
#: seconds the other rank processes get to answer once one has failed
GRACE_SECONDS = 10


class ThreadRanks:
    """``torch.distributed`` for ``size`` ranks run as threads (see the module's docstring)."""

    #: the names :meth:`patched` replaces on the ``torch.distributed`` module
    NAMES = ("is_initialized", "get_rank", "get_world_size", "all_reduce", "all_gather_object")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"ranks must be at least 1, got {size}")
        self.size = size
        self._slots: list[Any] = [None] * size
        self._local = threading.local()
        self._meeting = threading.Condition()
        self._arrived = self._round = 0
        self._stopped = False  # a rank returned or raised: no collective can complete any more

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"torch.distributed.{name} is not emulated by the driver's ranks")

    @property
    def ReduceOp(self) -> Any:  # noqa: N802 (the attribute's name in torch.distributed)
        import torch.distributed as dist

        return dist.ReduceOp

    def is_initialized(self) -> bool:
        return True

    def get_rank(self, group: Any = None) -> int:
        return int(getattr(self._local, "rank", 0))

    def get_world_size(self, group: Any = None) -> int:
        return self.size

    def _meet(self) -> None:
        """Wait until every rank has arrived here; raise if a rank stopped (it will never arrive)."""
        with self._meeting:
            if self._stopped:
                raise RuntimeError("the ranks made different collective calls (a real run would hang)")
            current = self._round
            self._arrived += 1
            if self._arrived == self.size:
                self._arrived, self._round = 0, self._round + 1
                self._meeting.notify_all()
                return
            while current == self._round:
                if self._stopped:
                    raise RuntimeError("the ranks made different collective calls (a real run would hang)")
                if not self._meeting.wait(timeout=BARRIER_SECONDS):
                    raise TimeoutError(f"a rank waited {BARRIER_SECONDS} s at a collective for the others")

    def _stop(self) -> None:
        with self._meeting:
            self._stopped = True
            self._meeting.notify_all()

    def _exchange(self, value: Any) -> list[Any]:
        self._slots[self.get_rank()] = value
        self._meet()
        parts = list(self._slots)
        self._meet()
        return parts

    def all_reduce(self, tensor: Any, op: Any = None, group: Any = None, async_op: bool = False) -> None:
        """Every rank's ``tensor`` becomes the sum (or max, min, mean) over the ranks, in place."""
        import torch

        ops = self.ReduceOp
        reduce = {
            ops.SUM: lambda x: x.sum(0),
            ops.MAX: lambda x: x.amax(0),
            ops.MIN: lambda x: x.amin(0),
            ops.AVG: lambda x: x.mean(0),
        }
        key = ops.SUM if op is None else op
        if key not in reduce:
            raise NotImplementedError(f"all_reduce with {op}: the driver's ranks sum, take maxima, minima or means")
        stacked = torch.stack(self._exchange(tensor.detach().clone()))
        tensor.copy_(reduce[key](stacked))

    def all_gather_object(self, out: list[Any], obj: Any, group: Any = None) -> None:
        out[:] = self._exchange(obj)

    @contextlib.contextmanager
    def patched(self, module: Any) -> Iterator[None]:
        """``module`` (``torch.distributed`` itself, or a framework's module's ``dist``) answers with
        these ranks' :data:`NAMES` while the block runs; restored after it."""
        with patched_attributes([(module, name, getattr(self, name)) for name in self.NAMES]):
            yield

    def run(self, fn: Callable[[int], Any]) -> list[Any]:
        """``fn(rank)`` on every rank at once (one thread each), results in rank order; the first
        error of any rank is raised once every rank has stopped (a rank's error releases the others
        from the barrier)."""
        results: list[Any] = [None] * self.size
        errors: list[BaseException] = []
        self._arrived, self._stopped = 0, False

        def body(rank: int) -> None:
            self._local.rank = rank
            try:
                results[rank] = fn(rank)
            except BaseException as exc:  # noqa: BLE001 (re-raised in the caller's thread)
                errors.append(exc)
            self._stop()

        threads = [threading.Thread(target=body, args=(rank,), daemon=True) for rank in range(self.size)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        return results


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
                ok, value, stamp = _loaded(bytes(data.pop(fd)), rank)
                if ok:
                    results[rank] = value
                    continue
                errors.append((stamp, value))
                deadline = min(deadline, time.monotonic() + GRACE_SECONDS)
        if errors:
            raise min(errors, key=lambda e: e[0])[1]
        if data:
            raise TimeoutError(f"the {self.size} rank processes did not finish in {self.seconds:g} s")
        return results


def _rank_main(fn: Callable[[int], Any], rank: int, size: int, store: str, fd: int, seconds: float) -> None:
    """One rank's process: join the group, run ``fn(rank)``, write ``(True, result)`` or ``(False, error)``."""
    import torch
    import torch.distributed as dist

    die_with_parent()
    torch.set_num_threads(1)
    if sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    timeout = datetime.timedelta(seconds=seconds)
    reply: tuple[bool, Any, float]
    try:
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=size, timeout=timeout)
    except BaseException as exc:  # noqa: BLE001 (handed to the caller's process, with when it happened)
        reply = (False, exc, time.monotonic())
    else:
        try:
            reply = (True, fn(rank), 0.0)
        except BaseException as exc:  # noqa: BLE001 (as above; stamped before the group ends)
            reply = (False, exc, time.monotonic())
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
    try:
        payload = pickle.dumps(reply)
    except Exception as exc:  # noqa: BLE001 (an unpicklable result or error: its text instead)
        payload = pickle.dumps((False, RuntimeError(f"rank {rank}: {type(exc).__name__}: {exc}"), time.monotonic()))
    with os.fdopen(fd, "wb") as out:
        out.write(payload)


def _loaded(payload: bytes, rank: int) -> tuple[bool, Any, float]:
    """A rank's reply: (ok, result or error, when the error happened); an empty reply (the process ended
    first) and an error whose class does not unpickle (a required argument) as errors of their own."""
    if not payload:
        return False, RuntimeError(f"rank {rank}'s process ended before it answered"), time.monotonic()
    try:
        return pickle.loads(payload)
    except Exception as exc:  # noqa: BLE001
        text = f"rank {rank} answered what does not unpickle here: {type(exc).__name__}: {exc}"
        return False, RuntimeError(text), time.monotonic()


def _end(pid: int) -> None:
    """End a rank's process (if it still runs) and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
