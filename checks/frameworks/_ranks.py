"""Data-parallel ranks as threads of one process: the ``torch.distributed`` a driver's split step sees.

A framework's loss reduces its token counts across ranks (``all_reduce``) and its buffers gather
objects (``all_gather_object``); that is what decides how a split step normalises, so those calls
must meet real values from every rank.  :class:`ThreadRanks` runs ``fn(rank)`` for every rank, each
in its own thread, and its collectives meet at a barrier and hand every rank the reduction of all
ranks' values, in rank order, as the collective would.  Any other ``torch.distributed`` call is
refused by name rather than faked.  Used by the verl and AReaL drivers (OpenRLHF's ranks run one
after another, so its driver replays recorded reductions instead).

>>> ranks = ThreadRanks(3)
>>> ranks.run(lambda rank: rank * 10)
[0, 10, 20]
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from grpo_identity.checks.frameworks import patched_attributes

__all__ = ["ThreadRanks"]

#: seconds a rank waits at a collective for the others before the step is abandoned
BARRIER_SECONDS = 120


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
