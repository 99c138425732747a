"""The main job: one report, every claim with the paper's value and the project's, exit 0 only
if everything holds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_identity import claims
from grpo_identity.analysis import claims as AC
from grpo_identity.app import verify as V
from grpo_identity.checks import claims as CC
from grpo_identity.proofs import THEOREMS
from grpo_identity.proofs import claims as PC
from grpo_identity.trainer import claims as TC


def _no_stored_runs(monkeypatch):
    """verify without the stages that read results/ (what a stored run holds is not these tests' concern)."""
    monkeypatch.setattr(claims, "stored_environments", lambda: [])
    for stored in ("stored_lm", "stored_conditional"):
        monkeypatch.setattr(TC, stored, lambda: [])


def test_a_failed_item_fails_the_run_and_a_skipped_one_does_not(tmp_path, monkeypatch):
    monkeypatch.setattr(
        PC, "theorems", lambda: [claims.checked("proofs", "T0 a planted falsehood", "proved", "failed", False)]
    )
    monkeypatch.setattr(CC, "audits", lambda frameworks, n: [claims.skipped("audits", "x", "y", "not installed")])
    monkeypatch.setattr(TC, "controlled_run", lambda solve_rates=None: [])
    _no_stored_runs(monkeypatch)  # their own tests read them
    result = V.verify(tmp_path, dapo_curve=None, render=False)
    assert result["all_ok"] is False
    assert result["counts"]["fail"] == 1 and result["counts"]["skipped"] >= 1
    skipped = [i for i in result["items"] if i["status"] == "skipped"]
    assert all(i["ok"] is None and i["note"] for i in skipped)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["all_ok"] is False and len(report["items"]) == len(result["items"])
    html = (tmp_path / "report.html").read_text()
    assert "SOMETHING FAILED" in html and "T0 a planted falsehood" in html


def test_render_adds_the_notebook_stage_and_the_reports_link_and_no_render_leaves_both_out(tmp_path, monkeypatch):
    """The job's wiring of the notebooks (what the end-to-end test skips with ``--no-render``): the stage, its
    items from what ``render`` reports, and the HTML report's link to the rendered index."""
    import grpo_identity.app.render as R

    monkeypatch.setattr(PC, "theorems", lambda: [])
    monkeypatch.setattr(AC, "closed_forms", lambda: [])
    monkeypatch.setattr(CC, "audits", lambda frameworks, n: [])
    monkeypatch.setattr(TC, "controlled_run", lambda solve_rates=None: [])
    _no_stored_runs(monkeypatch)

    def rendered(out, execute=False, progress=False):
        (out / "index.html").parent.mkdir(parents=True, exist_ok=True)
        (out / "index.html").write_text("<html></html>")
        return {"ok": True, "out": str(out), "notebooks": [{"name": "01_x", "errors": 0, "figures": 2, "seconds": 0.1}]}

    monkeypatch.setattr(R, "render", rendered)
    result = V.verify(tmp_path / "on", dapo_curve=None, render=True)
    assert [(i["name"], i["status"]) for i in result["items"] if i["section"] == "notebooks"] == [
        ("notebook 01_x executes and renders", "pass")
    ]
    assert '<a href="notebooks/index.html">' in (tmp_path / "on" / "report.html").read_text()
    result = V.verify(tmp_path / "off", dapo_curve=None, render=False)
    assert not [i for i in result["items"] if i["section"] == "notebooks"]
    assert "notebooks/index.html" not in (tmp_path / "off" / "report.html").read_text()


def test_a_stage_that_raises_becomes_a_failed_item_not_a_lost_report(tmp_path, monkeypatch):
    def boom():
        raise RuntimeError("stage exploded\nsecond line")

    monkeypatch.setattr(AC, "closed_forms", boom)
    monkeypatch.setattr(PC, "theorems", lambda: [])
    monkeypatch.setattr(CC, "audits", lambda frameworks, n: [])
    monkeypatch.setattr(TC, "controlled_run", lambda solve_rates=None: [])
    _no_stored_runs(monkeypatch)
    result = V.verify(tmp_path, dapo_curve=None, render=False)
    (item,) = [i for i in result["items"] if i["status"] == "fail"]
    assert item["project"] == "RuntimeError: stage exploded second line"  # the whole error, on one line
    assert (tmp_path / "report.html").exists()


def test_verify_cli_bad_input_is_one_line_exit_2():
    r = subprocess.run(
        [sys.executable, "-m", "grpo_identity", "verify", "--max-examples", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        r.returncode == 2
        and "--max-examples must be an integer from 1 to 10,000, got 0" in r.stderr
        and "Traceback" not in r.stderr
    )


@pytest.mark.slow
def test_verify_end_to_end_holds_and_writes_the_report(tmp_path):
    """The main job as the README runs it, but for the notebooks (executed once for the whole suite by
    tests/app/test_render.py, which also checks this job's notebook stage) and fewer examples per audit."""
    argv = ["verify", "--json", "--out", str(tmp_path), "--no-render", "--max-examples", "20"]
    r = subprocess.run([sys.executable, "-m", "grpo_identity", *argv], capture_output=True, text=True, timeout=900)
    out = json.loads(r.stdout)
    failed = [i for i in out["items"] if i["status"] == "fail"]
    assert r.returncode == 0 and out["all_ok"], failed
    assert {"name", "paper", "project", "ok"} <= set(out["items"][0])
    sections = {i["section"] for i in out["items"]}
    assert {"proofs", "closed forms", "audits", "Big-Math", "controlled run", "DAPO"} <= sections
    assert "notebooks" not in sections
    big_math = [i for i in out["items"] if i["section"] == "Big-Math"]
    assert len(big_math) == 14 and all(i["status"] == "pass" for i in big_math)
    assert not [i for i in out["items"] if i["section"] in ("controlled run", "DAPO") and i["status"] != "pass"]
    assert sum(i["section"] == "proofs" and i["ok"] for i in out["items"]) == len(
        THEOREMS
    )  # every theorem of grpo_identity.proofs
    assert (tmp_path / "report.html").exists() and not (tmp_path / "notebooks").exists()


# --- strict pass criteria, an honest paper column, one-line errors ----------------------------


def test_the_dapo_curve_defaults_to_the_copy_shipped_with_the_package():
    import grpo_identity.data

    assert V.DEFAULT_DAPO_CURVE.is_file()
    assert V.DEFAULT_DAPO_CURVE.parent == Path(grpo_identity.data.__file__).parent


def test_a_stage_needing_a_missing_extra_is_skipped_naming_the_extra(tmp_path, monkeypatch):
    def needs_torch(solve_rates=None):
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    def needs_unknown():
        raise ModuleNotFoundError("No module named 'nonexistent_pkg'", name="nonexistent_pkg")

    monkeypatch.setattr(PC, "theorems", needs_unknown)
    monkeypatch.setattr(AC, "closed_forms", lambda: [])
    monkeypatch.setattr(CC, "audits", lambda frameworks, n: [])
    monkeypatch.setattr(TC, "controlled_run", needs_torch)
    result = V.verify(tmp_path, dapo_curve=None, render=False)
    by_section = {i["section"]: i for i in result["items"] if i["section"] in ("controlled run", "proofs")}
    assert by_section["controlled run"]["status"] == "skipped"
    assert by_section["controlled run"]["note"] == "this needs torch: pip install 'grpo-identity[trainer]'"
    assert by_section["proofs"]["status"] == "fail"  # not an optional extra of this project


def test_a_proofs_package_that_cannot_be_imported_is_a_failed_item_and_the_report_is_written(tmp_path, monkeypatch):
    import grpo_identity.proofs

    monkeypatch.setitem(sys.modules, "grpo_identity.proofs.claims", None)  # its import raises ImportError
    monkeypatch.delattr(grpo_identity.proofs, "claims")
    monkeypatch.setattr(AC, "closed_forms", lambda: [])
    monkeypatch.setattr(CC, "audits", lambda frameworks, n: [])
    monkeypatch.setattr(TC, "controlled_run", lambda solve_rates=None: [])
    _no_stored_runs(monkeypatch)
    result = V.verify(tmp_path, dapo_curve=None, render=False)
    (proofs,) = [i for i in result["items"] if i["section"] == "proofs"]
    assert proofs["status"] == "fail" and "grpo_identity.proofs.claims" in proofs["project"]
    assert json.loads((tmp_path / "report.json").read_text())["all_ok"] is False


def test_the_progress_bar_counts_items_not_stages(tmp_path, monkeypatch):
    import sys
    import types

    bars = []

    class Bar:
        def __init__(self, total=None, **kwargs):
            self.total, self.n = total, 0
            bars.append(self)

        def update(self, n):
            self.n += n

        def set_postfix_str(self, s, refresh=True):
            pass

        def set_description_str(self, s, refresh=True):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.close()

        def refresh(self):
            pass

        def close(self):
            pass

    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=Bar))
    monkeypatch.setattr(
        CC, "audits", lambda frameworks, n: [claims.skipped("audits", "x", "y", "not installed")]
    )  # 1 item, 7 expected
    monkeypatch.setattr(TC, "controlled_run", lambda solve_rates=None: [])
    monkeypatch.setattr(PC, "theorems", lambda: [claims.checked("proofs", f"T{i}", "", "", True) for i in range(3)])
    result = V.verify(tmp_path, dapo_curve=None, render=False, progress=True)
    (bar,) = bars
    assert bar.n == len(result["items"]) == bar.total > 8


def test_the_summary_fits_120_columns_however_long_the_cells():
    items = [
        V.Item(section, "claim " * 30, "paper " * 20, "project " * 20, "skipped", "")
        for section in ("proofs", "controlled run")
    ]
    result = {"items": [i.to_dict() for i in items], "counts": {"pass": 0, "fail": 0, "skipped": 2}, "seconds": 1.0}
    lines = V.format_summary(result).splitlines()
    assert max(len(line) for line in lines) <= 120
    assert "controlled run" in lines and any(line.endswith("skipped") for line in lines)


def test_skipped_items_show_a_dash_not_none_in_the_html_and_the_summary(tmp_path, monkeypatch):
    monkeypatch.setattr(PC, "theorems", lambda: [])
    monkeypatch.setattr(AC, "closed_forms", lambda: [])
    monkeypatch.setattr(
        CC, "audits", lambda frameworks, n: [claims.skipped("audits", "audit x", "beyond the paper", "not installed")]
    )
    monkeypatch.setattr(TC, "controlled_run", lambda solve_rates=None: [])
    result = V.verify(tmp_path, dapo_curve=None, render=False)
    page = (tmp_path / "report.html").read_text()
    assert ">None<" not in page and "<td>—</td>" in page
    assert "None" not in V.format_summary(result)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--out", "{file}"], "is a file, not a folder"),
        (["--out", "{file}/sub"], "cannot create the folder"),
        (["--dapo-curve", "{tmp}/missing.csv"], "--dapo-curve: no such file"),
        (["--dapo-curve", "{file}"], "--dapo-curve: afile has no data rows"),  # malformed: refused before any work
        (["--solve-rates", "{tmp}/missing.csv"], "--solve-rates: no such file"),
    ],
)
def test_verify_bad_paths_are_one_line_exit_2_before_any_work(tmp_path, capsys, args, message):
    from grpo_identity.app.cli import main

    f = tmp_path / "afile"
    f.write_text("x")
    argv = [a.format(file=f, tmp=tmp_path) for a in args]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "o")]
    code = main(["verify", "--no-render", "--no-frameworks", *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "o").exists()  # nothing written


def test_notebooks_without_their_extra_are_skipped_naming_it(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "jupyter_server_mathjax" else real(name, *a)
    )
    (item,) = V._run_stage(V.Stage("notebooks", lambda: V._render(tmp_path), 5), lambda item: None)
    assert (
        item.status == "skipped"
        and item.note == "this needs jupyter_server_mathjax: pip install 'grpo-identity[notebooks]'"
    )


def _planted_stages(monkeypatch):
    """verify with quick stand-in stages: one proof (slow enough to be seen running), one skipped audit."""

    def proofs():
        claims.running("T0 a theorem being proved")
        yield claims.checked("proofs", "T0 a theorem being proved", "", "", True)

    monkeypatch.setattr(PC, "theorems", proofs)
    monkeypatch.setattr(AC, "closed_forms", lambda: [])
    monkeypatch.setattr(CC, "audits", lambda frameworks, n: [claims.skipped("audits", "audit x", "—", "x is missing")])
    monkeypatch.setattr(TC, "controlled_run", lambda solve_rates=None: [])
    monkeypatch.setattr(AC, "big_math", lambda solve_rates: [])
    _no_stored_runs(monkeypatch)


def test_the_progress_bar_names_the_stage_its_number_and_the_item_running_and_only_when_asked(
    tmp_path, monkeypatch, capsys
):
    _planted_stages(monkeypatch)
    V.verify(tmp_path, dapo_curve=None, render=False, progress=True)
    err = capsys.readouterr().err
    assert "verify: loading" in err  # drawn before the stages are built (they import SymPy)
    assert "verify [1/9] proofs" in err and "now: T0 a theorem being proved" in err
    assert "verify [3/9] audits" in err and "done: audit x" in err
    V.verify(tmp_path, dapo_curve=None, render=False, progress=False)
    assert capsys.readouterr().err == ""
    assert not claims._NOW  # the bar's hook is gone with the bar


@pytest.mark.parametrize(
    ("argv", "tty", "shown"),
    [([], True, True), (["--json"], True, False), ([], False, False)],
    ids=["terminal", "json on a terminal", "not a terminal"],
)
def test_the_verify_command_asks_for_progress_only_on_a_terminal_without_json(
    tmp_path, monkeypatch, capsys, argv, tty, shown
):
    from grpo_identity.app.cli import main

    asked = []

    def fake(out, progress=False, **kwargs):
        asked.append(progress)
        return {
            "all_ok": True,
            "seconds": 0.0,
            "counts": {"pass": 0, "fail": 0, "skipped": 0, "checked": 0},
            "items": [],
            "report": {"json": "r.json", "html": "r.html"},
        }

    monkeypatch.setattr(V, "verify", fake)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: tty, raising=False)
    assert main(["verify", "--out", str(tmp_path), *argv]) == 0
    assert asked == [shown] and capsys.readouterr().err == ""


def test_the_summary_says_how_many_were_checked_and_skipped_and_why(tmp_path, monkeypatch):
    _planted_stages(monkeypatch)
    result = V.verify(tmp_path, dapo_curve=None, render=False)
    c = result["counts"]
    assert c["checked"] == c["pass"] + c["fail"] and c["skipped"] >= 1
    text = V.format_summary(result)
    assert f"{c['checked']} checked, {c['skipped']} skipped: {c['pass']} passed, {c['fail']} failed in" in text
    assert "skipped, and why:\n  audits: x is missing" in text
    assert f"{c['checked']} checked, {c['skipped']} skipped" in (tmp_path / "report.html").read_text()
    none_skipped = dict(result, counts={"pass": 2, "fail": 0, "skipped": 0, "checked": 2}, items=[])
    assert V.format_summary(none_skipped).splitlines()[-1].startswith("2 checked: 2 passed, 0 failed in")


def _pip_install_reasons(tmp_path, monkeypatch) -> list[V.Item]:
    """The skipped items verify makes where only the base requirements are installed and nothing
    of the source checkout is there: no torch, TRL, verl or Jupyter; no results/, no notebooks/."""
    import importlib.util

    import grpo_identity.app.render as R
    import grpo_identity.checks as checks

    missing = {"torch", "trl", "verl", *V._NOTEBOOK_MODULES}
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in missing else real(name, *a))
    for name in missing:
        monkeypatch.setitem(sys.modules, name, None)  # importing it raises ModuleNotFoundError

    class Rep:
        verdict, matches = "pass", "grpo"

    monkeypatch.setattr(checks, "audit", lambda *a, **k: Rep())
    results = tmp_path / "site-packages" / "results"  # as ROOT/results is from a pip install: not there
    stages = [
        V.Stage("audits", lambda: CC.audits(True, 1), 7),
        V.Stage("controlled run", TC.controlled_run, 1),
        V.Stage("stored runs", lambda: claims.stored_environments(results), 1),
        V.Stage("LM trainer", lambda: TC.stored_lm(results), 1),
        V.Stage("LM conditional", lambda: TC.stored_conditional(results), 1),
        V.Stage("notebooks", lambda: V._render(tmp_path / "out"), 1),
    ]
    items = [i for s in stages for i in V._run_stage(s, lambda item: None) if i.status == "skipped"]
    spread, why = TC._load_spread(results / "bernoulli_seeds" / "spread.json", None)
    items.append(claims.skipped("controlled run", "seed spread", "", why))
    monkeypatch.setattr(R, "NOTEBOOKS_DIR", tmp_path / "site-packages" / "notebooks")
    items += [i for i in V._render(tmp_path / "out") if i.status == "skipped"]
    return items


def test_every_skip_reason_of_a_pip_install_names_the_extra_and_never_make_or_the_installed_package(
    tmp_path, monkeypatch
):
    import re

    items = _pip_install_reasons(tmp_path, monkeypatch)
    assert {i.section for i in items} == {
        "audits",
        "controlled run",
        "stored runs",
        "LM trainer",
        "LM conditional",
        "notebooks",
    }
    assert len(items) == 3 + 1 + 3 + 1 + 2
    for i in items:
        assert re.search(r"pip install '(grpo-identity|\.)\[(frameworks|trainer|notebooks|data)\]'", i.note), i
        assert not re.search(r"\bmake\b", i.note) and "site-packages" not in i.note and str(tmp_path) not in i.note, i
    by_name = {i.name: i.note for i in items}
    trl = next(note for name, note in by_name.items() if name.startswith("audit trl"))
    assert trl == "trl is not installed: pip install 'grpo-identity[frameworks]'"
    assert "ships with the source checkout" in by_name["seed spread"]
