"""The documentation site (mkdocs.yml, docs/hooks.py): built strictly, then opened in headless Chromium."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# one worker builds the site once (the build lays the package out in build/docs-api, shared by all builds)
pytestmark = pytest.mark.xdist_group("docs_site")
_BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
#: the five purposes the navigation is split by, and one page of each
SECTIONS = {
    "Tutorial": "tutorial.html",
    "How-to guides": "how-to/pytest-plugin.html",
    "Reference": "reference/cli.html",
    "Explanation": "explanation/identity.html",
    "Findings": "findings/frameworks.html",
}


def _hooks():
    pytest.importorskip("mkdocs")
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _browser() -> str:
    exe = next((found for name in _BROWSERS if (found := shutil.which(name))), None)
    if exe is None:
        pytest.skip(f"no headless Chromium on PATH (looked for {', '.join(_BROWSERS)}): the site is not opened")
    return exe


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        _browser(),
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        f"--user-data-dir={profile}",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)


def _dom(site: Path, page: str, profile: Path) -> str:
    res = _chromium(profile, "--virtual-time-budget=5000", "--dump-dom", (site / page).as_uri())
    assert res.returncode == 0 and "<html" in res.stdout, res.stderr[-1000:]
    return res.stdout


def test_doctest_examples_in_docstrings_are_fenced_as_code_once():
    hooks = _hooks()
    text = "Intro.\n\n>>> x = [1]\n>>> x\n[1]\n\nAfter.\n\n    >>> y\n    2\n"
    fenced = hooks.fence_doctests(text)
    assert "```pycon\n>>> x = [1]\n>>> x\n[1]\n```\n\nAfter." in fenced
    assert "    ```pycon\n    >>> y\n    2\n    ```" in fenced
    assert hooks.fence_doctests(fenced) == fenced


def test_sphinx_roles_in_docstrings_become_inline_code():
    hooks = _hooks()
    text = "A :class:`~grpo_identity.dial.Dial` and :func:`grpo_identity.dial.advantages`; :data:`X` stays code."
    assert hooks.plain_roles(text) == "A `Dial` and `grpo_identity.dial.advantages`; `X` stays code."


def test_the_api_tree_is_laid_out_when_missing_and_left_alone_when_right():
    hooks = _hooks()  # loading the hooks lays it out, as mkdocs loading its configuration does
    package = ROOT / "build" / "docs-api" / "grpo_identity"
    assert (package / "checks").resolve() == (ROOT / "checks").resolve()
    assert (package / "dial.py").resolve() == (ROOT / "grpo_identity" / "dial.py").resolve()
    os.utime(package, ns=(0, 0))  # a folder made again would carry the present time
    hooks.ensure_api_tree()
    assert package.stat().st_mtime_ns == 0  # right already: not removed and remade under a reader
    (package / "checks").unlink()
    hooks.ensure_api_tree()
    assert (package / "checks").resolve() == (ROOT / "checks").resolve()


def _build(out: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "--site-dir", str(out)]
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)


def _problems(res: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith(("WARNING", "ERROR"))]
    return "\n".join(lines or res.stderr.splitlines()[-30:])


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    pytest.importorskip("mkdocs")
    out = tmp_path_factory.mktemp("docs") / "site"
    api = ROOT / "build" / "docs-api"  # as in a fresh clone: the first build lays it out
    api.unlink() if api.is_symlink() else shutil.rmtree(api, ignore_errors=True)
    res = _build(out)
    if res.returncode != 0 and "could not be found" in res.stderr:
        # Seen only inside the whole parallel suite on a fresh clone, never alone (a fresh clone's `make docs`,
        # this file alone, this file beside the wheel build): mkdocstrings once missed the package tree. One
        # retry, and a failure shows both attempts, so a real break (a bad link, a missing module) still fails.
        time.sleep(10)
        first, res = res, _build(out)
        if res.returncode != 0:
            pytest.fail(f"mkdocs build --strict failed twice:\n{_problems(first)}\n--- again:\n{_problems(res)}")
    if res.returncode != 0:
        pytest.fail("mkdocs build --strict failed:\n" + _problems(res))
    return out


@pytest.mark.slow
def test_the_strict_build_writes_every_page_the_search_index_and_mathjax_and_loads_nothing_online(site):
    for page in ("index.html", *SECTIONS.values(), "reference/api.html", "reference/theorems.html"):
        assert (site / page).is_file(), page
    index = json.loads((site / "search" / "search_index.json").read_text())
    assert any(d["location"].startswith("reference/cli.html") for d in index["docs"])
    assert (site / "mathjax" / "MathJax.js").is_file() and (site / "reference" / "report-schema.json").is_file()
    for page in site.rglob("*.html"):
        text = page.read_text()
        assert not re.search(r'<(script|link)[^>]+(src|href)="(https?:)?//', text), page  # no CDN, no web fonts
    # the framework table is included from results/frameworks/table.md, not copied
    first_row = (ROOT / "results" / "frameworks" / "table.md").read_text().splitlines()[2]
    target = first_row.split("`")[1]
    assert f"<code>{target}</code>" in (site / "findings" / "frameworks.html").read_text()


@pytest.mark.slow
def test_in_the_browser_the_navigation_has_the_five_purposes_and_the_cli_page_names_audit(site, tmp_path):
    dom = _dom(site, "index.html", tmp_path / "profile")
    (tabs,) = re.findall(r'<nav class="md-tabs".*?</nav>', dom, re.S)  # the bar under the header
    primary = dom[dom.index("md-nav--primary") :]  # the sidebar: every section with its pages
    for label, page in SECTIONS.items():
        assert re.search(rf'href="{re.escape(page)}"[^>]*>\s*{re.escape(label)}\s*</a>', tabs), label
        assert re.search(rf">\s*{re.escape(label)}\s*<", primary) and f'href="{page}"' in primary, label
    cli = _dom(site, "reference/cli.html", tmp_path / "profile")
    assert 'id="grpo-identity-audit"' in cli and "usage: grpo-identity audit" in cli


@pytest.mark.slow
def test_in_the_browser_mathjax_typesets_every_theorem_without_an_error(site, tmp_path):
    from grpo_identity.proofs import THEOREMS

    dom = _dom(site, "reference/theorems.html", tmp_path / "profile")
    # MathJax 2.7 (the copy the project ships with its notebooks) writes MathJax_Display / MathJax spans
    assert len(re.findall(r'class="MathJax_Display"', dom)) == len(THEOREMS)
    assert len(re.findall(r'class="MathJax"', dom)) >= len(THEOREMS)
    assert not re.search(r'class="(merror|MathJax_Error)"', dom)


@pytest.mark.slow
def test_a_screenshot_of_the_home_page_is_not_blank(site, tmp_path):
    image = pytest.importorskip("matplotlib.image")
    import numpy as np

    shot = tmp_path / "index.png"
    res = _chromium(
        tmp_path / "profile",
        "--hide-scrollbars",
        "--virtual-time-budget=5000",
        "--window-size=1280,900",
        f"--screenshot={shot}",
        (site / "index.html").as_uri(),
    )
    assert res.returncode == 0 and shot.is_file(), res.stderr[-1000:]
    pixels = image.imread(shot)
    assert pixels.shape[:2] == (900, 1280)
    colours = np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)
    assert len(colours) > 50  # text, the header bar, the navigation: far from one flat colour
    header = pixels[:40, :, :3].mean(axis=(0, 1))
    assert header[2] > header[0] + 0.1  # the header bar is the theme's indigo, so the stylesheet loaded


#: measures the page after load and writes them into <body data-measured="…"> for --dump-dom to carry out
_MEASURE = """<script>window.addEventListener("load", () => setTimeout(() => {
  const table = document.querySelector(".framework-table table");
  const nav = document.querySelector(".md-sidebar--primary");
  const codes = [...document.querySelectorAll("pre > code")];
  document.body.setAttribute("data-measured", JSON.stringify({
    view: document.documentElement.clientWidth,
    table_right: table ? table.getBoundingClientRect().right : null,
    table_overflow: table ? table.parentElement.scrollWidth - table.parentElement.clientWidth : null,
    nav_width: nav ? nav.getBoundingClientRect().width : 0,
    codes: codes.length,
    codes_scrolling: codes.filter(c => c.scrollWidth > c.clientWidth + 1).length,
  }));
}, 500));</script>"""


def _measured(site: Path, page: str, tmp_path: Path) -> dict:
    """The page as a 1280-px-wide window lays it out (a copy of it, with :data:`_MEASURE` added)."""
    copy = site / (page.replace(".html", "") + ".measured.html")
    copy.write_text((site / page).read_text().replace("</body>", _MEASURE + "</body>"))
    res = _chromium(tmp_path / "profile", "--window-size=1280,900", "--virtual-time-budget=8000", "--dump-dom",
                    copy.as_uri())  # fmt: skip
    found = re.search(r'data-measured="([^"]+)"', res.stdout)
    assert found, res.stderr[-1000:]
    return json.loads(found.group(1).replace("&quot;", '"'))


@pytest.mark.slow
def test_at_1280_px_the_framework_table_shows_every_column_beside_the_navigation(site, tmp_path):
    m = _measured(site, "findings/frameworks.html", tmp_path)
    assert m["nav_width"] > 100  # the navigation is there
    assert m["table_overflow"] <= 1 and m["table_right"] <= m["view"]  # no column behind a sideways scroll


@pytest.mark.slow
def test_code_blocks_wrap_instead_of_hiding_their_comments_behind_a_scroll(site, tmp_path):
    m = _measured(site, "tutorial.html", tmp_path)
    assert m["codes"] > 5 and m["codes_scrolling"] == 0


@pytest.mark.slow
def test_served_over_http_no_page_asks_for_a_file_the_site_lacks(site, tmp_path):
    import http.server
    import threading

    missing: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(site), **kw)

        def send_error(self, code, *a, **kw):
            missing.append(f"{code} {self.path}")
            super().send_error(code, *a, **kw)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for page in ("index.html", "explanation/identity.html", "reference/theorems.html", "tutorial.html"):
            url = f"http://127.0.0.1:{server.server_address[1]}/{page}"
            res = _chromium(tmp_path / "profile", "--virtual-time-budget=8000", "--dump-dom", url)
            assert res.returncode == 0 and "MathJax" in res.stdout, page
    finally:
        server.shutdown()
    assert missing == []  # e.g. MathJax's TeX fonts (MathJax_AMS-Regular.otf), which this copy does not ship
