"""Data-parallel ranks for a driver's split step: the ``torch.distributed`` its framework's code meets.

A framework's loss reduces its token counts across ranks (``all_reduce``) and its buffers gather
objects (``all_gather_object``); that is what decides how a split step normalises, so those calls
must meet real values from every rank.

:class:`ProcessRanks` runs ``fn(rank)`` in real processes, one per rank: each a fork of this one (so it
holds the framework already imported and the step's state as built), a member of one
``torch.distributed`` gloo group on the loopback, whose collectives are torch's own.  ``fn``'s result
comes back pickled; a rank's error is raised in the caller, its type kept.  Used by every driver
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
import selectors
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable
from typing import Any

from grpo_identity.checks.calls import protocol as M
from grpo_identity.checks.calls.processes import become_subreaper, die_with_parent, end_descendants, end_trees
from grpo_identity.checks.frameworks import AdapterError

__all__ = [
    "ProcessRanks",
    "RankProcessError",
    "accelerate_rank",
    "world_size",
    "rank_index",
    "gather_objects",
]

#: seconds a rank waits at one collective for the others (torch.distributed's timeout)
COLLECTIVE_SECONDS = 120
#: seconds a whole run of the ranks may take, each rank's work included
RUN_SECONDS = 600
#: seconds the other rank processes get to answer once one has failed
GRACE_SECONDS = 10
#: seconds between looks at whether a rank that has not answered has exited
POLL_SECONDS = 0.2
#: the loopback's name, which gloo is told to use: the ranks meet on it and nowhere else
LOOPBACK = {"linux": "lo", "darwin": "lo0"}


class RankProcessError(AdapterError):
    """The rank processes themselves failed (a rank died, hung past the run's deadline, or answered what does
    not travel between processes): the driver's machinery, not the framework's answer."""


class ProcessRanks:
    """``size`` ranks as real processes in one gloo group (see the module's docstring).  ``seconds``: the
    whole run's deadline; ``collective_seconds``: how long a rank waits at one collective."""

    def __init__(self, size: int, seconds: float = RUN_SECONDS, collective_seconds: float = COLLECTIVE_SECONDS) -> None:
        if size < 1:
            raise ValueError(f"ranks must be at least 1, got {size}")
        if not hasattr(os, "fork"):
            raise RuntimeError("ranks as processes need os.fork (Linux or macOS)")
        self.size, self.seconds, self.collective_seconds = size, seconds, collective_seconds

    def run(self, fn: Callable[[int], Any]) -> list[Any]:
        """``fn(rank)`` in every rank's process, results in rank order.  The first rank to fail fails the
        run, its own exception raised here; the rank processes themselves failing (one died, or the run
        passed ``seconds``) is a :class:`RankProcessError`.  Every rank, and whatever it started, is ended
        on the way out."""
        with tempfile.TemporaryDirectory(prefix="grpo-identity-ranks-") as folder:
            store = os.path.join(folder, "group")
            started: dict[int, tuple[int, int]] = {}  # rank -> (pid, read end)
            try:
                for rank in range(self.size):
                    self._fork(fn, rank, store, started)
                replies = self._collect(started)
            finally:
                end_trees([pid for pid, _ in started.values()])
                for _, fd in started.values():
                    os.close(fd)
        _preload(done for done, _ in replies)
        return [value for _, value in replies]

    def _fork(self, fn: Callable[[int], Any], rank: int, store: str, started: dict[int, tuple[int, int]]) -> None:
        """Fork rank ``rank``; its pid and the read end of its pipe go into ``started`` before anything else
        can fail here."""
        read, write = os.pipe()
        parent = os.getpid()
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except BaseException:
            os.close(read)
            os.close(write)
            raise
        if pid == 0:  # the rank: never returns into the caller's code
            code = 1
            try:
                os.close(read)
                os.setpgid(0, 0)  # a group of its own: what it starts is ended with it
                become_subreaper()  # and what that starts, in a session of its own or not, stays below it
                die_with_parent(parent)
                _rank_main(fn, rank, self.size, store, write, self.collective_seconds)
                code = 0
            finally:
                with contextlib.suppress(BaseException):
                    sys.stdout.flush()
                    sys.stderr.flush()
                with contextlib.suppress(BaseException):
                    end_descendants()  # answered or failed: its workers end with it, reaped
                os._exit(code)
        started[rank] = (pid, read)
        os.close(write)
        with contextlib.suppress(OSError):  # as the rank does itself: whichever runs first
            os.setpgid(pid, pid)

    def _collect(self, started: dict[int, tuple[int, int]]) -> list[tuple[M.RankDone, Any]]:
        """Every rank's answer (one frame: a rank is done when its bytes have arrived, whatever it
        left running; a rank that exited is done with what it wrote, even where something it started still
        holds its pipe open).  Where ranks failed, the error of the one that failed first, a collective that
        lost its peer (:func:`_lost_peer`) counted last, after the others answered or :data:`GRACE_SECONDS`
        passed."""
        replies: list[tuple[M.RankDone, Any]] = [(M.RankDone(False), None)] * self.size
        errors: list[tuple[float, BaseException]] = []
        data = {fd: bytearray() for _, fd in started.values()}
        rank_of = {fd: rank for rank, (_, fd) in started.items()}
        pid_of = {fd: pid for pid, fd in started.values()}
        deadline = time.monotonic() + self.seconds
        with selectors.DefaultSelector() as selector:
            for fd in data:
                os.set_blocking(fd, False)
                selector.register(fd, selectors.EVENT_READ)
            while data and time.monotonic() < deadline:
                ready = {int(key.fd) for key, _ in selector.select(min(POLL_SECONDS, deadline - time.monotonic()))}
                for fd in list(data):
                    exited = fd not in ready and _exited(pid_of[fd])
                    if fd not in ready and not exited:
                        continue
                    ended = _drain(fd, data[fd])
                    if not (ended or exited or M.complete(data[fd])):
                        continue
                    selector.unregister(fd)
                    rank = rank_of[fd]
                    done, value = replies[rank] = _loaded(data.pop(fd), rank)
                    if not done.ok:
                        errors.append((done.stamp, value))
                        deadline = min(deadline, time.monotonic() + GRACE_SECONDS)
        if errors:
            raise min(errors, key=lambda e: (_lost_peer(e[1]), e[0]))[1]
        if data:
            late = sorted(rank_of[fd] for fd in data)
            raise RankProcessError(f"rank(s) {late} of {self.size} did not finish in {self.seconds:g} s")
        return replies


def _drain(fd: int, into: bytearray) -> bool:
    """Read what ``fd`` holds now into ``into``; whether its writers are all gone (end of file)."""
    while True:
        try:
            chunk = os.read(fd, 1 << 20)
        except BlockingIOError:
            return False
        if not chunk:
            return True
        into += chunk


def _exited(pid: int) -> bool:
    """Whether the rank ``pid`` has exited, without reaping it (its pid, and its group's id, stay taken until
    :func:`~grpo_identity.checks.calls.processes.end_trees`); False where the system cannot tell."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except (AttributeError, ChildProcessError, OSError):
        return False


def _rank_main(fn: Callable[[int], Any], rank: int, size: int, store: str, fd: int, seconds: float) -> None:
    """One rank's process: join the group, run ``fn(rank)``, write its answer
    (:class:`~grpo_identity.checks.calls.protocol.RankDone`, then the value: its result or error, pickled on its own,
    so that a value that does not pickle still leaves the answer)."""
    before = set(sys.modules)
    ok, stamp = False, 0.0
    value: Any = None
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        if sys.platform in LOOPBACK:
            os.environ["GLOO_SOCKET_IFNAME"] = LOOPBACK[sys.platform]  # the loopback, whatever the caller set
        timeout = datetime.timedelta(seconds=seconds)
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=size, timeout=timeout)
        try:
            # every rank connected before any starts, and none ends the group while another still uses it: a
            # rank whose work makes no collective call would otherwise close its connections under the others
            dist.barrier()
            value = fn(rank)
            dist.barrier()
            ok = True
        except BaseException:
            stamp = time.monotonic()  # before the group ends: the others' errors come after it
            raise
        finally:
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
    except BaseException as exc:  # noqa: BLE001 (handed to the caller's process, with when it happened)
        stamp = stamp or time.monotonic()
        # a rank's exit (SystemExit, an argument parser's) or interrupt is the rank's failure, never the caller's
        value = (
            exc if isinstance(exc, Exception) else RankProcessError(f"rank {rank} exited: {type(exc).__name__}: {exc}")
        )
        with contextlib.suppress(Exception):  # where it was raised: a pickled error has no traceback
            frames = [(f.filename, f.lineno, f.name) for f in traceback.extract_tb(exc.__traceback__)]
            setattr(exc, "rank_frames", frames)  # noqa: B010 (an attribute no exception class declares)
    try:
        body = pickle.dumps(value)
    except Exception as exc:  # noqa: BLE001 (an unpicklable result or error: its text instead, its time kept)
        what = "result" if ok else f"error ({type(value).__name__}: {value})"
        body = pickle.dumps(RankProcessError(f"rank {rank}'s {what} does not pickle: {type(exc).__name__}: {exc}"))
        ok, stamp = False, stamp or time.monotonic()
    done = M.RankDone(ok, stamp, tuple(name for name in sys.modules if name not in before))
    with os.fdopen(fd, "wb") as out:
        out.write(M.frame(done, body))


#: the words of gloo's errors when a peer went away
_TRANSPORT = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Read error",
    "Timed out waiting",
    "connectFullMesh",
)


def _lost_peer(error: BaseException) -> bool:
    """Whether ``error`` is a collective's transport losing another rank (gloo's "connection closed by peer" …):
    the consequence of that rank's failure, never the cause, however soon it was seen."""
    text = str(error)
    return isinstance(error, RuntimeError) and any(words in text for words in _TRANSPORT)


def _loaded(payload: bytearray, rank: int) -> tuple[M.RankDone, Any]:
    """A rank's answer and its value (result or error).  An answer cut short (the process ended first: stamped now,
    when its end was seen), one that does not unpickle, and a value that does not unpickle here (stamped as the rank
    stamped its error) are :class:`RankProcessError`."""
    try:
        framed = M.unframe(payload)
    except Exception as exc:  # noqa: BLE001
        return M.RankDone(False, time.monotonic()), RankProcessError(f"rank {rank}'s answer is unreadable: {exc}")
    if framed is None:
        return M.RankDone(False, time.monotonic()), RankProcessError(f"rank {rank}'s process ended before it answered")
    done, body = framed
    try:
        return done, pickle.loads(body)
    except Exception as exc:  # noqa: BLE001
        text = f"rank {rank} answered what does not unpickle here: {type(exc).__name__}: {exc}"
        return M.RankDone(False, done.stamp or time.monotonic(), done.modules), RankProcessError(text)


def _preload(answers: Iterable[M.RankDone]) -> None:
    """After a run every rank of which answered: import here what the ranks imported under packages this process
    already holds (the framework's lazy imports, ``torch._dynamo`` …), so that the next fork starts with them
    instead of importing them again.  New top-level packages are left to the ranks (their import may depend on
    the rank's environment); what fails to import is left too."""
    for done in answers:
        for name in done.modules:
            if name not in sys.modules and name.partition(".")[0] in sys.modules:
                with contextlib.suppress(Exception, SystemExit):
                    importlib.import_module(name)


# --- what a rank's framework code asks of its group ---------------------------------------------------------------
def accelerate_rank(rank: int, ranks: int) -> int:
    """This rank process as ``accelerate launch --multi_gpu`` (torchrun) starts one on CPUs: its environment
    (rank, world, no mixed precision, no dynamo, one thread), and accelerate's shared states (``PartialState``,
    ``AcceleratorState``, ``GradientState``) emptied as a fresh process has them (the fork copied the caller's);
    the group is the one the process is already in, which accelerate then uses."""
    from accelerate.state import AcceleratorState, GradientState

    os.environ.update(
        {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(ranks),
            "LOCAL_WORLD_SIZE": str(ranks),
            "MASTER_ADDR": "127.0.0.1",
            "ACCELERATE_MIXED_PRECISION": "no",
            "ACCELERATE_DYNAMO_BACKEND": "NO",
            "OMP_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
    )
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._shared_state.clear()
    return rank


def world_size() -> int:
    """The size of the process group this process is in (1 outside one)."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank_index() -> int:
    """This process's rank in its group (0 outside one)."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def gather_objects(obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order (``[obj]`` outside a group)."""
    import torch.distributed as dist

    if world_size() == 1:
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out
