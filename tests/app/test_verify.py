"""The main job: one report, every claim with the paper's value and the project's, exit 0 only
if everything holds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_identity.app import verify as V
from grpo_identity.proofs import THEOREMS


def _no_stored_runs(monkeypatch):
    """verify without the stages that read results/ (what a stored run holds is not these tests' concern)."""
    for stored in ("_stored_environments", "_stored_lm", "_stored_conditional"):
        monkeypatch.setattr(V, stored, lambda: [])


def test_a_failed_item_fails_the_run_and_a_skipped_one_does_not(tmp_path, monkeypatch):
    monkeypatch.setattr(V, "_proofs", lambda: [V._item("proofs", "T0 a planted falsehood", "proved", "failed", False)])
    monkeypatch.setattr(V, "_audits", lambda frameworks, n: [V._skip("audits", "x", "y", "not installed")])
    monkeypatch.setattr(V, "_bernoulli", lambda solve_rates=None: [])
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

    for stage in ("_proofs", "_closed_forms"):
        monkeypatch.setattr(V, stage, lambda: [])
    monkeypatch.setattr(V, "_audits", lambda frameworks, n: [])
    monkeypatch.setattr(V, "_bernoulli", lambda solve_rates=None: [])
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

    monkeypatch.setattr(V, "_closed_forms", boom)
    monkeypatch.setattr(V, "_proofs", lambda: [])
    monkeypatch.setattr(V, "_audits", lambda frameworks, n: [])
    monkeypatch.setattr(V, "_bernoulli", lambda solve_rates=None: [])
    _no_stored_runs(monkeypatch)
    result = V.verify(tmp_path, dapo_curve=None, render=False)
    (item,) = [i for i in result["items"] if i["status"] == "fail"]
    assert item["project"] == "RuntimeError: stage exploded second line"  # the whole error, on one line
    assert (tmp_path / "report.html").exists()


def test_a_framework_audit_that_breaks_is_failed_in_full_and_the_other_frameworks_still_run(monkeypatch):
    import importlib.util

    from grpo_identity import checks

    real_find, real_audit, asked = importlib.util.find_spec, checks.audit, []

    def audit(target, **kw):
        asked.append(target)
        if target == "trl":
            try:
                raise ValueError("Either a revision or a version must be specified.")
            except ValueError as inner:
                raise RuntimeError(
                    "Failed to import trl.trainer.grpo_config because of the following error (look up to see its "
                    "traceback):\nEither a revision or a version must be specified."
                ) from inner
        return real_audit("grpo", kind="advantage", expect="grpo", max_examples=5)

    monkeypatch.setattr(checks, "audit", audit)
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name in ("trl", "verl") else real_find(name, *a)
    )
    monkeypatch.setattr(V, "_PRESET_AUDITS", ())
    items = list(V._audits(True, 5))
    assert asked == ["trl", "verl:grpo", "verl:grpo_vectorized"]  # the break stopped nothing
    trl = items[0]
    assert trl.status == "fail" and trl.project == (
        "RuntimeError: Failed to import trl.trainer.grpo_config because of the following error: "
        "Either a revision or a version must be specified."
    )
    summary = V.format_summary(
        {"items": [i.to_dict() for i in items], "counts": {"pass": 2, "fail": 1, "skipped": 0}, "seconds": 1.0}
    )
    assert "failed, in full:" in summary and "Either a revision or a version must be specified." in summary


def test_closed_form_items_reproduce_every_paper_number():
    items = list(V._closed_forms())
    assert len(items) >= 12 + 2 + 1 + 2 + 3
    assert all(i.status == "pass" for i in items), [i.name for i in items if i.status != "pass"]


def test_realdata_items_compare_with_the_paper_when_a_file_is_given(tmp_path):
    # A made-up file: the comparison runs and fails, as it should, on data that is not Big-Math.
    f = tmp_path / "rates.csv"
    f.write_text("llama8b_solve_rate\n" + "\n".join(str(k / 64) for k in range(65)) + "\n")
    items = list(V._realdata(str(f)))
    assert len(items) == 2 + 5 + 3 + 4
    assert any(i.status == "fail" for i in items)


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
def _stored_bernoulli(**changes):
    from pathlib import Path

    r = json.loads((Path(V.ROOT) / "results" / "bernoulli" / "result.json").read_text())
    r.update(changes)
    return r


def _bernoulli_items(monkeypatch, solve_rates=None, spread_path=None, **changes):
    import grpo_identity.trainer.bernoulli as B

    seen = {}

    def fake(config=None, progress=False):
        seen["config"] = config
        return _stored_bernoulli(**changes)

    monkeypatch.setattr(B, "run_bernoulli", fake)
    items = list(V._bernoulli(solve_rates, spread_path))
    return {i.name: i for i in items}, seen


def test_the_stored_bernoulli_run_passes_every_controlled_run_item(monkeypatch):
    items, seen = _bernoulli_items(monkeypatch)
    assert all(i.status == "pass" for i in items.values()), [i.name for i in items.values() if i.status != "pass"]
    assert seen["config"].solve_rates is None  # the shipped Big-Math histogram
    assert len(items) == 10


def test_naming_the_shipped_histogram_is_the_default_and_keeps_the_spread_comparisons(monkeypatch):
    items, seen = _bernoulli_items(monkeypatch, solve_rates="bigmath")
    assert seen["config"].solve_rates is None and all(i.status == "pass" for i in items.values())


def test_a_users_solve_rates_run_the_controlled_run_and_skip_the_spread_comparisons(monkeypatch):
    items, seen = _bernoulli_items(monkeypatch, solve_rates="rates.csv")
    assert seen["config"].solve_rates == "rates.csv"
    skipped = [i for i in items.values() if i.status == "skipped"]
    assert len(skipped) == 6 and all("other settings or solve rates" in i.note for i in skipped)


def test_without_a_stored_seed_spread_the_comparisons_are_skipped_naming_the_command(monkeypatch, tmp_path):
    items, _ = _bernoulli_items(monkeypatch, spread_path=tmp_path / "absent" / "spread.json")
    skipped = [i for i in items.values() if i.status == "skipped"]
    assert len(skipped) == 6 and all("python -m grpo_identity.trainer.bernoulli_seeds" in i.note for i in skipped)


def _spread_file(tmp_path, sd):
    import dataclasses

    from grpo_identity.trainer.bernoulli import BernoulliConfig
    from grpo_identity.trainer.bernoulli_seeds import QUANTITIES

    cfg = {k: v for k, v in dataclasses.asdict(BernoulliConfig()).items() if k != "seed"}
    path = tmp_path / "spread.json"
    path.write_text(
        json.dumps(
            {
                "config": cfg,
                "seeds": [0, 1, 2, 3, 4],
                "sd": {k: sd for k in QUANTITIES},
                "mean": {k: 0.5 for k in QUANTITIES},
            }
        )
    )
    return path


def test_a_controlled_run_number_passes_inside_the_seed_tolerance_and_fails_just_outside(monkeypatch, tmp_path):
    import math

    path = _spread_file(tmp_path, sd=0.01)
    tol = 3 * math.sqrt(2) * 0.01 + 0.005  # 3·√2·s + half of the paper's last digit (0.88: two decimals)
    name = "hardest quartile final solve rate, Dr. GRPO"
    for delta, status in ((0.99 * tol, "pass"), (-0.99 * tol, "pass"), (1.01 * tol, "fail"), (-1.01 * tol, "fail")):
        stored = _stored_bernoulli()
        hard = dict(stored["hard_final"], dr_grpo=0.88 + delta)
        items, _ = _bernoulli_items(monkeypatch, spread_path=path, hard_final=hard)
        assert items[name].status == status, (delta, items[name])


def test_a_float64_identity_error_of_1e_8_fails_the_controlled_run(monkeypatch):
    items, _ = _bernoulli_items(monkeypatch, identity_max_abs_err=1e-8)
    (item,) = [i for n, i in items.items() if n.startswith("autograd gradient")]
    assert item.status == "fail"


def test_a_silent_fraction_r2_below_its_seed_tolerance_fails(monkeypatch):
    items, _ = _bernoulli_items(monkeypatch, r2_silent=0.995)
    (item,) = [i for n, i in items.items() if n.startswith("R² of the GRPO arm")]
    assert item.status == "fail"


def test_every_big_math_number_of_the_paper_is_reproduced_from_the_shipped_histogram():
    items = list(V._realdata(None))
    assert len(items) == 14 and all(i.status == "pass" for i in items), [
        (i.name, i.project) for i in items if i.status != "pass"
    ]


def test_a_big_math_number_passes_only_when_it_rounds_to_the_printed_value(monkeypatch):
    from grpo_identity import paper

    # the project's G = 64 silent fraction is 16.53 %: within 0.6 points of 16 %, but it prints as 17 %
    monkeypatch.setitem(
        paper.BIG_MATH, "silent_closed_form", dict(paper.BIG_MATH["silent_closed_form"], **{"64": 0.16})
    )
    items = {i.name: i for i in V._realdata(None)}
    assert items["silent fraction, closed form, G=64"].status == "fail"
    assert sum(i.status == "fail" for i in items.values()) == 1


def test_the_dapo_curve_defaults_to_the_copy_shipped_with_the_package():
    import grpo_identity.data

    assert V.DEFAULT_DAPO_CURVE.is_file()
    assert V.DEFAULT_DAPO_CURVE.parent == Path(grpo_identity.data.__file__).parent


def test_a_stage_needing_a_missing_extra_is_skipped_naming_the_extra(tmp_path, monkeypatch):
    def needs_torch(solve_rates=None):
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    def needs_unknown():
        raise ModuleNotFoundError("No module named 'nonexistent_pkg'", name="nonexistent_pkg")

    monkeypatch.setattr(V, "_proofs", needs_unknown)
    monkeypatch.setattr(V, "_closed_forms", lambda: [])
    monkeypatch.setattr(V, "_audits", lambda frameworks, n: [])
    monkeypatch.setattr(V, "_bernoulli", needs_torch)
    result = V.verify(tmp_path, dapo_curve=None, render=False)
    by_section = {i["section"]: i for i in result["items"] if i["section"] in ("controlled run", "proofs")}
    assert by_section["controlled run"]["status"] == "skipped"
    assert by_section["controlled run"]["note"] == "this needs torch: pip install 'grpo-identity[trainer]'"
    assert by_section["proofs"]["status"] == "fail"  # not an optional extra of this project


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
        V, "_audits", lambda frameworks, n: [V._skip("audits", "x", "y", "not installed")]
    )  # 1 item, 7 expected
    monkeypatch.setattr(V, "_bernoulli", lambda solve_rates=None: [])
    monkeypatch.setattr(V, "_proofs", lambda: [V._item("proofs", f"T{i}", "", "", True) for i in range(3)])
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


def test_dapo_fit_items_hold_the_papers_saturating_r2_and_bootstrap_lower_bound(monkeypatch, tmp_path):
    import grpo_identity.analysis.dapo_fit as F

    curve = tmp_path / "curve.csv"
    curve.write_text("step,value\n0,0\n")

    def items(comp, sat):
        monkeypatch.setattr(
            F,
            "fit",
            lambda *a, **k: {
                "competence": {"r2": comp, "r2_bootstrap": [comp - 0.01, comp + 0.01]},
                "saturating": {"r2": sat},
                "solve_rate_source": "x",
            },
        )
        return [i.status for i in V._dapo_fit(curve, None)]

    assert items(0.966, 0.976) == ["pass", "pass"]
    assert items(0.905, 0.976) == ["fail", "pass"]  # below the paper's bootstrap interval
    assert items(0.93, 0.95) == ["pass", "fail"]  # not the paper's 0.98, though better than one timescale


def test_framework_audits_say_the_paper_does_not_cover_them(monkeypatch):
    import grpo_identity.checks as checks

    class Rep:
        verdict, matches = "pass", "grpo"

    monkeypatch.setattr(checks, "audit", lambda *a, **k: Rep())
    items = list(V._audits(False, 1))
    frameworks = [i for i in items if i.status == "skipped"]
    assert frameworks and all(i.paper == "beyond the paper" for i in frameworks)


def test_skipped_items_show_a_dash_not_none_in_the_html_and_the_summary(tmp_path, monkeypatch):
    monkeypatch.setattr(V, "_proofs", lambda: [])
    monkeypatch.setattr(V, "_closed_forms", lambda: [])
    monkeypatch.setattr(
        V, "_audits", lambda frameworks, n: [V._skip("audits", "audit x", "beyond the paper", "not installed")]
    )
    monkeypatch.setattr(V, "_bernoulli", lambda solve_rates=None: [])
    result = V.verify(tmp_path, dapo_curve=None, render=False)
    page = (tmp_path / "report.html").read_text()
    assert ">None<" not in page and "<td>—</td>" in page
    assert "None" not in V.format_summary(result)


def test_every_stored_lm_run_is_an_item_and_a_large_error_fails(tmp_path):
    for name, err in (("lm-a", 2e-6), ("lm-b", 3e-3)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps({"identity_max_rel_err": err, "groups_checked": 10}))
    items = list(V._stored_lm(tmp_path))
    assert [i.status for i in items] == ["pass", "fail"] and "lm-b" in items[1].name
    assert list(V._stored_lm(tmp_path / "none"))[0].status == "skipped"
    trained = [
        p for p in (V.ROOT / "results").glob("lm-*/summary.json") if not p.parent.name.startswith("lm-conditional-")
    ]
    assert len(list(V._stored_lm())) == len(trained) >= 1  # the fixed-policy runs have items of their own
    (tmp_path / "lm-conditional-x").mkdir()
    (tmp_path / "lm-conditional-x" / "summary.json").write_text(
        json.dumps({"identity_max_rel_err": 1e-9, "groups_checked": 1})
    )
    assert len(list(V._stored_lm(tmp_path))) == 2


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


def test_the_stored_conditional_run_gives_passing_items_and_a_planted_miss_fails(tmp_path):
    import shutil

    items = list(V._stored_conditional())
    cpu = [i for i in items if i.name.startswith("lm-conditional-cpu")]
    # 10 checks and 4 pre-registered criteria; addition has one correct answer, so the noise criterion is untestable
    assert len(cpu) == 14 and not [i.name for i in items if i.status == "fail"]
    assert [i.name.split(":")[0] for i in cpu if i.status == "skipped"] == [
        "lm-conditional-cpu pre-registered noise_ratio"
    ]
    # the replication's three stored seeds: every pre-registered criterion met in all three
    replicated = [i for i in items if "replicated over 3 seeds" in i.name]
    assert len(replicated) == 4 and {i.project for i in replicated} == {"met in 3 of 3 seeds"}
    run = tmp_path / "lm-conditional-planted"
    run.mkdir()
    s = json.loads((V.STORED_RESULTS / "lm-conditional-cpu" / "summary.json").read_text())
    s["conditional"]["noise_slope_by_mode"]["grpo"]["measured_over_predicted_median"] = (
        2.0  # noise twice the prediction
    )
    s["conditional"]["slope_by_mode"]["dr_grpo"]["weighted"].update(
        value=1.0, interval=[0.9, 1.1]
    )  # a slope of 1 where 2 is predicted
    # an estimate outside its own bootstrap interval (as the first stored run had) decides nothing: skipped, said so
    s["conditional"]["slope_by_mode"]["grpo"].update(value=1.85, interval=[0.66, 1.83])
    (run / "summary.json").write_text(json.dumps(s))
    planted = list(V._stored_conditional(tmp_path))
    assert [i.note.split("; ")[-1] for i in planted if "pooled" in i.name and i.status == "skipped"] == [
        "the estimate lies outside its own bootstrap interval: unreliable, not counted"
    ]
    failed = [i.name for i in planted if i.status == "fail"]
    assert (
        len(failed) == 2
        and any("tr Cov" in n for n in failed)
        and any("dr_grpo" in n and "weighted" in n for n in failed)
    )
    shutil.rmtree(run)
    assert [i.status for i in V._stored_conditional(tmp_path)] == ["skipped"]


def test_pre_registered_criteria_are_items_met_passes_not_met_fails_not_testable_is_skipped(tmp_path):
    from grpo_identity.trainer.lm.preregistered import evaluate

    run = tmp_path / "lm-conditional-prereg"
    run.mkdir()
    s = json.loads((V.STORED_RESULTS / "lm-conditional-cpu" / "summary.json").read_text())
    c = s["conditional"]
    c["slope_by_mode"]["grpo"]["weighted"].update(value=1.0, interval=[0.9, 1.1])
    c["slope_by_mode"]["dr_grpo"]["weighted"].update(value=1.3, interval=[1.2, 1.4])  # a slope where 2 is predicted
    c["cosine_min"]["by_mode"]["grpo"]["median"] = c["cosine_min"]["by_mode"]["dr_grpo"]["median"] = 0.98
    c["preregistered"] = evaluate(c, commit=False)
    (run / "summary.json").write_text(json.dumps(s))
    items = {i.name.split(":")[0]: i for i in V._stored_conditional(tmp_path) if "pre-registered" in i.name}
    status = {name.split()[-1]: i.status for name, i in items.items()}
    assert status == {"grpo_slope": "pass", "dr_grpo_slope": "fail", "cosine_median": "pass", "noise_ratio": "skipped"}
    assert "Σ₊ = 0" in items["lm-conditional-prereg pre-registered noise_ratio"].note  # not testable, and why
    assert all("no analysis commit recorded" in i.note for i in items.values())


def _provenance(folder, **versions):
    from grpo_identity import provenance

    folder.mkdir()
    record = provenance.record("grpo-identity train bernoulli --out x")
    record["versions"].update(versions)
    (folder / "provenance.json").write_text(json.dumps(record))


def test_stored_runs_say_which_recorded_versions_differ_from_the_running_ones_without_failing(tmp_path):
    _provenance(tmp_path / "a")
    _provenance(tmp_path / "b", torch="0.0.1")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "summary.json").write_text("{}")
    a, b, c = V._stored_environments(tmp_path)
    assert a.status == "pass" and a.project.startswith("same (python, grpo-identity, numpy, torch, transformers)")
    assert b.status == "skipped" and b.project.startswith("differs: torch: 0.0.1 recorded, ")
    assert "not a failure" in b.note and "recorded at" in b.note
    assert c.status == "skipped" and c.project == "not recorded" and "no provenance" in c.note
    (none,) = V._stored_environments(tmp_path / "none")  # a pip install: no results/ folder
    assert none.status == "skipped" and "ship with the source checkout" in none.note


def test_every_stored_run_folder_gets_an_environment_item():
    items = list(V._stored_environments())
    folders = [p for p in V.STORED_RESULTS.iterdir() if p.is_dir()]
    assert len(items) == len(folders) >= 1 and all(i.status in ("pass", "skipped") for i in items)


def test_a_replication_says_in_how_many_seeds_each_criterion_was_met_and_passes_only_in_all(tmp_path):
    from grpo_identity import provenance
    from grpo_identity.trainer.lm.preregistered import evaluate

    base = json.loads((V.STORED_RESULTS / "lm-conditional-cpu" / "summary.json").read_text())
    for seed, dr_grpo in ((1, [1.9, 2.1]), (2, [1.9, 2.1]), (3, [1.2, 1.4])):  # the third misses 2
        s = json.loads(json.dumps(base))
        c = s["conditional"]
        c["slope_by_mode"]["grpo"]["weighted"].update(value=1.0, interval=[0.9, 1.1])
        c["slope_by_mode"]["dr_grpo"]["weighted"].update(value=sum(dr_grpo) / 2, interval=dr_grpo)
        c["preregistered"] = evaluate(c, commit=False)
        run = tmp_path / "lm-conditional-rep" / f"seed-{seed}"
        run.mkdir(parents=True)
        (run / "summary.json").write_text(json.dumps(s))
        (run / "provenance.json").write_text(json.dumps(provenance.record(f"seed {seed}")))
    items = {i.name: i for i in V._stored_conditional(tmp_path) if "replicated" in i.name}
    grpo = items["lm-conditional-rep: pre-registered grpo_slope replicated over 3 seeds"]
    dr = items["lm-conditional-rep: pre-registered dr_grpo_slope replicated over 3 seeds"]
    assert (grpo.status, grpo.project) == ("pass", "met in 3 of 3 seeds")
    assert (dr.status, dr.project) == ("fail", "met in 2 of 3 seeds")
    assert any(i.name.startswith("lm-conditional-rep/seed-2 ") for i in V._stored_conditional(tmp_path))
    assert len(provenance.recorded(tmp_path / "lm-conditional-rep")) == 3  # one record per seed


def _planted_stages(monkeypatch):
    """verify with quick stand-in stages: one proof (slow enough to be seen running), one skipped audit."""

    def proofs():
        V._running("T0 a theorem being proved")
        yield V._item("proofs", "T0 a theorem being proved", "", "", True)

    monkeypatch.setattr(V, "_proofs", proofs)
    monkeypatch.setattr(V, "_closed_forms", lambda: [])
    monkeypatch.setattr(V, "_audits", lambda frameworks, n: [V._skip("audits", "audit x", "—", "x is missing")])
    monkeypatch.setattr(V, "_bernoulli", lambda solve_rates=None: [])
    monkeypatch.setattr(V, "_realdata", lambda solve_rates: [])
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
    assert not V._NOW  # the bar's hook is gone with the bar


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
        V.Stage("audits", lambda: V._audits(True, 1), 7),
        V.Stage("controlled run", V._bernoulli, 1),
        V.Stage("stored runs", lambda: V._stored_environments(results), 1),
        V.Stage("LM trainer", lambda: V._stored_lm(results), 1),
        V.Stage("LM conditional", lambda: V._stored_conditional(results), 1),
        V.Stage("notebooks", lambda: V._render(tmp_path / "out"), 1),
    ]
    items = [i for s in stages for i in V._run_stage(s, lambda item: None) if i.status == "skipped"]
    spread, why = V._load_spread(results / "bernoulli_seeds" / "spread.json", None)
    items.append(V._skip("controlled run", "seed spread", "", why))
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


def test_in_a_checkout_a_missing_stored_run_names_the_command_that_stores_it_under_results(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (item,) = V._stored_lm(results)
    assert item.note == "no stored LM runs under results/lm-*: grpo-identity train lm --out results/NAME stores one"
    spread, why = V._load_spread(results / "bernoulli_seeds" / "spread.json", None)
    assert spread is None
    assert why == "no stored seed spread: python -m grpo_identity.trainer.bernoulli_seeds --out results/bernoulli_seeds"
