"""The verdict rules (``checks.verdict``): a preset matched within ε's resolution passes; the
same family off by a bounded factor is a deviation with its factor table, or a pass with a note
when the factor is immaterial; another family fails; a silent residue above the threshold fails;
the worse verdict wins."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from grpo_identity import dial as D
from grpo_identity.checks import audit
from grpo_identity.checks import verdict as V
from grpo_identity.checks.report import AdvantageFit


def dial_fn(d):
    return lambda r, G: D.advantages(r, G, d)


def tiny_eps(rewards, G):
    R = rewards.reshape(-1, G)
    return ((R - R.mean(1, keepdims=True)) / (R.std(1, keepdims=True) + 1e-8)).reshape(-1)


def test_the_worse_verdict_wins():
    assert V.worst("pass", "deviation") == "deviation"
    assert V.worst("deviation", "fail", "pass") == "fail" and V.worst("pass") == "pass"


def test_a_preset_is_matched_by_its_point_of_the_dial_not_its_family():
    trl = AdvantageFit(centre="mean", scale="group_std", ddof=1, eps=1e-4, alpha=1.0)
    assert V.matches_preset(trl, D.TRL) and not V.matches_preset(trl, D.GRPO)
    assert not V.matches_preset(replace(trl, alpha=2.0), D.TRL)
    assert not V.matches_preset(replace(trl, eps_inside_sqrt=True), D.TRL)


@pytest.mark.parametrize("eps, matches", [(1.3e-4, False), (0.7e-4, False), (1.01e-4, True)])
def test_an_epsilon_matches_the_trl_preset_only_within_2_percent_of_its_1e_4(eps, matches):
    report = audit(dial_fn(D.TRL.replace(eps=eps)), expect="trl", max_examples=20)
    assert report.inferred.eps == pytest.approx(eps, rel=1e-6)
    assert (report.matches == "trl") is matches, report.format()
    assert report.verdict == ("pass" if matches else "deviation")
    if not matches:
        assert f"eps {eps:.3g} instead of 0.0001" in report.format()


def test_audit_reports_a_deviation_with_its_factor_table():
    report = audit(dial_fn(D.TRL), expect="grpo", max_examples=30)
    assert report.verdict == "deviation" and report.matches == "trl"
    assert [f["G"] for f in report.factors] == list(V.FACTOR_GROUP_SIZES) == [4, 8, 16, 64]
    assert report.factors[0]["factor_at_half"] == pytest.approx(
        float(D.coefficient(2, 4, D.TRL) / D.coefficient(2, 4, D.GRPO))
    )
    text = report.format()
    assert "DEVIATION" in text and "c reference" in text and "Bessel" in text
    json.dumps(report.to_dict())


def test_a_material_deviation_stays_a_deviation():
    report = audit(dial_fn(D.TRL), expect="grpo", max_examples=10)
    assert report.verdict == "deviation"


def test_a_deviation_below_any_material_size_is_a_pass_with_a_note():
    report = audit(tiny_eps, expect="grpo", max_examples=20)
    assert report.verdict == "pass" and report.matches == "grpo"
    notes = [f for f in report.findings if f.property == "matches_preset"]
    assert [f.severity for f in notes] == ["note"] and "eps 1e-08 instead of 0" in notes[0].message
    assert all(abs(f[k] - 1) < V.MATERIAL_FACTOR for f in report.factors for k in ("factor_min", "factor_max"))


def test_audit_of_the_wrong_family_fails():
    report = audit(dial_fn(D.DR_GRPO), expect="grpo", max_examples=20)
    assert report.verdict == "fail" and report.matches == "dr_grpo"
    assert any("wrong family" in f.message for f in report.findings)


@pytest.mark.parametrize(
    "residue, verdict, severity",
    [(V.SILENT_RESIDUE_FAIL * 1.01, "fail", "fail"), (V.SILENT_RESIDUE_FAIL * 0.99, "pass", "note")],
    ids=["above", "below"],
)
def test_a_silent_residue_fails_above_the_threshold_and_is_a_note_below(residue, verdict, severity):
    inf = AdvantageFit(centre="mean", scale="group_std", ddof=0, eps=0.0, alpha=1.0)
    inf.silent_nonbinary_max_abs, inf.silent_nonbinary_worst = residue, {"value": 0.1, "G": 4}
    decision = V.advantage(inf, [], D.GRPO)
    found = [f for f in decision.findings if f.property == "silent_nonbinary_groups_zero"]
    assert decision.verdict == verdict and [f.severity for f in found] == [severity]
    assert "worst: every reward 0.1 at G = 4" in found[0].message


def test_a_non_finite_silent_residue_fails():
    inf = AdvantageFit(centre="mean", scale="group_std", ddof=0, eps=0.0, alpha=1.0, silent_nonbinary_max_abs=np.inf)
    assert V.advantage(inf, [], D.GRPO).verdict == "fail"


# --- a factor of G alone, a declared coefficient -------------------------------------------------
def dr_grpo_over_g(rewards, G):
    """Dr. GRPO divided by G (the 'average over the group' form)."""
    return D.advantages(rewards, G, D.DR_GRPO) / G


def dr_grpo_times_g(rewards, G):
    return D.advantages(rewards, G, D.DR_GRPO) * G


@pytest.mark.parametrize("fn, form", [(dr_grpo_over_g, "1/G"), (dr_grpo_times_g, "G")])
def test_a_factor_of_g_alone_is_a_deviation_naming_the_preset_and_the_factor(fn, form):
    report = audit(fn, max_examples=20)
    assert report.verdict == "deviation" and report.inferred.centre is None, report.format()
    found = [f for f in report.findings if f.property == "matches_preset"]
    assert [f.severity for f in found] == ["deviation"] and not any(f.property == "dial" for f in report.findings)
    assert f"as dr_grpo times a factor that depends on G only = {form} " in found[0].message
    factor = found[0].counterexample["factor_by_group_size"]
    assert factor["64"] == pytest.approx(1 / 64 if form == "1/G" else 64)
    assert report.coefficient_table[0]["reference"] == "dr_grpo"


def test_a_factor_of_g_alone_of_the_other_family_fails():
    report = audit(dr_grpo_over_g, expect="grpo", max_examples=20)
    assert report.verdict == "fail"
    assert any(
        "wrong family: the target's c(k, G) is dr_grpo's times a factor of G = 1/G" in f.message
        for f in report.findings
    )
    assert audit(dr_grpo_over_g, expect="dr_grpo", max_examples=10).verdict == "deviation"


def test_a_target_no_dial_fits_and_no_factor_of_g_explains_still_fails():
    def sigma_cubed(rewards, G):  # c ∝ σ⁴: Dr. GRPO times σ², a factor of k too
        R = rewards.reshape(-1, G)
        return ((R - R.mean(1, keepdims=True)) * R.var(1, keepdims=True)).reshape(-1)

    report = audit(sigma_cubed, max_examples=10)
    assert report.verdict == "fail" and any(f.property == "dial" for f in report.findings)


@pytest.mark.parametrize(
    "g, name",
    [
        ({2: 0.5, 3: 1 / 3, 64: 1 / 64}, "1/G"),
        ({2: 2.0, 3: 1.5, 64: 64 / 63}, "G/(G−1)"),
        ({2: 1.0, 3: 2 / 3, 64: 2 / 64}, "2·1/G"),
        ({2: 1.0, 3: 2.0, 64: 1.0}, None),
    ],
)
def test_a_factor_of_g_is_named_by_its_simple_form(g, name):
    assert V.name_group_size_factor(g) == name


def test_a_declared_coefficient_that_the_target_has_passes_and_is_matched():
    report = audit(dr_grpo_over_g, expect="c=sigma**2/G", max_examples=20)
    assert (report.verdict, report.matches, report.expected) == ("pass", "c=sigma**2/G", "c=sigma**2/G")
    assert not any(f.property == "matches_declared" for f in report.findings), report.format()
    assert report.coefficient_table[0]["reference"] == "c=sigma**2/G"
    assert all(row["ratio"] == pytest.approx(1, rel=1e-12) for row in report.coefficient_table)
    mine = audit(dr_grpo_over_g, expect=lambda k, G: k * (G - k) / G**3, max_examples=10)
    assert mine.verdict == "pass" and mine.matches.endswith("<lambda>(k, G)")


@pytest.mark.parametrize(
    "fn, expect, verdict, words",
    [
        (dr_grpo_times_g, "c=sigma**2/G", "deviation", "depends on G only = G²"),
        (dial_fn(D.TRL), "c=sigma*sqrt((G-1)/G)", "deviation", "varies with k by up to"),
        (dial_fn(D.GRPO), "c=sigma**2", "fail", "another function of k than c=sigma**2"),
    ],
)
def test_a_declared_coefficient_the_target_misses_by_a_factor_deviates_and_by_a_shape_fails(fn, expect, verdict, words):
    report = audit(fn, expect=expect, max_examples=10)
    found = [f for f in report.findings if f.property == "matches_declared"]
    assert report.verdict == verdict and report.matches is None and len(found) == 1
    assert words in found[0].message, found[0].message
    assert found[0].counterexample["c_target_over_declared"]["4"]


def test_a_declared_coefficient_of_a_filter_is_an_option_error():
    from grpo_identity.checks.options import OptionError

    with pytest.raises(OptionError, match="applies to advantages"):
        audit("dapo", kind="filter", expect="c=sigma", max_examples=5)


# --- variants by name ----------------------------------------------------------------------------
def _variant_fn(name, factor=1.0):
    from grpo_identity.variants import VARIANTS

    v = VARIANTS[name]
    return lambda r, G: factor * v.advantages(r.reshape(-1, G)).reshape(-1)


def test_a_variant_that_gives_up_a_property_by_design_is_a_deviation_naming_it_not_no_dial_fits():
    report = audit(_variant_fn("gpg"), max_examples=60)
    assert report.verdict == "deviation" and report.matches == "gpg", report.format()
    coupled = next(f for f in report.findings if f.property == "groups_independent")
    assert coupled.severity == "deviation" and coupled.message.startswith("by design of gpg")
    assert not any(f.property == "dial" for f in report.findings)
    named = next(f for f in report.findings if f.property == "variant")
    assert "arXiv 2504.02546" in named.message and named.counterexample["departs"] == ["groups_coupled"]
    assert report.coefficient_table and report.coefficient_table[0]["c_reference"] is None


def test_a_variant_with_a_per_group_coefficient_passes_against_its_own_c_table():
    report = audit(_variant_fn("maxrl"), max_examples=60)
    assert report.matches == "maxrl" and report.verdict == "pass", report.format()
    assert {r["reference"] for r in report.coefficient_table} == {"maxrl"}
    assert all(abs(r["ratio"] - 1) < 1e-9 for r in report.coefficient_table)


def test_the_expected_variant_passes_and_its_departures_become_notes():
    report = audit(_variant_fn("gpg"), expect="gpg", max_examples=60)
    assert report.verdict == "pass" and report.expected == "gpg", report.format()
    assert {f.severity for f in report.findings if f.property in ("groups_independent", "variant")} == {"note"}


def test_another_variant_than_the_expected_one_fails_and_says_what_it_is():
    report = audit(_variant_fn("gpg"), expect="maxrl", max_examples=30)
    assert report.verdict == "fail"
    assert any(f.property == "variant" and "it computes gpg" in f.message for f in report.findings)
    assert audit(dial_fn(D.GRPO), expect="maxrl", max_examples=30).verdict == "fail"


def test_a_multiple_of_a_variant_is_a_deviation_with_its_factor():
    report = audit(_variant_fn("maxrl", factor=0.25), expect="maxrl", max_examples=30)
    assert report.verdict == "deviation"
    assert any(f.property == "variant" and "times 0.25" in f.message for f in report.findings)


def test_against_an_expected_preset_a_recognised_variant_is_a_note_beside_the_fail():
    report = audit(_variant_fn("gpg"), expect="dr_grpo", max_examples=30)
    assert report.verdict == "fail"
    assert any(f.property == "variant" and f.severity == "note" for f in report.findings)


def trl_with_a_big_batch_bug(rewards, G):
    A = D.advantages(rewards, G, D.TRL)
    return A * 1.5 if rewards.size > 50 else A  # a batch of more than 50 answers is scaled: coupled groups


def test_a_dial_point_with_a_bug_of_its_own_keeps_its_fail_and_is_no_variant():
    report = audit(trl_with_a_big_batch_bug, max_examples=60)
    assert report.verdict == "fail", report.format()
    assert not any(f.property == "variant" or f.message.startswith("by design") for f in report.findings)
