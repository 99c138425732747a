"""The notebooks execute without an error cell and render to offline HTML with math and figures."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from grpo_identity.app.cli import main
from grpo_identity.app.render import (
    HIDE_INPUT_TAG,
    NOTEBOOKS_DIR,
    browser_dom,
    browser_executable,
    count_figures,
    count_math,
    find_notebooks,
    render,
)
from grpo_identity.proofs import THEOREMS

NAMES = ["01_identity", "02_expectations", "03_silent_groups", "04_difficulty_weight", "05_controlled_runs"]
_STATEMENT = re.compile(r'^statement\("(\w+)"\)$')
_PROVE = re.compile(r'^prove\("(\w+)"\)')


#: the tests that read the executed notebooks run in one worker, so that they are executed once
RENDERED = pytest.mark.xdist_group("rendered_notebooks")


@pytest.fixture(scope="session")
def executed(tmp_path_factory):
    """All five notebooks executed and rendered once for the slow tests of this module."""
    out = tmp_path_factory.mktemp("notebooks")
    return render(out, execute=True)


@pytest.fixture(scope="module")
def sources_only(tmp_path_factory):
    out = tmp_path_factory.mktemp("sources")
    return render(out, execute=False)


def _page(report, name):
    return (Path(report["out"]) / f"{name}.html").read_text(encoding="utf-8")


# --- fast: sources, pages without execution, the command line ------------------------------
def test_the_five_notebook_sources_are_found_in_order():
    assert [p.stem for p in find_notebooks()] == NAMES


def test_every_theorem_is_stated_directly_above_the_cell_that_proves_it():
    import jupytext

    stated = []
    for src in find_notebooks():
        cells = jupytext.read(src).cells
        for i, cell in enumerate(cells):
            m = _STATEMENT.match(cell.source.strip()) if cell.cell_type == "code" else None
            if not m:
                continue
            assert HIDE_INPUT_TAG in cell.metadata.get("tags", []), (src.name, m.group(1))
            nxt = cells[i + 1]
            assert nxt.cell_type == "code" and _PROVE.match(nxt.source.strip()), (src.name, m.group(1))
            assert _PROVE.match(nxt.source.strip()).group(1) == m.group(1)
            stated.append(m.group(1))
    assert sorted(stated) == sorted(t.name for t in THEOREMS)


def test_math_spans_are_counted_display_and_inline():
    assert count_math("inline $k/G$, display $$\\sigma = 1$$ and a price of 5 dollars") == 2
    assert count_math("no math") == 0


def test_pages_without_execution_load_mathjax_from_the_copied_folder_and_nothing_from_a_cdn(sources_only):
    out = Path(sources_only["out"])
    assert (out / "mathjax" / "MathJax.js").is_file()
    assert (out / "mathjax" / "config" / "TeX-AMS-MML_HTMLorMML-full.js").is_file()
    for name in NAMES:
        page = _page(sources_only, name)
        scripts = re.findall(r'<script[^>]*src="([^"]+)"', page)
        assert scripts == ["mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"], scripts
        assert "cdnjs" not in page and "unpkg.com" not in page
        assert 'webFont: "STIX-Web"' in page  # the fonts that ship with the copied MathJax


def test_index_links_every_page(sources_only):
    index = Path(sources_only["index"]).read_text(encoding="utf-8")
    links = re.findall(r'href="([^"]+)"', index)
    for name in NAMES:
        assert f"{name}.html" in links and f"{name}.ipynb" in links
        assert (Path(sources_only["out"]) / f"{name}.html").is_file()
    assert sources_only["executed"] is False


def test_render_command_writes_json_and_exits_0_without_execution(tmp_path, capsys):
    code = main(["render", "--no-execute", "--json", "--out", str(tmp_path / "o")])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert [nb["name"] for nb in report["notebooks"]] == NAMES and report["ok"] is True


def test_render_command_says_in_one_line_where_the_notebooks_are_missing(tmp_path, capsys):
    code = main(["render", "--no-execute", "--notebooks", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "--notebooks DIR" in err


def test_the_default_notebooks_folder_is_the_checkouts():
    assert NOTEBOOKS_DIR == Path(__file__).resolve().parents[2] / "notebooks"


# --- slow: execute everything --------------------------------------------------------------
@pytest.mark.slow
@RENDERED
def test_every_notebook_executes_without_an_error_cell(executed):
    import nbformat  # here, not at collection: it imports jsonschema's validators (about 3 s per worker)

    assert executed["ok"] is True
    assert [nb["name"] for nb in executed["notebooks"]] == NAMES
    for nb in executed["notebooks"]:
        assert nb["errors"] == 0, nb
        saved = nbformat.read(Path(executed["out"]) / nb["ipynb"], as_version=4)
        code = [c for c in saved.cells if c.cell_type == "code"]
        assert all(c.execution_count for c in code), nb["name"]  # every cell ran
        assert not [o for c in code for o in c.outputs if o.output_type == "error"]
        assert "Traceback (most recent call last)" not in _page(executed, nb["name"])


@pytest.mark.slow
@RENDERED
def test_rendered_pages_hold_the_latex_of_every_theorem(executed):
    pages = "".join(_page(executed, name) for name in NAMES)
    for t in THEOREMS:
        assert html.escape(t.latex, quote=False) in pages, t.name


@pytest.mark.slow
@RENDERED
def test_every_notebook_page_embeds_at_least_one_figure(executed):
    for nb in executed["notebooks"]:
        page = _page(executed, nb["name"])
        assert nb["figures"] == count_figures(page) >= 1, nb["name"]
        assert nb["math"] >= 1, nb["name"]


@pytest.mark.slow
@RENDERED
def test_verify_s_notebook_stage_reports_each_executed_notebook_and_renders_into_its_out_folder(
    executed, tmp_path, monkeypatch
):
    """The main job's notebook stage, on this module's one execution (the end-to-end verify test runs with
    ``--no-render``): one passing item per notebook, rendered into ``OUT/notebooks``."""
    import grpo_identity.app.render as R
    from grpo_identity.app import verify as V

    seen = {}

    def rendered(out, execute=False, progress=False):
        seen.update(out=Path(out), execute=execute)
        return executed

    monkeypatch.setattr(R, "render", rendered)
    items = list(V._render(tmp_path))
    assert seen == {"out": tmp_path / "notebooks", "execute": True}
    assert [i.name for i in items] == [f"notebook {n} executes and renders" for n in NAMES]
    assert all(i.status == "pass" for i in items)
    figures = [int(re.search(r"(\d+) figures", i.project).group(1)) for i in items]
    assert figures == [nb["figures"] for nb in executed["notebooks"]] and min(figures) >= 1
    failing = {**executed, "notebooks": [{**executed["notebooks"][0], "errors": 1}, *executed["notebooks"][1:]]}
    monkeypatch.setattr(R, "render", lambda out, execute=False, progress=False: failing)
    assert [i.status for i in V._render(tmp_path)] == ["fail"] + ["pass"] * (len(NAMES) - 1)


@pytest.mark.slow
def test_a_failing_cell_is_reported_and_the_render_is_not_ok(tmp_path):
    src = tmp_path / "notebooks"
    src.mkdir()
    (src / "01_broken.py").write_text(
        '# %% [markdown]\n# # Broken\n\n# %%\nraise RuntimeError("deliberate")\n\n# %%\nprint("after")\n'
    )
    report = render(tmp_path / "out", notebooks_dir=src)
    assert report["ok"] is False and report["notebooks"][0]["errors"] == 1
    assert "deliberate" in (tmp_path / "out" / "01_broken.html").read_text()


@pytest.mark.slow
@pytest.mark.skipif(
    browser_executable() is None, reason="no headless Chromium on PATH (Debian: apt-get install chromium)"
)
@RENDERED
def test_headless_chromium_typesets_the_math_and_shows_the_figures(executed):
    dom = browser_dom(Path(executed["out"]) / "01_identity.html")
    displays = len(re.findall(r'class="MathJax_Display"', dom))
    stated = sum(1 for t in THEOREMS if html.escape(t.latex, quote=False) in _page(executed, "01_identity"))
    assert stated >= 13 and displays >= stated  # one typeset display per theorem on the page, at least
    assert len(re.findall(r'class="MathJax"', dom)) >= executed["notebooks"][0]["math"]
    assert not re.search(r'class="(merror|MathJax_Error)"', dom)  # no TeX error boxes
    assert len(re.findall(r"<img[^>]+src=\"data:image/png", dom)) >= 2


# --- a bad output folder, numbers in prose, running without ../shared/data ------------------
def test_render_out_on_a_file_is_one_line_exit_2(tmp_path, capsys):
    f = tmp_path / "afile"
    f.write_text("x")
    code = main(["render", "--no-execute", "--out", str(f)])
    err = capsys.readouterr().err
    assert code == 2 and "is a file, not a folder" in err and err.count("\n") == 1


# Numbers a markdown cell may hold outside math: notebook numbers, the arXiv id, DAPO's Fig. 3b
# and its 32 samples, Llama-3.1-8B and its 64 rollouts, 0 and 1.  Every other number (a paper
# value, a measurement, a closed-form value) must be printed by code, not typed into prose.
_PROSE_NUMBERS_ALLOWED = {"01", "02", "03", "04", "05", "0", "1", "2607.00152", "2025", "3", "32", "3.1", "8", "64"}


def test_notebook_prose_types_no_number_that_code_should_print():
    import jupytext

    from grpo_identity.app.render import _DISPLAY_MATH, _INLINE_MATH

    found = []
    for src in find_notebooks():
        for cell in jupytext.read(src).cells:
            if cell.cell_type != "markdown":
                continue
            text = _INLINE_MATH.sub(" ", _DISPLAY_MATH.sub(" ", cell.source))
            for token in re.findall(r"(?<![\w.])\d[\d,]*(?:\.\d+)?", text):
                if token.rstrip(",") not in _PROSE_NUMBERS_ALLOWED:
                    found.append((src.name, token))
    assert not found, found


@pytest.mark.slow
@RENDERED
def test_notebooks_that_read_data_run_without_the_shared_folder(request, tmp_path):
    """A checkout without ../shared/data: notebooks 03 and 04 use the data shipped with the
    package, 05 reads results/; none raises.  Where this checkout has no ../shared beside it, the suite's one
    execution of the notebooks is that run; else a copy of the notebooks and results/ is executed where none is."""
    import shutil

    if not (NOTEBOOKS_DIR.parent.parent / "shared").exists():
        report = request.getfixturevalue("executed")
    else:
        repo = tmp_path / "checkout"
        (repo / "notebooks").mkdir(parents=True)
        shutil.copytree(NOTEBOOKS_DIR.parent / "results", repo / "results")
        for name in ("03_silent_groups", "04_difficulty_weight", "05_controlled_runs"):
            shutil.copy(NOTEBOOKS_DIR / f"{name}.py", repo / "notebooks")
        assert not (tmp_path / "shared").exists()
        report = render(tmp_path / "out", notebooks_dir=repo / "notebooks")
    assert report["ok"], report["notebooks"]
    page = _page(report, "03_silent_groups")
    assert "fitted now from the shipped dapo_fig3b_accuracy1_fraction.csv" in page and "Big-Math" in page
