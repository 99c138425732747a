"""The rank processes that verl's and AReaL's split steps run on: real processes, torch's own collectives."""

from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch")

from grpo_identity.checks.frameworks._ranks import ProcessRanks  # noqa: E402


def test_every_rank_is_a_process_of_its_own_in_one_group_whose_all_reduce_is_torchs() -> None:
    import torch.distributed as dist

    def step(rank: int) -> tuple[int, int, int, list[float]]:
        out = []
        for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN):
            t = torch.tensor([float(rank + 1)])
            dist.all_reduce(t, op=op)
            out.append(float(t))
        return os.getpid(), dist.get_rank(), dist.get_world_size(), out

    replies = ProcessRanks(3).run(step)
    assert [r[1:] for r in replies] == [(rank, 3, [6.0, 3.0, 1.0]) for rank in range(3)]
    pids = {r[0] for r in replies}
    assert len(pids) == 3 and os.getpid() not in pids
    assert not dist.is_initialized()  # the caller never joins the group


def test_all_gather_object_returns_objects_in_rank_order() -> None:
    import torch.distributed as dist

    def step(rank: int) -> list[object]:
        out: list[object] = [None] * dist.get_world_size()
        dist.all_gather_object(out, ("rank", rank))
        return out

    assert ProcessRanks(2).run(step) == [[("rank", 0), ("rank", 1)]] * 2


def test_the_rank_that_failed_first_is_the_error_raised_with_its_type_and_where_it_was_raised() -> None:
    import torch.distributed as dist

    def step(rank: int) -> None:
        if rank == 1:
            raise ValueError("rank 1 broke")
        dist.all_reduce(torch.ones(1))  # rank 0 loses its peer here: its own error comes later

    with pytest.raises(ValueError, match="rank 1 broke") as caught:
        ProcessRanks(2).run(step)
    assert caught.value.rank_frames[-1][0] == __file__


def test_a_rank_that_dies_or_hangs_is_an_error_and_no_rank_outlives_the_run() -> None:
    def dies(rank: int) -> int:
        if rank == 0:
            os._exit(3)
        return rank

    with pytest.raises(RuntimeError, match="rank 0's process ended before it answered"):
        ProcessRanks(2).run(dies)

    def hangs(rank: int) -> None:
        import time

        time.sleep(60)

    before = _children()
    with pytest.raises(TimeoutError, match="did not finish in 1 s"):
        ProcessRanks(2, seconds=1).run(hangs)
    assert _children() <= before


def _children() -> set[str]:
    """This process's children (Linux; elsewhere an empty set)."""
    path = f"/proc/{os.getpid()}/task/{os.getpid()}/children"
    if not os.path.exists(path):
        return set()
    with open(path) as fh:
        return set(fh.read().split())


def test_what_a_rank_imported_the_caller_imports_so_the_next_fork_starts_with_it(tmp_path, monkeypatch) -> None:
    (tmp_path / "grpo_identity_lazy_probe.py").write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "grpo_identity_lazy_probe", raising=False)

    def step(rank: int) -> int:
        import grpo_identity_lazy_probe

        return grpo_identity_lazy_probe.VALUE

    assert ProcessRanks(1).run(step) == [7]
    assert "grpo_identity_lazy_probe" in sys.modules


def test_a_result_that_does_not_pickle_is_an_error_naming_the_rank() -> None:
    with pytest.raises(RuntimeError, match="rank 0: "):
        ProcessRanks(1).run(lambda rank: lambda: None)
