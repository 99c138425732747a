"""The main job: one report, every claim with the paper's value and the project's, exit 0 only
if everything holds."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from grpo_identity import verify as V


def test_a_failed_item_fails_the_run_and_a_skipped_one_does_not(tmp_path, monkeypatch):
    monkeypatch.setattr(V, "_proofs", lambda: [V._item("proofs", "T0 a planted falsehood", "proved", "failed", False)])
    monkeypatch.setattr(V, "_audits", lambda frameworks, n: [V._skip("audits", "x", "y", "not installed")])
    monkeypatch.setattr(V, "_bernoulli", lambda: ([], {}))
    result = V.verify(tmp_path, dapo_curve=None, render=False)
    assert result["all_ok"] is False
    assert result["counts"]["fail"] == 1 and result["counts"]["skipped"] >= 1
    skipped = [i for i in result["items"] if i["status"] == "skipped"]
    assert all(i["ok"] is None and i["note"] for i in skipped)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["all_ok"] is False and len(report["items"]) == len(result["items"])
    html = (tmp_path / "report.html").read_text()
    assert "SOMETHING FAILED" in html and "T0 a planted falsehood" in html


def test_a_stage_that_raises_becomes_a_failed_item_not_a_lost_report(tmp_path, monkeypatch):
    def boom():
        raise RuntimeError("stage exploded\nsecond line")

    monkeypatch.setattr(V, "_closed_forms", boom)
    monkeypatch.setattr(V, "_proofs", lambda: [])
    monkeypatch.setattr(V, "_audits", lambda frameworks, n: [])
    monkeypatch.setattr(V, "_bernoulli", lambda: ([], {}))
    result = V.verify(tmp_path, dapo_curve=None, render=False)
    (item,) = [i for i in result["items"] if i["status"] == "fail"]
    assert item["project"] == "RuntimeError: stage exploded"
    assert (tmp_path / "report.html").exists()


def test_closed_form_items_reproduce_every_paper_number():
    items = V._closed_forms()
    assert len(items) >= 12 + 2 + 1 + 2 + 3
    assert all(i.status == "pass" for i in items), [i.name for i in items if i.status != "pass"]


def test_realdata_items_compare_with_the_paper_when_a_file_is_given(tmp_path):
    # A made-up file: the comparison runs and fails, as it should, on data that is not Big-Math.
    f = tmp_path / "rates.csv"
    f.write_text("llama8b_solve_rate\n" + "\n".join(str(k / 64) for k in range(65)) + "\n")
    items = V._realdata(str(f))
    assert len(items) == 2 + 5 + 3 + 4
    assert any(i.status == "fail" for i in items)
    assert V._realdata(None)[0].status == "skipped"


def test_verify_cli_bad_input_is_one_line_exit_2():
    r = subprocess.run([sys.executable, "-m", "grpo_identity", "verify", "--max-examples", "0"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "max-examples must be >= 1" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_verify_end_to_end_holds_and_writes_the_report(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "grpo_identity", "verify", "--json", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=900,
    )
    out = json.loads(r.stdout)
    failed = [i for i in out["items"] if i["status"] == "fail"]
    assert r.returncode == 0 and out["all_ok"], failed
    assert {"name", "paper", "project", "ok"} <= set(out["items"][0])
    sections = {i["section"] for i in out["items"]}
    assert {"proofs", "closed forms", "audits", "controlled run", "notebooks"} <= sections
    assert sum(i["section"] == "proofs" and i["ok"] for i in out["items"]) == 19
    assert (tmp_path / "report.html").exists() and (tmp_path / "notebooks" / "index.html").exists()
