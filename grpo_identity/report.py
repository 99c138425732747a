"""Output helpers shared by the CLI: readable tables for people, JSON for machines."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence, TextIO


def _cell(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if math.isinf(v) or math.isnan(v):
            return str(v)
        return f"{v:.6g}" if abs(v) < 1e6 else f"{v:.4e}"
    return str(v)


def format_table(rows: Iterable[Sequence[Any]], headers: Sequence[str]) -> str:
    """A plain-text table with aligned columns."""
    body = [[_cell(v) for v in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in body]) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    rule = "  ".join("-" * w for w in widths)
    out = [line, rule] + ["  ".join(c.rjust(w) if _numeric(c) else c.ljust(w) for c, w in zip(r, widths)) for r in body]
    return "\n".join(s.rstrip() for s in out)


def _numeric(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _default(o: Any) -> Any:
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def dumps(obj: Any) -> str:
    """JSON text; numpy scalars and arrays become plain numbers and lists; NaN/inf become null."""
    return json.dumps(_finite(obj), indent=2, default=_default, allow_nan=False)


def _finite(o: Any) -> Any:
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    try:
        import numpy as np

        if isinstance(o, np.floating) and not np.isfinite(o):
            return None
        if isinstance(o, np.ndarray):
            return _finite(o.tolist())
    except ImportError:  # pragma: no cover
        pass
    return o


def emit_json(obj: Any, stream: TextIO | None = None) -> None:
    print(dumps(obj), file=stream or sys.stdout)


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
