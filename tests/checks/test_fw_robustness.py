"""The audit's own robustness: what a new user's first targets do to it (issue 11, item 5)."""

from __future__ import annotations

import numpy as np
import pytest

from grpo_identity import dial as D
from grpo_identity.app.cli import main
from grpo_identity.checks import audit
from grpo_identity.checks.target import malformed

pytest_plugins = ["pytester"]

BAD_TARGETS = """
import numpy as np

def none(rewards, G):
    return None

def objects(rewards, G):
    return np.array([object()] * len(rewards))

def nan(rewards, G):
    return np.full(len(rewards), np.nan)

def tiny_eps(rewards, G):
    R = rewards.reshape(-1, G)
    return ((R - R.mean(1, keepdims=True)) / (R.std(1, keepdims=True) + 1e-8)).reshape(-1)
"""


@pytest.fixture
def targets(tmp_path):
    path = tmp_path / "targets.py"
    path.write_text(BAD_TARGETS)
    return str(path)


@pytest.mark.parametrize("name, words", [("none", "returned None"), ("objects", "returned an array of object")])
@pytest.mark.parametrize("isolate", [False, True])
def test_a_target_returning_none_or_objects_is_a_fail_finding_not_a_crash(targets, name, words, isolate):
    report = audit(f"{targets}:{name}", expect="grpo", max_examples=10, isolate=isolate)
    assert report.verdict == "fail"
    assert [f.property for f in report.findings] == ["probe"]
    assert words in report.findings[0].message and "not an array of advantages" in report.findings[0].message


def test_the_malformed_check_names_what_came_back():
    assert malformed(None) == "returned None, not an array of advantages"
    assert "elements of type str" in malformed(np.array(["a"], dtype=object))
    assert malformed(np.array([1.0])) is None and malformed(np.array([True]), "filter") is None


def test_a_target_returning_nan_gets_one_non_finite_finding_and_no_false_comparisons(targets):
    report = audit(f"{targets}:nan", expect="grpo", max_examples=20, isolate=False)
    assert report.verdict == "fail"
    assert [f.property for f in report.findings] == ["well_formed"]
    assert "non-finite advantage nan" in report.findings[0].message
    assert "up to inf" not in report.format() and "stateless" not in report.format()


def test_nan_only_in_silent_groups_is_reported_as_non_finite_there():
    def zero_over_zero(rewards, G):
        R = rewards.reshape(-1, G)
        with np.errstate(invalid="ignore", divide="ignore"):
            return ((R - R.mean(1, keepdims=True)) / R.std(1, keepdims=True)).reshape(-1)

    report = audit(zero_over_zero, expect="grpo", max_examples=20)
    assert [f.property for f in report.findings] == ["well_formed"]
    assert "rewards [0, 0]" in report.findings[0].message


def test_a_module_that_hangs_on_import_is_stopped_by_the_timeout(tmp_path):
    path = tmp_path / "hangs.py"
    path.write_text("import time\ntime.sleep(600)\n\ndef f(rewards, G):\n    return rewards\n")
    report = audit(f"{path}:f", max_examples=5, timeout=2)
    assert report.verdict == "fail"
    assert report.findings[0].message == "loading the target ran past the 2 s timeout (killed)"


def test_a_deviation_below_any_material_size_is_a_pass_with_a_note(targets):
    report = audit(f"{targets}:tiny_eps", expect="grpo", max_examples=20, isolate=False)
    assert report.verdict == "pass" and report.matches == "grpo"
    notes = [f for f in report.findings if f.property == "matches_preset"]
    assert [f.severity for f in notes] == ["note"] and "eps 1e-08 instead of 0" in notes[0].message


def test_a_material_deviation_stays_a_deviation():
    report = audit(lambda r, G: D.advantages(r, G, D.TRL), expect="grpo", max_examples=10)
    assert report.verdict == "deviation"


def test_the_cli_exits_1_on_a_target_returning_none_with_no_traceback(targets, capsys):
    code = main(["audit", f"{targets}:none", "--max-examples", "5"])
    captured = capsys.readouterr()
    assert code == 1 and "Traceback" not in captured.err + captured.out
    assert "returned None" in captured.out


FIXTURE_TESTS = """
import time
import numpy as np

def grpo(rewards, G):
    R = rewards.reshape(-1, G)
    live = np.ptp(R, 1, keepdims=True) > 0
    return np.divide(R - R.mean(1, keepdims=True), R.std(1, keepdims=True), out=np.zeros_like(R), where=live).reshape(-1)

def hangs(rewards, G):
    time.sleep(600)

def sign_flipped(rewards, G):
    return -grpo(rewards, G)

def test_defined_here_runs_isolated(grpo_identity):
    report = grpo_identity(grpo, expect="grpo", max_examples=10, isolate=True)
    assert report.verdict == "pass"

def test_hang_is_stopped(grpo_identity):
    grpo_identity(hangs, expect="grpo", max_examples=5, timeout=2)

def test_local_function_runs_here_with_a_note(grpo_identity):
    report = grpo_identity(lambda r, G: grpo(r, G), expect="grpo", max_examples=10)
    assert "isolate" in [f.property for f in report.findings]

def test_sign_flip(grpo_identity):
    grpo_identity(sign_flipped, expect="grpo", max_examples=10)
"""


@pytest.mark.slow
def test_the_fixture_isolates_test_file_functions_stops_hangs_and_puts_the_verdict_first(pytester):
    pytester.makepyfile(test_fixture=FIXTURE_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-ra")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["*ran past the 2 s timeout*"])
    result.stdout.fnmatch_lines(["FAILED test_fixture.py::test_sign_flip - *grpo_identity FAIL sign_flip*"])


def test_the_cli_timeout_bounds_the_import_of_a_hanging_module(tmp_path, capsys):
    path = tmp_path / "hangs_too.py"
    path.write_text("import time\ntime.sleep(600)\n\ndef f(rewards, G):\n    return rewards\n")
    assert main(["audit", f"{path}:f", "--timeout", "2", "--max-examples", "5"]) == 1
    assert "loading the target ran past the 2 s timeout (killed)" in capsys.readouterr().out


def test_the_edge_probes_report_what_the_target_does_with_remainders_tiny_spreads_and_singletons():
    def lenient(rewards, G):  # accepts a partial last group; G = 1 gives zeros
        out = np.zeros_like(rewards)
        n = rewards.size // G * G
        out[:n] = D.advantages(rewards[:n], G, D.GRPO) if G > 1 else 0.0
        return out

    notes = {f.property: f for f in audit(lenient, max_examples=10).findings}
    assert "the whole groups are unchanged" in notes["probe_remainder"].message
    assert "noise scaled up to full weight" in notes["probe_tiny_spread"].message
    assert "probe_singleton" not in notes  # all zeros: nothing to say


def test_a_partial_last_group_that_changes_the_whole_groups_fails():
    def batch_mean(rewards, G):  # centres on the batch mean, so the remainder moves every group
        return rewards - rewards.mean()

    from grpo_identity.checks.probes import remainder

    finding = remainder(batch_mean)
    assert finding.severity == "fail" and "changes the whole groups" in finding.message
