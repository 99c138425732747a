"""What the domains' claims share (``grpo_identity.claims``): the items, and the stored runs' environments."""

from __future__ import annotations

import json

from grpo_identity import claims


def _provenance(folder, **versions):
    from grpo_identity import provenance

    folder.mkdir()
    record = provenance.record("grpo-identity train bernoulli --out x")
    record["versions"].update(versions)
    (folder / "provenance.json").write_text(json.dumps(record))


def test_stored_runs_say_which_recorded_versions_differ_from_the_running_ones_without_failing(tmp_path):
    _provenance(tmp_path / "a")
    _provenance(tmp_path / "b", torch="0.0.1")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "summary.json").write_text("{}")
    a, b, c = claims.stored_environments(tmp_path)
    assert a.status == "pass" and a.project.startswith("same (python, grpo-identity, numpy, torch, transformers)")
    assert b.status == "skipped" and b.project.startswith("differs: torch: 0.0.1 recorded, ")
    assert "not a failure" in b.note and "recorded at" in b.note
    assert c.status == "skipped" and c.project == "not recorded" and "no provenance" in c.note
    (none,) = claims.stored_environments(tmp_path / "none")  # a pip install: no results/ folder
    assert none.status == "skipped" and "ship with the source checkout" in none.note


def test_every_stored_run_folder_gets_an_environment_item():
    items = list(claims.stored_environments())
    folders = [p for p in claims.STORED_RESULTS.iterdir() if p.is_dir()]
    assert len(items) == len(folders) >= 1 and all(i.status in ("pass", "skipped") for i in items)
