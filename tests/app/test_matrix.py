"""``grpo-identity matrix``: the run loop (retries, lost workers, resume, Ctrl-C) with a scripted pool, then the real
thing — local worker processes, one killed mid-grid, Ctrl-C, and a Ray head on 127.0.0.1 giving the local verdicts."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from grpo_identity.app import grid as G
from grpo_identity.app import matrix as M
from grpo_identity.app.cli import main
from grpo_identity.checks.calls.processes import descendants


def _row(target: str, release: str | None, verdict: str = "pass", resolution: str | None = None) -> dict:
    row = {"target": target, "release": release or "", "exit_code": 0, "wall_seconds": 0.1, "verdict": verdict}
    if verdict == "error":
        return {**row, "exit_code": None, "error": "grpo-identity audit: error: boom", "resolution": None}
    return {**row, "report": {"verdict": verdict, "target_info": {}}, "resolution": resolution}


class ScriptedPool:
    """A pool whose workers answer from a script: ``errors`` (audit target → how many first runs give an error row),
    ``lose`` (targets whose worker is lost while running them, on the first run)."""

    def __init__(self, slots=2, errors=None, lose=(), verdicts=None, interrupt_after=None, end_early=()):
        self.slots, self.errors, self.lose, self.end_early = slots, dict(errors or {}), set(lose), set(end_early)
        self.verdicts, self.interrupt_after = verdicts or {}, interrupt_after
        self.running, self.started, self.closed, self.rows, self.usage = {}, [], False, 0, set()

    def start(self, batch, audits):
        self.started.append([a.target for a in audits])
        self.running[batch] = list(audits)

    def events(self, timeout):
        if self.interrupt_after is not None and self.rows >= self.interrupt_after:
            raise KeyboardInterrupt
        batch, left = next(iter(self.running.items()))
        if not left:
            del self.running[batch]
            return [("done", batch, None)]
        audit = left.pop(0)
        if audit.target in self.end_early:  # the worker says it is done with this audit and the rest left
            self.end_early.discard(audit.target)
            del self.running[batch]
            return [("done", batch, None)]
        if audit.target in self.lose:
            self.lose.discard(audit.target)
            del self.running[batch]
            return [("lost", batch, "the worker was killed (SIGKILL)")]
        self.rows += 1
        if self.errors.get(audit.target, 0) > 0:
            self.errors[audit.target] -= 1
            return [("row", batch, _row(audit.target, audit.release, "error"))]
        if audit.target in self.usage:
            return [("row", batch, {**_row(audit.target, audit.release, "error"), "exit_code": 2})]
        verdict = self.verdicts.get(audit.target, "pass")
        return [("row", batch, _row(audit.target, audit.release, verdict, f"x-{audit.release}-key"))]

    def close(self):
        self.closed = True


GRID = G.parse("audits: [{target: grpo, configs: [{a: 1}, {a: 2}, {a: 3}]}, {target: rloo, releases: [1.0, 2.0]}]")
T1, T2, T3 = (f"grpo --set a={i}" for i in (1, 2, 3))


def _lines(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines()]


def test_an_error_is_run_once_more_alone_and_a_second_error_is_recorded_never_lost(tmp_path):
    pool = ScriptedPool(errors={T2: 1, "rloo": 4})  # rloo: both releases, both runs
    outcome = M.run(GRID, tmp_path, pool)
    rows = _lines(tmp_path / M.ROWS)
    assert [(r["target"], r["release"]) for r in rows] == [(a.target, a.release or "") for a in GRID.audits]
    by = {(r["target"], r["release"]): r for r in rows}
    assert by[(T2, "")]["verdict"] == "pass" and by[(T2, "")]["attempts"] == 2
    assert [by[("rloo", r)]["verdict"] for r in ("1.0", "2.0")] == ["error", "error"]
    assert all(by[("rloo", r)]["attempts"] == 2 and by[("rloo", r)]["ok"] is False for r in ("1.0", "2.0"))
    assert [T2] in pool.started and outcome.retried == 3 and pool.closed


def test_the_audit_a_lost_worker_was_running_is_retried_alone_and_the_rest_of_its_batch_goes_on(tmp_path):
    pool = ScriptedPool(slots=1, lose={T2})
    M.run(GRID, tmp_path, pool)
    rows = {r["target"]: r for r in _lines(tmp_path / M.ROWS) if r["release"] == ""}
    assert pool.started[0] == [T1, T2, T3] and [T3] in pool.started and [T2] in pool.started
    assert rows[T2]["attempts"] == 2 and rows[T2]["verdict"] == "pass" and rows[T1]["attempts"] == 1


def test_a_worker_lost_twice_on_one_audit_gives_its_error_row(tmp_path):
    pool = ScriptedPool(slots=1, lose={T1})
    start = pool.start

    def start_and_lose_the_retry_too(batch, audits):
        if [a.target for a in audits] == [T1]:
            pool.lose.add(T1)
        start(batch, audits)

    pool.start = start_and_lose_the_retry_too
    M.run(GRID, tmp_path, pool)
    rows = _lines(tmp_path / M.ROWS)
    row = next(r for r in rows if r["target"] == T1)
    assert row["verdict"] == "error" and "killed (SIGKILL) while running this audit" in row["error"]
    assert row["attempts"] == 2 and len(rows) == len(GRID.audits)


def test_a_batch_that_ends_with_audits_left_is_a_lost_worker_and_an_exit_2_is_run_once_more_too(tmp_path):
    pool = ScriptedPool(slots=1, end_early={T2})
    pool.usage = {"rloo"}
    M.run(GRID, tmp_path, pool)
    rows = {(r["target"], r["release"]): r for r in _lines(tmp_path / M.ROWS)}
    assert len(rows) == 5 and rows[(T2, "")]["attempts"] == 2 and rows[(T3, "")]["verdict"] == "pass"
    # exit 2 covers a framework that failed to load or install too (a transient failure), so it gets its retry
    assert [rows[("rloo", r)]["attempts"] for r in ("1.0", "2.0")] == [2, 2]


def test_a_row_after_a_line_cut_short_is_appended_on_a_line_of_its_own(tmp_path):
    class Breaks(ScriptedPool):  # the command dies (not Ctrl-C) after one row: what was appended is the record
        def events(self, timeout):
            if self.rows == 1:
                raise RuntimeError("the command died")
            return super().events(timeout)

    (tmp_path / M.ROWS).write_text('{"target": "rloo", "rele')
    with pytest.raises(RuntimeError):
        M.run(GRID, tmp_path, Breaks())
    assert [r["target"] for r in M.read_rows(tmp_path / M.ROWS).values()] == [T1]


def test_one_environment_is_cut_in_two_batches_when_there_are_more_workers_than_batches(tmp_path):
    grid = G.parse("audits: [{target: grpo, configs: [{a: 1}, {a: 2}, {a: 3}, {a: 4}]}]")
    pool = ScriptedPool(slots=2)
    M.run(grid, tmp_path, pool)
    assert sorted(map(len, pool.started)) == [2, 2] and len(_lines(tmp_path / M.ROWS)) == 4


def test_run_works_outside_the_main_thread_where_no_signal_can_be_handled(tmp_path):
    import threading

    done = []
    thread = threading.Thread(target=lambda: done.append(M.run(GRID, tmp_path, ScriptedPool())))
    thread.start()
    thread.join(30)
    assert done and len(done[0].rows) == 5 and not done[0].interrupted


def test_rows_of_another_grid_stay_after_this_ones_and_kept_rows_take_the_grids_expectations_now(tmp_path):
    other = G.parse("audits: [{target: dr_grpo}]")
    M.run(other, tmp_path, ScriptedPool())
    M.run(GRID, tmp_path, ScriptedPool())
    rows = _lines(tmp_path / M.ROWS)
    assert [r["target"] for r in rows][-1] == "dr_grpo" and len(rows) == 6
    strict = G.parse("audits: [{target: dr_grpo, verdict: fail}]")
    M.run(strict, tmp_path, ScriptedPool(), only="nothing")
    (row,) = [r for r in _lines(tmp_path / M.ROWS) if r["target"] == "dr_grpo"]
    assert (row["expected"], row["ok"]) == ("fail", False)


def test_an_audit_that_prints_no_report_gives_an_error_row_not_a_dead_worker():
    row = M.run_audit("--help", None)
    assert row["verdict"] == "error" and row["exit_code"] is None and "JSONDecodeError" in row["error"]


def test_a_row_of_the_same_code_in_the_same_environment_is_kept_and_any_other_is_run_again(tmp_path, monkeypatch):
    monkeypatch.setattr("grpo_identity.checks.calls.releases.current_env_name", lambda fw, rel: f"x-{rel}-key")
    M.run(GRID, tmp_path, ScriptedPool())
    again = ScriptedPool()
    outcome = M.run(GRID, tmp_path, again)
    assert outcome.kept == 2 and sorted(t for batch in again.started for t in batch) == [T1, T2, T3]  # functions rerun
    log = tmp_path / M.ROWS
    rows = _lines(log)
    rows[-1]["project"] = "0.0.0+other"  # rloo 2.0 made by other code
    log.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"target": "rloo", "rele')  # a line cut short
    third = ScriptedPool()
    assert M.run(GRID, tmp_path, third).kept == 1 and ["rloo"] in third.started
    monkeypatch.setattr("grpo_identity.checks.calls.releases.current_env_name", lambda fw, rel: f"x-{rel}-new")
    assert M.run(GRID, tmp_path, ScriptedPool()).kept == 0  # the release's environment changed
    assert M.run(GRID, tmp_path, ScriptedPool(), fresh=True).kept == 0


def test_a_row_made_from_another_config_files_content_is_run_again(tmp_path, monkeypatch):
    monkeypatch.setattr("grpo_identity.checks.calls.releases.current_env_name", lambda fw, rel: f"x-{rel}-key")
    monkeypatch.chdir(tmp_path)  # a config path is read from the folder the command runs in
    (tmp_path / "a.yaml").write_text("loss_type: grpo\n")
    grid = G.parse("audits: [{target: trl, releases: [1.0], configs: [{x: 1}], options: {config: a.yaml}}, "
                   "{target: trl, releases: [1.0], configs: [{x: 2}]}]")  # fmt: skip
    with_config, without = (a.target for a in grid.audits)
    assert grid.audits[0].files() == ["a.yaml"] and grid.audits[1].files() == []
    M.run(grid, tmp_path / "out", ScriptedPool())
    again = ScriptedPool()
    assert M.run(grid, tmp_path / "out", again).kept == 2 and again.started == []
    (tmp_path / "a.yaml").write_text("loss_type: dr_grpo\n")  # the same path, other content
    third = ScriptedPool()
    assert M.run(grid, tmp_path / "out", third).kept == 1 and third.started == [[with_config]]
    log = tmp_path / "out" / M.ROWS
    for edit in ({"inputs": "0" * 16}, {}):  # a row from other contents, and one of an earlier version (no inputs)
        rows = _lines(log)
        rows[0] = {**{k: v for k, v in rows[0].items() if k != "inputs"}, **edit}
        log.write_text("".join(json.dumps(r) + "\n" for r in rows))
        again = ScriptedPool()
        assert M.run(grid, tmp_path / "out", again).kept == 1 and again.started == [[with_config]]
    (tmp_path / "a.yaml").unlink()  # a missing file is a content of its own, never the earlier one
    assert M.run(grid, tmp_path / "out", ScriptedPool()).kept == 1
    assert [r["inputs"] is None for r in _lines(log)] == [False, True] and without.endswith("x=2")


def test_the_digest_of_a_config_that_is_no_regular_file_is_a_word_and_never_blocks(tmp_path):
    os.mkfifo(tmp_path / "fifo.yaml")  # opened for reading, a FIFO blocks until a writer comes
    (tmp_path / "big.yaml").write_bytes(b"a: 1\n" * (1 << 19))  # over the 1 MiB a config file may have
    (tmp_path / "ok.yaml").write_text("a: 1\n")
    names = ["fifo.yaml", "big.yaml", "ok.yaml", "gone.yaml", "/dev/zero"]
    found: dict[str, str | None] = {}
    worker = threading.Thread(
        target=lambda: found.update({n: M.input_digest(G.Audit(f"trl --config {n}", "1.0")) for n in names}),
        daemon=True,
    )
    with contextlib.chdir(tmp_path):
        worker.start()
        worker.join(timeout=20)
    assert not worker.is_alive() and len(set(found.values())) == len(names), found
    (tmp_path / "ok.yaml").write_text("a: 2\n")
    assert M.input_digest(G.Audit("trl --config ok.yaml", "1.0")) != found["ok.yaml"]
    assert M.input_digest(G.Audit("trl --set a=1", "1.0")) is None


def test_ctrl_c_leaves_every_row_so_far_whole_in_the_grids_order_and_ends_the_workers(tmp_path):
    pool = ScriptedPool(interrupt_after=2)
    outcome = M.run(GRID, tmp_path, pool)
    assert outcome.interrupted and pool.closed and outcome.ran == 2
    assert [r["target"] for r in _lines(tmp_path / M.ROWS)] == [T1, T2]


def test_only_runs_the_audits_it_names_and_keeps_the_others_rows(tmp_path):
    M.run(GRID, tmp_path, ScriptedPool(verdicts={"rloo": "fail"}))
    pool = ScriptedPool()
    M.run(GRID, tmp_path, pool, only="rloo")
    rows = _lines(tmp_path / M.ROWS)
    assert pool.started == [["rloo"], ["rloo"]] and len(rows) == 5
    assert [r["verdict"] for r in rows if r["target"] == "rloo"] == ["pass", "pass"]  # the rerun's rows replace


# --- the command, with real worker processes ------------------------------------------------------------------------
def _grid_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "grid.yaml"
    path.write_text(text)
    return path


def test_the_command_writes_rows_tables_and_meta_and_its_exit_code_gates_on_the_expected_verdicts(tmp_path, capsys):
    grid = _grid_file(
        tmp_path,
        "title: presets\naudits:\n  - {target: grpo, options: {max-examples: 20}}\n"
        "  - {target: dr_grpo, options: {expect: grpo, max-examples: 20}, verdict: fail}\n",
    )
    out = tmp_path / "out"
    assert main(["matrix", str(grid), "--out", str(out), "--jobs", "2"]) == 0
    text = capsys.readouterr().out
    assert "2 of 2 audits recorded (1 pass, 1 fail)" in text and "dr_grpo --expect grpo --max-examples 20" in text
    assert {p.name for p in out.iterdir()} == {M.ROWS, M.TABLE, M.PAGE, M.META}
    assert "| `grpo --max-examples 20` | - | PASS |" in (out / M.TABLE).read_text()
    assert "<title>presets</title>" in (out / M.PAGE).read_text() and 'class="fail"' in (out / M.PAGE).read_text()
    meta = json.loads((out / M.META).read_text())
    assert meta["command"].startswith("grpo-identity matrix") and meta["verdicts"]["fail"] == 1
    grid.write_text(grid.read_text().replace("verdict: fail", "verdict: deviation"))
    assert main(["matrix", str(grid), "--out", str(out), "--render-only"]) == 1
    assert "FAIL (expected deviation): dr_grpo" in capsys.readouterr().out
    assert [r["ok"] for r in _lines(out / M.ROWS)] == [True, False]  # the file follows the grid as it is now
    grid.write_text(grid.read_text().replace("verdict: deviation", "verdict: fail") + "  - {target: rloo}\n")
    assert main(["matrix", str(grid), "--out", str(out), "--render-only"]) == 1  # an audit with no row
    assert "NOT RUN (fails the run): rloo @ installed" in capsys.readouterr().out


def test_an_audit_whose_worker_is_lost_and_whose_retry_errs_fails_the_run_with_its_error_row(
    tmp_path, capsys, monkeypatch
):
    grid = _grid_file(tmp_path, "audits: [{target: grpo, configs: [{a: 1}, {a: 2}]}]")
    monkeypatch.setattr(
        M, "LocalPool", lambda jobs: ScriptedPool(lose={"grpo --set a=2"}, errors={"grpo --set a=2": 1})
    )
    assert main(["matrix", str(grid), "--out", str(tmp_path / "out")]) == 1
    out = capsys.readouterr().out
    assert "ERROR (fails the run): grpo --set a=2" in out and "2 of 2 audits recorded" in out


BAD = [
    (["matrix", "{tmp}/absent.yaml"], "no such file"),
    (["matrix", "{grid}", "--jobs", "0"], "--jobs"),
    (["matrix", "{grid}", "--only", "nope"], "--only 'nope'"),
    (["matrix", "{grid}", "--render-only", "--fresh"], "leave out --fresh"),
    (["matrix", "{grid}", "--render-only"], "does not exist: run the grid first"),
    (["matrix", "{grid}", "--out", "{grid}"], "is not a folder"),
    (["matrix", "{tmp}/bad.yaml"], "audits[1].releases"),
    (["matrix", "{grid}", "--list", "--only", "grpo"], "--list runs nothing: leave out --only"),
    (["matrix", "{grid}", "--render-only", "--jobs", "2"], "--render-only runs nothing: leave out --jobs"),
    (["matrix", "{grid}", "--ray", " "], "--ray: an address"),
]


@pytest.mark.parametrize(("argv", "needle"), BAD, ids=[" ".join(a[2:]) or a[1] for a, _ in BAD])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, argv, needle):
    grid = _grid_file(tmp_path, "audits: [{target: grpo}]")
    (tmp_path / "bad.yaml").write_text("audits: [{target: trl, releases: [x y]}]")
    argv = [a.format(tmp=tmp_path, grid=grid) for a in argv]
    out = tmp_path / "out"
    code = main([*argv, "--out", str(out)] if "--out" not in argv else argv)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and needle in err and "Traceback" not in err, err
    assert not out.exists()


def test_without_ray_installed_the_ray_option_names_its_extra(tmp_path, capsys, monkeypatch):
    grid = _grid_file(tmp_path, "audits: [{target: grpo}]")
    monkeypatch.setitem(sys.modules, "ray", None)
    assert main(["matrix", str(grid), "--out", str(tmp_path / "o"), "--ray", "auto"]) == 2
    assert "pip install 'grpo-identity[ray]'" in capsys.readouterr().err


def _start(args: list[str], tmp_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """The command as a terminal starts it: SIGINT at its default, also where this test run was started with it
    ignored (``nohup``, ``cmd &`` in a script), which its children would inherit and the command then honour."""
    cmd = [sys.executable, "-m", "grpo_identity", "matrix", *args, "--json"]
    return subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip


def _events(proc: subprocess.Popen):
    assert proc.stdout is not None
    for line in proc.stdout:
        yield json.loads(line)


SLOW_PRESETS = "audits:\n" + "".join(f"  - {{target: grpo, options: {{max-examples: {n}}}}}\n" for n in range(400, 404))
#: two batches of two (one environment cut in two): each batch's second audit the slower, so that the kill after
#: a batch's first row lands while the worker runs it, however late the row reaches the test
KILL_PRESETS = "audits:\n" + "".join(
    f"  - {{target: grpo, options: {{max-examples: {n}}}}}\n" for n in (400, 1000, 401, 1001)
)


@pytest.mark.slow
def test_a_worker_killed_mid_grid_is_retried_and_the_run_ends_with_every_row(tmp_path):
    """Four audits of one environment (two batches of two on two workers): the first worker to answer is SIGKILLed
    after its first row, while it runs its second audit, which is then run once more."""
    retry = _kill_the_first_worker(tmp_path, [])
    assert "the worker was killed (SIGKILL)" in retry["why"]


def _kill_the_first_worker(tmp_path: Path, args: list[str], env: dict[str, str] | None = None) -> dict:
    """:data:`KILL_PRESETS` run with ``args``, the worker of the first row SIGKILLed as it runs its second audit: the
    run must end with every row, one of them the lost audit's second attempt; the retry's event."""
    here = tmp_path / "killed"  # its own grid file and folder: the caller may have others
    here.mkdir()
    grid = _grid_file(here, KILL_PRESETS)
    proc = _start([str(grid), "--out", "out", *args], here, env)
    events = []
    for event in _events(proc):
        events.append(event)
        if event["event"] == "audit" and len([e for e in events if e["event"] == "audit"]) == 1:
            os.kill(event["worker"], signal.SIGKILL)
    assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
    rows = _lines(here / "out" / M.ROWS)
    assert [r["target"] for r in rows] == [a.target for a in G.parse(KILL_PRESETS).audits]
    assert all(r["verdict"] == "pass" for r in rows) and sorted(r["attempts"] for r in rows) == [1, 1, 1, 2]
    assert events[-1]["retried"] == 1
    return next(e for e in events if e["event"] == "retry")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_mid_grid_exits_130_with_whole_rows_and_no_process_left(tmp_path, sig):
    grid = _grid_file(tmp_path, SLOW_PRESETS)
    proc = _start([str(grid), "--out", "out", "--jobs", "1"], tmp_path)
    for event in _events(proc):
        if event["event"] == "audit":
            left = descendants(proc.pid)
            proc.send_signal(sig)
            break
    assert proc.wait(timeout=60) == 130
    assert "interrupted" in (proc.stderr.read() if proc.stderr else "")
    rows = _lines(tmp_path / "out" / M.ROWS)  # every line whole
    assert 1 <= len(rows) < 4 and all(r["verdict"] == "pass" for r in rows)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{pid}") for pid in left):
        time.sleep(0.2)
    assert left and not [pid for pid in left if os.path.exists(f"/proc/{pid}")]
    assert json.loads((tmp_path / "out" / M.META).read_text())["interrupted"] is True


# --- Ray -------------------------------------------------------------------------------------------------------------
RAY_GRID = """
title: two TRL releases through Ray
audits:
  - target: trl
    releases: [0.22.2, 1.16.0]
    axes: {loss_type: [grpo, dr_grpo]}
    options: {level: advantage, max-examples: 20}
"""


@pytest.mark.slow
def test_a_small_grid_through_a_local_ray_head_gives_the_local_executors_verdicts(tmp_path):
    pytest.importorskip("ray")
    grid = _grid_file(tmp_path, RAY_GRID)
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    with _ray_head(env) as address:
        ray_run = subprocess.run(
            [sys.executable, "-m", "grpo_identity", "matrix", str(grid), "--out", "ray", "--ray", address],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert ray_run.returncode == 0, ray_run.stderr[-2000:]
        # a Ray worker SIGKILLed mid-batch: Ray's error at its next row is a lost worker, its audit run again
        retry = _kill_the_first_worker(tmp_path, ["--ray", address], env)
    assert retry["why"].startswith("Ray: "), retry
    local = subprocess.run(
        [sys.executable, "-m", "grpo_identity", "matrix", str(grid), "--out", "local", "--jobs", "2"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert local.returncode == 0, local.stderr[-2000:]
    ray_rows, local_rows = (_lines(tmp_path / d / M.ROWS) for d in ("ray", "local"))
    assert len(ray_rows) == 4 and {r["release"] for r in ray_rows} == {"0.22.2", "1.16.0"}
    assert [(r["target"], r["release"], r["verdict"]) for r in ray_rows] == [
        (r["target"], r["release"], r["verdict"]) for r in local_rows
    ]
    assert {r["report"]["matches"] for r in ray_rows} == {r["report"]["matches"] for r in local_rows}
    assert all(r["resolution"] and r["resolution"].startswith("trl-") for r in ray_rows)
    assert {r["worker"] for r in ray_rows}.isdisjoint({r["worker"] for r in local_rows})


#: ``ray start`` gives its raylet a fixed 30 s to register (ray/_private/node.py): on a loaded 2-core machine its
#: Python agents can take longer to start, and the head is started again, on new ports (a failure of any other kind
#: is not); at most this many starts in all
RAY_SLOW_START = "The current node timed out during startup"
RAY_HEAD_TRIES = 3


@contextlib.contextmanager
def _ray_head(env: dict[str, str], ray_bin: str | None = None) -> Iterator[str]:
    """A Ray head of this test's own: on 127.0.0.1, two CPUs, free ports, its own temporary folder, in a session
    of its own; ended by killing that session's processes: the daemons (in the command's process group, which
    they keep after ``ray start`` returns) and the workers (each a group of its own in the same session).  ``ray
    stop`` would end every Ray process of the machine, a developer's own cluster among them, and takes about 9 s."""
    ray_bin = ray_bin or shutil.which("ray", path=os.path.dirname(sys.executable))
    assert ray_bin, "ray's command is installed beside this interpreter"
    temp = Path(tempfile.mkdtemp(prefix="ray", dir=os.environ.get("TMPDIR", "/tmp")))
    log = temp / "start.log"  # a file, not a pipe: the daemons inherit it and outlive the command
    head, code, left = None, None, []
    try:
        for tries_left in reversed(range(RAY_HEAD_TRIES)):
            if head is not None:  # the head that did not start: its daemons
                left += _end_session(head.pid)
                head = None
            port, client, dashboard, agent = _free_ports(4)  # two runs at once must not meet on a default port
            start = [ray_bin, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=2"]
            start += [f"--ray-client-server-port={client}", f"--dashboard-port={dashboard}"]
            start += [f"--dashboard-agent-listen-port={agent}", "--include-dashboard=false", f"--temp-dir={temp}"]
            with log.open("w") as out:
                head = subprocess.Popen([*start, "--disable-usage-stats"], env=env, start_new_session=True,
                                        stdout=out, stderr=out)  # fmt: skip
            code = head.wait(timeout=120)
            if code == 0 or RAY_SLOW_START not in log.read_text() or not tries_left:
                break
        assert code == 0, log.read_text()[-2000:]
        yield f"127.0.0.1:{port}"
    finally:
        left += _end_session(head.pid) if head is not None else []
        shutil.rmtree(temp, ignore_errors=True)
    assert not left, f"Ray processes left: {left}"  # checked only when the run itself raised nothing


@pytest.mark.parametrize("error, starts", [(RAY_SLOW_START, 2), ("Address already in use", 1)])
def test_a_ray_head_too_slow_to_register_is_started_again_and_no_other_failure_is(tmp_path, error, starts):
    ray = tmp_path / "ray"  # fails once with ``error``, then starts
    ray.write_text(f"""#!/bin/sh
n=$(cat "{tmp_path}/n" 2>/dev/null || echo 0); echo $((n + 1)) > "{tmp_path}/n"
[ "$n" -gt 0 ] || {{ echo "Exception: {error}."; exit 1; }}
""")
    ray.chmod(0o755)
    with contextlib.ExitStack() as stack:
        if starts == 1:
            stack.enter_context(pytest.raises(AssertionError, match=error))
        address = stack.enter_context(_ray_head(dict(os.environ), str(ray)))
        assert address.startswith("127.0.0.1:")
    assert int((tmp_path / "n").read_text()) == starts


def _end_session(sid: int, seconds: float = 30.0) -> list[int]:
    """SIGKILL every process of a session (its leader's group first, so that the raylet starts no new worker),
    until none is left or ``seconds`` pass; the live ones left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(sid, signal.SIGKILL)
    deadline = time.monotonic() + seconds
    while (left := _session(sid)) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    return left


def _session(sid: int) -> list[int]:
    """The live processes of a session (a zombie is dead)."""
    alive = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, IndexError):
            state, _ppid, _pgrp, session = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[:4]
            if int(session) == sid and state != "Z":
                alive.append(int(entry))
    return alive


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free ports of 127.0.0.1 (held together while they are chosen)."""
    import socket

    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def test_read_rows_skips_what_is_not_a_row(tmp_path):
    good = _row("grpo", None)
    bad = [
        {**good, "report": {"verdict": "error"}},  # "error" is no report's verdict
        {**good, "report": None},
        {k: v for k, v in good.items() if k != "wall_seconds"},
        {"target": "grpo", "release": "", "wall_seconds": 1.0},  # neither a report nor an error
        ["not", "a", "row"],
    ]
    (tmp_path / M.ROWS).write_text("".join(json.dumps(r) + "\n" for r in [*bad, good]))
    assert list(M.read_rows(tmp_path / M.ROWS).values()) == [good]
    (tmp_path / M.ROWS).write_text("".join(json.dumps(r) + "\n" for r in bad))
    assert M.read_rows(tmp_path / M.ROWS) == {}
