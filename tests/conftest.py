"""Shared test settings: a derandomised hypothesis profile for CI, one torch thread, a warm-child pool of a test's
own (:func:`own_warm_pool`), the slow tests handed out first under xdist."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    print_blob=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))


try:  # keep torch on one thread: two stall for seconds on this kind of CPU
    import torch

    torch.set_num_threads(1)
except ImportError:  # pragma: no cover
    pass


@pytest.fixture
def own_warm_pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Warm children of this test alone: the worker's pool is set aside while it runs, so that ending every warm
    child (``close_warm_children``) spares the framework children later tests of this worker reuse; this test's
    own are ended after it, and the worker's pool is back."""
    from grpo_identity.checks.calls import child

    monkeypatch.setattr(child, "_WARM", {})
    monkeypatch.setattr(child, "_ORDER", [])
    yield
    child.close_warm_children()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker: the slow tests first, and the ``xdist_group`` ids fixed (:func:`_fix_group_ids`).

    Under ``--dist loadgroup`` the scheduler hands out the groups first (the most tests first), then single
    tests in collection order: a slow test collected late (one of a minute) would be the last thing a worker
    runs while the other has long finished.  Collected slow first, the small tests fill the end of both
    workers' runs."""
    if getattr(config, "workerinput", None) is None:
        return  # only a worker's collection is scheduled
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: collection order in each tier
    if getattr(config.option, "loadgroup", False):  # xdist sets ``loadgroup`` on a worker under --dist loadgroup
        _fix_group_ids(items)


def _fix_group_ids(items: list[pytest.Item]) -> None:
    """Keep ``xdist_group`` working (a stopgap until pytest-xdist #1386 is fixed, its PR #1388).

    Under ``--dist loadgroup`` pytest-xdist 3.8 names a test's group by appending ``@group`` to
    ``item._nodeid``, which pytest 9.2 no longer reads (it reads a structured id), so every group was
    split over the workers: a framework's tests each paid the framework's import, and a session
    fixture ran once per worker.  Where the id lacks the suffix, it is put where pytest reads it (the
    id's own ``parse``; a grouped parametrized test's summary line then shows one ``]`` too many).
    Remove this once the installed xdist keeps the groups itself; ``tests/test_conftest.py`` checks
    that a group runs on one worker, with or without it."""
    for item in items:
        groups = {
            str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")
        }
        suffix = "@" + "_".join(sorted(groups))
        structured = getattr(item, "_id", None)  # pytest ≥ 9.2
        if groups and not item.nodeid.endswith(suffix) and hasattr(structured, "parse"):
            item._id = type(structured).parse(item.nodeid + suffix)
