"""What the framework driver tests share: :func:`env_or_skip`, the cached environment of a
release, built once per test session; a release that cannot be built skips every test that needs
it when the package index does not answer (offline), and fails them when it does; and
:func:`warm_and_cold`, an audit in a warm child beside the same audit in a new one."""

from __future__ import annotations

from typing import Any

import pytest

from grpo_identity.checks.calls import releases as R
from grpo_identity.checks.frameworks import AdapterError

_ENVS: dict[tuple[str, str], Any] = {}


def env_or_skip(framework: str, release: str) -> Any:
    """The release's environment (built on first use), or a skip saying why it cannot be built."""
    key = (framework, release)
    if key not in _ENVS:
        try:
            _ENVS[key] = R.ensure(framework, release)
        except AdapterError as exc:
            # offline (the index does not answer): a skip; online, a release that does not build is a failure
            # (a missing requirement once turned every AReaL and OpenRLHF test into a silent skip)
            offline = R.upload_time(framework, release) is None
            _ENVS[key] = (offline, f"the environment of {framework} {release} cannot be built here: {exc}")
    if isinstance(_ENVS[key], tuple):
        offline, why = _ENVS[key]
        if offline:
            pytest.skip(f"{why} (the package index does not answer: offline?)")
        pytest.fail(why)
    return _ENVS[key]


def warm_and_cold(monkeypatch: Any, framework: str, configs: list[list[str]], **options: Any) -> tuple[Any, Any]:
    """The JSON (wall times left out) of ``configs[-1]`` audited in a warm child, after the other configurations
    (the worker's pool is used as it is: a child earlier tests left warm is reused, as the CLI reuses one), and
    of the same audit in a new child, started while the pool is set aside: the children other tests of this
    worker keep warm are neither used nor ended.  Fails unless the warm audit started no child."""
    from grpo_identity.checks import audit
    from grpo_identity.checks.calls import child

    started: list[Any] = []
    start = child.ChildProcess.__init__

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        started.append(self)
        start(self, *args, **kwargs)

    monkeypatch.setattr(child.ChildProcess, "__init__", counted)
    for sets in configs[:-1]:
        audit(framework, sets=sets, **options)
    before = len(started)
    warm = without_seconds(audit(framework, sets=configs[-1], **options).to_dict())
    assert len(started) == before, "the audit after the first did not reuse the warm child"
    monkeypatch.setattr(child, "_WARM", {})  # restored after the test: the worker's own pool
    monkeypatch.setattr(child, "_ORDER", [])
    try:
        cold = without_seconds(audit(framework, sets=configs[-1], **options).to_dict())
    finally:
        child.close_warm_children()  # this test's new child only
    assert len(started) == before + 1
    return warm, cold


def without_seconds(d: Any) -> Any:
    """A report's JSON without its wall times (every ``seconds`` key, however deep)."""
    if isinstance(d, dict):
        return {k: without_seconds(v) for k, v in d.items() if k != "seconds"}
    if isinstance(d, list):
        return [without_seconds(v) for v in d]
    return d


def planted(fn: Any, plant: str) -> Any:
    """The step target ``fn`` with a factor planted in its output in every layout alike, as a bug the split and
    unsplit layouts share would put it: 'ga_twice' divides each step's coefficients by its micro-batches per rank
    (the split layout's count, in both layouts), 'generation' divides each token by its generation batch's loss
    tokens instead of its optimizer step's.  The oracle must see it; split invariance cannot."""
    import numpy as np

    counts: dict[str, float] = {}

    def step(rewards: Any, G: int, lengths: Any = None, request: Any = None) -> Any:
        out = fn(rewards, G, lengths, request) if request is not None else fn(rewards, G, lengths)
        if request is None:
            return out
        out = dict(out)
        steps, mask = np.asarray(out["step"]), np.asarray(out["mask"], dtype=float)
        if plant == "ga_twice":
            if request["layout"] == "split":
                micro = np.asarray(out["micro_batch"]) + 1000 * np.asarray(out["rank"])
                counts["ga"] = len(np.unique(micro[steps == steps.max()])) / len(np.unique(out["rank"]))
            factor = np.full(steps.shape, 1.0 / counts.get("ga", 2.0))
        else:
            gen = np.asarray(out.get("generation", steps))
            tokens = mask.sum(1)
            step_tokens = np.array([tokens[steps == s].sum() for s in steps])
            gen_tokens = np.array([tokens[gen == g].sum() for g in gen])
            factor = step_tokens / np.maximum(gen_tokens, 1)
        out["coefficients"] = np.asarray(out["coefficients"]) * factor[:, None]
        return out

    step.info = getattr(fn, "info", None)
    return step
