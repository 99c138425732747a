"""The audit's result (``checks.report``): one ``Report`` for both levels, its ``Inferred`` record
read by attribute (the dial it names, the reference it implies), its JSON and its text rendered
from the same data.  (Named ``test_checks_report`` beside ``tests/app/test_report.py``.)"""

from __future__ import annotations

import json

import numpy as np
import pytest

from grpo_identity import dial as D
from grpo_identity.checks.report import AuditReport, Finding, Inferred, Report


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
    assert Inferred().dial() is None and Inferred().reference() is None


def _gradient_report():
    adv = Report("fn", "advantage", "advantage", "pass", "dr_grpo", None, Inferred(centre="mean", scale="none"), [])
    inferred = Inferred(centre="mean", scale="none", per_sample_weight="1/length", silent_groups_zero_gradient=True)
    finding = Finding("per_sample_weight", "per-sample weight 1/length", {"group_size": 4}, "deviation")
    return Report("fn", "gradient", "advantage", "deviation", "dr_grpo", None, inferred, [finding], advantage=adv)


def test_a_report_is_read_by_attribute_and_its_json_is_a_dict():
    report = _gradient_report()
    assert AuditReport is Report and report.passed and report.properties_run == report.properties
    assert report.inferred.per_sample_weight == "1/length" and report.inferred.centre == "mean"
    with pytest.raises(TypeError):
        report.inferred["centre"]  # noqa: B018
    out = json.loads(json.dumps(report.to_dict()))
    assert out["inferred"]["per_sample_weight"] == "1/length" and out["inferred"]["centre"] == "mean"
    assert out["advantage"]["level"] == "advantage" and out["findings"][0]["severity"] == "deviation"
    assert not Report("fn", "advantage", "advantage", "fail", None, None, Inferred(), []).passed


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
        "defaults": {"data.train_batch_size": 4, "trainer.n_gpus_per_node": 2},
        "ignored": ["model_name_or_path"],
        "note": "num_generations set by each probe",
    }
    r = Report("verl", "advantage", "advantage", "pass", "verl", None, Inferred(centre="mean", scale="none"), [])
    r.target_info = {"framework": "verl", "driver_settings": settings}
    lines = r.format().splitlines()
    assert "driver settings: use_cpu True (yours False), report_to none; num_generations set by each probe" in lines
    assert "driver defaults (you set none of these): data.train_batch_size=4, trainer.n_gpus_per_node=2" in lines
    assert "ignored (keys of the framework's script, not of its trainer): model_name_or_path" in lines
    r.target_info = {"framework": "areal", "driver_settings": {"forced": {}, "defaults": {}, "ignored": [], "note": ""}}
    assert not [ln for ln in r.format().splitlines() if ln.startswith(("driver", "ignored"))]
