"""The TRL driver (``checks.frameworks.trl``): TRL's GRPOTrainer built from a GRPOConfig as its
users write it — ``scale_rewards`` at the advantage level, each ``loss_type``'s per-sample weight
at the gradient level, bf16 mixed precision, a config file under ``--set``, a configuration TRL
rejects — at the version the Makefile pins, then older releases from their own environments
(0.16.0, 0.22.0)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from _support import env_or_skip

from grpo_identity.app.cli import main
from grpo_identity.checks import adapters, audit
from grpo_identity.checks.adapters import TESTED_VERSIONS
from grpo_identity.checks.frameworks import FrameworkSpec

pytestmark = [pytest.mark.frameworks, pytest.mark.xdist_group("trl")]


def _need_trl() -> None:
    pytest.importorskip("trl", reason="trl is not installed (make frameworks)")


def _json(capsys):
    return json.loads(capsys.readouterr().out)


# --- the tested release, installed here --------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(
    "spec, verdict, matches, scale",
    [
        ("trl", "pass", "trl", "group_std"),
        ("trl:scale_rewards=none", "pass", "dr_grpo", "none"),
        ("trl:scale_rewards=batch", "deviation", None, "batch_std"),
    ],
)
def test_trl_grpo_trainer_scale_rewards_settings(spec, verdict, matches, scale):
    _need_trl()
    report = audit(spec, level="advantage", max_examples=40)
    assert report.verdict == verdict, report.format()
    assert report.matches == matches
    assert report.inferred.scale == scale
    assert report.target_info["framework"] == "trl" and report.target_info["version"] == TESTED_VERSIONS["trl"]
    if scale != "none":
        assert report.inferred.ddof == 1 and report.inferred.eps == pytest.approx(1e-4, rel=0.05)


@pytest.mark.slow
@pytest.mark.parametrize(
    "loss_type, weight",
    [("grpo", "1/length"), ("dr_grpo", "constant"), ("bnpo", "1/batch_tokens"), ("dapo", "1/batch_tokens")],
)
def test_trl_compute_loss_names_the_per_sample_weight_of_each_loss_type(loss_type, weight, capsys):
    _need_trl()
    argv = ["audit", "trl", "--set", f"loss_type={loss_type}", "--level", "gradient", "--max-examples", "20", "--json"]
    code = main(argv)
    out = _json(capsys)
    assert code == 0 and out["level"] == "gradient"
    assert out["inferred"]["per_sample_weight"] == weight and out["inferred"]["silent_groups_zero_gradient"]
    # its advantages: group std, ddof 1
    assert out["verdict"] == ("pass" if weight == "constant" else "deviation") and out["matches"] == "trl"


@pytest.mark.slow
def test_trl_under_bf16_mixed_precision_keeps_the_identity_at_the_gradient(capsys):
    _need_trl()
    sets = ["--set", "bf16=true", "--set", "loss_type=dr_grpo", "--set", "scale_rewards=none"]
    code = main(["audit", "trl", *sets, "--max-examples", "20", "--json"])
    out = _json(capsys)
    # compute_loss runs under the trainer's bf16 autocast; TRL's log-probabilities and loss stay
    # float32, so the coefficients are float32 and Dr. GRPO's constant weight survives
    assert code == 0 and out["target_info"]["mixed_precision"] == "bf16"
    assert out["verdict"] == "pass" and out["matches"] == "dr_grpo"
    assert out["inferred"]["per_sample_weight"] == "constant"
    assert out["inferred"]["coefficient_precision"] == "float32" and out["inferred"]["silent_groups_zero_gradient"]


@pytest.mark.slow
def test_a_trl_config_file_is_read_as_trl_reads_it_and_set_overrides_it(tmp_path):
    _need_trl()
    path = tmp_path / "run.yaml"
    path.write_text("scale_rewards: none\nloss_type: dr_grpo\n")
    r = np.array([1.0, 0.0, 0.0, 0.0])
    from_file = adapters.build(FrameworkSpec("trl", config=str(path)))(r, 4)
    overridden = adapters.build(FrameworkSpec("trl", sets=(("scale_rewards", "group"),), config=str(path)))(r, 4)
    assert from_file == pytest.approx([0.75, -0.25, -0.25, -0.25])  # no std: Dr. GRPO
    assert overridden[0] == pytest.approx(1.5, rel=1e-3)  # the group std (ddof 1) is back


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv, words",
    [
        (["audit", "trl", "--set", "scale_rewards=bogus"], "Invalid value for scale_rewards: bogus"),
        (["audit", "trl:scale_rewards=bogus"], "Invalid value for scale_rewards: bogus"),
        (["audit", "trl", "--set", "no_such_field=1"], "no_such_field"),
    ],
)
def test_a_configuration_trl_rejects_is_a_usage_error_not_a_fail(argv, words, capsys):
    _need_trl()
    assert main([*argv, "--max-examples", "5"]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


# --- older releases, each in its own environment -----------------------------------------------------
@pytest.mark.slow
def test_trl_0_22_0_does_not_scale_by_the_group_std_under_its_default_scale_rewards(capsys):
    env_or_skip("trl", "0.22.0")
    argv = ["audit", "trl", "--release", "0.22.0", "--set", "scale_rewards=group", "--level", "advantage"]
    code = main([*argv, "--max-examples", "20", "--json"])
    out = _json(capsys)
    assert code == 0 and out["target_info"]["version"] == "0.22.0"
    assert out["inferred"]["scale"] == "none" and out["matches"] == "dr_grpo"  # the released bug: 'group' skips the std


@pytest.mark.slow
def test_trl_0_16_0_the_first_with_scale_rewards_a_bool_normalises_its_loss_by_the_batch_tokens(capsys):
    env_or_skip("trl", "0.16.0")
    code = main(
        ["audit", "trl", "--release", "0.16.0", "--set", "scale_rewards=false", "--max-examples", "20", "--json"]
    )
    out = _json(capsys)
    # 0.16.0: scale_rewards: bool (False: no std); the loss is Σ token losses / Σ tokens of the batch
    assert code == 0 and out["target_info"]["version"] == "0.16.0" and out["level"] == "gradient"
    assert out["matches"] == "dr_grpo" and out["inferred"]["per_sample_weight"] == "1/batch_tokens"
    assert "has one loss" in out["target_info"]["loss_type"]


@pytest.mark.slow
def test_releases_prints_one_line_per_release(capsys):
    for release in ("0.22.0", "1.16.0"):
        env_or_skip("trl", release)
    code = main(["audit", "trl", "--releases", "0.22.0,1.16.0", "--max-examples", "20"])
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.strip()]
    assert code == 0 and len(lines) == 2
    # the default level (gradient): each release's advantages, and its default loss_type's weight
    # (0.22: bnpo, 1.16: dapo; both normalise by the batch's tokens)
    assert lines[0].startswith("trl 0.22.0: DEVIATION  matches dr_grpo")
    assert lines[1].startswith("trl 1.16.0: DEVIATION  matches trl")
    assert np.all([" (centre mean" in ln and "per-sample weight 1/batch_tokens" in ln for ln in lines])


def _without_seconds(d):
    d = {k: v for k, v in d.items() if k != "seconds"}
    if d.get("advantage"):
        d["advantage"] = _without_seconds(d["advantage"])
    return d


@pytest.mark.slow
def test_two_trl_audits_in_one_warm_child_give_the_json_of_two_cold_ones():
    pytest.importorskip("trl")
    from grpo_identity.checks.child import close_warm_children, warm_children

    configs = [["loss_type=grpo"], ["loss_type=dr_grpo", "scale_rewards=none"], ["bf16=true"]]
    close_warm_children()
    warm = [_without_seconds(audit("trl", sets=c, max_examples=30).to_dict()) for c in configs]
    assert sum(warm_children().values()) == 1  # the later audits reused the first one's child
    cold = []
    for c in configs:
        close_warm_children()
        cold.append(_without_seconds(audit("trl", sets=c, max_examples=30).to_dict()))
    assert json.dumps(warm, sort_keys=True) == json.dumps(cold, sort_keys=True)


TRL_GRPO_YAML = """\
# written for `trl grpo --config`: script keys, a model, a dataset, the trainer's own settings
model_name_or_path: Qwen/Qwen2.5-0.5B-Instruct
dataset_name: trl-lib/DeepMath-103K
output_dir: Qwen2.5-0.5B-GRPO
learning_rate: 1.0e-6
num_generations: 8
gradient_accumulation_steps: 4
max_completion_length: 1024
loss_type: dr_grpo
scale_rewards: none
"""


@pytest.mark.slow
def test_a_config_written_for_trl_grpo_audits_unchanged_and_the_report_lists_what_the_driver_chose(tmp_path, capsys):
    pytest.importorskip("trl")
    cfg = tmp_path / "grpo.yaml"
    cfg.write_text(TRL_GRPO_YAML)
    assert main(["audit", "trl", "--config", str(cfg), "--max-examples", "40", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (
        out["verdict"] == "pass" and out["matches"] == "dr_grpo" and out["inferred"]["per_sample_weight"] == "constant"
    )
    settings = out["target_info"]["driver_settings"]
    assert settings["ignored"] == ["model_name_or_path", "dataset_name"]
    assert settings["forced"]["max_completion_length"] == {"driver": 6, "yours": 1024}
    assert "yours: 8" in settings["num_generations"] and "per_device_train_batch_size" in settings["defaults"]
    cfg.write_text(TRL_GRPO_YAML + "lerning_rate: 1.0e-6\n")  # a typo is TRL's error, not ignored
    assert main(["audit", "trl", "--config", str(cfg), "--max-examples", "5"]) == 2
    assert "lerning_rate is no GRPOConfig field nor a key of the trl grpo script" in capsys.readouterr().err


@pytest.mark.slow
def test_a_trl_report_names_the_setting_that_gives_a_constant_weight_and_the_expected_preset(capsys):
    pytest.importorskip("trl")
    argv = ["audit", "trl", "--set", "loss_type=grpo", "--expect", "dr_grpo", "--max-examples", "30", "--json"]
    assert main(argv) == 1  # the group std where Dr. GRPO has none: another family
    notes = [f["message"] for f in json.loads(capsys.readouterr().out)["findings"] if f["property"] == "setting"]
    assert "for a constant per-sample weight (the paper's 1/G): loss_type=dr_grpo" in notes
    assert "for dr_grpo: scale_rewards=none" in notes
