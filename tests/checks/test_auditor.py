"""``audit()`` end to end on functions and presets (``checks.auditor``): filters, bad options, and
what a target does to the audit — it crashes, hangs, raises on some inputs, returns None or
objects, leaves a residue on silent groups — each a clear finding, never a crashed audit."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from grpo_identity import dial as D
from grpo_identity.checks import AuditOptions, audit, resolve, run
from grpo_identity.checks.calls.target import TargetImportError
from grpo_identity.checks.measure.infer import infer_keep_rule

TARGETS = textwrap.dedent(
    """
    import os, time
    import numpy as np

    def good(rewards, G):
        R = rewards.reshape(-1, G)
        live = np.ptp(R, 1, keepdims=True) > 0
        return np.where(live, R - R.mean(1, keepdims=True), 0.0).reshape(-1)

    def hang(rewards, G):
        time.sleep(60)

    def crash(rewards, G):
        os._exit(7)

    def raises_sometimes(rewards, G):
        if G % 2 and G > 3:
            raise RuntimeError("odd")
        return good(rewards, G)

    def none(rewards, G):
        return None

    def objects(rewards, G):
        return np.array([object()] * len(rewards))
    """
)


@pytest.fixture
def target_file(tmp_path):
    path = tmp_path / "targets.py"
    path.write_text(TARGETS)
    return str(path)


def dial_fn(d):
    return lambda r, G: D.advantages(r, G, d)


def grpo_with_a_silent_residue(rewards, G):
    """Paper GRPO, except that silent groups get ±1e-12 residues summing to 0 (on {0, 1} rewards too)."""
    R = rewards.reshape(-1, G)
    live = np.ptp(R, 1, keepdims=True) > 0
    A = np.divide(R - R.mean(1, keepdims=True), R.std(1, keepdims=True), out=np.zeros_like(R), where=live)
    residue = 1e-12 * (np.arange(G) - (G - 1) / 2)  # (G,): sums to 0, so zero-sum holds
    return np.where(live, A, residue).reshape(-1)


def test_audit_takes_its_options_by_keyword_and_run_takes_a_resolved_spec():
    with pytest.raises(TypeError):
        audit(dial_fn(D.GRPO), "grpo")  # type: ignore[misc]
    report = run(resolve("dr_grpo"), AuditOptions(expect="dr_grpo", max_examples=10))
    assert (report.verdict, report.matches, report.expected, report.target) == ("pass", "dr_grpo", "dr_grpo", "dr_grpo")
    assert report.target_info["preset"] == "dr_grpo" and report.seconds > 0


@pytest.mark.parametrize("bad", [{"kind": "filters"}, {"max_examples": 0}, {"timeout": -1}, {"expect": "ppo"}])
def test_audit_rejects_bad_options_in_one_line(bad):
    with pytest.raises(ValueError):
        audit(dial_fn(D.GRPO), **bad)


def test_audit_of_a_filter_preset_passes_and_a_keep_all_filter_fails_for_dapo():
    assert audit("dapo", kind="filter", max_examples=20, isolate=False).verdict == "pass"
    report = audit("grpo", kind="filter", expect="dapo", max_examples=20, isolate=False)
    assert report.verdict == "fail" and report.findings[0].property == "keeps_groups_with_nonzero_std"


def _keep_mask_with_a_threshold(rewards, group_size=None, dial=D.DAPO, **kw):
    """keep_mask with silence tested as max − min < 1e-6: a bug the filter audit must see."""
    R = np.asarray(rewards, dtype=np.float64).reshape(-1, group_size)
    return np.ptp(R, 1) >= 1e-6 if dial.keep == "nonzero_std" else np.ones(R.shape[0], dtype=bool)


def test_the_filter_audit_catches_a_bug_in_the_dials_own_keep_mask(monkeypatch):
    def the_dials_filter(r, G):
        return D.keep_mask(r, G, D.DAPO)  # looked up at call time: the threshold patched in below

    assert audit(the_dials_filter, kind="filter", expect="dapo", max_examples=20).verdict == "pass"
    monkeypatch.setattr(D, "keep_mask", _keep_mask_with_a_threshold)
    keep, why = infer_keep_rule(the_dials_filter)  # a threshold: σ > 0 kept with a tolerance, named
    assert keep == "nonzero_std" and "max − min is at most between" in why
    report = audit(the_dials_filter, kind="filter", expect="dapo", max_examples=20)
    assert report.verdict == "deviation" and report.findings[-1].property == "keep_tolerance", report.format()
    assert report.inferred.keep_measure == "max − min" and 3e-7 < report.inferred.keep_tolerance <= 1e-6


def test_a_residue_on_silent_binary_groups_fails_the_audit_by_the_silent_groups_property():
    report = audit(grpo_with_a_silent_residue, expect="grpo", max_examples=100)
    assert report.verdict == "fail"
    silent = [f for f in report.findings if f.property == "silent_groups_exactly_zero"]
    assert silent and "instead of exactly 0" in silent[0].message, report.format()
    assert "binary NOT exactly 0" in report.format()


# --- targets that misbehave when called: findings --------------------------------------------------
def test_a_crashing_target_fails_with_its_exit_code(target_file):
    report = audit(f"{target_file}:crash", max_examples=10)
    assert report.verdict == "fail" and "exit code 7" in report.findings[0].message


@pytest.mark.slow
def test_a_hanging_target_times_out_and_the_audit_fails_clearly(target_file):
    report = audit(f"{target_file}:hang", timeout=1.0, max_examples=10)
    assert report.verdict == "fail" and "timeout" in report.findings[0].message


@pytest.mark.slow
def test_an_exception_in_the_target_is_a_finding_with_a_shrunk_example(target_file):
    report = audit(f"{target_file}:raises_sometimes", max_examples=200)
    assert report.verdict == "fail"
    f = next(f for f in report.findings if "odd" in f.message)
    assert f.counterexample["group_size"] == 5 and f.counterexample["n_groups"] == 1  # shrunk


@pytest.mark.parametrize("name, words", [("none", "returned None"), ("objects", "returned an array of object")])
@pytest.mark.parametrize("isolate", [False, True])
def test_a_target_returning_none_or_objects_is_a_fail_finding_not_a_crash(target_file, name, words, isolate):
    report = audit(f"{target_file}:{name}", expect="grpo", max_examples=10, isolate=isolate)
    assert report.verdict == "fail"
    assert [f.property for f in report.findings] == ["probe"]
    assert words in report.findings[0].message and "not an array of advantages" in report.findings[0].message


# --- the code users wrote, as they wrote it --------------------------------------------------------
USER_CODE = str(Path(__file__).with_name("_user_code.py"))


@pytest.mark.parametrize(
    "fn, verdict, matches",
    [
        ("compute_grpo_advantages", "pass", "verl"),  # Bessel's std, ε 1e-6: verl's convention
        ("grpo_float32", "pass", "grpo"),  # judged at float32's precision
        ("dr_grpo_keyword_only", "pass", "dr_grpo"),
        ("dr_grpo_grid", "pass", "dr_grpo"),
        ("grpo_returns_a_dict", "pass", "grpo"),
        ("compute_grpo_advantages_batch_mean", "fail", None),
    ],
)
def test_users_functions_are_audited_as_written_with_the_verdict_their_code_deserves(fn, verdict, matches):
    report = audit(f"{USER_CODE}:{fn}", expect=None, max_examples=60)
    assert report.verdict == verdict, report.format()
    assert report.matches == matches
    assert report.target_info["call"]["call"].startswith(fn)


def test_a_function_computing_in_float32_is_judged_at_float32s_precision():
    report = audit(f"{USER_CODE}:grpo_float32", expect="grpo", max_examples=60)
    assert report.verdict == "pass" and report.inferred.precision == "float32", report.format()


def test_a_function_that_takes_group_ids_gets_shuffled_and_ragged_layouts():
    good = audit(f"{USER_CODE}:grpo_by_uid", max_examples=80)
    assert good.verdict == "deviation" and {"layout_independent", "ragged_groups"} <= set(good.properties)
    assert not [f for f in good.findings if f.severity == "fail"], good.format()
    blocks = audit(f"{USER_CODE}:grpo_blocks_of_the_first_group", max_examples=80)
    assert blocks.verdict == "fail"
    assert {"layout_independent", "ragged_groups"} & {f.property for f in blocks.findings if f.severity == "fail"}


def test_a_lone_answer_pushed_by_its_raw_reward_is_a_deviation_where_groups_go_by_id():
    report = audit(f"{USER_CODE}:grpo_raw_reward_for_a_lone_answer", max_examples=80)
    lone = [f for f in report.findings if f.property == "ragged_groups"]
    assert report.verdict == "deviation" and lone and lone[0].severity == "deviation", report.format()
    assert "a lone answer" in lone[0].message


def test_a_function_with_verls_estimator_signature_is_audited_as_written():
    report = audit(f"{USER_CODE}:verl_like_estimator", max_examples=60)
    assert report.verdict in ("pass", "deviation") and report.matches == "verl", report.format()
    assert report.target_info["call"]["form"] == "verl"


def test_a_function_that_refuses_every_input_is_a_usage_error_not_a_fail():
    with pytest.raises(TargetImportError, match="takes none of numpy arrays, torch tensors or lists"):
        audit(f"{USER_CODE}:takes_only_strings", max_examples=10)


def test_a_row_filter_must_keep_or_drop_each_group_whole():
    assert audit(f"{USER_CODE}:keep_rows_of_informative_groups", kind="row-filter", expect="dapo").verdict == "pass"
    report = audit(f"{USER_CODE}:keep_rows_far_from_the_mean", kind="row-filter", expect="dapo", max_examples=40)
    assert report.verdict == "fail" and report.findings[0].property == "keeps_whole_groups", report.format()
    assert "[1, 0, 0, 0]" in report.findings[0].message and "answers [0] kept" in report.findings[0].message


@pytest.mark.parametrize(
    "fn, measure",
    [("keep_with_a_tolerance", "max − min"), ("keep_in_float32", "float32 resolution")],
)
def test_a_keep_rule_with_a_tolerance_is_a_deviation_naming_it_not_a_wrong_rule(fn, measure):
    report = audit(f"{USER_CODE}:{fn}", kind="filter", expect="dapo", max_examples=40)
    assert report.verdict == "deviation" and report.inferred.keep == "nonzero_std", report.format()
    assert report.inferred.keep_measure == measure
    assert report.findings[-1].property == "keep_tolerance" and measure.split()[0] in report.findings[-1].message


def test_rewards_in_float16_reach_the_filter_and_its_references_alike():
    # in float16, 0.1 and 0.1 + 1e-6 are one value: a filter that keeps σ > 0 exactly drops that group,
    # and so does the definition on the rewards it sees
    report = audit(
        f"{USER_CODE}:keep_rows_of_informative_groups", kind="row-filter", expect="dapo", reward_dtype="float16"
    )
    assert report.verdict == "pass", report.format()


def test_a_real_bug_in_user_code_is_a_fail_not_a_usage_error():
    report = audit(f"{USER_CODE}:loops_with_a_bug", max_examples=10)
    assert report.verdict == "fail" and "cannot be interpreted as an integer" in report.findings[0].message


def test_a_row_filter_returning_floats_is_read_as_flags_only_when_they_are_zero_or_one():
    assert audit(f"{USER_CODE}:keep_rows_as_float_mask", kind="row-filter", expect="dapo").verdict == "pass"
    report = audit(f"{USER_CODE}:keep_rows_returning_the_std", kind="row-filter", expect="dapo", max_examples=20)
    assert report.verdict == "fail" and report.findings[0].property == "filter_well_formed", report.format()
    assert "not flags" in report.findings[0].message and "one bool per answer" in report.findings[0].message


def test_an_index_returning_row_filter_and_a_relative_tolerance_are_read_right():
    assert audit(f"{USER_CODE}:kept_row_indices", kind="row-filter", expect="dapo").verdict == "pass"
    report = audit(f"{USER_CODE}:keep_with_a_relative_tolerance", kind="filter", expect="dapo")
    assert report.verdict == "deviation" and report.inferred.keep_measure == "relative", report.format()


class _Components:
    """A target whose driver scores two reward components (its info says so), normalising each first."""

    info = {"components": {"weights": [1.0, 0.5]}}
    dead = None

    def __call__(self, rewards, G, components=None):
        from grpo_identity import dial as D

        if components is None:
            return D.advantages(rewards, G, D.TRL)
        return sum(w * D.advantages(components[:, k], G, D.TRL) for k, w in enumerate((1.0, 0.5)))


def test_a_target_that_scores_reward_components_gets_its_aggregation_rule_recorded():
    from grpo_identity.checks.auditor import _aggregation
    from grpo_identity.checks.report import AdvantageFit

    inf = AdvantageFit()
    findings = _aggregation(_Components(), inf)
    assert inf.aggregation["rule"] == "normalize_then_sum" and inf.aggregation["weights"] == [1.0, 0.5]
    assert [f.property for f in findings] == ["reward_aggregation"] and findings[0].severity == "note"
    plain = AdvantageFit()
    assert _aggregation(lambda r, G: r, plain) == [] and plain.aggregation == {}


def _std_over_the_wrong_axis(rewards, G):
    r = np.asarray(rewards, dtype=float).reshape(-1, G)
    with np.errstate(divide="ignore", invalid="ignore"):
        return ((r - r.mean(axis=1, keepdims=True)) / r.std(axis=0, keepdims=True)).reshape(-1)


def test_a_non_finite_output_is_one_finding_and_the_properties_still_run_on_the_batches_with_numbers():
    from grpo_identity.checks import audit

    report = audit(_std_over_the_wrong_axis, isolate=False, max_examples=60)
    props = [f.property for f in report.findings if f.severity == "fail"]
    assert report.verdict == "fail" and props[0] == "well_formed" and props.count("well_formed") == 1
    assert len(report.properties_run) >= 5 and report.examples > 0  # not "0 run on 0 examples"
    assert {"zero_sum_per_group", "permutation_equivariant"} & set(props)  # the wrong axis shows as what it breaks
    assert report.inferred.why == MALFORMED


MALFORMED = "no dial inferred: the target's answers to the designed batches are malformed (well_formed)"


def _one_per_group(rewards, G):
    return np.asarray(rewards, dtype=float).reshape(-1, G).mean(axis=1)


def test_a_wrong_shape_on_the_designed_batches_is_said_as_such_not_as_a_non_finite_advantage():
    report = audit(_one_per_group, isolate=False, max_examples=10)
    failed = [f for f in report.findings if f.severity == "fail" and f.property == "well_formed"]
    assert report.inferred.why == MALFORMED and "shape" in failed[0].message, report.format()


def _never_centred(rewards, G):
    r = np.asarray(rewards, dtype=float).reshape(-1, G)
    sd = r.std(axis=1, keepdims=True)
    return np.where(sd > 0, r / np.where(sd > 0, sd, 1), 0).reshape(-1)  # divides by σ, never subtracts the mean


def test_the_inferred_dial_is_shown_as_fitting_only_where_it_fits():
    from grpo_identity.checks import audit

    text = audit(_never_centred, isolate=False, max_examples=30).format()
    assert "inferred dial: none fits (the nearest, centre mean" in text and "finding matches_dial" in text
    assert "inferred dial: centre mean" not in text
    assert "inferred dial: centre mean" in audit("preset:grpo", isolate=False, max_examples=10).format()


def _trl_batch_reading(rewards, group_size):  # TRL scale_rewards="batch": the std of the batch's raw rewards
    r = np.asarray(rewards, dtype=float).reshape(-1, group_size)
    return ((r - r.mean(axis=1, keepdims=True)) / (r.std(ddof=1) + 1e-4)).reshape(-1)


def _lite_ppo_pooled(rewards, group_size):  # LitePPO as AReaL reads it: the pooled std of the centred rewards
    r = np.asarray(rewards, dtype=float).reshape(-1, group_size)
    c = r - r.mean(axis=1, keepdims=True)
    return (c / (np.sqrt((c**2).sum() / (c.size - 1)) + 1e-5)).reshape(-1)


def test_a_documented_other_reading_of_the_expected_variant_is_a_deviation_that_names_it():
    report = audit(_trl_batch_reading, expect="lite_ppo", max_examples=30, isolate=False)
    variant = next(f for f in report.findings if f.property == "variant")
    assert (report.verdict, report.matches, variant.severity) == ("deviation", "lite_ppo", "deviation")
    assert "another documented reading of lite_ppo: TRL's GRPOConfig.scale_rewards='batch'" in variant.message
    assert audit(_lite_ppo_pooled, expect="lite_ppo", max_examples=30, isolate=False).verdict == "pass"


# --- verl's estimator form on a rollout's token layout: unequal lengths, masked holes, the reward at the EOS --------
def _by_uid(index):
    groups: dict = {}
    for i, u in enumerate(index):
        groups.setdefault(u, []).append(i)
    return list(groups.values())


def _verl_opo(token_level_rewards, response_mask, index):  # OPO: baseline Σ Lᵢ Rᵢ / Σ Lᵢ, Lᵢ the answer's tokens
    import torch

    r, L = token_level_rewards.sum(-1), response_mask.sum(-1)
    out = torch.zeros_like(r)
    for rows in _by_uid(index):
        out[rows] = r[rows] - (L[rows] * r[rows]).sum() / L[rows].sum() if len(rows) > 1 else 0.0
    return out[:, None] * response_mask, out[:, None] * response_mask


def _verl_token_grpo(token_level_rewards, response_mask, index):  # GRPO over tokens: Bessel over the token count
    import torch

    r, L = token_level_rewards.sum(-1), response_mask.sum(-1)
    out = torch.zeros_like(r)
    for rows in _by_uid(index):
        g, w = r[rows], L[rows]
        mean = (w * g).sum() / w.sum()
        std = ((w * (g - mean) ** 2).sum() / (w.sum() - 1)).sqrt()
        out[rows] = 0.0 if bool(g.max() == g.min()) else (g - mean) / (std + 1e-5)
    return out[:, None] * response_mask, out[:, None] * response_mask


def _verl_opo_counting_the_span(token_level_rewards, response_mask, index):  # counts the hole as a token
    import torch

    L = torch.stack([m.nonzero().max() + 1 for m in response_mask]).float()
    return _verl_opo(token_level_rewards, L[:, None] >= torch.arange(1, response_mask.shape[1] + 1), index)


def _verl_grpo_reading_the_last_column(token_level_rewards, response_mask, index):
    import torch

    r = token_level_rewards[:, -1]  # the reward sits on each answer's last valid token, not in the last column
    out = torch.zeros_like(r)
    for rows in _by_uid(index):
        g = r[rows]
        out[rows] = 0.0 if len(rows) < 2 or bool(g.max() == g.min()) else (g - g.mean()) / (g.std() + 1e-6)
    return out[:, None] * response_mask, out[:, None] * response_mask


@pytest.mark.parametrize("fn, name", [(_verl_opo, "opo"), (_verl_token_grpo, "token_grpo")])
def test_a_length_weighted_variant_in_verls_form_is_recognised_on_the_rollouts_token_layout(fn, name):
    pytest.importorskip("torch")
    report = audit(fn, expect=name, max_examples=30, isolate=False)
    variant = next(f for f in report.findings if f.property == "variant")
    assert (report.matches, variant.severity) == (name, "note"), report.format()
    assert "with response lengths that differ by answer (a rollout's token layout" in variant.message
    assert report.verdict != "fail", report.format()


@pytest.mark.parametrize("fn", [_verl_opo_counting_the_span, _verl_grpo_reading_the_last_column])
def test_a_verl_form_function_that_misreads_the_token_layout_fails(fn):
    pytest.importorskip("torch")
    report = audit(fn, max_examples=30, isolate=False)
    assert report.verdict == "fail" and report.matches is None, report.format()


def _zero_padded_grid(rewards, group_ids):
    """Groups gathered into a dense (n_groups, largest group) grid padded with zeros, normalised row by row."""
    labels, inverse = np.unique(np.asarray(group_ids), return_inverse=True)
    place = np.array([np.sum(inverse[:i] == g) for i, g in enumerate(inverse)], dtype=int)
    grid = np.zeros((labels.size, int(np.bincount(inverse).max())))
    grid[inverse, place] = rewards
    sd = grid.std(1, keepdims=True)
    return np.where(sd > 1e-12, (grid - grid.mean(1, keepdims=True)) / np.where(sd > 1e-12, sd, 1), 0.0)[inverse, place]


def test_a_ragged_group_padded_with_zero_rewards_is_named_as_padded():
    report = audit(_zero_padded_grid, max_examples=40, isolate=False)
    ragged = [f for f in report.findings if f.property == "ragged_groups"]
    assert report.verdict == "fail" and ragged, report.format()
    assert "as if padded with" in ragged[0].message and "mask the padding" in ragged[0].message


def test_the_report_names_the_kind_the_group_ids_went_in_where_it_is_not_the_rewards():
    from _user_code import torch_by_group_ids, torch_rewards_numpy_index

    report = audit(torch_rewards_numpy_index, expect="grpo", max_examples=10, isolate=False)
    assert report.verdict == "pass" and report.target_info["call"]["ids_input"] == "numpy", report.format()
    assert "called as: torch_rewards_numpy_index(R, index=IDS), rewards as torch float64, ids as numpy" in (
        report.format()
    )
    same = audit(torch_by_group_ids, max_examples=10, isolate=False)
    assert "group_ids=IDS), rewards as torch float64\n" in same.format()
