"""Output helpers of the application: the ``--out`` folder, checked before the work, and a
command's JSON files and figure in it.

Tables and JSON themselves live in :mod:`grpo_identity.foundation` (every layer uses them).

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as tmp:
...     check_out_dir(f"{tmp}/new/run") == Path(f"{tmp}/new/run"), Path(f"{tmp}/new").exists()
(True, False)
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

from grpo_identity.foundation import atomic_path, dumps, emit_json, format_table, write_text_atomic

__all__ = ["dumps", "emit_json", "format_table", "check_out_dir", "output_folder", "write_outputs"]


def check_out_dir(out: str | Path, flag: str = "--out") -> Path:
    """``out`` as a folder that can be written, checked without creating anything: the folder,
    or the nearest folder above it that exists, must be a folder that accepts a file (tried with
    a temporary file, removed at once).  A one-line ValueError naming ``flag`` otherwise (an empty ``out`` too: it
    is not taken for the working folder)."""
    if not str(out).strip():
        raise ValueError(f"{flag} is empty: name a folder")
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{flag} {out} is a file, not a folder")
    base = folder
    while not base.exists():  # the folder that the missing ones would be created in
        if base.parent == base:
            break
        base = base.parent
    what = "cannot write in the folder" if base == folder else "cannot create the folder"
    if not base.is_dir():
        raise ValueError(f"{flag} {out}: {what} ({base} is not a folder)")
    try:
        fd, probe = tempfile.mkstemp(prefix=".grpo-identity-", dir=base)
    except OSError as exc:
        where = "" if base == folder else f" in {base}"
        raise ValueError(f"{flag} {out}: {what} ({exc.strerror or exc}{where})") from None
    os.close(fd)
    os.unlink(probe)
    return folder


def output_folder(out: str | Path, flag: str = "--out") -> Path:
    """``out`` as a folder, created if missing, after :func:`check_out_dir`."""
    folder = check_out_dir(out, flag)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{flag} {out}: cannot create the folder ({exc.strerror or exc})") from None
    return folder


def write_outputs(
    out: str | Path, json_files: Mapping[str, Any], figure: tuple[str, Callable[[str], None]] | None = None
) -> Path:
    """Create the folder ``out``, write each ``{name: object}`` as JSON and draw ``figure``
    (``(file name, draw(path))``) into it.  Check ``out`` with :func:`check_out_dir` (and import
    what ``draw`` needs) before the work; this only reports what fails after."""
    folder = output_folder(out)
    for name, obj in json_files.items():
        write_text_atomic(folder / name, dumps(obj) + "\n")
    if figure is not None:
        name, draw = figure
        with atomic_path(folder / name) as tmp:
            draw(tmp)
    return folder
