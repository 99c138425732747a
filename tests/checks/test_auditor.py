"""``audit()`` end to end on functions and presets (``checks.auditor``): filters, bad options, and
what a target does to the audit — it crashes, hangs, raises on some inputs, returns None or
objects, leaves a residue on silent groups — each a clear finding, never a crashed audit."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from grpo_identity import dial as D
from grpo_identity.checks import AuditOptions, audit, resolve, run
from grpo_identity.checks.infer import infer_keep_rule

TARGETS = textwrap.dedent(
    """
    import os, time
    import numpy as np

    def good(rewards, G):
        R = rewards.reshape(-1, G)
        live = np.ptp(R, 1, keepdims=True) > 0
        return np.where(live, R - R.mean(1, keepdims=True), 0.0).reshape(-1)

    def hang(rewards, G):
        time.sleep(60)

    def crash(rewards, G):
        os._exit(7)

    def raises_sometimes(rewards, G):
        if G % 2 and G > 3:
            raise RuntimeError("odd")
        return good(rewards, G)

    def none(rewards, G):
        return None

    def objects(rewards, G):
        return np.array([object()] * len(rewards))
    """
)


@pytest.fixture
def target_file(tmp_path):
    path = tmp_path / "targets.py"
    path.write_text(TARGETS)
    return str(path)


def dial_fn(d):
    return lambda r, G: D.advantages(r, G, d)


def grpo_with_a_silent_residue(rewards, G):
    """Paper GRPO, except that silent groups get ±1e-12 residues summing to 0 (on {0, 1} rewards too)."""
    R = rewards.reshape(-1, G)
    live = np.ptp(R, 1, keepdims=True) > 0
    A = np.divide(R - R.mean(1, keepdims=True), R.std(1, keepdims=True), out=np.zeros_like(R), where=live)
    residue = 1e-12 * (np.arange(G) - (G - 1) / 2)  # (G,): sums to 0, so zero-sum holds
    return np.where(live, A, residue).reshape(-1)


def test_audit_takes_its_options_by_keyword_and_run_takes_a_resolved_spec():
    with pytest.raises(TypeError):
        audit(dial_fn(D.GRPO), "grpo")  # type: ignore[misc]
    report = run(resolve("dr_grpo"), AuditOptions(expect="dr_grpo", max_examples=10))
    assert (report.verdict, report.matches, report.expected, report.target) == ("pass", "dr_grpo", "dr_grpo", "dr_grpo")
    assert report.target_info["preset"] == "dr_grpo" and report.seconds > 0


@pytest.mark.parametrize("bad", [{"kind": "filters"}, {"max_examples": 0}, {"timeout": -1}, {"expect": "ppo"}])
def test_audit_rejects_bad_options_in_one_line(bad):
    with pytest.raises(ValueError):
        audit(dial_fn(D.GRPO), **bad)


def test_audit_of_a_filter_preset_passes_and_a_keep_all_filter_fails_for_dapo():
    assert audit("dapo", kind="filter", max_examples=20, isolate=False).verdict == "pass"
    report = audit("grpo", kind="filter", expect="dapo", max_examples=20, isolate=False)
    assert report.verdict == "fail" and report.findings[0].property == "keeps_groups_with_nonzero_std"


def _keep_mask_with_a_threshold(rewards, group_size=None, dial=D.DAPO, **kw):
    """keep_mask with silence tested as max − min < 1e-6: a bug the filter audit must see."""
    R = np.asarray(rewards, dtype=np.float64).reshape(-1, group_size)
    return np.ptp(R, 1) >= 1e-6 if dial.keep == "nonzero_std" else np.ones(R.shape[0], dtype=bool)


def test_the_filter_audit_catches_a_bug_in_the_dials_own_keep_mask(monkeypatch):
    def the_dials_filter(r, G):
        return D.keep_mask(r, G, D.DAPO)  # looked up at call time: the threshold patched in below

    assert audit(the_dials_filter, kind="filter", expect="dapo", max_examples=20).verdict == "pass"
    monkeypatch.setattr(D, "keep_mask", _keep_mask_with_a_threshold)
    keep, why = infer_keep_rule(the_dials_filter)  # a threshold: σ > 0 kept with a tolerance, named
    assert keep == "nonzero_std" and "max − min ≤ about" in why
    report = audit(the_dials_filter, kind="filter", expect="dapo", max_examples=20)
    assert report.verdict == "deviation" and report.findings[-1].property == "keep_tolerance", report.format()
    assert report.inferred.keep_measure == "max − min" and 3e-7 < report.inferred.keep_tolerance <= 1e-6


def test_a_residue_on_silent_binary_groups_fails_the_audit_by_the_silent_groups_property():
    report = audit(grpo_with_a_silent_residue, expect="grpo", max_examples=100)
    assert report.verdict == "fail"
    silent = [f for f in report.findings if f.property == "silent_groups_exactly_zero"]
    assert silent and "instead of exactly 0" in silent[0].message, report.format()
    assert "binary NOT exactly 0" in report.format()


# --- targets that misbehave when called: findings --------------------------------------------------
def test_a_crashing_target_fails_with_its_exit_code(target_file):
    report = audit(f"{target_file}:crash", max_examples=10)
    assert report.verdict == "fail" and "exit code 7" in report.findings[0].message


@pytest.mark.slow
def test_a_hanging_target_times_out_and_the_audit_fails_clearly(target_file):
    report = audit(f"{target_file}:hang", timeout=1.0, max_examples=10)
    assert report.verdict == "fail" and "timeout" in report.findings[0].message


@pytest.mark.slow
def test_an_exception_in_the_target_is_a_finding_with_a_shrunk_example(target_file):
    report = audit(f"{target_file}:raises_sometimes", max_examples=200)
    assert report.verdict == "fail"
    f = next(f for f in report.findings if "odd" in f.message)
    assert f.counterexample["group_size"] == 5 and f.counterexample["n_groups"] == 1  # shrunk


@pytest.mark.parametrize("name, words", [("none", "returned None"), ("objects", "returned an array of object")])
@pytest.mark.parametrize("isolate", [False, True])
def test_a_target_returning_none_or_objects_is_a_fail_finding_not_a_crash(target_file, name, words, isolate):
    report = audit(f"{target_file}:{name}", expect="grpo", max_examples=10, isolate=isolate)
    assert report.verdict == "fail"
    assert [f.property for f in report.findings] == ["probe"]
    assert words in report.findings[0].message and "not an array of advantages" in report.findings[0].message
