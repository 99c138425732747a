"""The target in a child interpreter (``checks.calls.child``): calls answered while the target prints,
a timeout on every call and on the load, a load that hangs or crashes as ``TargetImportError``,
the user's environment rather than pytest's, output capped per target, warm children reused by
the next audit of a preset with the same results as cold ones, and nothing the target started
outliving the audit (a pass, a fail, a timeout, Ctrl-C, the audit killed outright)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from grpo_identity.checks import audit
from grpo_identity.checks.calls.child import (
    FREEZE_AFTER_IMPORTS,
    FULL_COLLECT_EVERY,
    OUTPUT_LIMIT,
    TEMP_PREFIX,
    ChildTarget,
    close_warm_children,
    warm_children,
)
from grpo_identity.checks.calls.target import TargetImportError, TargetTimeout

TARGETS = textwrap.dedent(
    """
    import time
    import numpy as np

    def good(rewards, G):
        R = rewards.reshape(-1, G)
        live = np.ptp(R, 1, keepdims=True) > 0
        return np.where(live, R - R.mean(1, keepdims=True), 0.0).reshape(-1)

    def chatty(rewards, G):
        print("debug output on stdout must not break the channel")
        return good(rewards, G)

    def loud(rewards, G):
        print("x" * 100_000, flush=True)
        return good(rewards, G)

    def hang(rewards, G):
        time.sleep(60)
    """
)


#: a correct target: the dial's GRPO
GRPO_SOURCE = """
from grpo_identity import dial as D

def adv(rewards, G):
    return D.advantages(rewards, G, D.GRPO)
"""


@pytest.fixture
def target_file(tmp_path):
    path = tmp_path / "targets.py"
    path.write_text(TARGETS)
    return str(path)


def test_a_child_target_answers_calls_even_when_it_prints(target_file):
    with ChildTarget(f"{target_file}:chatty", timeout=20) as t:
        assert t(np.array([1.0, 0.0]), 2).tolist() == [0.5, -0.5]


@pytest.mark.slow
def test_a_call_that_hangs_is_stopped_by_the_timeout(target_file):
    with ChildTarget(f"{target_file}:hang", timeout=0.5) as t, pytest.raises(TargetTimeout):
        t(np.array([1.0, 0.0]), 2)


def test_a_module_that_hangs_on_import_is_stopped_by_the_timeout(tmp_path):
    path = tmp_path / "hangs.py"
    path.write_text("import time\ntime.sleep(600)\n\ndef f(rewards, G):\n    return rewards\n")
    with pytest.raises(TargetImportError, match=r"^loading the target ran past the 2 s timeout \(killed\)$"):
        audit(f"{path}:f", max_examples=5, timeout=2)


def test_a_module_that_crashes_on_import_is_an_import_error_with_its_exit_code(tmp_path):
    path = tmp_path / "crashes.py"
    path.write_text("import os\nos._exit(3)\n\ndef f(rewards, G):\n    return rewards\n")
    with pytest.raises(TargetImportError, match="exit code 3"):
        audit(f"{path}:f", max_examples=5, timeout=20)


def test_the_child_does_not_run_under_pytest_s_marker_so_it_sees_the_users_environment(tmp_path, monkeypatch):
    path = tmp_path / "envtarget.py"
    path.write_text(
        "import os, numpy as np\n"
        "def fn(r, G):\n"
        "    return np.full(len(r), 1.0 if 'PYTEST_CURRENT_TEST' in os.environ else 0.0)\n"
    )
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/x.py::y (call)")  # as pytest sets it during a test
    with ChildTarget(f"{path}:fn", timeout=20) as t:
        # the framework's own "under pytest" branches stay off
        assert t(np.array([1.0, 0.0]), 2).tolist() == [0.0, 0.0]


def test_a_targets_output_goes_to_stderr_up_to_the_limit_and_the_rest_is_counted(target_file, capsys):
    printed = 100_001  # the line and its newline
    with ChildTarget(f"{target_file}:loud", timeout=20) as t:
        t(np.array([1.0, 0.0]), 2)
        deadline = time.monotonic() + 20
        while t._proc.output.dropped < printed - OUTPUT_LIMIT and time.monotonic() < deadline:
            time.sleep(0.05)
    out, err = capsys.readouterr()
    assert "x" not in out  # stdout carries --json
    assert err.count("x") == OUTPUT_LIMIT
    assert f"[{printed - OUTPUT_LIMIT:,} more bytes of the target's output not shown]" in err


def test_a_preset_is_audited_in_a_warm_child_that_the_next_audit_reuses(target_file, own_warm_pool):
    close_warm_children()
    audit(f"{target_file}:good", max_examples=5)  # someone else's code: a child of its own, ended after
    assert warm_children() == {}
    audit("grpo", max_examples=5)
    audit("dr_grpo", max_examples=5)
    assert warm_children() == {sys.executable: 1}  # one child served both
    close_warm_children()
    assert warm_children() == {}


# --- nothing outlives the audit ----------------------------------------------------------------
def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie awaiting its reaper counts as ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _ended(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not _running(pid):
            return True
        time.sleep(0.1)
    return False


def _written(path, enough=bool, within: float = 60.0) -> str:
    """The text of ``path`` once ``enough(text)`` holds (a file another process writes)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if enough(text):
            return text
        time.sleep(0.1)
    raise AssertionError(f"{path} was not written")


def _pids(path, n: int = 1) -> list[int]:
    return [int(p) for p in _written(path, lambda text: len(text.split()) >= n).split()]


def _target(tmp_path, body: str, name: str = "starts.py"):
    """A target file that starts a sleeper (and records its own pid and the sleeper's) on import."""
    pidfile = tmp_path / "pids.txt"
    head = f"""
import os, subprocess, sys
_sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
with open({str(pidfile)!r}, "a") as _fh:
    _fh.write(f"{{os.getpid()}} {{_sleeper.pid}}\\n")
"""
    path = tmp_path / name
    path.write_text(head + GRPO_SOURCE + textwrap.dedent(body))
    return path, pidfile


@pytest.mark.parametrize(
    "fn, verdict",
    [("adv", "pass"), ("broken", "fail"), ("hangs", "fail")],
    ids=["pass", "fail", "timeout"],
)
def test_what_a_target_starts_on_import_ends_with_the_audit(tmp_path, fn, verdict):
    body = """
    def broken(rewards, G):
        return adv(rewards, G) + 0.5

    def hangs(rewards, G):
        import time
        time.sleep(300)
    """
    path, pidfile = _target(tmp_path, body)
    report = audit(f"{path}:{fn}", max_examples=10, timeout=3)
    assert report.verdict == verdict
    child, sleeper = _pids(pidfile, 2)
    assert _ended(sleeper) and _ended(child)


def test_ctrl_c_ends_the_audit_with_130_and_everything_its_target_started(tmp_path):
    path, pidfile = _target(tmp_path, "def hangs(rewards, G):\n    import time\n    time.sleep(300)\n")
    cmd = [sys.executable, "-m", "grpo_identity", "audit", f"{path}:hangs", "--timeout", "300"]
    # SIGINT at its default, as a terminal starts the command, also where this test run ignores it (nohup, `cmd &`)
    default_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    child, sleeper = _pids(pidfile, 2)
    time.sleep(1.0)  # the first call is under way
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.strip().splitlines()[-1].endswith("interrupted")
    assert _ended(sleeper) and _ended(child)


def test_an_audit_killed_outright_leaves_no_child_running_and_no_temporary_folder(tmp_path):
    """The child, busy loading its target, finds its parent gone; what the target printed waits in its buffer for a
    reader that no longer exists (output buffered, as where PYTHONUNBUFFERED is not set)."""
    noted = tmp_path / "temp.txt"
    body = f"import tempfile, time\nprint('loading')\nopen({str(noted)!r}, 'w').write(tempfile.mkdtemp())\n"
    path, pidfile = _target(tmp_path, body + "time.sleep(300)\n", name="hangs_on_import.py")
    cmd = [sys.executable, "-m", "grpo_identity", "audit", f"{path}:adv", "--timeout", "300"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    child, sleeper = _pids(pidfile, 2)
    made = Path(_written(noted))  # a folder the target made in the child's temporary folder
    assert made.parent.name.startswith(TEMP_PREFIX) and made.is_dir()
    proc.kill()  # SIGKILL: the audit cannot clean up; its child notices it is orphaned
    proc.wait(10)
    assert _ended(child) and _ended(sleeper)
    assert not made.parent.exists() and not Path(f"{made.parent}-ended").exists()


def test_an_idle_child_whose_parent_is_killed_outright_ends_and_removes_its_temporary_folder():
    code = (
        "import json, time; from grpo_identity.checks.calls.child import ChildProcess; p = ChildProcess(); "
        "print(json.dumps([p._proc.pid, p.temp]), flush=True); time.sleep(300)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child, temp = json.loads(parent.stdout.readline())
    assert Path(temp).is_dir()
    parent.kill()  # the child waits for its next message: it reads the end of its pipe
    parent.wait(10)
    parent.stdout.close()
    assert _ended(child)
    assert not Path(temp).exists() and not Path(f"{temp}-ended").exists()


def test_sys_exit_in_a_target_is_a_finding_that_says_so(tmp_path):
    path = tmp_path / "exits.py"
    path.write_text(GRPO_SOURCE + "\ndef quits(rewards, G):\n    import sys\n    sys.exit(0)\n")
    report = audit(f"{path}:quits", max_examples=5)
    assert report.verdict == "fail"
    assert "sys.exit(0)" in report.findings[0].message and "exit code None" not in report.format()


def test_a_target_imports_a_module_from_its_own_folder(tmp_path):
    (tmp_path / "helper_for_target.py").write_text(GRPO_SOURCE)
    path = tmp_path / "uses_helper.py"
    path.write_text("from helper_for_target import adv\n")
    assert audit(f"{path}:adv", max_examples=10).verdict == "pass"


def _without_seconds(d):
    d = {k: v for k, v in d.items() if k != "seconds"}
    if d.get("advantage"):
        d["advantage"] = _without_seconds(d["advantage"])
    return d


def test_two_audits_in_one_warm_child_give_the_json_of_two_cold_ones(own_warm_pool):
    targets = ["grpo", "preset:trl", "dapo"]
    close_warm_children()
    warm = [_without_seconds(audit(t, max_examples=40).to_dict()) for t in targets]
    assert warm_children() == {sys.executable: 1}  # one child served all three
    cold = []
    for t in targets:
        close_warm_children()
        cold.append(_without_seconds(audit(t, max_examples=40).to_dict()))
    assert json.dumps(warm, sort_keys=True) == json.dumps(cold, sort_keys=True)


FROZEN_SOURCE = """
import gc
import sys
import weakref

import numpy as np

gc.disable()  # only the child's own collections run: a cycle lives until one
BIG = [[i] for i in range(50_000)]  # tracked objects this load makes
REFS = sys.__dict__.setdefault("probe_refs", [])  # one list for every load of these files in the child
KEPT = sys.__dict__.setdefault("probe_kept", [])  # what a framework's cache would hold from load to load


class Node:
    pass


node = Node()
node.me = node  # a cycle this load leaves behind
REFS.append(weakref.ref(node))
del node
HELD = Node()  # alive while this load's module is
REFS.append(weakref.ref(HELD))
KEPT[:] = [Node()]  # alive until the next load replaces it: a cycle then
KEPT[0].me = KEPT[0]
REFS.append(weakref.ref(KEPT[0]))


def probe(rewards, G):
    out = np.zeros(len(rewards))
    out[0] = gc.get_freeze_count()
    out[1] = sum(ref() is not None for ref in REFS)  # what the loads so far made and the collector did not free
    out[2] = sum(name.startswith("_grpo_identity_target_") for name in sys.modules)  # target files imported
    return out
"""


def test_a_warm_child_freezes_a_first_or_framework_load_and_frees_what_died_frozen_at_a_full_pass(
    tmp_path, own_warm_pool
):
    plain = [tmp_path / f"target_{i}.py" for i in range(FULL_COLLECT_EVERY + 3)]  # each load a file of its own
    for path in plain:
        path.write_text(FROZEN_SOURCE)
    framework = tmp_path / "framework.py"  # a load that imports more modules than a warm load does: a framework's
    framework.write_text(f"import sys, types\nsys.modules.update({{f'fake_{{i}}': types.ModuleType('x') for i in "
                         f"range({FREEZE_AFTER_IMPORTS + 1})}})\n{FROZEN_SOURCE}")  # fmt: skip
    rewards = np.array([1.0, 0.0, 1.0, 0.0])
    frozen, alive, files = [], [], []
    for path in [*plain[:-1], framework, plain[-1]]:
        target = ChildTarget(f"{path}:probe", warm=True)
        count, live, modules = target(rewards, 2)[:3]
        target.close()
        frozen.append(count)
        alive.append(live)
        files.append(modules)
    assert warm_children() == {sys.executable: 1}  # one child served every load
    assert files == [1] * len(files)  # a target file's module is dropped with its target
    # the first load's objects, and a framework's, are skipped by the collector during their calls; a warm load's
    # are not frozen (what is frozen stays as the first unload left it), so its unload collects them without a
    # full pass
    assert frozen[0] >= 50_000 and frozen[-2] - frozen[-3] >= 50_000
    assert len(set(frozen[1 : FULL_COLLECT_EVERY + 1])) == 1, frozen
    # each load leaves a cycle, its module and what it kept (a cycle once the next load replaces it): all freed at
    # an unload, but for what a full pass froze while kept, which waits for the next full pass (the one after the
    # first unload's comes FULL_COLLECT_EVERY unloads later): what is alive stays the same from load to load
    steady = alive[2]
    assert alive[2 : FULL_COLLECT_EVERY + 1] == [steady] * (FULL_COLLECT_EVERY - 1), alive
    assert alive[FULL_COLLECT_EVERY + 1 :] == [steady - 1, steady, steady - 1], alive


def test_a_framework_imported_by_a_load_that_failed_is_frozen_at_that_loads_unload(tmp_path, own_warm_pool):
    """The parent drops a target that failed to load (an Unload): its imports count as a framework's."""
    plain, failing = tmp_path / "plain.py", tmp_path / "failing.py"
    plain.write_text(FROZEN_SOURCE)
    half = f"sys.modules.update({{f'half_{{i}}': types.ModuleType('x') for i in range({FREEZE_AFTER_IMPORTS + 1})}})"
    failing.write_text(f"import sys, types\n{half}\nsys.half = [[i] for i in range(50_000)]\nraise ImportError('x')\n")
    rewards = np.array([1.0, 0.0, 1.0, 0.0])
    frozen = []
    for path in (plain, plain, failing, plain):
        try:
            target = ChildTarget(f"{path}:probe", warm=True)
        except TargetImportError:
            continue  # a failed load's child goes back to the pool, its imports with it
        frozen.append(target(rewards, 2)[0])
        target.close()
    assert warm_children() == {sys.executable: 1}
    assert frozen[2] - frozen[1] >= 50_000  # what the half-imported framework holds is frozen after all
