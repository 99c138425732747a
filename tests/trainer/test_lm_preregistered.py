"""The pre-registered analysis of the fixed-policy experiment: the criteria as coded, what is not
testable, the commit that fixed the analysis (numpy only: built from summary entries)."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from grpo_identity import provenance
from grpo_identity.trainer.lm import preregistered as P

ROOT = P.ANALYSIS_FILES[0].parents[2]


def _slope(value, interval, weighted_value=None, weighted_interval=None):
    """A ``slope_by_mode`` entry: the plain fit and the weighted one (the pre-registered)."""
    w = {"value": weighted_value, "interval": weighted_interval}
    return {"value": value, "interval": interval, "weighted": w, "cells": 5}


def _cond(grpo_iv=(0.8, 1.2), dr_iv=(1.8, 2.2), cos=(0.97, 0.95), tr_pos=(0.0, 0.0), ratios=(1.0, 1.0)):
    """A ``conditional`` entry: two modes, two prompts with tr Σ₋ = 10 and the given tr Σ₊, one
    cell per prompt and mode whose measured / predicted noise is the prompt's ratio."""
    modes = ("grpo", "dr_grpo")
    return {
        "slope_by_mode": {
            "grpo": _slope(1.85, [0.66, 1.83], sum(grpo_iv or (2.0,)) / 2, list(grpo_iv) if grpo_iv else None),
            "dr_grpo": _slope(1.9, [1.4, 2.5], sum(dr_iv) / 2, list(dr_iv) if dr_iv else None),
        },
        "cosine_min": {"by_mode": {m: {"median": c, "value": c - 0.5} for m, c in zip(modes, cos)}},
        "prompts": [
            {"trace_sigma_pos": {m: t for m in modes}, "trace_sigma_neg": {m: 10.0 for m in modes}} for t in tr_pos
        ],
        "cells": {
            m: [{"prompt": q, "k": 2, "trace_cov": r, "trace_cov_pred": 1.0} for q, r in enumerate(ratios)]
            for m in modes
        },
    }


def _criteria(**kw):
    return P.evaluate(_cond(**kw), commit=False)["criteria"]


def test_the_weighted_fit_judges_and_the_plain_fit_stays_beside_it():
    p = P.evaluate(_cond(), commit=False)
    g = p["slope_by_mode"]["grpo"]
    assert g["value"] == pytest.approx(1.0) and g["interval"] == [0.8, 1.2] and g["bounds"] == [0.5, 1.5]
    assert g["unweighted"] == {"value": 1.85, "interval": [0.66, 1.83]}  # the first run's plain fit, not judged
    assert p["criteria"]["grpo_slope"] == p["criteria"]["dr_grpo_slope"] == P.MET
    assert p["prompts"] == 2 and list(p["criteria"]) == list(P.PREREGISTERED_CRITERIA)


@pytest.mark.parametrize(
    "grpo_iv, status",
    [
        ((0.8, 1.2), P.MET),
        ((1.05, 1.3), P.NOT_MET),  # misses 1
        ((0.45, 1.2), P.NOT_MET),  # holds 1 but reaches below 0.5: too wide to tell σ from a constant
        ((0.9, 1.5), P.NOT_MET),  # the bound itself is outside the open interval (0.5, 1.5)
        ((1.0, 1.4), P.MET),  # the prediction on the edge of the interval counts as inside
    ],
)
def test_grpos_interval_must_hold_one_and_lie_inside_half_to_one_and_a_half(grpo_iv, status):
    assert _criteria(grpo_iv=grpo_iv)["grpo_slope"] == status


@pytest.mark.parametrize("dr_iv, status", [((1.8, 2.2), P.MET), ((1.4, 2.2), P.NOT_MET), ((1.6, 1.95), P.NOT_MET)])
def test_dr_grpos_interval_must_hold_two_and_lie_inside_one_and_a_half_to_two_and_a_half(dr_iv, status):
    assert _criteria(dr_iv=dr_iv)["dr_grpo_slope"] == status


def test_a_missing_interval_or_mode_is_not_testable_with_its_reason_never_met():
    p = P.evaluate(_cond(grpo_iv=None), commit=False)
    assert p["criteria"]["grpo_slope"] == P.NOT_TESTABLE and "interval" in p["criteria_detail"]["grpo_slope"]["reason"]
    cond = _cond()
    del cond["slope_by_mode"]["dr_grpo"]
    d = P.evaluate(cond, commit=False)["criteria_detail"]["dr_grpo_slope"]
    assert d["status"] == P.NOT_TESTABLE and "dr_grpo was not measured" in d["reason"]
    assert P.evaluate(cond, commit=False)["all_met"] is None


@pytest.mark.parametrize("cos, status", [((0.97, 0.95), P.MET), ((0.97, 0.89), P.NOT_MET), ((0.9, 0.9), P.MET)])
def test_the_median_cosine_must_reach_point_nine_in_every_mode(cos, status):
    assert _criteria(cos=cos)["cosine_median"] == status


def test_noise_is_not_testable_when_no_prompt_has_a_second_correct_answer():
    p = P.evaluate(_cond(tr_pos=(0.0, 1e-14), ratios=(3.0, 3.0)), commit=False)  # Σ₊ = 0 up to rounding
    d = p["criteria_detail"]["noise_ratio"]
    assert d["status"] == P.NOT_TESTABLE and "Σ₊ = 0" in d["reason"]
    assert p["noise_ratio_by_mode"]["grpo"]["value_all_cells"] == pytest.approx(3.0)  # shown, not judged
    assert p["all_met"] is None  # three met, one not testable: not "all met"


@pytest.mark.parametrize(
    "tr_pos, ratios, status",
    [
        ((1.0, 0.0), (1.1, 3.0), P.MET),  # only the first prompt exercises Σ₊: the second's ratio is not used
        ((1.0, 0.0), (1.3, 1.0), P.NOT_MET),
        ((0.5, 5.0), (0.5, 0.9), P.MET),  # 0.5 / 10.5 = 4.8 % < 5 %: the first prompt is left out
        ((0.6, 5.0), (0.7, 0.75), P.NOT_MET),  # 0.6 / 10.6 = 5.7 %: both count, median 0.725
    ],
)
def test_noise_is_judged_over_the_prompts_whose_sigma_plus_is_at_least_five_percent(tr_pos, ratios, status):
    assert _criteria(tr_pos=tr_pos, ratios=ratios)["noise_ratio"] == status


def test_all_met_is_false_as_soon_as_one_criterion_is_not_met():
    assert P.evaluate(_cond(tr_pos=(1.0, 1.0)), commit=False)["all_met"] is True
    assert P.evaluate(_cond(tr_pos=(1.0, 1.0), cos=(0.5, 0.99)), commit=False)["all_met"] is False


def test_the_docstring_states_the_coded_criteria():
    doc = " ".join(P.__doc__.split())
    (g_want, (g_lo, g_hi)), (d_want, (d_lo, d_hi)) = P.SLOPE_CRITERIA["grpo"], P.SLOPE_CRITERIA["dr_grpo"]
    assert f"contains {g_want:g} and lies inside ({g_lo:g}, {g_hi:g})" in doc
    assert f"contains {d_want:g} and lies inside ({d_lo:g}, {d_hi:g})" in doc
    assert f"is at least {P.COSINE_MEDIAN_MIN:g}" in doc
    assert f"lies in [{P.NOISE_RATIO_RANGE[0]:g}, {P.NOISE_RATIO_RANGE[1]:g}]" in doc
    assert f"at least {100 * P.NOISE_MIN_POSITIVE_SHARE:g} % of tr Σ₊ + tr Σ₋" in doc
    assert "95 % interval" in doc and "free intercept per" in doc and "U-statistic" in doc


def test_the_stored_run_is_read_not_refitted():
    cond = json.loads((ROOT / "results" / "lm-conditional-cpu" / "summary.json").read_text())["conditional"]
    p = P.evaluate(cond, commit=False)
    for mode in ("grpo", "dr_grpo"):
        w, sl = cond["slope_by_mode"][mode]["weighted"], p["slope_by_mode"][mode]
        assert (sl["value"], sl["interval"]) == (w["value"], w["interval"])
        assert sl["unweighted"]["value"] == cond["slope_by_mode"][mode]["value"]
    assert set(p["criteria"].values()) <= {P.MET, P.NOT_MET, P.NOT_TESTABLE}
    json.dumps(p)


# --- the commit that fixed the analysis ----------------------------------------------------------
def _git(root, *args):
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    """A git checkout holding three committed analysis files."""
    _git(tmp_path, "init", "-q")
    for name in ("a.py", "b.py", "c.py"):
        (tmp_path / name).write_text(f"# {name}\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "analysis")
    return tmp_path


def test_the_commit_is_the_last_that_changed_the_analysis_and_a_change_since_is_said(repo):
    files = [repo / n for n in ("a.py", "b.py", "c.py")]
    got = P.analysis_commit(files, repo)
    assert got["commit"] == _git(repo, "rev-parse", "HEAD") and got["modified"] is False and got["note"] == ""
    (repo / "b.py").write_text("# changed after the commit\n")
    changed = P.analysis_commit(files, repo)
    assert changed["modified"] is True and "differ" in changed["note"] and changed["sha256"] != got["sha256"]


def test_no_commit_while_a_file_of_the_analysis_is_uncommitted_or_outside_a_checkout(repo, tmp_path_factory):
    (repo / "new.py").write_text("# not committed\n")
    got = P.analysis_commit([repo / "a.py", repo / "new.py"], repo)
    assert got["commit"] is None and "new.py" in got["note"]
    plain = tmp_path_factory.mktemp("installed")  # a pip install: no git checkout around the files
    (plain / "a.py").write_text("# a.py\n")
    got = P.analysis_commit([plain / "a.py"], plain)
    assert (
        got["commit"] is None
        and "not run from a git checkout" in got["note"]
        and re.fullmatch("[0-9a-f]{64}", got["sha256"])
    )


def test_this_checkouts_analysis_commit_is_gits_answer():
    got = P.analysis_commit()
    committed = all(provenance.last_commit([p]) for p in P.ANALYSIS_FILES)
    assert got["commit"] == (provenance.last_commit(P.ANALYSIS_FILES) if committed else None)
    assert got["files"] == ["preregistered.py", "conditional_summary.py", "conditional_stats.py"]
