"""The properties and the inferred dial, called directly on hand-made batches: branches the
audit's hypothesis examples seldom reach (a batch-wide std, integer filters, a group after a
silent 0.1-group), each written against a mutant that survived the rest of the tests."""

from __future__ import annotations

import numpy as np
import pytest

from grpo_identity import dial as D
from grpo_identity.checks import properties as P
from grpo_identity.checks.infer import Inferred, infer_dial, infer_keep_rule
from grpo_identity.checks.strategies import RewardBatch
from grpo_identity.checks.target import LocalTarget

CTX64 = P.Context(P.Tolerance.for_precision("float64"))
RNG = np.random.default_rng(0)


def batch(rewards, G):
    return RewardBatch(np.asarray(rewards, dtype=np.float64), G, "two_valued")


def test_zero_sum_is_checked_in_the_groups_after_a_silent_group_of_0_1():
    def off_in_group_1(r, G):
        A = D.advantages(r, G, D.GRPO)
        A[G : 2 * G] += 0.25  # group 1 no longer sums to 0
        return A

    with pytest.raises(P.PropertyViolation, match=r"zero_sum_per_group: group 1 \(G=2\) sums to 0.5") as exc:
        P.zero_sum_per_group(off_in_group_1, batch([0.1, 0.1, 1.0, 0.0], 2), CTX64, RNG)
    assert exc.value.counterexample == {  # the keys the audit's report prints
        "group_size": 2,
        "n_groups": 2,
        "rewards": [0.1, 0.1, 1.0, 0.0],
        "output": [0.0, 0.0, 1.25, -0.75],
        "group": 1,
        "group_rewards": [1.0, 0.0],
        "group_output": [1.25, -0.75],
    }


def test_a_malformed_probe_output_is_a_well_formed_violation():
    with pytest.raises(P.PropertyViolation, match="returned shape") as exc:
        infer_dial(lambda r, G: D.advantages(r, G, D.GRPO)[:-1])
    assert exc.value.property == "well_formed"


def test_an_in_place_update_on_the_first_call_only_is_still_seen():
    calls = []

    def writes_once(r, G):
        calls.append(G)
        if len(calls) == 1:
            r[0] += 1.0  # the caller's rewards change, once
        return D.advantages(r, G, D.GRPO)

    with pytest.raises(P.PropertyViolation, match="modified its input rewards in place"):
        P.well_formed(LocalTarget(writes_once), batch([1.0, 0.0, 0.0, 1.0], 2), CTX64, RNG)


@pytest.mark.parametrize(
    "rewards", [[1.0, 0.0, 0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0, 2.0, 2.0]], ids=["live", "all-silent"]
)
def test_a_batch_std_scale_passes_group_independence_up_to_one_factor(rewards):
    ctx = P.Context(P.Tolerance.for_precision("float64"), batch_scale=True)
    fn = lambda r, G: D.advantages(r, G, D.GRPO.replace(scale="batch_std"))
    for seed in range(8):  # the property picks a random group to move into other batches
        P.groups_independent(fn, batch(rewards, 2), ctx, np.random.default_rng(seed))


def test_a_batch_factor_that_flips_the_sign_is_not_independence():
    ctx = P.Context(P.Tolerance.for_precision("float64"), batch_scale=True)
    fn = lambda r, G: D.advantages(r, G, D.GRPO) * (-1.0 if r.size == G else 1.0)  # alone: sign flipped
    with pytest.raises(
        P.PropertyViolation,
        match=r"groups_independent: group \d \(G=2, rewards \[\d, \d\]\) gets \[.*\] in the batch but \[.*\] alone: coupled",
    ):
        P.groups_independent(fn, batch([1.0, 0.0, 0.0, 1.0], 2), ctx, RNG)


def test_a_filter_may_return_zeros_and_ones_but_not_other_numbers():
    P.filter_well_formed(lambda r, G: np.array([0, 1]), batch([1.0, 1.0, 0.0, 1.0], 2), CTX64, RNG)
    with pytest.raises(
        P.PropertyViolation, match="returned dtype int64 with values \\[0, 2\\]; a filter returns bools"
    ):
        P.filter_well_formed(lambda r, G: np.array([0, 2]), batch([1.0, 1.0, 0.0, 1.0], 2), CTX64, RNG)


def test_a_filter_that_writes_into_its_input_is_not_well_formed():
    def centring_filter(r, G):
        R = r.reshape(-1, G)
        R -= R.mean(1, keepdims=True)
        return np.abs(R).max(1) > 0

    with pytest.raises(P.PropertyViolation, match="modified its input rewards in place"):
        P.filter_well_formed(centring_filter, batch([1.0, 1.0, 0.0, 1.0], 2), CTX64, RNG)


def test_a_wrong_keep_decision_names_the_group_and_its_rewards():
    keep_all = lambda r, G: np.ones(r.size // G, dtype=bool)
    with pytest.raises(
        P.PropertyViolation,
        match=r"group 0 \(G=2, rewards \[0.1, 0.1\], σ = 0\) is kept; the keep rule 'nonzero_std' drops it",
    ):
        P.keeps_groups_with_nonzero_std(keep_all, batch([0.1, 0.1, 0.0, 1.0], 2), CTX64, RNG)


def test_an_all_zero_float32_output_reads_as_float32():
    assert P.precision_of(np.zeros(4, dtype=np.float32)) == "float32"
    assert P.precision_of(np.zeros(4)) == "float64"


def test_the_inferred_dial_keeps_every_group_unless_a_filter_said_otherwise():
    inf = Inferred(centre="mean", scale="group_std", ddof=1, eps=1e-4)
    assert inf.dial() is not None and inf.dial().same_point(D.TRL)
    inf.keep = "nonzero_std"
    assert inf.dial().same_point(D.TRL.replace(keep="nonzero_std"))


def test_the_inferred_reference_carries_the_constant_factor():
    r = np.array([1.0, 0.0, 0.0, 0.0])
    ref = Inferred(centre="mean", scale="group_std", ddof=0, eps=0.0, alpha=2.0).reference()
    assert ref is not None and np.array_equal(ref(r, 4), 2.0 * D.advantages(r, 4, D.GRPO))
    assert np.array_equal(
        Inferred(centre="mean", scale="none", alpha=None).reference()(r, 4), D.advantages(r, 4, D.DR_GRPO)
    )


def test_the_silent_residue_is_the_largest_over_every_probe_value_and_says_where():
    def residue_on_2_5(r, G):  # paper GRPO, but silent groups of 2.5 get 1e-3
        A = D.advantages(r, G, D.GRPO)
        return np.where(r == 2.5, 1e-3, A)

    inf = infer_dial(residue_on_2_5)
    assert inf.silent_nonbinary_max_abs == 1e-3
    assert inf.silent_nonbinary_worst == {"value": 2.5, "G": 2}
    assert infer_dial(lambda r, G: D.advantages(r, G, D.GRPO)).silent_nonbinary_worst is None


def test_an_unscaled_dial_has_no_epsilon_resolution_and_its_dict_keys_groups_by_size():
    inf = infer_dial(lambda r, G: D.advantages(r, G, D.DR_GRPO), sizes=(2, 4))
    assert (inf.scale, inf.eps, inf.eps_resolution) == ("none", 0.0, 0.0)
    out = inf.to_dict()
    assert out["coefficients"] == {"2": inf.coefficients[2], "4": inf.coefficients[4]} and set(out["batch_std"]) == {
        "2",
        "4",
    }


def test_the_keep_rule_of_a_dapo_filter_is_described_in_words():
    assert infer_keep_rule(lambda r, G: D.keep_mask(r, G, D.DAPO)) == (
        "nonzero_std",
        "keeps exactly the groups with σ > 0",
    )
    assert infer_keep_rule(lambda r, G: D.keep_mask(r, G, D.GRPO)) == ("all", "keeps every group")
