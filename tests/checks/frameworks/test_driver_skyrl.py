"""The SkyRL driver (``checks.frameworks.skyrl``): its split and objective (no SkyRL needed), then audits of SkyRL
0.1.0 and 0.3.0 in their release environments (``releases.ensure``; SkyRL never goes into the project's
environment).

What SkyRL computes:

- advantages (``compute_grpo_outcome_advantage``, ``skyrl/backends/skyrl_train/utils/ppo_utils.py``): the group's
  mean and ``torch.std`` (Bessel's, ddof 1) over the answers of one ``uid``, (score − mean)/(std + 1e-6);
  ``trainer.algorithm.grpo_norm_by_std=false`` leaves the std out (Dr. GRPO);
- the loss, 0.1.0: each micro-batch's policy loss reduced on its own (``reduce_loss``: ``token_mean`` is the
  micro-batch's masked mean), ``optim_step`` divides the accumulated gradient by the micro-batches, and FSDP averages
  over the ranks: each token weighs 1/(M_S·T_b), M_S the micro-batches of the optimizer step, T_b the tokens of its
  own micro-batch (SkyRL PR #1296 names the bug);
- the loss, 0.2.0 on: ``RayPPOTrainer._normalize_advantages`` divides each mini-batch's advantages by its loss
  tokens, the loss is a masked sum, multiplied by the data-parallel size against FSDP's average: every token weighs
  1/T_S, however the step is split.  ``token_mean_legacy`` keeps the old weights on purpose.
"""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from _support import env_or_skip

from grpo_identity.app.cli import main
from grpo_identity.checks.calls.child import ChildTarget
from grpo_identity.checks.frameworks import AdapterError, FrameworkSpec
from grpo_identity.checks.frameworks import skyrl as drv

pytestmark = pytest.mark.xdist_group("skyrl")

BUGGY, FIXED = "0.1.0", "0.3.0"
GRPO = ["--set", "trainer.algorithm.advantage_estimator=grpo"]
TWO_RANKS = ["--set", "trainer.placement.policy_num_gpus_per_node=2"]


# --- the driver's own steps (no SkyRL needed) ------------------------------------------------------------------------
def _cfg(loss_reduction: str, max_seq_len: int | None = None) -> SimpleNamespace:
    algorithm = SimpleNamespace(loss_reduction=loss_reduction, max_seq_len=max_seq_len)
    return SimpleNamespace(trainer=SimpleNamespace(algorithm=algorithm))


def test_the_step_plan_counts_a_generation_batch_and_an_optimizer_step_in_answers():
    plan = drv._Split(4, prompts=4, mini=2, micro=2, dp=2).plan(_cfg("token_mean"))
    geo = plan.geometry()
    assert (geo["group_size"], geo["step_rows"], geo["generation_rows"], geo["ranks"]) == (4, 8, 16, "processes")
    assert geo["objective"]["name"] == "token_mean" and geo["holes"] and not geo["ragged"]


@pytest.mark.parametrize(
    "reduction, objective, budget",
    [
        ("token_mean", "token_mean", None),
        ("sequence_mean", "seq_mean_token_mean", None),
        ("seq_mean_token_sum_norm", "seq_mean_token_sum_norm", 512.0),
        ("token_mean_legacy", "local_token_mean", None),
        ("prompt_mean", None, None),  # a per-group objective, which a step run cannot key
    ],
)
def test_each_loss_reduction_is_judged_by_the_objective_its_docs_give(reduction, objective, budget):
    found = drv.objective(_cfg(reduction, 512))
    assert (found and found["name"]) == objective
    if budget is not None:
        assert found["budget"] == budget


def test_the_dr_grpo_constant_is_the_probes_response_budget_where_max_seq_len_is_unset():
    assert drv.objective(_cfg("seq_mean_token_sum_norm"))["budget"] == drv.RESPONSE_LENGTH


@pytest.mark.parametrize(
    "split, words",
    [
        (drv._Split(4, prompts=3, mini=2, micro=2, dp=1), "set trainer.train_batch_size=2"),
        (drv._Split(4, prompts=4, mini=2, micro=3, dp=1), "set trainer.micro_train_batch_size_per_gpu=1"),
        (drv._Split(3, prompts=2, mini=1, micro=1, dp=2), "set trainer.policy_mini_batch_size to a multiple of 2"),
    ],
)
def test_a_split_skyrl_cannot_cut_is_named_with_a_setting_that_runs(split, words):
    assert words in drv._split_problem(split)
    fixed = {
        "train_batch_size": replace(split, prompts=2),
        "micro_train": replace(split, micro=1),
        "policy_mini": replace(split, mini=2),
    }
    (key,) = [k for k in fixed if f"trainer.{k}" in words]
    assert drv._split_problem(fixed[key]) is None  # the setting named runs


def _parsed(**trainer) -> SimpleNamespace:
    """A parsed config as _step_split reads it: SkyRL's defaults, ``trainer`` over them."""
    placement = SimpleNamespace(policy_num_nodes=1, policy_num_gpus_per_node=trainer.pop("gpus", 1))
    algorithm = SimpleNamespace(loss_reduction="token_mean", max_seq_len=None)
    values = {"train_batch_size": 1024, "policy_mini_batch_size": 256, "micro_train_batch_size_per_gpu": 1, **trainer}
    return SimpleNamespace(trainer=SimpleNamespace(placement=placement, algorithm=algorithm, **values))


@pytest.mark.parametrize(
    "key, raw, least",
    [("trainer.train_batch_size", "abc", 1), ("trainer.policy_mini_batch_size", "0", 1),
     ("generator.n_samples_per_prompt", "1", 2)],
)  # fmt: skip
def test_a_split_count_that_is_no_whole_number_is_refused_by_name_with_a_value_that_runs(key, raw, least):
    parsed = _parsed(**({key.split(".")[1]: raw} if key.startswith("trainer.") else {}))
    with pytest.raises(
        AdapterError, match=rf"^SkyRL .*: {key} takes a whole number ≥ {least}, got '{raw}': set {key}={least}$"
    ):
        drv._step_split(FrameworkSpec("skyrl", sets=((key, raw),)), parsed)


def test_a_refused_split_blames_the_drivers_default_only_where_it_chose_the_value():
    spec = FrameworkSpec("skyrl", sets=(("trainer.micro_train_batch_size_per_gpu", "3"),))
    with pytest.raises(AdapterError) as yours:
        drv._step_split(spec, _parsed(micro_train_batch_size_per_gpu=3))
    assert "micro_train_batch_size_per_gpu=3" in str(yours.value) and "the driver's default" not in str(yours.value)
    four = FrameworkSpec(
        "skyrl", sets=(("generator.n_samples_per_prompt", "3"), ("trainer.placement.policy_num_gpus_per_node", "4"))
    )
    with pytest.raises(AdapterError, match=r"\(trainer.policy_mini_batch_size: the driver's default, you set none\)"):
        drv._step_split(four, _parsed(gpus=4))
    three = FrameworkSpec("skyrl", sets=(("generator.n_samples_per_prompt", "3"),))
    assert drv._step_split(three, _parsed()).micro == 2  # 6 answers a step: micro-batches of two cut them


def test_a_split_that_cuts_is_accepted():
    assert drv._split_problem(drv._Split(4, prompts=4, mini=2, micro=2, dp=2)) is None


def test_a_config_file_is_refused_for_skyrls_command_line_takes_none():
    with pytest.raises(AdapterError, match="takes no config file"):
        drv.config(FrameworkSpec("skyrl", config="ppo.yaml"), 4)


# --- SkyRL itself, in its release environments ------------------------------------------------------------------------
def _audit(capsys, release, *args):
    """(exit code, JSON) of ``grpo-identity audit skyrl --release RELEASE *args``."""
    env_or_skip("skyrl", release)
    code = main(["audit", "skyrl", "--release", release, *args, "--max-examples", "20", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["target_info"]["version"] == release and out["target_info"]["framework"] == "skyrl"
    return code, out


def _severity(out, prop):
    return {f["severity"] for f in out["findings"] if f["property"] == prop}


@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.parametrize("release", [BUGGY, FIXED])
def test_grpo_divides_by_the_group_std_with_ddof_1_and_eps_1e_6_and_the_std_switch_leaves_it_out(release, capsys):
    code, out = _audit(capsys, release, *GRPO, "--level", "advantage")
    inf = out["inferred"]
    assert code == 0 and (inf["centre"], inf["scale"], inf["ddof"]) == ("mean", "group_std", 1)
    assert inf["eps"] == pytest.approx(1e-6, rel=0.05) and "verl" in out["matches"]
    code, out = _audit(
        capsys,
        release,
        *GRPO,
        "--set",
        "trainer.algorithm.grpo_norm_by_std=false",
        "--expect",
        "dr_grpo",
        "--level",
        "advantage",
    )
    assert code == 0 and out["inferred"]["scale"] == "none" and "dr_grpo" in out["matches"]


def _step_factors(out):
    """Each micro-batch's weight over the unsplit step's, and what 1/(M_S·T_b) over 1/T_S predicts for it."""
    pieces = out["inferred"]["step"]["pieces"]
    by_step = {}
    for p in pieces:
        by_step.setdefault(p["step"], []).append(p)
    got, predicted = [], []
    for step in by_step.values():
        tokens = sum(p["tokens"] for p in step)
        for p in step:
            if p["weight_ratio"] is not None:
                got.append(p["weight_ratio"])
                predicted.append(tokens / (len(step) * p["tokens"]))
    return got, predicted


@pytest.mark.slow
@pytest.mark.frameworks
def test_skyrl_0_1_0s_token_mean_averages_the_micro_batches_token_means_over_two_rank_processes(capsys):
    # SkyRL PR #1296 (fixed in 0.2.0): reduce_loss per micro-batch, optim_step's 1/micro-batches, FSDP's rank mean
    code, out = _audit(capsys, BUGGY, *GRPO, *TWO_RANKS)
    step = out["inferred"]["step"]
    assert code == 1 and out["target_info"]["ranks"] == "processes" and step["ranks"] == "processes"
    assert (step["weight"], step["weight_unsplit"], step["invariant"]) == (
        "1/micro_batch_tokens",
        "1/step_tokens",
        False,
    )
    assert _severity(out, "split_invariance") == {"fail"} and _severity(out, "step_weights") == {"fail"}
    got, predicted = _step_factors(out)
    assert got and got == pytest.approx(predicted, rel=1e-5) and max(predicted) > 1.01


@pytest.mark.slow
@pytest.mark.frameworks
def test_skyrl_0_3_0s_token_mean_weighs_every_token_of_the_step_alike_on_two_rank_processes(capsys):
    code, out = _audit(capsys, FIXED, *GRPO, *TWO_RANKS)
    step = out["inferred"]["step"]
    assert out["target_info"]["ranks"] == "processes"
    assert (step["weight"], step["weight_unsplit"], step["invariant"]) == ("1/step_tokens", "1/step_tokens", True)
    assert "fail" not in _severity(out, "split_invariance") | _severity(out, "step_weights")
    assert step["objective"]["factors"] == pytest.approx([1.0] * len(step["objective"]["factors"]), rel=1e-5)
    got, _ = _step_factors(out)
    assert got == pytest.approx([1.0] * len(got), rel=1e-5)


@pytest.mark.slow
@pytest.mark.frameworks
def test_skyrl_0_3_0s_token_mean_legacy_keeps_the_old_weights_and_is_judged_by_them(capsys):
    code, out = _audit(capsys, FIXED, *GRPO, "--set", "trainer.algorithm.loss_reduction=token_mean_legacy")
    step = out["inferred"]["step"]
    assert step["weight"] == "1/micro_batch_tokens" and step["objective"]["name"] == "local_token_mean"
    assert _severity(out, "split_invariance") == {"fail"} and "fail" not in _severity(out, "step_weights")


@pytest.mark.slow
@pytest.mark.frameworks
def test_sequence_mean_weighs_each_answer_by_one_over_its_length(capsys):
    code, out = _audit(capsys, FIXED, *GRPO, "--set", "trainer.algorithm.loss_reduction=sequence_mean")
    assert out["inferred"]["per_sample_weight"] == "1/length" and out["inferred"]["step"]["invariant"]


@pytest.mark.slow
@pytest.mark.frameworks
def test_prompt_mean_weighs_each_token_by_one_over_its_groups_tokens(capsys):
    code, out = _audit(capsys, FIXED, *GRPO, "--set", "trainer.algorithm.loss_reduction=prompt_mean")
    assert out["inferred"]["per_sample_weight"] == "1/group_tokens" and out["inferred"]["step"]["invariant"]
    assert code == 0 and out["verdict"] == "deviation"


@pytest.mark.slow
@pytest.mark.frameworks
def test_a_key_skyrls_config_does_not_have_is_its_own_one_line_usage_error(capsys):
    env_or_skip("skyrl", FIXED)
    code = main(["audit", "skyrl", "--release", FIXED, "--set", "trainer.algorithm.loss_reductoin=token_mean"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "loss_reductoin" in err and "refuses" in err


@pytest.mark.slow
@pytest.mark.frameworks
def test_dr_grpos_constant_is_max_seq_len_which_0_3_0_requires_set(capsys):
    env_or_skip("skyrl", FIXED)
    sets = [*GRPO, "--set", "trainer.algorithm.loss_reduction=seq_mean_token_sum_norm"]
    assert main(["audit", "skyrl", "--release", FIXED, *sets]) == 2
    assert "set trainer.algorithm.max_seq_len" in capsys.readouterr().err
    code, out = _audit(capsys, FIXED, *sets, "--set", "trainer.algorithm.max_seq_len=8")
    step = out["inferred"]["step"]
    assert code == 0 and out["inferred"]["per_sample_weight"] == "constant" and step["invariant"]
    assert step["objective"]["name"] == "seq_mean_token_sum_norm" and set(step["objective"]["factors"]) == {1.0}


@pytest.mark.slow
@pytest.mark.frameworks
def test_gae_is_refused_as_needing_a_critic_naming_the_estimators_that_run(capsys):
    env_or_skip("skyrl", FIXED)
    code = main(["audit", "skyrl", "--release", FIXED, "--set", "trainer.algorithm.advantage_estimator=gae"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "needs a critic" in err and "grpo, rloo" in err


@pytest.mark.slow
@pytest.mark.frameworks
def test_a_token_budget_over_two_ranks_pads_micro_batches_and_keeps_0_3_0s_step_invariant(capsys):
    # TokenBasedBatchIterator pads the rank with fewer micro-batches with rows of random tokens and no loss mask
    budget = ["--set", "trainer.max_tokens_per_microbatch=12"]
    code, out = _audit(capsys, FIXED, *GRPO, *TWO_RANKS, *budget)
    step = out["inferred"]["step"]
    assert step["ranks"] == "processes" and step["settings"]["trainer.max_tokens_per_microbatch"] == 12
    assert step["invariant"] and set(step["objective"]["factors"]) == {1.0}
    assert max(p["micro_batch"] for p in step["pieces"]) >= 1  # the budget cut a rank's chunk


@pytest.mark.slow
@pytest.mark.frameworks
def test_the_padding_micro_batches_of_a_token_budget_train_no_answer_and_are_never_recorded():
    # rank 0's chunk holds four answers of 6 tokens (four micro-batches under a 12-token budget with the prompt),
    # rank 1's four of 1 token (one): TokenBasedBatchIterator pads rank 1 with three micro-batches of random tokens
    env = env_or_skip("skyrl", FIXED)
    sets = (
        ("trainer.algorithm.advantage_estimator", "grpo"),
        ("trainer.placement.policy_num_gpus_per_node", "2"),
        ("trainer.max_tokens_per_microbatch", "12"),
    )
    spec = FrameworkSpec("skyrl", sets=sets)
    rewards, lengths = np.array([1.0, 0, 1, 0, 0, 1, 1, 0] * 4), np.array([6, 6, 6, 6, 1, 1, 1, 1] * 4)
    with ChildTarget(spec, kind="gradient", python=env.python, warm=True, timeout=300, load_timeout=600) as fn:
        out = fn(rewards, 4, lengths, {"layout": "split"})
    micro, rank = np.asarray(out["micro_batch"]), np.asarray(out["rank"])
    assert (
        micro[:4].tolist() == [0, 1, 2, 3] and micro[4:8].tolist() == [0] * 4 and rank[:8].tolist() == [0] * 4 + [1] * 4
    )
    ratio = np.asarray(out["coefficients"])[:8, 0] / np.asarray(out["advantages"])[:8]
    assert ratio == pytest.approx([1 / 28] * 8, rel=1e-5)  # every token 1/(the step's 28 tokens)


@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.parametrize("release", [BUGGY, FIXED])
def test_advantage_batch_normalize_z_scores_the_generation_batch_once_for_both_layouts(release, capsys):
    # 0.1.0: normalize_advantages_dict in the train loop; 0.2.0 on: _normalize_advantages, step 1; either way silent
    # groups are shifted off zero, and 0.3.0's split stays the unsplit step (the batch is z-scored once, not per step)
    code, out = _audit(capsys, release, *GRPO, "--set", "trainer.algorithm.advantage_batch_normalize=true")
    assert out["inferred"]["silent_groups_zero_gradient"] is False
    assert out["inferred"]["step"]["invariant"] is (release == FIXED)


@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.parametrize(
    "setting, words",
    [
        ("trainer.strategy=megatron", "set trainer.strategy=fsdp2"),
        ("trainer.algorithm.dynamic_sampling.type=filter", "set trainer.algorithm.dynamic_sampling.type=null"),
        ("trainer.algorithm.use_entropy_loss=true", "set trainer.algorithm.use_entropy_loss=false"),
        ("trainer.algorithm.zero_variance_filter=true", "set trainer.algorithm.zero_variance_filter=false"),
        (
            "trainer.train_batch_size=0",
            "trainer.train_batch_size takes a whole number ≥ 1, got 0: set trainer.train_batch_size=1",
        ),
        ("trainer.placement.policy_num_gpus_per_node=16", "the step runs at most 8"),
        ("generator.n_samples_per_prompt=3", "policy_mini_batch_size: the driver's default, you set none"),
    ],
)
def test_a_setting_the_driver_does_not_run_is_one_line_naming_what_runs(setting, words, capsys):
    env_or_skip("skyrl", FIXED)
    extra = ["--set", "trainer.placement.policy_num_gpus_per_node=4"] if setting.startswith("generator.") else []
    code = main(["audit", "skyrl", "--release", FIXED, *GRPO, "--set", setting, *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and words in err, err


_OPC = "trainer.algorithm.off_policy_correction."


@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.parametrize("release, estimator, ratio", [("0.3.0", "token_mask", 1.0), ("0.1.0", "other", 1.1529)])
def test_a_token_mask_beside_tis_renormalises_the_kept_tokens_in_0_1_0_not_in_0_3_0(release, estimator, ratio, capsys):
    """off_policy_correction: token TIS at 2 and a token mask [0.5, 2] (the TIS cap never cuts a kept ratio): 0.3.0
    weighs each kept token r; 0.1.0's token mean divides by the tokens the mask keeps, so every kept token weighs
    N/N_kept more (identity_three_policy)."""
    sets = ["tis_ratio_type=token", "token_mask_is_threshold_low=0.5", "token_mask_is_threshold_high=2.0"]
    _, out = _audit(capsys, release, "--set", "trainer.algorithm.advantage_estimator=grpo",
                    *[a for s in sets for a in ("--set", _OPC + s)])  # fmt: skip
    fit = out["inferred"]["three_policy"]
    assert (fit["estimator"], fit["documented"], fit["on_policy_weight_one"]) == (estimator, "token_mask", True)
    assert {round(row["ratio"], 4) for row in fit["identity"]} == {ratio}
    assert fit["missing"] == "crashed" and fit["non_finite"] == "non-finite"  # a NaN log μ reaches the gradient
    assert "expected non-null rollout logprobs" in fit["missing_message"]  # convert_to_training_input's assertion
    assert _severity(out, "identity_three_policy") == (set() if ratio == 1.0 else {"fail"})
