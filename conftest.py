"""pytest at the repository's root: the package's mapped folders under their one name.

pyproject maps the top-level folders ``checks/``, ``proofs/`` and ``trainer/`` to subpackages of
``grpo_identity``.  pytest's ``--doctest-modules`` imports a file by its folder
(``checks/auditor.py`` as ``checks.auditor``), which would load a second copy of the module beside
the package's own; the finder below hands it the package's module instead, unchanged, so each
docstring example runs once, against the code users import.  (Test settings: tests/conftest.py.)
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from typing import Any


class _MappedFolders(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``checks.x`` → ``grpo_identity.checks.x`` (likewise ``proofs``, ``trainer``).

    pyproject maps the top-level folders ``checks/``, ``proofs/`` and ``trainer/`` to subpackages
    of ``grpo_identity``.  pytest's ``--doctest-modules`` imports a file by its folder
    (``checks/auditor.py`` as ``checks.auditor``), which would load a second copy of the module
    beside the package's own; this finder hands it the package's module instead, unchanged."""

    FOLDERS = ("checks", "proofs", "trainer")

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name.split(".")[0] not in self.FOLDERS:
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec: Any) -> Any:
        module = importlib.import_module(f"grpo_identity.{spec.name}")
        self._own_spec = module.__spec__
        return module

    def exec_module(self, module: Any) -> None:
        module.__spec__ = self._own_spec  # the import machinery set the alias's spec: undo it


sys.meta_path.insert(0, _MappedFolders())
