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
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAPPED = {"proofs": "proofs", "checks": "checks", "trainer": "trainer"}


def link_tree(dest: Path) -> Path:
    """DEST/grpo_identity: links to grpo_identity/'s entries and to the mapped folders (the type check, the docs).

    DEST itself is a link to a folder made whole beside it, and is swapped in at once (``os.replace`` of a link):
    a reader sees the old tree or the new one, never none or half of one."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    fresh.chmod(0o755)
    pkg = fresh / "grpo_identity"
    pkg.mkdir()
    for entry in (ROOT / "grpo_identity").iterdir():
        if entry.name != "__pycache__":
            os.symlink(entry, pkg / entry.name)
    for name, folder in MAPPED.items():
        os.symlink(ROOT / folder, pkg / name)
    old = Path(os.path.realpath(dest)) if dest.is_symlink() else None
    if dest.is_dir() and not dest.is_symlink():  # a tree of the earlier layout: a folder in its place
        shutil.rmtree(dest)
    link = fresh.with_name(fresh.name + ".link")
    os.symlink(fresh.name, link)
    os.replace(link, dest)
    if old is not None and old != fresh and old.parent == dest.parent:
        shutil.rmtree(old, ignore_errors=True)
    return dest


def main() -> int:
    tree = link_tree(ROOT / "build" / "typecheck")
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "-p", "grpo_identity"]
    env = {**os.environ, "MYPYPATH": str(tree)}
    return subprocess.call(cmd, cwd=tree, env=env)


if __name__ == "__main__":
    sys.exit(main())
