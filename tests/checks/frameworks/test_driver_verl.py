"""The verl driver (``checks.frameworks.verl``): verl's trainer dispatch from its Hydra config as
its users write it (``--set`` keys, a YAML file), each ``loss_agg_mode``'s per-sample weight, a
configuration verl rejects, and its estimator functions called alone (which bypass the trainer)
— at the version the Makefile pins, then older releases from their own environments (0.6.0,
0.7.1)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from _support import env_or_skip, warm_and_cold

from grpo_identity.app.cli import main
from grpo_identity.checks import audit
from grpo_identity.checks.calls import adapters
from grpo_identity.checks.calls.adapters import TESTED_VERSIONS
from grpo_identity.checks.frameworks import FrameworkSpec

pytestmark = [pytest.mark.frameworks, pytest.mark.xdist_group("verl")]


def _need(module: str) -> None:
    pytest.importorskip(module, reason=f"{module} is not installed (make frameworks)")


# --- the estimator functions ---------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("spec, matches", [("verl:grpo_vectorized", "verl"), ("verl:rloo", "rloo")])
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
def test_the_estimator_function_form_says_it_bypasses_the_trainer():
    _need("verl.trainer.ppo.core_algos")
    report = audit("verl:estimator=grpo_vectorized", max_examples=20)
    # verl's grpo: a group of one gets mean 0 and std 1, so a lone answer keeps its raw reward (a deviation)
    pushes = [f.property for f in report.findings if f.severity != "note"]
    assert (report.verdict, report.matches, pushes) == ("deviation", "verl", ["ragged_groups"]), report.format()
    assert "a lone answer" in report.findings[0].message
    assert "bypasses the trainer" in report.target_info["entry"]


# --- config in: the trainer's own path -----------------------------------------------------------
@pytest.mark.slow
def test_verl_grpo_without_std_normalisation_through_the_trainer_is_dr_grpo(capsys):
    _need("verl.trainer.ppo.ray_trainer")
    sets = ["--set", "algorithm.adv_estimator=grpo", "--set", "algorithm.norm_adv_by_std_in_grpo=false"]
    code = main(["audit", "verl", *sets, "--expect", "dr_grpo", "--max-examples", "30", "--json"])
    out = json.loads(capsys.readouterr().out)  # the default level for a framework: the gradient, then the advantages
    assert code == 0 and out["level"] == "gradient" and out["matches"] == "dr_grpo"
    assert out["inferred"]["scale"] == "none"
    assert out["advantage"]["verdict"] == "pass"  # the advantages are Dr. GRPO's ...
    # ... token-mean is not its constant weight
    assert out["verdict"] == "deviation" and out["inferred"]["per_sample_weight"] == "1/step_tokens"
    assert out["target_info"]["entry"].startswith("ray_trainer.compute_advantage")
    assert out["target_info"]["norm_adv_by_std_in_grpo"] is False


def test_a_verl_yaml_config_is_read_as_the_trainer_reads_it(tmp_path, capsys):
    pytest.importorskip("verl")
    cfg = tmp_path / "run.yaml"
    cfg.write_text("algorithm:\n  adv_estimator: grpo\n  norm_adv_by_std_in_grpo: false\n")
    argv = ["audit", "verl", "--config", str(cfg), "--level", "advantage", "--expect", "dr_grpo"]
    assert main([*argv, "--max-examples", "20", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "pass" and out["matches"] == "dr_grpo" and out["inferred"]["scale"] == "none"


def test_a_verl_yaml_config_reaches_the_gradient_level_too(tmp_path, capsys):
    pytest.importorskip("verl")
    cfg = tmp_path / "run.yaml"
    cfg.write_text("algorithm:\n  adv_estimator: grpo\n")
    assert main(["audit", "verl", "--config", str(cfg), "--level", "gradient", "--max-examples", "10", "--json"]) == 0
    # token-mean, verl's default
    assert json.loads(capsys.readouterr().out)["inferred"]["per_sample_weight"] == "1/step_tokens"


@pytest.mark.slow
def test_a_verl_config_file_is_read_as_verl_reads_it_and_set_overrides_it(tmp_path):
    _need("verl.trainer.ppo.ray_trainer")
    path = tmp_path / "run.yaml"
    path.write_text("algorithm:\n  adv_estimator: grpo\n  norm_adv_by_std_in_grpo: false\n")
    r = np.array([1.0, 0.0, 0.0, 0.0])
    override = ("algorithm.norm_adv_by_std_in_grpo", "true")
    from_file = adapters.build(FrameworkSpec("verl", config=str(path)))(r, 4)
    overridden = adapters.build(FrameworkSpec("verl", sets=(override,), config=str(path)))(r, 4)
    assert from_file == pytest.approx([0.75, -0.25, -0.25, -0.25])  # no std: Dr. GRPO
    assert overridden[0] == pytest.approx(1.5, rel=1e-3)  # the group std (ddof 1) is back


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv, words",
    [
        (["audit", "verl", "--set", "algorithm.no_such_key=1"], "Could not override 'algorithm.no_such_key'"),
        (["audit", "verl", "--set", "algorithm.adv_estimator=no_such_estimator"], "no_such_estimator"),
    ],
)
def test_a_configuration_verl_rejects_is_a_usage_error_not_a_fail(argv, words, capsys):
    _need("verl.trainer.ppo.ray_trainer")
    assert main([*argv, "--max-examples", "5"]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


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
    r = np.array([1.0, 0.0, 0.0, 0.0])
    sets = (("algorithm.adv_estimator", "grpo_vectorized"), ("algorithm.norm_adv_by_std_in_grpo", "false"))
    trainer = adapters.build(FrameworkSpec("verl", sets=sets))(r, 4)
    bypass = adapters.build("verl:estimator=grpo_vectorized,norm_adv_by_std_in_grpo=false")(r, 4)
    assert trainer[0] == pytest.approx(1.5, rel=1e-3)  # still divided by the group std (ddof 1)
    assert bypass[0] == pytest.approx(0.75)  # Dr. GRPO


# --- the gradient level --------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(
    "mode, weight",
    [
        ("token-mean", "1/step_tokens"),
        ("token-sum", "constant"),
        ("seq-mean-token-sum", "constant"),
        ("seq-mean-token-mean", "1/length"),
        ("seq-mean-token-sum-norm", "constant"),
    ],
)
def test_verl_agg_loss_names_the_per_sample_weight_of_each_loss_agg_mode(mode, weight):
    _need("verl.trainer.ppo.ray_trainer")
    spec = FrameworkSpec(
        "verl",
        sets=(("algorithm.adv_estimator", "grpo"), ("actor_rollout_ref.actor.loss_agg_mode", mode)),
        level="gradient",
    )
    report = audit(spec, level="gradient", isolate=False, max_examples=20)
    assert report.inferred.per_sample_weight == weight, report.format()
    assert report.inferred.silent_groups_zero_gradient
    assert max(r["G1_residual"] for r in report.coefficient_table) < 1e-3
    # and absolutely: each optimizer step is exactly its mode's documented objective (0.9.1)
    assert report.inferred.step["objective"]["factors"] == [1.0] * 4
    assert not [f for f in report.findings if f.property in ("step_scale", "step_weights")]
    # and against the identity's scale, the mean over the prompts: token-sum's update grows with the batch
    assert [f.property for f in report.findings if f.property == "update_scale"] == ["update_scale"] * (
        mode == "token-sum"
    )


# --- older releases, each in its own environment -------------------------------------------------
@pytest.mark.slow
def test_verl_grpo_vectorized_through_the_trainer_crashes_in_0_6_0_and_ignores_the_std_switch_in_0_7_1(capsys):
    for release in ("0.6.0", "0.7.1"):
        env_or_skip("verl", release)
    sets = ["--set", "algorithm.adv_estimator=grpo_vectorized", "--set", "algorithm.norm_adv_by_std_in_grpo=false"]
    argv = ["audit", "verl", *sets, "--expect", "dr_grpo"]
    code = main([*argv, "--releases", "0.6.0,0.7.1", "--level", "advantage", "--max-examples", "20"])
    old, new = [ln for ln in capsys.readouterr().out.splitlines() if ln.strip()]
    assert code == 2  # one release could not be run
    # 0.6.0: group_mean_std(device=None) resolves the device to a module (get_torch_device()) outside pytest
    assert old.startswith("verl 0.6.0: ADAPTER ERROR") and "TypeError: to() received an invalid combination" in old
    # 0.7.1: the trainer hands the estimator its config; the estimator reads the switch from a keyword
    assert new.startswith("verl 0.7.1: FAIL  matches verl") and "group_std (ddof 1, eps 1e-06)" in new


@pytest.mark.slow
def test_a_second_verl_audit_in_a_warm_child_gives_the_json_of_a_cold_one(monkeypatch):
    _need("verl.trainer.ppo.core_algos")
    configs = [["algorithm.adv_estimator=grpo"], ["algorithm.adv_estimator=rloo"]]
    warm, cold = warm_and_cold(monkeypatch, "verl", configs, max_examples=30)
    assert json.dumps(warm, sort_keys=True) == json.dumps(cold, sort_keys=True)


def test_verls_default_estimator_is_named_as_needing_a_critic(capsys):
    _need("verl.trainer.ppo.core_algos")
    assert main(["audit", "verl", "--level", "advantage", "--max-examples", "5"]) == 2
    err = capsys.readouterr().err
    assert "gae (verl's default when none is set), which needs a critic" in err and "adv_estimator=grpo" in err


@pytest.mark.slow
def test_verls_estimator_function_is_audited_as_written_with_its_uid_grouping(capsys):
    _need("verl.trainer.ppo.core_algos")
    target = "verl.trainer.ppo.core_algos:compute_grpo_outcome_advantage"
    assert main(["audit", target, "--max-examples", "60", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["matches"] == "verl" and out["target_info"]["call"]["form"] == "verl"
    lone = [f for f in out["findings"] if f["property"] == "ragged_groups"]
    assert out["verdict"] == "deviation" and lone and "a lone answer" in lone[0]["message"]  # mean 0, std 1 there


_ESTIMATORS = ("grpo", "opo", "reinforce_plus_plus_baseline", "gdpo", "gpg")


@pytest.mark.slow
@pytest.mark.parametrize("name", _ESTIMATORS)
def test_a_verl_estimator_gets_one_verdict_as_a_file_and_through_the_driver(name):
    """The same code, audited as ``core_algos:fn`` (the function form's token layout) and as ``verl:estimator=``
    (the driver's): one verdict, one variant, whatever residue or length weighting the estimator has.  The function
    is audited in this process: a function's child is never reused, and would import verl for each estimator (13 s).
    The CLI test above audits one of them, ``compute_grpo_outcome_advantage``, in its child."""
    _need("verl.trainer.ppo.core_algos")
    from verl.trainer.ppo import core_algos

    fn = core_algos.get_adv_estimator_fn(name).__name__
    as_file = audit(f"verl.trainer.ppo.core_algos:{fn}", max_examples=30, isolate=False)
    as_driven = audit(f"verl:estimator={name}", max_examples=30)
    assert (as_file.verdict, as_file.matches) == (as_driven.verdict, as_driven.matches), (as_file.format(), name)
    assert as_file.verdict != "fail", as_file.format()


# --- the optimizer step as the trainer splits it (checks.measure.steps) ----------------------------------
_GRPO = (("algorithm.adv_estimator", "grpo"),)
_ACTOR = "actor_rollout_ref.actor."


@pytest.fixture(scope="module")
def verl_step():
    """verl 0.9's gradient target with the driver's default split, and its step geometry."""
    _need("verl.trainer.ppo.ray_trainer")
    from grpo_identity.checks.frameworks import verl as driver

    fn = driver.build(FrameworkSpec("verl", sets=_GRPO), "gradient")
    return fn, fn.grpo_identity_info["step"]


def _step_rows(fn, geo, layout="split", seed=0):
    """The step target's rows for the audit's design (its holes included)."""
    from grpo_identity.checks.frameworks import RESPONSE_LENGTH
    from grpo_identity.checks.measure.steps import design

    d = design(geo, RESPONSE_LENGTH, seed)
    return d, fn(d.rewards, d.group_size, d.lengths, d.request(layout))


def test_verl_step_geometry_is_the_default_split_where_the_user_set_none(verl_step):
    from grpo_identity.checks.frameworks import STEP_GROUP_SIZE
    from grpo_identity.checks.frameworks.verl import DEFAULT_SPLIT

    fn, geo = verl_step
    # 4 prompts × G=4 per generation batch, optimizer steps of 2 prompts over 2 ranks, each a process
    assert (geo["group_size"], geo["step_rows"], geo["generation_rows"]) == (STEP_GROUP_SIZE, 8, 16)
    assert (geo["ranks"], geo["holes"], geo["ragged"]) == ("processes", True, False)
    defaults = fn.grpo_identity_info["driver_settings"]["defaults"]
    assert list(defaults) == [*DEFAULT_SPLIT, "actor_rollout_ref.rollout.n"]
    assert (defaults["data.train_batch_size"], defaults["actor_rollout_ref.actor.ppo_mini_batch_size"]) == (4, 2)
    assert geo["layouts"]["unsplit"].startswith("the same optimizer steps")
    assert geo["settings"]["actor_rollout_ref.actor.loss_agg_mode"] == "token-mean"
    assert "engine worker" in geo["settings"]["worker"]  # 0.9 has no legacy actor


_MINI, _MICRO, _PROMPTS = (
    _ACTOR + "ppo_mini_batch_size",
    _ACTOR + "ppo_micro_batch_size_per_gpu",
    "data.train_batch_size",
)


@pytest.mark.parametrize(
    "sets, words",
    [
        # a setting below 1 (a ZeroDivisionError before)
        ((("trainer.n_gpus_per_node", "0"),), "trainer.n_gpus_per_node takes a whole number ≥ 1, got 0"),
        (((_MICRO, "0"),), f"{_MICRO} takes a whole number ≥ 1, got 0: set {_MICRO}=1"),
        (((_MINI, "0"),), f"{_MINI} takes a whole number ≥ 1, got 0"),
        (((_PROMPTS, "0"),), f"{_PROMPTS} takes a whole number ≥ 1, got 0"),
        ((("actor_rollout_ref.rollout.n", "0"),), "actor_rollout_ref.rollout.n takes a whole number ≥ 1, got 0"),
        (((_ACTOR + "ppo_max_token_len_per_gpu", "0"),), "ppo_max_token_len_per_gpu takes a whole number ≥ 1, got 0"),
        # sequence parallelism, in each key the releases read it from
        (
            ((_ACTOR + "ulysses_sequence_parallel_size", "2"),),
            f"{_ACTOR}ulysses_sequence_parallel_size=2 turns on sequence parallelism, which the driver does not "
            f"emulate: set {_ACTOR}ulysses_sequence_parallel_size=1",
        ),
        (((_ACTOR + "fsdp_config.ulysses_sequence_parallel_size", "4"),), "sequence_parallel_size=4 turns on"),
        # verl's own divisibility: validate_config, ActorConfig.validate, the engine worker's asserts
        (((_PROMPTS, "3"), ("actor_rollout_ref.rollout.n", "3")), f"2 data-parallel ranks .* set {_PROMPTS}=4$"),
        (((_PROMPTS, "2"), (_MINI, "4")), f"{_PROMPTS}=2 is below {_MINI}=4 .* set {_MINI}=2$"),
        (((_PROMPTS, "6"), (_MINI, "4")), f"not a multiple of {_MINI}=4.* set {_PROMPTS}=8$"),
        (
            ((_PROMPTS, "6"), (_MINI, "3"), ("actor_rollout_ref.rollout.n", "3")),
            f"9 answers per optimizer step do not split evenly over 2 ranks .* set {_MINI}=4$",
        ),
        (
            (("trainer.n_gpus_per_node", "2"), (_MINI, "1"), (_MICRO, "4")),  # 1 prompt × 4 answers ÷ 2 ranks = 2
            f"normalized ppo_mini_batch_size 2 .* divisible by ppo_micro_batch_size_per_gpu 4 .* set {_MICRO}=2 "
            "\\(actor_rollout_ref.rollout.n: the driver's default",
        ),
        (  # the driver's default ppo_mini_batch_size (none divides the user's 2 prompts into micro-batches of 3)
            ((_PROMPTS, "2"), (_MICRO, "3")),
            f"set {_MICRO}=2 \\({_MINI}, actor_rollout_ref.rollout.n: the driver's default, not set by you\\)$",
        ),
        (
            ((_ACTOR + "use_dynamic_bsz", "true"), (_ACTOR + "ppo_max_token_len_per_gpu", "6")),
            f"below the probe's sequences .* set {_ACTOR}ppo_max_token_len_per_gpu=8$",
        ),
    ],
)
def test_a_split_verl_refuses_is_refused_when_the_target_is_built(sets, words):
    _need("verl.trainer.ppo.ray_trainer")
    from grpo_identity.checks.frameworks import AdapterError
    from grpo_identity.checks.frameworks import verl as driver

    with pytest.raises(AdapterError, match=words) as caught:
        driver.build(FrameworkSpec("verl", sets=(*_GRPO, *sets)), "gradient")
    assert "\n" not in str(caught.value)


def test_a_verl_setting_below_one_is_a_usage_error_not_a_traceback(capsys):
    _need("verl.trainer.ppo.ray_trainer")
    sets = ["--set", "algorithm.adv_estimator=grpo", "--set", "trainer.n_gpus_per_node=0"]
    assert main(["audit", "verl", *sets, "--level", "gradient", "--max-examples", "5"]) == 2
    err = capsys.readouterr().err
    assert "trainer.n_gpus_per_node takes a whole number ≥ 1, got 0: set trainer.n_gpus_per_node=1" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("shuffle", ["false", "true"])
def test_verls_unsplit_layout_runs_the_split_layouts_optimizer_steps_each_in_one_piece(shuffle):
    """The same answers in each optimizer step (the dispatch's chunks, each rank's mini-batches, shuffled
    by tu.make_iterator under actor.shuffle), each step one micro-batch on one rank."""
    _need("verl.trainer.ppo.ray_trainer")
    from grpo_identity.checks.frameworks import verl as driver

    fn = driver.build(FrameworkSpec("verl", sets=(*_GRPO, (_ACTOR + "shuffle", shuffle))), "gradient")
    geo = fn.grpo_identity_info["step"]
    _, split = _step_rows(fn, geo, "split")
    _, unsplit = _step_rows(fn, geo, "unsplit")
    assert sorted(set(split["step"])) == [0, 1, 2, 3] and sorted(set(split["rank"])) == [0, 1]
    assert split["step"].tolist() == unsplit["step"].tolist()
    assert set(unsplit["rank"]) == {0} and set(unsplit["micro_batch"]) == {0}


def test_verl_rows_of_a_partial_generation_batch_are_never_trained_on(verl_step):
    """The trainer's dataloader drops a last batch of fewer prompts than data.train_batch_size (drop_last):
    those rows come back with step -1 and no gradient, in both layouts."""
    fn, geo = verl_step
    G, prompts = geo["group_size"], geo["generation_rows"] // geo["group_size"]
    n = (prompts + 2) * G  # one generation batch and two groups of the next
    rewards = np.tile([1.0, 0.0, 0.0, 1.0], n // 4)
    lengths = 2 + np.arange(n) % 5
    for layout in ("split", "unsplit"):
        out = fn(rewards, G, lengths, {"layout": layout, "sizes": [G] * (n // G), "holes": [0] * n})
        left = np.arange(n) >= prompts * G
        assert np.all(out["step"][left] == -1) and np.all(out["coefficients"][left] == 0)
        assert np.all(out["step"][~left] >= 0) and np.abs(out["coefficients"][~left]).sum() > 0


@pytest.mark.slow
def test_verl_0_9_steps_weigh_every_token_by_the_tokens_of_its_optimizer_step(verl_step):
    """The engine's ppo_loss: agg_loss(token-mean) × dp_size ÷ the mini-batch's token count all-reduced
    over the ranks, then FSDP's mean over ranks: every token weighs Â/(tokens of its step)."""
    from grpo_identity.checks.measure.steps import audit_step

    fn, geo = verl_step
    d, out = _step_rows(fn, geo)
    A, C, M = out["advantages"], out["coefficients"], out["mask"]
    step, rank, micro = out["step"], out["rank"], out["micro_batch"]
    assert sorted(set(step)) == [0, 1, 2, 3] and sorted(set(rank)) == [0, 1] and sorted(set(micro)) == [0, 1]
    step_tokens = np.array([M[step == s].sum() for s in step])
    live = A != 0
    ratio = (C * M).sum(1)[live] / M.sum(1)[live] * step_tokens[live] / A[live]
    assert ratio == pytest.approx(np.ones(live.sum()), rel=1e-5)
    result = audit_step(fn, geo)
    assert (result.law_split, result.law_unsplit, result.invariant) == ("1/step_tokens", "1/step_tokens", True)
    assert not [f for f in result.findings if f.severity != "note"]  # the objective note names DAPO's reading


@pytest.mark.slow
def test_a_token_count_all_reduced_over_the_wrong_process_group_is_a_split_the_audit_fails(monkeypatch):
    """What rank processes show that emulated ranks could not (their group argument was the driver's own): verl's
    engine all-reduces the step's token count over ``get_data_parallel_group()``; planted here, each rank's own
    group of one, every token weighs 1/(tokens on its rank) and the split changes the update."""
    _need("verl.workers.engine.fsdp.transformer_impl")
    import torch.distributed as dist
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    from grpo_identity.checks.frameworks import verl as driver
    from grpo_identity.checks.measure.steps import audit_step

    groups: dict[int, object] = {}  # each rank process fills its own copy

    def own_group(self):
        if not groups:  # every rank makes the same new_group calls in the same order, as torch requires
            groups.update({r: dist.new_group([r]) for r in range(dist.get_world_size())})
        return groups[dist.get_rank()]

    monkeypatch.setattr(FSDPEngineWithLMHead, "get_data_parallel_group", own_group)
    fn = driver.build(FrameworkSpec("verl", sets=_GRPO), "gradient")
    result = audit_step(fn, fn.grpo_identity_info["step"])
    assert (result.law_split, result.law_unsplit, result.invariant) == ("1/rank_tokens", "1/step_tokens", False)
    assert {"split_invariance", "step_scale"} <= {f.property for f in result.findings if f.severity == "fail"}
    assert not groups  # the groups were made in the rank processes, never in this one


@pytest.mark.slow
def test_verl_masks_tokens_inside_answers_out_of_the_loss_and_out_of_its_token_counts(verl_step):
    fn, geo = verl_step
    d, out = _step_rows(fn, geo)
    holed = np.flatnonzero(d.holes)
    assert holed.size and all(out["mask"][i, 1] == 0 and out["mask"][i, 0] == 1 for i in holed)
    assert np.all(out["coefficients"][holed, 1] == 0)  # the masked token gets no gradient
    live = holed[out["advantages"][holed] != 0]
    assert live.size and np.all(out["coefficients"][live, 0] != 0)
    # the weight law counts the loss's own tokens (checked above on rows with holes): no masked_normaliser


@pytest.mark.slow
def test_verl_0_9_dynamic_batches_of_unequal_rows_keep_seq_mean_token_mean_invariant():
    """use_dynamic_bsz cuts each rank's mini-batch by a token budget into micro-batches of 2 and 3
    answers; agg_loss divides by global_batch_size (the mini-batch's answers), not the micro-batch's."""
    _need("verl.trainer.ppo.ray_trainer")
    from grpo_identity.checks.frameworks import verl as driver
    from grpo_identity.checks.measure.steps import audit_step

    sets = (*_GRPO, (_ACTOR + "use_dynamic_bsz", "true"), (_ACTOR + "loss_agg_mode", "seq-mean-token-mean"))
    sets += ((_ACTOR + "ppo_mini_batch_size", "4"), (_ACTOR + "ppo_max_token_len_per_gpu", "16"))
    fn = driver.build(FrameworkSpec("verl", sets=sets), "gradient")
    result = audit_step(fn, fn.grpo_identity_info["step"])
    assert len({p["rows"] for p in result.pieces}) > 1  # micro-batches of unequal answer counts
    assert (result.law_split, result.law_unsplit, result.invariant) == ("1/length", "1/length", True)


_STEP_SCRIPT = """
import json, sys
import torch.distributed as dist
from grpo_identity.checks.frameworks import FrameworkSpec, verl
from grpo_identity.checks.measure.steps import audit_step

def left():  # what the step left behind in the process
    from verl.utils import attention_utils as au
    names = ("is_initialized", "get_rank", "get_world_size", "all_reduce", "all_gather_object")
    return {"flash_attn": sorted(m for m in sys.modules if m.startswith("flash_attn")),
            "attention_cache": [getattr(au, k) is not None for k in ("_index_first_axis", "_unpad_input")],
            "attention_functions": au._get_attention_functions.__module__,
            "dist": sorted({getattr(dist, k).__module__.split(".")[0] for k in names})}

out = []
for sets in json.loads(sys.argv[1]):
    fn = verl.build(FrameworkSpec("verl", sets=tuple(map(tuple, sets))), "gradient")
    r = audit_step(fn, fn.grpo_identity_info["step"])
    worker = fn.grpo_identity_info["step"]["settings"]["worker"]
    findings = [(f.property, f.severity) for f in r.findings]
    out.append({"laws": [r.law_split, r.law_unsplit], "invariant": r.invariant, "pieces": r.pieces,
                "findings": findings, "worker": worker, "left": left()})
print(json.dumps(out))
"""


def _steps_in_release(release, *cases):
    """audit_step of the driver's step target for each ``--set`` case, in the release's environment."""
    import subprocess

    from grpo_identity.checks.calls.releases import child_environ

    env = env_or_skip("verl", release)
    proc = subprocess.run(
        [env.python, "-c", _STEP_SCRIPT, json.dumps(cases)],
        capture_output=True,
        text=True,
        env=child_environ(),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _layout(pieces):
    """Micro-batches per (optimizer step, rank)."""
    keys = [(p["step"], p["rank"]) for p in pieces]
    return {key: keys.count(key) for key in keys}


def _micro_batch_means(pieces):
    """Per micro-batch with live answers: ρ × its tokens × micro-batches in its step ÷ the step's
    tokens, 1 when each micro-batch's token-mean is scaled by 1/(micro-batches of the step)."""
    out = []
    for p in pieces:
        if p["weight_ratio"] is None:
            continue
        mine = [q for q in pieces if q["step"] == p["step"]]
        out.append(p["weight_ratio"] * p["tokens"] * len(mine) / sum(q["tokens"] for q in mine))
    return out


@pytest.mark.slow
def test_verl_0_6_legacy_worker_takes_token_mean_per_micro_batch_and_breaks_split_invariance():
    """DataParallelPPOActor.update_policy: agg_loss over the micro-batch (masked_mean), × 1/
    gradient_accumulation, FSDP's mean over ranks: a token weighs 1/(its micro-batch's tokens ×
    micro-batches per step), so micro-batches with fewer tokens push harder."""
    token_mean, seq_mean = _steps_in_release(
        "0.6.0", [*_GRPO], [*_GRPO, (_ACTOR + "loss_agg_mode", "seq-mean-token-sum")]
    )
    assert "legacy FSDP worker" in token_mean["worker"]
    # ppo_mini_batch_size normalised as fsdp_workers does (2 prompts × 4 ÷ 2 ranks): 2 steps per generation batch
    assert _layout(token_mean["pieces"]) == {(s, r): 2 for s in range(4) for r in range(2)}
    assert token_mean["laws"] == ["1/micro_batch_tokens", "1/step_tokens"] and token_mean["invariant"] is False
    assert ["split_invariance", "fail"] in token_mean["findings"]
    ratios = [p["weight_ratio"] for p in token_mean["pieces"] if p["weight_ratio"] is not None]
    assert max(ratios) / min(ratios) > 1.05
    assert _micro_batch_means(token_mean["pieces"]) == pytest.approx([1.0] * len(ratios), rel=1e-5)
    # seq-mean-token-sum: each micro-batch's seq-mean × 1/gradient_accumulation is the step's seq-mean
    assert seq_mean["laws"] == ["constant", "constant"] and seq_mean["invariant"] is True


@pytest.mark.slow
def test_verl_0_7_legacy_worker_splits_token_mean_but_its_engine_worker_does_not():
    """0.7's default (trainer.use_legacy_worker_impl=auto) is the legacy actor, micro-batch token-mean;
    =disable runs the engine worker of the rewrite, whose loss is normalised by the step's tokens."""
    legacy, engine = _steps_in_release("0.7.1", [*_GRPO], [*_GRPO, ("trainer.use_legacy_worker_impl", "disable")])
    assert "legacy FSDP worker" in legacy["worker"] and "engine worker" in engine["worker"]
    assert legacy["laws"] == ["1/micro_batch_tokens", "1/step_tokens"] and legacy["invariant"] is False
    assert _micro_batch_means(legacy["pieces"]) == pytest.approx([1.0] * len(_micro_batch_means(legacy["pieces"])))
    assert engine["laws"] == ["1/step_tokens", "1/step_tokens"] and engine["invariant"] is True
    assert all(p["weight_ratio"] == pytest.approx(1.0, rel=1e-5) for p in engine["pieces"] if p["weight_ratio"])
    # the engine unpads through attention_utils, whose flash_attn import the driver answers only while the step
    # runs: no flash_attn module in the process, the helpers' cache and import as verl left them, the ranks'
    # torch.distributed restored
    left = engine["left"]
    assert left["flash_attn"] == [] and left["attention_cache"] == [False, False]
    assert left["attention_functions"] == "verl.utils.attention_utils" and left["dist"] == ["torch"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "estimator, departs",
    [
        ("gpg", "groups_coupled"),
        ("opo", "not_zero_sum"),
        ("grpo_passk", "not_zero_sum"),
        ("reinforce_plus_plus_baseline", "moves_silent_groups"),
        ("verl:estimator=gdpo", "groups_coupled"),  # through the trainer it needs gdpo_reward_keys
    ],
)
def test_verls_variant_estimators_are_reported_by_name_with_what_they_give_up(estimator, departs):
    _need("verl.trainer.ppo.core_algos")
    name = estimator.rpartition("=")[2]
    spec = estimator if ":" in estimator else FrameworkSpec("verl", sets=(("algorithm.adv_estimator", estimator),))
    report = audit(spec, level="advantage", max_examples=60)
    estimator = name
    assert report.matches == estimator and report.verdict == "deviation", report.format()
    named = next(f for f in report.findings if f.property == "variant")
    assert departs in named.counterexample["departs"] and "arXiv" in named.message
    assert not any(f.property == "dial" for f in report.findings)


# --- the absolute oracle: each optimizer step against its loss_agg_mode's documented objective ------------------
def _oracle_audit(capsys, release, *sets):
    args = ["audit", "verl", "--set", "algorithm.adv_estimator=grpo", "--max-examples", "10", "--json"]
    args += [a for s in sets for a in ("--set", s)] + (["--release", release] if release else [])
    main(args)
    out = json.loads(capsys.readouterr().out)
    return out, [f for f in out["findings"] if f["property"] in ("step_scale", "step_weights")]


NORM = "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm"


@pytest.mark.slow
def test_verl_0_7_1s_default_worker_ignores_loss_scale_factor_which_only_the_objective_sees(capsys):
    """seq-mean-token-sum-norm with loss_scale_factor=12: the legacy worker (0.7.1's default) divides by the batch's
    response width (6) in both layouts, so the split agrees with itself; 0.9.1 divides by the documented 12."""
    env_or_skip("verl", "0.7.1")
    out, (found,) = _oracle_audit(capsys, "0.7.1", NORM, "actor_rollout_ref.actor.loss_scale_factor=12")
    assert out["inferred"]["step"]["invariant"] is True
    assert found["property"] == "step_scale" and found["severity"] == "fail"
    assert found["counterexample"]["factor"] == pytest.approx(2.0, rel=1e-4)
    assert found["counterexample"]["causes"] == [
        "the length constant taken as the batch's response width 6, not the configured 12"
    ]
    _need("verl.trainer.ppo.core_algos")
    out, found = _oracle_audit(capsys, None, NORM, "actor_rollout_ref.actor.loss_scale_factor=12")
    assert found == [] and out["inferred"]["step"]["objective"]["factors"] == [1.0] * 4


@pytest.mark.slow
def test_verl_0_6_0s_norm_mode_leaves_the_micro_batchs_answer_count_in_and_the_oracle_names_it(capsys):
    env_or_skip("verl", "0.6.0")
    out, (found,) = _oracle_audit(capsys, "0.6.0", NORM)
    assert found["property"] == "step_scale" and found["severity"] == "fail"
    micro = out["inferred"]["step"]["settings"]["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"]
    assert found["counterexample"]["factor"] == pytest.approx(micro, rel=1e-4)
    assert f"a micro-batch's sum over its answers not divided by their number (×{micro})" in found["message"]


IRI_GRAMMAR = """
import sys
from grpo_identity.checks.frameworks import verl as V

with V._without_iri_grammar():
    import jsonschema  # what ray imports under verl
held_out = "rfc3987_syntax" not in sys.modules
checker = jsonschema.FormatChecker()
checked = not jsonschema.Draft7Validator({"format": "ipv4"}, format_checker=checker).is_valid("not an address")
import rfc3987_syntax  # put back: importable after the block
print(held_out, checked, "iri" in checker.checkers)
"""


def test_verls_first_import_leaves_jsonschemas_iri_grammar_out_and_puts_it_back_after(tmp_path):
    import os
    import subprocess
    import sys

    # a stand-in for the package, which the lock leaves out (scripts/lock.py LEFT_OUT) and a pip install brings
    (tmp_path / "rfc3987_syntax").mkdir()
    (tmp_path / "rfc3987_syntax" / "__init__.py").write_text("def is_valid_syntax(rule, value):\n    return True\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    run = [sys.executable, "-c", IRI_GRAMMAR]
    done = subprocess.run(run, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True", "False"]  # held out, formats still checked, but not the IRI's


_RC = "algorithm.rollout_correction."


@pytest.mark.slow
@pytest.mark.parametrize(
    "release, sets, estimator, non_finite",
    [
        ("0.9.1", [_RC + "rollout_is=token"], "token_truncate", "non-finite"),  # a NaN log-ratio clamps to NaN
        ("0.9.1", [_RC + "rollout_is=token", _RC + "rollout_is_threshold=0.5_5.0"], "token_mask", "finite"),  # IcePop
        ("0.7.1", [_RC + "rollout_is=sequence"], "sequence_truncate", "non-finite"),  # the product, exp(Σ)
    ],
)
def test_verls_rollout_correction_is_read_from_the_policy_losss_gradient(release, sets, estimator, non_finite, capsys):
    """compute_rollout_correction_and_add_to_batch as the fit loop runs it, its weights in the actor's policy loss:
    the documented estimator, 1 on-policy, skipped without a word where the batch has no rollout log-probabilities."""
    env_or_skip("verl", release)
    argv = ["audit", "verl", "--release", release, "--set", "algorithm.adv_estimator=grpo"]
    main([*argv, *[a for s in sets for a in ("--set", s)], "--max-examples", "5", "--json"])
    out = json.loads(capsys.readouterr().out)
    fit = out["inferred"]["three_policy"]
    assert out["target_info"]["version"] == release and (fit["estimator"], fit["documented"]) == (estimator,) * 2
    assert fit["on_policy_weight_one"] and not fit["in_graph"] and fit["identity_holds"]
    assert (fit["missing"], fit["non_finite"]) == ("on-policy", non_finite)
    found = {f["property"]: f["severity"] for f in out["findings"]}
    assert found["rollout_logps_missing"] == "note"
    assert found.get("correction_non_finite" if non_finite == "non-finite" else "rollout_logps_non_finite")


@pytest.mark.parametrize(
    "spelt, release, as_dict",
    [
        ("0.6.0", (0, 6, 0), False),
        ("0.7.0", (0, 7, 0), False),
        ("0.7.1", (0, 7, 1), True),
        ("0.7.1rc1", (0, 7, 1), True),
        ("0.10.0rc1", (0, 10, 0), True),
    ],
)
def test_the_legacy_workers_log_probabilities_come_back_as_each_release_unpacks_them(
    monkeypatch, spelt, release, as_dict
):
    from grpo_identity.checks.frameworks.exported import verl as exported

    monkeypatch.setattr(exported, "version", lambda name: spelt)
    assert exported._release() == release and exported._forward_returns_dict() is as_dict
