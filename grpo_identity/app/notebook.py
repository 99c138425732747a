"""What the notebooks share: a theorem shown from its proof object, its proof run, a table.

The notebooks in ``notebooks/`` state each equation with :func:`statement` (the markdown that
:meth:`grpo_identity.proofs.Theorem.render_markdown` prints: nothing retyped) in the cell right
above the one that calls :func:`prove`.  IPython and SymPy are imported inside the functions.

>>> print(markdown_table([[8, 0.5]], ["G", "p"]))
| G | p |
|---|---|
| 8 | 0.5 |
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

__all__ = ["statement", "prove", "markdown_table", "table", "repo_root"]


def statement(name: str) -> None:
    """Display theorem ``name`` as its proof object prints it: statement, equation, reference, assumptions."""
    from IPython.display import Markdown, display

    from grpo_identity.proofs import by_name

    display(Markdown(by_name(name).render_markdown()))


def prove(name: str, show: int = 6) -> None:
    """Prove theorem ``name``, print its claims (the first ``show``), and raise unless proved."""
    from grpo_identity.proofs import by_name

    r = by_name(name).prove()
    if r.status != "proved":
        raise AssertionError(f"{name} failed; first nonzero residual: {r.residual}")
    claims = r.details["claims"]
    print(f"{name}: {r.status} ({r.method}) — {len(claims)} claim(s), {r.seconds:.2f} s")
    for c in claims[:show]:
        tag = "" if c["method"] == "symbolic" else f" ({c['method']})"
        print(f"  ✓ {c['claim']}  [{c['result']}]{tag}")
    if len(claims) > show:
        print(f"  … and {len(claims) - show} more, all holding")


def markdown_table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    """A markdown table with one header row."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
    return "\n".join(lines)


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> None:
    """Display :func:`markdown_table` as rendered markdown."""
    from IPython.display import Markdown, display

    display(Markdown(markdown_table(rows, headers)))


def repo_root(start: Path | None = None) -> Path:
    """The repository root, where ``results/`` lies: the first of ``start`` (default: the working
    directory, ``notebooks/`` when a notebook runs) and its parent that has a ``results`` folder;
    ``start`` itself if neither has one."""
    here = Path.cwd() if start is None else Path(start)
    for d in (here, here.parent):
        if (d / "results").is_dir():
            return d
    return here
