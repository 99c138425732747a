"""Rendered notebooks: execute the jupytext sources and write self-contained, offline HTML.

For each ``notebooks/NN_*.py`` (jupytext py:percent) :func:`render` executes the notebook with
nbclient in a Python kernel of the current interpreter (working directory: the notebooks
folder, as when a notebook is opened in Jupyter), writes the executed ``.ipynb`` and an HTML page
(nbconvert, lab template) into ``out_dir``, and links them from ``index.html``.

The math renders without network access: MathJax 2.7 (from the ``jupyter-server-mathjax``
package, with its STIX web fonts) is copied next to the pages and referenced by a relative URL,
so the folder can be moved or served as it is.  Figures are embedded as base64 PNG.  No page
loads anything from a CDN (require.js and mermaid are left out).  Cells tagged
``hide-input`` show their output only (the theorem statements above each proof).

Heavy imports (nbclient, nbconvert, jupytext) happen inside the functions.

>>> count_math("inline $k/G$ and display $$x = 1$$")
2
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable

from grpo_identity.app.report import output_folder  # the one check of an output folder
from grpo_identity.foundation import atomic_path, require, write_text_atomic

__all__ = [
    "NOTEBOOKS_DIR",
    "HIDE_INPUT_TAG",
    "MATHJAX_CONFIG",
    "output_folder",
    "find_notebooks",
    "mathjax_source",
    "count_math",
    "count_figures",
    "count_errors",
    "browser_executable",
    "browser_dom",
    "render",
]

#: the jupytext sources, when running from a checkout
NOTEBOOKS_DIR = Path(__file__).resolve().parents[2] / "notebooks"
#: cells with this tag show their output only
HIDE_INPUT_TAG = "hide-input"
#: the MathJax 2.7 configuration loaded by the pages (TeX input, HTML-CSS output, no unsafe links)
MATHJAX_CONFIG = "TeX-AMS-MML_HTMLorMML-full,Safe"
#: folder of the copied MathJax, inside the output folder
MATHJAX_DIR = "mathjax"
#: seconds one cell may run before it counts as an error
CELL_TIMEOUT = 600
#: what a notebook source is called: two digits, an underscore, a name
_SOURCE_PATTERN = re.compile(r"^\d\d_[A-Za-z0-9_]+\.py$")
_BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

# The lab template without the two scripts it loads from a CDN, and with MathJax told to use
# the web fonts that ship with it (STIX-Web): the default TeX fonts are not in the package, and
# without this MathJax falls back to whatever fonts the reader's system has.
_OFFLINE_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block html_head_js_mathjax -%}
<script type="text/x-mathjax-config">
MathJax.Hub.Config({"HTML-CSS": {availableFonts: [], preferredFont: null, webFont: "STIX-Web", imageFont: null}});
</script>
{{ super() }}
{%- endblock html_head_js_mathjax -%}
"""
_OFFLINE_TEMPLATE_NAME = "grpo_identity_offline.html.j2"


def find_notebooks(notebooks_dir: Path | None = None) -> list[Path]:
    """The notebook sources ``NN_name.py`` in ``notebooks_dir`` (default: the checkout's), sorted."""
    d = Path(notebooks_dir) if notebooks_dir is not None else NOTEBOOKS_DIR
    if not d.is_dir():
        raise ValueError(f"no notebooks folder at {d}; pass --notebooks DIR (the jupytext sources)")
    found = sorted(p for p in d.iterdir() if _SOURCE_PATTERN.match(p.name))
    if not found:
        raise ValueError(f"no notebook sources (NN_name.py) in {d}; pass --notebooks DIR")
    return found


def mathjax_source() -> Path:
    """Folder of the local MathJax 2.7 of ``jupyter-server-mathjax`` (``MathJax.js``, the
    configuration :data:`MATHJAX_CONFIG`, the STIX web fonts)."""
    missing = "offline math needs a local MathJax 2.7: pip install 'grpo-identity[notebooks]' (jupyter-server-mathjax)"
    try:
        import jupyter_server_mathjax
    except ImportError:
        raise ValueError(missing) from None
    root = Path(jupyter_server_mathjax.__file__).resolve().parent / "static"
    config = MATHJAX_CONFIG.split(",")[0]
    if not ((root / "MathJax.js").is_file() and (root / "config" / f"{config}.js").is_file()):
        raise ValueError(missing)
    return root


def _copy_mathjax(out_dir: Path) -> str:
    """Copy MathJax into ``out_dir/mathjax`` once; return the pages' relative script URL."""
    src, dest = mathjax_source(), out_dir / MATHJAX_DIR
    if not (dest / "MathJax.js").is_file():
        # the pages use neither the SVG output nor the translations
        shutil.copytree(
            src, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("SVG", "localization", "__pycache__", "*.py")
        )
    return f"{MATHJAX_DIR}/MathJax.js?config={MATHJAX_CONFIG}"


# --- counting what a page holds -----------------------------------------------------------
_DISPLAY_MATH = re.compile(r"\$\$(.+?)\$\$", re.S)
_INLINE_MATH = re.compile(r"(?<![\\$])\$(?!\$)([^$\n]+?)(?<![\\$])\$(?!\$)")


def count_math(text: str) -> int:
    """Number of TeX spans in markdown text: ``$$…$$`` blocks plus inline ``$…$``."""
    display = _DISPLAY_MATH.findall(text)
    rest = _DISPLAY_MATH.sub(" ", text)
    return len(display) + len(_INLINE_MATH.findall(rest))


def _markdown_texts(nb: Any) -> Iterable[str]:
    """Markdown cell sources and markdown / LaTeX outputs of a notebook."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            yield cell.source
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            for mime in ("text/markdown", "text/latex"):
                if mime in data:
                    yield data[mime] if isinstance(data[mime], str) else "".join(data[mime])


def count_figures(page: str) -> int:
    """Number of embedded images (``<img src="data:image/…">``) in an HTML page."""
    return len(re.findall(r"<img[^>]+src=\"data:image/", page))


def count_errors(nb: Any) -> int:
    """Number of error outputs in an executed notebook."""
    return sum(1 for cell in nb.cells for out in cell.get("outputs", []) if out.get("output_type") == "error")


def _title(nb: Any, fallback: str) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return fallback


# --- execution ----------------------------------------------------------------------------
def _kernel_dir(tmp: Path) -> Path:
    """A kernelspec folder for this interpreter: the notebooks run where grpo_identity is installed,
    whatever ``python3`` kernel another Jupyter install has registered."""
    import json

    spec = tmp / "grpo-identity-python"
    spec.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-Xfrozen_modules=off", "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "Python (grpo-identity)", "language": "python"})
    )
    return tmp


def _execute(nb: Any, cwd: Path, kernel_dirs: Path) -> None:
    """Run every cell in place; errors stay in the outputs (counted afterwards), a timeout or a
    dead kernel adds an error output to the cell where it happened."""
    import nbformat
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    km = KernelManager(
        kernel_name="grpo-identity-python",
        kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernel_dirs)]),
        transport="ipc",  # local sockets in the temporary folder, not TCP ports
        ip=str(kernel_dirs / "kernel-ipc"),
    )
    client = NotebookClient(
        nb, km=km, timeout=CELL_TIMEOUT, allow_errors=True, resources={"metadata": {"path": str(cwd)}}
    )
    try:
        client.execute(cwd=str(cwd))
    except (CellTimeoutError, DeadKernelError) as exc:
        cell = next((c for c in reversed(nb.cells) if c.cell_type == "code" and c.get("execution_count")), nb.cells[-1])
        cell.setdefault("outputs", []).append(
            nbformat.v4.new_output(
                "error", ename=type(exc).__name__, evalue=str(exc).splitlines()[0] if str(exc) else "", traceback=[]
            )
        )
    finally:
        if km.has_kernel:  # the client leaves a kernel it was given running
            km.shutdown_kernel(now=True)


def _to_html(nb: Any, mathjax_url: str) -> str:
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import TagRemovePreprocessor

    exporter = HTMLExporter(
        template_name="lab",
        extra_loaders=[DictLoader({_OFFLINE_TEMPLATE_NAME: _OFFLINE_TEMPLATE})],
        template_file=_OFFLINE_TEMPLATE_NAME,
        mathjax_url=mathjax_url,
        embed_images=True,
        exclude_anchor_links=False,
    )
    hide = TagRemovePreprocessor(remove_input_tags={HIDE_INPUT_TAG}, enabled=True)
    exporter.register_preprocessor(hide, enabled=True)
    body, _ = exporter.from_notebook_node(nb)
    return body


# --- the browser: PDF and checks ------------------------------------------------------------
def browser_executable() -> str | None:
    """Path of a Chromium-family browser on PATH, or None."""
    for name in _BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    return None


def _browser(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    exe = browser_executable()
    if exe is None:
        raise ValueError(f"no headless browser found (looked for {', '.join(_BROWSERS)})")
    with tempfile.TemporaryDirectory(prefix="grpo-identity-browser-") as profile:
        cmd = [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            f"--user-data-dir={profile}",
            *args,
        ]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def _failure(res: subprocess.CompletedProcess[str]) -> str:
    """What a failed browser run says: the last line of its stderr, else its exit code."""
    return res.stderr.strip().splitlines()[-1] if res.stderr.strip() else str(res.returncode)


def browser_dom(page: Path, *, budget_ms: int = 10_000, timeout: float = 120.0) -> str:
    """The DOM of ``page`` after a headless Chromium has loaded it and run its scripts (MathJax)."""
    res = _browser([f"--virtual-time-budget={budget_ms}", "--dump-dom", Path(page).resolve().as_uri()], timeout)
    if res.returncode != 0 or "<html" not in res.stdout:
        raise ValueError(f"the browser could not load {page}: {_failure(res)}")
    return res.stdout


def _pdf(nb: Any, page: Path, pdf_path: Path) -> None:
    """A PDF of one notebook: through LaTeX (nbconvert) where xelatex is installed, else by
    printing the rendered page in headless Chromium."""
    if shutil.which("xelatex"):
        from nbconvert import PDFExporter

        data, _ = PDFExporter().from_notebook_node(nb)
        pdf_path.write_bytes(data)
        return
    res = _browser(
        [
            "--virtual-time-budget=10000",
            "--run-all-compositor-stages-before-draw",
            "--no-pdf-header-footer",
            f"--print-to-pdf={pdf_path}",
            page.resolve().as_uri(),
        ],
        180.0,
    )
    if res.returncode != 0 or not pdf_path.is_file():
        raise ValueError(f"printing {page.name} to PDF failed: {_failure(res)}")


# --- the index ----------------------------------------------------------------------------
def _index(rows: list[dict[str, Any]], executed: bool) -> str:
    e = html.escape
    body = []
    for r in rows:
        status = "not executed" if not executed else ("ok" if r["errors"] == 0 else f"{r['errors']} error(s)")
        links = f'<a href="{e(r["html"])}">{e(r["title"])}</a>'
        extra = f' · <a href="{e(r["ipynb"])}">ipynb</a>' + (
            f' · <a href="{e(r["pdf"])}">pdf</a>' if r.get("pdf") else ""
        )
        body.append(
            f'<tr><td>{links}<span class="extra">{extra}</span></td><td>{r["seconds"]:.1f}</td>'
            f"<td>{r['figures']}</td><td>{r['math']}</td>"
            f'<td class="{"ok" if status == "ok" else "bad"}">{e(status)}</td></tr>'
        )
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8" />
<title>grpo-identity notebooks</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 60em; margin: 2em auto; color: #222; }}
table {{ border-collapse: collapse; width: 100%; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 0.4em 0.6em; text-align: left; }}
td:nth-child(n+2), th:nth-child(n+2) {{ text-align: right; }}
.extra {{ color: #666; font-size: 0.85em; }}
.ok {{ color: #1a7f37; }} .bad {{ color: #b00020; font-weight: bold; }}
</style>
</head>
<body>
<h1>The group-standard-deviation identity: notebooks</h1>
<p>For binary rewards, the GRPO update of a prompt is σ·(s̄₊ − s̄₋), Dr. GRPO's σ²·(s̄₊ − s̄₋) and
DAPO's 1{{0&lt;k&lt;G}}·σ·(s̄₊ − s̄₋) (arXiv 2607.00152).
Each notebook states an equation, then proves or measures it.</p>
<table>
<tr><th>notebook</th><th>seconds</th><th>figures</th><th>math</th><th>status</th></tr>
{chr(10).join(body)}
</table>
</body>
</html>
"""


def _render_one(
    src: Path, out: Path, *, execute: bool, pdf: bool, cwd: Path, kernels: Path, mathjax_url: str
) -> dict[str, Any]:
    """Execute (optionally) and write one notebook's page, ``.ipynb`` (and PDF); its index row."""
    import jupytext
    import nbformat

    nb = jupytext.read(src)
    t0 = time.perf_counter()
    if execute:
        _execute(nb, cwd, kernels)
    seconds = time.perf_counter() - t0
    page = _to_html(nb, mathjax_url)
    html_name, ipynb_name = f"{src.stem}.html", f"{src.stem}.ipynb"
    write_text_atomic(out / html_name, page)
    with atomic_path(out / ipynb_name) as tmp:
        nbformat.write(nb, tmp)
    row: dict[str, Any] = {
        "name": src.stem,
        "title": _title(nb, src.stem),
        "html": html_name,
        "ipynb": ipynb_name,
        "pdf": None,
        "seconds": round(seconds, 2),
        "errors": count_errors(nb),
        "figures": count_figures(page),
        "math": sum(count_math(t) for t in _markdown_texts(nb)),
    }
    if pdf:
        _pdf(nb, out / html_name, out / f"{src.stem}.pdf")
        row["pdf"] = f"{src.stem}.pdf"
    return row


def render(
    out_dir: Path,
    *,
    execute: bool = True,
    pdf: bool = False,
    progress: bool = False,
    notebooks_dir: Path | None = None,
) -> dict[str, Any]:
    """Execute the notebooks and write ``NN_name.html`` / ``.ipynb`` (and ``.pdf``) plus ``index.html``.

    Returns ``{"out", "index", "notebooks": [{"name", "title", "html", "ipynb", "pdf", "seconds",
    "errors", "figures", "math"}], "ok"}``; ``ok`` is True when every notebook ran without an
    error output (with ``execute=False``: when every page was written).  Paths in the rows are
    relative to ``out``.  The notebooks run in the notebooks folder; they find ``results/`` in
    its parent (:func:`grpo_identity.app.notebook.repo_root`).
    """
    require("jupytext", "nbformat", "nbclient", "nbconvert")  # before anything is written
    sources = find_notebooks(notebooks_dir)
    if pdf and not (shutil.which("xelatex") or browser_executable()):
        raise ValueError("--pdf needs xelatex (TeX) or a headless Chromium on PATH")
    out = output_folder(out_dir)
    mathjax_url = _copy_mathjax(out)
    cwd = sources[0].parent.resolve()  # not the repository root: its grpo_identity/ would shadow an installed package
    from tqdm import tqdm

    rows: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="grpo-identity-kernel-") as tmp,
        tqdm(total=len(sources), desc="render", unit="notebook", leave=False, disable=not progress) as bar,
    ):
        kernels = _kernel_dir(Path(tmp))
        for src in sources:
            bar.set_postfix_str(src.stem)
            rows.append(
                _render_one(src, out, execute=execute, pdf=pdf, cwd=cwd, kernels=kernels, mathjax_url=mathjax_url)
            )
            bar.update(1)
    index = out / "index.html"
    write_text_atomic(index, _index(rows, execute))
    return {
        "out": str(out),
        "index": str(index),
        "executed": execute,
        "notebooks": rows,
        "ok": all(r["errors"] == 0 for r in rows),
    }
