"""TRL's configuration as the driver builds it (``checks.frameworks.trl_config``): the output folder GRPOConfig
requires, which TRL's trainer creates and the audit never uses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

#: a process that takes the folder twice, forks a process that takes it and exits through sys.exit (running the
#: handlers it inherited), then reports what it saw
_RUN = textwrap.dedent(
    """
    import json, os, sys
    from grpo_identity.checks.frameworks.trl_config import unused_output_dir
    first = unused_output_dir()
    pid = os.fork()
    if pid == 0:
        os.makedirs(unused_output_dir(), exist_ok=True)  # as TRL's trainer does in a rank
        sys.exit(0)
    os.waitpid(pid, 0)
    print(json.dumps({"first": first, "again": unused_output_dir(), "after_fork": os.path.isdir(first)}))
    """
)


def _run(temp: Path) -> dict:
    env = {**os.environ, "TMPDIR": str(temp)}
    res = subprocess.run([sys.executable, "-c", _RUN], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout)


def test_the_unused_output_folder_is_new_per_process_shared_by_its_forks_and_removed_when_it_exits(tmp_path):
    one, two = _run(tmp_path), _run(tmp_path)
    assert one["first"] == one["again"] and one["after_fork"]  # one folder per process; a fork leaves it in place
    assert one["first"] != two["first"]  # not a fixed name another process or user could have made first
    for seen in (one, two):
        folder = Path(seen["first"])
        assert folder.parent == tmp_path and folder.name.startswith("grpo-identity-trl-unused-")
    assert list(tmp_path.iterdir()) == []  # removed as each process exited
