"""``grpo-identity audit`` with framework options: every bad input is one line and exit 2,
before any framework is imported (no TRL or verl needed)."""

from __future__ import annotations

import pytest

from grpo_identity.app.cli import main
from grpo_identity.checks.frameworks import AdapterError, FrameworkSpec, parse_set, parse_spec


@pytest.mark.parametrize(
    "argv, words",
    [
        (["audit", "grpo", "--set", "loss_type=grpo"], "--set applies to the framework targets"),
        (["audit", "grpo", "--level", "gradient"], "--level applies to the framework targets"),
        (["audit", "trl", "--set", "loss_type"], "--set takes KEY=VALUE, got 'loss_type'"),
        (["audit", "trl", "--config", "no/such/file.yaml"], "--config: no such file: no/such/file.yaml"),
        (["audit", "verl:estimator=grpo", "--set", "algorithm.gamma=1"], "the estimator function alone"),
        (["audit", "trl", "--kind", "filter"], "--kind filter"),
        (["audit", "trl", "--expect", "nope"], "--expect"),
    ],
)
def test_bad_framework_options_are_one_line_usage_errors(argv, words, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_the_short_forms_parse_into_the_frameworks_own_keys():
    assert parse_spec("trl:scale_rewards=none,loss_type=dr_grpo").sets == (
        ("scale_rewards", "none"),
        ("loss_type", "dr_grpo"),
    )
    assert parse_spec("verl:rloo").sets == (("algorithm.adv_estimator", "rloo"),)
    bypass = parse_spec("verl:estimator=grpo_vectorized,epsilon=1e-6")
    assert bypass.estimator == "grpo_vectorized" and bypass.options == (("epsilon", 1e-6),) and bypass.sets == ()
    assert bypass.describe() == "verl:estimator=grpo_vectorized,epsilon=1e-06"


def test_later_sets_come_after_earlier_ones_and_keep_their_raw_text():
    spec = FrameworkSpec("trl", sets=(("beta", "0.0"),)).with_sets([parse_set("beta=0.04")], level="gradient")
    assert spec.sets == (("beta", "0.0"), ("beta", "0.04")) and spec.level == "gradient"
    assert spec.describe() == "trl --set beta=0.0 --set beta=0.04"


@pytest.mark.parametrize("spec", ["trl:grpo", "verl:grpo:rloo", "openrlhf:group_norm:rloo", "nemo:x=1"])
def test_malformed_short_forms_are_adapter_errors(spec):
    with pytest.raises(AdapterError):
        parse_spec(spec)


@pytest.mark.frameworks
def test_a_verl_yaml_config_is_read_as_the_trainer_reads_it(tmp_path, capsys):
    pytest.importorskip("verl")
    import json

    cfg = tmp_path / "run.yaml"
    cfg.write_text("algorithm:\n  adv_estimator: grpo\n  norm_adv_by_std_in_grpo: false\n")
    assert (
        main(
            [
                "audit",
                "verl",
                "--config",
                str(cfg),
                "--level",
                "advantage",
                "--expect",
                "dr_grpo",
                "--max-examples",
                "20",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "pass" and out["matches"] == "dr_grpo" and out["inferred"]["scale"] == "none"


@pytest.mark.frameworks
def test_a_verl_yaml_config_reaches_the_gradient_level_too(tmp_path, capsys):
    pytest.importorskip("verl")
    import json

    cfg = tmp_path / "run.yaml"
    cfg.write_text("algorithm:\n  adv_estimator: grpo\n")
    assert main(["audit", "verl", "--config", str(cfg), "--level", "gradient", "--max-examples", "10", "--json"]) == 0
    assert (
        json.loads(capsys.readouterr().out)["inferred"]["per_sample_weight"] == "1/batch_tokens"
    )  # token-mean, verl's default


def test_the_python_api_and_the_cli_default_a_framework_target_to_the_gradient():
    from grpo_identity.checks.auditor import _default_level

    assert parse_spec("trl").default_level() == "gradient" and _default_level("verl:grpo") == "gradient"
    assert _default_level("verl:estimator=grpo_vectorized") == "advantage"  # no loss to differentiate
    assert (
        _default_level(FrameworkSpec("trl", level="advantage")) == "advantage" and _default_level("grpo") == "advantage"
    )
