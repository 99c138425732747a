"""Advantage functions and filters as users write them (torch, float32, keyword-only, 2-D, group
ids, verl's signature), right and wrong: the targets of tests/checks/test_calling.py and of the
user-code audits in tests/checks/test_auditor.py and tests/app/test_audit.py."""

from __future__ import annotations

import numpy as np
import torch


def compute_grpo_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """An ML engineer's GRPO in torch: Bessel's std (torch's default) and ε 1e-6 (verl's convention)."""
    grouped = rewards.view(-1, group_size)
    mean = grouped.mean(dim=1, keepdim=True)
    std = grouped.std(dim=1, keepdim=True)
    return ((grouped - mean) / (std + eps)).view(-1)


def compute_grpo_advantages_batch_mean(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """The same, centred on the batch's mean instead of the group's (a bug)."""
    grouped = rewards.view(-1, group_size)
    return ((grouped - grouped.mean()) / (grouped.std(dim=1, keepdim=True) + eps)).view(-1)


def grpo_float32(rewards, G):
    """The paper's GRPO computed in float32, as trainers compute."""
    R = np.asarray(rewards).reshape(-1, G).astype(np.float32)
    live = np.ptp(R, 1, keepdims=True) > 0
    std = np.where(live, R.std(1, keepdims=True), np.float32(1))
    return np.where(live, (R - R.mean(1, keepdims=True)) / std, np.float32(0)).reshape(-1)


def dr_grpo_keyword_only(rewards, *, num_generations):
    """Dr. GRPO with the group size keyword-only."""
    R = rewards.reshape(-1, num_generations)
    return (R - R.mean(1, keepdims=True)).reshape(-1)


def dr_grpo_grid(rewards):
    """Dr. GRPO on a [n_prompts, G] grid, the same shape back."""
    return rewards - rewards.mean(1, keepdims=True)


def grpo_by_uid(rewards, uids, eps=1e-6):
    """GRPO grouped by uid: rows in any order, groups of any size, a lone answer gets 0."""
    out = np.zeros_like(rewards)
    for u in np.unique(uids):
        at = uids == u
        g = rewards[at]
        out[at] = 0.0 if np.ptp(g) == 0 else (g - g.mean()) / (g.std() + eps)
    return out


def grpo_blocks_of_the_first_group(rewards, group_ids, eps=1e-6):
    """Takes the first group's size as every group's and slices blocks (groups of unequal size
    break it; shuffled rows too)."""
    G = int((group_ids == group_ids[0]).sum())
    R = rewards.reshape(-1, G)
    live = np.ptp(R, 1, keepdims=True) > 0
    return np.where(live, (R - R.mean(1, keepdims=True)) / (R.std(1, keepdims=True) + eps), 0.0).reshape(-1)


def grpo_raw_reward_for_a_lone_answer(rewards, index):
    """By uid; a lone answer gets its raw reward (mean 0, std 1), as verl's estimators do."""
    out = np.zeros_like(rewards)
    for u in np.unique(index):
        at = index == u
        g = rewards[at]
        out[at] = g if g.size == 1 else (0.0 if np.ptp(g) == 0 else (g - g.mean()) / (g.std() + 1e-6))
    return out


def verl_like_estimator(token_level_rewards, response_mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=True):
    """verl's estimator signature: (n, T) token rewards, a response mask, a uid per row → (A, A)."""
    scores = token_level_rewards.sum(dim=-1)
    out = torch.zeros_like(scores)
    for u in set(index.tolist()):
        at = torch.as_tensor([i == u for i in index])
        g = scores[at]
        if g.numel() > 1:
            centred = g - g.mean()
            out[at] = centred / (g.std() + epsilon) if norm_adv_by_std_in_grpo else centred
    advantages = out.unsqueeze(-1) * response_mask
    return advantages, advantages


def grpo_returns_a_tuple(rewards, group_size):
    """Returns (advantages, statistics)."""
    R = rewards.reshape(-1, group_size)
    A = np.where(np.ptp(R, 1, keepdims=True) > 0, (R - R.mean(1, keepdims=True)) / (R.std(1, keepdims=True) + 1e-12), 0)
    return A.reshape(-1), {"std": R.std(1)}


def grpo_returns_a_dict(rewards, G):
    """Returns {"advantages": …, "mean": …}."""
    return {"advantages": grpo_returns_a_tuple(rewards, G)[0], "mean": rewards.mean()}


def needs_a_temperature(rewards, G, temperature):
    """A parameter the audit cannot fill without a template."""
    R = rewards.reshape(-1, G) / temperature
    return (R - R.mean(1, keepdims=True)).reshape(-1)


def takes_only_strings(rewards, G):
    """Refuses every input the audit can pass."""
    raise TypeError(f"expected a list of str, got {type(rewards).__name__}")


def keep_rows_of_informative_groups(rewards, G):
    """A row filter done right: every answer of a group with σ > 0."""
    R = np.asarray(rewards).reshape(-1, G)
    return np.repeat(np.ptp(R, 1) > 0, G)


def keep_rows_far_from_the_mean(rewards, G):
    """A row filter done per answer: keeps the answers whose reward is far from the group's mean —
    it drops the three wrong answers of a group [1, 0, 0, 0] and keeps the lone correct one."""
    R = np.asarray(rewards).reshape(-1, G)
    return (np.abs(R - R.mean(1, keepdims=True)) > 0.3).reshape(-1)


def keep_with_a_tolerance(rewards, G):
    """DAPO's rule with a tolerance: max − min > 1e-6."""
    R = np.asarray(rewards).reshape(-1, G)
    return (R.max(1) - R.min(1)) > 1e-6


def keep_in_float32(rewards, G):
    """DAPO's rule computed in float32: spreads below float32's resolution are one value to it."""
    return np.ptp(np.asarray(rewards).reshape(-1, G).astype(np.float32), 1) > 0


def grpo_on_lists(rewards: list, G: int) -> list:
    """Pure Python: lists in, lists out."""
    out = []
    for g in range(0, len(rewards), G):
        block = rewards[g : g + G]
        mean = sum(block) / G
        sd = (sum((x - mean) ** 2 for x in block) / G) ** 0.5
        out += [0.0 if sd == 0 else (x - mean) / sd for x in block]
    return out


def loops_with_a_bug(rewards, G):
    """A real bug, the same whatever it is given: range() of a float."""
    out = []
    for g in range(len(rewards) / G):
        out.append(g)
    return out


def torch_only_by_assert(rewards, G):
    """Checks its input with an assert, then uses torch's std (Bessel's)."""
    assert isinstance(rewards, torch.Tensor), "give me a tensor"
    r = rewards.reshape(-1, G)
    return ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-6)).reshape(-1)


def torch_by_group_ids(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Groups with torch.unique (ids must be a tensor)."""
    out = torch.zeros_like(rewards)
    for u in torch.unique(group_ids):
        at = group_ids == u
        g = rewards[at]
        if g.numel() > 1 and g.max() > g.min():
            out[at] = (g - g.mean()) / g.std(unbiased=False)
    return out


def keep_rows_as_float_mask(rewards, G):
    """A row filter returning a float 0/1 mask, as ``(std > 0).float()`` does in torch: flags all the same."""
    R = np.asarray(rewards).reshape(-1, G)
    return np.repeat(np.ptp(R, 1) > 0, G).astype(np.float32)


def keep_rows_returning_the_std(rewards, G):
    """A row filter that returns each group's σ where the flag σ > 0 was meant."""
    R = np.asarray(rewards).reshape(-1, G)
    return np.repeat(R.std(1), G)


def kept_row_indices(rewards, G):
    """A row filter returning the kept rows' indices (as SkyRL's zero_variance_filter does)."""
    R = np.asarray(rewards).reshape(-1, G)
    return [int(i) for g in range(R.shape[0]) if np.ptp(R[g]) > 0 for i in range(g * G, (g + 1) * G)]


def keep_with_a_relative_tolerance(rewards, G):
    """Drops groups whose max and min are close in relative terms (numpy's isclose, rtol 1e-3)."""
    R = np.asarray(rewards).reshape(-1, G)
    return ~np.isclose(R.max(1), R.min(1), rtol=1e-3, atol=0)


def needs_num_prompts(rewards, num_prompts):
    """A required second parameter that is not the group size."""
    return rewards.reshape(num_prompts, -1).reshape(-1)


def torch_rewards_numpy_index(rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """verl's way: torch rewards, a numpy array of group ids grouped in a dict (0-d tensors would each be a key)."""
    assert isinstance(rewards, torch.Tensor) and isinstance(index, np.ndarray), (type(rewards), type(index))
    rows: dict = {}
    for i, uid in enumerate(index):
        rows.setdefault(uid, []).append(i)
    out = torch.zeros_like(rewards)
    for at in rows.values():
        g = rewards[at]
        out[at] = (g - g.mean()) / (g.std(unbiased=False) + 1e-8)
    return out


def torch_rewards_list_index(rewards: torch.Tensor, index: list) -> torch.Tensor:
    assert isinstance(index, list), type(index)
    return torch_rewards_numpy_index(rewards, np.asarray(index))
