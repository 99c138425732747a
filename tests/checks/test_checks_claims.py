"""The audits' claims for the main job (``checks.claims``).  (Named ``test_checks_claims`` beside the other
domains' claims tests.)"""

from __future__ import annotations

from grpo_identity.app import verify as V
from grpo_identity.checks import claims as CC


def test_a_framework_audit_that_breaks_is_failed_in_full_and_the_other_frameworks_still_run(monkeypatch):
    import importlib.util

    from grpo_identity import checks

    real_find, real_audit, asked = importlib.util.find_spec, checks.audit, []

    def audit(target, **kw):
        asked.append(target)
        if target == "trl":
            try:
                raise ValueError("Either a revision or a version must be specified.")
            except ValueError as inner:
                raise RuntimeError(
                    "Failed to import trl.trainer.grpo_config because of the following error (look up to see its "
                    "traceback):\nEither a revision or a version must be specified."
                ) from inner
        return real_audit("grpo", kind="advantage", expect="grpo", max_examples=5)

    monkeypatch.setattr(checks, "audit", audit)
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name in ("trl", "verl") else real_find(name, *a)
    )
    monkeypatch.setattr(CC, "PRESET_AUDITS", ())
    items = list(CC.audits(True, 5))
    assert asked == ["trl", "verl:grpo", "verl:grpo_vectorized"]  # the break stopped nothing
    trl = items[0]
    assert trl.status == "fail" and trl.project == (
        "RuntimeError: Failed to import trl.trainer.grpo_config because of the following error: "
        "Either a revision or a version must be specified."
    )
    summary = V.format_summary(
        {"items": [i.to_dict() for i in items], "counts": {"pass": 2, "fail": 1, "skipped": 0}, "seconds": 1.0}
    )
    assert "failed, in full:" in summary and "Either a revision or a version must be specified." in summary


def test_framework_audits_say_the_paper_does_not_cover_them(monkeypatch):
    import grpo_identity.checks as checks

    class Rep:
        verdict, matches = "pass", "grpo"

    monkeypatch.setattr(checks, "audit", lambda *a, **k: Rep())
    items = list(CC.audits(False, 1))
    frameworks = [i for i in items if i.status == "skipped"]
    assert frameworks and all(i.paper == "beyond the paper" for i in frameworks)
