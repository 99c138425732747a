"""CLI audits run ahead of the tests that read them, two at a time, each in its own process.

Each audit's work happens in its child interpreter, single-threaded, so two audits share a
2-core machine's cores; the slow framework tests then read the results instead of each waiting
for its own framework import.  Results are what ``grpo-identity audit … --json`` prints.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor


def run_all(argvs: list[tuple[str, ...]], workers: int = 2) -> dict[tuple[str, ...], tuple[int, str, str]]:
    """{argv: (exit code, stdout, stderr)} of ``python -m grpo_identity *argv`` for each argv."""

    def one(argv: tuple[str, ...]) -> tuple[int, str, str]:
        proc = subprocess.run([sys.executable, "-m", "grpo_identity", *argv], capture_output=True, text=True, timeout=900)
        return proc.returncode, proc.stdout, proc.stderr

    with ThreadPoolExecutor(workers) as pool:
        return dict(zip(argvs, pool.map(one, argvs)))
