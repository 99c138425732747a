"""The suite's benchmark (benchmarks/bench_suite.py): each row gives the command's wall and CPU seconds, the CPU
counting the processes it waited for, and the report names the kind of CPU they ran on."""

from __future__ import annotations

import json
import sys

from _bench import load

B = load("bench_suite")
#: a command that spends about a second of CPU in a process of its own (the benchmark's child's child)
BUSY = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'sum(i * i for i in range(15_000_000))'])"


def test_a_rows_cpu_seconds_count_the_processes_the_command_waited_for(monkeypatch, capsys):
    monkeypatch.setattr(B, "commands", lambda tmp: {"prove": [sys.executable, "-c", BUSY]})
    assert B.main(["--only", "prove", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (row,) = out["rows"]
    assert row["exit_code"] == 0 and 0.3 < row["cpu_s"] <= 2 * row["seconds"] + 0.5
    assert out["cpu"] and out["python"]
    assert B.main(["--only", "prove"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("on ") and ", CPU " in text.splitlines()[1]
