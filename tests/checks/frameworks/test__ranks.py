"""The thread ranks that verl's and AReaL's split steps run on: collectives meet real values."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from grpo_identity.checks.frameworks._ranks import ThreadRanks  # noqa: E402


def test_all_reduce_gives_every_rank_the_reduction_over_all_ranks() -> None:
    ranks = ThreadRanks(3)
    ops = torch.distributed.ReduceOp

    def step(rank: int) -> list[float]:
        out = []
        for op in (None, ops.SUM, ops.MAX, ops.MIN, ops.AVG):
            t = torch.tensor([float(rank + 1)])
            ranks.all_reduce(t, op=op)
            out.append(float(t))
        return out

    assert ranks.run(step) == [[6.0, 6.0, 3.0, 1.0, 2.0]] * 3


def test_all_gather_object_returns_objects_in_rank_order_and_ranks_know_themselves() -> None:
    ranks = ThreadRanks(4)

    def step(rank: int) -> list[object]:
        out: list[object] = []
        ranks.all_gather_object(out, (ranks.get_rank(), ranks.get_world_size()))
        return out

    assert ranks.run(step) == [[(0, 4), (1, 4), (2, 4), (3, 4)]] * 4


def test_a_rank_that_skips_a_collective_ends_the_step_with_an_error_not_a_hang() -> None:
    ranks = ThreadRanks(2)

    def step(rank: int) -> None:
        if rank == 0:
            ranks.all_reduce(torch.ones(1))

    with pytest.raises(RuntimeError, match="different collective calls"):
        ranks.run(step)


def test_a_rank_error_is_raised_in_the_caller_and_other_calls_are_refused_by_name() -> None:
    ranks = ThreadRanks(2)

    def step(rank: int) -> None:
        if rank == 1:
            raise ValueError("rank 1 broke")
        ranks.all_reduce(torch.ones(1))

    with pytest.raises(ValueError, match="rank 1 broke"):
        ranks.run(step)
    with pytest.raises(AttributeError, match="broadcast is not emulated"):
        ranks.broadcast(torch.ones(1), 0)
    with pytest.raises(NotImplementedError, match="PRODUCT"):
        ThreadRanks(1).run(lambda r: ThreadRanks(1).all_reduce(torch.ones(1), op=torch.distributed.ReduceOp.PRODUCT))


def test_patched_replaces_the_collectives_of_a_module_and_restores_them() -> None:
    import torch.distributed as dist

    before = dist.get_world_size
    ranks = ThreadRanks(2)
    with ranks.patched(dist):
        assert ranks.run(lambda rank: (dist.get_rank(), dist.get_world_size())) == [(0, 2), (1, 2)]
    assert dist.get_world_size is before
