"""The TRL driver (``checks.frameworks.trl``): TRL's GRPOTrainer built from a GRPOConfig as its
users write it — ``scale_rewards`` at the advantage level, each ``loss_type``'s per-sample weight
at the gradient level, bf16 mixed precision, a config file under ``--set``, a configuration TRL
rejects — at the version the Makefile pins, then older releases from their own environments
(0.16.0, 0.22.0)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from _support import env_or_skip, warm_and_cold

from grpo_identity.app.cli import main
from grpo_identity.checks import audit
from grpo_identity.checks.calls import adapters
from grpo_identity.checks.calls.adapters import TESTED_VERSIONS
from grpo_identity.checks.frameworks import FrameworkSpec
from grpo_identity.checks.measure.steps import design

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
    "loss_type, weight, split_weight",
    [
        ("grpo", "1/length", "1/length"),
        ("dr_grpo", "constant", "constant"),
        ("bnpo", "1/step_tokens", "1/micro_batch_tokens"),
        ("dapo", "1/step_tokens", "1/step_tokens"),
    ],
)
def test_trl_compute_loss_names_the_per_sample_weight_of_each_loss_type(loss_type, weight, split_weight, capsys):
    _need_trl()
    argv = ["audit", "trl", "--set", f"loss_type={loss_type}", "--level", "gradient", "--max-examples", "20", "--json"]
    code = main(argv)
    out = _json(capsys)
    assert out["level"] == "gradient"
    assert out["inferred"]["per_sample_weight"] == weight and out["inferred"]["silent_groups_zero_gradient"]
    # the optimizer step under the driver's default split (two accumulated micro-batches): bnpo normalises each
    # micro-batch by its own tokens (TRL's _compute_loss: mask.sum() of the micro-batch, / accumulation steps)
    step = out["inferred"]["step"]
    assert step["weight"] == split_weight and step["weight_unsplit"] == weight
    assert step["invariant"] is (split_weight == weight)
    # and absolutely: each optimizer step is exactly its loss type's documented objective (bnpo's: the local batch)
    assert step["objective"]["setting"] == f"loss_type={loss_type}" and step["objective"]["factors"] == [1.0, 1.0]
    assert not [f for f in out["findings"] if f["property"] in ("step_scale", "step_weights")]
    assert "default split" in step["layouts"]["split"] and step["settings"]["gradient_accumulation_steps"] == 2
    notes = [f["message"] for f in out["findings"] if f["property"] == "setting"]
    assert any("does not depend on the split: loss_type=dapo" in m for m in notes) is (split_weight != weight)
    # its advantages: group std, ddof 1
    verdict = "fail" if split_weight != weight else "pass" if weight == "constant" else "deviation"
    assert out["verdict"] == verdict and out["matches"] == "trl" and code == (1 if verdict == "fail" else 0)


@pytest.mark.slow
def test_trl_under_bf16_mixed_precision_keeps_the_identity_at_the_gradient(capsys):
    _need_trl()
    sets = ["--set", "bf16=true", "--set", "loss_type=dr_grpo", "--set", "scale_rewards=none"]
    code = main(["audit", "trl", *sets, "--max-examples", "20", "--json"])
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    # the asynchronous-groups probe's answers of no reward are the audit's own: TRL's warning about them is not
    # shown (the audit runs in a child, whose stderr the parent copies to sys.stderr, which capsys holds)
    assert "reward functions returned None" not in captured.err
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
def test_trl_0_16_0_the_first_with_scale_rewards_a_bool_normalises_its_loss_by_the_micro_batch_tokens(capsys):
    env_or_skip("trl", "0.16.0")
    code = main(
        ["audit", "trl", "--release", "0.16.0", "--set", "scale_rewards=false", "--max-examples", "20", "--json"]
    )
    out = _json(capsys)
    # 0.16.0: scale_rewards: bool (False: no std); the loss is Σ token losses / Σ tokens of the micro-batch:
    # one call is 1/step_tokens, a step of accumulated micro-batches weighs each by its own tokens
    assert out["target_info"]["version"] == "0.16.0" and out["level"] == "gradient"
    assert out["matches"] == "dr_grpo" and out["inferred"]["per_sample_weight"] == "1/step_tokens"
    assert "has one loss" in out["target_info"]["loss_type"]
    assert out["inferred"]["step"]["weight"] == "1/micro_batch_tokens" and code == 1
    assert any(f["property"] == "split_invariance" and f["severity"] == "fail" for f in out["findings"])


@pytest.mark.slow
def test_releases_prints_one_line_per_release(capsys):
    for release in ("0.22.0", "1.16.0"):
        env_or_skip("trl", release)
    code = main(["audit", "trl", "--releases", "0.22.0,1.16.0", "--max-examples", "5"])
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.strip()]
    assert code == 1 and len(lines) == 2
    # the default level (gradient): each release's advantages, and its default loss_type's weight
    # (0.22: bnpo, 1.16: dapo; both normalise by the batch's tokens); 0.22 fails: an answer every reward function
    # returns None for enters its group's baseline as 0 (trl #5902, fixed in 1.6.0)
    assert lines[0].startswith("trl 0.22.0: FAIL  matches dr_grpo")
    assert lines[1].startswith("trl 1.16.0: DEVIATION  matches trl")
    assert np.all([" (centre mean" in ln and "per-sample weight 1/step_tokens" in ln for ln in lines])


@pytest.mark.slow
def test_a_second_trl_audit_in_a_warm_child_gives_the_json_of_a_cold_one(monkeypatch):
    pytest.importorskip("trl")
    configs = [["loss_type=grpo"], ["loss_type=dr_grpo", "scale_rewards=none", "bf16=true"]]
    warm, cold = warm_and_cold(monkeypatch, "trl", configs, max_examples=30)
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
    assert "yours: 8" in settings["note"] and "per_device_train_batch_size" in settings["defaults"]
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


# --- the optimizer step as TRL's trainer splits it (checks.frameworks.trl_step) -------------------------
def test_the_step_geometry_is_the_users_split_or_a_default_split_of_two_accumulated_micro_batches():
    _need_trl()
    from grpo_identity.checks.frameworks import trl_step

    plain = trl_step.step_plan(FrameworkSpec("trl"))
    assert (plain.group_size, plain.step_rows, plain.generation_rows) == (4, 8, 8)
    assert plain.settings["gradient_accumulation_steps"] == 2 and "default split" in plain.split
    assert plain.chosen == {"num_generations": 4, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2}
    sets = (("num_generations", "2"), ("per_device_train_batch_size", "2"), ("gradient_accumulation_steps", "3"))
    mine = trl_step.step_plan(FrameworkSpec("trl", (*sets, ("steps_per_generation", "6"), ("num_processes", "2"))))
    assert (mine.group_size, mine.step_rows, mine.generation_rows) == (2, 12, 24)
    assert mine.geometry()["ranks"] == "processes" and "default" not in mine.split and mine.chosen == {}
    assert "per_device_train_batch_size=12, gradient_accumulation_steps=1" in mine.unsplit


@pytest.mark.parametrize(
    "key, value",
    [("per_device_train_batch_size", "0"), ("gradient_accumulation_steps", "x"), ("num_generations", "-2")],
)
def test_a_split_number_below_one_is_refused_when_the_target_is_built(key, value):
    _need_trl()
    from grpo_identity.checks.frameworks import AdapterError, trl_step

    with pytest.raises(AdapterError, match=f"^TRL: {key} takes a whole number ≥ 1, got '{value}': set {key}=1$"):
        trl_step.step_plan(FrameworkSpec("trl", ((key, value),)))


@pytest.mark.parametrize("per_device, processes, G", [("2", 1, 2), ("6", 1, 3), ("2", 2, 4), ("8", 1, 4)])
def test_before_0_18_the_default_group_fits_the_users_micro_batch(monkeypatch, per_device, processes, G):
    """TRL < 0.18 generates per micro-batch, so the step's default group must divide it (0.16 refuses else)."""
    from grpo_identity.checks.frameworks import trl_step

    monkeypatch.setattr(trl_step, "_new_trl", lambda: False)
    assert trl_step._default_group({"per_device_train_batch_size": per_device}, processes) == G
    monkeypatch.setattr(trl_step, "_new_trl", lambda: True)
    assert trl_step._default_group({"per_device_train_batch_size": per_device}, processes) == 4


def test_every_rank_runs_the_batch_sizes_the_geometry_counts():
    """With processes and no per-device batch set, each rank's config names the batch the geometry counted."""
    _need_trl()
    from grpo_identity.checks.frameworks import trl_step

    spec = FrameworkSpec("trl", (("num_generations", "2"), ("num_processes", "2")))
    geo = trl_step.step_plan(spec).geometry()
    split = trl_step._layout(*trl_step.launch_settings(spec), "split")
    sets = dict(split.sets)
    assert int(sets["per_device_train_batch_size"]) * 2 * int(sets["gradient_accumulation_steps"]) == geo["step_rows"]
    d = design(geo, 6)
    assert d.rewards.size % geo["step_rows"] == 0


@pytest.mark.parametrize("value, runs", [("0", 1), ("5", 4), ("two", 1)])
def test_num_processes_is_bounded_and_named(value, runs):
    from grpo_identity.checks.frameworks import AdapterError, trl_step

    with pytest.raises(
        AdapterError,
        match=f"^TRL: num_processes takes a whole number from 1 to 4, got '{value}': set num_processes={runs}$",
    ):
        trl_step.launch_settings(FrameworkSpec("trl", (("num_processes", value),)))


@pytest.mark.slow
def test_two_gloo_processes_gather_a_trl_step_whose_gradient_is_the_unsplit_steps_for_dapo_not_for_bnpo():
    """Ranks are real processes (gloo, as ``accelerate launch`` starts them): the model's whole gradient as the
    optimizer receives it after DDP's all-reduce, against the same step on one process in one micro-batch."""
    _need_trl()
    from grpo_identity.checks.frameworks import trl_step

    gaps = {}
    for loss in ("dapo", "bnpo"):
        sets = (
            ("loss_type", loss),
            ("num_processes", "2"),
            ("per_device_train_batch_size", "2"),
            ("max_grad_norm", "0"),
        )
        spec = FrameworkSpec("trl", sets)
        d = design(trl_step.step_plan(spec).geometry(), 6)
        split = trl_step.run_layout(spec, "split", d.rewards, d.lengths, 4, param_grads=True)
        whole = trl_step.run_layout(spec, "unsplit", d.rewards, d.lengths, 4, param_grads=True)
        assert set(split["rank"]) == {0, 1} and set(whole["rank"]) == {0}
        x, y = split["param_grads"], whole["param_grads"]
        assert x.shape == y.shape and x.shape[0] == 2  # two optimizer steps
        gaps[loss] = float(np.linalg.norm(x - y) / np.linalg.norm(y))
    assert gaps["dapo"] < 1e-5, gaps  # the gathered token count: the ranks' gradients average to the whole step's
    assert gaps["bnpo"] > 1e-2, gaps  # each rank's own token count: not the whole step's gradient


@pytest.mark.slow
def test_trl_0_22_2s_dapo_normaliser_counts_the_truncated_answers_it_masks_and_1_16_0s_does_not(capsys):
    _need_trl()
    env_or_skip("trl", "0.22.2")
    sets = ["--set", "loss_type=dapo", "--set", "mask_truncated_completions=true", "--max-examples", "5", "--json"]
    found, nones = {}, {}
    for release in ("0.22.2", None):
        main(["audit", "trl", *(["--release", release] if release else []), *sets])
        out = _json(capsys)
        found[release] = [f for f in out["findings"] if f["property"] == "masked_normaliser"]
        assert out["inferred"]["step"]["weight"] == "1/step_tokens"
        nones[release] = out["inferred"]["async_groups"]["cases"]["none"]["problems"]
    # 0.22.2: num_items_in_batch is the completion lengths' sum, taken before truncated answers are masked
    assert found["0.22.2"] and found["0.22.2"][0]["counterexample"]["masked_tokens"] == 12
    assert not found[None]
    # an answer every reward function returns None for: nansum's 0 in its group's baseline until trl #5902 (1.6.0)
    assert nones == {"0.22.2": ["reward_none_trained"], None: []}


@pytest.mark.slow
def test_trl_0_22_2s_dapo_normaliser_over_the_generation_batch_fails_the_oracle_not_split_invariance(capsys):
    """Several optimizer steps per generation batch (steps_per_generation 2, no accumulation): 0.22.2 divides each
    step by the whole generation batch's tokens in both layouts, which only the objective can see; 1.16.0 divides by
    the batch's mean step, exact over the batch and a deviation per step."""
    _need_trl()
    env_or_skip("trl", "0.22.2")
    sets = ["--set", "loss_type=dapo", "--set", "num_generations=4", "--set", "per_device_train_batch_size=4"]
    sets += ["--set", "gradient_accumulation_steps=1", "--set", "steps_per_generation=2", "--max-examples", "5"]
    found = {}
    for release in ("0.22.2", None):
        main(["audit", "trl", *(["--release", release] if release else []), *sets, "--json"])
        out = _json(capsys)
        assert out["inferred"]["step"]["invariant"] is True  # the split cannot show it
        (found[release],) = [f for f in out["findings"] if f["property"] == "step_scale"]
        assert out["inferred"]["step"]["objective"]["name"] == "token_mean"
    bug, fixed = found["0.22.2"], found[None]
    assert bug["severity"] == "fail" and 0.4 < bug["counterexample"]["factor"] < 0.6  # ≈ 1/steps_per_generation
    assert bug["counterexample"]["causes"] == [
        "a normaliser over the whole generation batch (generation_tokens), not the optimizer step's"
    ]
    assert fixed["severity"] == "deviation" and "the generation batch's mean step" in fixed["message"]
    lo, hi = fixed["counterexample"]["range"]
    assert 0.8 < lo < 1 < hi < 1.2


# --- off-policy: importance weights, clip and KL after the policy has moved (checks.measure.offpolicy) -----------
def _off_policy(sets: tuple[tuple[str, str], ...]) -> tuple[dict, list, object]:
    """The installed release's gradient target and the off-policy probe on it (no property search)."""
    _need_trl()
    from grpo_identity.checks.frameworks import trl
    from grpo_identity.checks.measure.offpolicy import audit_off_policy

    fn = trl.build(FrameworkSpec("trl", sets), "gradient")
    out, findings = audit_off_policy(fn, fn.grpo_identity_info["off_policy"], weight="1/step_tokens")
    return out, findings, fn


@pytest.mark.parametrize("sets, law", [((), "token"), ((("importance_sampling_level", "sequence"),), "sequence")])
def test_trl_off_policy_weighs_each_token_by_its_ratio_and_gspo_each_answer_by_one(sets, law):
    out, findings, _ = _off_policy(sets)
    assert out["importance_weight"] == law and out["fit_residual"] < 1e-4  # GSPO told apart from GRPO
    assert out["silent_groups_zero_gradient"] and out["identity_holds"] and out["kl_law"] is None
    assert out["clip_rule_matches"] and out["clip"] == {"epsilon": 0.2, "epsilon_high": 0.2, "delta": None}
    assert 0 < out["clipped_share"] < 0.5
    assert not any(f.property == "kl_moves_silent_groups" for f in findings) and not findings  # beta 0: none
    assert "stores exactly these when num_iterations > 1" in out["settings"]["old_logps"]


def test_trl_with_beta_builds_its_reference_from_a_local_folder_and_its_kl_moves_silent_groups(monkeypatch):
    import glob
    import socket
    import tempfile

    from grpo_identity.checks.frameworks import answer_lengths
    from grpo_identity.checks.measure.infer import probe_batch

    touched: list[object] = []

    def no_network(self, address):  # noqa: ANN001
        touched.append(address)
        raise OSError("the audit touched the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    folders = set(glob.glob(f"{tempfile.gettempdir()}/grpo-identity-trl-policy-*"))
    out, findings, fn = _off_policy((("beta", "0.04"),))
    assert not touched and set(glob.glob(f"{tempfile.gettempdir()}/grpo-identity-trl-policy-*")) == folders
    # on-policy (the first step) the reference is the policy: silent groups get exactly zero
    r = probe_batch(4)
    on = fn(r, 4, answer_lengths(r.size))
    silent = np.repeat(r.reshape(-1, 4).max(1) == r.reshape(-1, 4).min(1), 4)
    assert not np.any(on["coefficients"][silent])
    # after the policy moved, the KL term pushes them: a deviation with its size, TRL 1.x's bias-corrected k3
    kl = [f for f in findings if f.property == "kl_moves_silent_groups"]
    assert len(kl) == 1 and kl[0].severity == "deviation"
    size = kl[0].counterexample["max_ratio"]
    assert math.isfinite(size) and 0 < size < 1 and kl[0].counterexample["kl_law"] == "k3·ratio"
    assert out["importance_weight"] == "token" and out["kl_law"] == "k3·ratio" and out["identity_holds"]
    assert fn.grpo_identity_info["off_policy"]["kl_bias_correction"] is True


@pytest.mark.slow
def test_trl_audit_with_beta_reports_the_off_policy_step_in_text_and_json(capsys):
    _need_trl()
    code = main(["audit", "trl", "--set", "beta=0.04", "--max-examples", "20", "--json"])
    out = _json(capsys)
    off = out["inferred"]["off_policy"]
    assert code == 0 and out["verdict"] == "deviation" and out["inferred"]["silent_groups_zero_gradient"]
    assert off["importance_weight"] == "token" and off["beta"] == 0.04 and off["silent_size"]["max_ratio"] > 0
    assert {f["property"]: f["severity"] for f in out["findings"]}["kl_moves_silent_groups"] == "deviation"
    assert out["inferred"]["step"]["invariant"]  # the split step runs with the reference too


@pytest.mark.slow
@pytest.mark.parametrize(
    "release, sets, law, kl",
    [
        ("0.16.0", ["beta=0.04"], "token", "k3"),  # old log-probs read only when num_iterations > 1
        ("0.22.2", ["beta=0.04", "importance_sampling_level=sequence"], "sequence", "k3"),
    ],
)
def test_older_trl_releases_build_their_reference_and_give_the_off_policy_step(release, sets, law, kl, capsys):
    env_or_skip("trl", release)
    argv = ["audit", "trl", "--release", release, *[x for s in sets for x in ("--set", s)], "--max-examples", "5"]
    main([*argv, "--json"])
    out = _json(capsys)
    off = out["inferred"]["off_policy"]
    assert out["target_info"]["version"] == release and off["importance_weight"] == law and off["kl_law"] == kl
    assert any(f["property"] == "kl_moves_silent_groups" for f in out["findings"]) and off["identity_holds"]


@pytest.mark.parametrize(
    "sets, rule, weights",
    [
        ((("multi_objective_aggregation", "normalize_then_sum"),), "normalize_then_sum", [1.0, 1.0]),
        ((("reward_weights", "1,0.5"),), "sum_then_normalize", [1.0, 0.5]),
    ],
)
def test_trl_combines_its_reward_functions_as_multi_objective_aggregation_says(sets, rule, weights):
    _need_trl()
    from grpo_identity.checks.measure.aggregation import audit_aggregation

    target = adapters.build(FrameworkSpec("trl", sets=sets))
    components = target.grpo_identity_info["components"]
    assert components["weights"] == weights
    out = audit_aggregation(lambda C, G: target(C[:, 0].copy(), G, C), tuple(components["weights"]))
    assert out["rule"] == rule
    R = np.array([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0])  # one reward: carried by the first function alone
    plain = target(R, 4)
    assert plain[0] > 0 > plain[1] and abs(plain[:4].sum()) < 1e-5


def test_a_trl_audit_without_several_reward_functions_does_not_probe_them():
    _need_trl()
    assert "components" not in adapters.build(FrameworkSpec("trl")).grpo_identity_info


def test_the_models_generate_samples_one_row_for_a_batch_of_one_prompt_and_every_call_as_made_otherwise():
    torch = pytest.importorskip("torch")
    from grpo_identity.checks.frameworks.trl import _one_row_per_prompt

    class Model:
        def __init__(self):
            self.calls = []

        def generate(self, input_ids=None, attention_mask=None, **kwargs):
            self.calls.append(tuple(input_ids.shape))
            return torch.cat([input_ids, torch.arange(len(input_ids))[:, None] + 7], dim=1)

    model = Model()
    _one_row_per_prompt(model)
    same = torch.tensor([[3, 4]] * 5)
    out = model.generate(same, attention_mask=torch.ones_like(same), generation_config=None)
    assert out.tolist() == [[3, 4, 7]] * 5 and model.calls == [(1, 2)]
    assert model.generate(input_ids=torch.tensor([[3, 4]] * 3)).tolist() == [[3, 4, 7]] * 3
    assert model.calls == [(1, 2), (1, 2)]  # the same prompt without its mask: another key
    assert model.generate(input_ids=torch.tensor([[3, 4]] * 9)).shape == (9, 3) and len(model.calls) == 2
    differ = torch.tensor([[3, 4], [4, 3]])
    assert model.generate(differ).tolist() == [[3, 4, 7], [4, 3, 8]] and model.calls[-1] == (2, 2)
    model.generate(same, pixel_values=torch.zeros(5, 1))  # another batch input: sampled as called
    assert model.calls[-1] == (5, 2)
    model.generate(same, generation_config="three per prompt")  # other settings: another key
    assert model.calls[-1] == (1, 2)

    class DictModel(Model):
        def generate(self, input_ids=None, **kwargs):
            return {"sequences": Model.generate(self, input_ids)}

    model = DictModel()
    _one_row_per_prompt(model)
    assert model.generate(same)["sequences"].shape == (5, 3)  # not a tensor: the one row, then the batch as called
    assert model.calls == [(1, 2), (5, 2)]


@pytest.mark.slow
def test_a_trl_targets_advantage_calls_sample_one_row_of_the_trainers_model_whatever_the_batch(monkeypatch):
    _need_trl()
    from transformers import LlamaForCausalLM

    from grpo_identity.checks.frameworks import trl

    sampled, generate = [], LlamaForCausalLM.generate

    def counted(self, *args, **kwargs):
        sampled.append(tuple((args[0] if args else kwargs["input_ids"]).shape))
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(LlamaForCausalLM, "generate", counted)  # the tiny policy's class
    target = trl.build(FrameworkSpec("trl"), "advantage")
    for G, groups in ((4, 3), (8, 5), (4, 7)):
        rewards = np.tile(np.arange(G, dtype=float), groups)
        assert target.advantages(rewards, G).shape == (G * groups,)
    assert len(sampled) == 1 and sampled[0][0] == 1, sampled


@pytest.mark.parametrize("width", [2, 6, 9])
def test_the_probes_answers_are_the_seeds_words_whatever_width_the_sample_had(width):
    torch = pytest.importorskip("torch")
    from grpo_identity.checks.frameworks.trl import _lay_out

    lengths, words, eos, pad = np.array([1, 3, 6, 4]), [3, 4, 5, 6], 1, 0
    sampled = {"completion_ids": torch.full((4, width), 2), "completion_mask": torch.ones(4, width, dtype=torch.int)}
    out = _lay_out(sampled, lengths, eos, pad, (words, 7))
    ids, mask = out["completion_ids"], out["completion_mask"]
    assert ids.shape == (4, max(width, 6)) and mask.sum(1).tolist() == lengths.tolist()
    for row, ell in zip(ids.tolist(), lengths):
        assert set(row[: ell - 1]) <= set(words) and row[ell - 1] == eos and set(row[ell:]) <= {pad}
    narrow = {"completion_ids": torch.full((4, 2), 2), "completion_mask": torch.ones(4, 2, dtype=torch.int)}
    assert torch.equal(ids[:, :6], _lay_out(narrow, lengths, eos, pad, (words, 7))["completion_ids"])


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode, estimator, nan_weight",
    [
        ("token_truncate", "token_truncate", 1.0),  # a NaN log-ratio set to 0: the token weighs 1
        (None, "sequence_mask", None),  # the default: the product of the token ratios, kept inside [0, 3]
    ],
)
def test_trl_with_use_vllm_runs_the_three_policy_probe_through_its_own_correction(mode, estimator, nan_weight, capsys):
    """The engine alone is stood in: TRL computes the ratio from its recomputed old log-probabilities and the
    engine's, and multiplies it into each token's loss; the probe reads which estimator that is from the gradient."""
    _need_trl()
    sets = ["use_vllm=true"] + ([f"vllm_importance_sampling_mode={mode}"] if mode else [])
    code = main(["audit", "trl", *[x for s in sets for x in ("--set", s)], "--max-examples", "10", "--json"])
    out = _json(capsys)
    fit = out["inferred"]["three_policy"]
    assert code == 0 and (fit["estimator"], fit["documented"], fit["in_graph"]) == (estimator, estimator, False)
    assert fit["on_policy_weight_one"] and fit["identity_holds"] and fit["missing"] == "on-policy"
    found = {f["property"]: f["severity"] for f in out["findings"]}
    assert found["rollout_logps_non_finite"] == "deviation" and found["rollout_logps_missing"] == "note"
    if nan_weight is not None:
        assert fit["non_finite_weights"]["log mu = NaN"] == pytest.approx(nan_weight)
    assert any("VLLMGeneration" in s for s in out["target_info"]["stand_ins"])
    assert "use_vllm" in out["target_info"]["step_unavailable"]


@pytest.mark.slow
def test_trl_1_6_0_crashes_where_vllm_reports_a_nan_rollout_log_probability(capsys):
    """TRL 1.6.0 (clip_min/clip_max, before NaN log-probabilities were neutralised): the same estimator, but its own
    extract_logprobs turns vLLM's NaN into None, which its trainer cannot build a tensor of; μ = 0 is capped."""
    env_or_skip("trl", "1.6.0")
    main(["audit", "trl", "--release", "1.6.0", "--set", "use_vllm=true", "--max-examples", "5", "--json"])
    out = _json(capsys)
    fit = out["inferred"]["three_policy"]
    assert out["target_info"]["version"] == "1.6.0" and (fit["estimator"], fit["documented"]) == ("sequence_mask",) * 2
    assert fit["on_policy_weight_one"] and fit["identity_holds"]
    assert (fit["missing"], fit["non_finite"]) == ("crashed", "crashed") and "NoneType" in fit["missing_message"]
    weights = fit["non_finite_weights"]
    assert weights["log mu = NaN"] == "crashed" and weights["log mu = -inf"] == 0.0  # masked out: above clip_max
    found = {f["property"]: f["severity"] for f in out["findings"]}
    assert found["correction_non_finite"] == "fail" and found["rollout_logps_missing"] == "fail"
    assert out["verdict"] == "fail"


@pytest.mark.slow
def test_use_vllm_on_a_release_with_no_engine_to_stand_in_is_one_line_naming_the_first_that_has_one(capsys):
    env_or_skip("trl", "0.22.2")
    assert main(["audit", "trl", "--release", "0.22.2", "--set", "use_vllm=true", "--max-examples", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("grpo-identity audit: error: TRL 0.22.2 has no ") and "0.28.0" in err[-1]
    assert "use_vllm" in err[-1] and "GRPOTrainer rejects" not in err[-1] and "Traceback" not in "\n".join(err)


@pytest.mark.slow
def test_trl_weighs_each_token_by_the_mass_its_vllm_sampler_keeps_under_top_k(capsys):
    """trl #6789: vLLM's processed log-probabilities are renormalised over the top-k tokens, TRL recomputes its own
    over the whole vocabulary, so with equal policies each token's ratio is the mass top-k keeps (G11)."""
    _need_trl()
    sets = ["use_vllm=true", "vllm_importance_sampling_mode=token_truncate", "top_k=3"]
    main(["audit", "trl", *[x for s in sets for x in ("--set", s)], "--max-examples", "5", "--json"])
    out = _json(capsys)
    fit = out["inferred"]["three_policy"]
    assert fit["support"] == "truncated" and fit["support_weight_range"] == pytest.approx(fit["kept_mass_range"], 1e-5)
    assert 0 < fit["kept_mass_range"][0] < fit["kept_mass_range"][1] < 1 and fit["settings"]["sampler"] == "top_k=3"
    assert {f["property"]: f["severity"] for f in out["findings"]}["rollout_support_truncated"] == "fail"


def test_a_repeated_sample_is_handed_out_as_new_containers_around_the_same_leaves():
    from grpo_identity.checks.frameworks.trl import _fresh

    text, tensor = "a b", np.zeros(2)
    sample = ([[1, 2], [3]], [[1, [2]], {"k": [tensor]}], (4, 5), [text], {"logps": [[0.5]]}, None, [], [(1, 2), [3]])
    copy = _fresh(sample)
    assert repr(copy) == repr(sample)
    assert copy[0] is not sample[0] and copy[0][1] is not sample[0][1]  # rows of token ids
    assert copy[1][0][1] is not sample[1][0][1] and copy[1][1]["k"] is not sample[1][1]["k"]  # nested and mixed
    assert copy[1][1]["k"][0] is tensor and copy[3][0] is text  # the leaves are shared
    assert copy[4]["logps"][0] is not sample[4]["logps"][0] and isinstance(copy[2], tuple)
    assert isinstance(copy[7][0], tuple) and copy[7][1] is not sample[7][1]  # rows of tuples and lists
    copy[0][0].append(9)
    assert sample[0][0] == [1, 2]


def test_the_on_policy_batch_keeps_the_old_log_probabilities_key_as_none_for_releases_that_read_it_unguarded():
    from grpo_identity.checks.frameworks.trl import on_policy

    stored = {"old_per_token_logps": np.zeros(3), "sampling_per_token_logps": np.ones(3), "advantages": np.ones(3)}
    inputs = {**stored, "importance_sampling_ratio": np.ones(3)}
    on_policy(inputs, ("importance_sampling_ratio",))  # TRL 0.18–0.19: inputs["old_per_token_logps"] is None → current
    assert inputs == {"old_per_token_logps": None, "advantages": stored["advantages"]}
    unscored = {"advantages": np.ones(3)}  # a release that stores none: nothing added
    on_policy(unscored)
    assert list(unscored) == ["advantages"]
