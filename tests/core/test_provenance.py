"""Where a stored run came from: the versions, the commit (from a checkout only) and the command,
written once and read back the same way for every stored run."""

from __future__ import annotations

import json
import platform
import re
import shlex
import subprocess

import pytest

from grpo_identity import provenance as P


def _git(root, *args):
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    """A git checkout with one committed file."""
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    return tmp_path


def test_a_record_has_python_the_four_packages_the_commit_and_the_command(tmp_path):
    path = P.write(tmp_path, P.command_line(["train", "lm", "--out", "my runs/x"]))
    r = json.loads(path.read_text())
    assert path.name == "provenance.json" and r["python"] == platform.python_version()
    assert set(r["versions"]) == {"grpo-identity", "numpy", "torch", "transformers"}
    assert r["versions"]["numpy"] == __import__("numpy").__version__
    assert shlex.split(r["command"]) == ["grpo-identity", "train", "lm", "--out", "my runs/x"]
    assert r["commit"] == _git(P.CHECKOUT, "rev-parse", "HEAD")  # the tests run from the checkout
    assert isinstance(r["dirty"], bool) and re.match(r"\d{4}-\d\d-\d\dT", r["created"])


def test_a_package_that_is_not_installed_is_recorded_as_none():
    assert P.versions(["numpy", "no-such-package-here"]) == {
        "numpy": __import__("numpy").__version__,
        "no-such-package-here": None,
    }


def test_git_answers_only_at_the_top_of_a_checkout(repo, tmp_path_factory):
    assert P.git("rev-parse", "HEAD", root=repo) == _git(repo, "rev-parse", "HEAD")
    (repo / "site-packages").mkdir()  # an installed copy inside someone else's repository
    assert P.git("rev-parse", "HEAD", root=repo / "site-packages") is None
    assert P.git("rev-parse", "HEAD", root=tmp_path_factory.mktemp("plain")) is None


def test_last_commit_and_modified_follow_the_files(repo):
    head = _git(repo, "rev-parse", "HEAD")
    assert P.last_commit([repo / "a.py"], repo) == head and P.modified([repo / "a.py"], repo) is False
    (repo / "b.py").write_text("new\n")
    assert P.last_commit([repo / "b.py"], repo) is None  # untracked: no commit holds it
    assert P.modified([repo / "b.py"], repo) is True and P.modified(root=repo) is True
    assert P.last_commit([repo.parent / "elsewhere.py"], repo) is None  # outside the checkout


def test_a_runs_own_output_under_results_does_not_make_the_tree_modified(repo):
    assert P.modified(root=repo) is False
    (repo / P.OUTPUTS / "run-1").mkdir(parents=True)
    (repo / P.OUTPUTS / "run-1" / "summary.json").write_text("{}\n")  # what a stored run writes
    assert P.modified(root=repo) is False
    (repo / "c.py").write_text("code\n")
    assert P.modified(root=repo) is True


def test_differences_name_each_version_that_changed_and_nothing_else():
    here = {"python": "3.11.7", "versions": {"numpy": "2.4.6", "torch": "2.13.0", "transformers": "5.10.4"}}
    old = {"python": "3.11.7", "versions": {"numpy": "2.4.6", "torch": "2.12.0", "hypothesis": "1.0"}}
    assert P.differences(old, here) == ["torch: 2.12.0 recorded, 2.13.0 here"]  # unrecorded packages: no claim
    assert P.differences(here, here) == []
    assert P.differences({**here, "python": "3.10.1"}, here) == ["python: 3.10.1 recorded, 3.11.7 here"]


def test_recorded_reads_a_provenance_file_the_frameworks_meta_or_records_inside_json_files(tmp_path):
    a, b, c = (tmp_path / n for n in "abc")
    for d in (a, b, c):
        d.mkdir()
    P.write(a, "cmd a")
    (b / "meta.json").write_text(json.dumps({"command": "cmd b", "python": "3.11.7", "versions": {}}))
    for seed in (0, 1):
        (c / f"seed{seed}.json").write_text(json.dumps({"x": 1, "provenance": {"command": f"cmd {seed}"}}))
    (c / "other.json").write_text("[1, 2]")
    assert [r["command"] for r in P.recorded(a)] == ["cmd a"]
    assert [r["command"] for r in P.recorded(b)] == ["cmd b"]
    assert [(r["command"], r["file"]) for r in P.recorded(c)] == [("cmd 0", "seed0.json"), ("cmd 1", "seed1.json")]
    assert [r["file"] for r in P.recorded(tmp_path)] == ["a/provenance.json"]  # a folder of runs: theirs
    (tmp_path / "empty").mkdir()
    assert P.recorded(tmp_path / "empty") == []


def test_outside_a_checkout_the_commit_is_the_callers_variable_or_none_and_the_note_says_which(tmp_path, monkeypatch):
    monkeypatch.setattr(P, "CHECKOUT", tmp_path)  # a copied tree without .git
    monkeypatch.delenv(P.COMMIT_VARIABLE, raising=False)
    env = P.environment()
    assert env["commit"] is None and env["dirty"] is None and "not run from a git checkout" in env["commit_note"]
    monkeypatch.setenv(P.COMMIT_VARIABLE, "abc123")
    env = P.environment()
    assert env["commit"] == "abc123" and env["dirty"] is None and P.COMMIT_VARIABLE in env["commit_note"]
