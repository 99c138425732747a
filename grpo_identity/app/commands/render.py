"""``grpo-identity render``: execute the notebooks and write offline HTML with an index."""

from __future__ import annotations

import argparse

from grpo_identity.app import progress

HELP = "execute the notebooks and render them to HTML that works offline (MathJax bundled), with an index.html"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="DIR", default="out/notebooks", help="output folder (default out/notebooks)")
    p.add_argument("--no-execute", action="store_true", help="render the sources without running them")
    p.add_argument(
        "--pdf", action="store_true", help="also write a PDF of each notebook (xelatex, else headless Chromium)"
    )
    p.add_argument(
        "--notebooks",
        metavar="DIR",
        default=None,
        help="folder of the jupytext sources NN_name.py (default: the checkout's notebooks/)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from grpo_identity.app.report import check_out_dir, emit_json, format_table

    if args.notebooks is not None and not args.notebooks.strip():
        raise ValueError("--notebooks is empty: name the folder of the notebook sources, or leave it out")
    check_out_dir(args.out)  # before the notebooks run
    from grpo_identity.app.render import render

    r = render(
        Path(args.out),
        execute=not args.no_execute,
        pdf=args.pdf,
        progress=progress.wanted(args),
        notebooks_dir=Path(args.notebooks) if args.notebooks else None,
    )
    if args.json:
        emit_json(r)
    else:
        rows = [
            [nb["name"], nb["seconds"], nb["figures"], nb["math"], nb["errors"], nb["html"]] for nb in r["notebooks"]
        ]
        print(format_table(rows, ["notebook", "seconds", "figures", "math", "errors", "page"]))
        print(f"\nindex: {r['index']}" + ("" if r["executed"] else "  (not executed)"))
    return 0 if r["ok"] else 1
