"""The properties (``checks.measure.properties``) called directly on hand-made batches: each holds for
every preset, and each broken one names itself, the group and a counterexample — including the
branches hypothesis seldom draws (a batch-wide std, integer filters, a group after a silent
0.1-group, an in-place update on the first call only)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_identity import dial as D
from grpo_identity.checks.calls.target import LocalTarget
from grpo_identity.checks.measure import properties as P
from grpo_identity.checks.measure.strategies import RewardBatch, reward_batches

CTX64 = P.Context(P.Tolerance.for_precision("float64"))
RNG = np.random.default_rng(0)


def dial_fn(d):
    return lambda r, G: D.advantages(r, G, d)


def batch(rewards, G, kind="binary"):
    return RewardBatch(np.asarray(rewards, dtype=np.float64), G, kind)


def two_valued(rewards, G):
    return batch(rewards, G, "two_valued")


def grpo_with_a_silent_residue(rewards, G):
    """Paper GRPO, except that silent groups get ±1e-12 residues summing to 0 (on {0, 1} rewards too)."""
    R = rewards.reshape(-1, G)
    live = np.ptp(R, 1, keepdims=True) > 0
    A = np.divide(R - R.mean(1, keepdims=True), R.std(1, keepdims=True), out=np.zeros_like(R), where=live)
    residue = 1e-12 * (np.arange(G) - (G - 1) / 2)  # (G,): sums to 0, so zero-sum holds
    return np.where(live, A, residue).reshape(-1)


# --- advantage properties ------------------------------------------------------------------------
@settings(max_examples=30)
@given(batch=reward_batches(max_groups=4), seed=st.integers(0, 2**16))
def test_every_property_holds_for_every_preset(batch, seed):
    for d in (D.GRPO, D.DR_GRPO, D.RLOO, D.TRL):
        ctx = P.Context(P.Tolerance.for_precision("float64"), reference=dial_fn(d))
        for prop in P.ADVANTAGE_PROPERTIES:
            prop(dial_fn(d), batch, ctx, np.random.default_rng(seed))


@pytest.mark.parametrize(
    "prop, fn, word",
    [
        (P.well_formed, lambda r, G: r[:-1], "shape"),
        (P.well_formed, lambda r, G: np.full_like(r, np.nan), "non-finite"),
        (P.silent_groups_exactly_zero, lambda r, G: r * 0 + 1e-9, "instead of exactly 0"),
        (P.two_valued_per_group, lambda r, G: -dial_fn(D.GRPO)(r, G), "wrong sign"),
        (P.two_valued_per_group, lambda r, G: dial_fn(D.GRPO)(r, G) * (1 + 0.1 * np.arange(len(r))), "more than two"),
        (P.zero_sum_per_group, lambda r, G: r, "sums to"),
        (P.groups_independent, lambda r, G: r - r.mean(), "coupled"),
        (
            P.permutation_equivariant,
            lambda r, G: np.sort(dial_fn(D.GRPO)(r, G).reshape(-1, G), 1).reshape(-1),
            "permuting",
        ),
    ],
)
def test_each_property_names_itself_and_gives_a_counterexample(prop, fn, word):
    b = batch([1, 0, 0, 0, 1, 1, 1, 1, 0, 0, 1, 1], 4)
    with pytest.raises(P.PropertyViolation, match=word) as info:
        prop(fn, b, CTX64, np.random.default_rng(1))
    assert info.value.property == prop.__name__
    assert info.value.counterexample["group_size"] == 4 and "rewards" in info.value.counterexample


def test_a_stateful_target_breaks_statelessness():
    calls = []

    def fn(r, G):
        calls.append(1)
        return dial_fn(D.GRPO)(r, G) * len(calls)

    with pytest.raises(P.PropertyViolation, match="keeps state"):
        P.stateless(fn, batch([1, 0, 0, 1], 2), CTX64, np.random.default_rng(0))


@pytest.mark.parametrize("scale, ok", [(1.0, True), (2.0, False)])
def test_stateless_compares_the_first_answer_the_search_remembers_with_two_calls_of_its_own(scale, ok):
    calls = []

    def fn(r, G):
        calls.append(r.copy())
        return dial_fn(D.GRPO)(r, G)

    b = batch([1, 0, 0, 1, 1, 1], 2)
    remembered = dial_fn(D.GRPO)(b.contiguous(), 2) * scale  # the target's first answer, before other calls
    ctx = dataclasses.replace(CTX64, earlier=lambda r, G: remembered)
    if ok:
        P.stateless(fn, b, ctx, np.random.default_rng(0))
    else:
        with pytest.raises(P.PropertyViolation, match="after other calls: the target keeps state"):
            P.stateless(fn, b, ctx, np.random.default_rng(0))
    assert [list(r) for r in calls] == [list(b.contiguous())] * 2  # the same input twice, no other call between


def test_stateless_without_a_remembered_answer_calls_other_rewards_between_two_of_the_same():
    calls = []

    def fn(r, G):
        calls.append(r.copy())
        return dial_fn(D.GRPO)(r, G) * (1.0 if len(calls) < 3 else 0.5)  # changed by the third call

    b = batch([1, 0, 0, 1, 1, 1], 2)
    with pytest.raises(P.PropertyViolation, match="after another call: the target keeps state"):
        P.stateless(fn, b, CTX64, np.random.default_rng(0))
    assert len(calls) == 4 and not np.array_equal(calls[2], b.contiguous())


def test_the_identity_property_checks_g_against_the_score_gap_in_any_dimension():
    def wrong(r, G):  # zero-sum, not two-valued
        return dial_fn(D.GRPO)(r, G) + np.tile([0.0, 0.1, -0.1, 0.0], len(r) // 4)

    with pytest.raises(P.PropertyViolation, match="is not c"):
        P.identity_in_vector_form(wrong, batch([1, 1, 0, 0] * 3, 4), CTX64, np.random.default_rng(3))


def binary_sigma(r, G):
    """GRPO with σ from the binary formula √(μ(1 − μ)): right on {0, 1} rewards only."""
    R = r.reshape(-1, G)
    mu = R.mean(1, keepdims=True)
    sd = np.sqrt(np.abs(mu * (1 - mu)))
    return np.divide(R - mu, sd, out=np.zeros_like(R), where=np.ptp(R, 1, keepdims=True) > 0).reshape(-1)


def two_level_sigma(r, G):
    """GRPO with σ = (max − min)·√(k(G − k))/G, k the answers at the group's maximum: right on binary and
    two-valued rewards (G5), wrong on any third value."""
    R = r.reshape(-1, G)
    k = (R == R.max(1, keepdims=True)).sum(1, keepdims=True)
    sd = np.ptp(R, 1, keepdims=True) * np.sqrt(k * (G - k)) / G
    return np.divide(R - R.mean(1, keepdims=True), sd, out=np.zeros_like(R), where=sd > 0).reshape(-1)


GRPO_REFERENCE = P.Context(P.Tolerance.for_precision("float64"), reference=dial_fn(D.GRPO))


@pytest.mark.parametrize("fn", [binary_sigma, two_level_sigma])
def test_a_sigma_right_on_binary_rewards_only_fails_the_identity_on_any_rewards(fn):
    b = batch([1, 0, 0, 1, 1, 1, 0, 0], 4)
    assert np.allclose(fn(b.contiguous(), 4), dial_fn(D.GRPO)(b.contiguous(), 4))  # right on the binary batch
    with pytest.raises(P.PropertyViolation, match=r"is not c·β̂ .* the dial's coefficient .* such as the binary") as exc:
        P.identity_in_vector_form(fn, b, GRPO_REFERENCE, np.random.default_rng(0))
    rewards = np.asarray(exc.value.counterexample["group_rewards"])
    assert np.unique(rewards).size > 2 or not np.isin(rewards, (0.0, 1.0)).all()  # not a binary group


def test_without_a_reference_the_identity_on_any_rewards_still_needs_advantages_proportional_to_r_minus_rbar():
    def squashed(r, G):  # zero-sum and two-valued on two-valued groups, not affine in the reward
        A = np.tanh(3 * r.reshape(-1, G))
        return (A - A.mean(1, keepdims=True)).reshape(-1)

    b = batch([1, 0, 0, 1], 4)
    P.identity_in_vector_form(two_level_sigma, b, CTX64, np.random.default_rng(0))  # proportional: no reference
    with pytest.raises(P.PropertyViolation, match="not proportional to R − R̄"):
        P.identity_in_vector_form(squashed, b, CTX64, np.random.default_rng(0))


@pytest.mark.parametrize("dial", [D.GRPO, D.DR_GRPO, D.RLOO, D.DAPO, D.TRL, D.GRPO.replace(scale="batch_std")])
def test_every_centred_dial_satisfies_g_equals_c_times_the_slope_on_any_rewards(dial):
    ctx = P.Context(P.Tolerance.for_precision("float64"), reference=dial_fn(dial))
    for seed in range(20):
        P.identity_in_vector_form(dial_fn(dial), batch([1, 0, 0, 1, 0, 0], 3), ctx, np.random.default_rng(seed))


def test_any_reward_groups_take_three_values_at_least_and_two_distinct_ones_at_g_2():
    rng = np.random.default_rng(0)
    for G in (2, 3, 8, 64):
        for _ in range(10):
            R = P.any_reward_groups(4, G, rng).reshape(4, G)
            assert all(np.unique(row).size >= min(G, 3) for row in R)


def test_the_audit_fails_a_binary_only_sigma_with_a_counterexample_of_continuous_rewards():
    from grpo_identity.checks import audit

    report = audit(two_level_sigma, expect="grpo", max_examples=60, isolate=False)
    found = {f.property: f for f in report.findings}
    assert report.verdict == "fail" and "identity_in_vector_form" in found
    assert "σ_R" in found["identity_in_vector_form"].message


def test_the_silent_groups_property_names_the_group_and_its_advantages():
    b = type("B", (), {"contiguous": lambda self: np.array([1.0, 1.0, 0.0, 1.0]), "group_size": 2})()
    with pytest.raises(P.PropertyViolation, match=r"silent group 0 \(G=2, every reward 1\)"):
        P.silent_groups_exactly_zero(grpo_with_a_silent_residue, b, CTX64, np.random.default_rng(0))


def _grpo_rounded_mean(dtype):
    """Paper GRPO computed in ``dtype`` (torch: float32 accumulation, each result rounded to the dtype)."""
    import torch

    def adv(r, G):
        R = torch.as_tensor(r).reshape(-1, G).to(dtype)
        A = (R - R.mean(1, keepdim=True)) / R.std(1, keepdim=True, correction=0)
        return A.reshape(-1).double().numpy()

    return adv


def test_zero_sum_allows_a_bf16_groups_rounded_mean_times_g_and_still_fails_a_shifted_baseline():
    torch = pytest.importorskip("torch")
    G = 99
    rewards = two_valued(np.r_[np.ones(G - 1), 0.0], G)  # mean 0.9899 rounds to 0.98828 in bfloat16
    grpo_bf16, grpo_f32 = _grpo_rounded_mean(torch.bfloat16), _grpo_rounded_mean(torch.float32)
    f32, bf16 = (P.Context(P.Tolerance.for_precision(p)) for p in ("float32", "bfloat16"))
    assert abs(grpo_bf16(rewards.rewards, G).sum()) > 1.0  # Σ Â = 1.6: rounding, G times over
    P.zero_sum_per_group(grpo_bf16, rewards, bf16, RNG)
    with pytest.raises(P.PropertyViolation, match=r"zero_sum_per_group: group 0 \(G=99\) sums to 0.99"):
        P.zero_sum_per_group(lambda r, G: grpo_f32(r, G) + 0.01, rewards, f32, RNG)  # a baseline off by 0.01σ
    with pytest.raises(P.PropertyViolation, match=r"zero_sum_per_group: group 0 \(G=99\) sums to 6.5"):
        P.zero_sum_per_group(lambda r, G: grpo_bf16(r, G) + 0.05, rewards, bf16, RNG)  # beyond bf16's rounding


def test_zero_sum_is_checked_in_the_groups_after_a_silent_group_of_0_1():
    def off_in_group_1(r, G):
        A = D.advantages(r, G, D.GRPO)
        A[G : 2 * G] += 0.25  # group 1 no longer sums to 0
        return A

    with pytest.raises(P.PropertyViolation, match=r"zero_sum_per_group: group 1 \(G=2\) sums to 0.5") as exc:
        P.zero_sum_per_group(off_in_group_1, two_valued([0.1, 0.1, 1.0, 0.0], 2), CTX64, RNG)
    assert exc.value.counterexample == {  # the keys the audit's report prints
        "group_size": 2,
        "n_groups": 2,
        "rewards": [0.1, 0.1, 1.0, 0.0],
        "output": [0.0, 0.0, 1.25, -0.75],
        "group": 1,
        "group_rewards": [1.0, 0.0],
        "group_output": [1.25, -0.75],
    }


def test_an_in_place_update_on_the_first_call_only_is_still_seen():
    calls = []

    def writes_once(r, G):
        calls.append(G)
        if len(calls) == 1:
            r[0] += 1.0  # the caller's rewards change, once
        return D.advantages(r, G, D.GRPO)

    with pytest.raises(P.PropertyViolation, match="modified its input rewards in place"):
        P.well_formed(LocalTarget(writes_once), two_valued([1.0, 0.0, 0.0, 1.0], 2), CTX64, RNG)


@pytest.mark.parametrize(
    "rewards", [[1.0, 0.0, 0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0, 2.0, 2.0]], ids=["live", "all-silent"]
)
def test_a_batch_std_scale_passes_group_independence_up_to_one_factor(rewards):
    ctx = P.Context(P.Tolerance.for_precision("float64"), batch_scale=True)
    fn = dial_fn(D.GRPO.replace(scale="batch_std"))
    for seed in range(8):  # the property picks a random group to move into other batches
        P.groups_independent(fn, two_valued(rewards, 2), ctx, np.random.default_rng(seed))


def test_a_batch_factor_that_flips_the_sign_is_not_independence():
    ctx = P.Context(P.Tolerance.for_precision("float64"), batch_scale=True)

    def fn(r, G):  # alone: sign flipped
        return D.advantages(r, G, D.GRPO) * (-1.0 if r.size == G else 1.0)

    words = (
        r"groups_independent: group \d \(G=2, rewards \[\d, \d\]\) gets \[.*\] in the batch but \[.*\] alone: coupled"
    )
    with pytest.raises(P.PropertyViolation, match=words):
        P.groups_independent(fn, two_valued([1.0, 0.0, 0.0, 1.0], 2), ctx, RNG)


# --- precision -----------------------------------------------------------------------------------
def test_precision_is_read_from_the_output():
    assert P.precision_of(np.array([0.1, 1 / 3])) == "float64"
    assert P.precision_of(np.array([0.1, 1 / 3], dtype=np.float32).astype(np.float64)) == "float32"


def test_short_values_say_nothing_of_the_precision_the_others_do():
    simple = np.array([0.0, 1.0, -1.0, 0.75, 1.03125])  # numbers of every float type: a float64 pass@k's answers
    assert P.precision_of(simple) == "float64"
    assert P.precision_of(simple.astype(np.float32)) == "float32"
    bf16 = np.array([0.70703125, -0.70703125, 0.5])  # 1/√2 rounded to bfloat16's 8 significant bits
    assert P.precision_of(np.r_[simple, bf16]) == "bfloat16"
    assert P.precision_of(np.r_[simple, np.float16(1 / 3)]) == "float16"


def test_an_all_zero_float32_output_reads_as_float32():
    assert P.precision_of(np.zeros(4, dtype=np.float32)) == "float32"
    assert P.precision_of(np.zeros(4)) == "float64"


# --- filter properties ---------------------------------------------------------------------------
def test_kept_by_definition_keeps_exactly_the_groups_with_two_distinct_rewards():
    R = np.array([1.0, 1.0, 0.1, 0.1 + 1e-9, 0.1, 0.1, -0.0, 0.0, 0.0, 1.0])
    assert P.kept_by_definition(R, 2, "nonzero_std").tolist() == [False, True, False, False, True]
    assert P.kept_by_definition(R, 2, "all").tolist() == [True] * 5
    with pytest.raises(ValueError, match="keep must be"):
        P.kept_by_definition(R, 2, "some")


def test_a_filter_may_return_zeros_and_ones_but_not_other_numbers():
    P.filter_well_formed(lambda r, G: np.array([0, 1]), two_valued([1.0, 1.0, 0.0, 1.0], 2), CTX64, RNG)
    with pytest.raises(
        P.PropertyViolation,
        match="returned dtype int64 with values \\[0, 2\\], not flags; a filter returns one bool per group",
    ):
        P.filter_well_formed(lambda r, G: np.array([0, 2]), two_valued([1.0, 1.0, 0.0, 1.0], 2), CTX64, RNG)


def test_a_filter_that_writes_into_its_input_is_not_well_formed():
    def centring_filter(r, G):
        R = r.reshape(-1, G)
        R -= R.mean(1, keepdims=True)
        return np.abs(R).max(1) > 0

    with pytest.raises(P.PropertyViolation, match="modified its input rewards in place"):
        P.filter_well_formed(centring_filter, two_valued([1.0, 1.0, 0.0, 1.0], 2), CTX64, RNG)


def _row_filter(returns):
    """A row filter keeping the rows of groups with a spread: their indices, or one int flag per row."""

    def keep(r, G):
        rows = np.repeat(np.ptp(r.reshape(-1, G), axis=1) > 0, G)
        return np.flatnonzero(rows) if returns == "indices" else rows.astype(np.int64)

    return P.WholeGroups(LocalTarget(keep, kind="row-filter"))


def test_a_row_filter_that_has_returned_indices_is_read_so_where_they_could_be_flags():
    seen = _row_filter("indices")
    one_pair = np.array([1.0, 0.0])
    with pytest.raises(P.PropertyViolation, match="is split"):  # [0, 1] before any indices: flags, a split group
        seen.call(one_pair, 2)
    assert seen.call(np.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0]), 2).value.tolist() == [True, False, True]
    assert seen.returns_indices
    assert seen.call(one_pair, 2).value.tolist() == [True]  # [0, 1]: the indices of both rows
    assert seen.call(np.array([1.0]), 1).value.tolist() == [False]  # a lone answer: no index
    flags = _row_filter("flags")
    assert flags.call(np.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0]), 2).value.tolist() == [True, False, True]
    assert flags.call(np.array([1.0, 1.0, 0.0, 1.0]), 2).value.tolist() == [False, True]  # [0, 0, 1, 1]: flags
    assert not flags.returns_indices


def test_a_wrong_keep_decision_names_the_group_and_its_rewards():
    def keep_all(r, G):
        return np.ones(r.size // G, dtype=bool)

    with pytest.raises(
        P.PropertyViolation,
        match=r"group 0 \(G=2, rewards \[0.1, 0.1\], σ = 0\) is kept; the keep rule 'nonzero_std' drops it",
    ):
        P.keeps_groups_with_nonzero_std(keep_all, two_valued([0.1, 0.1, 0.0, 1.0], 2), CTX64, RNG)


def test_ragged_groups_leave_a_silent_subset_of_inexact_values_to_the_silent_probe():
    from grpo_identity.checks.measure.strategies import RewardBatch

    class KeepThree:  # sizes 3 (the three 0.1s), rows in their own order
        def integers(self, lo, hi, size):
            return np.full(size, 3)

        def permutation(self, n):
            return np.arange(n)

    def eps_grpo(r, G, ids=None):
        out = np.zeros_like(r)
        for u in np.unique(ids):
            g = r[ids == u]
            out[ids == u] = (g - g.mean()) / (g.std() + 1e-6)  # 0.1s: a rounding residue of ~1e-11
        return out

    batch = RewardBatch(np.array([0.1, 0.1, 0.1, 0.7]), 4, "continuous")
    ctx = P.Context(P.Tolerance.for_precision("float64"), reference_ids=lambda r, ids: np.zeros_like(r), ragged=True)
    P.ragged_groups(eps_grpo, batch, ctx, KeepThree())  # no finding: the residue is the silent probe's


def _whitened_over_the_batch(r, G):
    """REINFORCE++-baseline: the group mean removed, then the whole batch whitened (its mean is not exact: silent
    groups keep a rounding residue of ~1e-17)."""
    A = (r.reshape(-1, G) - r.reshape(-1, G).mean(1, keepdims=True)).reshape(-1)
    return (A - A.mean()) / (A.std() + 1e-8)


def test_a_rounding_residue_on_silent_groups_is_zero_and_a_real_push_is_not():
    r = np.array([1.0, 0.0, 0.0, 0.7, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.3])
    b, G = batch(r, 4), 4
    residue = _whitened_over_the_batch(b.contiguous(), G)
    assert 0 < np.abs(residue[4:12]).max() < 1e-15  # the silent groups are not exactly 0
    ctx = P.Context(P.Tolerance.for_precision("float64"))
    for prop in (P.silent_groups_exactly_zero, P.zero_sum_per_group):
        prop(_whitened_over_the_batch, b, ctx, np.random.default_rng(0))  # passes: resolution × scale

    def pushes(r, G):
        out = _whitened_over_the_batch(r, G)
        out[4:8] += np.array([0.3, -0.1, -0.1, -0.1])  # a real push on a silent group, summing to 0
        return out

    with pytest.raises(P.PropertyViolation, match="silent_groups_exactly_zero"):
        P.silent_groups_exactly_zero(pushes, b, ctx, np.random.default_rng(0))


@pytest.mark.parametrize("precision", ["float64", "float32", "float16", "bfloat16"])
def test_at_every_precision_a_real_push_on_a_silent_group_still_fails(precision):
    G = 16
    r = np.concatenate([np.ones(G), np.r_[np.ones(8), np.zeros(8)]])  # a silent group, then a live one

    def pushes(r, G):
        out = D.advantages(r, G, D.GRPO)
        out[:G] = 0.05 * np.r_[1.0, -np.ones(G - 1) / (G - 1)]  # a push of 5 % of the live group's |Â|, summing to 0
        return out

    ctx = P.Context(P.Tolerance.for_precision(precision), batch_scale=True)
    assert ctx.tol.zero_floor(1.0, rows=r.size) < 0.01
    with pytest.raises(P.PropertyViolation, match="silent_groups_exactly_zero"):
        P.silent_groups_exactly_zero(pushes, batch(r, G), ctx, np.random.default_rng(0))


@pytest.mark.parametrize("seed", range(5))
def test_every_ragged_example_holds_a_lone_answer_so_a_missing_baseline_shows_at_once(seed):
    from grpo_identity.checks.measure.strategies import RewardBatch

    def no_baseline_when_alone(r, G, ids):  # OPO-style: a group of one keeps its raw reward
        out = np.zeros_like(r)
        for u in np.unique(ids):
            at = ids == u
            out[at] = r[at] if at.sum() == 1 else r[at] - r[at].mean()
        return out

    batch = RewardBatch(np.array([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0]), 4, "binary")

    def centred(r, ids):  # the reference: each group centred on its own mean, a lone answer 0
        return np.array([r[i] - r[ids == ids[i]].mean() for i in range(r.size)])

    ctx = P.Context(P.Tolerance.for_precision("float64"), reference_ids=centred, ragged=True)
    with pytest.raises(P.PropertyViolation, match="a lone answer"):
        P.ragged_groups(no_baseline_when_alone, batch, ctx, np.random.default_rng(seed))


def test_a_pushed_lone_answer_does_not_hide_a_wrong_baseline_in_the_other_groups():
    from grpo_identity.checks.measure.strategies import RewardBatch

    class LoneFirst:  # group 0 keeps one answer (checked first), groups 1 and 2 keep 3 and 4; rows in order
        def integers(self, lo, hi=None, size=None):
            return np.array([0]) if hi == 3 else np.array([1, 3, 4])

        def permutation(self, n):
            return np.arange(n)

    def batch_baseline(r, G, ids):  # a lone answer keeps its raw reward; the others are centred on the batch
        sizes = np.array([np.sum(ids == u) for u in ids])
        return np.where(sizes == 1, r, r - r.mean())

    def centred(r, ids):
        return np.array([r[i] - r[ids == ids[i]].mean() for i in range(r.size)])

    batch = RewardBatch(np.array([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]), 4, "binary")
    ctx = P.Context(P.Tolerance.for_precision("float64"), reference_ids=centred, ragged=True)
    with pytest.raises(P.PropertyViolation, match="not taken as the ids give them") as err:
        P.ragged_groups(batch_baseline, batch, ctx, LoneFirst())
    assert err.value.severity == "fail"


def test_a_floor_on_sigma_is_named_by_the_divisor_it_puts_in_sigmas_place():
    def floored(r, G):
        R = r.reshape(-1, G)
        return ((R - R.mean(1, keepdims=True)) / np.maximum(R.std(1, keepdims=True), 0.25)).reshape(-1)

    b = batch([1, 0, 0, 1, 1, 1, 0, 0], 4)
    with pytest.raises(P.PropertyViolation) as exc:
        P.identity_in_vector_form(floored, b, GRPO_REFERENCE, np.random.default_rng(0))
    assert "it divides this group's R − R̄ by 0.25 where the dial divides by" in str(exc.value)
