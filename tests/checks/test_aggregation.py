"""How several reward components are combined (``checks.measure.aggregation``): summing first is told from
normalising each first by two invariances, whatever the normalisation and the weights; a rule that
is neither is named as such."""

from __future__ import annotations

import numpy as np
import pytest

from grpo_identity import dial as D
from grpo_identity.checks.measure.aggregation import audit_aggregation, components_batch


def sum_then_normalize(w, dial=D.TRL):
    return lambda C, G: D.advantages(C @ np.asarray(w), G, dial)


def normalize_then_sum(w, batch=True):
    def target(C, G):
        z = sum(wk * D.advantages(C[:, k], G, D.TRL) for k, wk in enumerate(w))
        return (z - z.mean()) / (z.std(ddof=1) + 1e-4) if batch else z

    return target


@pytest.mark.parametrize("w", [(1.0, 1.0), (1.0, 0.2), (2.0, -0.5)])
@pytest.mark.parametrize("dial", [D.TRL, D.DR_GRPO, D.GRPO])
def test_a_sum_of_the_weighted_components_is_seen_as_summed_then_normalised(w, dial):
    out = audit_aggregation(sum_then_normalize(w, dial), w)
    assert out["rule"] == "sum_then_normalize" and out["moved_reward_changes"] < 1e-9
    assert (
        out["findings"][0].property == "reward_aggregation" and "G9 on the summed reward" in out["findings"][0].message
    )


@pytest.mark.parametrize("w", [(1.0, 1.0), (1.0, 0.2)])
@pytest.mark.parametrize("batch", [True, False])
def test_components_normalised_in_their_groups_then_summed_are_seen_as_such(w, batch):
    out = audit_aggregation(normalize_then_sum(w, batch), w)
    assert out["rule"] == "normalize_then_sum" and out["moved_reward_changes"] > 0.1
    assert "drops out" in out["findings"][0].message


def test_a_combination_that_is_neither_is_named_other():
    def max_of_components(C, G):
        return D.advantages(C.max(axis=1), G, D.TRL)

    assert audit_aggregation(max_of_components, (1.0, 1.0))["rule"] == "other"


def test_the_probe_holds_groups_where_one_two_or_no_component_varies():
    C = components_batch(4).reshape(-1, 4, 2)
    varies = (C.max(axis=1) != C.min(axis=1)).tolist()
    assert [True, True] in varies and [True, False] in varies and [False, True] in varies
    assert [False, False] in varies


@pytest.mark.parametrize(
    "target",
    [lambda C, G: D.advantages(C[:, 0], G, D.TRL), lambda C, G: np.zeros(C.shape[0])],
    ids=["ignores the second", "constant"],
)
def test_a_target_that_ignores_a_component_is_neither_rule(target):
    out = audit_aggregation(target, (1.0, 1.0))
    assert out["rule"] == "other" and out["ignores_a_component"]
    assert "ignored" in out["findings"][0].message


@pytest.mark.parametrize("w", [(0.0, 1.0, 2.0), (1.0, 0.5, 2.0)])
def test_three_components_any_of_zero_weight_are_probed_through_two_of_nonzero_weight(w):
    out = audit_aggregation(sum_then_normalize(w), w)
    assert out["rule"] == "sum_then_normalize" and out["weights"] == list(w)
    assert audit_aggregation(normalize_then_sum(w), w)["rule"] == "normalize_then_sum"


def test_weights_that_cannot_be_probed_are_refused():
    for w in [(1.0,), (0.0, 0.0)]:
        with pytest.raises(ValueError, match="two reward components at least"):
            audit_aggregation(sum_then_normalize((1.0, 1.0)), w)
