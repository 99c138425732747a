"""The built-in targets (``checks.calls.adapters``): the tested versions, written once (the registry), which names
are adapters (a framework, or a preset named like one), and a framework API a driver does not
know as an ``AdapterError`` naming the release."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from grpo_identity.checks.calls import adapters
from grpo_identity.checks.frameworks import FRAMEWORKS, AdapterError, FrameworkSpec

ROOT = Path(__file__).resolve().parents[2]


def test_the_makefile_keeps_no_second_copy_of_a_frameworks_tested_release():
    """The registry's rows are the one place (the lock is checked against them in tests/scripts/test_lock.py)."""
    text = (ROOT / "Makefile").read_text()
    copies = [
        n for n in adapters.TESTED_VERSIONS if re.search(rf"^{n.upper().replace('-', '_')}_VERSION\s*:=", text, re.M)
    ]
    assert copies == []


def test_areal_is_a_framework_with_a_tested_release():
    assert "areal" in FRAMEWORKS and adapters.TESTED_VERSIONS["areal"] == "1.0.4" and "areal" in adapters.ADAPTERS
    assert adapters.is_adapter("areal:actor.adv_norm=null")


def test_openrlhf_is_the_framework_target_and_the_preset_is_preset_openrlhf():
    assert "openrlhf" in FRAMEWORKS and adapters.is_adapter("openrlhf") and adapters.is_adapter("preset:openrlhf")
    assert "preset:openrlhf" in adapters.names() and "openrlhf" not in adapters.names()
    fn = adapters.build("preset:openrlhf")
    assert fn.grpo_identity_info["framework"] == "grpo-identity dial" and fn.grpo_identity_info["preset"] == "openrlhf"
    assert adapters.TESTED_VERSIONS["openrlhf"] == "0.11.2"


@pytest.mark.frameworks
def test_a_driver_that_meets_an_unknown_api_is_an_adapter_error_naming_the_release(monkeypatch):
    if importlib.util.find_spec("trl") is None:
        pytest.skip("trl is not installed (make frameworks)")
    from importlib.metadata import version

    from grpo_identity.checks.frameworks import trl as drv

    def no_such_api(spec, level):
        def fn(rewards, G):
            raise AttributeError("'GRPOTrainer' object has no attribute '_generate_and_score_completions'")

        fn.grpo_identity_info = {"framework": "trl", "version": version("trl")}
        return fn

    monkeypatch.setattr(drv, "build", no_such_api)
    with pytest.raises(
        AdapterError,
        match=rf"trl {version('trl')}: the driver does not know this release's API .*_generate_and_score_completions",
    ):
        adapters.build(FrameworkSpec("trl"))


def test_one_registry_row_names_a_framework_everywhere():
    from grpo_identity.checks.calls import releases
    from grpo_identity.checks.frameworks import ESTIMATOR_KEY
    from grpo_identity.checks.frameworks.registry import FRAMEWORK_TABLE

    assert FRAMEWORKS == tuple(FRAMEWORK_TABLE) and set(adapters.TESTED_VERSIONS) == set(FRAMEWORK_TABLE)
    assert ESTIMATOR_KEY == {
        "verl": "algorithm.adv_estimator",
        "openrlhf": "algo.advantage.estimator",
        "skyrl": "trainer.algorithm.advantage_estimator",
        "ms-swift": "advantage_estimator",
    }
    assert set(FRAMEWORK_TABLE) <= set(adapters.ADAPTERS) and "verl:estimator=NAME" in adapters.ADAPTERS
    assert {fw for fw, _, _ in releases.RELEASE_PINS} == set(FRAMEWORK_TABLE)  # every framework pins something
    assert releases.NO_DEPS[("openrlhf", "0.0", "99")] == ("torchdata",)
    for entry in FRAMEWORK_TABLE.values():
        assert importlib.util.find_spec(entry.driver) is not None, entry.driver


def test_the_registry_row_gives_the_settings_a_report_names_and_verifys_audits(monkeypatch):
    from grpo_identity.checks import claims
    from grpo_identity.checks.frameworks import registry, setting_for
    from grpo_identity.checks.frameworks.registry import FRAMEWORK_TABLE

    assert (
        setting_for("verl", "per_sample_weight", "constant")
        == "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum"
    )
    assert setting_for("areal", "per_sample_weight", "constant") is None and setting_for("nope", "preset", "x") is None
    assert claims.FRAMEWORK_AUDITS == (
        ("trl", "trl", "grpo"),
        ("verl", "verl:grpo", "grpo"),
        ("verl", "verl:grpo_vectorized", "grpo"),
    )
    row = registry.FrameworkEntry("demo", "1.0", "a demo", settings={"preset": {"grpo": "mode=grpo"}})
    monkeypatch.setitem(FRAMEWORK_TABLE, "demo", row)
    assert setting_for("demo", "preset", "grpo") == "mode=grpo"  # read from the row, no driver imported
