"""The benchmarks' tests load each benchmark script (benchmarks/ is a folder of scripts, not a package) from its
file, as ``python benchmarks/NAME.py`` would run it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load(name: str) -> ModuleType:
    """benchmarks/``name``.py, imported as a module of that name."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None, name
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
