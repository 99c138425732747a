"""Groups a target normalises as one (``checks.measure.merging``): colliding ids, blocks of 2·G and a whitened batch are
named with the groups they merge; no point of the dial and no named variant is taken for a merge."""

from __future__ import annotations

import numpy as np
import pytest

from grpo_identity import dial as D
from grpo_identity.checks import audit
from grpo_identity.checks.measure.merging import merged_groups
from grpo_identity.variants import VARIANTS


def _normalised(r):
    sd = r.std()
    return (r - r.mean()) / sd if sd > 0 else np.zeros_like(r)


def ids_in_three_buckets(rewards, group_ids):
    keys, out = np.asarray(group_ids) % 3, np.zeros_like(rewards, dtype=float)  # a hash bucket per id: collisions
    for k in np.unique(keys):
        out[keys == k] = _normalised(rewards[keys == k])
    return out


def blocks_of_two_groups(rewards, G):
    n = 2 * G if rewards.size % (2 * G) == 0 else G
    return np.concatenate([_normalised(b) for b in rewards.reshape(-1, n)])


def whitened_batch(rewards, G):
    return _normalised(np.asarray(rewards, dtype=float))


@pytest.mark.parametrize(
    "fn, merged",
    [
        (ids_in_three_buckets, [[0, 3], [1, 4], [2, 5]]),
        (blocks_of_two_groups, [[0, 1], [2, 3], [4, 5]]),
        (whitened_batch, [[0, 1, 2, 3, 4, 5]]),
    ],
)
def test_groups_normalised_as_one_are_named_first_in_the_failed_audit(fn, merged):
    report = audit(fn, max_examples=20, isolate=False)
    first = report.findings[0]
    assert report.verdict == "fail" and first.property == "merged_groups", report.format()
    assert first.counterexample["merged"] == merged
    whole = "the whole batch is normalised as one group" in first.message
    assert whole == (len(merged[0]) == 6)


@pytest.mark.parametrize("name", list(D.PRESETS))
def test_no_point_of_the_dial_is_taken_for_a_merge(name):
    d = D.PRESETS[name]
    assert merged_groups(lambda r, G: D.advantages(r, G, d), "float64") is None
    assert merged_groups(lambda r, G: D.advantages(r, G, d).astype(np.float32), "float32") is None


@pytest.mark.parametrize("name", list(VARIANTS))
def test_no_named_variant_is_taken_for_a_merge(name):
    v = VARIANTS[name]
    for form in v.forms:
        found = merged_groups(
            lambda r, G, form=form: np.nan_to_num(v.advantages(r.reshape(-1, G), None, form)).reshape(-1), "float64"
        )
        assert found is None or v.departs_from("groups_independent", form), (name, form, found)


def test_advantages_that_are_no_groups_normalisation_are_no_merge():
    assert merged_groups(lambda r, G: np.zeros_like(r), "float64") is None
    assert merged_groups(lambda r, G: np.sign(r - 1.0), "float64") is None  # no affine map per group
    assert merged_groups(lambda r, G: r.astype(float), "float64") is None  # raw rewards: one map, not centred
    assert merged_groups(lambda r, G: r - 0.5, "float64") is None
    assert merged_groups(lambda r, G: r / r.std(), "float64") is None


@pytest.mark.parametrize("name", list(D.PRESETS))
def test_no_point_of_the_dial_in_16_bit_is_taken_for_a_merge(name):
    d = D.PRESETS[name]
    assert merged_groups(lambda r, G: D.advantages(r, G, d).astype(np.float16), "float16") is None
