"""What the framework driver tests share: :func:`env_or_skip`, the cached environment of a
release, built once per test session; a release that cannot be built here (offline) skips every
test that needs it after one attempt."""

from __future__ import annotations

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


def without_seconds(d: Any) -> Any:
    """A report's JSON without its wall times (every ``seconds`` key, however deep)."""
    if isinstance(d, dict):
        return {k: without_seconds(v) for k, v in d.items() if k != "seconds"}
    if isinstance(d, list):
        return [without_seconds(v) for v in d]
    return d
