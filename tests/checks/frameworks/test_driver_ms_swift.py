"""The ms-swift driver (``checks.frameworks.ms_swift``): its split and objective (no ms-swift needed), then audits of
ms-swift 4.5.3 and 4.6.0 in their release environments (``releases.ensure``; ms-swift never goes into the project's
environment).

What ms-swift computes (``swift/rlhf_trainers/grpo_trainer.py``, ``swift/rl_core/advantage.py``):

- advantages: the group's mean and ``torch.std`` (ddof 1), (r − mean)/(std + 1e-4) for ``scale_rewards=group`` (the
  default of ``advantage_estimator=grpo``); ``scale_rewards=none`` leaves the std out;
- the loss of dapo, cispo and fipo: the masked token sum over ``num_items_in_batch``, the completion tokens of the
  whole generation batch gathered over the ranks, divided by the processes; ``Trainer.training_step`` then divides
  by the accumulation steps (ms-swift sets ``model_accepts_loss_kwargs = False``).  4.6.0 multiplies those losses
  by the accumulation steps first (``_undo_gradient_accumulation_scaling``, PR #10116); 4.5.3 does not, so its
  update is 1/gradient_accumulation_steps of the documented one (issue #10117).
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from _support import env_or_skip

from grpo_identity.app.cli import main
from grpo_identity.checks.frameworks import AdapterError, FrameworkSpec
from grpo_identity.checks.frameworks import ms_swift as drv
from grpo_identity.checks.frameworks.registry import FRAMEWORK_TABLE

pytestmark = pytest.mark.xdist_group("ms-swift")

BUGGY, FIXED = "4.5.3", "4.6.0"


def _spec(**sets: object) -> FrameworkSpec:
    return FrameworkSpec("ms-swift", tuple((k, str(v)) for k, v in sets.items()))


# --- the driver's own steps (no ms-swift needed) ---------------------------------------------------------------------
def test_the_driver_module_of_a_hyphenated_name_is_its_python_name():
    assert FRAMEWORK_TABLE["ms-swift"].driver == "grpo_identity.checks.frameworks.ms_swift"


def test_the_default_split_is_two_accumulated_micro_batches_of_one_group_each():
    split = drv._Layout.of(_spec(loss_type="dapo"), "split")
    assert (split.group_size, split.step_rows, split.generation_rows, split.ranks) == (4, 8, 8, 1)
    assert split.chosen == drv.SPLIT_KEYS and split.per_generation == 2
    # a group size of the user's: the micro-batch is one group of it, whatever G
    split = drv._Layout.of(_spec(num_generations=16), "split")
    assert split.sets["per_device_train_batch_size"] == 16 and "num_generations" not in split.chosen


def test_the_step_counts_ranks_accumulation_and_generation_batches_in_answers():
    spec = _spec(per_device_train_batch_size=2, gradient_accumulation_steps=2, steps_per_generation=4,
                 NPROC_PER_NODE=2, num_generations=4)  # fmt: skip
    split = drv._Layout.of(spec, "split")
    assert (split.step_rows, split.generation_rows, split.ranks, split.per_generation) == (8, 16, 2, 4)
    unsplit = drv._Layout.of(spec, "unsplit")
    assert unsplit.ranks == 1 and unsplit.sets == {
        "num_generations": 4, "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1,
        "steps_per_generation": 2, "generation_batch_size": 16,
    }  # fmt: skip


def test_a_generation_batch_size_sets_the_micro_batches_per_generation():
    spec = _spec(per_device_train_batch_size=4, generation_batch_size=16)
    assert drv._Layout.of(spec, "split").per_generation == 4


@pytest.mark.parametrize("key, raw, runs", [("gradient_accumulation_steps", "0", 1),
                                            ("per_device_train_batch_size", "abc", 1), ("NPROC_PER_NODE", "9", 4),
                                            ("num_generations", "1.5", 1)])  # fmt: skip
def test_a_split_count_out_of_bounds_is_refused_by_name(key, raw, runs):
    with pytest.raises(
        AdapterError, match=rf"^ms-swift: {key} takes a whole number .*, got '{raw}': set {key}={runs}$"
    ):
        drv._Layout.of(_spec(**{key: raw}), "split")


@pytest.mark.parametrize(
    "loss_type, name",
    [("grpo", "seq_mean_token_mean"), ("bnpo", "local_token_mean"), ("dr_grpo", "seq_mean_token_sum_norm"),
     ("dapo", "token_mean"), ("cispo", "token_mean"), ("fipo", "token_mean"), ("real", None)],
)  # fmt: skip
def test_each_loss_type_is_judged_by_the_objective_its_docs_give(loss_type, name):
    found = drv.objective(
        SimpleNamespace(loss_type=loss_type, max_completion_length=512, epsilon=0.2, epsilon_high=None)
    )
    assert (found and found["name"]) == name
    if found is not None:
        assert found["budget"] == 512.0 and found["setting"] == f"loss_type={loss_type}"
        # cispo's weight is clamp(ratio, max=epsilon_high), and epsilon_high is epsilon where unset
        assert found.get("ratio_cap") == (0.2 if loss_type == "cispo" else None)


# --- ms-swift itself, in its release environments --------------------------------------------------------------------
def _audit(capsys, release, *args):
    """(exit code, JSON) of ``grpo-identity audit ms-swift --release RELEASE *args``."""
    env_or_skip("ms-swift", release)
    code = main(["audit", "ms-swift", "--release", release, *args, "--max-examples", "10", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["target_info"]["version"] == release and out["target_info"]["framework"] == "ms-swift"
    return code, out


def _severity(out, prop):
    return {f["severity"] for f in out["findings"] if f["property"] == prop}


@pytest.mark.slow
@pytest.mark.frameworks
def test_4_5_3s_dapo_loss_from_its_yaml_file_is_divided_by_the_accumulation_steps_twice(capsys, tmp_path):
    # ms-swift issue #10117 at the split the file sets (four accumulated micro-batches), the file as `swift rlhf
    # FILE` reads it; the command line's keys win over the file's
    config = tmp_path / "grpo.yaml"
    config.write_text("loss_type: dapo\ngradient_accumulation_steps: 4\nper_device_train_batch_size: 8\n")
    code, out = _audit(capsys, BUGGY, "--config", str(config), "--set", "per_device_train_batch_size=2")
    assert out["target_info"]["loss_type"] == "dapo"
    settings = out["target_info"]["step"]["settings"]
    assert (settings["per_device_train_batch_size"], settings["gradient_accumulation_steps"]) == (2, 4)
    step = out["inferred"]["step"]
    assert code == 1 and not step["invariant"] and "fail" in _severity(out, "step_scale")
    finding = next(f for f in out["findings"] if f["property"] == "step_scale")
    assert "0.25×" in finding["message"] and "gradient_accumulation_steps applied twice (1/4" in finding["message"]


@pytest.mark.slow
@pytest.mark.frameworks
def test_4_6_0s_dapo_step_is_its_documented_token_mean_and_its_advantages_divide_by_the_group_std(capsys):
    code, out = _audit(capsys, FIXED, "--set", "loss_type=dapo")
    inf = out["inferred"]
    assert inf["step"]["invariant"] and not _severity(out, "step_scale") and not _severity(out, "split_invariance")
    assert (inf["centre"], inf["scale"], inf["ddof"]) == ("mean", "group_std", 1)
    assert inf["eps"] == pytest.approx(1e-4, rel=0.05)


@pytest.mark.slow
@pytest.mark.frameworks
def test_two_rank_processes_each_holding_half_a_group_keep_4_6_0s_step_whole(capsys, tmp_path):
    # two answers per rank's micro-batch, groups of four: every group is split across the ranks, whose rows the
    # driver counts in the order ms-swift gathers them; the ranks come from the file's ENV block, as `swift rlhf`
    # launches them; ms-swift checks the batch sizes at that world size (a batch of 2 holds no group of 4)
    config = tmp_path / "grpo.yaml"
    config.write_text("loss_type: dapo\nper_device_train_batch_size: 2\nENV:\n  NPROC_PER_NODE: 2\n")
    code, out = _audit(capsys, FIXED, "--config", str(config))
    step = out["target_info"]["step"]
    assert step["ranks"] == "processes" and step["settings"]["NPROC_PER_NODE"] == 2 and step["step_rows"] == 8
    assert out["inferred"]["step"]["invariant"] and not _severity(out, "step_scale")


@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.parametrize(
    "sets, words",
    [
        (["--set", "loss_typo=dapo"], "ms-swift 4.6.0 rejects the arguments"),
        (["--set", "dynamic_sample=true"], "does not run dynamic_sample=True"),
    ],
)
def test_a_key_ms_swift_refuses_or_the_driver_does_not_run_is_one_line(sets, words, capsys):
    env_or_skip("ms-swift", FIXED)
    code = main(["audit", "ms-swift", "--release", FIXED, *sets])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and words in err, err


@pytest.mark.slow
@pytest.mark.frameworks
def test_sequence_mask_keeps_the_token_ratios_where_the_docs_mask_the_geometric_mean(capsys):
    """rollout_importance_sampling_mode=sequence_mask: the docs broadcast the geometric mean and mask it above the
    threshold (geometric_mask); the code keeps each token's ratio and drops the answer whose mean is above it
    (geometric_gate): a deviation, and the update departs from the documented one.  1 on-policy; no rollout
    log-probabilities run uncorrected; a NaN one reaches the gradient."""
    _, out = _audit(capsys, "4.6.0", "--set", "rollout_importance_sampling_mode=sequence_mask")
    fit = out["inferred"]["three_policy"]
    assert (fit["estimator"], fit["documented"], fit["in_graph"]) == ("geometric_gate", "geometric_mask", False)
    assert fit["on_policy_weight_one"] and fit["missing"] == "on-policy" and fit["non_finite"] == "non-finite"
    found = {f["property"]: f["severity"] for f in out["findings"]}
    assert (found["correction_estimator"], found["identity_three_policy"]) == ("deviation", "fail")
