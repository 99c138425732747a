"""The fixed-policy experiment: its statistics against independent references, the projected check
against the exact one, and the experiment end to end on a tiny budget."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from grpo_identity.trainer.lm.conditional_stats import (
    bootstrap_counts,
    bootstrap_u,
    loglog_slope,
    percentile_interval,
    pooled_slope,
    split_half_rel_err,
    trace_covariance,
    u_statistic,
)


# --- statistics (numpy only) --------------------------------------------------------------------
def test_u_statistic_removes_the_noise_that_the_squared_mean_keeps():
    rng = np.random.default_rng(0)
    mu = np.full(200, 0.1)  # ‖μ‖² = 2, noise tr Σ = 200 per vector
    g = mu + rng.normal(size=(100, 200))
    assert np.linalg.norm(g.mean(0)) ** 2 > 3.0  # plug-in: ‖μ‖² + tr Σ/n = 4 on average
    assert u_statistic(g @ g.T) == pytest.approx(2.0, abs=0.6)


def test_u_statistic_averages_to_the_squared_mean_over_many_draws():
    rng = np.random.default_rng(1)
    mu = np.array([1.0, -2.0, 0.5])  # ‖μ‖² = 5.25
    u = [u_statistic(g @ g.T) for g in (mu + 3 * rng.normal(size=(6, 3)) for _ in range(4000))]
    assert np.mean(u) == pytest.approx(5.25, abs=0.25)


def test_trace_covariance_is_numpys_unbiased_covariance_trace():
    g = np.random.default_rng(2).normal(size=(9, 5)) * [1, 2, 3, 4, 5]
    assert trace_covariance(g @ g.T) == pytest.approx(np.trace(np.cov(g.T, ddof=1)), rel=1e-12)


def test_bootstrap_u_uses_only_pairs_of_distinct_original_groups():
    rng = np.random.default_rng(3)
    g = rng.normal(size=(7, 4)) + 1.0
    gram = g @ g.T
    counts = bootstrap_counts(7, 5, rng)
    for c, u in zip(counts, bootstrap_u(gram, counts)):
        idx = np.repeat(np.arange(7), c)  # the resample, one entry per draw
        pairs = [(a, b) for a, b in itertools.permutations(range(len(idx)), 2) if idx[a] != idx[b]]
        assert u == pytest.approx(np.mean([g[idx[a]] @ g[idx[b]] for a, b in pairs]), rel=1e-10)
    assert counts.sum(1).tolist() == [7] * 5


def test_pooled_slope_finds_a_common_exponent_under_different_intercepts():
    # each prompt covers its own σ range (its p), and the prompts' scales fall as σ grows
    s = np.array([0.25, 0.3, 0.35, 0.35, 0.4, 0.45, 0.4, 0.45, 0.5])
    prompt = np.repeat([0, 1, 2], 3)
    y = np.array([100.0, 10.0, 1.0])[prompt] * s**2
    assert pooled_slope(prompt, s, y) == pytest.approx(2.0)
    assert loglog_slope(s, y) < 0  # one intercept for all would see the prompts' offsets, not the exponent


def test_percentile_interval_needs_enough_finite_values():
    assert percentile_interval([1.0, None, float("nan")]) is None
    assert percentile_interval(list(np.arange(101.0))) == pytest.approx([2.5, 97.5])


def _split_half_case(offset: float, seed: int = 4):
    rng = np.random.default_rng(seed)
    D, n = 400, 200
    r = rng.normal(size=D)  # the reference direction, ‖r‖² ≈ 400
    coef = rng.choice([0.33, 0.43, 0.5], size=n)
    m = r + offset * rng.normal(size=D)
    g = coef[:, None] * (m + 2.0 * rng.normal(size=(n, D)))  # g = c·(m + noise)
    refs = np.stack([r + 0.5 * rng.normal(size=D), r + 0.5 * rng.normal(size=D)])  # two noisy halves of r
    return split_half_rel_err(g @ g.T, coef, g @ refs.T, refs @ refs.T, np.arange(n) % 2 == 0), np.linalg.norm(
        m - r
    ) / np.linalg.norm(r)


def test_split_half_rel_err_is_small_when_the_means_agree_and_finds_a_planted_offset():
    same, _ = _split_half_case(0.0)
    assert same["rel_err"] < 0.1 and same["rel_err_plugin"] > same["rel_err"]  # the plug-in keeps noise
    off, truth = _split_half_case(0.5)
    assert off["rel_err"] == pytest.approx(truth, rel=0.2)
    assert same["cosine"] == pytest.approx(1.0, abs=0.05)


# --- the projected check (torch) -----------------------------------------------------------------
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from _reproduce import RESULTS, numbers_differ, rerun_recorded  # noqa: E402

from grpo_identity.app.cli import main  # noqa: E402
from grpo_identity.dial import DR_GRPO, GRPO, advantages  # noqa: E402
from grpo_identity.trainer.lm.config import named_config  # noqa: E402
from grpo_identity.trainer.lm.identity import check_identity, flatten, group_gradient, per_sample_scores  # noqa: E402
from grpo_identity.trainer.lm.loss import sample_weights  # noqa: E402
from grpo_identity.trainer.lm.projected import projected_check, projected_scores, random_directions  # noqa: E402

G = 8


def _group(model_name: str):
    from grpo_identity.trainer.lm.model import build_model, sample
    from grpo_identity.trainer.lm.task import AdditionTask

    cfg = named_config("cpu-smoke", model=model_name)
    task = AdditionTask(cfg.max_digits)
    torch.manual_seed(0)
    model = build_model(cfg, task.vocab_size, task.prompt_len + task.max_answer_len)
    prompt = torch.as_tensor(task.sample(1, np.random.default_rng(0)).prompts)
    comp, lengths = sample(model, prompt.repeat(G, 1), task.max_answer_len, generator=torch.Generator().manual_seed(0))
    seqs = torch.cat([prompt.repeat(G, 1), comp], dim=1)
    mask = (torch.arange(comp.shape[1])[None] < lengths[:, None]).float()
    w = sample_weights(lengths, "seq_mean", n_groups=1, group_size=G, max_new_tokens=task.max_answer_len)
    return model, task.prompt_len, seqs, mask, w, torch.tensor([1.0, 0, 0, 1, 0, 0, 0, 1])


@pytest.mark.parametrize("model_name", ["gpt2", "llama"])
def test_forward_mode_projections_equal_the_exact_scores_times_the_directions(model_name):
    model, P, seqs, mask, w, _ = _group(model_name)
    scores = per_sample_scores(model, seqs, mask, w, prompt_len=P)  # (G, D)
    V = random_directions(scores.shape[1], 3, seed=1, device=torch.device("cpu"))
    proj = projected_scores(model, seqs, mask, w, V, prompt_len=P)
    assert proj.shape == (G, 3)
    assert torch.allclose(proj, scores @ V.T, rtol=1e-4, atol=1e-4 * float((scores @ V.T).abs().max()))


@pytest.mark.parametrize(
    "used, claimed, expected",
    [
        (GRPO, GRPO, 0.0),
        (GRPO.replace(ddof=1), GRPO, math.sqrt(8 / 7) - 1),  # every advantage shrunk by sqrt((G-1)/G)
        (DR_GRPO, GRPO, None),  # σ²·gap against σ·gap: |1 − σ|/σ
    ],
    ids=["correct", "ddof-one", "dr-grpo-claimed-as-grpo"],
)
def test_projected_and_exact_checks_agree_on_correct_and_planted_advantages(used, claimed, expected):
    model, P, seqs, mask, w, rewards = _group("gpt2")
    adv = advantages(rewards, G, used)
    pg, _, _ = group_gradient(model, seqs, mask, w, adv, prompt_len=P, group_size=G, clip_low=0.2, clip_high=0.2)
    g = -flatten(pg)
    exact = check_identity(g, per_sample_scores(model, seqs, mask, w, prompt_len=P), rewards, adv, claimed).rel_err
    V = random_directions(g.numel(), 2, seed=0, device=torch.device("cpu"))
    proj = projected_check(g, V, projected_scores(model, seqs, mask, w, V, prompt_len=P), rewards, adv, claimed).rel_err
    if expected == 0.0:
        assert exact < 1e-4 and proj < 1e-4
    else:
        want = expected if expected is not None else abs(1 - math.sqrt(15) / 8) / (math.sqrt(15) / 8)
        assert exact == pytest.approx(want, rel=1e-3) and proj == pytest.approx(want, rel=1e-3)


def test_projected_check_catches_scores_with_the_wrong_aggregation_weight():
    model, P, seqs, mask, w, rewards = _group("gpt2")
    adv = advantages(rewards, G, GRPO)
    pg, _, _ = group_gradient(model, seqs, mask, w, adv, prompt_len=P, group_size=G, clip_low=0.2, clip_high=0.2)
    g = -flatten(pg)
    V = random_directions(g.numel(), 2, seed=0, device=torch.device("cpu"))
    wrong = torch.full_like(w, float(w.mean()))
    assert (
        projected_check(g, V, projected_scores(model, seqs, mask, wrong, V, prompt_len=P), rewards, adv, GRPO).rel_err
        > 1e-2
    )


def test_training_with_the_projected_check_meets_the_goal_and_checks_groups():
    from grpo_identity.trainer.lm.train import run_lm

    s = run_lm(
        named_config(
            "cpu-smoke",
            mode="grpo",
            max_digits=1,
            warmup_steps=60,
            warmup_target=0.0,
            steps=2,
            eval_prompts_per_level=8,
            probe_samples=0,
            check_directions=2,
        )
    )
    assert s["groups_checked"] > 0 and s["identity_max_rel_err"] < 1e-4


# --- the experiment end to end, tiny ---------------------------------------------------------------
TINY = dict(
    experiment="conditional",
    max_digits=1,
    warmup_steps=150,
    warmup_target=0.0,
    eval_prompts_per_level=8,
    cond_prompts=2,
    cond_groups=24,
    cond_candidates=12,
    cond_probe=16,
    cond_p_low=0.05,
    cond_p_high=0.95,
    cond_ref_answers=64,
    cond_min_cell=4,
    cond_bootstrap=50,
    cond_exact_groups=2,
    group_size=4,
)


def test_conditional_experiment_reports_every_key_and_its_checks_hold():
    from grpo_identity.trainer.lm.conditional import run_conditional

    s = run_conditional(named_config("cpu-smoke", **TINY))
    c = s["conditional"]
    for key in ("slope_by_mode", "cosine_min", "grad_p_rel_err", "noise_slope_by_mode", "groups"):
        assert key in c
    assert set(c["slope_by_mode"]) == {"grpo", "dr_grpo"} and c["groups"] == 2 * 24
    pc = c["projected_check"]
    assert pc["projected_max_rel_err"] < 1e-4 and pc["exact_max_rel_err"] < 1e-4 and pc["groups_exact"] == 2 * 2 * 2
    assert 0 < pc["projected_max_rel_err_normalised"] < 1e-4
    assert pc["silent_groups_with_nonzero_grad"] == 0
    # the goal reads the normalised projected error (‖Vg‖ has a χ²_K spread, see conditional_summary.goal_errors)
    assert s["identity_max_rel_err"] == max(pc["projected_max_rel_err_normalised"], pc["exact_max_rel_err"])
    assert s["groups_checked"] == pc["groups_projected"] > 0
    assert c["grad_p_rel_err"]["mode"] == "dr_grpo"  # the mode with unweighted (constant) scores
    assert all(p["p_probe"] >= 0.05 for p in c["prompts"])
    pre = c["preregistered"]  # read from the report above, never refitted
    assert list(pre["criteria"]) == ["grpo_slope", "dr_grpo_slope", "cosine_median", "noise_ratio"]
    assert pre["prompts"] == len(c["prompts"]) == 2 and "commit" in pre and len(pre["analysis"]["sha256"]) == 64
    for mode in ("grpo", "dr_grpo"):
        assert pre["slope_by_mode"][mode]["value"] == c["slope_by_mode"][mode]["weighted"]["value"]
        assert pre["slope_by_mode"][mode]["unweighted"]["value"] == c["slope_by_mode"][mode]["value"]
    assert pre["criteria"]["noise_ratio"] == "not testable"  # addition: one correct answer, Σ₊ = 0


def test_conditional_experiment_on_split_tests_the_noise_term_that_addition_cannot():
    from grpo_identity.trainer.lm.conditional import run_conditional

    s = run_conditional(named_config("cpu-smoke", **{**TINY, "task": "split", "warmup_steps": 100}))
    c = s["conditional"]
    assert c["task"] == "split" and len(c["prompts"]) == 2
    texts = [p["prompt"] for p in c["prompts"]]
    assert len(set(texts)) == 2 and all(t.startswith("^") and t.endswith("=") for t in texts)  # distinct prompts
    assert all(p["correct_distinct"] > 1 for p in c["prompts"])  # several correct answers were sampled
    assert all(p["trace_sigma_pos"]["grpo"] > 0 for p in c["prompts"])  # so Σ₊ ≠ 0
    pre = c["preregistered"]
    assert pre["criteria"]["noise_ratio"] in ("met", "not met")  # testable, unlike addition's
    assert pre["noise_ratio_by_mode"]["grpo"]["prompts_testable"] and pre["noise_ratio_by_mode"]["grpo"]["cells"] > 0
    assert s["identity_max_rel_err"] < 1e-4


def test_prompt_selection_keeps_each_prompt_once_and_measures_every_candidate(monkeypatch):
    import types

    import grpo_identity.trainer.lm.conditional as cond
    from grpo_identity.trainer.lm.task import SplitTask

    task = SplitTask(max_digits=1)  # nine prompts, ^1= to ^9=: sixty candidates repeat them
    drawn = []

    def probe(env, config, prompt, answer, n, gen):  # every candidate solved half the time
        drawn.append(n)
        return None, None, None, torch.full((n,), 0.5)

    monkeypatch.setattr(cond, "draw_answers", probe)
    cfg = named_config("cpu-smoke", task="split", max_digits=1, cond_candidates=60, cond_prompts=12, cond_probe=10)
    env = types.SimpleNamespace(task=task, device=torch.device("cpu"))
    kept, seen = cond.select_prompts(env, cfg, np.random.default_rng(0), torch.Generator())
    assert sorted(task.decode(k[0].tolist()) for k in kept) == [f"^{s}=" for s in range(1, 10)]
    assert len(seen) == 60 and drawn == [10] * 60


def test_conditional_checks_fail_when_ddof_one_advantages_are_claimed_as_grpo(monkeypatch):
    import grpo_identity.trainer.lm.conditional as cond

    monkeypatch.setattr(cond, "advantages", lambda r, G, dial: advantages(r, G, dial.replace(ddof=1)))
    pc = cond.run_conditional(named_config("cpu-smoke", **{**TINY, "mode": "grpo"}))["conditional"]["projected_check"]
    # ddof 1 with G = 4: every advantage shrunk by sqrt(3/4), so the error is sqrt(4/3) − 1 on both checks
    assert pc["exact_max_rel_err"] == pytest.approx(math.sqrt(4 / 3) - 1, rel=1e-3)
    assert pc["projected_max_rel_err"] == pytest.approx(math.sqrt(4 / 3) - 1, rel=1e-3)
    assert pc["projected_max_rel_err_normalised"] > 0.05  # ‖Ve‖/(√K‖g‖): the same error, up to the chi spread of ‖Vg‖


def test_cli_conditional_json_prints_the_conditional_keys(tmp_path, capsys):
    argv = [
        "train",
        "lm",
        "--experiment",
        "conditional",
        "--max-digits",
        "1",
        "--warmup-steps",
        "150",
        "--warmup-target",
        "0",
        "--eval-prompts-per-level",
        "8",
        "--cond-prompts",
        "2",
        "--cond-groups",
        "16",
        "--cond-candidates",
        "12",
        "--cond-probe",
        "16",
        "--cond-p-low",
        "0.05",
        "--cond-p-high",
        "0.95",
        "--cond-ref-answers",
        "64",
        "--cond-min-cell",
        "4",
        "--cond-bootstrap",
        "20",
        "--G",
        "4",
        "--mode",
        "dr_grpo",
        "--json",
        "--out",
        str(tmp_path / "c"),
    ]
    assert main(argv) == 0
    c = json.loads(capsys.readouterr().out)["conditional"]
    assert list(c["slope_by_mode"]) == ["dr_grpo"] and c["groups"] == 32
    assert (tmp_path / "c" / "conditional.png").stat().st_size > 1000
    assert c["preregistered"]["criteria"]["grpo_slope"] == "not testable"  # only Dr. GRPO was measured
    prov = json.loads((tmp_path / "c" / "provenance.json").read_text())
    assert prov["command"] == "grpo-identity " + " ".join(argv) and set(prov["versions"]) >= {"torch", "numpy"}


@pytest.mark.parametrize(
    "argv",
    [
        ["--cond-p-low", "0.9", "--cond-p-high", "0.1"],
        ["--mode", "dapo"],
        ["--aggregation", "token_mean"],
        ["--cond-min-cell", "1"],
        ["--task", "multiply"],
    ],
)
def test_cli_conditional_rejects_bad_settings_in_one_line_with_exit_2(argv, capsys):
    assert main(["train", "lm", "--experiment", "conditional", *argv]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_weighted_pooled_slope_ignores_a_point_of_no_weight_and_equals_the_plain_fit_at_equal_weights():
    s = np.array([0.25, 0.3, 0.35, 0.35, 0.4, 0.45])
    prompt = np.repeat([0, 1], 3)
    y = np.array([10.0, 1.0])[prompt] * s**2
    y_bad = y.copy()
    y_bad[2] *= 50  # one outlier
    from grpo_identity.trainer.lm.conditional_stats import weighted_pooled_slope

    assert weighted_pooled_slope(prompt, s, y_bad, np.ones(6)) == pytest.approx(pooled_slope(prompt, s, y_bad))
    assert weighted_pooled_slope(prompt, s, y_bad, [1, 1, 0, 1, 1, 1]) == pytest.approx(2.0)
    assert weighted_pooled_slope(prompt, s, y_bad, [1, 1, 1e-12, 1, 1, 1]) == pytest.approx(
        2.0, abs=1e-6
    )  # weighted centring too


def _synthetic_prompt(rng, p: float, n_groups: int, G: int, D: int, a: float, b: float):
    """One prompt's measurement record built from answers with known class means and noise:
    correct scores μ₊ + a·N(0, I), incorrect μ₋ + b·N(0, I); g = c(k)·(s̄₊ − s̄₋) per mode."""
    from grpo_identity.dial import coefficient, preset

    mu_pos, mu_neg = rng.normal(size=D), rng.normal(size=D)
    k = rng.binomial(G, p, size=n_groups)
    live = np.flatnonzero((k > 0) & (k < G))
    gaps = np.stack(
        [
            mu_pos + a * rng.normal(size=(kk, D)).mean(0) - mu_neg - b * rng.normal(size=(G - kk, D)).mean(0)
            for kk in k[live]
        ]
    )
    r = mu_pos - mu_neg
    refs = np.stack([r + 0.1 * rng.normal(size=D), r + 0.1 * rng.normal(size=D)])
    modes = {}
    for mode, agg in (("grpo", "seq_mean"), ("dr_grpo", "constant")):
        g = np.asarray(coefficient(k[live], G, preset(mode)), dtype=float)[:, None] * gaps
        dots = g @ refs.T
        modes[mode] = {
            "aggregation": agg,
            "live": live.tolist(),
            "gram": g @ g.T,
            "dots": {"class": dots, "grad_p": dots},
            "ref_gram": {"class": refs @ refs.T, "grad_p": refs @ refs.T},
            "tr_pos": a**2 * D,
            "tr_neg": b**2 * D,
            "projected_errs": [1e-7],
            "exact_errs": [1e-7],
            "silent_nonzero": 0,
        }
    return {"k": k.tolist(), "n_ref": 0, "p_ref": p, "level": 1, "p_probe": p, "modes": modes}


def test_summary_recovers_the_theorems_slopes_and_noise_from_vectors_with_known_moments():
    from grpo_identity.trainer.lm.conditional_summary import summarise

    rng = np.random.default_rng(0)
    measured = [_synthetic_prompt(rng, p, 400, 8, 60, 0.5, 1.5) for p in (0.3, 0.5, 0.7)]
    cfg = named_config("cpu-smoke", experiment="conditional", cond_bootstrap=200, cond_min_cell=8)
    c = summarise(measured, cfg, np.random.default_rng(1))
    for mode, slope in (("grpo", 1), ("dr_grpo", 2)):
        sl = c["slope_by_mode"][mode]
        assert sl["value"] == pytest.approx(slope, abs=0.15) and sl["interval"][0] < slope < sl["interval"][1]
        assert c["noise_slope_by_mode"][mode]["measured_over_predicted_median"] == pytest.approx(1.0, abs=0.15)
    assert c["cosine_min"]["by_mode"]["grpo"]["median"] == pytest.approx(1.0, abs=0.05)
    assert c["grad_p_rel_err"]["value"] < 0.1 and c["grad_p_rel_err"]["mode"] == "dr_grpo"
    assert c["groups"] == 1200


def test_cli_conditional_table_names_the_slopes_and_the_checks(capsys):
    argv = [
        "train",
        "lm",
        "--experiment",
        "conditional",
        "--max-digits",
        "1",
        "--warmup-steps",
        "150",
        "--warmup-target",
        "0",
        "--eval-prompts-per-level",
        "8",
        "--cond-prompts",
        "2",
        "--cond-groups",
        "16",
        "--cond-candidates",
        "12",
        "--cond-probe",
        "16",
        "--cond-p-low",
        "0.05",
        "--cond-p-high",
        "0.95",
        "--cond-ref-answers",
        "64",
        "--cond-min-cell",
        "4",
        "--cond-bootstrap",
        "20",
        "--G",
        "4",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "slope |E[g|k]| vs sigma" in out and "dr_grpo" in out and "holds" in out
    assert "pre-registered analysis" in out and "noise_ratio    not testable" in out


@pytest.mark.slow
def test_the_stored_fixed_policy_run_reproduces_from_its_recorded_command(tmp_path, capsys):
    """results/lm-conditional-cpu rerun (72 s on an idle 2-core machine): torch on one CPU thread, seeded, gives
    the same numbers on the same kind of CPU.  Its answers are sampled, and torch's kernels differ by the CPU's
    vector instructions, so on another CPU (or one the record does not name) the samples differ: there the run
    must still complete on the same design, with the exact identity checks holding."""
    from grpo_identity import provenance

    stored = RESULTS / "lm-conditional-cpu"
    code, recorded = rerun_recorded(stored, tmp_path)
    assert code == 0
    capsys.readouterr()
    env = provenance.differences(recorded) or ["none"]
    old, new = (json.loads((d / "summary.json").read_text()) for d in (stored, tmp_path))
    design = ("groups", "group_size", "task")
    assert [new["conditional"][k] for k in design] == [old["conditional"][k] for k in design]
    assert len(new["conditional"]["candidates"]) == len(old["conditional"]["candidates"])
    assert new["identity_max_rel_err"] < 1e-4 and new["conditional"]["projected_check"]["exact_max_rel_err"] < 1e-5
    assert set(new["conditional"]["preregistered"]["criteria"]) == set(old["conditional"]["preregistered"]["criteria"])
    if recorded.get("cpu") != provenance.cpu():
        pytest.skip(
            f"the run's numbers are compared only on the kind of CPU it recorded ({recorded.get('cpu') or 'none'}; "
            f"here {provenance.cpu()}): its design and exact identity checks held"
        )
    diffs = numbers_differ(old, new, rtol=1e-6, atol=1e-9, skip=("seconds", "analysis"))
    assert not diffs, f"{len(diffs)} values differ (environment changes: {env}): " + "; ".join(diffs[:5])
