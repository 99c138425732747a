"""The trainer's claims for the main job (``trainer.claims``): the controlled run against the paper within its
seed tolerance, and the stored LM and fixed-policy runs read, not rerun."""

from __future__ import annotations

import json

from grpo_identity import claims
from grpo_identity.trainer import claims as TC


def _stored_bernoulli(**changes):

    r = json.loads((claims.STORED_RESULTS / "bernoulli" / "result.json").read_text())
    r.update(changes)
    return r


def _bernoulli_items(monkeypatch, solve_rates=None, spread_path=None, **changes):
    import grpo_identity.trainer.bernoulli as B

    seen = {}

    def fake(config=None, progress=False):
        seen["config"] = config
        return _stored_bernoulli(**changes)

    monkeypatch.setattr(B, "run_bernoulli", fake)
    items = list(TC.controlled_run(solve_rates, spread_path))
    return {i.name: i for i in items}, seen


def test_the_stored_bernoulli_run_passes_every_controlled_run_item(monkeypatch):
    items, seen = _bernoulli_items(monkeypatch)
    assert all(i.status == "pass" for i in items.values()), [i.name for i in items.values() if i.status != "pass"]
    assert seen["config"].solve_rates is None  # the shipped Big-Math histogram
    assert len(items) == 10


def test_naming_the_shipped_histogram_is_the_default_and_keeps_the_spread_comparisons(monkeypatch):
    items, seen = _bernoulli_items(monkeypatch, solve_rates="bigmath")
    assert seen["config"].solve_rates is None and all(i.status == "pass" for i in items.values())


def test_a_users_solve_rates_run_the_controlled_run_and_skip_the_spread_comparisons(monkeypatch):
    items, seen = _bernoulli_items(monkeypatch, solve_rates="rates.csv")
    assert seen["config"].solve_rates == "rates.csv"
    skipped = [i for i in items.values() if i.status == "skipped"]
    assert len(skipped) == 6 and all("other settings or solve rates" in i.note for i in skipped)


def test_without_a_stored_seed_spread_the_comparisons_are_skipped_naming_the_command(monkeypatch, tmp_path):
    items, _ = _bernoulli_items(monkeypatch, spread_path=tmp_path / "absent" / "spread.json")
    skipped = [i for i in items.values() if i.status == "skipped"]
    assert len(skipped) == 6 and all("python -m grpo_identity.trainer.bernoulli_seeds" in i.note for i in skipped)


def _spread_file(tmp_path, sd):
    import dataclasses

    from grpo_identity.trainer.bernoulli import BernoulliConfig
    from grpo_identity.trainer.bernoulli_seeds import QUANTITIES

    cfg = {k: v for k, v in dataclasses.asdict(BernoulliConfig()).items() if k != "seed"}
    path = tmp_path / "spread.json"
    path.write_text(
        json.dumps(
            {
                "config": cfg,
                "seeds": [0, 1, 2, 3, 4],
                "sd": {k: sd for k in QUANTITIES},
                "mean": {k: 0.5 for k in QUANTITIES},
            }
        )
    )
    return path


def test_a_controlled_run_number_passes_inside_the_seed_tolerance_and_fails_just_outside(monkeypatch, tmp_path):
    import math

    path = _spread_file(tmp_path, sd=0.01)
    tol = 3 * math.sqrt(2) * 0.01 + 0.005  # 3·√2·s + half of the paper's last digit (0.88: two decimals)
    name = "hardest quartile final solve rate, Dr. GRPO"
    for delta, status in ((0.99 * tol, "pass"), (-0.99 * tol, "pass"), (1.01 * tol, "fail"), (-1.01 * tol, "fail")):
        stored = _stored_bernoulli()
        hard = dict(stored["hard_final"], dr_grpo=0.88 + delta)
        items, _ = _bernoulli_items(monkeypatch, spread_path=path, hard_final=hard)
        assert items[name].status == status, (delta, items[name])


def test_a_float64_identity_error_of_1e_8_fails_the_controlled_run(monkeypatch):
    items, _ = _bernoulli_items(monkeypatch, identity_max_abs_err=1e-8)
    (item,) = [i for n, i in items.items() if n.startswith("autograd gradient")]
    assert item.status == "fail"


def test_a_silent_fraction_r2_below_its_seed_tolerance_fails(monkeypatch):
    items, _ = _bernoulli_items(monkeypatch, r2_silent=0.995)
    (item,) = [i for n, i in items.items() if n.startswith("R² of the GRPO arm")]
    assert item.status == "fail"


def test_every_stored_lm_run_is_an_item_and_a_large_error_fails(tmp_path):
    for name, err in (("lm-a", 2e-6), ("lm-b", 3e-3)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps({"identity_max_rel_err": err, "groups_checked": 10}))
    items = list(TC.stored_lm(tmp_path))
    assert [i.status for i in items] == ["pass", "fail"] and "lm-b" in items[1].name
    assert list(TC.stored_lm(tmp_path / "none"))[0].status == "skipped"
    trained = [
        p for p in (claims.STORED_RESULTS).glob("lm-*/summary.json") if not p.parent.name.startswith("lm-conditional-")
    ]
    assert len(list(TC.stored_lm())) == len(trained) >= 1  # the fixed-policy runs have items of their own
    (tmp_path / "lm-conditional-x").mkdir()
    (tmp_path / "lm-conditional-x" / "summary.json").write_text(
        json.dumps({"identity_max_rel_err": 1e-9, "groups_checked": 1})
    )
    assert len(list(TC.stored_lm(tmp_path))) == 2


def test_the_stored_conditional_run_gives_passing_items_and_a_planted_miss_fails(tmp_path):
    import shutil

    items = list(TC.stored_conditional())
    cpu = [i for i in items if i.name.startswith("lm-conditional-cpu")]
    # 10 checks and 4 pre-registered criteria; addition has one correct answer, so the noise criterion is untestable
    assert len(cpu) == 14 and not [i.name for i in items if i.status == "fail"]
    assert [i.name.split(":")[0] for i in cpu if i.status == "skipped"] == [
        "lm-conditional-cpu pre-registered noise_ratio"
    ]
    # the replication's three stored seeds: every pre-registered criterion met in all three
    replicated = [i for i in items if "replicated over 3 seeds" in i.name]
    assert len(replicated) == 4 and {i.project for i in replicated} == {"met in 3 of 3 seeds"}
    run = tmp_path / "lm-conditional-planted"
    run.mkdir()
    s = json.loads((claims.STORED_RESULTS / "lm-conditional-cpu" / "summary.json").read_text())
    s["conditional"]["noise_slope_by_mode"]["grpo"]["measured_over_predicted_median"] = (
        2.0  # noise twice the prediction
    )
    s["conditional"]["slope_by_mode"]["dr_grpo"]["weighted"].update(
        value=1.0, interval=[0.9, 1.1]
    )  # a slope of 1 where 2 is predicted
    # an estimate outside its own bootstrap interval (as the first stored run had) decides nothing: skipped, said so
    s["conditional"]["slope_by_mode"]["grpo"].update(value=1.85, interval=[0.66, 1.83])
    (run / "summary.json").write_text(json.dumps(s))
    planted = list(TC.stored_conditional(tmp_path))
    assert [i.note.split("; ")[-1] for i in planted if "pooled" in i.name and i.status == "skipped"] == [
        "the estimate lies outside its own bootstrap interval: unreliable, not counted"
    ]
    failed = [i.name for i in planted if i.status == "fail"]
    assert (
        len(failed) == 2
        and any("tr Cov" in n for n in failed)
        and any("dr_grpo" in n and "weighted" in n for n in failed)
    )
    shutil.rmtree(run)
    assert [i.status for i in TC.stored_conditional(tmp_path)] == ["skipped"]


def test_pre_registered_criteria_are_items_met_passes_not_met_fails_not_testable_is_skipped(tmp_path):
    from grpo_identity.trainer.lm.preregistered import evaluate

    run = tmp_path / "lm-conditional-prereg"
    run.mkdir()
    s = json.loads((claims.STORED_RESULTS / "lm-conditional-cpu" / "summary.json").read_text())
    c = s["conditional"]
    c["slope_by_mode"]["grpo"]["weighted"].update(value=1.0, interval=[0.9, 1.1])
    c["slope_by_mode"]["dr_grpo"]["weighted"].update(value=1.3, interval=[1.2, 1.4])  # a slope where 2 is predicted
    c["cosine_min"]["by_mode"]["grpo"]["median"] = c["cosine_min"]["by_mode"]["dr_grpo"]["median"] = 0.98
    c["preregistered"] = evaluate(c, commit=False)
    (run / "summary.json").write_text(json.dumps(s))
    items = {i.name.split(":")[0]: i for i in TC.stored_conditional(tmp_path) if "pre-registered" in i.name}
    status = {name.split()[-1]: i.status for name, i in items.items()}
    assert status == {"grpo_slope": "pass", "dr_grpo_slope": "fail", "cosine_median": "pass", "noise_ratio": "skipped"}
    assert "Σ₊ = 0" in items["lm-conditional-prereg pre-registered noise_ratio"].note  # not testable, and why
    assert all("no analysis commit recorded" in i.note for i in items.values())


def test_a_replication_says_in_how_many_seeds_each_criterion_was_met_and_passes_only_in_all(tmp_path):
    from grpo_identity import provenance
    from grpo_identity.trainer.lm.preregistered import evaluate

    base = json.loads((claims.STORED_RESULTS / "lm-conditional-cpu" / "summary.json").read_text())
    for seed, dr_grpo in ((1, [1.9, 2.1]), (2, [1.9, 2.1]), (3, [1.2, 1.4])):  # the third misses 2
        s = json.loads(json.dumps(base))
        c = s["conditional"]
        c["slope_by_mode"]["grpo"]["weighted"].update(value=1.0, interval=[0.9, 1.1])
        c["slope_by_mode"]["dr_grpo"]["weighted"].update(value=sum(dr_grpo) / 2, interval=dr_grpo)
        c["preregistered"] = evaluate(c, commit=False)
        run = tmp_path / "lm-conditional-rep" / f"seed-{seed}"
        run.mkdir(parents=True)
        (run / "summary.json").write_text(json.dumps(s))
        (run / "provenance.json").write_text(json.dumps(provenance.record(f"seed {seed}")))
    items = {i.name: i for i in TC.stored_conditional(tmp_path) if "replicated" in i.name}
    grpo = items["lm-conditional-rep: pre-registered grpo_slope replicated over 3 seeds"]
    dr = items["lm-conditional-rep: pre-registered dr_grpo_slope replicated over 3 seeds"]
    assert (grpo.status, grpo.project) == ("pass", "met in 3 of 3 seeds")
    assert (dr.status, dr.project) == ("fail", "met in 2 of 3 seeds")
    assert any(i.name.startswith("lm-conditional-rep/seed-2 ") for i in TC.stored_conditional(tmp_path))
    assert len(provenance.recorded(tmp_path / "lm-conditional-rep")) == 3  # one record per seed


def test_in_a_checkout_a_missing_stored_run_names_the_command_that_stores_it_under_results(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (item,) = TC.stored_lm(results)
    assert item.note == "no stored LM runs under results/lm-*: grpo-identity train lm --out results/NAME stores one"
    spread, why = TC._load_spread(results / "bernoulli_seeds" / "spread.json", None)
    assert spread is None
    assert why == "no stored seed spread: python -m grpo_identity.trainer.bernoulli_seeds --out results/bernoulli_seeds"
