"""The split-step audit (``checks.measure.steps``): the weight law with its scope, split invariance, masked
normalisers and ragged groups, on step targets made of numpy whose answer is known."""

from __future__ import annotations

import numpy as np
import pytest

from grpo_identity.checks.gradient import audit_gradient
from grpo_identity.checks.measure import steps as S
from grpo_identity.checks.report import WEIGHTS

T = 6


def target(**kw):
    def fn(r, G, L, request=None):
        return S.micro_batch_mean(r, G, L, request, **kw)

    return fn


GEO = S.geometry(4, 16, 16, holes=True, truncation=True)


# --- the probe batches ---------------------------------------------------------------------------
def test_the_design_gives_steps_and_micro_batches_of_unequal_token_counts_and_silent_and_live_groups():
    d = S.design(GEO, T)
    assert d.rewards.size == 32 and set(d.sizes) == {4}
    per_batch = d.lengths.reshape(2, 16).sum(1)
    assert per_batch[0] != per_batch[1]  # the two steps hold different token totals
    halves = d.lengths.reshape(4, 8).sum(1)
    assert halves[0] != halves[1]  # two micro-batches of a step hold different token totals
    R = d.rewards.reshape(-1, 4)
    assert np.any(np.ptp(R, axis=1) == 0) and np.any(np.ptp(R, axis=1) > 0)
    assert d.lengths.min() >= S.MIN_LENGTH and d.lengths.max() <= T
    assert d.holes.sum() > 0 and d.truncated.sum() == 2
    live = np.repeat(np.ptp(R, axis=1) > 0, 4)
    assert np.all(live[d.truncated])  # a truncated answer carries weight unless masked


@pytest.mark.parametrize(
    "step_rows, generation_rows, rows",
    [(16, 16, 32), (8, 16, 32), (16, 8, 32), (20, 12, 120), (12, 8, 24)],
)
def test_a_probe_holds_whole_optimizer_steps_and_whole_generation_batches(step_rows, generation_rows, rows):
    geo = S.geometry(4, step_rows, generation_rows)
    d = S.design(geo, T)
    assert d.rewards.size == rows
    assert rows % step_rows == 0 and rows % generation_rows == 0 and rows >= 2 * max(step_rows, generation_rows)


def test_a_step_whose_probe_would_be_too_large_is_refused_in_words():
    assert S.check_geometry(S.geometry(4, 12, 16)) is None  # 96 answers
    message = S.check_geometry(S.geometry(4, 60, 64))  # 1920 answers
    assert message is not None and "divide one another" in message and "1920" in message


def test_a_target_that_cannot_mask_gets_no_masked_tokens():
    d = S.design(S.geometry(4, 8, 8), T)
    assert d.holes.sum() == 0 and d.truncated.sum() == 0


# --- the weight law and its scope ----------------------------------------------------------------
@pytest.mark.parametrize(
    "scope, split_law, unsplit_law",
    [
        ("micro_batch", "1/micro_batch_tokens", "1/step_tokens"),
        ("step", "1/step_tokens", "1/step_tokens"),
        ("length", "1/length", "1/length"),
        ("constant", "constant", "constant"),
    ],
)
def test_the_law_of_each_layout_names_its_denominators_scope(scope, split_law, unsplit_law):
    out = S.audit_step(target(scope=scope), GEO)
    assert (out.law_split, out.law_unsplit) == (split_law, unsplit_law)
    assert out.invariant is (split_law == unsplit_law)


def test_every_law_the_fit_can_name_is_explained_in_the_report():
    assert {name for name, *_ in S._CANDIDATES} <= set(WEIGHTS)


# --- split invariance ----------------------------------------------------------------------------
def test_a_micro_batch_normaliser_fails_with_each_micro_batchs_weight_over_the_unsplit_steps():
    out = S.audit_step(target(scope="micro_batch", micro_batches=4), GEO)
    (finding,) = [f for f in out.findings if f.property == "split_invariance"]
    assert finding.severity == "fail"
    pieces = finding.counterexample["micro_batches"]
    assert len(pieces) == 4
    step_tokens = sum(p["tokens"] for p in pieces)
    measured = [(p["weight_ratio"], p["tokens"]) for p in pieces if p["weight_ratio"] is not None]
    assert len({round(x, 9) for x, _ in measured}) > 1
    # a micro-batch's weight over the step's is (step tokens)/(pieces·its tokens): fewer tokens, more weight
    assert [x for x, _ in measured] == pytest.approx([step_tokens / (4 * t) for _, t in measured], rel=1e-9)


def test_a_loss_scaled_by_the_split_is_a_deviation_with_its_factor():
    out = S.audit_step(target(scope="step", scale=2.0), GEO)
    (finding,) = out.findings
    assert (finding.property, finding.severity) == ("split_invariance", "deviation")
    assert finding.counterexample["factor"] == pytest.approx(2.0)
    assert out.law_split == out.law_unsplit == "1/step_tokens"


def test_a_step_normalised_by_its_own_tokens_is_invariant_and_every_micro_batch_weighs_one():
    out = S.audit_step(target(scope="step", micro_batches=4), GEO)
    assert out.invariant and not out.findings
    ratios = [p["weight_ratio"] for p in out.pieces if p["weight_ratio"] is not None]
    assert len(ratios) >= 4 and ratios == pytest.approx([1.0] * len(ratios))
    assert len({p["tokens"] for p in out.pieces}) > 1  # pieces of unequal size, equal weight


# --- masked tokens -------------------------------------------------------------------------------
def test_a_normaliser_that_counts_masked_tokens_is_a_finding():
    out = S.audit_step(target(scope="step", count_masked=True), GEO)
    (finding,) = out.findings
    assert finding.property == "masked_normaliser" and finding.severity == "fail"
    d = S.design(GEO, T)
    assert np.any(d.truncated & (d.holes > 0))  # a hole inside a truncated answer: counted once, with the answer
    assert finding.counterexample["masked_tokens"] == int(d.lengths[d.truncated].sum() + d.holes[~d.truncated].sum())


def test_a_normaliser_that_counts_only_the_losss_tokens_is_no_finding():
    assert not S.audit_step(target(scope="step"), GEO).findings


# --- ragged groups -------------------------------------------------------------------------------
def _by_sizes(fixed_blocks: bool):
    def fn(r, G, L, request=None):
        sizes = request["sizes"] if request else [G] * (len(r) // G)
        A = np.zeros(len(r))
        if fixed_blocks:  # reshape by G whatever the rollout delivered
            whole = len(r) // G * G
            R = r[:whole].reshape(-1, G)
            A[:whole] = (R - R.mean(1, keepdims=True)).reshape(-1)
        else:
            start = 0
            for size in sizes:
                block = r[start : start + size]
                A[start : start + size] = block - block.mean()
                start += size
        out = S.micro_batch_mean(np.zeros(len(r)), 1, L, request)
        return {**out, "advantages": A}

    return fn


@pytest.mark.parametrize("fixed_blocks", [True, False])
def test_a_short_group_sliced_as_a_fixed_block_moves_the_other_groups(fixed_blocks):
    geo = S.geometry(4, 16, 16, ragged=True)
    found = S._ragged_probe(_by_sizes(fixed_blocks), geo, T)
    assert (found is not None) is fixed_blocks
    if found is not None:
        assert found.property == "group_slicing" and found.counterexample["sizes"][:2] == [4, 3]


def test_g_1_is_a_note_not_a_measurement():
    out = S.audit_step(target(), S.geometry(1, 8, 8))
    assert out.law_split == "other" and out.invariant is None
    assert [f.severity for f in out.findings] == ["note"]


# --- through the gradient audit and its report ---------------------------------------------------
def _gradient_target(**kw):
    per_call = target(**kw)

    def fn(r, G, L, request=None):
        if request is None:  # the per-G probes: the batch as one unsplit step
            n = len(r)
            return S.micro_batch_mean(r, G, L, {"layout": "unsplit", "holes": [0] * n}, **kw)
        return per_call(r, G, L, request)

    fn.grpo_identity_info = {"step": S.geometry(4, 8, 8)}
    return fn


def test_the_gradient_report_carries_the_step_its_table_and_a_failing_verdict():
    report = audit_gradient(_gradient_target(scope="micro_batch"), sizes=(4,))
    assert report.verdict == "fail"
    step = report.to_dict()["inferred"]["step"]
    assert step["weight"] == "1/micro_batch_tokens" and step["invariant"] is False
    text = report.format()
    assert "split-invariant: NO" in text and "weight / unsplit" in text


def test_a_rescaled_split_makes_a_passing_gradient_audit_a_deviation():
    report = audit_gradient(_gradient_target(scope="constant", scale=3.0), sizes=(4,))
    assert report.inferred.per_sample_weight == "constant"
    assert report.verdict == "deviation"
    assert any(f.property == "split_invariance" for f in report.findings)


@pytest.mark.parametrize(
    "spoil, said",
    [
        (
            lambda out: out.pop("rank"),
            "returned a dict without 'rank', which the audit reads beside 'advantages', 'coefficients'",
        ),
        (lambda out: out.update(step=out["step"][:3]), "returned shapes 16 · 16×6 · 16×6 · 3 · 16 · 16 for advantages"),
        (lambda out: out.update(micro_batch="first"), "returned 'micro_batch' as an array of <U5, not of real numbers"),
        (
            lambda out: out.update(coefficients=out["coefficients"] * np.nan),
            "coefficients of tokens inside the mask whose answers' advantages are finite",
        ),
        (lambda out: out.update(step=out["step"] * 0 - 1), "returned 'step' -1 for every answer"),
        (lambda out: out.update(step=out["step"] + 0.5), "returned 'step' ids that are not whole numbers from -1"),
        (lambda out: out.update(step=out["step"] * np.nan), "(got no number, 16 NaN or inf)"),
        (lambda out: out.update(step=[None] * len(out["step"])), "returned 'step' as an array of object, not of real"),
        (lambda out: out.update(rank=out["rank"] - 7), "returned 'rank' ids that are not whole numbers from 0 to 999"),
        (lambda out: out.update(micro_batch=out["micro_batch"] + 2**62), "'micro_batch' ids that are not whole"),
        (lambda out: out.update(generation=out["step"] * 0 - 5), "returned 'generation' ids"),
        (lambda out: out["advantages"].__setitem__(0, np.nan), "returned NaN or inf advantages for 1 answers trained"),
    ],
)
def test_a_step_output_of_the_wrong_form_is_a_note_that_says_what_is_wrong_and_the_rest_stands(spoil, said):
    inner = _gradient_target(scope="constant")

    def fn(r, G, L, request=None):
        out = inner(r, G, L, request)
        if request is not None:
            spoil(out)
        return out

    fn.grpo_identity_info = inner.grpo_identity_info
    report = audit_gradient(fn, sizes=(4,))
    assert report.inferred.step == {} and report.inferred.per_sample_weight == "constant"
    notes = [f for f in report.findings if f.property == "split_step"]
    assert [f.severity for f in notes] == ["note"] and said in notes[0].message, notes


def test_rows_never_trained_on_may_hold_nan_and_the_step_is_still_measured():
    inner = _gradient_target(scope="constant")

    def fn(r, G, L, request=None):
        out = inner(r, G, L, request)
        if request is not None:  # the first group is left out of every step, its values not numbers
            out["step"] = np.where(np.arange(len(r)) < G, -1, out["step"])
            out["advantages"][:G] = np.nan
            out["coefficients"][:G] = np.nan
        return out

    fn.grpo_identity_info = inner.grpo_identity_info
    report = audit_gradient(fn, sizes=(4,))
    assert report.inferred.step["weight"] != "other" and not [f for f in report.findings if f.property == "split_step"]


def test_a_target_without_step_geometry_has_no_step_section():
    def fn(r, G, L):
        return S.micro_batch_mean(r, G, L, {"layout": "unsplit", "holes": [0] * len(r)}, scope="constant")

    report = audit_gradient(fn, sizes=(4,))
    assert report.inferred.step == {} and "split-invariant" not in report.format()


def test_a_short_group_normalised_as_a_partial_block_blows_up_and_is_found():
    """A dispatch that moves short groups last, then fixed blocks of G with mean 0 and std 0 for the partial
    block (r / ε): the other groups keep their advantages, the short group's reach 1/ε."""

    def fn(r, G, L, request=None):
        sizes = request["sizes"]
        starts = np.cumsum([0, *sizes[:-1]])
        order = sorted(range(len(sizes)), key=lambda g: sizes[g] < G)  # whole groups first, stable
        rows = np.concatenate([np.arange(starts[g], starts[g] + sizes[g]) for g in order])
        x = r[rows]
        A_sorted = np.zeros(len(r))
        whole = len(r) // G * G
        R = x[:whole].reshape(-1, G)
        A_sorted[:whole] = ((R - R.mean(1, keepdims=True)) / (R.std(1, keepdims=True) + 1e-5)).reshape(-1)
        A_sorted[whole:] = x[whole:] / 1e-5
        A = np.empty(len(r))
        A[rows] = A_sorted
        return {**S.micro_batch_mean(np.zeros(len(r)), 1, L, request), "advantages": A}

    found = S._ragged_probe(fn, S.geometry(4, 16, 16, ragged=True), T)
    assert found is not None and found.property == "group_slicing" and "partial block" in found.message


def test_a_framework_that_cannot_run_a_short_group_leaves_a_note_and_the_step_measured():
    def fn(r, G, L, request=None):
        if request and len(set(request["sizes"])) > 1:
            raise RuntimeError("min_groups 2")
        return S.micro_batch_mean(r, G, L, request, scope="step")

    out = S.audit_step(fn, {**S.geometry(4, 16, 16), "ragged": True})
    assert out.invariant and out.law_split == "1/step_tokens"
    notes = [f for f in out.findings if f.property == "group_slicing"]
    assert len(notes) == 1 and notes[0].severity == "note" and "min_groups 2" in notes[0].message


def test_a_short_step_of_a_per_answer_mean_is_measured_against_its_own_step():
    """Steps of 16, 8 and 8 answers, each a mean over its answers: the unsplit law is 1/(length·step_rows)
    (not a micro-batch's), so the split's micro-batches of 4 weigh 1× their step."""

    def fn(r, G, L, request=None):
        out = S.micro_batch_mean(r, G, L, request, scope="constant")
        step = np.repeat([0, 1, 2], [16, 8, 8])
        rows = np.bincount(step)[step]
        tokens = np.maximum(out["mask"].sum(1), 1)
        out["coefficients"] = (out["advantages"] / rows / tokens)[:, None] * out["mask"]
        out["step"] = step
        split = bool(request) and request["layout"] == "split"
        out["micro_batch"] = (np.arange(32) % 8) // 4 if split else np.zeros(32, dtype=int)
        return out

    out = S.audit_step(fn, S.geometry(4, 16, 8))
    assert out.law_unsplit == "1/(length·step_rows)" and out.invariant, (out.law_split, out.findings)


# --- ranks, answers left out, steps across generation batches ------------------------------------
def test_ranks_that_normalise_by_their_own_tokens_are_named_by_the_rank_scope():
    def fn(r, G, L, request=None):
        out = S.micro_batch_mean(r, G, L, request, micro_batches=2, scope="micro_batch")
        out["rank"], out["micro_batch"] = out["micro_batch"], np.zeros(len(r), dtype=int)  # pieces as ranks
        return out

    out = S.audit_step(fn, GEO)
    assert (out.law_split, out.law_unsplit, out.invariant) == ("1/rank_tokens", "1/step_tokens", False)
    assert {p["rank"] for p in out.pieces} == {0, 1}


def test_answers_the_split_leaves_out_are_a_failure_beside_an_uneven_weighting():
    def fn(r, G, L, request=None):
        out = S.micro_batch_mean(r, G, L, request, micro_batches=2, scope="micro_batch")
        if request and request["layout"] == "split":
            out["step"][24:28] = -1  # a live group (the 7th) the framework never trained on
            out["coefficients"][24:28] = 0.0
        return out

    out = S.audit_step(fn, GEO)
    messages = [f.message for f in out.findings if f.property == "split_invariance"]
    assert not out.invariant and len(messages) == 2
    assert "of the 32 answers out of the update" in messages[0] and "depends on how the step is split" in messages[1]


@pytest.mark.parametrize("micro_batch_is_generation", [False, True])
def test_a_step_weighing_each_generation_batch_by_its_own_tokens_fails_where_it_holds_two(micro_batch_is_generation):
    def fn(r, G, L, request=None):
        out = S.micro_batch_mean(r, G, L, request, scope="step")
        split = bool(request) and request["layout"] == "split"
        micro = (np.arange(len(r)) % 16) // 8 if split and micro_batch_is_generation else 0
        out["micro_batch"] = np.zeros(len(r), dtype=int) + micro
        generation = np.arange(len(r)) // 8
        tokens = np.bincount(generation, weights=out["mask"].sum(1))[generation]
        out["coefficients"] = (out["advantages"] / tokens)[:, None] * out["mask"]
        out["generation"] = generation
        return out

    out = S.audit_step(fn, S.geometry(4, 16, 8))
    assert out.law_unsplit == "1/generation_tokens" and not out.invariant
    assert any("holds answers of 2 generation batches" in f.message for f in out.findings)
