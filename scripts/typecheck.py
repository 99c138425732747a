"""Type-check the installed layout: ``grpo_identity`` with ``proofs/``, ``checks/`` and ``trainer/``
as its subpackages (pyproject's package-dir), through a tree of symbolic links in build/typecheck.

mypy reads source folders as top-level packages; the links give it the one namespace the package
installs as.  Run from the repository root: ``python scripts/typecheck.py`` (``make lint``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAPPED = {"proofs": "proofs", "checks": "checks", "trainer": "trainer"}


def link_tree(dest: Path) -> Path:
    """DEST/grpo_identity: links to grpo_identity/'s entries and to the mapped folders (the type check, the docs)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))  # made whole, then swapped in
    pkg = fresh / "grpo_identity"
    pkg.mkdir()
    for entry in (ROOT / "grpo_identity").iterdir():
        if entry.name != "__pycache__":
            os.symlink(entry, pkg / entry.name)
    for name, folder in MAPPED.items():
        os.symlink(ROOT / folder, pkg / name)
    old = dest.with_name(f"{fresh.name}-old")
    with contextlib.suppress(FileNotFoundError):
        os.rename(dest, old)  # a reader sees the old tree or the new one, never one half removed
    try:
        os.rename(fresh, dest)
    except OSError:  # another process swapped its own tree in first: that one stands
        shutil.rmtree(fresh, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)
    return dest


def main() -> int:
    tree = link_tree(ROOT / "build" / "typecheck")
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "-p", "grpo_identity"]
    env = {**os.environ, "MYPYPATH": str(tree)}
    return subprocess.call(cmd, cwd=tree, env=env)


if __name__ == "__main__":
    sys.exit(main())
