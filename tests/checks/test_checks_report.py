"""The audit's result (``checks.report``): one ``Report`` for both levels, its typed fit read by attribute
(the dial it names, the reference it implies), its JSON (one flat ``inferred`` object whatever the fit) and its
text rendered from the same data.  (Named ``test_checks_report`` beside ``tests/app/test_report.py``.)"""

from __future__ import annotations

import json

import numpy as np
import pytest

from grpo_identity import dial as D
from grpo_identity.checks.report import (
    INFERRED_KEYS,
    AdvantageFit,
    AuditReport,
    FilterFit,
    Finding,
    GradientFit,
    Report,
    inferred_dict,
)


def test_the_inferred_dial_is_the_fits_point_and_keeps_every_group():
    inf = AdvantageFit(centre="mean", scale="group_std", ddof=1, eps=1e-4)
    assert inf.dial() is not None and inf.dial().same_point(D.TRL) and inf.dial().keep == "all"
    assert not inf.dial().same_point(D.TRL.replace(keep="nonzero_std"))
    inside = AdvantageFit(centre="mean", scale="group_std", ddof=0, eps=1e-4, eps_inside_sqrt=True).dial()
    assert inside is not None and inside.eps_where == "variance"


def test_the_inferred_reference_carries_the_constant_factor():
    r = np.array([1.0, 0.0, 0.0, 0.0])
    ref = AdvantageFit(centre="mean", scale="group_std", ddof=0, eps=0.0, alpha=2.0).reference()
    assert ref is not None and np.array_equal(ref(r, 4), 2.0 * D.advantages(r, 4, D.GRPO))
    assert np.array_equal(
        AdvantageFit(centre="mean", scale="none", alpha=None).reference()(r, 4), D.advantages(r, 4, D.DR_GRPO)
    )
    assert AdvantageFit().dial() is None and AdvantageFit().reference() is None


def _gradient_report():
    adv = Report("fn", "advantage", "advantage", "pass", "dr_grpo", None, AdvantageFit(centre="mean", scale="none"), [])
    dial = AdvantageFit(centre="mean", scale="none")
    inferred = GradientFit(per_sample_weight="1/length", silent_groups_zero_gradient=True, advantage=dial)
    finding = Finding("per_sample_weight", "per-sample weight 1/length", {"group_size": 4}, "deviation")
    return Report("fn", "gradient", "advantage", "deviation", "dr_grpo", None, inferred, [finding], advantage=adv)


def test_a_report_is_read_by_attribute_and_its_json_is_a_dict():
    report = _gradient_report()
    assert AuditReport is Report and report.passed and report.properties_run == report.properties
    assert isinstance(report.inferred, GradientFit)
    assert report.inferred.per_sample_weight == "1/length" and report.inferred.advantage.centre == "mean"
    with pytest.raises(TypeError):
        report.inferred["centre"]  # noqa: B018
    out = json.loads(json.dumps(report.to_dict()))
    assert out["inferred"]["per_sample_weight"] == "1/length" and out["inferred"]["centre"] == "mean"
    assert out["advantage"]["level"] == "advantage" and out["findings"][0]["severity"] == "deviation"
    assert not Report("fn", "advantage", "advantage", "fail", None, None, AdvantageFit(), []).passed


@pytest.mark.parametrize(
    "fit",
    [AdvantageFit(centre="mean", scale="none"), FilterFit(keep="nonzero_std", keep_tolerance=1e-6), GradientFit()],
    ids=["advantage", "filter", "gradient"],
)
def test_every_fit_is_written_as_the_same_flat_inferred_object_with_its_own_fields_set(fit):
    fields = {f for cls in (AdvantageFit, FilterFit, GradientFit) for f in cls.__dataclass_fields__} - {"advantage"}
    assert set(INFERRED_KEYS) == fields  # every fit's every field, and nothing else
    out = inferred_dict(fit)
    assert tuple(out) == INFERRED_KEYS and len(INFERRED_KEYS) == len(set(INFERRED_KEYS))
    assert "advantage" not in out  # a gradient fit's advantage fit is flattened, not nested
    own = fit.to_dict()
    assert {k: out[k] for k in own} == own
    assert out["precision"] == ("bool" if isinstance(fit, FilterFit) else "float64")
    assert json.loads(json.dumps(out)) == out


def test_the_inferred_objects_keys_keep_the_order_the_json_has_always_had():
    assert INFERRED_KEYS[:3] == ("centre", "scale", "ddof") and INFERRED_KEYS[-2:] == ("aggregation", "update_scale")
    assert INFERRED_KEYS.index("keep") == 7 and INFERRED_KEYS.index("why") == 17
    assert INFERRED_KEYS.index("per_sample_weight") == 18 and INFERRED_KEYS.index("off_policy") == 24


def test_a_gradient_fit_writes_its_advantage_fit_beside_its_own_fields():
    fit = GradientFit(per_sample_weight="constant", step={"ranks": "processes"}, advantage=AdvantageFit(ddof=1))
    out = inferred_dict(fit)
    assert out["ddof"] == 1 and out["per_sample_weight"] == "constant" and out["step"] == {"ranks": "processes"}
    assert out["keep"] is None and out["off_policy"] == {}
    out["step"]["ranks"] = "one"
    assert fit.step == {"ranks": "processes"}  # the dict is a copy


def test_the_text_shows_the_gradient_section_then_the_advantage_section_then_the_findings():
    text = _gradient_report().format()
    head, verdict = text.splitlines()[:2]
    assert head == "audit of fn, level gradient, kind advantage"
    assert verdict == "verdict: DEVIATION   matches: dr_grpo   expected: any preset"
    order = ["per-sample weight: 1/length", "advantage level", "inferred dial: centre mean, scale none", "findings:"]
    assert [text.index(s) for s in order] == sorted(text.index(s) for s in order)
    assert "[deviation] per_sample_weight: per-sample weight 1/length" in text and "{'group_size': 4}" in text


def test_the_head_lists_what_the_driver_forced_and_the_defaults_it_chose_for_any_framework():
    settings = {
        "forced": {"use_cpu": {"driver": True, "yours": False}, "report_to": {"driver": "none", "yours": None}},
        "defaults": {"data.train_batch_size": "2 (the per-G probes), 4 (the step)", "trainer.n_gpus_per_node": 2},
        "ignored": ["model_name_or_path"],
        "note": "num_generations set by each probe",
    }
    r = Report("verl", "advantage", "advantage", "pass", "verl", None, AdvantageFit(centre="mean", scale="none"), [])
    r.target_info = {"framework": "verl", "driver_settings": settings}
    lines = r.format().splitlines()
    assert "driver settings: use_cpu True (yours False); report_to none; num_generations set by each probe" in lines
    assert (  # entries apart by "; ", as a value may hold commas
        "driver defaults (you set none of these): data.train_batch_size=2 (the per-G probes), 4 (the step); "
        "trainer.n_gpus_per_node=2" in lines
    )
    assert "ignored (keys of the framework's script, not of its trainer): model_name_or_path" in lines
    r.target_info = {"framework": "areal", "driver_settings": {"forced": {}, "defaults": {}, "ignored": [], "note": ""}}
    assert not [ln for ln in r.format().splitlines() if ln.startswith(("driver", "ignored", "stood in"))]


def test_the_head_names_what_the_driver_stood_in_for():
    fit = AdvantageFit(centre="mean", scale="none")
    r = Report("openrlhf", "advantage", "advantage", "pass", "dr_grpo", None, fit, [])
    r.target_info = {"framework": "openrlhf", "stand_ins": ["flash_attn", "vllm"]}
    assert "stood in: flash_attn, vllm" in r.format().splitlines()
    r.target_info = {"framework": "openrlhf", "stand_ins": []}
    assert "stood in" not in r.format()


def test_every_fit_describes_itself_in_a_few_words():
    assert AdvantageFit(centre="mean", scale="group_std", ddof=1, eps=1e-4).describe() == (
        "centre mean, group_std (ddof 1, eps 0.0001)"
    )
    tolerant = FilterFit(keep="nonzero_std", keep_tolerance=1e-6, keep_measure="max − min")
    assert tolerant.describe() == "keeps nonzero_std (σ > 0 up to 1e-06 max − min)"
    assert FilterFit(keep="all").describe() == "keeps all" and FilterFit().describe() == "no keep rule inferred"
    assert GradientFit(advantage=AdvantageFit(centre="mean", scale="none")).describe() == "centre mean, no std"


def test_asking_for_the_old_inferred_record_names_what_replaced_it():
    import grpo_identity.checks as checks

    with pytest.raises(AttributeError, match="replaced by the typed fits .*AdvantageFit"):
        checks.Inferred  # noqa: B018
    with pytest.raises(ImportError):  # (Python words this one itself)
        from grpo_identity.checks import Inferred  # noqa: F401
    with pytest.raises(AttributeError, match="has no attribute 'Nothing'"):
        checks.Nothing  # noqa: B018


@pytest.mark.parametrize(
    "info, shown",
    [
        ({"framework": "trl", "scale_rewards": "group", "loss_type": "dapo", "mixed_precision": "no"},
         "framework trl, scale_rewards group, loss_type dapo"),
        ({"framework": "skyrl", "estimator": "grpo", "grpo_norm_by_std": True, "loss_reduction": "token_mean"},
         "framework skyrl, estimator grpo, loss_reduction token_mean"),
        ({"framework": "ms-swift", "estimator": "grpo", "scale_rewards": "none", "loss_type": "dr_grpo", "beta": 0.04},
         "framework ms-swift, estimator grpo, scale_rewards none, loss_type dr_grpo"),
    ],
)  # fmt: skip
def test_the_head_names_each_frameworks_estimator_and_loss_setting(info, shown):
    fit = AdvantageFit(centre="mean", scale="none")
    r = Report("x", "advantage", "advantage", "pass", "dr_grpo", None, fit, [])
    r.target_info = info
    assert r.format().splitlines()[0] == f"audit of x ({shown}), level advantage, kind advantage"
