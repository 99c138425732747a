"""Release environments (``checks.releases``): where they live, the pins each release needs, the
pip commands (with or without a release's declared requirements), a refusal before pip runs, a
cached environment that finds the running project, a rebuild when its recipe changes, and a build
that fails leaving neither its folder nor its lock behind."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from grpo_identity.checks import releases as R
from grpo_identity.checks.frameworks import AdapterError


def test_release_environments_live_where_the_variable_says(monkeypatch, tmp_path):
    monkeypatch.setenv("GRPO_IDENTITY_ENVS", str(tmp_path))
    assert R.env_dir("trl", "0.22.0") == tmp_path / "trl-0.22.0"
    monkeypatch.delenv("GRPO_IDENTITY_ENVS")
    assert R.env_root().parts[-3:] == (".cache", "grpo-identity", "envs")


def test_old_trl_releases_get_the_transformers_they_need_and_new_ones_none():
    assert R.release_pins("trl", "0.22.2") == ["transformers>=4.56.1,<4.57"]
    assert R.release_pins("trl", "0.29.1") == ["transformers<5"]
    assert R.release_pins("trl", "1.16.0") == []
    assert "cachetools" in R.release_pins("verl", "0.6.0") and "transformers<5" in R.release_pins("verl", "0.6.0")
    assert "transformers<5" not in R.release_pins("verl", "0.9.1")


@pytest.mark.parametrize(
    "framework, release, words",
    [
        ("trl", "0.22; rm -rf /", "is no version number"),
        ("areal", "1.0; rm", "is no version number"),
        ("grpo", "0.11.2", "--release applies to"),
    ],
)
def test_a_bad_release_request_is_refused_before_pip_runs(framework, release, words, monkeypatch, tmp_path):
    monkeypatch.setenv("GRPO_IDENTITY_ENVS", str(tmp_path))
    with pytest.raises(AdapterError, match=words):
        R.ensure(framework, release)
    assert list(tmp_path.iterdir()) == []


def test_a_framework_installed_without_its_requirements_gets_two_pip_commands(monkeypatch):
    monkeypatch.setitem(R.NO_DEPS, ("demo", "0.0", "2.0"), ("torchdata",))
    monkeypatch.setitem(R.RELEASE_PINS, ("demo", "0.0", "99"), ("ray",))
    first, second = R.install_commands("demo", "1.0", "py", "c.txt")
    assert first[-3:] == ["--no-deps", "demo==1.0", "torchdata"] and "torch==2.13.0" not in first
    assert second[-2:] == ["torch==2.13.0", "ray"] and "--no-deps" not in second
    # past the range: one command, with dependencies
    assert R.no_deps("demo", "2.0") is None and len(R.install_commands("demo", "2.0", "py", "c.txt")) == 1
    assert all(cmd[cmd.index("-c") + 1] == "c.txt" for cmd in (first, second))


def test_areal_goes_in_without_its_declared_requirements_then_what_its_actor_imports():
    assert R.no_deps("areal", "1.0.4") == []
    first, second = R.install_commands("areal", "1.0.4", "py", "c.txt")
    assert first[-2:] == ["--no-deps", "areal==1.0.4"] and R.TORCH_PIN not in first
    assert (
        R.TORCH_PIN in second and "omegaconf==2.4.0.dev2" in second and not any(p.startswith("areal") for p in second)
    )
    assert not any(
        p.split("=")[0].split("<")[0] in ("torch", "transformers", "vllm", "sglang", "flash-attn")
        for p in second[second.index(R.TORCH_PIN) + 1 :]
    )


def _bare_release_env(tmp_path, monkeypatch):
    """A cached 'release' environment without pip (venv only), stamped ready."""
    monkeypatch.setenv("GRPO_IDENTITY_ENVS", str(tmp_path))
    env = R.env_dir("trl", "9.9.9")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    (env / ".grpo-identity-ready").write_text(R._recipe("trl", "9.9.9"))
    return env, R._python_of(env)


def test_a_cached_environment_finds_the_running_project_whichever_made_it(tmp_path, monkeypatch):
    env, python = _bare_release_env(tmp_path, monkeypatch)
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # made from another clone: its .pth names a project environment that is gone
    (env / site / "_grpo_identity_base.pth").write_text(
        "import site; site.addsitedir('/nonexistent/.venv/lib/python3.11/site-packages')\n"
    )
    assert R.ensure("trl", "9.9.9").python == str(python)
    probe = [str(python), "-c", "import grpo_identity.checks.target"]
    assert subprocess.run(probe, cwd=tmp_path, env=R.child_environ(), capture_output=True).returncode == 0
    bare = {k: v for k, v in R.child_environ().items() if k != R.BASE_SITE_VAR}
    # the variable is what links it
    assert subprocess.run(probe, cwd=tmp_path, env=bare, capture_output=True).returncode != 0


def test_a_cached_environment_built_with_other_pins_is_rebuilt_not_reused(tmp_path, monkeypatch):
    env, python = _bare_release_env(tmp_path, monkeypatch)
    built = []
    monkeypatch.setattr(R, "_build", lambda env, fw, rel: built.append((fw, rel)))
    assert R.ensure("trl", "9.9.9").python == str(python) and built == []  # the recipe matches: reused
    monkeypatch.setitem(R.RELEASE_PINS, ("trl", "9.0", "10.0"), ("transformers<4",))
    R.ensure("trl", "9.9.9")
    assert built == [("trl", "9.9.9")] and "transformers<4" in (env / ".grpo-identity-ready").read_text()


def test_a_release_whose_build_fails_leaves_neither_its_folder_nor_its_lock(tmp_path, monkeypatch):
    def failing_build(env, framework, release):
        env.mkdir(parents=True)
        (env / "half-made").write_text("")
        raise AdapterError(f"pip could not install {framework}=={release} here")

    monkeypatch.setenv("GRPO_IDENTITY_ENVS", str(tmp_path))
    monkeypatch.setattr(R, "_build", failing_build)
    with open(os.devnull, "w") as quiet, pytest.raises(AdapterError, match="could not install trl==99.0"):
        R.ensure("trl", "99.0", log=quiet)
    assert list(tmp_path.iterdir()) == []
