"""The LM trainer: the identity on real transformer gradients, and the trainer's own behaviour."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from grpo_identity.app.cli import main  # noqa: E402
from grpo_identity.dial import DAPO, DR_GRPO, GRPO, advantages  # noqa: E402
from grpo_identity.trainer.lm.config import named_config  # noqa: E402
from grpo_identity.trainer.lm.identity import (  # noqa: E402
    check_identity,
    flatten,
    gap_noise_share,
    group_gradient,
    loglog_fit,
    per_sample_scores,
    silent_estimate,
    trainable,
)
from grpo_identity.trainer.lm.loss import kl_k3, sample_weights  # noqa: E402
from grpo_identity.trainer.lm.model import build_model, sample, token_logprobs  # noqa: E402
from grpo_identity.trainer.lm.task import EOS, PAD, AdditionTask  # noqa: E402
from grpo_identity.trainer.lm.train import Learner, run_lm, train_mode, warmup  # noqa: E402

G = 8
#: a tiny, fast configuration: 1-digit addition, short warm-up, few steps
TINY = dict(
    max_digits=1, warmup_steps=60, warmup_target=0.0, steps=3, eval_prompts_per_level=8, eval_every=2, probe_samples=8
)


def _group(model_name: str = "gpt2", seed: int = 0):
    """One group of G sampled answers from a fresh model, with planted rewards (k = 3)."""
    cfg = named_config("cpu-smoke", model=model_name)
    task = AdditionTask(cfg.max_digits)
    torch.manual_seed(seed)
    model = build_model(cfg, task.vocab_size, task.prompt_len + task.max_answer_len)
    prompt = torch.as_tensor(task.sample(1, np.random.default_rng(seed)).prompts)
    comp, lengths = sample(
        model, prompt.repeat(G, 1), task.max_answer_len, generator=torch.Generator().manual_seed(seed)
    )
    seqs = torch.cat([prompt.repeat(G, 1), comp], dim=1)  # (G, P+T)
    mask = (torch.arange(comp.shape[1])[None] < lengths[:, None]).float()
    rewards = torch.tensor([1.0, 0, 0, 1, 0, 0, 0, 1])
    return model, task, seqs, mask, lengths, rewards


def _check(model, task, seqs, mask, lengths, rewards, used, claimed, aggregation="seq_mean"):
    adv = advantages(rewards, G, used)
    w = sample_weights(lengths, aggregation, n_groups=3, group_size=G, max_new_tokens=task.max_answer_len)
    pg, _, _ = group_gradient(
        model, seqs, mask, w, adv, prompt_len=task.prompt_len, group_size=G, clip_low=0.2, clip_high=0.2
    )
    scores = per_sample_scores(model, seqs, mask, w, prompt_len=task.prompt_len)
    return check_identity(-flatten(pg), scores, rewards, adv, claimed)


@pytest.mark.parametrize("dial", [GRPO, DR_GRPO, DAPO], ids=lambda d: d.name)
@pytest.mark.parametrize("aggregation", ["seq_mean", "token_mean", "constant"])
def test_group_gradient_equals_coefficient_times_score_gap(dial, aggregation):
    chk = _check(*_group(), used=dial, claimed=dial, aggregation=aggregation)
    assert chk.num_correct == 3 and chk.g_norm > 0
    assert chk.rel_err < 1e-4 and chk.rel_err_sum < 1e-4
    assert chk.coef == pytest.approx(math.sqrt(15) / 8 if dial is not DR_GRPO else 15 / 64)


def test_identity_holds_on_llama_too():
    chk = _check(*_group("llama"), used=GRPO, claimed=GRPO)
    assert chk.rel_err < 1e-4


def test_planted_ddof_one_advantage_fails_the_check_claimed_as_grpo():
    chk = _check(*_group(), used=GRPO.replace(ddof=1), claimed=GRPO)
    # ddof 1 shrinks every advantage, so g, by sqrt((G-1)/G): ‖g − σ·gap‖/‖g‖ = sqrt(G/(G-1)) − 1
    assert chk.rel_err > 1e-2
    assert chk.rel_err == pytest.approx(math.sqrt(8 / 7) - 1, rel=1e-3)
    assert chk.rel_err_sum < 1e-4  # the scores themselves are right; only the claim is wrong


def test_silent_group_gives_exactly_zero_gradient():
    model, task, seqs, mask, lengths, _ = _group()
    for r in (torch.zeros(G), torch.ones(G)):
        adv = advantages(r, G, GRPO)
        w = sample_weights(lengths, "seq_mean", n_groups=1, group_size=G, max_new_tokens=task.max_answer_len)
        pg, _, _ = group_gradient(
            model, seqs, mask, w, adv, prompt_len=task.prompt_len, group_size=G, clip_low=0.2, clip_high=0.2
        )
        assert float(flatten(pg).abs().max()) == 0.0


def test_per_sample_scores_match_a_loop_of_backward_calls():
    model, task, seqs, mask, lengths, _ = _group()
    w = 1.0 / lengths.float()
    scores = per_sample_scores(model, seqs, mask, w, prompt_len=task.prompt_len)
    _, params = trainable(model)
    for i in (0, 5):
        lp = token_logprobs(model, seqs[i : i + 1], task.prompt_len)[0]
        ref = flatten(torch.autograd.grad(w[i] * (lp * mask[i]).sum(), params))
        assert torch.allclose(scores[i], ref, rtol=1e-4, atol=1e-6)


def test_kl_gradient_vanishes_where_the_policy_is_the_reference():
    model, task, seqs, mask, lengths, rewards = _group()
    with torch.no_grad():
        ref = token_logprobs(model, seqs, task.prompt_len)
    adv = advantages(rewards, G, GRPO)
    w = 1.0 / lengths.float()
    _, kl, _ = group_gradient(
        model,
        seqs,
        mask,
        w,
        adv,
        prompt_len=task.prompt_len,
        group_size=G,
        clip_low=0.2,
        clip_high=0.2,
        ref_logp=ref,
        kl_coef=0.1,
    )
    assert kl is not None and float(flatten(kl).abs().max()) < 1e-6
    assert float((kl_k3(ref + 0.3, ref)).min()) > 0  # k3 is positive away from the reference


def test_checker_accepts_exactly_the_reversed_sum_then_eos():
    task = AdditionTask(max_digits=2)
    ans = task.answer_tokens(47, 85)
    assert task.decode(ans) == "231|"
    comps = np.array([ans + [PAD], ans[:-1] + [PAD, PAD], ans[:-1] + [9, EOS], ans + [7]])
    assert task.rewards(comps, [ans] * 4).tolist() == [1.0, 0.0, 0.0, 1.0]


def test_problems_follow_the_difficulty_mix_and_have_d_digit_operands():
    task = AdditionTask(max_digits=3, difficulty_weights=(0, 1, 3))
    p = task.sample(400, np.random.default_rng(0))
    assert set(p.levels.tolist()) == {2, 3} and (p.levels == 3).mean() > 0.6
    assert p.prompts.shape == (400, task.prompt_len)
    assert all(len(a) - 1 in (d, d + 1) for a, d in zip(p.answers, p.levels))


def test_sampler_pads_after_eos_and_counts_lengths():
    model, task, seqs, mask, lengths, _ = _group()
    comp = seqs[:, task.prompt_len :]
    for row, L in zip(comp, lengths):
        L = int(L)
        if L < comp.shape[1] or (row == EOS).any():
            assert int(row[L - 1]) == EOS and (row[L:] == PAD).all()


def test_silent_estimate_is_the_hypergeometric_all_agree_probability():
    assert silent_estimate(0, 16, 8) == 1.0 and silent_estimate(16, 16, 8) == 1.0
    assert silent_estimate(8, 16, 8) == pytest.approx(2 / math.comb(16, 8))
    assert silent_estimate(1, 4, 8) == pytest.approx(0.25**8 + 0.75**8)  # plug-in when n < G


def test_loglog_fit_recovers_a_power_law():
    x = np.array([0.2, 0.3, 0.4, 0.5])
    fit = loglog_fit(x, 3 * x**2)
    assert fit["slope"] == pytest.approx(2) and fit["r2"] == pytest.approx(1)


def test_noise_share_is_zero_without_scatter_and_near_one_for_pure_noise():
    r = torch.tensor([1.0, 1, 0, 0, 0, 0, 0, 0])
    flat = torch.stack([torch.ones(50) if x else torch.zeros(50) for x in r])  # every class a single point
    assert gap_noise_share(flat, r) == 0.0
    shares = [gap_noise_share(torch.randn(8, 4000, generator=torch.Generator().manual_seed(i)), r) for i in range(5)]
    assert all(abs(x - 1) < 0.1 for x in shares)
    assert math.isnan(
        gap_noise_share(flat, torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 0]))
    )  # one correct answer: no scatter to see


@pytest.mark.parametrize("model_name", ["gpt2", "llama"])
def test_smoke_run_changes_every_trainable_parameter(model_name):
    cfg = named_config("cpu-smoke", model=model_name, mode="dapo", **{**TINY, "steps": 2})
    task = AdditionTask(cfg.max_digits)
    torch.manual_seed(0)
    model = build_model(cfg, task.vocab_size, task.prompt_len + task.max_answer_len)
    device = torch.device("cpu")
    eval_set = task.sample(8, np.random.default_rng(1))
    warmup(model, task, cfg, np.random.default_rng(0), device, False)
    base = {k: v.detach().clone() for k, v in model.state_dict().items()}
    res = train_mode("dapo", Learner(model, None, cfg, task, device, False), base, eval_set)
    assert sum(s["n_groups"] for s in res["steps"]) > 0
    unchanged = [n for n, p in model.named_parameters() if p.requires_grad and torch.equal(p.detach(), base[n])]
    assert unchanged == []
    assert all(g["rel_err"] < 1e-4 for g in res["groups"] if "rel_err" in g)


def test_same_seed_gives_the_same_metrics(tmp_path):
    cfg = named_config("cpu-smoke", mode="dapo", **TINY)  # DAPO: the resampling path draws the most random numbers
    runs = []
    for name in ("a", "b"):
        run_lm(cfg, out_dir=tmp_path / name)
        lines = [json.loads(x) for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        for rec in lines:
            rec.pop("seconds", None)
            rec.get("warmup", {}).pop("seconds", None)
        runs.append(lines)
    assert runs[0] == runs[1]
    assert len(runs[0]) == 1 + cfg.steps  # warm-up line, then one per step


def test_cli_json_has_the_documented_keys_and_writes_the_outputs(tmp_path, capsys):
    out = tmp_path / "run"
    argv = [
        "train",
        "lm",
        "--mode",
        "grpo",
        "--max-digits",
        "1",
        "--steps",
        "2",
        "--warmup-steps",
        "40",
        "--warmup-target",
        "0",
        "--eval-prompts-per-level",
        "8",
        "--G",
        "4",
        "--json",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    s = json.loads(capsys.readouterr().out)
    for key in (
        "identity_max_rel_err",
        "groups_checked",
        "loglog_slope",
        "loglog_r2",
        "device",
        "seconds",
        "modes",
        "learning_speed",
    ):
        assert key in s
    assert s["device"] == "cpu" and list(s["modes"]) == ["grpo"]
    assert json.loads((out / "config.json").read_text())["group_size"] == 4
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 3
    assert (out / "lm_identity.png").stat().st_size > 1000 and (out / "summary.json").exists()
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["command"] == "grpo-identity " + " ".join(argv) and prov["versions"]["torch"] is not None


def test_cli_rejects_bad_settings_with_exit_2(capsys):
    assert main(["train", "lm", "--G", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--G" in err  # the option as typed, not the field name


def test_amp_and_kl_and_ppo_epochs_run_on_cpu():
    s = run_lm(named_config("cpu-smoke", mode="grpo", amp="bf16", kl_coef=0.05, inner_steps=2, check_every=2, **TINY))
    # rollouts and the unchecked step run under bf16 autocast; the checked steps stay fp32
    assert s["amp"] is True and s["modes"]["grpo"]["groups_checked"] > 0
    assert s["identity_max_rel_err"] < 1e-4


def test_time_budget_stops_every_mode_early_but_after_at_least_one_step():
    s = run_lm(named_config("cpu-smoke", **{**TINY, "steps": 10_000, "time_budget": 1.0, "eval_every": 10_000}))
    assert all(1 <= m["steps_run"] < 10_000 for m in s["modes"].values())


@pytest.mark.slow
def test_a_shortened_cpu_smoke_run_meets_the_identity_goal_and_slopes_decompose():
    """The cpu-smoke configuration cut to 15 of its 40 steps (its full run is results/lm-cpu-smoke): every check
    below holds step by step, so the shorter run tests the same things in about half the time."""
    s = run_lm(named_config("cpu-smoke", steps=15, eval_every=15))
    assert s["identity_max_rel_err"] < 1e-4 and s["groups_checked"] > 100
    for mode, exponent in (("grpo", 1), ("dr_grpo", 2), ("dapo", 1)):
        m = s["modes"][mode]
        # log‖g‖ = e·log σ + log‖s̄₊ − s̄₋‖ exactly, so the fitted slopes differ by the exponent of σ in c
        assert m["slope_minus_gap_slope"] == pytest.approx(exponent, abs=1e-3)
        assert m["silent_groups_with_nonzero_grad"] == 0
    assert s["modes"]["dapo"]["silent_groups"] == 0


# --- the check is not tautological: planted bugs in the trainer's own pipeline make it fail ------
def _one_step(mode: str = "grpo"):
    """One checked step of ``train_mode`` (1-digit task, short warm-up): its checked groups."""
    cfg = named_config("cpu-smoke", mode=mode, **{**TINY, "steps": 1})
    task = AdditionTask(cfg.max_digits)
    torch.manual_seed(0)
    model = build_model(cfg, task.vocab_size, task.prompt_len + task.max_answer_len)
    device = torch.device("cpu")
    warmup(model, task, cfg, np.random.default_rng(0), device, False)
    base = {k: v.detach().clone() for k, v in model.state_dict().items()}
    res = train_mode(
        mode, Learner(model, None, cfg, task, device, False), base, task.sample(4, np.random.default_rng(1))
    )
    checked = [g for g in res["groups"] if "rel_err" in g]
    assert len(checked) >= 2  # the step had non-silent groups to check
    return checked


def test_trainer_passes_its_own_check_without_a_planted_bug():
    assert max(g["rel_err"] for g in _one_step()) < 1e-4


def test_trainer_check_fails_when_ddof_one_advantages_are_claimed_as_grpo(monkeypatch):
    import grpo_identity.trainer.lm.train as lm_train

    monkeypatch.setattr(lm_train, "advantages", lambda r, G, dial: advantages(r, G, dial.replace(ddof=1)))
    errs = [g["rel_err"] for g in _one_step()]
    assert all(e == pytest.approx(math.sqrt(8 / 7) - 1, rel=1e-3) for e in errs)


def test_trainer_check_fails_when_the_advantage_sign_is_flipped(monkeypatch):
    import grpo_identity.trainer.lm.train as lm_train

    monkeypatch.setattr(lm_train, "advantages", lambda r, G, dial: -advantages(r, G, dial))
    assert all(g["rel_err"] == pytest.approx(2.0, rel=1e-4) for g in _one_step())


def test_trainer_check_fails_when_dr_grpo_advantages_are_claimed_as_grpo(monkeypatch):
    import grpo_identity.trainer.lm.train as lm_train

    monkeypatch.setattr(lm_train, "advantages", lambda r, G, dial: advantages(r, G, DR_GRPO))
    checked = _one_step()
    # g = σ²·gap against the claimed σ·gap: relative error |1 − σ|/σ
    assert all(g["rel_err"] == pytest.approx(abs(1 - g["sigma"]) / g["sigma"], rel=1e-3) for g in checked)


def test_trainer_check_fails_when_the_loss_aggregates_with_other_weights_than_the_scores(monkeypatch):
    import grpo_identity.trainer.lm.loss as lm_loss

    real = lm_loss.group_loss
    # the loss sums tokens (weight 1) while the scores assume GRPO's per-answer mean (weight 1/|y|)
    monkeypatch.setattr(
        lm_loss, "group_loss", lambda per_token, mask, weights, G: real(per_token, mask, torch.ones_like(weights), G)
    )
    assert min(g["rel_err"] for g in _one_step()) > 1e-2


def test_check_fails_when_scores_use_a_wrong_aggregation_weight():
    model, task, seqs, mask, lengths, rewards = _group()
    adv = advantages(rewards, G, GRPO)
    w = sample_weights(lengths, "seq_mean", n_groups=1, group_size=G, max_new_tokens=task.max_answer_len)
    pg, _, _ = group_gradient(
        model, seqs, mask, w, adv, prompt_len=task.prompt_len, group_size=G, clip_low=0.2, clip_high=0.2
    )
    wrong = sample_weights(lengths, "constant", n_groups=1, group_size=G, max_new_tokens=task.max_answer_len)
    assert not torch.allclose(w, wrong)
    bad = check_identity(
        -flatten(pg), per_sample_scores(model, seqs, mask, wrong, prompt_len=task.prompt_len), rewards, adv, GRPO
    )
    assert bad.rel_err > 1e-2 and bad.rel_err_sum > 1e-2


# --- the aggregation weights against independent references -------------------------------------
@pytest.mark.parametrize("aggregation", ["seq_mean", "token_mean", "constant"])
def test_aggregation_weights_give_each_papers_batch_loss(aggregation):
    from grpo_identity.trainer.lm.loss import group_loss

    n, T = 3, 6
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, T + 1, (n * G,), generator=gen)
    mask = (torch.arange(T)[None] < lengths[:, None]).float()  # (nG, T)
    per_token = torch.randn(n * G, T, generator=gen)
    w = sample_weights(lengths, aggregation, n_groups=n, group_size=G, max_new_tokens=T)
    batch = group_loss(per_token, mask, w, G) / n
    x = per_token * mask
    if aggregation == "seq_mean":  # GRPO: mean over answers of each answer's token mean
        ref = (x.sum(1) / lengths).mean()
    elif aggregation == "token_mean":  # DAPO: one mean over every token of the batch
        ref = x.sum() / mask.sum()
    else:  # Dr. GRPO: token sums over a fixed length, mean over answers
        ref = (x.sum(1) / T).mean()
    assert float(batch) == pytest.approx(float(ref), rel=1e-6)


def test_log_probs_are_those_of_the_tokens_the_sampler_chose():
    # greedy decoding picks the arg-max, so each completion token's log-prob is its row's maximum:
    # an off-by-one shift between logits and tokens breaks this for g and sᵢ alike
    model, task, _, _, _, _ = _group()
    prompts = torch.as_tensor(task.sample(16, np.random.default_rng(3)).prompts)
    comp, lengths = sample(model, prompts, task.max_answer_len, temperature=0.0)
    seqs = torch.cat([prompts, comp], 1)
    with torch.no_grad():
        lp = token_logprobs(model, seqs, task.prompt_len)  # (N, T)
        full = torch.log_softmax(model(input_ids=seqs).logits.float(), -1)  # (N, P+T, V)
    for i in range(16):
        for t in range(int(lengths[i])):
            assert float(lp[i, t]) == pytest.approx(float(full[i, task.prompt_len - 1 + t].max()), abs=1e-5)


# --- DAPO's resampling --------------------------------------------------------------------------
def test_dapo_replaces_silent_groups_with_fresh_prompts_and_grpo_keeps_them():
    from grpo_identity.trainer.lm.rollout import rollout

    model, task, _, _, _, _ = _group()
    Gs = 4
    # draw 1: groups silent, live, silent, live; draw 2 (2 fresh prompts): silent, live; draw 3: live
    plan = iter([[0, 0, 0, 0, 1, 0, 0, 1, 1, 1, 1, 1, 0, 1, 0, 0], [1, 1, 1, 1, 0, 0, 1, 0], [0, 1, 1, 1]])
    task.rewards = lambda comps, answers: np.asarray(next(plan), dtype=np.float32)  # type: ignore[method-assign]
    kw = dict(
        n_prompts=4,
        group_size=Gs,
        n_probe=0,
        max_draws=4,
        temperature=1.0,
        rng=np.random.default_rng(0),
        generator=torch.Generator().manual_seed(0),
        device=torch.device("cpu"),
        amp=False,
    )
    ro = rollout(model, task, DAPO, **kw)
    k = ro.rewards.reshape(-1, Gs).sum(1).tolist()
    assert ro.draws == 3 and k == [2, 1, 1, 3] and ro.samples == (4 + 2 + 1) * Gs
    assert ro.first_silent == 0.5 and ro.seqs.shape[0] == 4 * Gs
    plan = iter([[0, 0, 0, 0, 1, 0, 0, 1, 1, 1, 1, 1, 0, 1, 0, 0]])
    ro = rollout(model, task, GRPO, **kw)
    assert ro.draws == 1 and ro.rewards.reshape(-1, Gs).sum(1).tolist() == [0, 2, 4, 1] and ro.samples == 4 * Gs


def test_dapo_gives_up_after_its_draws_with_a_short_batch():
    from grpo_identity.trainer.lm.rollout import rollout

    model, task, _, _, _, _ = _group()
    task.rewards = lambda comps, answers: np.zeros(len(answers), dtype=np.float32)  # type: ignore[method-assign]
    ro = rollout(
        model,
        task,
        DAPO,
        n_prompts=3,
        group_size=4,
        n_probe=0,
        max_draws=2,
        temperature=1.0,
        rng=np.random.default_rng(0),
        generator=torch.Generator().manual_seed(0),
        device=torch.device("cpu"),
        amp=False,
    )
    assert ro.draws == 2 and ro.seqs.shape[0] == 0 and ro.samples == 2 * 3 * 4


# --- devices and the CLI ------------------------------------------------------------------------
def test_cuda_requested_without_cuda_is_one_line_and_exit_2(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["train", "lm", "--device", "cuda", "--steps", "1", "--json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cuda" in err


@pytest.mark.parametrize(
    "argv", [["--steps", "-1"], ["--G", "1"], ["--config", "huge"], ["--mode", "ppo"], ["--device", "tpu"]]
)
def test_cli_rejects_bad_input_in_one_line_with_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:  # argparse's own errors exit 2 ...
        rc = main(["train", "lm", *argv])
        raise SystemExit(rc)  # ... and ours return 2
    assert e.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_metrics_are_written_one_line_per_step_as_the_run_goes():
    import io

    cfg = named_config("cpu-smoke", mode="grpo", **TINY)
    task = AdditionTask(cfg.max_digits)
    torch.manual_seed(0)
    model = build_model(cfg, task.vocab_size, task.prompt_len + task.max_answer_len)
    base = {k: v.detach().clone() for k, v in model.state_dict().items()}
    sink, seen = io.StringIO(), []
    learner = Learner(model, None, cfg, task, torch.device("cpu"), False)
    eval_set = task.sample(4, np.random.default_rng(1))
    train_mode("grpo", learner, base, eval_set, sink, tick=lambda: seen.append(len(sink.getvalue().splitlines())))
    assert seen == [1, 2, 3]
    assert [json.loads(x)["step"] for x in sink.getvalue().splitlines()] == [0, 1, 2]


@pytest.mark.parametrize("model_name", ["gpt2", "llama"])
def test_kv_cached_greedy_decoding_equals_recomputing_the_whole_prefix(model_name):
    model, task, _, _, _, _ = _group(model_name)
    prompts = torch.as_tensor(task.sample(8, np.random.default_rng(4)).prompts)
    comp, lengths = sample(model, prompts, task.max_answer_len, temperature=0.0)
    ids = prompts
    with torch.no_grad():
        for _ in range(comp.shape[1]):
            ids = torch.cat([ids, model(input_ids=ids, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)], 1)
    for i in range(8):
        L = int(lengths[i])
        assert torch.equal(comp[i, :L], ids[i, task.prompt_len : task.prompt_len + L])


def test_bf16_gradients_would_miss_the_fp32_goal_so_the_check_runs_in_fp32():
    # why the trainer keeps the checked step out of autocast: under bf16 the same check is ~1e-3 off
    with torch.autocast("cpu", dtype=torch.bfloat16):
        chk = _check(*_group(), used=GRPO, claimed=GRPO)
    assert chk.rel_err > 1e-4
