"""The step objectives (``grpo_identity.objectives``): each weight wᵢ against the gradient of the loss written
the way its source writes it, differentiated by torch; the framework settings that name them."""

from __future__ import annotations

import numpy as np
import pytest

from grpo_identity.objectives import LOSS_SETTINGS, OBJECTIVES, objective_of, step_weights

torch = pytest.importorskip("torch", reason="torch differentiates the reference losses")

#: two optimizer steps; step 0 in two micro-batches, step 1 in one; three groups of two answers
STEP = np.array([0, 0, 0, 0, 1, 1])
MICRO = np.array([0, 0, 1, 1, 2, 2])
GROUP = np.array([0, 0, 1, 1, 2, 2])
TOKENS = np.array([2, 5, 3, 1, 4, 6])
L = 6  # the length budget


def _loss(name: str, logp, A, mask):
    """One step's loss as its source writes it (rows of one optimizer step)."""
    per_token = -A[:, None] * logp * mask  # ℓᵢₜ = −Âᵢ·log π (on-policy: ρ = 1)
    lengths = mask.sum(1)
    if name == "token_mean":  # DAPO: Σᵢ Σₜ ℓ / Σᵢ |oᵢ|
        return per_token.sum() / mask.sum()
    if name == "seq_mean_token_mean":  # GRPO: (1/N) Σᵢ (1/|oᵢ|) Σₜ ℓ
        return (per_token.sum(1) / lengths).mean()
    if name == "seq_mean_token_sum":  # (1/N) Σᵢ Σₜ ℓ
        return per_token.sum(1).mean()
    if name == "seq_mean_token_sum_norm":  # Dr. GRPO: Σᵢ Σₜ ℓ / (N·L)
        return per_token.sum() / (per_token.shape[0] * L)
    if name == "token_sum":
        return per_token.sum()
    raise KeyError(name)


def _micro_loss(name: str, logp, A, mask, micro, group):
    """The objectives defined piecewise: each micro-batch's (group's) token mean, averaged."""
    keys = {"local_token_mean": micro, "group_token_mean": group}[name]
    pieces = [torch.as_tensor(keys == k) for k in np.unique(keys)]
    return sum(_loss("token_mean", logp[p], A[p], mask[p]) for p in pieces) / len(pieces)


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_each_objectives_weight_is_the_gradient_of_its_loss(name):
    rng = np.random.default_rng(0)
    A = torch.tensor(rng.normal(size=TOKENS.size))
    mask = torch.tensor((np.arange(L)[None, :] < TOKENS[:, None]).astype(float))
    coefficients = np.zeros((TOKENS.size, L))
    for s in np.unique(STEP):
        rows = STEP == s
        logp = torch.zeros(int(rows.sum()), L, dtype=torch.float64, requires_grad=True)
        args = (logp, A[torch.as_tensor(rows)], mask[torch.as_tensor(rows)])
        if OBJECTIVES[name].scope in ("micro_batch", "group"):
            loss = _micro_loss(name, *args, MICRO[rows], GROUP[rows])
        else:
            loss = _loss(name, *args)
        (grad,) = torch.autograd.grad(loss, logp)
        coefficients[rows] = -grad.numpy()  # −∂loss/∂log π
    w = step_weights(name, STEP, MICRO, TOKENS, L, group=GROUP)
    expected = (A.numpy() * w)[:, None] * mask.numpy()
    np.testing.assert_allclose(coefficients, expected, rtol=1e-12, atol=1e-15)


def test_a_group_objective_without_groups_is_refused():
    with pytest.raises(ValueError, match="needs each row's group"):
        step_weights("group_token_mean", STEP, MICRO, TOKENS, L)


def test_the_framework_settings_the_drivers_read_are_written_down_with_their_words():
    assert objective_of("trl", "loss_type", "dapo").objective == "token_mean"
    assert objective_of("trl", "loss_type", "dr_grpo").objective == "seq_mean_token_sum_norm"
    assert objective_of("verl", "actor.loss_agg_mode", "seq-mean-token-mean").objective == "seq_mean_token_mean"
    assert objective_of("trl", "loss_type", "no_such_loss") is None
    for setting in LOSS_SETTINGS.values():
        assert setting.documented and setting.objective in OBJECTIVES
        step = setting.for_step(8)
        assert step["name"] == setting.objective and step["setting"] == f"{setting.setting}={setting.value}"
