"""Dial inference (``checks.measure.infer``): the dial of every preset and of points off the presets, in
float64, float32 and bfloat16, a constant factor, ε under the square root, the silent residue,
and the keep rule of a filter — read from designed probe batches, never from the code."""

from __future__ import annotations

import numpy as np
import pytest

from grpo_identity import dial as D
from grpo_identity.checks.measure import properties as P
from grpo_identity.checks.measure.infer import infer_dial, infer_keep_rule, probe_batch


def dial_fn(d):
    return lambda r, G: D.advantages(r, G, d)


def test_the_probe_batch_has_every_k_once():
    # k = 0…G once each, then two all-wrong groups so that the batch std varies with G
    assert [int(row.sum()) for row in probe_batch(4).reshape(-1, 4)] == [0, 1, 2, 3, 4, 0, 0]


@pytest.mark.parametrize("name", list(D.PRESETS))
def test_inference_recovers_every_preset(name):
    d = D.PRESETS[name]
    inf = infer_dial(dial_fn(d))
    assert (inf.centre, inf.scale, inf.alpha) == (d.centre, d.scale, 1.0)
    if d.scale == "group_std":
        assert inf.ddof == d.ddof and inf.eps == pytest.approx(d.eps, rel=1e-3, abs=1e-12)
    assert inf.coefficients[8][3] == pytest.approx(float(D.coefficient(3, 8, d)), rel=1e-9)


@pytest.mark.parametrize(
    "d",
    [
        D.Dial(eps=1e-3),
        D.Dial(centre="loo"),
        D.Dial(scale="batch_std", ddof=1, eps=1e-4),
        D.Dial(centre="loo", scale="batch_std"),
    ],
    ids=["eps", "loo-std", "batch-std", "loo-batch-std"],
)
def test_inference_recovers_points_off_the_presets(d):
    inf = infer_dial(dial_fn(d))
    assert (inf.centre, inf.scale, inf.ddof if d.scale != "none" else 0) == (d.centre, d.scale, d.ddof)
    assert inf.eps == pytest.approx(d.eps, rel=1e-2, abs=1e-9)


def test_inference_in_float32_resolves_verl_epsilon():
    inf = infer_dial(lambda r, G: D.advantages(r.astype(np.float32), G, D.VERL))
    assert inf.precision == "float32" and inf.ddof == 1 and inf.eps == pytest.approx(1e-6, rel=0.1)


def _float32_whiten(eps, ddof, inside):
    def whiten(r, G):
        R = r.astype(np.float32).reshape(-1, G)
        std = R.std(1, ddof=ddof, keepdims=True)
        scale = np.sqrt(std * std + np.float32(eps)) if inside else std + np.float32(eps)
        return ((R - R.mean(1, keepdims=True)) / scale).reshape(-1)

    return whiten


@pytest.mark.parametrize("ddof", [0, 1])
def test_in_float32_an_epsilon_under_the_root_too_small_for_the_unit_probes_is_read_at_a_small_reward_scale(ddof):
    # √(σ² + 1e-6) changes the unit probes' advantages by 3e-5 of themselves at most, a group of σ = 1e-3 by 29 %
    inf = infer_dial(_float32_whiten(1e-6, ddof, inside=True))
    assert (inf.precision, inf.scale, inf.ddof, inf.eps_inside_sqrt) == ("float32", "group_std", ddof, True)
    assert inf.eps == pytest.approx(1e-6, rel=0.02) and inf.eps_resolution < 1e-8
    r = np.array([0.0012573, -0.00132105, 0.3, 0.9])  # the group the property search found
    np.testing.assert_allclose(inf.reference()(r, 2), _float32_whiten(1e-6, ddof, True)(r, 2), rtol=1e-4)


def test_in_float32_an_added_epsilon_below_the_unit_probes_resolution_is_read_at_the_small_scale():
    inf = infer_dial(_float32_whiten(1e-7, 1, inside=False))
    assert (inf.eps_inside_sqrt, inf.ddof) == (False, 1) and inf.eps == pytest.approx(1e-7, rel=0.05)


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_below_float32_an_unresolved_epsilon_under_the_root_stays_unresolved_not_misread(dtype):
    torch = pytest.importorskip("torch")

    def whiten(r, G):
        R = torch.as_tensor(r.reshape(-1, G)).to(torch.bfloat16 if dtype == "bfloat16" else torch.float16)
        out = (R - R.mean(1, keepdim=True)) / torch.sqrt(R.var(1, keepdim=True) + 1e-5)
        return out.reshape(-1).float().numpy().astype(np.float64)

    inf = infer_dial(whiten)
    assert inf.precision == ("bfloat16" if dtype == "bfloat16" else "float16")
    assert (inf.eps, inf.eps_inside_sqrt) == (0.0, False)


@pytest.mark.parametrize("breaks", ["raises", "nan", "shape"])
def test_a_target_that_breaks_only_at_the_small_scale_keeps_its_unit_scale_fit(breaks):
    from grpo_identity.checks.calls.target import TargetError

    def whiten(r, G):
        out = _float32_whiten(1e-6, 1, True)(r, G)
        if np.abs(r).max() >= 0.1:
            return out
        if breaks == "raises":  # as a target the audit loaded raises it
            raise TargetError("ValueError: rewards below 0.1")
        return out * np.nan if breaks == "nan" else out[:-1]

    inf = infer_dial(whiten)
    assert (inf.scale, inf.ddof, inf.eps, inf.eps_inside_sqrt) == ("group_std", 1, 0.0, False)


def test_in_float32_an_epsilon_the_small_scale_cannot_resolve_either_stays_at_the_unit_probes_resolution():
    inf = infer_dial(_float32_whiten(1e-9, 1, inside=False))
    assert (inf.eps, inf.eps_inside_sqrt) == (0.0, False) and 1e-8 < inf.eps_resolution < 1e-6  # the unit probes'


def test_a_constant_factor_is_inferred():
    inf = infer_dial(lambda r, G: 2 * D.advantages(r, G, D.GRPO))
    assert inf.scale == "group_std" and inf.alpha == pytest.approx(2.0)


def test_an_epsilon_under_the_square_root_is_inferred_as_such():
    def whiten(r, G):
        R = r.reshape(-1, G)
        return ((R - R.mean(1, keepdims=True)) / np.sqrt(R.var(1, keepdims=True) + 1e-2)).reshape(-1)

    inf = infer_dial(whiten)
    assert (inf.scale, inf.ddof, inf.eps_inside_sqrt, inf.alpha) == ("group_std", 0, True, 1.0)
    assert inf.eps == pytest.approx(1e-2, rel=1e-6)
    r = np.array([1.0, 0.0, 0.0, 0.3, 0.9, 0.1])
    np.testing.assert_allclose(inf.reference()(r, 3), whiten(r, 3), rtol=1e-12)
    assert not infer_dial(dial_fn(D.GRPO)).eps_inside_sqrt


def test_inference_in_bfloat16_finds_the_group_std_and_a_constant_factor():
    def grpo_bf16(r, G, factor=1.0):
        return (factor * D.advantages(r, G, D.GRPO)).astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)

    def as_bf16(r, G, factor=1.0):
        return grpo_bf16(r, G, factor).view(np.float32).astype(np.float64)

    inf = infer_dial(as_bf16)
    assert (inf.precision, inf.scale, inf.ddof, inf.alpha) == ("bfloat16", "group_std", 0, 1.0)
    assert infer_dial(lambda r, G: as_bf16(r, G, 2.0)).alpha == pytest.approx(2.0, rel=0.02)


def test_a_malformed_probe_output_is_a_well_formed_violation():
    with pytest.raises(P.PropertyViolation, match="returned shape") as exc:
        infer_dial(lambda r, G: D.advantages(r, G, D.GRPO)[:-1])
    assert exc.value.property == "well_formed"


def test_the_silent_residue_is_the_largest_over_every_probe_value_and_says_where():
    def residue_on_2_5(r, G):  # paper GRPO, but silent groups of 2.5 get 1e-3
        A = D.advantages(r, G, D.GRPO)
        return np.where(r == 2.5, 1e-3, A)

    inf = infer_dial(residue_on_2_5)
    assert inf.silent_nonbinary_max_abs == 1e-3
    assert inf.silent_nonbinary_worst == {"value": 2.5, "G": 2}
    assert infer_dial(dial_fn(D.GRPO)).silent_nonbinary_worst is None


def test_an_unscaled_dial_has_no_epsilon_resolution_and_its_dict_keys_groups_by_size():
    inf = infer_dial(dial_fn(D.DR_GRPO), sizes=(2, 4))
    assert (inf.scale, inf.eps, inf.eps_resolution) == ("none", 0.0, 0.0)
    out = inf.to_dict()
    assert out["coefficients"] == {"2": inf.coefficients[2], "4": inf.coefficients[4]}
    assert set(out["batch_std"]) == {"2", "4"}


# --- keep rules ----------------------------------------------------------------------------------
def test_keep_rules_are_inferred_from_filters():
    assert infer_keep_rule(lambda r, G: D.keep_mask(r, G, D.DAPO))[0] == "nonzero_std"
    assert infer_keep_rule(lambda r, G: D.keep_mask(r, G, D.GRPO))[0] == "all"
    assert infer_keep_rule(lambda r, G: r.reshape(-1, G).sum(1) > 0)[0] == "other"


def test_the_keep_rule_of_a_dapo_filter_is_described_in_words():
    assert infer_keep_rule(lambda r, G: D.keep_mask(r, G, D.DAPO)) == (
        "nonzero_std",
        "keeps exactly the groups with σ > 0",
    )
    assert infer_keep_rule(lambda r, G: D.keep_mask(r, G, D.GRPO)) == ("all", "keeps every group")
