"""The audit against a corpus of implementations (``checks.auditor`` end to end): correct
advantage functions and group filters written in several styles (vectorised, loops, torch,
pandas, bf16) pass and match the preset they are written to, and realistic bugs (mutants) are all
caught, each with the verdict it must get: 'fail' for a broken identity, 'deviation' for a
bounded factor (Bessel, a visible ε, a constant).

Each implementation is written here from the paper's formulas, independently of the dial, so the
audit compares two separate codes.
"""

from __future__ import annotations

import numpy as np
import pytest

from grpo_identity.checks import audit

# --- correct implementations ---------------------------------------------------------------------


def grpo_vectorised(rewards, G):
    R = rewards.reshape(-1, G)
    mu = R.mean(1, keepdims=True)
    sd = R.std(1, keepdims=True)
    live = np.ptp(R, 1, keepdims=True) > 0  # exact test: np.std of [0.1]*G need not be 0
    return np.divide(R - mu, sd, out=np.zeros_like(R), where=live).reshape(-1)


def grpo_loops(rewards, G):
    out = []
    for start in range(0, len(rewards), G):
        group = [float(x) for x in rewards[start : start + G]]
        mu = sum(group) / G
        sd = (sum((x - mu) ** 2 for x in group) / G) ** 0.5
        out += [(x - mu) / sd if len(set(group)) > 1 else 0.0 for x in group]
    return np.array(out)


def grpo_torch(rewards, G):
    import torch

    R = torch.as_tensor(rewards).view(-1, G)
    mu, sd = R.mean(1, keepdim=True), R.std(1, unbiased=False, keepdim=True)
    live = R.amax(1, keepdim=True) > R.amin(1, keepdim=True)
    return torch.where(live, (R - mu) / torch.where(live, sd, torch.ones_like(sd)), torch.zeros_like(R)).view(-1)


def dr_grpo_vectorised(rewards, G):
    R = rewards.reshape(-1, G)
    return (R - R.mean(1, keepdims=True)).reshape(-1)


def rloo_loops(rewards, G):
    out = np.empty_like(rewards)
    for g in range(len(rewards) // G):
        block = rewards[g * G : (g + 1) * G]
        total = block.sum()
        for i in range(G):
            out[g * G + i] = block[i] - (total - block[i]) / (G - 1)
    return out


def trl_style_torch(rewards, G):
    import torch

    r = torch.as_tensor(rewards, dtype=torch.float32)  # TRL's arithmetic in fp32 …
    mean = r.view(-1, G).mean(1).repeat_interleave(G)
    std = r.view(-1, G).std(1).repeat_interleave(G)
    return ((r - mean) / (std + 1e-4)).double()  # … handed back in the caller's float64


def dapo_filter_vectorised(rewards, G):
    return np.ptp(rewards.reshape(-1, G), 1) > 0


def dapo_filter_loops(rewards, G):
    return np.array([len(set(rewards[i : i + G].tolist())) > 1 for i in range(0, len(rewards), G)])


def grpo_reduceat(rewards, G):
    starts = np.arange(0, len(rewards), G)
    d = rewards - np.repeat(np.add.reduceat(rewards, starts) / G, G)
    sd = np.repeat(np.sqrt(np.add.reduceat(d * d, starts) / G), G)
    live = np.repeat(np.maximum.reduceat(rewards, starts) > np.minimum.reduceat(rewards, starts), G)
    return np.where(live, d / np.where(live, sd, 1.0), 0.0)


def grpo_pandas(rewards, G):
    pd = pytest.importorskip("pandas")
    by = pd.Series(rewards).groupby(np.arange(len(rewards)) // G)
    mu, sd = by.transform("mean"), by.transform(lambda x: x.std(ddof=0))
    live = by.transform("max") > by.transform("min")
    return np.where(live, (rewards - mu) / sd.where(live, 1.0), 0.0)


def grpo_torch_scatter(rewards, G):
    import torch

    r = torch.as_tensor(rewards)
    idx = torch.arange(len(r)) // G  # group id of each row
    n = int(idx[-1]) + 1
    d = r - (torch.zeros(n, dtype=r.dtype).scatter_add_(0, idx, r) / G)[idx]
    sd = (torch.zeros(n, dtype=r.dtype).scatter_add_(0, idx, d * d) / G).sqrt()[idx]
    hi = torch.full((n,), -torch.inf, dtype=r.dtype).scatter_reduce(0, idx, r, "amax")
    lo = torch.full((n,), torch.inf, dtype=r.dtype).scatter_reduce(0, idx, r, "amin")
    live = (hi > lo)[idx]
    return torch.where(live, d / torch.where(live, sd, torch.ones_like(sd)), torch.zeros_like(d))


def rloo_as_scaled_mean_centre(rewards, G):
    R = rewards.reshape(-1, G)
    return (G / (G - 1) * (R - R.mean(1, keepdims=True))).reshape(-1)


def grpo_bf16_arithmetic(rewards, G):
    import torch

    R = torch.as_tensor(rewards, dtype=torch.bfloat16).view(-1, G)  # computes in bf16 …
    sd = R.float().std(1, unbiased=False, keepdim=True).to(torch.bfloat16)
    live = R.amax(1, keepdim=True) > R.amin(1, keepdim=True)
    A = torch.where(
        live, (R - R.mean(1, keepdim=True)) / torch.where(live, sd, torch.ones_like(sd)), torch.zeros_like(R)
    )
    return A.view(-1).double()  # … and hands back float64


#: (implementation, kind, expected preset or None for any, the preset it is written to match)
CORRECT = [
    (grpo_vectorised, "advantage", "grpo", "grpo"),
    (grpo_loops, "advantage", "grpo", "grpo"),
    (grpo_torch, "advantage", "grpo", "grpo"),
    (dr_grpo_vectorised, "advantage", "dr_grpo", "dr_grpo"),
    (rloo_loops, "advantage", "rloo", "rloo"),
    (trl_style_torch, "advantage", "trl", "trl"),
    (grpo_vectorised, "advantage", None, "grpo"),
    (dapo_filter_vectorised, "filter", "dapo", "dapo"),
    (dapo_filter_loops, "filter", None, "dapo"),
    (grpo_reduceat, "advantage", "grpo", "grpo"),
    (grpo_pandas, "advantage", "grpo", "grpo"),
    (grpo_torch_scatter, "advantage", "grpo", "grpo"),
    (rloo_as_scaled_mean_centre, "advantage", "rloo", "rloo"),
    (grpo_bf16_arithmetic, "advantage", "grpo", "grpo"),
]


# --- mutants -------------------------------------------------------------------------------------
def _grpo(R, mu=None, sd=None):
    mu = R.mean(1, keepdims=True) if mu is None else mu
    sd = R.std(1, keepdims=True) if sd is None else sd
    return np.divide(R - mu, sd, out=np.zeros_like(R), where=np.ptp(R, 1, keepdims=True) > 0)


def batch_std(rewards, G):
    R = rewards.reshape(-1, G)
    return ((R - R.mean(1, keepdims=True)) / (rewards.std() + 1e-8)).reshape(-1)


def batch_mean(rewards, G):
    return _grpo(rewards.reshape(-1, G), mu=rewards.mean()).reshape(-1)


def transposed_layout(rewards, G):
    R = rewards.reshape(G, -1).T  # (n, G) read column-wise: the groups are mixed
    return _grpo(np.ascontiguousarray(R)).T.reshape(-1)


def nan_on_silent(rewards, G):
    R = rewards.reshape(-1, G)
    with np.errstate(invalid="ignore", divide="ignore"):
        return ((R - R.mean(1, keepdims=True)) / R.std(1, keepdims=True)).reshape(-1)


def clipped(rewards, G):
    return np.clip(grpo_vectorised(rewards, G), -2.0, 2.0)


def missing_baseline(rewards, G):
    R = rewards.reshape(-1, G)
    return _grpo(R, mu=np.zeros((R.shape[0], 1))).reshape(-1)


def sign_flip(rewards, G):
    return -grpo_vectorised(rewards, G)


def off_by_one_mean(rewards, G):
    R = rewards.reshape(-1, G)
    return _grpo(R, mu=R.sum(1, keepdims=True) / (G - 1)).reshape(-1)


def wrong_rloo_denominator(rewards, G):
    R = rewards.reshape(-1, G)
    return (R - (R.sum(1, keepdims=True) - R) / G).reshape(-1)


def median_centre(rewards, G):
    R = rewards.reshape(-1, G)
    return _grpo(R, mu=np.median(R, 1, keepdims=True)).reshape(-1)


def max_normalised(rewards, G):
    R = rewards.reshape(-1, G)
    A = R - R.mean(1, keepdims=True)
    m = np.abs(A).max(1, keepdims=True)
    return np.divide(A, m, out=np.zeros_like(A), where=m > 0).reshape(-1)


_EMA = {"sd": None}


def smoothed_across_calls(rewards, G):
    R = rewards.reshape(-1, G)
    sd = R.std(1, keepdims=True).mean()
    _EMA["sd"] = sd if _EMA["sd"] is None else 0.9 * _EMA["sd"] + 0.1 * sd
    return ((R - R.mean(1, keepdims=True)) / (_EMA["sd"] + 1e-6)).reshape(-1)


def variance_scale(rewards, G):
    R = rewards.reshape(-1, G)
    return _grpo(R, sd=R.var(1, keepdims=True)).reshape(-1)


def sorted_without_unsort(rewards, G):
    R = np.sort(rewards.reshape(-1, G), axis=1)
    return _grpo(R).reshape(-1)


def noisy(rewards, G):
    return grpo_vectorised(rewards, G) + np.random.default_rng().normal(0, 1e-3, rewards.shape)


def integer_output(rewards, G):
    return np.rint(grpo_vectorised(rewards, G)).astype(np.int64)


def two_d_output(rewards, G):
    return grpo_vectorised(rewards, G).reshape(-1, G)


def silent_gets_one(rewards, G):
    R = rewards.reshape(-1, G)
    return np.where(np.ptp(R, 1, keepdims=True) > 0, _grpo(R), 1.0).reshape(-1)


def last_group_skipped(rewards, G):
    out = np.zeros_like(rewards)
    n = len(rewards) // G
    for g in range(n - 1):  # off by one: the last group keeps zeros
        out[g * G : (g + 1) * G] = grpo_vectorised(rewards[g * G : (g + 1) * G], G)
    return out if n > 1 else grpo_vectorised(rewards, G) * 0 + rewards - rewards.mean()


def shifted_numerator(rewards, G):
    R = rewards.reshape(-1, G)
    return _grpo(R, mu=R.mean(1, keepdims=True) - 1e-3).reshape(-1)


def silent_test_by_std(rewards, G):
    R = rewards.reshape(-1, G)
    mu, sd = R.mean(1, keepdims=True), R.std(1, keepdims=True)
    # the textbook guard: np.std of [0.1]*G is ~1e-17, not 0, so silent groups get ±1
    return np.divide(R - mu, sd, out=np.zeros_like(R), where=sd > 0).reshape(-1)


def bessel_torch(rewards, G):
    import torch

    R = torch.as_tensor(rewards).view(-1, G)
    sd = R.std(1, keepdim=True)  # torch default: ddof 1
    live = R.amax(1, keepdim=True) > R.amin(1, keepdim=True)
    return torch.where(live, (R - R.mean(1, keepdim=True)) / torch.where(live, sd, 1.0), 0.0).view(-1)


def large_eps(rewards, G):
    R = rewards.reshape(-1, G)
    return ((R - R.mean(1, keepdims=True)) / (R.std(1, keepdims=True) + 0.05)).reshape(-1)


def rloo_divided_by_std(rewards, G):
    return _grpo(rewards.reshape(-1, G)).reshape(-1) * G / (G - 1)


def filter_drops_only_all_wrong(rewards, G):
    return rewards.reshape(-1, G).sum(1) > 0


def filter_threshold(rewards, G):
    return rewards.reshape(-1, G).std(1) > 1e-3


def filter_binary_only(rewards, G):
    m = rewards.reshape(-1, G).mean(1)
    return (m != 0) & (m != 1)


def filter_keeps_all(rewards, G):
    return np.ones(len(rewards) // G, dtype=bool)


# more realistic bugs: layout, dtype, purity, scale forms
def std_over_wrong_axis(rewards, G):
    R = rewards.reshape(-1, G)
    sd = R.std(0, keepdims=True)  # (1, G): across groups, per position
    return np.divide(
        R - R.mean(1, keepdims=True), sd + 1e-8, out=np.zeros_like(R), where=np.ptp(R, 1, keepdims=True) > 0
    ).reshape(-1)


def eps_inside_sqrt(rewards, G):
    R = rewards.reshape(-1, G)
    return ((R - R.mean(1, keepdims=True)) / np.sqrt(R.var(1, keepdims=True) + 1e-2)).reshape(-1)


def integer_division_mean(rewards, G):
    R = rewards.reshape(-1, G)
    return _grpo(R, mu=R.sum(1, keepdims=True) // G).reshape(-1)


def float32_for_float64(rewards, G):
    return grpo_vectorised(rewards, G).astype(np.float32)


def reshape_off_by_one(rewards, G):
    g = G - 1 if G > 2 else G
    out = np.zeros_like(rewards)
    m = len(rewards) // g * g
    out[:m] = _grpo(rewards[:m].reshape(-1, g)).reshape(-1)
    return out


def mutates_input_rewards(rewards, G):
    R = rewards.reshape(-1, G)  # a view: the caller's rewards become advantages
    sd = R.std(1, keepdims=True)
    R -= R.mean(1, keepdims=True)
    np.divide(R, sd, out=R, where=np.ptp(R, 1, keepdims=True) > 0)
    return rewards


def std_only_when_above_one(rewards, G):
    R = rewards.reshape(-1, G)
    A, sd = R - R.mean(1, keepdims=True), R.std(1, keepdims=True)
    return np.where(sd > 1, A / np.where(sd > 1, sd, 1.0), A).reshape(-1)


def clipped_to_unit(rewards, G):
    return np.clip(grpo_vectorised(rewards, G), -1.0, 1.0)


def range_normalised(rewards, G):
    R = rewards.reshape(-1, G)
    span = np.ptp(R, 1, keepdims=True)
    return np.divide(R - R.mean(1, keepdims=True), span, out=np.zeros_like(R), where=span > 0).reshape(-1)


def loo_over_G_rescaled(rewards, G):
    R = rewards.reshape(-1, G)
    return ((R - (R.sum(1, keepdims=True) - R) / G) * (G - 1) / G).reshape(-1)


def returns_a_list(rewards, G):
    return grpo_vectorised(rewards, G).tolist()


def hard_coded_group_size_8(rewards, G):
    return grpo_vectorised(rewards, 8 if len(rewards) % 8 == 0 else G)


def centred_then_global_std(rewards, G):
    A = rewards.reshape(-1, G) - rewards.reshape(-1, G).mean(1, keepdims=True)
    s = A.std()
    return (A / s if s > 0 else A).reshape(-1)


def reversed_within_group(rewards, G):
    return grpo_vectorised(rewards, G).reshape(-1, G)[:, ::-1].reshape(-1)


def scaled_by_sqrt_group_size(rewards, G):
    return grpo_vectorised(rewards, G) / np.sqrt(G)


def doubled(rewards, G):
    return 2.0 * grpo_vectorised(rewards, G)


def eps_grows_with_batch(rewards, G):
    R = rewards.reshape(-1, G)
    return ((R - R.mean(1, keepdims=True)) / (R.std(1, keepdims=True) + 1e-4 * len(rewards))).reshape(-1)


def bf16_returned_as_bf16(rewards, G):
    import torch

    return torch.as_tensor(grpo_bf16_arithmetic(rewards, G), dtype=torch.bfloat16)


def binary_sigma_formula(rewards, G):
    R = rewards.reshape(-1, G)
    p = R.mean(1, keepdims=True)
    sd = np.sqrt(np.clip(p * (1 - p), 0, None))  # σ = √(p(1−p)): right for {0, 1} only
    return np.divide(R - p, sd, out=np.zeros_like(R), where=sd > 0).reshape(-1)


def clips_rewards_to_unit_interval(rewards, G):
    return grpo_vectorised(np.clip(rewards, 0.0, 1.0), G)


_CACHE: dict = {}


def cached_by_shape(rewards, G):
    key = (rewards.shape, G)
    if key not in _CACHE:
        _CACHE[key] = grpo_vectorised(rewards, G)
    return _CACHE[key]


_BUFFER: dict = {}


def shared_output_buffer(rewards, G):
    buf = _BUFFER.setdefault(rewards.shape, np.empty_like(rewards))
    buf[:] = grpo_vectorised(rewards, G)
    return buf


def rank_based(rewards, G):
    ranks = rewards.reshape(-1, G).argsort(1).argsort(1).astype(np.float64)
    return _grpo(ranks).reshape(-1)


def filter_mean_strictly_between_0_and_1(rewards, G):
    m = rewards.reshape(-1, G).mean(1)
    return (m > 0) & (m < 1)


def filter_std_positive(rewards, G):
    return rewards.reshape(-1, G).std(1) > 0  # np.std of [0.1]*3 is 1.4e-17


def filter_one_bool_per_row(rewards, G):
    return np.repeat(np.ptp(rewards.reshape(-1, G), 1) > 0, G)


def filter_mutates_input(rewards, G):
    R = rewards.reshape(-1, G)
    R -= R.mean(1, keepdims=True)
    return np.abs(R).max(1) > 0


MUTANTS = [
    (batch_std, "advantage", "grpo", "fail"),
    (batch_mean, "advantage", "grpo", "fail"),
    (transposed_layout, "advantage", "grpo", "fail"),
    (nan_on_silent, "advantage", "grpo", "fail"),
    (clipped, "advantage", "grpo", "fail"),
    (missing_baseline, "advantage", "grpo", "fail"),
    (sign_flip, "advantage", "grpo", "fail"),
    (off_by_one_mean, "advantage", "grpo", "fail"),
    (wrong_rloo_denominator, "advantage", "rloo", "fail"),
    (median_centre, "advantage", "grpo", "fail"),
    (max_normalised, "advantage", "grpo", "fail"),
    (smoothed_across_calls, "advantage", "grpo", "fail"),
    (variance_scale, "advantage", "grpo", "fail"),
    (sorted_without_unsort, "advantage", "grpo", "fail"),
    (noisy, "advantage", "grpo", "fail"),
    (integer_output, "advantage", "grpo", "fail"),
    (two_d_output, "advantage", "grpo", "fail"),
    (silent_gets_one, "advantage", "grpo", "fail"),
    (last_group_skipped, "advantage", "grpo", "fail"),
    (shifted_numerator, "advantage", "grpo", "fail"),
    (silent_test_by_std, "advantage", "grpo", "fail"),
    (rloo_divided_by_std, "advantage", "rloo", "fail"),
    (dr_grpo_vectorised, "advantage", "grpo", "fail"),
    (bessel_torch, "advantage", "grpo", "deviation"),
    (large_eps, "advantage", "grpo", "deviation"),
    (filter_drops_only_all_wrong, "filter", "dapo", "fail"),
    (filter_threshold, "filter", "dapo", "deviation"),  # σ > 1e-3: a tolerance, named
    (filter_binary_only, "filter", "dapo", "fail"),
    (filter_keeps_all, "filter", "dapo", "fail"),
    (std_over_wrong_axis, "advantage", "grpo", "fail"),
    (eps_inside_sqrt, "advantage", "grpo", "deviation"),
    (integer_division_mean, "advantage", "grpo", "fail"),
    (reshape_off_by_one, "advantage", "grpo", "fail"),
    (mutates_input_rewards, "advantage", "grpo", "fail"),
    (std_only_when_above_one, "advantage", "grpo", "fail"),
    (clipped_to_unit, "advantage", "grpo", "fail"),
    (range_normalised, "advantage", "grpo", "fail"),
    (loo_over_G_rescaled, "advantage", "rloo", "fail"),
    (returns_a_list, "advantage", "grpo", "fail"),
    (hard_coded_group_size_8, "advantage", "grpo", "fail"),
    (centred_then_global_std, "advantage", "grpo", "fail"),
    (reversed_within_group, "advantage", "grpo", "fail"),
    (scaled_by_sqrt_group_size, "advantage", "grpo", "deviation"),  # a factor of G alone, 1/√G
    (doubled, "advantage", "grpo", "deviation"),
    (eps_grows_with_batch, "advantage", "grpo", "fail"),
    (binary_sigma_formula, "advantage", "grpo", "fail"),
    (clips_rewards_to_unit_interval, "advantage", "grpo", "fail"),
    (cached_by_shape, "advantage", "grpo", "fail"),
    (shared_output_buffer, "advantage", "grpo", "fail"),
    (rank_based, "advantage", "grpo", "fail"),
    (filter_mean_strictly_between_0_and_1, "filter", "dapo", "fail"),
    (filter_std_positive, "filter", "dapo", "fail"),
    (filter_one_bool_per_row, "filter", "dapo", "fail"),
    (filter_mutates_input, "filter", "dapo", "fail"),
]


# handed back in the dtype they computed in: judged at that precision, as trainers compute
CORRECT += [
    (float32_for_float64, "advantage", "grpo", "grpo"),
    (bf16_returned_as_bf16, "advantage", "grpo", "grpo"),
]


@pytest.mark.slow
@pytest.mark.parametrize("fn, kind, expect, matches", CORRECT, ids=[f"{f.__name__}-{e}" for f, _, e, _ in CORRECT])
def test_correct_implementations_pass_the_audit(fn, kind, expect, matches):
    report = audit(fn, kind=kind, expect=expect)
    assert report.verdict == "pass", report.format()
    assert report.matches == matches
    assert not [f for f in report.findings if f.severity != "note"]


@pytest.mark.slow
@pytest.mark.parametrize("fn, kind, expect, verdict", MUTANTS, ids=[f.__name__ for f, *_ in MUTANTS])
def test_every_mutant_is_caught(fn, kind, expect, verdict):
    _EMA["sd"] = None
    _CACHE.clear()
    _BUFFER.clear()
    report = audit(fn, kind=kind, expect=expect, max_examples=100)  # half the default: caught even so
    assert report.verdict == verdict, report.format()
    assert report.findings, "a caught bug must come with a finding"
    f = next(f for f in report.findings if f.severity == verdict)
    assert f.message and f.property


def test_the_corpus_is_large_enough():
    assert len(MUTANTS) >= 20 and len({f for f, *_ in MUTANTS}) == len(MUTANTS)
    assert len(CORRECT) >= 6 and all(matches is not None for *_, matches in CORRECT)
