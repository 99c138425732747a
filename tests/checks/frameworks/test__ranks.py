"""The rank processes every driver's split step runs on: real processes, torch's own collectives."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

torch = pytest.importorskip("torch")

from grpo_identity.checks.frameworks._ranks import ProcessRanks, RankProcessError  # noqa: E402


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


def test_all_gather_object_returns_objects_in_rank_order_and_results_of_any_size_come_back() -> None:
    import torch.distributed as dist

    def step(rank: int) -> tuple[list[object], bytes]:
        out: list[object] = [None] * dist.get_world_size()
        dist.all_gather_object(out, ("rank", rank))
        return out, bytes([rank]) * 3_000_000  # far past a pipe's buffer

    replies = ProcessRanks(2).run(step)
    assert [r[0] for r in replies] == [[("rank", 0), ("rank", 1)]] * 2
    assert [(len(r[1]), r[1][:1]) for r in replies] == [(3_000_000, b"\x00"), (3_000_000, b"\x01")]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the loopback's name is Linux's")
def test_the_ranks_meet_on_the_loopback_whatever_interface_the_caller_named(monkeypatch) -> None:
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "no-such-interface0")

    def step(rank: int) -> str:
        import torch.distributed as dist

        dist.barrier()
        return os.environ["GLOO_SOCKET_IFNAME"]

    assert ProcessRanks(2).run(step) == ["lo", "lo"]


class _TwoArguments(Exception):
    def __init__(self, a: str, b: str) -> None:
        super().__init__(f"{a} {b}")


@pytest.mark.parametrize("kind", ["plain", "unpicklable", "does not unpickle"])
def test_the_rank_that_failed_first_is_the_error_raised_whatever_its_error_is(kind) -> None:
    import torch.distributed as dist

    def step(rank: int) -> None:
        if rank == 1:
            if kind == "plain":
                raise ValueError("rank 1 broke")
            if kind == "unpicklable":
                raise ValueError("rank 1 broke", threading.Lock())
            raise _TwoArguments("rank 1", "broke")
        dist.all_reduce(torch.ones(1))  # rank 0 loses its peer here: its own error comes later

    with pytest.raises(Exception, match="rank 1") as caught:
        ProcessRanks(2).run(step)
    if kind == "plain":
        assert isinstance(caught.value, ValueError) and caught.value.rank_frames[-1][0] == __file__
    else:
        assert isinstance(caught.value, RankProcessError)  # not gloo's "connection closed" of rank 0


def test_a_rank_that_dies_or_hangs_is_a_rank_process_error_and_no_process_outlives_the_run() -> None:
    if not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children"):
        pytest.skip("no /proc children list here")

    def dies(rank: int) -> int:
        if rank == 0:
            os._exit(3)
        return rank

    before = _children()
    with pytest.raises(RankProcessError, match="rank 0's process ended before it answered"):
        ProcessRanks(2).run(dies)

    def hangs(rank: int) -> None:
        time.sleep(60)

    with pytest.raises(RankProcessError, match=r"rank\(s\) \[0, 1\] of 2 did not finish in 3 s"):
        ProcessRanks(2, seconds=3).run(hangs)
    assert _children() <= before


def test_a_rank_is_done_when_it_answered_and_what_it_started_ends_with_it() -> None:
    import subprocess

    def starts(rank: int) -> int:
        return subprocess.Popen(["sleep", "30"]).pid  # a worker the framework leaves running

    t0 = time.monotonic()
    (pid,) = ProcessRanks(1, seconds=20).run(starts)
    assert time.monotonic() - t0 < 15  # it did not wait for the worker's end (nor for the deadline)
    for _ in range(50):
        if not _alive(pid):
            break
        time.sleep(0.1)
    assert not _alive(pid)


def test_a_hung_ranks_worker_in_a_session_of_its_own_is_ended_with_it(tmp_path) -> None:
    import subprocess

    said = tmp_path / "worker"

    def hangs(rank: int) -> None:  # a worker outside the rank's process group, then no answer
        said.write_text(str(subprocess.Popen(["sleep", "30"], start_new_session=True).pid))
        time.sleep(60)

    with pytest.raises(RankProcessError, match="did not finish"):
        ProcessRanks(1, seconds=3).run(hangs)
    worker = int(said.read_text())
    for _ in range(50):
        if not _alive(worker):
            break
        time.sleep(0.1)
    assert not _alive(worker)


def test_a_rank_that_dies_leaving_a_worker_that_holds_its_pipe_is_seen_at_once() -> None:
    import subprocess

    def dies(rank: int) -> None:
        subprocess.Popen(["sleep", "30"], pass_fds=())  # a worker: here a fork that keeps the rank's pipe open
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        os._exit(9)

    t0 = time.monotonic()
    with pytest.raises(RankProcessError, match="rank 0's process ended before it answered"):
        ProcessRanks(1, seconds=20).run(dies)
    assert time.monotonic() - t0 < 10  # not the run's deadline


def test_a_ranks_exit_is_the_ranks_failure_never_the_callers() -> None:
    def exits(rank: int) -> None:
        raise SystemExit(3)  # an argument parser's way out

    with pytest.raises(RankProcessError, match="rank 0 exited: SystemExit: 3"):
        ProcessRanks(1).run(exits)


_SUBREAPER = """
import ctypes, os, subprocess, sys
import torch  # held before the ranks fork, as the audit's child holds it (else each of the six imports it)
from grpo_identity.checks.frameworks._ranks import ProcessRanks
ctypes.CDLL("libc.so.6", use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER, as the audit's child
for _ in range(3):
    ProcessRanks(2).run(lambda rank: subprocess.Popen(["sleep", "30"]).pid)
with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as fh:
    print(len(fh.read().split()))
"""


_SESSIONS = """
import ctypes, os, subprocess, sys, time
import torch
from grpo_identity.checks.frameworks._ranks import ProcessRanks, RankProcessError
ctypes.CDLL("libc.so.6", use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER, as the audit's child
sleeper = lambda: subprocess.Popen(["sleep", "30"], start_new_session=True).pid  # outside the rank's group
def hangs(rank):
    print(sleeper(), flush=True)
    time.sleep(60)
held = []
def answers(rank):
    worker = sleeper()
    held.append(subprocess.Popen(["true"], start_new_session=True))  # held: no Popen of the rank's waits for it
    os.waitid(os.P_PID, held[-1].pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped: the rank's zombie
    return worker
workers = ProcessRanks(2).run(answers)  # ranks that answer
try:
    ProcessRanks(1, seconds=3).run(hangs)  # a rank that does not
except RankProcessError:
    pass
def running(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
time.sleep(0.5)
with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as fh:
    print("running", sum(map(running, workers)), "children", len(fh.read().split()))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a subreaper is Linux's")
def test_workers_a_rank_started_in_sessions_of_their_own_end_with_it_and_leave_no_zombie() -> None:
    import subprocess

    out = subprocess.run([sys.executable, "-c", _SESSIONS], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    hung_worker, *_, last = out.stdout.split("\n")[:-1]
    assert last == "running 0 children 0", out.stdout  # none runs, none is a zombie of the caller
    assert not _alive(int(hung_worker))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a subreaper is Linux's")
def test_what_the_ranks_started_is_reaped_where_it_comes_to_the_caller() -> None:
    import subprocess

    out = subprocess.run([sys.executable, "-c", _SUBREAPER], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["0"]  # six sleepers killed and reaped, no zombie left


def test_a_ranks_lazy_imports_under_packages_the_caller_holds_are_imported_here_new_packages_are_not(
    tmp_path, monkeypatch
) -> None:
    package = tmp_path / "grpo_identity_lazy_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "lazy.py").write_text("VALUE = 7\n")
    (tmp_path / "grpo_identity_lazy_top.py").write_text("VALUE = 8\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    names = ("grpo_identity_lazy_pkg", "grpo_identity_lazy_pkg.lazy", "grpo_identity_lazy_top")
    try:
        import grpo_identity_lazy_pkg  # noqa: F401 (the caller holds the package, not its submodule)

        def step(rank: int) -> int:
            import grpo_identity_lazy_pkg.lazy
            import grpo_identity_lazy_top

            return grpo_identity_lazy_pkg.lazy.VALUE + grpo_identity_lazy_top.VALUE

        assert ProcessRanks(1).run(step) == [15]
        assert "grpo_identity_lazy_pkg.lazy" in sys.modules and "grpo_identity_lazy_top" not in sys.modules
    finally:
        for name in names:
            sys.modules.pop(name, None)


def test_a_result_that_does_not_pickle_is_an_error_naming_the_rank() -> None:
    with pytest.raises(RankProcessError, match="rank 0's result does not pickle"):
        ProcessRanks(1).run(lambda rank: lambda: None)


def _children() -> set[str]:
    """This process's children (Linux)."""
    with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as fh:
        return set(fh.read().split())


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie awaiting its reaper counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False
