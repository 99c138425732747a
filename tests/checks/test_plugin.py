"""The pytest plugin (``checks.plugin``), run through ``pytester``: one-line audits, the marker
and its options (a bad one fails only its own test), the fixture's isolation and timeout, the
report header, the entry point and a light import."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

import pytest

from grpo_identity.checks.plugin import MARKER_OPTIONS

pytest_plugins = ["pytester"]

GOOD = """
import numpy as np

def grpo(rewards, G):
    R = rewards.reshape(-1, G)
    live = np.ptp(R, 1, keepdims=True) > 0
    A = np.divide(R - R.mean(1, keepdims=True), R.std(1, keepdims=True), out=np.zeros_like(R), where=live)
    return A.reshape(-1)

def sign_flipped(rewards, G):
    return -grpo(rewards, G)

def bessel(rewards, G):
    R = rewards.reshape(-1, G)
    live = np.ptp(R, 1, keepdims=True) > 0
    A = np.divide(R - R.mean(1, keepdims=True), R.std(1, ddof=1, keepdims=True), out=np.zeros_like(R), where=live)
    return A.reshape(-1)
"""


def test_the_plugin_is_registered_as_a_pytest11_entry_point():
    names = {e.name: e.value for e in entry_points(group="pytest11")}
    assert names.get("grpo_identity") == "grpo_identity.checks.plugin"


def test_loading_the_plugin_imports_nothing_heavy():
    code = (
        "import sys, grpo_identity.checks.plugin; "
        "print([m for m in ('numpy', 'hypothesis', 'torch', 'sympy') if m in sys.modules])"
    )
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
    # a session in a process of its own, as a user runs it: an in-process run drops from sys.modules
    # the audit modules it imported first, while grpo_identity.checks keeps the names it loaded from them
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
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
    # a session in a process of its own, as a user runs it: an in-process run drops from sys.modules
    # the audit modules it imported first, while grpo_identity.checks keeps the names it loaded from them
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*verdict: DEVIATION*", "*ddof 1 instead of 0 (Bessel)*"])


def test_a_marker_with_an_unknown_option_fails_its_own_test_and_the_session_runs_on(pytester):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.grpo_identity(expected="grpo")
        def test_misspelt(grpo_identity):
            pass

        @pytest.mark.grpo_identity("grpo")
        def test_positional(grpo_identity):
            pass

        def test_other():
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    allowed = ", ".join(MARKER_OPTIONS)
    result.stdout.fnmatch_lines([f"*the grpo_identity marker got unknown option(s) expected; allowed: {allowed}*"])
    result.stdout.fnmatch_lines(["*the grpo_identity marker takes keyword options only, got ('grpo',)*"])


def test_a_bad_marker_value_fails_its_own_test_with_the_options_message(pytester):
    pytester.makepyfile(impl=GOOD)
    pytester.makepyfile(
        """
        import pytest
        import impl

        @pytest.mark.grpo_identity(kind="filters")
        def test_kind(grpo_identity):
            grpo_identity(impl.grpo)

        @pytest.mark.grpo_identity(max_examples=0)
        def test_examples(grpo_identity):
            grpo_identity(impl.grpo)

        def test_other():
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        ["*grpo_identity: kind must be one of advantage, filter, row-filter, got 'filters' (options: expect*"]
    )
    result.stdout.fnmatch_lines(["*grpo_identity: max_examples must be an integer from 1 to 10,000, got 0 (options: *"])


def test_the_report_header_names_the_hypothesis_settings(pytester):
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--grpo-identity-max-examples", "77")
    result.stdout.fnmatch_lines(["grpo-identity: max_examples=77, derandomize=True*"])
    result.assert_outcomes(passed=1)


FIXTURE_TESTS = """
import time
import numpy as np

def grpo(rewards, G):
    R = rewards.reshape(-1, G)
    live = np.ptp(R, 1, keepdims=True) > 0
    A = np.divide(R - R.mean(1, keepdims=True), R.std(1, keepdims=True), out=np.zeros_like(R), where=live)
    return A.reshape(-1)

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


@pytest.mark.slow
def test_a_spec_whose_module_exits_on_import_fails_with_the_verdict_first_and_no_traceback(pytester):
    pytester.makepyfile(exits_on_import="import os\nos._exit(3)\n\ndef adv(rewards, G):\n    return rewards\n")
    pytester.makepyfile(test_it="def test_it(grpo_identity):\n    grpo_identity('exits_on_import.py:adv')\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*_ test_it _*", "grpo_identity FAIL exits_on_import.py:adv: the target could not be*"]
    )
    assert "TargetImportError" not in result.stdout.str() and "Traceback" not in result.stdout.str()


def test_a_bad_marker_value_fails_its_test_even_when_the_fixture_is_never_called(pytester):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.grpo_identity(max_examples=0)
        def test_unused(grpo_identity):
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*grpo_identity: max_examples must be an integer from 1 to 10,000, got 0*"])


@pytest.mark.slow
def test_the_marker_and_check_take_a_declared_coefficient_and_a_bad_formula_fails_its_own_test(pytester):
    pytester.makepyfile(
        impl=GOOD
        + "\ndef over_g(rewards, G):\n    return grpo(rewards, G) * rewards.reshape(-1, G).std(1).repeat(G) / G\n"
    )
    pytester.makepyfile(
        """
        import pytest
        import impl

        @pytest.mark.grpo_identity(expect="c=sigma**2/G", max_examples=10)
        def test_formula(grpo_identity):
            assert grpo_identity(impl.over_g).matches == "c=sigma**2/G"

        def test_callable(grpo_identity):
            report = grpo_identity(impl.over_g, expect=lambda k, G: k * (G - k) / G**3, max_examples=10)
            assert report.verdict == "pass"

        def test_missed(grpo_identity):
            grpo_identity(impl.grpo, expect="c=sigma**2/G", max_examples=10)

        @pytest.mark.grpo_identity(expect="c=__import__('os')")
        def test_bad(grpo_identity):
            grpo_identity(impl.grpo)
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["*grpo_identity FAIL grpo (expected c=sigma**2/G): matches_declared*"])
    result.stdout.fnmatch_lines(["*grpo_identity: expect must be a preset name or c=FORMULA*__import__ is not an*"])
