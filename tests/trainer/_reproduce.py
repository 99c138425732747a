"""Regenerate a stored run (``results/NAME``) from the command its provenance recorded, and compare.

Used by the tests of each stored run's writer (``test_bernoulli.py``, ``test_lm_conditional.py``).
"""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path

#: the stored runs
RESULTS = Path(__file__).resolve().parents[2] / "results"


def numbers_differ(stored, fresh, *, rtol: float, atol: float, where: str = "", skip=("seconds",)) -> list[str]:
    """Where two JSON values differ beyond ``rtol`` / ``atol`` (keys in ``skip`` ignored)."""
    again = dict(rtol=rtol, atol=atol, skip=skip)
    if isinstance(stored, dict) and isinstance(fresh, dict):
        keys = (set(stored) | set(fresh)) - set(skip)
        pairs = ((k, stored.get(k), fresh.get(k)) for k in sorted(keys))
        return [d for k, a, b in pairs for d in numbers_differ(a, b, where=f"{where}.{k}", **again)]
    if isinstance(stored, list) and isinstance(fresh, list) and len(stored) == len(fresh):
        items = enumerate(zip(stored, fresh))
        return [d for i, (a, b) in items for d in numbers_differ(a, b, where=f"{where}[{i}]", **again)]
    numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (stored, fresh))
    if numbers and math.isclose(stored, fresh, rel_tol=rtol, abs_tol=atol):
        return []
    return [] if stored == fresh else [f"{where}: stored {stored!r}, now {fresh!r}"]


def rerun_recorded(stored: Path, out: Path) -> tuple[int, dict]:
    """Run the command ``stored/provenance.json`` recorded, writing to ``out`` instead; its exit code and record."""
    from grpo_identity.app.cli import main

    recorded = json.loads((stored / "provenance.json").read_text())
    argv = shlex.split(recorded["command"])
    assert argv[0] == "grpo-identity" and "--out" in argv
    argv[argv.index("--out") + 1] = str(out)  # the same command, written elsewhere
    return main(argv[1:]), recorded
