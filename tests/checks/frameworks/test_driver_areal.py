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
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from _support import env_or_skip

from grpo_identity.app.cli import main
from grpo_identity.checks.child import ChildTarget
from grpo_identity.checks.frameworks import AdapterError, FrameworkSpec
from grpo_identity.checks.frameworks import areal as drv

pytestmark = pytest.mark.xdist_group("areal")

RELEASE = "1.0.4"
GRPO_SETS = ["--set", "actor.reward_norm.mean_level=group", "--set", "actor.reward_norm.std_level=group"]
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
    code, out = _audit(capsys, *GRPO_SETS)
    inf = out["inferred"]
    assert code == 0 and out["verdict"] == "deviation"
    assert (inf["centre"], inf["scale"], inf["ddof"], inf["eps_inside_sqrt"]) == ("mean", "group_std", 1, False)
    assert inf["eps"] == pytest.approx(1e-5, rel=0.05)
    assert any(f["property"] == "matches_preset" and "verl but eps 1e-05" in f["message"] for f in out["findings"])


@pytest.mark.slow
@pytest.mark.frameworks
def test_population_std_when_std_unbiased_is_false(capsys):
    # _compute_std: unbiased=False divides the sum of squares by n, not n - 1
    code, out = _audit(capsys, *GRPO_SETS, "--set", "actor.reward_norm.std_unbiased=false")
    assert code == 0 and out["inferred"]["ddof"] == 0 and out["inferred"]["scale"] == "group_std"
    assert out["inferred"]["eps"] == pytest.approx(1e-5, rel=0.05)


@pytest.mark.slow
@pytest.mark.frameworks
def test_group_mean_without_std_is_dr_grpo(capsys):
    # std_level None: std = ones_like(x), eps = 0.0
    sets = ["--set", "actor.reward_norm.mean_level=group", "--set", "actor.reward_norm.std_level=null"]
    code, out = _audit(capsys, *sets, "--expect", "dr_grpo")
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
    code, out = _audit(capsys, "--set", "actor.reward_norm.mean_level=group", *std_sets)
    assert code == 1 and out["verdict"] == "fail" and out["target_info"]["reward_norm"]["std_level"] == "batch"
    assert "groups_independent" in _failed(out) and out["inferred"]["scale"] is None


@pytest.mark.slow
@pytest.mark.frameworks
def test_adv_norm_weights_each_response_by_its_length(capsys):
    # adv_norm runs on the token-level returns with the loss mask: a token-weighted group mean
    code, out = _audit(capsys, "--set", "actor.adv_norm.mean_level=group", "--set", "actor.adv_norm.std_level=group")
    assert code == 1 and "zero_sum_per_group" in _failed(out)
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
    assert code == 0 and out["verdict"] == "deviation" and out["inferred"]["per_sample_weight"] == "1/batch_tokens"
