"""Progress for people, on stderr: shown only on a terminal and never under ``--json``.

A command asks :func:`wanted` once; a slow import (SymPy, torch) runs inside :func:`loading`, so
that a line shows at once instead of seconds of silence before the first progress bar.

>>> import argparse
>>> wanted(argparse.Namespace(json=True))
False
>>> with loading("prove: loading SymPy", show=False):
...     pass
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Any, Iterator

__all__ = ["wanted", "loading"]


def wanted(args: Any) -> bool:
    """Whether a command shows progress: stderr is a terminal and ``--json`` was not given."""
    return not getattr(args, "json", False) and sys.stderr.isatty()


@contextmanager
def loading(what: str, show: bool) -> Iterator[None]:
    """One status line ``what…`` on stderr while the block runs (a slow import), cleared after;
    nothing when ``show`` is False."""
    if not show:
        yield
        return
    from tqdm import tqdm

    line = tqdm(desc=what, bar_format="{desc}…", file=sys.stderr, leave=False)
    try:
        yield
    finally:
        line.close()
