"""Loading and calling a target in this process (``checks.calls.target``): a spec checked before
anything starts (no such file, a folder, a FIFO, not Python, a near-miss function name), import
errors as ``TargetImportError``, the output checks (malformed, dtype, list, in place, shared
buffer) and exceptions as ``TargetError``."""

from __future__ import annotations

import os

import numpy as np
import pytest

import grpo_identity.checks as checks
from grpo_identity.checks.calls.target import (
    LocalTarget,
    TargetImportError,
    check_spec,
    load_target,
    malformed,
    output_issue,
)

GOOD = """
import numpy as np

LIMIT = 3
unset = None

def advantage(rewards, G):
    R = rewards.reshape(-1, G)
    return (R - R.mean(1, keepdims=True)).reshape(-1)
"""


@pytest.fixture
def target_file(tmp_path):
    path = tmp_path / "targets.py"
    path.write_text(GOOD)
    return str(path)


@pytest.mark.parametrize(
    "spec, word",
    [
        ("nope/missing.py:fn", "no such file"),
        ("no_such_module_xyz:fn", "No module named"),
        ("{file}:missing", "has no function"),
        ("{file}:LIMIT", r"'LIMIT' is not a function \(type int\)"),
        ("{file}:unset", r"'unset' is not a function \(type NoneType\)"),
        ("justaname", "neither"),
    ],
)
def test_import_errors_are_target_import_errors(target_file, spec, word):
    with pytest.raises(TargetImportError, match=word):
        checks.audit(spec.format(file=target_file), max_examples=5)


def test_a_spec_naming_no_python_file_is_refused_before_anything_is_opened(tmp_path):
    (tmp_path / "folder.py").mkdir()
    (tmp_path / "notes.txt").write_text("def fn(r, G):\n    return r\n")
    os.mkfifo(tmp_path / "pipe")  # opening it would block
    with pytest.raises(TargetImportError, match="no such file: "):
        check_spec(f"{tmp_path}/missing.py:fn")
    with pytest.raises(TargetImportError, match="folder.py is a folder: give FILE.py:FUNCTION"):
        check_spec(f"{tmp_path}/folder.py:fn")
    with pytest.raises(TargetImportError, match=r"pipe is not a regular file \(a FIFO"):
        check_spec(f"{tmp_path}/pipe:fn")
    with pytest.raises(TargetImportError, match=r"notes.txt is not a Python file \(.py\)"):
        check_spec(f"{tmp_path}/notes.txt:fn")


def test_a_near_miss_function_name_gets_a_suggestion(target_file):
    with pytest.raises(TargetImportError, match=r"has no function 'advantages'; did you mean 'advantage'\?"):
        load_target(f"{target_file}:advantages")
    assert load_target(f"{target_file}:advantage")(np.array([1.0, 0.0]), 2).tolist() == [0.5, -0.5]


CLASS_FILE = """
import numpy as np

class Estimators:
    @staticmethod
    def grpo(rewards, G):
        r = rewards.reshape(-1, G)
        return (r - r.mean(1, keepdims=True)).reshape(-1)

    @classmethod
    def dr(cls, rewards, G):
        return 2 * cls.grpo(rewards, G)

    def bound(self, rewards, G):
        return rewards

    def plain(rewards, G):  # no self: Python calls it on the class as a function
        return 3 * rewards

made = Estimators()
"""


def test_a_class_s_static_or_class_method_or_an_objects_method_is_named_by_its_dotted_path(tmp_path):
    path = tmp_path / "estimators.py"
    path.write_text(CLASS_FILE)
    expected = {
        "Estimators.grpo": [0.5, -0.5],
        "Estimators.dr": [1.0, -1.0],
        "Estimators.plain": [3.0, 0.0],
        "made.bound": [1.0, 0.0],
        "made.grpo": [0.5, -0.5],
    }
    for name, out in expected.items():
        assert load_target(f"{path}:{name}")(np.array([1.0, 0.0]), 2).tolist() == out, name
    refusals = {
        "Estimators": r"'Estimators' is a class: name one of its functions, Estimators.FUNCTION \(its static and class "
        r"methods: dr, grpo\)",
        "Estimators.bound": r"Estimators.bound is a method of Estimators's instances: give FILE.py:OBJECT.bound where "
        r"the file makes OBJECT = Estimators\(…\), or make bound a staticmethod",
        "Estimators.grop": r"estimators.py: Estimators has no function 'grop'; did you mean 'grpo'\?",
        "Estimators.": r"Estimators has no function 'Estimators.'",
        "made.bound.x": r"made.bound has no function 'x'",
    }
    for name, words in refusals.items():
        with pytest.raises(TargetImportError, match=words):
            load_target(f"{path}:{name}")


def test_the_call_is_named_as_the_spec_names_the_target(tmp_path):
    path = tmp_path / "estimators.py"
    path.write_text(
        CLASS_FILE + "\n\ndef _wrap(fn):\n    return lambda *a, **k: fn(*a, **k)\n\nwrapped = _wrap(Estimators.grpo)\n"
    )
    for name in ("Estimators.grpo", "wrapped"):
        for isolate in (True, False):  # in a child, and loaded here
            report = checks.audit(f"{path}:{name}", max_examples=5, isolate=isolate)
            assert report.to_dict()["target_info"]["call"]["call"].startswith(f"{name}(R, "), (name, isolate)


def test_a_module_that_exits_while_it_is_imported_is_an_import_error(tmp_path):
    path = tmp_path / "exits.py"
    path.write_text("import sys\nsys.exit(4)\n\ndef f(rewards, G):\n    return rewards\n")
    with pytest.raises(TargetImportError, match=r"called sys.exit\(4\)"):
        load_target(f"{path}:f")


INFO_FILE = """
def fn(rewards, G, lengths=None):
    return rewards

class Raising:
    def __call__(self, rewards, G):
        return rewards

    def __getattr__(self, name):
        raise RuntimeError(f"no {name}")

fn.grpo_identity_info = INFO
obj = Raising()
"""


@pytest.mark.parametrize(
    "info, name, said",
    [
        ("'step'", "fn", "the target's grpo_identity_info must be a dict, got str"),
        ("[('step', 1)]", "fn", "the target's grpo_identity_info must be a dict, got list"),
        ("None", "obj", "reading the target's grpo_identity_info raised RuntimeError: no grpo_identity_info"),
    ],
)
def test_a_declared_info_that_is_no_dict_is_a_one_line_usage_error_in_a_child_and_here(tmp_path, info, name, said):
    from grpo_identity.checks import audit

    path = tmp_path / "declares.py"
    path.write_text(INFO_FILE.replace("INFO", info))
    for isolate in (True, False):
        with pytest.raises(TargetImportError, match=said.replace("(", r"\(")):
            audit(f"{path}:{name}", max_examples=5, isolate=isolate)


def test_local_targets_turn_exceptions_into_target_errors():
    def boom(r, G):
        raise KeyError("x")

    with pytest.raises(checks.TargetError, match="KeyError"):
        LocalTarget(boom)(np.zeros(2), 2)


def test_the_malformed_check_names_what_came_back():
    assert malformed(None) == "returned None, not an array of advantages"
    assert "elements of type str" in malformed(np.array(["a"], dtype=object))
    assert malformed(np.array([1.0])) is None and malformed(np.array([True]), "filter") is None


def test_the_target_wrappers_see_dtype_lists_in_place_updates_and_shared_buffers():
    r = np.array([1.0, 0.0])
    assert output_issue(r, r.copy(), r - 0.5) is None
    assert output_issue(r, r.copy(), (r - 0.5).astype(np.float32)) is None  # judged at float32's precision
    assert "floating point" in output_issue(r, r.copy(), np.array([1, -1]))
    assert "list" in output_issue(r, r.copy(), [0.5, -0.5])
    assert "in place" in output_issue(r, r - 0.5, r - 0.5)
    buf = np.empty(2)

    def shared(rewards, G):
        buf[:] = rewards - rewards.mean()
        return buf

    t = LocalTarget(shared)
    assert t.call(r, 2).overwrite is None
    assert t.call(r + 1.0, 2).overwrite is None  # same values: nothing seen overwritten
    assert "shared buffer" in t.call(np.array([0.0, 1.0]), 2).overwrite


def test_a_check_of_the_output_that_raises_is_a_finding_not_a_crash_of_the_audit():
    """The output checks run inside the call's guard: what raises there comes back as Raised, in this process and in
    a child alike (a child whose check raised used to end, a crash instead of a finding)."""
    import numpy as np

    from grpo_identity.checks.calls import protocol as M
    from grpo_identity.checks.calls.target import OutputWatch, call_once

    class Broken(OutputWatch):
        def check(self, out):
            raise RuntimeError("the output cannot be compared")

    reply = call_once(lambda rewards, G: np.zeros(len(rewards)), np.ones(4), 2, (), "advantage", Broken())
    assert isinstance(reply, M.Raised) and "the output cannot be compared" in reply.message
