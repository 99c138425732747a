"""How an audit's processes end (``checks.calls.processes``): a process, whatever it started (also in a session of
its own) and its group end together, and what was killed is reaped where it came to the caller, nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from grpo_identity.checks.calls.processes import descendants, end_tree, reap

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

#: a process that starts a worker in a session of its own, says the worker's pid, and waits
PARENT = """
import subprocess, sys, time
print(subprocess.Popen(["sleep", "30"], start_new_session=True).pid, flush=True)
time.sleep(30)
"""


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def test_end_tree_ends_a_process_its_detached_worker_and_its_group_and_names_what_it_killed():
    proc = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, start_new_session=True)
    worker = int(proc.stdout.readline())
    assert descendants(proc.pid) == [worker]
    killed = end_tree(proc.pid)
    proc.wait(10)
    proc.stdout.close()
    assert worker in killed and proc.returncode == -9
    for _ in range(100):  # the worker came to init (no subreaper here), which reaps it
        if _state(worker) in (None, "Z"):
            break
        time.sleep(0.05)
    assert _state(worker) in (None, "Z")


def test_reap_reaps_the_ended_children_it_is_given_and_no_other():
    given = subprocess.Popen(["sleep", "30"])
    other = subprocess.Popen(["sleep", "0"])
    kept = subprocess.Popen(["sleep", "0"])
    given.kill()
    other.wait()  # reaped by its owner already: reap must leave the pid alone, not fail
    for proc in (given, kept):  # ended, and left a zombie until reaped
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    reap([given.pid, other.pid, os.getpid() + 10**6], deadline=0.5)
    assert _state(given.pid) is None  # reaped
    assert _state(kept.pid) == "Z"  # not given: still its owner's to reap
    assert kept.wait(5) == 0
    given.wait(5)  # its owner learns it is gone
