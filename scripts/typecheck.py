"""Type-check the installed layout: ``grpo_identity`` with ``proofs/``, ``checks/`` and ``trainer/``
as its subpackages (pyproject's package-dir), through a tree of symbolic links in build/typecheck.

mypy reads source folders as top-level packages; the links give it the one namespace the package
installs as.  Run from the repository root: ``python scripts/typecheck.py`` (``make lint``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAPPED = {"proofs": "proofs", "checks": "checks", "trainer": "trainer"}


def link_tree(dest: Path) -> Path:
    """DEST/grpo_identity: links to grpo_identity/'s entries and to the mapped folders (the type check, the docs)."""
    pkg = dest / "grpo_identity"
    if dest.exists():
        shutil.rmtree(dest)
    pkg.mkdir(parents=True)
    for entry in (ROOT / "grpo_identity").iterdir():
        if entry.name != "__pycache__":
            os.symlink(entry, pkg / entry.name)
    for name, folder in MAPPED.items():
        os.symlink(ROOT / folder, pkg / name)
    return dest


def main() -> int:
    tree = link_tree(ROOT / "build" / "typecheck")
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "-p", "grpo_identity"]
    env = {**os.environ, "MYPYPATH": str(tree)}
    return subprocess.call(cmd, cwd=tree, env=env)


if __name__ == "__main__":
    sys.exit(main())
