"""Audits of the real frameworks as their users run them (TRL's GRPOTrainer from a GRPOConfig,
verl's trainer dispatch from its Hydra config, verl's estimator functions alone), at the versions
the Makefile pins."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from grpo_identity.app.cli import main
from grpo_identity.checks import audit
from grpo_identity.checks.adapters import TESTED_VERSIONS

pytestmark = pytest.mark.frameworks
ROOT = Path(__file__).resolve().parents[2]


def _need(module: str) -> None:
    pytest.importorskip(module, reason=f"{module} is not installed (make frameworks)")


def test_the_makefile_pins_the_versions_the_adapters_were_tested_with():
    text = (ROOT / "Makefile").read_text()
    pins = {name: re.search(rf"^{name.upper()}_VERSION\s*:=\s*(\S+)", text, re.M).group(1) for name in TESTED_VERSIONS}
    assert pins == TESTED_VERSIONS


@pytest.mark.slow
@pytest.mark.parametrize(
    "spec, matches",
    [
        # verl:grpo and grpo without the std are audited by the two tests below and the next one
        ("verl:grpo_vectorized", "verl"),
        ("verl:rloo", "rloo"),
    ],
)
def test_verl_estimators_match_their_presets(spec, matches):
    _need("verl.trainer.ppo.core_algos")
    report = audit(spec, level="advantage", max_examples=100)
    assert report.verdict == "pass", report.format()
    assert report.matches == matches
    assert report.target_info["framework"] == "verl" and report.target_info["version"] == TESTED_VERSIONS["verl"]
    assert report.target_info["entry"].startswith("ray_trainer.compute_advantage")
    assert report.inferred.precision == "float32"
    assert not [f for f in report.findings if f.severity != "note"]


@pytest.mark.slow
def test_verl_grpo_deviates_from_paper_grpo_by_bessel_and_its_epsilon():
    _need("verl.trainer.ppo.core_algos")
    report = audit("verl:grpo", expect="grpo", level="advantage", max_examples=50)
    assert report.verdict == "deviation" and report.matches == "verl"
    assert report.inferred.ddof == 1 and report.inferred.eps == pytest.approx(1e-6, rel=0.2)
    factors = {f["G"]: f["factor_at_half"] for f in report.factors}
    assert factors[4] == pytest.approx((3 / 4) ** 0.5, rel=1e-3)  # Bessel: √((G−1)/G)
    assert factors[64] == pytest.approx((63 / 64) ** 0.5, rel=1e-3)


@pytest.mark.slow
def test_verl_keeps_binary_silent_groups_exactly_zero_but_not_silent_groups_of_0_1():
    _need("verl.trainer.ppo.core_algos")
    report = audit("verl:grpo_vectorized", level="advantage", max_examples=20)
    # binary silent groups: exactly 0 (a property, checked on every example)
    assert "silent_groups_exactly_zero" in report.properties_run
    assert not [f for f in report.findings if f.property == "silent_groups_exactly_zero"]
    # every reward 0.1 in float32: the rounding of the mean, divided by std + 1e-6, survives
    assert report.inferred.silent_nonbinary_max_abs > 1e-3
    assert [f.severity for f in report.findings if f.property == "silent_nonbinary_groups_zero"] == ["note"]


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
    _need("trl")
    report = audit(spec, level="advantage", max_examples=40)
    assert report.verdict == verdict, report.format()
    assert report.matches == matches
    assert report.inferred.scale == scale
    assert report.target_info["framework"] == "trl" and report.target_info["version"] == TESTED_VERSIONS["trl"]
    if scale != "none":
        assert report.inferred.ddof == 1 and report.inferred.eps == pytest.approx(1e-4, rel=0.05)


@pytest.mark.slow
def test_the_cli_audits_a_framework_and_prints_json(capsys):
    _need("verl.trainer.ppo.core_algos")
    code = main(["audit", "verl:rloo", "--level", "advantage", "--json", "--max-examples", "20"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert (
        out["verdict"] == "pass"
        and out["matches"] == "rloo"
        and out["target_info"]["version"] == TESTED_VERSIONS["verl"]
    )
    assert {"target", "kind", "verdict", "matches", "inferred", "findings"} <= set(out)


# --- config in: the trainer's own path ---------------------------------------------------------
@pytest.mark.slow
def test_verl_grpo_without_std_normalisation_through_the_trainer_is_dr_grpo(capsys):
    _need("verl.trainer.ppo.ray_trainer")
    argv = [
        "audit",
        "verl",
        "--set",
        "algorithm.adv_estimator=grpo",
        "--set",
        "algorithm.norm_adv_by_std_in_grpo=false",
        "--expect",
        "dr_grpo",
        "--max-examples",
        "30",
        "--json",
    ]
    code = main(argv)  # the default level for a framework: the gradient, then the advantages
    out = json.loads(capsys.readouterr().out)
    assert (
        code == 0 and out["level"] == "gradient" and out["matches"] == "dr_grpo" and out["inferred"]["scale"] == "none"
    )
    assert out["advantage"]["verdict"] == "pass"  # the advantages are Dr. GRPO's ...
    assert (
        out["verdict"] == "deviation" and out["inferred"]["per_sample_weight"] == "1/batch_tokens"
    )  # ... token-mean is not its constant weight
    assert (
        out["target_info"]["entry"].startswith("ray_trainer.compute_advantage")
        and out["target_info"]["norm_adv_by_std_in_grpo"] is False
    )


@pytest.mark.slow
def test_the_estimator_function_form_says_it_bypasses_the_trainer():
    _need("verl.trainer.ppo.core_algos")
    report = audit("verl:estimator=grpo_vectorized", max_examples=20)
    assert report.verdict == "pass" and report.matches == "verl"
    assert "bypasses the trainer" in report.target_info["entry"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv, words",
    [
        (["audit", "verl", "--set", "algorithm.no_such_key=1"], "Could not override 'algorithm.no_such_key'"),
        (["audit", "verl", "--set", "algorithm.adv_estimator=no_such_estimator"], "no_such_estimator"),
        (["audit", "trl", "--set", "scale_rewards=bogus"], "Invalid value for scale_rewards: bogus"),
        (["audit", "trl:scale_rewards=bogus"], "Invalid value for scale_rewards: bogus"),
        (["audit", "trl", "--set", "no_such_field=1"], "no_such_field"),
    ],
)
def test_a_configuration_the_framework_rejects_is_a_usage_error_not_a_fail(argv, words, capsys):
    _need("verl.trainer.ppo.ray_trainer" if "verl" in argv else "trl")
    assert main([*argv, "--max-examples", "5"]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


# --- gradient level ------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(
    "loss_type, weight",
    [("grpo", "1/length"), ("dr_grpo", "constant"), ("bnpo", "1/batch_tokens"), ("dapo", "1/batch_tokens")],
)
def test_trl_compute_loss_names_the_per_sample_weight_of_each_loss_type(loss_type, weight, capsys):
    _need("trl")
    code = main(
        ["audit", "trl", "--set", f"loss_type={loss_type}", "--level", "gradient", "--max-examples", "20", "--json"]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["level"] == "gradient"
    assert out["inferred"]["per_sample_weight"] == weight and out["inferred"]["silent_groups_zero_gradient"]
    assert (
        out["verdict"] == ("pass" if weight == "constant" else "deviation") and out["matches"] == "trl"
    )  # its advantages: group std, ddof 1


@pytest.mark.slow
def test_trl_under_bf16_mixed_precision_keeps_the_identity_at_the_gradient(capsys):
    _need("trl")
    code = main(
        [
            "audit",
            "trl",
            "--set",
            "bf16=true",
            "--set",
            "loss_type=dr_grpo",
            "--set",
            "scale_rewards=none",
            "--max-examples",
            "20",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    # compute_loss runs under the trainer's bf16 autocast; TRL's log-probabilities and loss stay
    # float32, so the coefficients are float32 and Dr. GRPO's constant weight survives
    assert code == 0 and out["target_info"]["mixed_precision"] == "bf16"
    assert (
        out["verdict"] == "pass" and out["matches"] == "dr_grpo" and out["inferred"]["per_sample_weight"] == "constant"
    )
    assert out["inferred"]["coefficient_precision"] == "float32" and out["inferred"]["silent_groups_zero_gradient"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode, weight",
    [
        ("token-mean", "1/batch_tokens"),
        ("token-sum", "constant"),
        ("seq-mean-token-sum", "constant"),
        ("seq-mean-token-mean", "1/length"),
        ("seq-mean-token-sum-norm", "constant"),
    ],
)
def test_verl_agg_loss_names_the_per_sample_weight_of_each_loss_agg_mode(mode, weight):
    _need("verl.trainer.ppo.ray_trainer")
    from grpo_identity.checks.frameworks import FrameworkSpec

    spec = FrameworkSpec(
        "verl",
        sets=(("algorithm.adv_estimator", "grpo"), ("actor_rollout_ref.actor.loss_agg_mode", mode)),
        level="gradient",
    )
    report = audit(spec, level="gradient", isolate=False, max_examples=20)
    assert report.inferred["per_sample_weight"] == weight, report.format()
    assert (
        report.inferred["silent_groups_zero_gradient"]
        and max(r["G1_residual"] for r in report.coefficient_table) < 1e-3
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "framework, text, override",
    [
        ("trl", "scale_rewards: none\nloss_type: dr_grpo\n", ("scale_rewards", "group")),
        (
            "verl",
            "algorithm:\n  adv_estimator: grpo\n  norm_adv_by_std_in_grpo: false\n",
            ("algorithm.norm_adv_by_std_in_grpo", "true"),
        ),
    ],
)
def test_a_config_file_is_read_as_the_framework_reads_it_and_set_overrides_it(framework, text, override, tmp_path):
    _need("verl.trainer.ppo.ray_trainer" if framework == "verl" else "trl")
    import numpy as np

    from grpo_identity.checks import adapters
    from grpo_identity.checks.frameworks import FrameworkSpec

    path = tmp_path / "run.yaml"
    path.write_text(text)
    r = np.array([1.0, 0.0, 0.0, 0.0])
    from_file = adapters.build(FrameworkSpec(framework, config=str(path)))(r, 4)
    overridden = adapters.build(FrameworkSpec(framework, sets=(override,), config=str(path)))(r, 4)
    assert from_file == pytest.approx([0.75, -0.25, -0.25, -0.25])  # no std: Dr. GRPO
    assert overridden[0] == pytest.approx(1.5, rel=1e-3)  # the group std (ddof 1) is back


@pytest.mark.slow
def test_an_unknown_key_in_a_verl_config_file_is_a_usage_error(tmp_path, capsys):
    _need("verl.trainer.ppo.ray_trainer")
    path = tmp_path / "bad.yaml"
    path.write_text("algorithm:\n  no_such: 1\n")
    assert main(["audit", "verl", "--config", str(path), "--max-examples", "5"]) == 2
    assert "Key 'no_such' is not in struct" in capsys.readouterr().err


@pytest.mark.slow
def test_through_verls_trainer_grpo_vectorized_ignores_norm_adv_by_std_in_grpo_false():
    """verl 0.9.1: the trainer's dispatch hands grpo_vectorized only the config object, and the
    estimator reads norm_adv_by_std_in_grpo from its keyword (default True): the setting is lost.
    The estimator-function form, given the keyword, computes Dr. GRPO and hides it."""
    _need("verl.trainer.ppo.ray_trainer")
    import numpy as np

    from grpo_identity.checks import adapters
    from grpo_identity.checks.frameworks import FrameworkSpec

    r = np.array([1.0, 0.0, 0.0, 0.0])
    trainer = adapters.build(
        FrameworkSpec(
            "verl",
            sets=(("algorithm.adv_estimator", "grpo_vectorized"), ("algorithm.norm_adv_by_std_in_grpo", "false")),
        )
    )(r, 4)
    bypass = adapters.build("verl:estimator=grpo_vectorized,norm_adv_by_std_in_grpo=false")(r, 4)
    assert trainer[0] == pytest.approx(1.5, rel=1e-3)  # still divided by the group std (ddof 1)
    assert bypass[0] == pytest.approx(0.75)  # Dr. GRPO
