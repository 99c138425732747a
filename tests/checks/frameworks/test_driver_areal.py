"""The AReaL driver (``checks.frameworks.areal``): its config steps (Hydra overrides, the driver's
YAML, the group size the audit owns, the probe lengths; no AReaL needed), then audits of AReaL
1.0.4 in its release environment (``releases.ensure``; AReaL never goes into the project's
environment).

What AReaL 1.0.4 computes (``areal/utils/data.py``, ``Normalization.__call__``; the actor calls it
on the rewards, ``reward_norm(reward_score)``, and on the token-level returns,
``adv_norm(advantages, loss_mask)``, in ``areal/trainer/ppo/actor.py``'s ``_compute_advantages``):

- group mean: ``_compute_mean`` over each slice ``x[i*G:(i+1)*G]`` for ``i in range(bs // G)``;
- std: ``_compute_std(x, mask, mean, unbiased=...)`` = ``sqrt(sum((x - mean)**2) / (n - 1))``
  (``std_unbiased`` defaults to True) around the mean already subtracted, so ``std_level=batch``
  under ``mean_level=group`` is the pooled within-group std, not the batch's std;
- ``x_centered / (std + eps)`` with ``eps`` 1e-5 (``NormConfig``), ``eps = 0`` when ``std_level``
  is None;
- a ``NormConfig`` given only ``mean_level`` keeps ``std_level="batch"`` (its default);
- rows past the last whole group keep ``mean = zeros_like(x)`` and ``std = zeros_like(x)``.

The optimizer step (``PPOActor._ppo_update`` on ``FSDPEngine.train_batch``, the model and the
optimizer stubbed, data-parallel ranks as processes): every token weighs 1/(tokens of its
optimizer step over all ranks), however the step is cut, so each micro-batch weighs 1× the same step
run as one micro-batch on one rank; a group short of G (an answer that came back ``None`` in
``GroupedRolloutWorkflow``) is cut in fixed blocks of G rows.  Split settings AReaL would refuse on the
audit's rows are refused when the target is built.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from _support import env_or_skip, planted

from grpo_identity.app.cli import main
from grpo_identity.checks.calls.child import ChildTarget
from grpo_identity.checks.frameworks import AdapterError, FrameworkSpec
from grpo_identity.checks.frameworks import areal as drv

pytestmark = pytest.mark.xdist_group("areal")

RELEASE = "1.0.4"
GRPO_SETS = ["--set", "actor.reward_norm.mean_level=group", "--set", "actor.reward_norm.std_level=group"]
#: AReaL clips every reward to ±``actor.reward_clip`` (default 20) before normalising it, and the search draws
#: continuous rewards up to a few hundred: tests of the normalisation put the clip out of reach
UNCLIPPED = ["--set", "actor.reward_clip=1000000"]
#: settings AReaL's loader (or the driver) refuses -> words of the one-line error
REJECTED = {
    "actor.adv_norm.mean_levle=group": "Key 'mean_levle' not in 'NormConfig'",
    "actor.adv_norm.mean_level=grup": "mean_level must be 'batch', 'group' or None",
    "actor.reward_norm.group_size=4": "the audit's group size G",
}


# --- the driver's own steps (no AReaL needed) ----------------------------------------------------
def test_each_set_is_a_hydra_override_that_may_add_the_key():
    assert drv._override("actor.adv_norm.mean_level", "group") == "++actor.adv_norm.mean_level=group"
    assert drv._override("+actor.kl_ctl", "0") == "+actor.kl_ctl=0"
    assert drv._override("~actor.adv_norm", "") == "~actor.adv_norm="
    assert drv._override("gconfig.n_samples", "8") == "++gconfig.n_samples=8"  # the step's G is the user's


@pytest.mark.parametrize("key", drv.GROUP_SIZE_KEYS)
def test_the_group_size_is_the_audits_and_cannot_be_set(key):
    with pytest.raises(AdapterError, match="the audit's group size G"):
        drv._override(key, "4")


def test_the_drivers_yaml_gives_arealss_mandatory_names_under_a_fresh_root(tmp_path):
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(drv.DRIVER_YAML.format(root=str(tmp_path)))
    assert cfg.actor.backend and cfg.rollout.backend and cfg.train_dataset.type == "rl"
    assert cfg.saver.fileroot == str(tmp_path) and cfg.actor.experiment_name == "grpo-identity"


def test_probe_responses_have_different_lengths_within_the_budget():
    L = drv.lengths_for(8)
    assert len(set(L.tolist())) > 1 and L.min() >= 1 and L.max() <= drv.RESPONSE_LENGTH


# --- AReaL 1.0.4 itself, in its release environment ----------------------------------------------
def _audit(capsys, *sets):
    """(exit code, JSON) of ``grpo-identity audit areal --release 1.0.4 *sets``: the advantages
    alone unless ``sets`` ask for the gradient."""
    env_or_skip("areal", RELEASE)
    level = [] if "--level" in sets else ["--level", "advantage"]
    code = main(["audit", "areal", "--release", RELEASE, *sets, *level, "--max-examples", "20", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["target_info"]["version"] == RELEASE and out["target_info"]["framework"] == "areal"
    return code, out


def _failed(out):
    return {f["property"] for f in out["findings"] if f["severity"] == "fail"}


def _by_design(out):
    """The properties a recognised variant gives up by design (deviations that say so)."""
    return {f["property"] for f in out["findings"] if f["severity"] == "deviation" and "by design" in f["message"]}


def _run_in_release(sets, rewards, G):
    """The driver's advantages, computed in the release environment's interpreter."""
    env = env_or_skip("areal", RELEASE)
    spec = FrameworkSpec("areal", sets=tuple(map(tuple, sets)))
    with ChildTarget(spec, python=env.python, warm=True, timeout=300, load_timeout=600) as fn:
        return np.asarray(fn(np.array(rewards, dtype=float), G), dtype=np.float64)


@pytest.mark.slow
@pytest.mark.frameworks
def test_group_mean_and_group_std_is_grpo_with_bessels_std_and_eps_1e_5(capsys):
    # NormConfig: std_unbiased=True, eps=1e-5; Normalization: x_centered / (std + eps)
    code, out = _audit(capsys, *GRPO_SETS, *UNCLIPPED)
    inf = out["inferred"]
    assert code == 0 and out["verdict"] == "deviation"
    assert (inf["centre"], inf["scale"], inf["ddof"], inf["eps_inside_sqrt"]) == ("mean", "group_std", 1, False)
    assert inf["eps"] == pytest.approx(1e-5, rel=0.05)
    assert any(f["property"] == "matches_preset" and "verl but eps 1e-05" in f["message"] for f in out["findings"])


@pytest.mark.slow
@pytest.mark.frameworks
def test_population_std_when_std_unbiased_is_false(capsys):
    # _compute_std: unbiased=False divides the sum of squares by n, not n - 1
    code, out = _audit(capsys, *GRPO_SETS, *UNCLIPPED, "--set", "actor.reward_norm.std_unbiased=false")
    assert code == 0 and out["inferred"]["ddof"] == 0 and out["inferred"]["scale"] == "group_std"
    assert out["inferred"]["eps"] == pytest.approx(1e-5, rel=0.05)


@pytest.mark.slow
@pytest.mark.frameworks
def test_group_mean_without_std_is_dr_grpo(capsys):
    # std_level None: std = ones_like(x), eps = 0.0
    sets = ["--set", "actor.reward_norm.mean_level=group", "--set", "actor.reward_norm.std_level=null"]
    code, out = _audit(capsys, *sets, *UNCLIPPED, "--expect", "dr_grpo")
    assert code == 0 and out["verdict"] == "pass" and out["matches"] == "dr_grpo" and out["inferred"]["scale"] == "none"


@pytest.mark.slow
@pytest.mark.frameworks
def test_leave_one_out_mean_is_rloo(capsys):
    # _compute_mean(leave_one_out=True): (sum - x) / (n - 1)
    code, out = _audit(
        capsys,
        "--set",
        "actor.reward_norm.mean_level=group",
        "--set",
        "actor.reward_norm.mean_leave1out=true",
        "--set",
        "actor.reward_norm.std_level=null",
        *UNCLIPPED,
    )
    assert code == 0 and out["matches"] == "rloo" and out["inferred"]["centre"] == "loo"


@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.parametrize(
    "std_sets",
    [["--set", "actor.reward_norm.std_level=batch"], []],
    ids=["std_level=batch", "std_level left at its default"],
)
def test_batch_std_couples_the_groups(std_sets, capsys):
    # std_level "batch" (also NormConfig's default when only mean_level is set): one std for the batch
    # no point of the dial (AReaL's batch std is the pooled std of the group-centred rewards): LitePPO as
    # AReaL reads it, named, its coupling a deviation by design
    code, out = _audit(capsys, "--set", "actor.reward_norm.mean_level=group", *std_sets)
    assert code == 0 and out["verdict"] == "deviation" and out["target_info"]["reward_norm"]["std_level"] == "batch"
    assert out["matches"] == "lite_ppo" and out["inferred"]["scale"] is None
    assert "groups_independent" in _by_design(out) and not _failed(out)


@pytest.mark.slow
@pytest.mark.frameworks
def test_adv_norm_weights_each_response_by_its_length(capsys):
    # adv_norm runs on the token-level returns with the loss mask: a token-weighted group mean
    code, out = _audit(capsys, "--set", "actor.adv_norm.mean_level=group", "--set", "actor.adv_norm.std_level=group")
    assert code == 0 and out["matches"] == "token_grpo" and "zero_sum_per_group" in _by_design(out)
    rewards, G = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0], 3
    got = _run_in_release([["actor.adv_norm.mean_level", "group"], ["actor.adv_norm.std_level", "group"]], rewards, G)
    R_, L = np.array(rewards).reshape(-1, G), drv.lengths_for(len(rewards)).reshape(-1, G).astype(float)
    m = (L * R_).sum(1, keepdims=True) / L.sum(1, keepdims=True)  # every response token counts once
    sd = np.sqrt((L * (R_ - m) ** 2).sum(1, keepdims=True) / (L.sum(1, keepdims=True) - 1))
    assert np.allclose(got, ((R_ - m) / (sd + 1e-5)).ravel(), atol=1e-5)


@pytest.mark.slow
@pytest.mark.frameworks
def test_batch_std_is_the_pooled_within_group_std_and_a_partial_group_is_divided_by_eps():
    rewards, G = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0], 4  # two whole groups, then [1, 0]
    batch = _run_in_release(
        [["actor.reward_norm.mean_level", "group"], ["actor.reward_norm.std_level", "batch"]], rewards[:8], G
    )
    R8 = np.array(rewards[:8]).reshape(-1, G)
    centred = R8 - R8.mean(1, keepdims=True)
    pooled = np.sqrt((centred**2).sum() / (R8.size - 1))  # around the group means, Bessel over the batch
    assert np.allclose(batch, (centred / (pooled + 1e-5)).ravel(), atol=1e-6)
    assert not np.allclose(batch, (centred / (np.std(R8, ddof=1) + 1e-5)).ravel(), atol=1e-3)  # not the batch's own
    grouped = _run_in_release(
        [["actor.reward_norm.mean_level", "group"], ["actor.reward_norm.std_level", "group"]], rewards, G
    )
    assert grouped[-2:] == pytest.approx([1.0 / 1e-5, 0.0], rel=1e-4)  # mean 0, std 0: reward / eps


@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.parametrize("setting, words", list(REJECTED.items()))
def test_a_config_arealss_loader_rejects_is_a_usage_error(setting, words, capsys):
    env_or_skip("areal", RELEASE)
    code = main(["audit", "areal", "--release", RELEASE, "--set", setting, "--max-examples", "5"])
    err = capsys.readouterr().err
    assert code == 2 and words in err and "Traceback" not in err


@pytest.mark.slow
@pytest.mark.frameworks
def test_the_ppo_loss_weights_every_token_by_one_over_the_batchs_tokens(capsys):
    # ppo_actor_loss_fn: torch.where(loss_mask, pg_loss, 0).sum() / loss_mask.count_nonzero(); the
    # engine scales each micro-batch's loss by its loss_mask.count_nonzero() over the total
    code, out = _audit(capsys, *GRPO_SETS, "--level", "gradient")
    assert out["inferred"]["per_sample_weight"] == "1/step_tokens"
    assert out["inferred"]["step"]["weight"] == "1/step_tokens" and out["inferred"]["step"]["invariant"]
    # the verdict: a group short of G (an answer that came back None) is normalised in fixed blocks of G
    failing = [f["property"] for f in out["findings"] if f["severity"] == "fail"]
    assert code == 1 and out["verdict"] == "fail" and "group_slicing" in failing


# --- the optimizer step (grpo_identity.checks.measure.steps) ----------------------------------------------
# PPOActor._ppo_update cuts a generation batch into ppo_n_minibatches mini-batches, one
# engine.train_batch (optimizer step) each, loss_weight_fn = loss_mask.count_nonzero();
# FSDPEngine.train_batch: total = compute_total_loss_weight (all-reduced over dp), each micro-batch's
# loss (grpo_loss_fn: sum / its own count_nonzero) times local_weight / total × dp_size, FSDP
# averages the gradient over dp: every token weighs 1/(tokens of the optimizer step, all ranks).
def _split(**kw):
    """A ``_Split`` of the default split (G=4, 6 prompts, 4 mini-batches of 2 micro-batches on 2 ranks), with ``kw``
    over it (``mb_spec`` fields by name)."""
    from types import SimpleNamespace

    spec = {"n_mbs": 2, "granularity": 1, "max_tokens_per_mb": None, "n_mbs_divisor": 1, "packing_algorithm": "ffd"}
    mb = SimpleNamespace(**{**spec, **{k: v for k, v in kw.items() if k in spec}})
    plan = {"group_size": 4, "batch_size": 6, "minibatches": 4, "mb_spec": mb, "backend": "fsdp:d2", "dp": 2}
    return drv._Split(**{**plan, **{k: v for k, v in kw.items() if k not in spec}})


@pytest.mark.parametrize(
    "setting, key",
    [
        ({"group_size": 0}, "gconfig.n_samples=0"),
        ({"batch_size": 0}, "train_dataset.batch_size=0"),
        ({"minibatches": 0}, "actor.ppo_n_minibatches=0"),
        ({"n_mbs": -1}, "actor.mb_spec.n_mbs=-1"),
        ({"granularity": 0}, "actor.mb_spec.granularity=0"),
        ({"max_tokens_per_mb": 0}, "actor.mb_spec.max_tokens_per_mb=0"),
        ({"n_mbs_divisor": 0}, "actor.mb_spec.n_mbs_divisor=0"),
    ],
)
def test_a_split_count_below_one_is_refused_by_name(setting, key):
    assert drv._invalid(_split()) is None
    assert f"{key}: the split settings count" in drv._invalid(_split(**setting))


def test_a_token_budget_below_the_longest_sequence_is_refused_with_the_smallest_that_works():
    longest = drv.PROMPT_LENGTH + drv.RESPONSE_LENGTH
    assert drv._invalid(_split(max_tokens_per_mb=longest)) is None
    refused = drv._invalid(_split(max_tokens_per_mb=longest - 1))
    assert f"actor.mb_spec.max_tokens_per_mb={longest - 1}" in refused
    assert refused.endswith(f"the smallest value that works is {longest}")
    # split_padded_tensor_dict_into_mb_list packs granularity adjacent sequences as one
    assert drv._invalid(_split(max_tokens_per_mb=2 * longest - 1, granularity=2)).endswith(f"is {2 * longest}")


def test_a_batch_the_ranks_or_the_micro_batches_cannot_divide_is_refused_by_name():
    assert drv._splits(_split()) is None and drv._splits(_split(), short=1) is None  # the default takes a short group
    assert "train_dataset.batch_size=5 is not a multiple of the dp=2 ranks" in drv._splits(_split(batch_size=5))
    assert "actor.mb_spec.granularity=5 does not divide the 12 answers" in drv._splits(_split(granularity=5))
    assert "actor.ppo_n_minibatches=4 mini-batches of 4 micro-batches" in drv._splits(_split(n_mbs=4))
    # ffd_allocate and kk_allocate round the micro-batch count up to a multiple of n_mbs_divisor
    assert drv._splits(_split(n_mbs=3)) is None
    assert "of 4 micro-batches" in drv._splits(_split(n_mbs=3, n_mbs_divisor=2))
    assert "of 4 micro-batches" in drv._splits(_split(n_mbs=3, n_mbs_divisor=2, packing_algorithm="kk"))
    assert drv._splits(_split(batch_size=4)) is None  # 8 answers per rank: 4 mini-batches × 2 fit exactly …
    assert "7 answers per rank" in drv._splits(_split(batch_size=4), short=1)  # … but not one answer short


def test_a_row_no_optimizer_step_held_is_step_minus_one_with_zero_coefficients():
    torch = pytest.importorskip("torch")
    record = drv._StepRecord(3)
    grad = torch.ones(3, drv.PROMPT_LENGTH + drv.RESPONSE_LENGTH)
    record.read_steps([type("Engine", (), {"steps": [(grad, [[2], [0]])]})()], [7])
    out = record.result()
    assert out["step"].tolist() == [7, -1, 7] and out["micro_batch"].tolist() == [1, -1, 0]
    assert np.all(out["coefficients"][1] == 0) and np.all(out["coefficients"][[0, 2]] == -1)
    # the unsplit layout runs the split's steps (rows in rank order) and what the split left out as a step more
    assert record.steps_of([0, 1, 2], extra=9) == [(7, [2, 0]), (9, [1])]


def _step(sets, requests=lambda geo: ()):
    """The step geometry, ``audit_step``'s result and the target's answer to each of ``requests(geo)``, run in
    the release environment (the audit there, as the auditor runs it, against the child's target)."""
    from grpo_identity.checks.measure.steps import audit_step

    env = env_or_skip("areal", RELEASE)
    spec = FrameworkSpec("areal", sets=tuple(s.split("=", 1) for s in sets))
    with ChildTarget(spec, kind="gradient", python=env.python, warm=True, timeout=300, load_timeout=600) as fn:
        geo = fn.info["step"]
        result, answers = audit_step(fn, geo), [fn(*request) for request in requests(geo)]
        return {**geo, "chosen": fn.info["driver_settings"]["defaults"]}, result, answers


def _designed(*layouts):
    """``requests`` for :func:`_step`: the step audit's own rows (``steps.design``) in each of ``layouts``."""
    from grpo_identity.checks.measure.steps import design

    def requests(geo):
        d = design(geo, drv.RESPONSE_LENGTH)
        return [(d.rewards, geo["group_size"], d.lengths, d.request(layout)) for layout in layouts]

    return requests


def _pieces_per_step(result):
    steps = {}
    for p in result.pieces:
        steps.setdefault(p["step"], []).append(p)
    return steps


GRPO = ["actor.reward_norm.mean_level=group", "actor.reward_norm.std_level=group"]


@pytest.mark.slow
@pytest.mark.frameworks
def test_the_default_split_accumulates_micro_batches_on_two_ranks_and_keeps_one_over_the_steps_tokens():
    from grpo_identity.checks.measure.steps import design

    geo, result, (out,) = _step(GRPO, _designed("split"))
    assert geo["ranks"] == "processes" and geo["holes"] and geo["ragged"]
    assert {("actor.mb_spec.n_mbs", 2), ("actor.backend", "fsdp:d2")} <= set(geo["chosen"].items())
    assert (result.law_split, result.law_unsplit, result.invariant) == ("1/step_tokens", "1/step_tokens", True)
    assert not {f.property for f in result.findings} & {"split_invariance", "masked_normaliser"}  # holes not counted
    per_step = _pieces_per_step(result)
    assert all(len({(p["rank"], p["micro_batch"]) for p in ps}) >= 2 for ps in per_step.values())
    assert any(len({p["tokens"] for p in ps}) > 1 for ps in per_step.values())  # unequal micro-batches
    ratios = [p["weight_ratio"] for p in result.pieces if p["weight_ratio"] is not None]
    assert ratios and max(abs(r - 1) for r in ratios) < 1e-4  # every micro-batch 1× the same step unsplit
    d = design(geo, drv.RESPONSE_LENGTH)
    assert len(set(out["step"][:4].tolist())) > 1  # a group's answers are spread over optimizer steps
    holes = np.flatnonzero(d.holes)
    assert holes.size and np.all(out["mask"][holes, 1] == 0) and np.all(out["coefficients"][holes, 1] == 0)


@pytest.mark.slow
@pytest.mark.frameworks
def test_the_unsplit_layout_runs_the_split_steps_each_as_one_micro_batch_on_one_rank():
    # the same answers per optimizer step (all ranks' k-th mini-batch of PPOActor._ppo_update), one
    # ppo_update of one micro-batch on one rank each: the same update, as 1/step_tokens says
    _, _, (split, unsplit) = _step(GRPO, _designed("split", "unsplit"))
    assert np.array_equal(unsplit["step"], split["step"]) and split["step"].max() >= 3
    assert set(split["rank"].tolist()) == {0, 1} and set(split["micro_batch"].tolist()) == {0, 1}
    assert set(unsplit["rank"].tolist()) == {0} and set(unsplit["micro_batch"].tolist()) == {0}
    assert np.allclose(unsplit["coefficients"], split["coefficients"], atol=1e-6)


@pytest.mark.slow
@pytest.mark.frameworks
def test_the_users_split_by_token_budget_on_four_ranks_keeps_one_over_the_steps_tokens():
    sets = [
        *GRPO,
        "gconfig.n_samples=3",
        "train_dataset.batch_size=8",
        "actor.ppo_n_minibatches=2",
        "actor.mb_spec.max_tokens_per_mb=16",
        "actor.backend=fsdp:d4",
    ]
    geo, result, _ = _step(sets)
    s = geo["settings"]
    assert (geo["group_size"], geo["generation_rows"], geo["step_rows"], geo["ranks"]) == (3, 24, 12, "processes")
    assert (s["actor.mb_spec.max_tokens_per_mb"], s["data_parallel_ranks"], geo["chosen"]) == (16, 4, {})
    assert (result.law_split, result.law_unsplit, result.invariant) == ("1/step_tokens", "1/step_tokens", True)
    assert all(len(ps) >= 4 for ps in _pieces_per_step(result).values())  # 4 ranks, budget-cut micro-batches


@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.parametrize(
    "setting, words",
    [
        ("actor.ppo_n_minibatches=0", "actor.ppo_n_minibatches=0: the split settings count"),
        ("actor.mb_spec.max_tokens_per_mb=7", "the smallest value that works is 8"),
        ("actor.mb_spec.n_mbs_divisor=0", "actor.mb_spec.n_mbs_divisor=0: the split settings count"),
        ("train_dataset.batch_size=3", "train_dataset.batch_size=3 is not a multiple of the dp=2 ranks"),
    ],
)
def test_a_split_areal_would_refuse_is_refused_when_the_target_is_built(setting, words):
    from grpo_identity.checks.calls.target import TargetImportError

    sets = [setting] if setting.startswith("actor.") else [setting, "actor.backend=fsdp:d2"]
    with pytest.raises(TargetImportError, match="AReaL 1.0.4: ") as caught:
        _step([*GRPO, *sets])
    assert words in str(caught.value)


@pytest.mark.slow
@pytest.mark.frameworks
def test_a_batch_level_std_is_all_reduced_over_the_rank_processes():
    # Normalization._compute_std(all_reduce=True): the ranks' sums of squares and counts, summed
    sets = ["actor.reward_norm.mean_level=group", "actor.reward_norm.std_level=batch"]
    _, _, (split, unsplit) = _step(sets, _designed("split", "unsplit"))
    assert set(split["rank"].tolist()) == {0, 1}
    assert np.allclose(split["advantages"], unsplit["advantages"], atol=1e-6)


@pytest.mark.slow
@pytest.mark.frameworks
def test_a_short_group_is_cut_in_fixed_blocks_of_g_rows_after_the_dispatch_sorts_groups_by_tokens():
    # GroupedRolloutWorkflow keeps the answers that did not come back None; _dispatch_tensors orders a
    # rank's groups by tokens (heaviest first); Normalization cuts blocks x[i*G:(i+1)*G] and leaves a
    # last partial block with mean 0 and std 0: reward / eps.  One generation batch of the default's
    # 6 prompts, group 1 an answer short.
    G = 4
    r = np.array([0, 0, 1, 0, 0, 0, 1, 1, 1, 1, 0, 1, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 1], dtype=float)
    light = np.array([2, 3, 2, 3, 2, 2, 2, 2] + [5, 4] * 8)  # the short group has the fewest tokens
    heavy = light.copy()
    heavy[4:8] = 6  # the short group outweighs group 0
    keep = np.arange(24) != 5

    def calls(L):
        whole = (r, G, L, {"layout": "unsplit", "sizes": [4] * 6, "holes": [0] * 24})
        short = (r[keep], G, L[keep], {"layout": "unsplit", "sizes": [4, 3, 4, 4, 4, 4], "holes": [0] * 23})
        return whole, short

    geo, _, (whole, short, whole_h, short_h) = _step(GRPO, lambda geo: [*calls(light), *calls(heavy)])
    assert geo["generation_rows"] == 24
    others = np.r_[0:4, 7:23]
    A, S = whole["advantages"][keep], short["advantages"]
    assert np.allclose(A[others], S[others], atol=1e-5)  # the short group sorts last
    assert S[5] == pytest.approx(1e5, rel=1e-3) and S[4] == 0.0  # its own block is partial: reward / eps
    A, S = whole_h["advantages"][keep], short_h["advantages"]
    assert not np.allclose(A[0:4], S[0:4], atol=1e-3)  # group 0 now straddles two blocks


@pytest.mark.slow
def test_a_normaliser_over_the_generation_batch_planted_in_both_layouts_fails_the_objective_only():
    """AReaL's steps are its global token mean exactly; the same steps with every token divided by its generation
    batch's tokens (in both layouts) keep split invariance and fail step_scale, the cause named."""
    from grpo_identity.checks.measure.steps import audit_step

    env = env_or_skip("areal", RELEASE)
    spec = FrameworkSpec("areal", sets=(("actor.ppo_n_minibatches", "2"),))
    with ChildTarget(spec, kind="gradient", python=env.python, warm=True, timeout=300, load_timeout=600) as fn:
        geo = fn.info["step"]
        clean, bad = audit_step(fn, geo), audit_step(planted(fn, "generation"), geo)
    assert geo["objective"]["name"] == "token_mean" and geo["objective"]["alternative"] == "seq_mean_token_sum"
    assert not [f for f in clean.findings if f.property in ("step_scale", "step_weights")]
    assert all(x == pytest.approx(1.0, rel=1e-4) for x in clean.objective["factors"])
    assert bad.invariant == clean.invariant and not [f for f in bad.findings if f.property == "split_invariance"]
    (found,) = [f for f in bad.findings if f.property == "step_scale"]
    assert found.severity == "fail" and 0.3 < found.counterexample["factor"] < 0.7
    assert found.counterexample["causes"] == [
        "a normaliser over the whole generation batch (generation_tokens), not the optimizer step's"
    ]


@pytest.mark.slow
@pytest.mark.frameworks
def test_the_decoupled_losss_rejection_sampling_is_read_from_its_gradient(capsys):
    """1.0.4's actor.rejection_sampling, clamped at 2: min(r, 2) per token beside the recomputed π_old, 1 on-policy;
    non-finite log-ratios are taken as 0 (weight 1) without a word; a batch without logprobs crashes (KeyError)."""
    rs = "actor.rejection_sampling."
    group = ("--set", "actor.reward_norm.mean_level=group", "--set", "actor.reward_norm.std_level=group")
    _, out = _audit(capsys, *group, "--set", "actor.use_decoupled_loss=true", "--set", rs + "action=clamp", "--set",
                    rs + "upper=2.0", "--level", "gradient")  # fmt: skip
    fit = out["inferred"]["three_policy"]
    assert (fit["estimator"], fit["documented"], fit["in_graph"]) == ("token_truncate", "token_truncate", False)
    assert fit["on_policy_weight_one"] and fit["identity_holds"] and fit["missing"] == "crashed"
    assert fit["non_finite_weights"] == {"log mu = -inf": 1.0, "log mu = NaN": 1.0, "r = e^90": 2.0}
    found = {f["property"]: f["severity"] for f in out["findings"]}
    assert (found["rollout_logps_missing"], found["rollout_logps_non_finite"]) == ("fail", "deviation")
    # asynchronous groups: a short group is cut into fixed strides of G (areal #1419), mixed versions by design
    cases = out["inferred"]["async_groups"]["cases"]
    assert cases["short"]["problems"] == cases["split"]["problems"] == ["group_baseline_foreign"]
    assert (found["group_baseline_foreign"], found["group_mixed_versions"]) == ("fail", "deviation")
    assert cases["none"]["outcome"] == cases["empty"]["outcome"] == "unsupported"
