"""The suite's own settings (tests/conftest.py): a test group runs on one worker under ``--dist loadgroup``, and the
slow tests are handed out before the others."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

GROUPED = """import os
import time

import pytest

pytestmark = pytest.mark.xdist_group("one")


@pytest.mark.parametrize("i", range(6))
def test_grouped(i):
    time.sleep(0.1)
    with open(f"ran_{i}", "w") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"])
    with open("order_" + os.environ["PYTEST_XDIST_WORKER"], "a") as f:
        f.write(f"grouped_{i} ")
"""
UNGROUPED = """import os
import time

import pytest


@pytest.mark.parametrize("i", range(6))
def test_free(i):
    with open("order_" + os.environ["PYTEST_XDIST_WORKER"], "a") as f:
        f.write(f"free_{i} ")
    time.sleep(0.1)
"""
#: collected last: a slow test the scheduler would hand out last, after every free test
SLOW = """import os

import pytest


@pytest.mark.slow
def test_slow():
    with open("order_" + os.environ["PYTEST_XDIST_WORKER"], "a") as f:
        f.write("slow ")
"""


@pytest.mark.slow  # three interpreters import the suite's conftest (torch): about 14 s
def test_an_xdist_group_runs_on_one_worker_and_a_slow_test_starts_before_the_others(tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_a_free.py").write_text(UNGROUPED)
    (tmp_path / "test_b_grouped.py").write_text(GROUPED)
    (tmp_path / "test_c_slow.py").write_text(SLOW)
    argv = [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    run = [*argv, "-o", "addopts=", "."]
    done = subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:]
    workers = {(tmp_path / f"ran_{i}").read_text() for i in range(6)}
    assert len(workers) == 1, workers
    # each worker's first unit is the group or a single test: the worker that ran the slow test ran it first
    order = [p.read_text().split() for p in sorted(tmp_path.glob("order_*"))]
    assert sorted(t for o in order for t in o if not t.startswith("grouped")) == [
        *(f"free_{i}" for i in range(6)),
        "slow",
    ], order
    assert [o[0] for o in order if "slow" in o] == ["slow"], order
