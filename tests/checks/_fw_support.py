"""Support for the framework tests that need a release environment.

- :func:`env_or_skip`: the cached environment of a release, built once per test session; a
  release that cannot be built (offline) skips every test that needs it after one attempt.
- :class:`Ahead`: CLI audits run ahead of the tests that read them, two at a time, each in its
  own process.  Each audit's work happens in its child interpreter, single-threaded, so two audits
  share a 2-core machine's cores; the slow tests then read the results instead of each waiting
  for its own framework import.  Results are what ``grpo-identity …`` prints.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from grpo_identity.checks import releases as R
from grpo_identity.checks.frameworks import AdapterError

_ENVS: dict[tuple[str, str], Any] = {}


def env_or_skip(framework: str, release: str) -> Any:
    """The release's environment (built on first use), or a skip saying why it cannot be built."""
    key = (framework, release)
    if key not in _ENVS:
        try:
            _ENVS[key] = R.ensure(framework, release)
        except AdapterError as exc:
            _ENVS[key] = f"the environment of {framework} {release} cannot be built here (offline?): {exc}"
    if isinstance(_ENVS[key], str):
        pytest.skip(_ENVS[key])
    return _ENVS[key]


def run_all(argvs: list[tuple[str, ...]], workers: int = 2) -> dict[tuple[str, ...], tuple[int, str, str]]:
    """{argv: (exit code, stdout, stderr)} of ``python -m grpo_identity *argv`` for each argv."""

    def one(argv: tuple[str, ...]) -> tuple[int, str, str]:
        proc = subprocess.run(
            [sys.executable, "-m", "grpo_identity", *argv], capture_output=True, text=True, timeout=900
        )
        return proc.returncode, proc.stdout, proc.stderr

    with ThreadPoolExecutor(workers) as pool:
        return dict(zip(argvs, pool.map(one, argvs)))


class Ahead:
    """A fixed list of CLI runs, all run (two at a time) the first time one of them is asked for."""

    def __init__(self, argvs: list[tuple[str, ...]]) -> None:
        self.argvs = list(argvs)
        self._runs: dict[tuple[str, ...], tuple[int, str, str]] = {}

    def get(self, argv: tuple[str, ...]) -> tuple[int, str, str]:
        """(exit code, stdout, stderr) of ``argv``, which must be one of the list."""
        if argv not in self.argvs:
            raise KeyError(f"{argv} is not among the runs listed ahead: add it to the list")
        if not self._runs:
            self._runs.update(run_all(self.argvs))
        return self._runs[argv]

    def json(self, argv: tuple[str, ...]) -> tuple[int, Any]:
        """(exit code, the JSON it printed)."""
        code, stdout, _ = self.get(argv)
        return code, json.loads(stdout)
