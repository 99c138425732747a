"""The OpenRLHF driver (``checks.frameworks.openrlhf``): its parts that need no OpenRLHF (the
stand-ins for GPU-only packages, ``--set`` as ``train_ppo_ray`` arguments, configurations it cannot
run, an API it does not know), then audits of OpenRLHF 0.11.2 itself from its release
environment (slow; the environment is built once).

What OpenRLHF 0.10.2 and 0.11.2 compute (``RemoteExperienceMaker.compute_advantages_and_returns``,
the same in both, read in their source): rewards in float32 (at least), reshaped to (prompts,
n_samples_per_prompt), then

- ``group_norm``: (r − mean) / (r.std() + 1e-9), torch's std (ddof 1);
- ``dr_grpo`` and ``reinforce_baseline``: r − mean;
- ``rloo``: r − (sum − r)/(n − 1) (the leave-one-out baseline);

then ``compute_reward`` clamps that *shaped* reward to ``reward.clip_range`` (default ±10) and
puts it on the last response token; returns are cumulated with γ (forced to 1 for all but
``reinforce``); finally ``reinforce`` and ``reinforce_baseline`` (and ``gae``) are whitened over the
whole batch with a token-weighted mean and variance (``algo.advantage.no_std_norm`` drops the
variance only). ``no_std_norm`` does not reach ``group_norm``.

The optimizer step (``ActorPPOTrainer.ppo_train``): 0.10.2's ``PolicyLoss`` takes the token mean
of each micro-batch (``masked_mean``), so a token weighs 1/(its micro-batch's tokens) once DeepSpeed
divides by the accumulation steps and averages the ranks; 0.11.2 (``utils/loss_utils.py``,
``iter_grad_accum_global_norm``, OpenRLHF PR #1249) divides every micro-batch of an accumulation
window by the window's tokens summed over the ranks (÷ accumulation steps, × ranks): one token
mean over the optimizer step, whatever the split, as long as a step lies inside one generation batch.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from _support import env_or_skip, planted

from grpo_identity.app.cli import main
from grpo_identity.checks.calls.child import ChildTarget
from grpo_identity.checks.calls.target import TargetImportError
from grpo_identity.checks.frameworks import RESPONSE_LENGTH, AdapterError, FrameworkSpec
from grpo_identity.checks.frameworks import openrlhf as drv
from grpo_identity.checks.frameworks.exported import openrlhf as runner
from grpo_identity.checks.measure.steps import audit_step, design

pytestmark = pytest.mark.xdist_group("openrlhf")

RELEASE = "0.11.2"
FAKE = "grpo_identity_no_such_gpu_pkg"


def test_the_stand_ins_answer_only_under_their_roots_and_leave_nothing_behind():
    before = list(sys.meta_path)
    with drv.stand_ins((FAKE, "json")) as finder:
        mod = importlib.import_module(f"{FAKE}.bert_padding")
        assert mod.__name__ == f"{FAKE}.bert_padding" and isinstance(mod.index_first_axis, type)
        with pytest.raises(RuntimeError, match="stand-in"):
            mod.index_first_axis()
        with pytest.raises(AttributeError):
            mod.__wrapped__  # noqa: B018 (dunder names are not stood in)
        assert finder.find_spec(f"{FAKE}x") is None and finder.find_spec("numpy") is None
        assert importlib.import_module("json").dumps([1]) == "[1]"  # an installed root stays the real one
        assert "json" not in finder.roots and finder.made == [FAKE, f"{FAKE}.bert_padding"]
    assert sys.meta_path == before and not [m for m in sys.modules if m.startswith(FAKE)]
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"{FAKE}.bert_padding")


def test_a_failed_import_under_the_stand_ins_removes_them_too():
    before = list(sys.meta_path)
    with pytest.raises(ZeroDivisionError), drv.stand_ins((FAKE,)):
        importlib.import_module(FAKE)
        1 / 0  # noqa: B018
    assert sys.meta_path == before and FAKE not in sys.modules


def _parser():
    p = argparse.ArgumentParser()
    p.add_argument("--algo.advantage.estimator", default="gae")
    p.add_argument("--algo.advantage.no_std_norm", action="store_true", default=False)
    p.add_argument("--reward.clip_range", type=float, nargs=2, default=(-10, 10))
    return p


def test_sets_become_train_ppo_ray_arguments_flags_and_pairs():
    argv = drv.argv_of(
        _parser(),
        [
            ("algo.advantage.estimator", "rloo"),
            ("algo.advantage.no_std_norm", "true"),
            ("reward.clip_range", "-1,1"),
            ("no.such", "3"),
        ],
    )
    assert argv == [
        "--algo.advantage.estimator",
        "rloo",
        "--algo.advantage.no_std_norm",
        "--reward.clip_range",
        "-1",
        "1",
        "--no.such",
        "3",
    ]
    assert (
        drv.argv_of(_parser(), [("algo.advantage.no_std_norm", "true"), ("algo.advantage.no_std_norm", "false")]) == []
    )  # the later one wins
    with pytest.raises(AdapterError, match="is a flag"):
        drv.argv_of(_parser(), [("algo.advantage.no_std_norm", "maybe")])


def test_configs_the_driver_cannot_run_are_adapter_errors_before_openrlhf_is_imported():
    with pytest.raises(AdapterError, match="its default, gae, needs a critic"):
        drv.build(FrameworkSpec("openrlhf"), "advantage")
    with pytest.raises(AdapterError, match="gae needs a critic's values"):
        drv.build(
            FrameworkSpec("openrlhf", sets=(("algo.advantage.estimator", "rloo"), ("algo.advantage.estimator", "gae"))),
            "advantage",
        )
    with pytest.raises(AdapterError, match="takes no config file"):
        drv.cli_args(FrameworkSpec("openrlhf", config="run.yaml"), 2)


def test_an_api_the_driver_does_not_know_is_an_adapter_error_naming_the_release_and_the_attribute(monkeypatch):
    fake_em = SimpleNamespace(__name__="openrlhf.trainer.ppo_utils.experience_maker")  # no RemoteExperienceMaker
    monkeypatch.setitem(runner.LOADED, "ray", SimpleNamespace())
    monkeypatch.setitem(runner.LOADED, "openrlhf.trainer.ppo_utils.experience_maker", fake_em)
    monkeypatch.setitem(runner.LOADED, "openrlhf.trainer.ppo_utils.kl_controller", SimpleNamespace(__name__="kl"))
    monkeypatch.setattr(runner, "release", lambda: "9.9")
    with pytest.raises(
        AdapterError,
        match=r"OpenRLHF 9\.9 has no openrlhf\.trainer\.ppo_utils\.experience_maker\.RemoteExperienceMaker",
    ):
        runner.experience_maker(SimpleNamespace())


@pytest.mark.skipif(
    importlib.util.find_spec("openrlhf") is not None, reason="OpenRLHF is installed in this environment"
)
def test_without_openrlhf_the_driver_says_so_as_an_adapter_error():
    with pytest.raises(AdapterError, match=r"OpenRLHF \(not installed\): its trainer modules do not import here"):
        drv.build(FrameworkSpec("openrlhf", sets=(("algo.advantage.estimator", "group_norm"),)), "advantage")
    assert not [
        m
        for m in sys.modules
        if m.partition(".")[0] in drv.GPU_ONLY and importlib.util.find_spec(m.partition(".")[0]) is None
    ]


def _args(sets):
    """A parsed-config look-alike: ``train.batch_size`` → ``args.train.batch_size`` (ints)."""
    args = SimpleNamespace()
    for key, value in sets:
        head, _, leaf = key.partition(".")
        setattr(args, head, getattr(args, head, SimpleNamespace()))
        setattr(getattr(args, head), leaf, int(value))
    return args


#: the driver's default split with G = 4 and the options it leaves at OpenRLHF's defaults
SPLIT = {
    **{k: int(v) for k, v in drv.DEFAULT_SPLIT},
    "rollout.n_samples_per_prompt": 4,
    "train.max_epochs": 1,
    "train.max_tokens_per_gpu": 16192,
    "rollout.max_tokens_per_gpu": None,
    "ds.ring_attn_size": 1,
    "ds.tensor_parallel_size": 1,
}


def _even_shares(rows, micro, dp):
    """What ``RayActorGroup.async_run_method_batch`` gives each rank (its chunks of ⌈chunks / dp⌉)."""
    sizes = [min(micro, rows - first) for first in range(0, rows, micro)]
    per = -(-len(sizes) // dp)
    return [sum(sizes[r * per : (r + 1) * per]) for r in range(dp)]


def test_the_default_split_accumulates_on_two_ranks_and_is_a_split_openrlhf_runs(monkeypatch):
    monkeypatch.setattr(drv, "_shares", _even_shares)
    assert drv.STEP_GROUP_SIZE == SPLIT["rollout.n_samples_per_prompt"] == 4
    args = _args([(k, v) for k, v in SPLIT.items() if v is not None])
    assert runner.rank_counts(args) == (2, 2)  # 8 answers a step = 2 ranks × 2 micro-batches × 2 answers
    assert drv.split_problem(SPLIT, dynamic=False) is None and drv.split_problem(SPLIT, dynamic=True) is None
    ring = _args([(k, v) for k, v in {**SPLIT, "ds.ring_attn_size": 2}.items() if v is not None])
    assert "data-parallel ranks only" in drv._unreproducible(ring) and drv._unreproducible(args) is None


@pytest.mark.parametrize(
    "change, dynamic, key, why, fix",
    [
        ({"train.micro_batch_size": 0}, False, "train.micro_batch_size", "must be at least 1", 1),
        ({"rollout.max_tokens_per_gpu": 0}, True, "rollout.max_tokens_per_gpu", "must be at least 1", 1),
        ({"actor.num_gpus_per_node": 3, "ds.ring_attn_size": 2}, False, "actor.num_gpus_per_node", "whole groups", 4),
        ({"rollout.micro_batch_size": 16}, False, "rollout.micro_batch_size", "fewer chunks than ranks", 8),
        (
            {"rollout.batch_size": 1, "rollout.n_samples_per_prompt": 1, "rollout.micro_batch_size": 1},
            False,
            "rollout.batch_size",
            "fewer chunks than ranks",
            2,
        ),
        ({"train.batch_size": 6}, False, "train.batch_size", "DeepSpeed refuses train.batch_size=6", 8),
        ({"train.batch_size": 2}, False, "train.batch_size", "DeepSpeed refuses", 4),
        ({"train.batch_size": 1}, True, "train.batch_size", "setup_dynamic_batch divides", 2),
        (
            {"rollout.batch_size": 3, "rollout.micro_batch_size": 4, "train.batch_size": 4},
            False,
            "rollout.micro_batch_size",
            "the ranks get [4, 2] micro-batches",
            3,
        ),
    ],
)
def test_split_settings_openrlhf_cannot_run_name_the_setting_and_a_value_that_runs(
    monkeypatch, change, dynamic, key, why, fix
):
    monkeypatch.setattr(drv, "_shares", _even_shares)
    monkeypatch.setattr(drv, "release", lambda: "9.9")
    values = {**SPLIT, **change}
    found = drv.split_problem(values, dynamic)
    assert found is not None and found[0] == key and why in found[1]
    assert drv._fixing(values, dynamic, key) == fix and drv.split_problem({**values, key: fix}, dynamic) is None
    args = _args([*((k, v) for k, v in values.items() if v is not None), ("train.dynamic_batch_enable", dynamic)])
    args.rollout.max_tokens_per_gpu = values["rollout.max_tokens_per_gpu"]
    with pytest.raises(AdapterError, match=rf"OpenRLHF 9\.9: .*; --set {key}={fix} would run"):
        drv.check_split(args)


def test_the_reductions_refuse_an_op_they_do_not_know_naming_it():
    import torch
    import torch.distributed as dist

    c = runner.Reductions(2)
    for op in ("product", dist.ReduceOp.PRODUCT, dist.ReduceOp.BAND):
        with pytest.raises(AdapterError, match=rf"an all-reduce with op .*{str(op).rpartition('.')[2]}"):
            c.all_reduce(torch.tensor(2.0), op=op)  # refused before any collective is called
    names = ["sum", dist.ReduceOp.SUM, "avg", dist.ReduceOp.AVG, "max", dist.ReduceOp.MIN]
    assert [c.reduction(op) for op in names] == ["sum", "sum", "mean", "mean", "max", "min"]


def test_the_reductions_are_the_strategys_all_reduce_over_the_rank_processes():
    # DeepspeedStrategy.all_reduce: a mean divides each rank's value by the ranks, then sums
    import torch

    from grpo_identity.checks.frameworks._ranks import ProcessRanks

    def rank(r: int) -> list[float]:
        out = []
        for op in ("mean", "sum", "max", "min"):
            t = torch.tensor([1.0 + 2 * r])  # 1 and 3
            runner.Reductions(2).all_reduce(t, op)
            out.append(float(t))
        return out

    assert ProcessRanks(2).run(rank) == [[2.0, 4.0, 3.0, 1.0]] * 2


def test_the_stood_in_engine_divides_by_the_accumulation_steps_and_steps_at_the_boundary():
    import torch

    args = _args([("train.batch_size", 8), ("train.micro_batch_size", 2), ("train.dynamic_batch_enable", 0)])
    ledger, policy = runner.Ledger(4), runner.Policy(4)
    engine = runner.Engine(args, rank=1, dp=2, ledger=ledger)
    for rows in ([0, 1], [2, 3]):  # two micro-batches: one accumulation window (8 / (2 × 2))
        seq = torch.tensor([[runner.ID_BASE + r, 3, 4] for r in rows])
        log_probs = policy(seq, torch.ones(2, 2, dtype=torch.bool))
        engine.backward(log_probs.sum(), policy, None)
        engine.optimizer_step(None, policy, None)
    assert engine.gas == 2 and engine.steps == 1 and engine.micro_steps == 0
    assert ledger.step.tolist() == [0, 0, 0, 0] and ledger.micro.tolist() == [0, 0, 1, 1]
    assert ledger.rank.tolist() == [1] * 4
    np.testing.assert_allclose(policy.gradient()[:, :2], 0.5)  # ∂(loss / 2)
    args.train.dynamic_batch_enable = 1  # DeepSpeed's gradient_accumulation_steps is 1 under dynamic batching
    dynamic = runner.Engine(args, rank=0, dp=2, ledger=ledger)
    dynamic.micro_steps = 1
    dynamic.optimizer_step(None, policy, None)  # OpenRLHF calls it at a dynamic step's last micro-batch only
    assert dynamic.gas == 1 and dynamic.steps == 1


def test_ranks_with_different_numbers_of_micro_batches_are_an_adapter_error():
    args = _args([("train.micro_batch_size", 2), ("train.dynamic_batch_enable", 0)])
    trainers = [SimpleNamespace(replay_buffer=[0] * k) for k in (9, 7)]
    with pytest.raises(AdapterError, match=r"the ranks get \[4, 3\] micro-batches"):
        runner.same_micro_batches(trainers, args)
    runner.same_micro_batches([SimpleNamespace(replay_buffer=[0] * 8)] * 2, args)


# --- OpenRLHF 0.11.2 itself, from its release environment ----------------------------------------
@pytest.fixture(scope="module")
def release_env():
    return env_or_skip("openrlhf", RELEASE)


def _audit(capsys, *sets, level=None):
    """(exit code, JSON) of ``grpo-identity audit openrlhf --release 0.11.2 --set …``: the
    advantages alone unless a test asks for the gradient."""
    sets_argv = [a for s in sets for a in ("--set", s)]
    argv = ["audit", "openrlhf", "--release", RELEASE, *sets_argv, "--max-examples", "20", "--json"]
    code = main([*argv, "--level", level or "advantage"])
    out = json.loads(capsys.readouterr().out)
    assert out["target_info"]["version"] == RELEASE and out["target_info"]["stand_ins"] == ["flash_attn", "vllm"]
    return code, out


def _failed(out):
    return {f["property"] for f in out["findings"] if f["severity"] == "fail"}


@pytest.mark.slow
@pytest.mark.frameworks
def test_group_norm_divides_by_the_group_std_with_ddof_1_in_float32(release_env, capsys):
    # (r - mean) / (r.std() + 1e-9): torch's std is ddof 1; 1e-9 is below what float32 resolves
    code, out = _audit(capsys, "algo.advantage.estimator=group_norm", "reward.clip_range=-1000,1000")
    inf = out["inferred"]
    assert (inf["centre"], inf["scale"], inf["ddof"], inf["precision"], inf["coupled"]) == (
        "mean",
        "group_std",
        1,
        "float32",
        False,
    )
    assert inf["eps"] <= inf["eps_resolution"] and 1e-9 < inf["eps_resolution"]
    # the one failure: a silent group of 0.3s has a float32 mean off by rounding, divided by std + 1e-9
    assert code == 1 and _failed(out) == {"silent_nonbinary_groups_zero"} and inf["silent_nonbinary_max_abs"] > 1


@pytest.mark.slow
@pytest.mark.frameworks
def test_no_std_norm_does_not_reach_group_norm_and_the_default_clip_range_cuts_at_10(release_env, capsys):
    # no_std_norm only drops the batch whitening of gae / reinforce / reinforce_baseline; the
    # default reward.clip_range (-10, 10) clamps the already normalised rewards, which also breaks
    # the identity where |Â₊| passes 10 (G = 105, k = 104)
    code, out = _audit(capsys, "algo.advantage.estimator=group_norm", "algo.advantage.no_std_norm=true")
    inf = out["inferred"]
    assert (inf["centre"], inf["scale"], inf["ddof"]) == ("mean", "group_std", 1)
    assert out["target_info"]["no_std_norm"] is True
    allowed = {"silent_nonbinary_groups_zero", "zero_sum_per_group", "matches_dial", "identity_in_vector_form"}
    assert code == 1 and "silent_nonbinary_groups_zero" in _failed(out) and _failed(out) <= allowed
    assert inf["silent_nonbinary_max_abs"] == pytest.approx(10.0)  # the clip, not the rounding error's own size


@pytest.mark.slow
@pytest.mark.frameworks
def test_dr_grpo_is_the_group_mean_alone(release_env, capsys):
    code, out = _audit(capsys, "algo.advantage.estimator=dr_grpo", "reward.clip_range=-1000,1000")  # out of reach
    assert code == 0 and out["verdict"] == "pass" and out["matches"] == "dr_grpo" and out["inferred"]["scale"] == "none"


@pytest.mark.slow
@pytest.mark.frameworks
def test_rloo_is_the_leave_one_out_baseline_once_the_clip_is_out_of_reach(release_env, capsys):
    code, out = _audit(capsys, "algo.advantage.estimator=rloo", "reward.clip_range=-1000,1000")
    assert code == 0 and out["matches"] == "rloo" and out["inferred"]["centre"] == "loo"


@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.parametrize("no_std_norm, scale", [("false", None), ("true", "none")])
def test_reinforce_baseline_couples_the_groups_through_a_token_weighted_batch_whitening(
    release_env, capsys, no_std_norm, scale
):
    # group mean subtracted, then (A - batch mean over response tokens) [/ batch std over tokens]:
    # responses of different lengths weigh differently, so a silent group gets a nonzero advantage.
    # Whitened, it is REINFORCE++-baseline (OpenRLHF's form, ddof 0), named, those properties given up by
    # design; without the std, no variant: they fail
    code, out = _audit(
        capsys, "algo.advantage.estimator=reinforce_baseline", f"algo.advantage.no_std_norm={no_std_norm}"
    )
    assert out["inferred"]["coupled"] is True and out["inferred"]["scale"] == scale
    properties = {"groups_independent", "silent_groups_exactly_zero", "zero_sum_per_group"}
    if no_std_norm == "false":
        assert code == 0 and out["matches"] == "reinforce_plus_plus_baseline"
        variant = next(f for f in out["findings"] if f["property"] == "variant")
        assert variant["counterexample"]["form"] == "OpenRLHF"
        by_design = {f["property"] for f in out["findings"] if f["message"].startswith("by design")}
        assert properties <= by_design and not _failed(out)
    else:
        assert code == 1 and properties <= _failed(out)


@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.parametrize("mode, weight", [("token-mean", "1/step_tokens"), ("seq-mean-token-mean", "1/length")])
def test_the_policy_loss_aggregation_sets_the_per_sample_weight(release_env, capsys, mode, weight):
    sets = ("algo.advantage.estimator=dr_grpo", "reward.clip_range=-1000,1000", f"actor.loss_agg_mode={mode}")
    code, out = _audit(capsys, *sets, level="gradient")
    assert out["target_info"]["loss_agg_mode"] == mode and out["verdict"] == "deviation"
    assert out["inferred"]["per_sample_weight"] == weight  # token-mean: one mean over the step's tokens


@pytest.mark.slow
@pytest.mark.frameworks
def test_the_driver_reads_back_what_the_experience_maker_computes_per_response(release_env):
    def advantages(sets, rewards, G):  # the driver's target, in the release environment's interpreter
        spec = FrameworkSpec("openrlhf", sets=tuple(map(tuple, sets)))
        with ChildTarget(spec, python=release_env.python, warm=True, timeout=300, load_timeout=600) as fn:
            return np.asarray(fn(np.array(rewards, dtype=float), G), dtype=np.float64)

    one_in_103 = [1.0] + [0.0] * 102
    group_norm = [["algo.advantage.estimator", "group_norm"]]
    got = {
        "group_norm": advantages(group_norm, [1, 0, 0, 1, 1, 1], 3),
        "clipped": advantages(group_norm, one_in_103, 103),
        "unclipped": advantages([*group_norm, ["reward.clip_range", "-100,100"]], one_in_103, 103),
        "baseline": advantages(
            [["algo.advantage.estimator", "reinforce_baseline"], ["algo.advantage.no_std_norm", "true"]], [1, 0], 2
        ),
    }
    s = np.sqrt(1 / 3)  # std (ddof 1) of [1, 0, 0]
    np.testing.assert_allclose(got["group_norm"], [2 / 3 / s, -1 / 3 / s, -1 / 3 / s, 0, 0, 0], atol=1e-6)
    top = (1 - 1 / 103) / np.sqrt(1 / 103)  # 10.05: above the default clip range (-10, 10)
    assert got["clipped"][0] == 10.0 and got["unclipped"][0] == pytest.approx(top, rel=1e-6)
    L = np.array([3, 2])  # the driver's two responses are 3 and 2 tokens long: the batch mean is over their tokens
    centred = np.array([0.5, -0.5])
    np.testing.assert_allclose(got["baseline"], centred - (centred * L).sum() / L.sum(), atol=1e-6)


# --- the optimizer step, OpenRLHF 0.10.2 and 0.11.2 ----------------------------------------------
OLDER = "0.10.2"


def _step(python, *sets, layouts=False):
    """(geometry, audit_step's result, the per-G gradient of [1, 0, 0] with lengths 2, 3, 4) of
    OpenRLHF's step target in a release environment's child process; with ``layouts``, then also
    the target's output for the audit's rows split and unsplit."""
    spec = FrameworkSpec("openrlhf", sets=tuple(tuple(s.split("=", 1)) for s in sets), level="gradient")
    with ChildTarget(spec, kind="gradient", python=python, warm=True, timeout=300, load_timeout=600) as fn:
        geo = fn.info["step"]
        result = audit_step(fn, geo)
        plain = fn(np.array([1.0, 0.0, 0.0]), 3, np.array([2, 3, 4]))
        if not layouts:
            return geo, result, plain
        d = design(geo, RESPONSE_LENGTH)
        out = {layout: fn(d.rewards, d.group_size, d.lengths, d.request(layout)) for layout in ("split", "unsplit")}
    return geo, result, plain, out


def _same_steps_unsplit(out):
    """The unsplit layout ran the split's optimizer steps, each one micro-batch on one rank."""
    split, unsplit = out["split"], out["unsplit"]
    trained = split["step"] >= 0
    assert (unsplit["step"][trained] == split["step"][trained]).all()
    assert (unsplit["rank"] == 0).all() and (unsplit["micro_batch"] == 0).all() and (unsplit["step"] >= 0).all()


def _predicted_micro_batch_ratios(result, ga, dp):
    """ρ of each micro-batch under a token mean per micro-batch: (its step's tokens)/(its tokens × GA × ranks)."""
    step_tokens = {}
    for p in result.pieces:
        step_tokens[p["step"]] = step_tokens.get(p["step"], 0) + p["tokens"]
    return [(p["weight_ratio"], step_tokens[p["step"]] / (p["tokens"] * ga * dp)) for p in result.pieces]


@pytest.mark.slow
@pytest.mark.frameworks
def test_0_11_normalises_the_policy_loss_over_the_step_on_every_rank(release_env):
    geo, result, plain, out = _step(release_env.python, "algo.advantage.estimator=group_norm", layouts=True)
    _same_steps_unsplit(out)
    assert "each a process of one gloo group" in geo["layouts"]["split"] and "emulated" not in geo["layouts"]["split"]
    settings = geo["settings"]
    assert (
        geo["ranks"] == "processes"
        and geo["holes"]
        and not geo["ragged"]
        and (geo["step_rows"], geo["group_size"]) == (8, 4)
    )
    assert settings["split"].startswith("the driver's default") and settings["gradient_accumulation_steps"] == 2
    assert (result.law_split, result.law_unsplit, result.invariant) == ("1/step_tokens", "1/step_tokens", True)
    ratios = [p["weight_ratio"] for p in result.pieces if p["weight_ratio"] is not None]
    assert (
        len(result.pieces) == 16
        and np.allclose(ratios, 1.0, rtol=1e-5)
        and not [f for f in result.findings if f.severity != "note"]
    )
    np.testing.assert_allclose(plain["coefficients"][0, :2], (2 / 3 / np.sqrt(1 / 3)) / 9, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.frameworks
def test_0_10_takes_the_token_mean_of_each_micro_batch_so_the_split_changes_the_update():
    env = env_or_skip("openrlhf", OLDER)
    geo, result, plain = _step(env.python, "algo.advantage.estimator=group_norm")
    assert (result.law_split, result.law_unsplit, result.invariant) == ("1/micro_batch_tokens", "1/step_tokens", False)
    assert [f.property for f in result.findings] == ["split_invariance"]
    measured = _predicted_micro_batch_ratios(result, ga=2, dp=2)
    assert all(got == pytest.approx(want, rel=1e-5) for got, want in measured if got is not None)
    assert max(g for g, _ in measured if g) / min(g for g, _ in measured if g) > 2  # 0.7× … 1.75×
    # the per-G gradient probes (no request) still run: one micro-batch, its 9 tokens
    np.testing.assert_allclose(plain["coefficients"][0, :2], (2 / 3 / np.sqrt(1 / 3)) / 9, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.parametrize("release, invariant", [(RELEASE, True), (OLDER, False)])
def test_token_budget_micro_batches_follow_each_release_s_normalisation(release, invariant):
    env = env_or_skip("openrlhf", release)
    split = ("rollout.batch_size=4", "train.batch_size=8", "actor.num_gpus_per_node=2", "vllm.num_engines=1")
    dynamic = ("train.dynamic_batch_enable=true", "train.max_tokens_per_gpu=12")
    geo, result, _ = _step(env.python, "algo.advantage.estimator=group_norm", *split, *dynamic)
    assert geo["settings"]["gradient_accumulation_steps"] == 1 and geo["settings"]["split"].startswith("as set")
    assert result.invariant is invariant and len({p["micro_batch"] for p in result.pieces}) >= 2
    assert result.law_split == ("1/step_tokens" if invariant else "1/micro_batch_tokens")


@pytest.mark.slow
@pytest.mark.frameworks
def test_0_11_a_step_longer_than_a_generation_batch_is_normalised_per_generation_batch(release_env):
    # train.batch_size (16) > rollout rows (2 × 4): the engine's window spans two ppo_train calls,
    # each closing its part with iter_grad_accum_global_norm's trailing partial window
    sets = ("rollout.batch_size=2", "rollout.micro_batch_size=2", "train.batch_size=16", "train.micro_batch_size=2")
    geo, result, _ = _step(
        release_env.python, "algo.advantage.estimator=group_norm", *sets, "actor.num_gpus_per_node=2"
    )
    assert (geo["step_rows"], geo["generation_rows"]) == (16, 8)
    assert result.law_split == "1/generation_tokens" and result.invariant is False
    # unsplit, the step is one token mean over its 16 answers; split, each rank's micro-batches 0, 1 (the
    # first generation batch) and 2, 3 (the second) are each a token mean over their generation batch's part
    assert result.findings[0].property == "split_invariance" and "in optimizer step 0" in result.findings[0].message
    for step in {p["step"] for p in result.pieces}:
        mine = [p for p in result.pieces if p["step"] == step]
        part = {half: sum(p["tokens"] for p in mine if p["micro_batch"] // 2 == half) for half in (0, 1)}
        for p in mine:
            want = sum(part.values()) / part[p["micro_batch"] // 2]
            assert p["weight_ratio"] is None or p["weight_ratio"] == pytest.approx(want, rel=1e-5)


@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.parametrize(
    "sets, left_out",
    [  # 16 answers a generation batch, 8 a rank: DataLoader(drop_last) keeps 2 micro-batches of 3 answers
        (("rollout.micro_batch_size=2", "train.micro_batch_size=3", "train.batch_size=6"), 2 / 8),
        # setup_dynamic_batch: 16 // 12 = one step of 12 // 2 = 6 answers a rank
        (("vllm.num_engines=1", "train.dynamic_batch_enable=true", "train.batch_size=12"), 2 / 8),
    ],
    ids=["drop_last", "dynamic_remainder"],
)
def test_answers_the_split_leaves_out_come_back_with_step_minus_1_and_are_reported(release_env, sets, left_out):
    base = ("algo.advantage.estimator=group_norm", "rollout.batch_size=4", "actor.num_gpus_per_node=2")
    geo, result, _, out = _step(release_env.python, *base, *sets, layouts=True)
    split, n = out["split"], len(out["split"]["step"])
    never = split["step"] == -1
    assert never.sum() == n * left_out and not np.abs(split["coefficients"][never]).any()
    assert (split["rank"][never] == -1).all() and (split["micro_batch"][never] == -1).all()
    _same_steps_unsplit(out)  # the rows left out: a step of their own per generation batch, unsplit
    assert result.invariant is False and result.findings[0].property == "split_invariance"
    assert result.findings[0].counterexample["dropped"] > 0 and "out of the update" in result.findings[0].message
    assert all(p["weight_ratio"] is None or p["weight_ratio"] == pytest.approx(1, rel=1e-5) for p in result.pieces)


@pytest.mark.slow
@pytest.mark.frameworks
def test_splits_openrlhf_cannot_run_fail_at_load_and_ring_attention_leaves_the_step_out(release_env):
    def load(*sets):
        spec = FrameworkSpec("openrlhf", sets=(("algo.advantage.estimator", "group_norm"), *sets), level="gradient")
        with ChildTarget(spec, kind="gradient", python=release_env.python, warm=True, load_timeout=600) as fn:
            return fn.info

    ranks = ("actor.num_gpus_per_node", "2")
    with pytest.raises(TargetImportError, match=r"DeepSpeed refuses train.batch_size=6.*--set train.batch_size=8"):
        load(ranks, ("train.micro_batch_size", "2"), ("train.batch_size", "6"))
    with pytest.raises(TargetImportError, match=r"the ranks get \[8, 4\] micro-batches.*rollout.micro_batch_size=3"):
        load(ranks, ("rollout.batch_size", "3"), ("rollout.micro_batch_size", "4"), ("train.batch_size", "4"))
    info = load(ranks, ("ds.ring_attn_size", "2"), ("vllm.num_engines", "1"), ("train.batch_size", "8"))
    assert "step" not in info and "ring attention" in info["step_unavailable"]


@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.parametrize("plant, cause", [("ga_twice", "1/gradient_accumulation_steps applied twice (1/2 once more)")])
def test_a_factor_planted_in_both_layouts_fails_the_objective_while_split_invariance_stays_silent(
    release_env, plant, cause
):
    spec = FrameworkSpec("openrlhf", sets=(("algo.advantage.estimator", "group_norm"),), level="gradient")
    with ChildTarget(spec, kind="gradient", python=release_env.python, warm=True, timeout=300, load_timeout=600) as fn:
        geo = fn.info["step"]
        clean, bad = audit_step(fn, geo), audit_step(planted(fn, plant), geo)
    assert geo["objective"]["name"] == "token_mean" and clean.objective["factors"] == [1.0] * len(
        clean.objective["factors"]
    )
    assert bad.invariant is True and not [f for f in bad.findings if f.property == "split_invariance"]
    (found,) = [f for f in bad.findings if f.property == "step_scale"]
    assert found.severity == "fail" and found.counterexample["factor"] == pytest.approx(0.5, rel=1e-4)
    assert cause in found.message


@pytest.mark.slow
@pytest.mark.frameworks
def test_the_vllm_correction_is_read_from_the_policy_losss_gradient(release_env, capsys):
    """0.11.2's sequence-level mask: rₜ per token, the answer kept where the geometric mean is in [0.5, 5]; 1 on-policy;
    no rollout log-probabilities crash the loss (a TypeError), non-finite ones are masked to 0 without a word."""
    level, mode = "algo.advantage.is_correction_level=seq", "algo.advantage.is_correction_mode=mask"
    _, out = _audit(capsys, "algo.advantage.estimator=group_norm", level, mode, level="gradient")
    fit = out["inferred"]["three_policy"]
    assert (fit["estimator"], fit["documented"], fit["in_graph"]) == ("geometric_gate", "geometric_gate", False)
    assert fit["on_policy_weight_one"] and fit["identity_holds"] and fit["missing"] == "crashed"
    assert fit["non_finite"] == "finite" and set(fit["non_finite_weights"].values()) == {0.0}
    found = {f["property"]: f["severity"] for f in out["findings"]}
    assert (found["rollout_logps_missing"], found["rollout_logps_non_finite"]) == ("fail", "deviation")
    assert out["target_info"]["rollout_correction"]["setting"].endswith("seq+mask, [0.5, 5]")
