"""Progress on stderr (``grpo_identity.app.progress``): a line at once and a bar naming what runs
when stderr is a terminal; nothing at all under ``--json`` or when stderr is not a terminal.

The commands run in a child process whose stderr is a pseudo-terminal, as a person's shell is."""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest

from grpo_identity.app import progress


def run_with_stderr_on_a_terminal(tmp_path, *args: str, terminal: bool = True) -> tuple[int, str, str]:
    """``grpo-identity ARGS`` with stderr on a 120-column pseudo-terminal (or a pipe when
    ``terminal`` is False) and stdout in a file: (exit code, stdout, everything written on stderr)."""
    out_file = tmp_path / "stdout.txt"
    argv = [sys.executable, "-m", "grpo_identity", *args]
    with open(out_file, "wb") as out:
        if not terminal:
            r = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, cwd=tmp_path, timeout=120)
            return r.returncode, out_file.read_text(), r.stderr.decode()
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=slave, cwd=tmp_path)
        os.close(slave)
        err = bytearray()
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            err += chunk
        os.close(master)
        code = proc.wait(timeout=120)
    return code, out_file.read_text(), err.decode(errors="replace")


def test_progress_is_wanted_on_a_terminal_without_json(monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert progress.wanted(argparse.Namespace(json=False))
    assert not progress.wanted(argparse.Namespace(json=True))
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert not progress.wanted(argparse.Namespace(json=False))


def test_the_loading_line_shows_while_the_block_runs_and_only_when_asked(capsys):
    with progress.loading("x: loading SymPy", show=True):
        pass
    assert "x: loading SymPy…" in capsys.readouterr().err
    with progress.loading("x: loading SymPy", show=False):
        pass
    assert capsys.readouterr().err == ""


def test_prove_shows_loading_then_the_theorem_it_proves_on_a_terminal(tmp_path):
    code, out, err = run_with_stderr_on_a_terminal(tmp_path, "prove", "-k", "T4")
    assert code == 0 and "1/1 proved" in out
    assert "prove: loading SymPy…" in err and "proving T4" in err and "invariance to a reward baseline" in err
    assert err.index("loading SymPy") < err.index("proving T4")


@pytest.mark.parametrize("terminal", [True, False], ids=["json on a terminal", "not a terminal"])
def test_prove_writes_nothing_on_stderr_under_json_or_off_a_terminal(tmp_path, terminal):
    code, out, err = run_with_stderr_on_a_terminal(
        tmp_path, "prove", "-k", "T4", *(["--json"] if terminal else []), terminal=terminal
    )
    assert code == 0 and out.strip() and err == ""


TINY = ["train", "bernoulli", "--M", "20", "--steps", "3", "--mass-draws", "4"]


def test_train_bernoulli_shows_its_bar_naming_the_arm_on_a_terminal(tmp_path):
    pytest.importorskip("torch")
    code, out, err = run_with_stderr_on_a_terminal(tmp_path, *TINY)
    assert code == 0 and "identity:" in out
    assert "train bernoulli: loading torch…" in err
    assert "train bernoulli: initial gradient mass" in err and "/9" in err  # 3 arms × 3 steps
    assert all(f"train bernoulli: {arm} arm" in err for arm in ("grpo", "dr_grpo", "dapo"))


@pytest.mark.parametrize("terminal", [True, False], ids=["json on a terminal", "not a terminal"])
def test_train_bernoulli_writes_nothing_on_stderr_under_json_or_off_a_terminal(tmp_path, terminal):
    pytest.importorskip("torch")
    code, out, err = run_with_stderr_on_a_terminal(
        tmp_path, *TINY, *(["--json"] if terminal else []), terminal=terminal
    )
    assert code == 0 and out.strip() and err == ""
