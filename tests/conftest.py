"""Shared test settings: a derandomised hypothesis profile for CI, one torch thread."""

from __future__ import annotations

import os
from pathlib import Path

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

#: the repository root, and the shared data folder beside it (present in CI; absent elsewhere)
ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"

try:  # keep torch on one thread: two stall for seconds on this kind of CPU
    import torch

    torch.set_num_threads(1)
except ImportError:  # pragma: no cover
    pass
