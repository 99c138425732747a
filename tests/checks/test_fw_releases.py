"""Releases: cached environments (checks.releases) and driver errors that are adapter errors."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest
from _fw_support import env_or_skip

from grpo_identity.app.cli import main
from grpo_identity.checks import releases as R
from grpo_identity.checks.frameworks import AdapterError, FrameworkSpec


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
    [("trl", "0.22; rm -rf /", "is no version number"), ("grpo", "0.11.2", "--release applies to")],
)
def test_a_bad_release_request_is_refused_before_pip_runs(framework, release, words, monkeypatch, tmp_path):
    monkeypatch.setenv("GRPO_IDENTITY_ENVS", str(tmp_path))
    with pytest.raises(AdapterError, match=words):
        R.ensure(framework, release)
    assert list(tmp_path.iterdir()) == []


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
    # made by an earlier version from another clone: its .pth names a project environment now gone
    (env / site / "_grpo_identity_base.pth").write_text(
        "import site; site.addsitedir('/nonexistent/.venv/lib/python3.11/site-packages')\n"
    )
    assert R.ensure("trl", "9.9.9").python == str(python)
    probe = [str(python), "-c", "import grpo_identity.checks.target"]
    assert subprocess.run(probe, cwd=tmp_path, env=R.child_environ(), capture_output=True).returncode == 0
    bare = {k: v for k, v in R.child_environ().items() if k != R.BASE_SITE_VAR}
    assert (
        subprocess.run(probe, cwd=tmp_path, env=bare, capture_output=True).returncode != 0
    )  # the variable is what links it


def test_release_and_releases_together_is_a_usage_error(capsys):
    assert main(["audit", "trl", "--release", "0.22.0", "--releases", "0.22.0,1.16.0"]) == 2
    assert "not both" in capsys.readouterr().err


@pytest.mark.frameworks
def test_a_driver_that_meets_an_unknown_api_is_an_adapter_error_naming_the_release(monkeypatch):
    if importlib.util.find_spec("trl") is None:
        pytest.skip("trl is not installed (make frameworks)")
    from importlib.metadata import version

    from grpo_identity.checks import adapters
    from grpo_identity.checks.frameworks import trl as drv

    def no_such_api(spec):
        def fn(rewards, G):
            raise AttributeError("'GRPOTrainer' object has no attribute '_generate_and_score_completions'")

        fn.grpo_identity_info = {"framework": "trl", "version": version("trl")}
        return fn

    monkeypatch.setattr(drv, "advantage_target", no_such_api)
    with pytest.raises(
        AdapterError,
        match=rf"trl {version('trl')}: the driver does not know this release's API .*_generate_and_score_completions",
    ):
        adapters.build(FrameworkSpec("trl"))


def _env_or_skip(framework, release):
    return env_or_skip(framework, release)


@pytest.mark.slow
@pytest.mark.frameworks
def test_trl_0_22_0_does_not_scale_by_the_group_std_under_its_default_scale_rewards(capsys):
    _env_or_skip("trl", "0.22.0")
    code = main(
        [
            "audit",
            "trl",
            "--release",
            "0.22.0",
            "--set",
            "scale_rewards=group",
            "--level",
            "advantage",
            "--max-examples",
            "20",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["target_info"]["version"] == "0.22.0"
    assert out["inferred"]["scale"] == "none" and out["matches"] == "dr_grpo"  # the released bug: 'group' skips the std


@pytest.mark.slow
@pytest.mark.frameworks
def test_releases_prints_one_line_per_release(capsys):
    for release in ("0.22.0", "1.16.0"):
        _env_or_skip("trl", release)
    code = main(["audit", "trl", "--releases", "0.22.0,1.16.0", "--max-examples", "20"])
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.strip()]
    assert code == 0 and len(lines) == 2
    # the default level (gradient): each release's advantages, and its default loss_type's weight
    # (0.22: bnpo, 1.16: dapo; both normalise by the batch's tokens)
    assert lines[0].startswith("trl 0.22.0: DEVIATION  matches dr_grpo") and lines[1].startswith(
        "trl 1.16.0: DEVIATION  matches trl"
    )
    assert np.all([" (centre mean" in ln and "per-sample weight 1/batch_tokens" in ln for ln in lines])


def test_a_framework_installed_without_its_requirements_gets_two_pip_commands(monkeypatch):
    monkeypatch.setitem(R.NO_DEPS, ("demo", "0.0", "2.0"), ("torchdata",))
    monkeypatch.setitem(R.RELEASE_PINS, ("demo", "0.0", "99"), ("ray",))
    first, second = R.install_commands("demo", "1.0", "py", "c.txt")
    assert first[-3:] == ["--no-deps", "demo==1.0", "torchdata"] and "torch==2.13.0" not in first
    assert second[-2:] == ["torch==2.13.0", "ray"] and "--no-deps" not in second
    assert (
        R.no_deps("demo", "2.0") is None and len(R.install_commands("demo", "2.0", "py", "c.txt")) == 1
    )  # past the range: one command, with dependencies
    assert all(cmd[cmd.index("-c") + 1] == "c.txt" for cmd in (first, second))


def test_a_framework_not_installed_here_is_audited_in_its_tested_release_environment(monkeypatch, capsys):
    import importlib.util as iu

    from grpo_identity.checks.adapters import TESTED_VERSIONS

    real = iu.find_spec
    monkeypatch.setattr(iu, "find_spec", lambda name, *a: None if name == "trl" else real(name, *a))
    asked = []

    def no_pip_here(framework, release, **kw):
        asked.append((framework, release))
        raise AdapterError("pip could not install trl here: no network")

    monkeypatch.setattr(R, "ensure", no_pip_here)
    assert main(["audit", "trl", "--set", "loss_type=grpo"]) == 2
    err = capsys.readouterr().err
    assert asked == [("trl", TESTED_VERSIONS["trl"])]
    assert (
        "trl is not installed here: auditing its release" in err
        and f"trl {TESTED_VERSIONS['trl']} (its tested release; it is not installed here): pip could not install" in err
        and "--release 1" not in err
    )


@pytest.mark.slow
@pytest.mark.frameworks
def test_trl_0_16_0_the_first_with_scale_rewards_a_bool_normalises_its_loss_by_the_batch_tokens(capsys):
    _env_or_skip("trl", "0.16.0")
    code = main(
        ["audit", "trl", "--release", "0.16.0", "--set", "scale_rewards=false", "--max-examples", "20", "--json"]
    )
    out = json.loads(capsys.readouterr().out)
    # 0.16.0: scale_rewards: bool (False: no std); the loss is Σ token losses / Σ tokens of the batch
    assert code == 0 and out["target_info"]["version"] == "0.16.0" and out["level"] == "gradient"
    assert out["matches"] == "dr_grpo" and out["inferred"]["per_sample_weight"] == "1/batch_tokens"
    assert "has one loss" in out["target_info"]["loss_type"]


@pytest.mark.slow
@pytest.mark.frameworks
def test_verl_grpo_vectorized_through_the_trainer_crashes_in_0_6_0_and_ignores_the_std_switch_in_0_7_1(capsys):
    for release in ("0.6.0", "0.7.1"):
        _env_or_skip("verl", release)
    argv = [
        "audit",
        "verl",
        "--set",
        "algorithm.adv_estimator=grpo_vectorized",
        "--set",
        "algorithm.norm_adv_by_std_in_grpo=false",
        "--expect",
        "dr_grpo",
    ]
    code = main([*argv, "--releases", "0.6.0,0.7.1", "--level", "advantage", "--max-examples", "20"])
    old, new = [ln for ln in capsys.readouterr().out.splitlines() if ln.strip()]
    assert code == 2  # one release could not be run
    # 0.6.0: group_mean_std(device=None) resolves the device to a module (get_torch_device()) outside pytest
    assert old.startswith("verl 0.6.0: ADAPTER ERROR") and "TypeError: to() received an invalid combination" in old
    # 0.7.1: the trainer hands the estimator its config; the estimator reads the switch from a keyword
    assert new.startswith("verl 0.7.1: FAIL  matches verl") and "scale group_std" in new


def test_a_cached_environment_built_with_other_pins_is_rebuilt_not_reused(tmp_path, monkeypatch):
    env, python = _bare_release_env(tmp_path, monkeypatch)
    built = []
    monkeypatch.setattr(R, "_build", lambda env, fw, rel: built.append((fw, rel)))
    assert R.ensure("trl", "9.9.9").python == str(python) and built == []  # the recipe matches: reused
    monkeypatch.setitem(R.RELEASE_PINS, ("trl", "9.0", "10.0"), ("transformers<4",))
    R.ensure("trl", "9.9.9")
    assert built == [("trl", "9.9.9")] and "transformers<4" in (env / ".grpo-identity-ready").read_text()
