"""Output helpers of the application: a command's JSON files and figure in one folder.

Tables and JSON themselves live in :mod:`grpo_identity.foundation` (every layer uses them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

from grpo_identity.foundation import dumps, emit_json, format_table

__all__ = ["dumps", "emit_json", "format_table", "write_outputs"]


def write_outputs(out: str | Path, json_files: Mapping[str, Any], figure: tuple[str, Callable[[str], None]] | None = None) -> Path:
    """Create the folder ``out``, write each ``{name: object}`` as JSON and draw ``figure``
    (``(file name, draw(path))``) into it; a path that exists and is no folder is a ValueError."""
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--out {out} exists and is not a directory")
    folder.mkdir(parents=True, exist_ok=True)
    for name, obj in json_files.items():
        (folder / name).write_text(dumps(obj) + "\n")
    if figure is not None:
        name, draw = figure
        draw(str(folder / name))
    return folder
