"""The verl hook on DataProto batches built as verl's trainer builds them: one uid per prompt
(strings, rows interleaved by ``repeat``), per-token rewards on the last response token,
advantages from verl's own ``compute_grpo_outcome_advantage``; metrics against hand-computed values."""

from __future__ import annotations

import logging
import math
import uuid

import numpy as np
import pytest

from grpo_identity import dial as D
from grpo_identity.integrations.verl import IdentityHook, read_dataproto

pytestmark = pytest.mark.frameworks
torch = pytest.importorskip("torch")
protocol = pytest.importorskip("verl.protocol", reason="verl is not installed (make frameworks)")
core_algos = pytest.importorskip("verl.trainer.ppo.core_algos", reason="verl is not installed (make frameworks)")

G, T = 4, 3


def verl_batch(
    rewards_by_prompt: list[list[float]],
    *,
    norm_by_std: bool = True,
    index: list[int] | None = None,
    order: np.ndarray | None = None,
):
    """A DataProto as RayPPOTrainer has it after ``compute_advantage`` (GRPO)."""
    n = len(rewards_by_prompt) * G
    ids = [str(uuid.uuid4()) for _ in rewards_by_prompt]  # a fresh uid per prompt and step, as RayPPOTrainer.fit does
    uid = np.array([ids[i // G] for i in range(n)], dtype=object)
    rewards = torch.tensor([r for row in rewards_by_prompt for r in row], dtype=torch.float32)
    token_rewards = torch.zeros(n, T)  # (bs, T): the outcome reward sits on the last response token
    token_rewards[:, -1] = rewards
    mask = torch.ones(n, T)
    mask[::2, -1] = 0  # ragged responses: every other one is a token shorter
    token_rewards[::2, -2], token_rewards[::2, -1] = token_rewards[::2, -1], 0.0
    order = np.arange(n) if order is None else order
    data = {"token_level_rewards": token_rewards[order], "response_mask": mask[order], "uid": uid[order]}
    if index is not None:
        data["index"] = np.array([index[i // G] for i in range(n)], dtype=object)[order]
    batch = protocol.DataProto.from_single_dict(data)
    adv, ret = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=batch.batch["token_level_rewards"],
        response_mask=batch.batch["response_mask"],
        index=batch.non_tensor_batch["uid"],
        norm_adv_by_std_in_grpo=norm_by_std,
    )
    batch.batch["advantages"], batch.batch["returns"] = adv, ret
    return batch


def phi4(p: float) -> float:
    """φ(4, p) by hand: E[g] = (1/4) Σ_{k=1}^{3} C(4,k) p^k (1−p)^{4−k} √(k(4−k)), over √(p(1−p))."""
    eg = sum(math.comb(4, k) * p**k * (1 - p) ** (4 - k) * math.sqrt(k * (4 - k)) for k in (1, 2, 3)) / 4
    return eg / math.sqrt(p * (1 - p))


def test_the_hook_reads_rewards_and_advantages_group_by_group_whatever_the_row_order():
    order = np.array([4, 0, 5, 1, 6, 2, 7, 3])  # interleaved as repeat(interleave=False) would lay them out
    batch = verl_batch([[1, 0, 0, 0], [1, 1, 1, 1]], order=order)
    rewards, adv, g, keys = read_dataproto(batch)
    uid = batch.non_tensor_batch["uid"]
    assert g == G and keys == [uid[0], uid[1]] and uid[0] != uid[1]  # groups in order of first appearance
    assert rewards.tolist() == [1, 1, 1, 1, 1, 0, 0, 0]
    assert adv[:4].tolist() == [0, 0, 0, 0] and adv[4] > 0 > adv[5]


def test_the_hook_metrics_equal_hand_computed_values_on_a_verl_batch():
    m = IdentityHook(D.VERL, eps=0.1)(verl_batch([[1, 0, 0, 0], [1, 1, 1, 1]]))
    # one group of two silent
    assert m["identity/silent_frac"] == 0.5
    # before the step the tracker knows nothing: p̂ = batch mean 5/8 for both prompts
    assert m["identity/silent_frac_pred"] == pytest.approx(0.625**4 + 0.375**4, rel=1e-12)
    # verl's own dial: coefficient (k/G)·Â₊ = 0.25 · 0.75/(0.5 + 1e-6) in float32
    assert m["identity/coef_dev_max"] < 1e-6 and m["identity/departures"] == 0
    # after the step: p̂ = (1 + 8·5/8)/(4 + 8) = 0.5 (medium), (4 + 5)/12 = 0.75 (intermediate)
    assert m["identity/mass_share_medium"] == 1.0 and m["identity/mass_share_extreme"] == 0.0
    assert m["identity/fidelity/medium"] == pytest.approx(phi4(0.5), rel=1e-9)
    assert m["identity/fidelity/intermediate"] == pytest.approx(phi4(0.75), rel=1e-9)
    assert "identity/fidelity/extreme" not in m


def test_against_the_papers_grpo_the_hook_measures_bessels_factor():
    m = IdentityHook(D.GRPO)(verl_batch([[1, 0, 0, 0], [1, 1, 0, 0]]))
    # verl: c = (k/G)(1 − k/G)/(σ·√(G/(G−1)) + 1e-6); the paper's GRPO: c = σ
    want = []
    for k in (1, 2):
        s = math.sqrt(k * (G - k)) / G
        want.append(abs((k / G) * (1 - k / G) / (s * math.sqrt(G / (G - 1)) + 1e-6) - s))
    assert m["identity/coef_dev_max"] == pytest.approx(max(want), rel=1e-5)
    assert m["identity/coef_dev_mean"] == pytest.approx(sum(want) / 2, rel=1e-5)
    assert m["identity/departures"] == 2


def test_a_prompt_is_tracked_across_steps_by_its_dataset_index():
    hook = IdentityHook(D.VERL, prior_rollouts=4)
    hook(verl_batch([[1, 1, 1, 1], [0, 0, 0, 0]], index=[7, 8]))
    # a new uid, the same dataset index: p̂ before the step = (4 + 4·0.5)/(4 + 4) = 0.75, 0.5 the mean seen so far
    m = hook(verl_batch([[1, 0, 1, 0]], index=[7]))
    assert m["identity/silent_frac_pred"] == pytest.approx(0.75**4 + 0.25**4, rel=1e-12)


def test_norm_adv_by_std_false_is_dr_grpo_and_the_live_audit_warns_once_under_the_wrong_dial(caplog):
    batch = verl_batch([[1, 0, 0, 0]], norm_by_std=False)
    assert IdentityHook(D.DR_GRPO)(batch)["identity/coef_dev_max"] < 1e-7
    hook = IdentityHook(D.VERL)
    with caplog.at_level(logging.WARNING, logger="grpo_identity"):
        hook(batch)
        hook(batch)
    assert [r.message.count("leave the identity") for r in caplog.records] == [1]


def test_the_wrapped_compute_data_metrics_keeps_verls_metrics_and_adds_the_identitys():
    wrapped = IdentityHook().wrap(lambda batch, use_critic=True: {"critic/score/mean": 0.25})
    m = wrapped(batch=verl_batch([[1, 0, 0, 0]]), use_critic=False)  # as RayPPOTrainer.fit calls it
    assert m["critic/score/mean"] == 0.25 and m["identity/silent_frac"] == 0.0


def test_unequal_groups_are_a_one_line_error():
    batch = verl_batch([[1, 0, 0, 0], [1, 1, 0, 0]])
    batch.non_tensor_batch["uid"][0] = batch.non_tensor_batch["uid"][G]
    with pytest.raises(ValueError, match="same number of responses"):
        read_dataproto(batch)
