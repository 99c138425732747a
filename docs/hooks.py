"""mkdocs hooks of the documentation site (``mkdocs.yml``: ``hooks``), run by ``make docs``.

- at import (mkdocs loads this module with its configuration), :func:`ensure_api_tree` lays the package
  out as it is installed (``checks/``, ``proofs/`` and ``trainer/`` under ``grpo_identity/``, as
  pyproject's ``package-dir`` maps them) in ``build/docs-api`` as symbolic links, so that mkdocstrings
  (griffe) reads the docstrings statically from the sources;
- ``on_files``: adds the generated reference pages (:mod:`grpo_identity.app.docs`), never committed;
- ``on_post_build``: copies the MathJax 2.7 the project already depends on
  (``jupyter-server-mathjax``, :func:`grpo_identity.app.render.mathjax_source`) into the site, so
  the math renders offline.

:class:`FencedDoctests` is a griffe extension (mkdocs.yml: the python handler's ``extensions``): it
fences the docstrings' ``>>>`` examples as code, which Markdown would otherwise read as quotes, and
writes their Sphinx roles (``:class:`…```) as inline code.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import griffe
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
#: the installed layout griffe reads (the ``paths`` of the python handler in mkdocs.yml)
API_TREE = ROOT / "build" / "docs-api"


#: a doctest: its ``>>>`` line, then its continuation and output lines up to a blank line
_DOCTEST = re.compile(r"^([ \t]*)>>> .*(?:\n\1(?!\s*$).*)*", re.M)


def fence_doctests(text: str) -> str:
    """``text`` with every doctest block fenced as a ``pycon`` code block (already fenced ones left alone)."""
    if "```" in text:
        return text
    return _DOCTEST.sub(lambda m: f"{m[1]}```pycon\n{m[0]}\n{m[1]}```", text)


#: a Sphinx role the docstrings use (``:class:`~grpo_identity.dial.Dial```), which Markdown does not know
_ROLE = re.compile(r":(?:py:)?(?:class|func|mod|data|attr|meth|exc|obj):`(~?)([^`]+)`")


def plain_roles(text: str) -> str:
    """``text`` with Sphinx roles as inline code: ``:class:`~a.B``` → ```B```, ``:func:`a.f``` → ```a.f```."""
    return _ROLE.sub(lambda m: f"`{m[2].rsplit('.', 1)[-1] if m[1] else m[2]}`", text)


class FencedDoctests(griffe.Extension):
    """Fence the doctest examples of every docstring and write its Sphinx roles as code, before it is parsed."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain_roles(fence_doctests(obj.docstring.value))


def _typecheck() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("typecheck", ROOT / "scripts" / "typecheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ensure_api_tree() -> None:
    """Lay out the package as it installs (one tree of links, made as for the type check), unless it is already.

    Made when mkdocs loads this module, before any plugin reads its configuration: mkdocstrings' handler takes its
    ``paths`` before a hook's ``on_config`` runs, and a tree missing then (a fresh clone's first build) made it fall
    back to the checkout, where ``grpo_identity.checks`` does not exist.  A tree that is already right is left
    alone, never removed and remade while something may be reading it."""
    typecheck = _typecheck()
    source = ROOT / "grpo_identity"
    want = {e.name: e.resolve() for e in source.iterdir() if e.name != "__pycache__"}
    want.update({name: (ROOT / folder).resolve() for name, folder in typecheck.MAPPED.items()})
    package = API_TREE / "grpo_identity"
    try:
        have = {e.name: e.resolve() for e in package.iterdir()} if package.is_dir() else {}
    except OSError:  # a link removed while it was read (another build laying the tree out): lay it out again
        have = {}
    if have != want:
        typecheck.link_tree(API_TREE)


ensure_api_tree()


def on_files(files: Files, config: Any) -> Files:
    from grpo_identity.app.docs import generated_pages

    for path, text in generated_pages().items():
        if files.get_file_from_path(path) is not None:
            raise PluginError(f"docs/{path} is generated when the site is built: remove the file from docs/")
        files.append(File.generated(config, path, content=text))
    return files


def on_post_build(config: Any) -> None:
    from grpo_identity.app.render import MATHJAX_DIR, mathjax_source

    try:
        source = mathjax_source()
    except ValueError as exc:
        raise PluginError(str(exc)) from None
    # the pages use the HTML-CSS output with its STIX web fonts: neither SVG output nor translations
    skip = shutil.ignore_patterns("SVG", "localization", "__pycache__", "*.py", "ImageFonts")
    shutil.copytree(source, Path(config["site_dir"]) / MATHJAX_DIR, dirs_exist_ok=True, ignore=skip)
