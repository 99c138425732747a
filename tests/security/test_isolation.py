"""What an audited target, or the folder an audit runs from, can do to the caller (issue 29's fuzz, as tests):
the caller's folder is never on the child's import path unless the target lives there."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: the installed command (``python -m`` from a folder would import that folder's grpo_identity/ before any of ours)
CLI = [str(Path(sys.executable).parent / "grpo-identity")]
ADV = """
import numpy as np


def grpo(rewards, G):
    r = np.asarray(rewards, dtype=float).reshape(-1, G)
    live = np.ptp(r, axis=1, keepdims=True) > 0  # a silent group (every reward equal) gets no push
    sd = np.where(live, r.std(axis=1, keepdims=True), 1.0)
    return np.where(live, (r - r.mean(axis=1, keepdims=True)) / sd, 0.0).reshape(-1)
"""


def _planted(folder: Path) -> Path:
    """A folder holding a numpy.py and a grpo_identity/ package that leave a marker when imported."""
    marker = folder / "imported-from-the-callers-folder"
    body = f"open({str(marker)!r}, 'a').write(__name__ + chr(10))\nraise ImportError('planted')\n"
    (folder / "numpy.py").write_text(body)
    (folder / "grpo_identity").mkdir()
    (folder / "grpo_identity" / "__init__.py").write_text(body)
    return marker


@pytest.mark.parametrize("where", ["file", "module", "preset"])
def test_modules_planted_in_the_callers_folder_are_never_imported_by_the_audit(tmp_path, where):
    caller = tmp_path / "caller"
    caller.mkdir()
    marker = _planted(caller)
    other = tmp_path / "code"
    other.mkdir()
    (other / "my_adv.py").write_text(ADV)
    # a file elsewhere, a module found through PYTHONPATH (the user's own setting, kept), a built-in preset
    target = {"file": f"{other / 'my_adv.py'}:grpo", "module": "my_adv:grpo", "preset": "preset:grpo"}[where]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if where == "module":
        env["PYTHONPATH"] = str(other)
    res = subprocess.run(
        [*CLI, "audit", target, "--max-examples", "5"], cwd=caller, capture_output=True, text=True, timeout=300, env=env
    )
    assert not marker.exists(), marker.read_text()
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]


# --- --out: atomic, never through a device, a FIFO or a link ----------------------------------------
def _log_dir(tmp_path: Path) -> Path:
    """A plain TRL log the diagnose command reads (the fixture of its own tests)."""
    logs = tmp_path / "run"
    logs.mkdir()
    (logs / "trainer_state.json").write_text(
        (ROOT / "tests" / "app" / "data" / "trl-1.16.0.trainer_state.json").read_text()
    )
    return logs


@pytest.mark.parametrize("kind", ["device", "fifo", "link", "folder"])
def test_diagnose_out_refuses_anything_but_a_regular_file_or_a_new_path(tmp_path, kind):
    logs = _log_dir(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "page.html"
    if kind == "device":  # a null device of the test's own (never the system's /dev/null: a broken build replaces it)
        if os.geteuid() != 0:
            pytest.skip("making a device node needs root")
        os.mknod(out, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    elif kind == "fifo":
        os.mkfifo(out)
    elif kind == "link":
        out.symlink_to(victim)
    else:
        out.mkdir()
    res = subprocess.run([*CLI, "diagnose", str(logs), "--G", "4", "--out", str(out)], capture_output=True, text=True)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert f"--out {out}" in res.stderr and victim.read_text() == "precious\n"
    assert {"device": out.is_char_device, "fifo": out.is_fifo, "link": out.is_symlink, "folder": out.is_dir}[kind]()


def test_a_link_planted_at_the_old_guessable_partial_name_is_never_written_through(tmp_path):
    logs = _log_dir(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "page.html"
    (tmp_path / ".page.html.partial").symlink_to(victim)  # where the page used to be written first
    res = subprocess.run([*CLI, "diagnose", str(logs), "--G", "4", "--out", str(out)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert victim.read_text() == "precious\n" and out.read_text().startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".page.html.partial", "page.html", "run", "victim.txt"]


def test_a_link_planted_inside_an_output_folder_is_refused_never_followed(tmp_path):
    from grpo_identity.app.report import write_outputs

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").symlink_to(victim)
    with pytest.raises(Exception, match="not a regular file"):
        write_outputs(out, {"summary.json": {"a": 1}})
    assert victim.read_text() == "precious\n"


# --- a target cannot leave processes behind ---------------------------------------------------------------
DETACHES = ADV.replace(
    "def grpo(rewards, G):",
    """import os
import subprocess

STARTED = []


def grpo(rewards, G):
    if not STARTED:  # once: a new session, and a daemon that double-forks out of it
        STARTED.append(subprocess.Popen(["sleep", "{mark}"], start_new_session=True))
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execvp("sleep", ["sleep", "{mark}"])
            os._exit(0)""",
)


def _sleeping(mark: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\x00")
        except OSError:
            continue
        if cmdline[:2] == [b"sleep", mark.encode()]:
            found.append(int(entry))
    return found


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_a_target_that_detaches_with_setsid_or_a_new_session_leaves_nothing_running(tmp_path):
    mark = f"{os.getpid() % 1000 + 300}.{len(str(tmp_path))}"
    (tmp_path / "detach.py").write_text(DETACHES.replace("{mark}", mark))
    res = subprocess.run([*CLI, "audit", f"{tmp_path / 'detach.py'}:grpo", "--max-examples", "5"], capture_output=True,
                         text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    try:
        assert res.returncode in (0, 1), res.stderr[-2000:]
        assert _sleeping(mark) == []
    finally:
        for pid in _sleeping(mark):
            os.kill(pid, 9)


# --- a framework audit reaches no hub and writes nothing of the user's ----------------------------------
@pytest.mark.frameworks
def test_a_trl_config_that_pushes_to_the_hub_is_audited_offline_its_token_redacted_and_no_folder_made(tmp_path):
    pytest.importorskip("trl", reason="trl is not installed (make frameworks)")
    sets = ["push_to_hub=true", "hub_token=hf_secret_value", "hub_model_id=me/x", "output_dir=mine", "report_to=wandb"]
    cmd = [*CLI, "audit", "trl", "--level", "advantage", "--max-examples", "5", "--json"]
    res = subprocess.run(cmd + [a for s in sets for a in ("--set", s)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=600)  # fmt: skip
    assert res.returncode in (0, 1), res.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []  # no output_dir, no wandb folder in the caller's folder
    assert "hf_secret_value" not in res.stdout + res.stderr
    import json

    forced = json.loads(res.stdout)["target_info"]["driver_settings"]["forced"]
    assert forced["push_to_hub"] == {"driver": False, "yours": "true"} and forced["hub_token"]["yours"] == "***"
    assert forced["report_to"]["driver"] == "none" and forced["output_dir"]["yours"] == "mine"


def test_children_run_offline_with_their_own_temporary_folder_removed_at_the_end():
    from grpo_identity.checks.calls.child import OFFLINE, ChildProcess, child_environ_for

    environ = child_environ_for(None)
    assert all(environ[k] == v for k, v in OFFLINE.items()) and environ["HF_HUB_OFFLINE"] == "1"
    proc = ChildProcess()
    temp = Path(proc.temp)
    assert temp.is_dir() and temp.name.startswith("grpo-identity-child-")
    proc.end()
    assert not temp.exists()


# --- hostile inputs are refused before any work ----------------------------------------------------------
LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8)
)


@pytest.mark.parametrize(
    "text, words",
    [
        (LAUGHS, "expands to more than 100000 YAML nodes"),
        ("a: [unclosed\n", "is not YAML"),
        ("x" * ((1 << 20) + 1), "a config file is at most 1048576 bytes"),
    ],
    ids=["billion-laughs", "not-yaml", "too-large"],
)
def test_a_hostile_config_file_is_refused_in_one_line_before_any_framework_reads_it(tmp_path, text, words):
    import time

    path = tmp_path / "config.yaml"
    path.write_text(text)
    t0 = time.perf_counter()
    res = subprocess.run([*CLI, "audit", "verl", "--config", str(path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and words in res.stderr, res.stderr
    assert "--config" in res.stderr and time.perf_counter() - t0 < 30


def test_diagnose_reads_a_huge_log_a_line_at_a_time_and_stops_at_its_first_bad_line(tmp_path):
    log = tmp_path / "run.jsonl"
    with open(log, "wb") as fh:  # a valid first line, then 300 MB of one line that is no JSON
        fh.write(b'{"step": 1, "rewards": [1, 0]}\n')
        chunk = b"x" * (1 << 20)
        for _ in range(300):
            fh.write(chunk)
    code = (  # the peak resident memory of this interpreter alone (ru_maxrss would count the forking parent's)
        "import sys; from grpo_identity.app.cli import main; rc = main(sys.argv[1:]); "
        "print(next(ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('VmHWM'))); sys.exit(rc)"
    )
    res = subprocess.run([sys.executable, "-c", code, "diagnose", str(log), "--json"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300)  # fmt: skip
    assert res.returncode == 2 and f"{log}:2: a line longer than" in res.stderr, res.stderr[-500:]
    peak_mb = int(res.stdout.strip().splitlines()[-1]) / 1024
    assert peak_mb < 200, peak_mb  # the 300 MB line was never held (the interpreter itself: ~70 MB)


def test_an_empty_release_is_refused_not_read_as_the_installed_one():
    res = subprocess.run([*CLI, "audit", "trl", "--release", ""], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--release is empty" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_a_target_that_raises_keyboardinterrupt_is_a_finding_not_a_traceback(tmp_path):
    (tmp_path / "t.py").write_text("def grpo(rewards, G):\n    raise KeyboardInterrupt\n")
    res = subprocess.run([*CLI, "audit", "t.py:grpo", "--max-examples", "5"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert res.returncode == 1 and "Traceback" not in res.stdout + res.stderr
    assert "raised KeyboardInterrupt" in res.stdout


def test_secrets_are_redacted_however_they_are_held_and_counts_named_like_tokens_are_not():
    from grpo_identity.checks.auditor import _redact

    info = {
        "options": {"hub_token": "hf_a", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 16, "pad_token_id": 0},
        "pairs": [["wandb_api_key", "k_b"], ["loss_type", "dapo"]],
        "forced": {"hub_token": {"driver": None, "yours": "hf_c"}, "push_to_hub": {"driver": False, "yours": True}},
        "listed": {"HF_TOKEN": ["hf_d"]},
    }
    out = _redact(info)
    assert not any(s in repr(out) for s in ("hf_a", "k_b", "hf_c", "hf_d"))
    assert out["options"]["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == 16
    assert out["options"]["pad_token_id"] == 0 and out["pairs"][1] == ["loss_type", "dapo"]
    assert out["forced"]["hub_token"] == {"driver": None, "yours": "***"}


INJECTS = """
import os

import numpy as np


def grpo(rewards, G):
    for fd in (1, 2):  # the auditing process's stdout and stderr, reached through /proc
        try:
            out = os.open(f"/proc/{os.getppid()}/fd/{fd}", os.O_WRONLY)
            os.write(out, b"INJECTED\\n")
            os.close(out)
        except OSError:
            pass
    r = np.asarray(rewards, dtype=float).reshape(-1, G)
    live = np.ptp(r, axis=1, keepdims=True) > 0
    sd = np.where(live, r.std(axis=1, keepdims=True), 1.0)
    return np.where(live, (r - r.mean(axis=1, keepdims=True)) / sd, 0.0).reshape(-1)
"""


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc")
def test_a_target_cannot_write_into_the_callers_json_through_proc(tmp_path):
    (tmp_path / "injects.py").write_text(INJECTS)
    res = subprocess.run(
        [*CLI, "audit", f"{tmp_path / 'injects.py'}:grpo", "--max-examples", "5", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "INJECTED" not in res.stdout and "INJECTED" not in res.stderr, (res.stdout[-500:], res.stderr[-500:])
    import json

    assert json.loads(res.stdout)["verdict"] == "pass"


SEES_INTERFACES = """
import numpy as np


def grpo(rewards, G):
    with open(__file__ + ".interfaces", "w") as out:  # the network interfaces the target's process can use
        out.write(" ".join(sorted(ln.split(":")[0].strip() for ln in open("/proc/net/dev").readlines()[2:])))
    r = np.asarray(rewards, dtype=float).reshape(-1, G)
    live = np.ptp(r, axis=1, keepdims=True) > 0
    sd = np.where(live, r.std(axis=1, keepdims=True), 1.0)
    return np.where(live, (r - r.mean(axis=1, keepdims=True)) / sd, 0.0).reshape(-1)
"""


@pytest.mark.skipif(
    not Path("/proc/net/dev").is_file() or os.geteuid() != 0, reason="a network namespace needs Linux and root"
)
def test_a_target_runs_with_no_network_but_the_loopback():
    if len(Path("/proc/net/dev").read_text().splitlines()) <= 3:
        pytest.skip("this machine has no network interface besides the loopback")
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / "sees.py"
        target.write_text(SEES_INTERFACES)
        res = subprocess.run([*CLI, "audit", f"{target}:grpo", "--max-examples", "5"], capture_output=True, text=True)
        assert res.returncode == 0, res.stdout[-1000:] + res.stderr[-1000:]
        assert (Path(folder) / "sees.py.interfaces").read_text() == "lo"


NETWORK_AFTER = """
import os, socket
before = os.readlink("/proc/self/ns/net")
_own_network()
moved = os.readlink("/proc/self/ns/net") != before
names = sorted(ln.split(":")[0].strip() for ln in open("/proc/net/dev").readlines()[2:])
try:
    socket.create_connection(("192.0.2.1", 9), timeout=2)
    out = "reached"
except OSError as exc:
    out = type(exc).__name__
with socket.socket() as server:
    server.bind(("127.0.0.1", 0))
    server.listen()
    with socket.create_connection(server.getsockname(), timeout=2):  # the loopback is up: ranks can meet
        pass
print(" ".join(names), out, os.geteuid(), moved)
"""


@pytest.mark.skipif(not Path("/proc/net/dev").is_file(), reason="a network namespace needs Linux")
def test_a_user_without_root_also_gets_the_loopback_alone():
    """The child's own functions, run as a user that is not root (nobody, where this test runs as root)."""
    import inspect
    import shutil

    from grpo_identity.checks.calls import child

    if len(Path("/proc/net/dev").read_text().splitlines()) <= 3:
        pytest.skip("this machine has no network interface besides the loopback")
    code = inspect.getsource(child._own_network) + inspect.getsource(child._enter_own_network) + NETWORK_AFTER
    cmd, system_python = [sys.executable, "-c", code], sys.executable
    if os.geteuid() == 0:
        system_python = shutil.which("python3", path="/usr/bin:/bin")
        if shutil.which("setpriv") is None or system_python is None:
            pytest.skip("running as root with no setpriv or system python to become another user")
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", system_python, "-c", code]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd="/")
    assert res.returncode == 0, res.stderr[-1000:]
    names, reached, uid, moved = res.stdout.split()
    if moved == "False":  # kept its network: right only where the kernel refuses the namespaces (asked apart)
        become = cmd[: cmd.index(system_python)] if os.geteuid() == 0 else []
        if shutil.which("unshare") is None:
            pytest.skip("no unshare here to tell whether this kernel allows unprivileged user namespaces")
        allowed = subprocess.run([*become, "unshare", "--user", "--net", "true"], capture_output=True, timeout=60)
        if allowed.returncode != 0:
            pytest.skip("this kernel or container lets no unprivileged process take a user namespace")
    assert (names, reached) == ("lo", "OSError") and int(uid) != 0, res.stdout
