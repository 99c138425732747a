"""A per-token term folded into a token-level target's score (``checks.measure.shaping``): named with its size per
token; no point of the dial, no named variant and no length-weighted baseline is taken for one."""

from __future__ import annotations

import numpy as np
import pytest

from grpo_identity import dial as D
from grpo_identity.checks import audit
from grpo_identity.checks.measure.shaping import folded_score
from grpo_identity.variants import VARIANTS


def _by_uid(index):
    groups: dict = {}
    for i, u in enumerate(index):
        groups.setdefault(u, []).append(i)
    return list(groups.values())


def verl_grpo_with_a_length_penalty(token_level_rewards, response_mask, index):
    import torch

    scores = (token_level_rewards - 0.01 * response_mask).sum(-1)  # -0.01 per token summed into the score
    out = torch.zeros_like(scores)
    for rows in _by_uid(index):
        s = scores[rows]
        out[rows] = (s - s.mean()) / (s.std() + 1e-6) if len(rows) > 1 else 0.0
    return out[:, None] * response_mask, out[:, None] * response_mask


def test_a_length_penalty_summed_into_the_token_rewards_is_named_with_its_size():
    pytest.importorskip("torch")
    report = audit(verl_grpo_with_a_length_penalty, max_examples=20, isolate=False)
    first = report.findings[0]
    assert report.verdict == "fail" and first.property == "reward_folded", report.format()
    assert abs(first.counterexample["per_token"] + 0.01) < 1e-4 and "c = -0.01 per token" in first.message


@pytest.mark.parametrize("name", list(D.PRESETS))
def test_no_point_of_the_dial_is_taken_for_a_per_token_term(name):
    d = D.PRESETS[name]
    assert folded_score(lambda r, G: D.advantages(r, G, d), "float64") is None
    assert folded_score(lambda r, G: D.advantages(r, G, d).astype(np.float32), "float32") is None


@pytest.mark.parametrize("name", [n for n, v in VARIANTS.items() if v.uses_lengths])
def test_a_variant_that_weighs_by_tokens_is_no_per_token_term(name):
    from grpo_identity.checks.frameworks import lengths_by_reward

    v = VARIANTS[name]
    for form in v.forms:

        def target(r, G, form=form):
            L = lengths_by_reward(r).reshape(-1, G)
            return np.nan_to_num(v.advantages(r.reshape(-1, G), L, form)).reshape(-1)

        assert folded_score(target, "float64") is None, (name, form)
