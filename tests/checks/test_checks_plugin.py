"""The pytest plugin, run through ``pytester``: one-line audits, the marker, the header."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

import pytest

pytest_plugins = ["pytester"]

GOOD = """
import numpy as np

def grpo(rewards, G):
    R = rewards.reshape(-1, G)
    live = np.ptp(R, 1, keepdims=True) > 0
    return np.divide(R - R.mean(1, keepdims=True), R.std(1, keepdims=True), out=np.zeros_like(R), where=live).reshape(-1)

def sign_flipped(rewards, G):
    return -grpo(rewards, G)

def bessel(rewards, G):
    R = rewards.reshape(-1, G)
    live = np.ptp(R, 1, keepdims=True) > 0
    return np.divide(R - R.mean(1, keepdims=True), R.std(1, ddof=1, keepdims=True), out=np.zeros_like(R), where=live).reshape(-1)
"""


def test_the_plugin_is_registered_as_a_pytest11_entry_point():
    names = {e.name: e.value for e in entry_points(group="pytest11")}
    assert names.get("grpo_identity") == "grpo_identity.checks.plugin"


def test_loading_the_plugin_imports_nothing_heavy():
    code = "import sys, grpo_identity.checks.plugin; bad = [m for m in ('numpy', 'hypothesis', 'torch', 'sympy') if m in sys.modules]; print(bad)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


@pytest.mark.slow
def test_a_one_line_check_passes_a_correct_function_and_fails_a_sign_flip(pytester):
    pytester.makepyfile(impl=GOOD)
    pytester.makepyfile(
        """
        import impl

        def test_good(grpo_identity):
            report = grpo_identity.check(impl.grpo, expect="grpo", max_examples=30)
            assert report.verdict == "pass"

        def test_bad(grpo_identity):
            grpo_identity(impl.sign_flipped, expect="grpo", max_examples=30)
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*verdict: FAIL*", "*two_valued_per_group*wrong sign*"])


@pytest.mark.slow
def test_a_deviation_fails_unless_allowed_and_the_marker_sets_defaults(pytester):
    pytester.makepyfile(impl=GOOD)
    pytester.makepyfile(
        """
        import pytest
        import impl

        @pytest.mark.grpo_identity(expect="grpo", max_examples=20)
        def test_strict(grpo_identity):
            grpo_identity(impl.bessel)

        @pytest.mark.grpo_identity(expect="grpo", max_examples=20, allow_deviation=True)
        def test_lenient(grpo_identity):
            assert grpo_identity(impl.bessel).verdict == "deviation"
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*verdict: DEVIATION*", "*ddof 1 instead of 0 (Bessel)*"])


def test_an_unknown_marker_option_is_a_usage_error(pytester):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.grpo_identity(expected="grpo")
        def test_x(grpo_identity):
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown option(s) expected*allowed: expect*"])


def test_a_bad_marker_value_is_a_usage_error(pytester):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.grpo_identity(kind="filters")
        def test_x(grpo_identity):
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*kind must be one of*"])


def test_the_report_header_names_the_hypothesis_settings(pytester):
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--grpo-identity-max-examples", "77")
    result.stdout.fnmatch_lines(["grpo-identity: max_examples=77, derandomize=True*"])
    result.assert_outcomes(passed=1)
