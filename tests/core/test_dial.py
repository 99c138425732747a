"""The dial is the one advantage implementation: presets match the published formulas."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_identity import closed_forms as C
from grpo_identity import dial as D

RNG = np.random.default_rng(0)


def _reference(R: np.ndarray, G: int, dial: D.Dial) -> np.ndarray:
    """Independent loop implementation of the published formulas, group by group."""
    out = np.zeros_like(R, dtype=np.float64)
    groups = R.reshape(-1, G)
    all_std = R.std(ddof=dial.ddof)
    for i, g in enumerate(groups):
        if np.all(g == g[0]) and dial.centre != "none":
            continue
        for j in range(G):
            base = {"mean": g.mean(), "loo": (g.sum() - g[j]) / (G - 1), "none": 0.0}[dial.centre]
            std = {"group_std": g.std(ddof=dial.ddof), "batch_std": all_std, "none": None}[dial.scale]
            if std is None:
                scale = 1.0
            elif dial.eps_where == "std":
                scale = std + dial.eps
            else:
                scale = np.sqrt(std**2 + dial.eps)
            out[i * G + j] = (g[j] - base) / scale
    return out


def _batch(n_groups: int, G: int, values=(0.0, 1.0)) -> np.ndarray:
    R = RNG.choice(values, size=(n_groups, G)).astype(np.float64)
    R[0] = values[0]  # at least one silent group of each kind
    R[1] = values[-1]
    return R.reshape(-1)


@pytest.mark.parametrize(
    "dial",
    list(D.PRESETS.values())
    + [
        D.GRPO.replace(scale="batch_std"),
        D.TRL.replace(eps_where="variance", name="whiten"),
        D.GRPO.replace(scale="batch_std", eps=0.1, eps_where="variance", name="batch_whiten"),
    ],
    ids=lambda d: d.name,
)
@pytest.mark.parametrize("G", [2, 3, 8, 16])
def test_every_preset_matches_an_independent_loop_implementation(dial, G):
    for values in ((0.0, 1.0), (0.1, 0.9), (-1.0, 2.5)):
        R = _batch(12, G, values)
        assert np.allclose(D.advantages(R, G, dial), _reference(R, G, dial), rtol=1e-12, atol=1e-12)


def test_grpo_takes_the_two_published_values_per_group():
    G = 8
    for k in range(G + 1):
        R = np.array([1.0] * k + [0.0] * (G - k))
        A = D.advantages(R, G, D.GRPO)
        pos, neg = C.advantage_values(k, G)
        assert np.allclose(A[:k], pos) and np.allclose(A[k:], neg)


@pytest.mark.parametrize("dial", list(D.PRESETS.values()), ids=lambda d: d.name)
def test_silent_groups_give_exactly_zero_never_nan_in_every_dtype(dial):
    for value in (0.0, 1.0, 0.1, 1 / 3):
        for dtype in (np.float64, np.float32, np.float16):
            R = np.full(8, value, dtype=dtype)
            A = D.advantages(R, 4, dial)
            assert A.dtype == dtype
            assert np.all(A == 0) and not np.signbit(A).any()
        for tdtype in (torch.float32, torch.bfloat16, torch.float64):
            A = D.advantages(torch.full((8,), value, dtype=tdtype), 4, dial)
            assert A.dtype == tdtype and bool((A == 0).all())


def test_torch_and_numpy_agree_and_keep_shape_dtype_and_device():
    R = _batch(5, 4)
    for dial in D.PRESETS.values():
        t = torch.tensor(R, dtype=torch.float64)
        At = D.advantages(t, 4, dial)
        assert isinstance(At, torch.Tensor) and At.shape == t.shape and At.dtype == torch.float64
        assert np.allclose(At.numpy(), D.advantages(R, 4, dial), rtol=1e-14, atol=1e-14)
    t2 = torch.tensor(R.reshape(5, 4), dtype=torch.float32, requires_grad=False)
    assert D.advantages(t2, None, D.GRPO).shape == (5, 4)


def test_integer_and_boolean_rewards_are_promoted_to_float():
    A = D.advantages(np.array([1, 0, 0, 0]), 4)
    assert A.dtype == np.float64
    assert D.advantages(torch.tensor([True, False, True, True]), 2).dtype == torch.get_default_dtype()


def test_two_dimensional_rewards_are_groups_by_row():
    R = _batch(6, 4)
    assert np.array_equal(D.advantages(R.reshape(6, 4)).reshape(-1), D.advantages(R, 4))


def test_group_ids_layout_equals_the_contiguous_layout_after_unshuffling():
    G, n = 4, 7
    R = _batch(n, G)
    ids = np.repeat(np.arange(n), G)
    perm = RNG.permutation(n * G)
    shuffled = D.advantages(R[perm], None, D.GRPO, group_ids=ids[perm])
    assert np.allclose(shuffled, D.advantages(R, G, D.GRPO)[perm], rtol=1e-14, atol=1e-15)
    t = D.advantages(torch.tensor(R[perm]), None, D.RLOO, group_ids=torch.tensor(ids[perm]))
    assert np.allclose(t.numpy(), D.advantages(R, G, D.RLOO)[perm], rtol=1e-14, atol=1e-15)


def test_keep_mask_keeps_exactly_the_groups_with_nonzero_std():
    R = np.array([1, 1, 0, 1, 0, 0, 0.1, 0.1], dtype=np.float64)
    assert D.keep_mask(R, 2, D.DAPO).tolist() == [False, True, False, False]
    assert D.keep_mask(R, 2, D.GRPO).tolist() == [True, True, True, True]


@pytest.mark.parametrize("dial", list(D.PRESETS.values()), ids=lambda d: d.name)
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_a_group_whose_rewards_differ_by_1e_9_is_live_not_silent(dial, backend):
    # σ > 0 however small: silence is "every reward equal", never "max − min below a threshold"
    R = np.array([0.1, 0.1 + 1e-9, 1.0, 1.0])  # a live group, then a silent one
    A = np.asarray(D.advantages(torch.tensor(R) if backend == "torch" else R, 2, dial))
    assert A[0] < 0 < A[1] and A[0] != 0, A  # the higher reward gets the higher advantage
    assert D.keep_mask(torch.tensor(R) if backend == "torch" else R, 2, D.DAPO).tolist() == [True, False]
    if dial.scale == "group_std":  # ±(Δ/2)/(std + ε), std = (Δ/2)·√(2/(2 − ddof)), Δ = 1e-9
        assert np.allclose(
            A[:2], np.array([-1.0, 1.0]) * 5e-10 / (5e-10 * np.sqrt(2 / (2 - dial.ddof)) + dial.eps), rtol=1e-6
        )


@pytest.mark.parametrize("scale", ["none", "batch_std"])
def test_the_keep_rule_zeroes_the_dropped_groups_even_when_nothing_else_would(scale):
    # uncentred: a silent group of ones keeps its rewards under keep='all' and is zeroed by 'nonzero_std'
    R = np.array([1.0, 1.0, 0.0, 1.0, 2.0, 2.0])
    kept = D.Dial(centre="none", scale=scale, keep="all")
    dropped = kept.replace(keep="nonzero_std")
    assert np.all(D.advantages(R, 2, kept)[[0, 1, 4, 5]] != 0)
    A = D.advantages(R, 2, dropped)
    assert A[[0, 1, 4, 5]].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert np.array_equal(A[2:4], D.advantages(R, 2, kept)[2:4])
    assert D.keep_mask(R, 2, dropped).tolist() == [False, True, False]


def test_an_uncentred_batch_std_dial_gives_zeros_on_a_batch_of_equal_rewards():
    # the batch std is 0: nothing to divide by, and (R − 0)/0 must not leak inf or NaN
    with np.errstate(all="raise"):
        A = D.advantages(np.full(6, 2.0), 3, D.Dial(centre="none", scale="batch_std"))
    assert A.tolist() == [0.0] * 6


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_tensors_are_computed_in_float32_and_rounded_once(dtype):
    R = torch.tensor(_batch(16, 8, values=(0.0, 0.1, 0.3, 1.0)))
    want = D.advantages(R.to(dtype).to(torch.float32), 8, D.TRL).to(dtype)
    got = D.advantages(R.to(dtype), 8, D.TRL)
    assert got.dtype == dtype and torch.equal(got, want)


def test_replace_gives_a_custom_dial_and_params_name_every_setting():
    d = D.TRL.replace(eps=1e-3)
    assert (d.name, d.citation, d.eps, d.ddof) == ("custom", "", 1e-3, 1)
    assert D.TRL.params() == {
        "centre": "mean",
        "scale": "group_std",
        "ddof": 1,
        "eps": 1e-4,
        "keep": "all",
        "eps_where": "std",
    }
    assert D.DAPO.same_point(D.GRPO.replace(keep="nonzero_std")) and not D.DAPO.same_point(D.GRPO)


@pytest.mark.parametrize(
    "dial", [d for d in D.PRESETS.values()] + [D.GRPO.replace(scale="batch_std")], ids=lambda d: d.name
)
def test_identity_holds_in_vector_form_with_the_dial_coefficient(dial):
    G, n, dim = 8, 40, 17
    R = _batch(n, G)
    scores = RNG.normal(size=(n * G, dim))
    g = D.group_updates(D.advantages(R, G, dial), scores, G)
    k = R.reshape(n, G).sum(1)
    batch_std = float(R.std(ddof=dial.ddof)) if dial.scale == "batch_std" else None
    c = D.coefficient(k, G, dial, batch_std=batch_std)
    assert np.allclose(g, c[:, None] * D.score_gap(R, scores, G), rtol=1e-12, atol=1e-13)


def test_group_updates_and_score_gap_accept_torch_scores():
    R = torch.tensor(_batch(4, 4))
    s = torch.randn(16, 3, 2, dtype=torch.float64)
    g = D.group_updates(D.advantages(R, 4), s, 4)
    c = torch.as_tensor(D.coefficient(R.reshape(4, 4).sum(1).numpy(), 4, D.GRPO))
    assert torch.allclose(g, c[:, None] * D.score_gap(R, s, 4))


def test_coefficients_are_the_three_operations_on_sigma():
    k, G = np.arange(9), 8
    sigma = C.sigma(k, G)
    assert np.allclose(D.coefficient(k, G, D.GRPO), sigma)
    assert np.allclose(D.coefficient(k, G, D.DR_GRPO), sigma**2)
    assert np.allclose(D.coefficient(k, G, D.DAPO), np.where((k > 0) & (k < G), sigma, 0))
    assert np.allclose(D.coefficient(k, G, D.GRPO.replace(ddof=1)), np.sqrt((G - 1) / G) * sigma)
    assert np.allclose(D.coefficient(k, G, D.RLOO), G / (G - 1) * sigma**2)
    eps = 1e-4
    live = sigma > 0
    assert np.allclose(D.coefficient(k, G, D.GRPO.replace(eps=eps))[live], (sigma**2 / (sigma + eps))[live])
    assert np.allclose(
        D.coefficient(k, G, D.GRPO.replace(eps=eps, eps_where="variance"))[live],
        (sigma**2 / np.sqrt(sigma**2 + eps))[live],
    )


def test_preset_lookup_is_forgiving_about_spelling_and_strict_about_names():
    assert D.preset("Dr-GRPO") is D.DR_GRPO and D.preset("dr. grpo") is D.DR_GRPO
    with pytest.raises(ValueError, match="unknown preset 'ppo'"):
        D.preset("ppo")


def test_every_preset_cites_its_source():
    for d in D.PRESETS.values():
        assert d.citation and "\n" not in d.citation


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: D.advantages(np.zeros(7), 4), "rewards length 7 is not a positive multiple of group size 4"),
        (lambda: D.advantages(np.zeros(8), 1), "group size G must be an integer >= 2, got 1"),
        (lambda: D.advantages(np.zeros(8), 2.5), "got 2.5"),
        (lambda: D.advantages(np.array([0, np.nan]), 2), "rewards must be finite, got nan"),
        (lambda: D.advantages(torch.tensor([0.0, float("inf")]), 2), "rewards must be finite, got inf"),
        (lambda: D.advantages(np.zeros(8)), "group_size is required"),
        (lambda: D.advantages(np.zeros(6), None, group_ids=[0, 0, 0, 1, 1]), "one reward per id"),
        (lambda: D.Dial(ddof=2), "ddof must be 0 or 1, got 2"),
        (lambda: D.Dial(eps=-1.0), "eps must be a finite number >= 0, got -1.0"),
        (lambda: D.Dial(centre="median"), "centre must be one of"),
        (lambda: D.Dial(eps_where="mean"), "eps_where must be one of"),
        (lambda: D.coefficient(1, 4, D.GRPO.replace(centre="none")), "uncentred"),
        (lambda: D.coefficient(1, 4, D.GRPO.replace(scale="batch_std")), "batch_std > 0"),
    ],
)
def test_bad_input_raises_a_value_error_naming_the_value(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --- properties of the dial over random rewards and random settings ----------------------------
_BINARY = st.sampled_from([0.0, 1.0])
# three decimals: two unequal rewards differ by at least 1e-3, so no advantage is a cancellation
# of nearly equal numbers and rounding stays far below the tolerances below
_CONTINUOUS = st.integers(-10_000, 10_000).map(lambda i: i / 1000)
_CENTRES = ("mean", "loo", "none")
_SCALES = ("group_std", "batch_std", "none")
_KEEPS = ("all", "nonzero_std")


def dials(
    *,
    centres: tuple[str, ...] = _CENTRES,
    scales: tuple[str, ...] = _SCALES,
    keeps: tuple[str, ...] = _KEEPS,
) -> st.SearchStrategy[D.Dial]:
    """Dials with the given centres, scales and keep rules, and any ddof, ε and place of ε."""
    return st.builds(
        D.Dial,
        centre=st.sampled_from(centres),
        scale=st.sampled_from(scales),
        ddof=st.sampled_from([0, 1]),
        eps=st.one_of(st.just(0.0), st.floats(1e-9, 1.0)),
        keep=st.sampled_from(keeps),
        eps_where=st.sampled_from(["std", "variance"]),
    )


@st.composite
def reward_batches(
    draw: st.DrawFn,
    *,
    kinds: tuple[str, ...] = ("binary", "continuous", "silent"),
    max_groups: int = 6,
    max_size: int = 8,
) -> tuple[np.ndarray, int]:
    """(rewards laid out group by group, G): each group of one of ``kinds``, binary, continuous
    or silent (all rewards equal)."""
    G = draw(st.integers(2, max_size))
    groups = []
    for _ in range(draw(st.integers(1, max_groups))):
        kind = draw(st.sampled_from(kinds))
        if kind == "silent":
            groups.append([draw(st.one_of(_BINARY, _CONTINUOUS))] * G)
        else:
            values = _BINARY if kind == "binary" else _CONTINUOUS
            groups.append(draw(st.lists(values, min_size=G, max_size=G)))
    return np.array(groups, dtype=np.float64).reshape(-1), G


def _silent(R: np.ndarray, G: int) -> np.ndarray:
    """One bool per group: every reward of the group equal."""
    groups = R.reshape(-1, G)
    return (groups == groups[:, :1]).all(1)


@settings(max_examples=80)
@given(batch=reward_batches(), dial=dials(centres=("mean", "loo")))
def test_centred_advantages_sum_to_zero_in_every_group(batch, dial):
    R, G = batch
    A = D.advantages(R, G, dial).reshape(-1, G)
    assert np.all(np.abs(A.sum(1)) <= 1e-9 * (1 + np.abs(A).max(1))), A.sum(1)


@settings(max_examples=100)
@given(batch=reward_batches(kinds=("continuous", "silent")), dial=dials())
def test_a_silent_group_gets_exactly_positive_zero_when_the_dial_centres_or_drops_it(batch, dial):
    # a silent group of 0.1s has the mean 0.10000000000000002 at G = 3: zero by rule, not by rounding
    R, G = batch
    silent = _silent(R, G)
    for centre, scale, keep in itertools.product(_CENTRES, _SCALES, _KEEPS):
        if centre == "none" and keep == "all":
            continue  # nothing centres or drops the group: it keeps its rewards
        A = D.advantages(R, G, dial.replace(centre=centre, scale=scale, keep=keep)).reshape(-1, G)[silent]
        assert np.all(A == 0) and not np.signbit(A).any(), (centre, scale, keep, A)


@settings(max_examples=60)
@given(batch=reward_batches(), dial=dials(), data=st.data())
def test_permuting_the_rewards_within_a_group_permutes_their_advantages(batch, dial, data):
    R, G = batch
    starts = range(0, R.size, G)
    perm = np.concatenate([start + np.array(data.draw(st.permutations(range(G)))) for start in starts])
    np.testing.assert_allclose(D.advantages(R[perm], G, dial), D.advantages(R, G, dial)[perm], rtol=1e-9, atol=1e-12)


@settings(max_examples=60)
@given(batch=reward_batches(), dial=dials(scales=("group_std", "none")))
def test_with_a_group_level_scale_a_group_gets_the_advantages_it_gets_alone(batch, dial):
    R, G = batch
    alone = np.concatenate([D.advantages(group, G, dial) for group in R.reshape(-1, G)])
    np.testing.assert_allclose(D.advantages(R, G, dial), alone, rtol=1e-12, atol=1e-15)


@settings(max_examples=80)
@given(G=st.integers(2, 16), data=st.data(), dial=dials(centres=("mean", "loo")))
def test_the_coefficient_is_k_over_g_times_the_advantage_of_a_correct_answer(G, data, dial):
    k = data.draw(st.integers(0, G), label="k")
    group = np.array([1.0] * k + [0.0] * (G - k))
    R = np.concatenate([group, [1.0] + [0.0] * (G - 1)])  # a live second group: the batch std is > 0
    batch_std = float(R.std(ddof=dial.ddof)) if dial.scale == "batch_std" else None
    plus = D.advantages(R, G, dial)[0]  # Â₊, the advantage of a correct answer (when k > 0)
    want = k / G * plus if k else 0.0
    assert D.coefficient(k, G, dial, batch_std=batch_std) == pytest.approx(want, rel=1e-12, abs=1e-15)


@settings(max_examples=60)
@given(batch=reward_batches(), dial=dials())
def test_numpy_and_torch_give_the_same_advantages(batch, dial):
    R, G = batch
    At = D.advantages(torch.tensor(R), G, dial)
    np.testing.assert_allclose(At.numpy(), D.advantages(R, G, dial), rtol=1e-12, atol=1e-12)


@settings(max_examples=60)
@given(batch=reward_batches(), dial=dials(centres=("mean", "loo")), shift=st.integers(-5, 5))
def test_a_constant_added_to_every_reward_changes_no_advantage_of_a_centred_dial(batch, dial, shift):
    R, G = batch
    np.testing.assert_allclose(D.advantages(R + shift, G, dial), D.advantages(R, G, dial), rtol=1e-9, atol=1e-9)


def test_groups_of_different_sizes_are_each_their_own_group_and_a_lone_answer_gets_zero():
    r = np.array([1.0, 0.0, 0.0, 5.0, 3.0, 2.0])
    ids = np.array([4, 4, 4, 9, 1, 1])  # sizes 3, 1, 2
    for dial in (D.GRPO, D.DR_GRPO, D.RLOO, D.TRL):
        A = D.advantages(r, dial=dial, group_ids=ids)
        assert A[3] == 0.0  # the lone answer: σ = 0, no group to centre on
        assert np.allclose(A[:3], D.advantages(r[:3], 3, dial)) and np.allclose(A[4:], D.advantages(r[4:], 2, dial))
    order = np.random.default_rng(0).permutation(6)
    assert np.allclose(
        D.advantages(r[order], dial=D.GRPO, group_ids=ids[order]), D.advantages(r, dial=D.GRPO, group_ids=ids)[order]
    )
