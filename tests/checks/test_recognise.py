"""Recognising a named variant (``checks.measure.recognise``): each variant's reference, in float32, is
recognised as itself and as no other; a multiple of one is recognised with its factor; a dial
point is recognised as no variant; a batch-coupled factor is not taken for a constant one."""

from __future__ import annotations

import numpy as np
import pytest

from grpo_identity import dial as D
from grpo_identity.checks import audit
from grpo_identity.checks.frameworks import lengths_for
from grpo_identity.checks.measure.recognise import recognise, recognition_batch
from grpo_identity.variants import VARIANTS


def as_target(v, form=None, lengths=False, factor=1.0):
    def target(r, G):
        L = lengths_for(r.size) if lengths else None
        A = factor * v.advantages(r.reshape(-1, G), L, form)
        return np.nan_to_num(A).reshape(-1).astype(np.float32)  # an implementation gives numbers everywhere

    return target


@pytest.mark.parametrize("name", list(VARIANTS))
def test_each_variant_is_recognised_as_itself_in_float32(name):
    v = VARIANTS[name]
    for form in v.forms:
        found = recognise(as_target(v, form, lengths=v.uses_lengths), "float32")
        assert found is not None and found.variant.name == name, form
        assert found.factor == 1.0 and found.residual < 1e-5 and found.form == form
        R, n = recognition_batch(4).reshape(-1, 4), 28
        by_length = not np.allclose(v.advantages(R, None, form), v.advantages(R, lengths_for(n), form), equal_nan=True)
        assert found.lengths == ("by row" if by_length else "equal")


def test_the_form_is_told_apart_where_the_implementations_differ():
    v = VARIANTS["reinforce_plus_plus_baseline"]
    assert recognise(as_target(v, "OpenRLHF", lengths=True), "float32").form == "OpenRLHF"
    assert recognise(as_target(v, "verl", lengths=True), "float32").form == "verl"


def test_a_multiple_of_a_variant_is_recognised_with_its_factor():
    found = recognise(as_target(VARIANTS["maxrl"], factor=0.5), "float64")
    assert found.variant.name == "maxrl" and abs(found.factor - 0.5) < 1e-7


@pytest.mark.parametrize("d", list(D.PRESETS.values()))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_point_of_the_dial_is_no_variant_even_where_a_variant_equals_it_at_equal_lengths(d, dtype):
    found = recognise(lambda r, G: D.advantages(r, G, d).astype(dtype), "float32" if dtype == np.float32 else "float64")
    assert found is None  # OPO at equal lengths is Dr. GRPO, GRPO over tokens is verl's GRPO …


def test_each_variant_is_recognised_as_no_other_form_than_its_own():
    for name, v in VARIANTS.items():
        for form in v.forms:
            target = as_target(v, form, lengths=v.uses_lengths)
            others = [w for w in VARIANTS.values() if w is not v]
            assert all(recognise(target, "float32", only=w) is None for w in others), (name, form)


def test_a_fixed_k_form_is_not_taken_from_one_group_size():
    def passk_without_std(r, G):  # verl's grpo_passk with norm_adv_by_std_in_grpo=false
        return VARIANTS["grpo_passk"].advantages(r.reshape(-1, G), form="verl, norm_adv_by_std_in_grpo=false").ravel()

    found = recognise(passk_without_std, "float64")
    assert found.variant.name == "grpo_passk" and found.form.endswith("=false")


def test_dr_grpo_times_a_constant_is_not_gpg_whose_factor_changes_with_the_batch():
    only = VARIANTS["gpg"]
    assert recognise(lambda r, G: 2.0 * D.advantages(r, G, D.DR_GRPO), "float64", only=only) is None


def test_a_target_that_breaks_on_the_batches_is_recognised_as_nothing():
    assert recognise(lambda r, G: np.full(r.size, np.nan), "float64") is None
    assert recognise(lambda r, G: r[:-1], "float64") is None


def test_the_batches_hold_every_k_a_continuous_group_and_two_levels():
    R = recognition_batch(4).reshape(-1, 4)
    assert [int(row.sum()) for row in R[:5]] == [0, 1, 2, 3, 4]
    assert np.unique(R[5]).size == 4 and sorted(np.unique(R[6])) == [0.5, 1.0]


@pytest.mark.parametrize(
    "name, form, eps", [("gdpo", "TRL normalize_then_sum", 1e-6), ("lite_ppo", "TRL scale_rewards=batch", 1e-6)]
)
def test_an_implementation_with_another_eps_is_the_variant_with_that_eps_a_deviation(name, form, eps):
    v = VARIANTS[name]
    found = recognise(lambda r, G: v.advantages(r.reshape(-1, G), None, form, eps).reshape(-1), "float64")
    assert (found.variant.name, found.form, found.factor) == (name, form, 1.0)
    assert found.eps == pytest.approx(eps, rel=1e-3) and found.to_dict()["form_eps"] == v.eps_of(form) != eps
    report = audit(
        lambda r, G: v.advantages(r.reshape(-1, G), None, form, eps).reshape(-1), expect=name, max_examples=10
    )
    note = next(f for f in report.findings if f.property == "variant")
    assert report.verdict == "deviation" and note.severity == "deviation", report.format()
    assert f"with ε = 1e-06 where the form's is {v.eps_of(form):.3g}" in note.message


@pytest.mark.parametrize(
    "form, dtype, named", [("OpenRLHF", np.float64, True), ("verl", np.float64, True), ("verl", np.float32, False)]
)
def test_a_length_weighted_variant_written_for_equal_lengths_is_recognised_unless_another_name_fits(form, dtype, named):
    rfpp = VARIANTS["reinforce_plus_plus_baseline"]
    precision = "float64" if dtype == np.float64 else "float32"
    found = recognise(lambda r, G: rfpp.advantages(r.reshape(-1, G), None, form).reshape(-1).astype(dtype), precision)
    if named:  # answers whitened without lengths: the variant at equal lengths
        assert (found.variant.name, found.form, found.lengths) == (rfpp.name, form, "equal")
    else:  # in float32, verl's form at equal lengths is AReaL's LitePPO (the ε aside)
        assert found.variant.name == "lite_ppo"


def _group_then_batch(group_eps, batch_eps_under_root):
    """GRPO per group (ddof 1, ε added to σ), then the batch whitened (ddof 1): ε under the root, or added to it."""

    def gdpo(rewards, G):
        R = rewards.reshape(-1, G)
        A = ((R - R.mean(1, keepdims=True)) / (R.std(1, ddof=1, keepdims=True) + group_eps)).reshape(-1)
        if batch_eps_under_root:
            return (A - A.mean()) / np.sqrt(A.var(ddof=1) + 1e-8)
        return (A - A.mean()) / (A.std(ddof=1) + 1e-8)

    return gdpo


def test_silent_groups_a_variant_moves_only_through_the_targets_own_tiny_epsilon_are_not_excused_by_design():
    verl_like = audit(_group_then_batch(1e-6, True), max_examples=30)
    assert verl_like.matches == "gdpo" and verl_like.verdict == "deviation", verl_like.format()
    assert not [f for f in verl_like.findings if f.property == "silent_nonbinary_groups_zero" and f.severity == "fail"]
    tiny = audit(_group_then_batch(1e-12, False), max_examples=30)  # rounding noise / 1e-12, then whitened to O(1)
    (silent,) = [f for f in tiny.findings if f.property == "silent_nonbinary_groups_zero"]
    assert tiny.matches == "gdpo" and tiny.verdict == "fail" and silent.severity == "fail", tiny.format()
    assert "gdpo's own form (verl) gives |Â| up to" in silent.message and "not by design" in silent.message


@pytest.mark.parametrize("ddof", [0, 1])
def test_gdpo_written_with_numpys_or_torchs_group_std_is_gdpo(ddof):
    def gdpo(rewards, G):
        R = rewards.reshape(-1, G)
        A = ((R - R.mean(1, keepdims=True)) / (R.std(1, ddof=ddof, keepdims=True) + 1e-6)).reshape(-1)
        return (A - A.mean()) / (A.std(ddof=1) + 1e-8)  # the batch std, 1e-8 added to it

    report = audit(gdpo, expect="gdpo", max_examples=20)
    assert report.verdict == "pass" and report.matches == "gdpo", report.format()
