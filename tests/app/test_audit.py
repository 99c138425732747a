"""``grpo-identity audit`` (``grpo_identity.app.commands.audit``): exit codes (0 pass or
deviation, 1 fail, 2 usage error), the fields of ``--json``, and every bad option, bad
combination or target that cannot be loaded as one line on stderr, before any framework is
imported."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from grpo_identity.app.cli import main
from grpo_identity.checks.calls.adapters import TESTED_VERSIONS

TARGETS = textwrap.dedent(
    """
    import os
    import numpy as np

    def good(rewards, G):
        R = rewards.reshape(-1, G)
        live = np.ptp(R, 1, keepdims=True) > 0
        return np.where(live, R - R.mean(1, keepdims=True), 0.0).reshape(-1)

    def crash(rewards, G):
        os._exit(7)

    def raises_on_big_groups(rewards, G):
        if G > 32:
            raise RuntimeError("too big")
        return good(rewards, G)

    def none(rewards, G):
        return None

    def token_sum_mean(rewards, G, lengths):  # Dr. GRPO advantages, each answer's token losses summed, answers averaged
        A = good(rewards, G)
        mask = (np.arange(8)[None, :] < lengths[:, None]).astype(float)
        return {"advantages": A, "coefficients": A[:, None] * mask / len(A), "mask": mask}
    """
)


@pytest.fixture
def target_file(tmp_path):
    path = tmp_path / "targets.py"
    path.write_text(TARGETS)
    return str(path)


def _one_line_error(capsys, words):
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("grpo-identity audit: error: ")


# --- exit codes and --json -----------------------------------------------------------------------
@pytest.mark.slow
def test_cli_exit_codes_are_0_for_pass_and_deviation_1_for_fail_2_for_usage(target_file, capsys):
    assert main(["audit", f"{target_file}:good", "--max-examples", "20", "--expect", "dr_grpo"]) == 0
    assert "verdict: PASS" in capsys.readouterr().out
    assert main(["audit", "preset:trl", "--max-examples", "20", "--expect", "grpo"]) == 0
    assert main(["audit", f"{target_file}:crash", "--max-examples", "5"]) == 1
    capsys.readouterr()
    assert main(["audit", f"{target_file}:missing"]) == 2
    assert main(["audit", "grpo", "--expect", "ppo"]) == 2
    assert main(["audit", "grpo", "--max-examples", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("grpo-identity audit: error:") for line in err)


def test_cli_json_has_the_documented_fields(target_file, capsys):
    assert main(["audit", f"{target_file}:raises_on_big_groups", "--json", "--max-examples", "10"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert {"target", "kind", "verdict", "matches", "inferred", "findings"} <= set(out)
    assert out["verdict"] == "fail" and out["matches"] is None
    assert {"property", "message", "counterexample"} <= set(out["findings"][0])


def test_the_cli_exits_1_on_a_target_returning_none_with_no_traceback(target_file, capsys):
    code = main(["audit", f"{target_file}:none", "--max-examples", "5"])
    captured = capsys.readouterr()
    assert code == 1 and "Traceback" not in captured.err + captured.out
    assert "returned None" in captured.out


def test_a_function_in_a_file_can_be_audited_at_the_gradient_level(target_file, capsys):
    argv = ["audit", f"{target_file}:token_sum_mean", "--level", "gradient", "--expect", "dr_grpo", "--json"]
    assert main([*argv, "--max-examples", "20"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["level"] == "gradient" and out["verdict"] == "pass" and out["advantage"]["matches"] == "dr_grpo"
    assert out["inferred"]["per_sample_weight"] == "constant"


# --- a target that cannot be loaded: exit 2 ------------------------------------------------------
@pytest.mark.parametrize(
    "module, words",
    [
        ("import time\ntime.sleep(600)\n", "loading the target ran past the 2 s timeout (killed)"),
        ("import os\nos._exit(3)\n", "exit code 3"),
    ],
    ids=["hangs", "crashes"],
)
def test_a_module_that_hangs_or_crashes_while_loading_is_a_usage_error(tmp_path, capsys, module, words):
    path = tmp_path / "loads_badly.py"
    path.write_text(module + "\ndef f(rewards, G):\n    return rewards\n")
    assert main(["audit", f"{path}:f", "--timeout", "2", "--max-examples", "5"]) == 2
    _one_line_error(capsys, words)


# --- bad options, each one line ------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv, words",
    [
        (["audit", "grpo", "--set", "loss_type=grpo"], "--set applies to the framework targets"),
        (
            ["audit", "grpo", "--level", "gradient"],
            "--level gradient: the preset 'grpo' has no loss; audit it at the advantage level",
        ),
        (["audit", "trl", "--set", "loss_type"], "--set takes KEY=VALUE, got 'loss_type'"),
        (["audit", "trl", "--set", "loss_type="], "--set loss_type= has no value: give one (null for none)"),
        (["audit", "trl", "--config", "no/such/file.yaml"], "--config names no file: no/such/file.yaml"),
        (["audit", "verl:estimator=grpo", "--set", "algorithm.gamma=1"], "the estimator function alone"),
        (["audit", "trl", "--kind", "filter"], "--kind filter"),
        (["audit", "trl", "--expect", "nope"], "--expect"),
    ],
)
def test_bad_framework_options_are_one_line_usage_errors(argv, words, capsys):
    assert main(argv) == 2
    _one_line_error(capsys, words)


@pytest.mark.parametrize(
    "option, value",
    [
        ("--max-examples", "10001"),
        ("--timeout", "inf"),
        ("--timeout", "nan"),
        ("--timeout", "1e9"),
        ("--timeout", "3601"),
        ("--timeout", "0"),
    ],
)
def test_an_option_out_of_its_bounds_is_a_one_line_usage_error(option, value, capsys):
    assert main(["audit", "grpo", option, value]) == 2
    _one_line_error(capsys, f"{option} must be")


def test_options_for_other_targets_are_refused_but_openrlhf_takes_them(capsys):
    assert main(["audit", "preset:openrlhf", "--set", "algo.advantage.estimator=group_norm"]) == 2
    _one_line_error(capsys, "--set applies to the framework targets (trl, verl, areal, openrlhf, skyrl, ms-swift)")


def test_release_and_releases_together_is_a_usage_error(capsys):
    assert main(["audit", "trl", "--release", "0.22.0", "--releases", "0.22.0,1.16.0"]) == 2
    assert "not both" in capsys.readouterr().err


# --- a framework ---------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.xdist_group("verl")
def test_the_cli_audits_a_framework_and_prints_json(capsys):
    pytest.importorskip("verl.trainer.ppo.core_algos", reason="verl is not installed (make frameworks)")
    code = main(["audit", "verl:rloo", "--level", "advantage", "--json", "--max-examples", "20"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["verdict"] == "pass" and out["matches"] == "rloo"
    assert out["target_info"]["version"] == TESTED_VERSIONS["verl"]
    assert {"target", "kind", "verdict", "matches", "inferred", "findings"} <= set(out)


# --- a CI gate: --strict -----------------------------------------------------------------------------
def test_strict_turns_a_deviation_from_expect_into_exit_1_and_the_help_says_so(target_file, capsys):
    dr_grpo = f"{target_file}:good"
    assert main(["audit", "preset:trl", "--expect", "grpo", "--max-examples", "20"]) == 0
    assert main(["audit", "preset:trl", "--expect", "grpo", "--max-examples", "20", "--strict"]) == 1
    assert (
        main(["audit", "preset:trl", "--max-examples", "20", "--strict"]) == 0
    )  # no --expect: nothing to deviate from
    assert main(["audit", dr_grpo, "--expect", "dr_grpo", "--max-examples", "20", "--strict"]) == 0  # a pass
    capsys.readouterr()
    assert main(["audit", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "deviation from --expect with --strict" in text and "0 pass, or deviation" in text


# --- the code users wrote ----------------------------------------------------------------------------
USER_CODE = str(Path(__file__).parents[1] / "checks" / "_user_code.py")

STEP = textwrap.dedent(
    """
    import torch
    from grpo_identity.checks import gradient_target

    def advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
        r = rewards.view(-1, group_size)
        centred = r - r.mean(1, keepdim=True)
        return torch.where(r.max(1, keepdim=True).values > r.min(1, keepdim=True).values, centred, 0 * centred).view(-1)

    def seq_mean_token_sum(logprobs, advantages, mask):
        return -((logprobs * mask).sum(1) * advantages).mean()

    def seq_mean_token_mean(logprobs, advantages, mask):
        return -(((logprobs * mask).sum(1) / mask.sum(1)) * advantages).mean()

    constant = gradient_target(advantages, seq_mean_token_sum)
    length_biased = gradient_target(advantages, seq_mean_token_mean)
    """
)


def test_the_gradient_level_audits_a_users_own_loss_built_from_their_advantages_and_aggregation(tmp_path, capsys):
    step = tmp_path / "my_step.py"
    step.write_text(STEP)
    assert main(["audit", f"{step}:constant", "--level", "gradient", "--max-examples", "40", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (
        out["verdict"] == "pass" and out["inferred"]["per_sample_weight"] == "constant" and out["matches"] == "dr_grpo"
    )
    assert main(["audit", f"{step}:length_biased", "--level", "gradient", "--max-examples", "40", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["inferred"]["per_sample_weight"] == "1/length"


def test_an_ordinary_torch_grpo_function_is_audited_as_written(capsys):
    argv = ["audit", f"{USER_CODE}:compute_grpo_advantages", "--expect", "grpo", "--max-examples", "60", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "deviation" and out["matches"] == "verl" and out["inferred"]["ddof"] == 1  # Bessel, ε
    assert out["target_info"]["call"]["input"] == "torch"
    assert main(["audit", f"{USER_CODE}:compute_grpo_advantages_batch_mean", "--max-examples", "60"]) == 1


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--input", "jax"], "--input: invalid choice"),
        (["--reward-dtype", "int8"], "--reward-dtype: invalid choice"),
        (["--call", "fn(rewards=R, t=T)"], "--call uses 'T'"),
        (["--input", "numpy", "--reward-dtype", "bfloat16"], "--reward-dtype bfloat16 needs torch tensors"),
        (["--level", "gradient", "--input", "torch"], "--input applies at the advantage level"),
    ],
)
def test_bad_calling_options_are_one_line_usage_errors(argv, words, capsys):
    assert main(["audit", f"{USER_CODE}:dr_grpo_grid", *argv]) == 2
    _one_line_error(capsys, words)


def test_calling_options_are_refused_for_a_framework(capsys):
    assert main(["audit", "trl", "--input", "torch"]) == 2
    _one_line_error(capsys, "--input applies to functions")


def test_a_function_the_audit_cannot_call_is_a_usage_error_that_says_what_to_pass(capsys):
    assert main(["audit", f"{USER_CODE}:needs_a_temperature"]) == 2
    _one_line_error(capsys, "needs temperature, which the audit cannot pass: give --call")
    call = "needs_a_temperature(R, G, temperature=2.0)"
    assert main(["audit", f"{USER_CODE}:needs_a_temperature", "--call", call, "--max-examples", "20"]) == 0


def test_expect_takes_a_coefficient_formula_and_a_bad_one_is_a_one_line_usage_error(tmp_path, capsys):
    path = tmp_path / "over_g.py"
    path.write_text(
        "import numpy as np\n\n"
        "def over_g(rewards, G):\n"
        "    R = np.asarray(rewards, dtype=float).reshape(-1, G)\n"
        "    return ((R - R.mean(1, keepdims=True)) / G).reshape(-1)\n"
    )
    target = f"{path}:over_g"
    assert main(["audit", target, "--max-examples", "10", "--expect", "c=sigma**2/G"]) == 0
    assert "verdict: PASS   matches: c=sigma**2/G   expected: c=sigma**2/G" in capsys.readouterr().out
    assert main(["audit", target, "--max-examples", "10", "--expect", "c=sigma**2", "--strict"]) == 1
    assert "[deviation] matches_declared:" in capsys.readouterr().out
    assert main(["audit", target, "--max-examples", "10", "--expect", "c=__import__('os')"]) == 2
    _one_line_error(capsys, "--expect must be a preset name or c=FORMULA in k, G, sigma")


def test_the_help_of_expect_names_every_preset_and_every_variant(capsys):
    from grpo_identity import dial as D
    from grpo_identity.app.cli import main
    from grpo_identity.variants import VARIANTS

    assert main(["audit", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert all(name in text for name in [*D.PRESETS, *VARIANTS])


def test_the_help_of_call_names_every_name_a_template_may_use(capsys):
    import re

    from grpo_identity.checks.calls.calling import TEMPLATE_NAMES

    assert main(["audit", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    said = text[text.index("--call TEMPLATE how") :]
    assert all(re.search(rf"\b{name}\b", said[:700]) for name in TEMPLATE_NAMES), said[:700]


def test_the_help_of_the_target_names_every_registered_framework(capsys):
    assert main(["audit", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "or a framework: " + ", ".join(TESTED_VERSIONS) + " (with --set)" in text


@pytest.mark.parametrize(
    "message, said",
    [
        ("TRL: num_processes takes a whole number", "trl 1.16.0: num_processes takes a whole number"),
        ("trl 1.16.0: GRPOTrainer rejects the config", "trl 1.16.0: GRPOTrainer rejects the config"),
        ("the driver cannot read this step", "trl 1.16.0: the driver cannot read this step"),
    ],
)
def test_a_drivers_error_names_the_framework_and_release_once(message, said):
    from grpo_identity.app.commands.audit import _with_release

    assert _with_release(message, "trl", "1.16.0") == said
    assert _with_release(message, "trl", None) == message
