"""The compact LM trainer: supervised warm-up, then GRPO / Dr. GRPO / DAPO on addition, with the
identity g = c(k, G)·(s̄₊ − s̄₋) checked on real transformer gradients.

One step of a mode:

1. rollout: G answers per prompt (DAPO: silent groups resampled), verified exactly;
2. Â = ``dial.advantages(rewards, G, dial)`` — the project's one advantage implementation;
3. first inner step, on checked steps: each group's loss is differentiated on its own, in fp32
   (:func:`.lm_identity.group_gradient`); the optimiser gets their mean, which is exactly the
   gradient of the batch loss; non-silent groups are checked against per-sample scores
   (:func:`.lm_identity.check_identity`); silent groups must have g = 0 exactly;
   other steps: one batched backward (bf16 autocast when on);
4. further inner steps (PPO epochs) on the same rollouts with the clipped ratio;
5. AdamW.

Every mode starts from the same post-warm-up weights, seed and prompt stream.  Use
:func:`run_lm`; it returns a JSON-ready summary and, with ``out_dir``, writes ``config.json``,
``metrics.jsonl`` (one line per step, as the run goes), ``summary.json`` and a PNG.

>>> from grpo_identity.trainer.lm.config import named_config
>>> s = run_lm(named_config("cpu-smoke", mode="grpo", steps=2, warmup_steps=20))  # doctest: +SKIP
>>> s["identity_max_rel_err"] < 1e-4  # doctest: +SKIP
True
"""

from __future__ import annotations

import copy
import json
import math
import time
from pathlib import Path
from typing import Any, Callable, TextIO

import numpy as np
import torch
from torch import nn

from grpo_identity import closed_forms
from grpo_identity.analysis.realdata import is_extreme, is_medium
from grpo_identity.dial import advantages
from grpo_identity.foundation import dumps
from grpo_identity.trainer.lm.config import LMConfig, aggregation_of, dial_of, modes_of
from grpo_identity.trainer.lm.identity import check_identity, flatten, group_gradient, loglog_fit, per_sample_scores, trainable
from grpo_identity.trainer.lm.loss import group_loss, kl_k3, sample_weights, surrogate
from grpo_identity.trainer.lm.model import autocast, build_model, count_params, resolve_device, sample, token_logprobs
from grpo_identity.trainer.lm.rollout import rollout
from grpo_identity.trainer.lm.task import AdditionTask, Problems

__all__ = ["run_lm", "train_mode", "warmup", "evaluate"]

#: the exponent of σ in c(k, G) for each mode: ‖g‖ ∝ σ^e·‖s̄₊ − s̄₋‖
COEF_EXPONENT = {"grpo": 1, "dr_grpo": 2, "dapo": 1}


def warmup(model: nn.Module, task: AdditionTask, cfg: LMConfig, rng: np.random.Generator, device: torch.device, amp: bool,
           eval_set: Problems | None = None, tick: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """Supervised warm-up on answers (teacher forcing), so the RL phase starts inside (0, 1).

    Runs at most ``warmup_steps``; with an ``eval_set`` and ``warmup_target`` > 0 it stops at the
    first check (every ``warmup_check_every`` steps) where greedy accuracy reaches the target.
    """
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.warmup_lr, weight_decay=0.0)
    loss_val = float("nan")
    done = 0
    for done in range(1, cfg.warmup_steps + 1):
        seqs_np, mask_np = task.supervised_batch(cfg.warmup_batch, rng)
        seqs = torch.as_tensor(seqs_np, device=device)  # (B, P+T)
        mask = torch.as_tensor(mask_np[:, task.prompt_len:], device=device).float()  # (B, T)
        with autocast(device, amp):
            logp = token_logprobs(model, seqs, task.prompt_len)  # (B, T)
        loss = -(logp * mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss_val = float(loss.detach())
        tick()
        if eval_set is not None and cfg.warmup_target > 0 and done % cfg.warmup_check_every == 0:
            if evaluate(model, task, eval_set, device, amp)["acc"] >= cfg.warmup_target:
                break
    return {"steps": done, "final_loss": loss_val}


@torch.no_grad()
def evaluate(model: nn.Module, task: AdditionTask, problems: Problems, device: torch.device, amp: bool) -> dict[str, Any]:
    """Greedy accuracy on a fixed prompt set, overall and by difficulty level."""
    comp, _ = sample(model, torch.as_tensor(problems.prompts, device=device), task.max_answer_len, temperature=0.0, amp=amp)
    r = task.rewards(comp.cpu().numpy(), problems.answers)
    by = {str(int(d)): float(r[problems.levels == d].mean()) for d in np.unique(problems.levels)}
    return {"acc": float(r.mean()), "acc_by_level": by}


def train_mode(mode: str, model: nn.Module, ref: nn.Module | None, base: dict[str, torch.Tensor], cfg: LMConfig, task: AdditionTask,
               eval_set: Problems, device: torch.device, amp: bool, sink: TextIO | None = None,
               tick: Callable[[], None] = lambda: None, deadline: float = math.inf) -> dict[str, Any]:
    """Train one mode from the weights ``base``; return its per-step and per-group records and evals.

    ``model`` is trained in place; ``ref`` is the frozen KL reference (or None); ``sink`` receives
    one JSON line per step; ``tick`` is called once per step; past ``deadline`` (a
    ``time.perf_counter()`` value) the mode stops after its current step.
    """
    model.load_state_dict(base)
    torch.manual_seed(cfg.seed)
    gen = torch.Generator(device=device).manual_seed(cfg.seed + 1)
    rng = np.random.default_rng([cfg.seed, 2])
    dial = dial_of(mode)
    agg = aggregation_of(cfg, mode)
    G, P, T_max = cfg.group_size, task.prompt_len, task.max_answer_len
    _, params = trainable(model)
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.99))
    steps: list[dict[str, Any]] = []
    groups: list[dict[str, Any]] = []
    evals = [{"step": 0, "samples": 0, **evaluate(model, task, eval_set, device, amp)}]
    samples_total = 0
    t0 = time.perf_counter()
    for step in range(cfg.steps):
        ro = rollout(model, task, dial, n_prompts=cfg.prompts_per_step, group_size=G, n_probe=cfg.probe_samples,
                     max_draws=cfg.dapo_max_draws, temperature=cfg.temperature, rng=rng, generator=gen, device=device, amp=amp)
        samples_total += ro.samples
        n = len(ro.levels)
        rec: dict[str, Any] = {"mode": mode, "step": step, "n_groups": n, "reward_mean": float(ro.rewards.mean()) if n else float("nan"),
                               "silent_frac": ro.first_silent, "silent_pred": ro.first_silent_pred, "samples": samples_total,
                               "draws": ro.draws, "checked": False}
        if n == 0:  # DAPO found no informative group in any draw: nothing to learn from
            steps.append(rec)
            _write(sink, rec)
            tick()
            continue
        adv = advantages(ro.rewards, G, dial)  # (n·G,)
        w = sample_weights(ro.lengths, agg, n_groups=n, group_size=G, max_new_tokens=T_max)  # (n·G,)
        ref_logp = None
        if ref is not None and cfg.kl_coef > 0:
            with torch.no_grad(), autocast(device, amp):
                ref_logp = token_logprobs(ref, ro.seqs, P)
        checked = step % cfg.check_every == 0
        old_logp = None
        if cfg.inner_steps > 1:  # π_old for the PPO epochs, in the precision those epochs use
            with torch.no_grad(), autocast(device, amp):
                old_logp = token_logprobs(model, ro.seqs, P)  # (n·G, T)
        opt.zero_grad(set_to_none=True)
        step_groups: list[dict[str, Any]] = []
        if checked:
            rec["checked"] = True
            acc = [torch.zeros_like(p) for p in params]
            kl_acc = [torch.zeros_like(p) for p in params] if ref_logp is not None else None
            n_checked = 0
            for j in range(n):
                sl = slice(j * G, (j + 1) * G)
                pg, kl, _ = group_gradient(model, ro.seqs[sl], ro.mask[sl], w[sl], adv[sl], prompt_len=P, group_size=G,
                                             clip_low=cfg.clip_low, clip_high=cfg.clip_high,
                                             ref_logp=None if ref_logp is None else ref_logp[sl], kl_coef=cfg.kl_coef)
                for a, gp in zip(acc, pg):
                    a.add_(gp, alpha=1.0 / n)
                if kl is not None and kl_acc is not None:
                    for a, gk in zip(kl_acc, kl):
                        a.add_(gk, alpha=1.0 / n)
                g = -flatten(pg)  # (D,) ascent direction of this group
                r = ro.rewards[sl]
                k = int(r.sum())
                grec: dict[str, Any] = {"step": step, "level": int(ro.levels[j]), "p_probe": float(ro.p_probe[j]), "k": k,
                                        "g_norm": float(g.norm()), "silent": k in (0, G)}
                if k in (0, G):
                    grec["sigma"] = 0.0
                elif cfg.check_groups == 0 or n_checked < cfg.check_groups:
                    scores = per_sample_scores(model, ro.seqs[sl], ro.mask[sl], w[sl], prompt_len=P)  # (G, D)
                    chk = check_identity(g, scores, r, adv[sl], dial)
                    grec.update(sigma=chk.sigma, coef=chk.coef, gap_norm=chk.gap_norm, rel_err=chk.rel_err, rel_err_sum=chk.rel_err_sum,
                                noise_share=chk.noise_share)
                    n_checked += 1
                else:
                    grec["sigma"] = float(closed_forms.sigma(k, G))
                step_groups.append(grec)
            for p, a in zip(params, acc):
                p.grad = a
            if kl_acc is not None:
                for p, a in zip(params, kl_acc):
                    p.grad.add_(a)  # type: ignore[union-attr]
                rec["kl_grad_ratio"] = float(flatten(kl_acc).norm() / flatten(acc).norm().clamp_min(1e-30))
        else:
            with autocast(device, amp):
                logp = token_logprobs(model, ro.seqs, P)  # (n·G, T)
            loss = group_loss(surrogate(logp, logp.detach(), adv, cfg.clip_low, cfg.clip_high), ro.mask, w, G) / n
            if ref_logp is not None:
                loss = loss + cfg.kl_coef * group_loss(kl_k3(logp, ref_logp), ro.mask, w, G) / n
            loss.backward()
        opt.step()
        clip_fracs = []
        for _ in range(cfg.inner_steps - 1):  # PPO epochs on the same rollouts: now the ratio moves
            opt.zero_grad(set_to_none=True)
            with autocast(device, amp):
                logp = token_logprobs(model, ro.seqs, P)
            assert old_logp is not None
            ratio = torch.exp(logp - old_logp)
            clipped = ((ratio < 1 - cfg.clip_low) | (ratio > 1 + cfg.clip_high)).float()
            clip_fracs.append(float((clipped * ro.mask).sum() / ro.mask.sum()))
            loss = group_loss(surrogate(logp, old_logp, adv, cfg.clip_low, cfg.clip_high), ro.mask, w, G) / n
            if ref_logp is not None:
                loss = loss + cfg.kl_coef * group_loss(kl_k3(logp, ref_logp), ro.mask, w, G) / n
            loss.backward()
            opt.step()
        if clip_fracs:
            rec["clip_frac"] = float(np.mean(clip_fracs))
        errs = [gr["rel_err"] for gr in step_groups if "rel_err" in gr]
        rec["identity_max_rel_err"] = max(errs) if errs else None
        if step_groups:  # Σ‖g‖ over this step's groups, by difficulty level
            rec["grad_mass_by_level"] = {str(d): sum(gr["g_norm"] for gr in step_groups if gr["level"] == d) for d in task.levels.tolist()}
        rec["groups"] = step_groups
        last = step + 1 == cfg.steps or time.perf_counter() > deadline
        if (step + 1) % cfg.eval_every == 0 or last:
            ev = {"step": step + 1, "samples": samples_total, **evaluate(model, task, eval_set, device, amp)}
            evals.append(ev)
            rec["eval_acc"] = ev["acc"]
        rec["seconds"] = time.perf_counter() - t0
        steps.append(rec)
        groups.extend(step_groups)
        _write(sink, rec)
        tick()
        if last:
            break
    return {"steps": steps, "groups": groups, "evals": evals, "seconds": time.perf_counter() - t0, "aggregation": agg}


def _write(sink: TextIO | None, rec: dict[str, Any]) -> None:
    if sink is not None:
        sink.write(dumps(rec, indent=None) + "\n")
        sink.flush()


def _nanmedian(x: list[float]) -> float | None:
    a = np.asarray(x, dtype=float)
    return float(np.nanmedian(a)) if np.isfinite(a).any() else None


def _mode_summary(mode: str, res: dict[str, Any], cfg: LMConfig) -> dict[str, Any]:
    """Per-mode summary: identity errors, log-log fits, silent fraction, gradient mass, learning."""
    groups, steps, evals = res["groups"], res["steps"], res["evals"]
    live = [g for g in groups if not g["silent"]]
    checked = [g for g in live if "rel_err" in g]
    silent = [g for g in groups if g["silent"]]
    fit_g = loglog_fit([g["sigma"] for g in live], [g["g_norm"] for g in live])
    fit_gap = loglog_fit([g["sigma"] for g in checked], [g["gap_norm"] for g in checked])
    fit_g_checked = loglog_fit([g["sigma"] for g in checked], [g["g_norm"] for g in checked])
    by_k = {str(k): {"n": len(gs), "sigma": gs[0]["sigma"], "g_norm_mean": float(np.mean([g["g_norm"] for g in gs])),
                     "gap_norm_mean": float(np.mean([g["gap_norm"] for g in gs])),
                     "noise_share_median": _nanmedian([g["noise_share"] for g in gs])}
            for k in sorted({g["k"] for g in checked}) for gs in [[g for g in checked if g["k"] == k]]}
    sf = np.array([s["silent_frac"] for s in steps], dtype=float)
    sp = np.array([s["silent_pred"] for s in steps], dtype=float)
    ok = np.isfinite(sf) & np.isfinite(sp)
    corr = float(np.corrcoef(sf[ok], sp[ok])[0, 1]) if ok.sum() > 2 and sf[ok].std() > 0 and sp[ok].std() > 0 else None
    mass = {}
    total = sum(g["g_norm"] for g in groups) or 1.0
    for d in sorted({g["level"] for g in groups}):
        mass[str(d)] = sum(g["g_norm"] for g in groups if g["level"] == d) / total
    pp = np.array([g["p_probe"] for g in groups], dtype=float)
    gn = np.array([g["g_norm"] for g in groups], dtype=float)
    extreme, medium = is_extreme(pp), is_medium(pp)
    accs = [e["acc"] for e in evals]
    rewards = [s["reward_mean"] for s in steps if s["n_groups"]]
    q = max(1, len(rewards) // 4)
    return {
        "mode": mode,
        "aggregation": res["aggregation"],
        "identity_max_rel_err": max((g["rel_err"] for g in checked), default=None),
        "identity_median_rel_err": float(np.median([g["rel_err"] for g in checked])) if checked else None,
        "sum_max_rel_err": max((g["rel_err_sum"] for g in checked), default=None),
        "groups_checked": len(checked),
        "groups_nonsilent": len(live),
        "silent_groups": len(silent),
        "silent_groups_with_nonzero_grad": sum(1 for g in silent if g["g_norm"] != 0.0),
        "loglog_slope": fit_g["slope"],
        "loglog_r2": fit_g["r2"],
        "loglog_n": fit_g["n"],
        "loglog_slope_checked": fit_g_checked["slope"],
        "gap_slope": fit_gap["slope"],
        "gap_r2": fit_gap["r2"],
        "gap_noise_share_median": _nanmedian([g["noise_share"] for g in checked]),
        "by_k": by_k,
        "predicted_slope_if_gap_flat": COEF_EXPONENT[mode],
        "slope_minus_gap_slope": None if fit_g_checked["slope"] is None or fit_gap["slope"] is None else fit_g_checked["slope"] - fit_gap["slope"],
        "silent_frac_mean": float(np.nanmean(sf)) if np.isfinite(sf).any() else None,
        "silent_pred_mean": float(np.nanmean(sp)) if np.isfinite(sp).any() else None,
        "silent_frac_pred_corr": corr,
        "grad_mass_by_level": mass,
        "grad_mass_extreme_p": float(gn[extreme].sum() / gn.sum()) if gn.sum() > 0 else None,
        "grad_mass_medium_p": float(gn[medium].sum() / gn.sum()) if gn.sum() > 0 else None,
        "eval_acc_initial": accs[0],
        "eval_acc_final": accs[-1],
        "eval_acc_gain": accs[-1] - accs[0],
        "eval_acc_mean": float(np.mean(accs)),
        "eval_acc_final_by_level": evals[-1]["acc_by_level"],
        "eval_curve": [[e["step"], e["samples"], e["acc"]] for e in evals],
        "train_reward_first_quarter": float(np.mean(rewards[:q])) if rewards else None,
        "train_reward_last_quarter": float(np.mean(rewards[-q:])) if rewards else None,
        "samples": steps[-1]["samples"] if steps else 0,
        "steps_run": len(steps),
        "seconds": res["seconds"],
    }


def _learning_speed(summaries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Steps and samples each mode needs to reach half of the best gain in greedy accuracy."""
    init = next(iter(summaries.values()))["eval_acc_initial"]
    best = max(s["eval_acc_gain"] for s in summaries.values())
    target = init + 0.5 * best if best > 0 else None
    out: dict[str, Any] = {"target_eval_acc": target, "by_mode": {}}
    for mode, s in summaries.items():
        hit = next((c for c in s["eval_curve"] if target is not None and c[0] > 0 and c[2] >= target), None)
        out["by_mode"][mode] = {"steps_to_target": hit[0] if hit else None, "samples_to_target": hit[1] if hit else None,
                                "eval_acc_gain": s["eval_acc_gain"], "eval_acc_mean": s["eval_acc_mean"], "samples": s["samples"]}
    return out


def run_lm(config: LMConfig, progress: bool = False, *, out_dir: str | Path | None = None) -> dict[str, Any]:
    """Warm up once, train every mode of ``config`` from the same weights, and summarise.

    Returns a JSON-ready dict with at least ``identity_max_rel_err`` (largest over modes),
    ``groups_checked`` (sum), ``loglog_slope``/``loglog_r2`` (of the first mode; every mode's under
    ``modes``), ``device`` and ``seconds``.  With ``out_dir``: config.json, metrics.jsonl,
    summary.json and lm_identity.png there.
    """
    t0 = time.perf_counter()
    device = resolve_device(config.device)
    if device.type == "cpu":
        torch.set_num_threads(config.threads)
    amp = config.amp == "bf16" or (config.amp == "auto" and device.type == "cuda")
    task = AdditionTask(config.max_digits, config.difficulty_weights)
    torch.manual_seed(config.seed)
    model = build_model(config, task.vocab_size, task.prompt_len + task.max_answer_len).to(device)
    modes = modes_of(config)
    out = Path(out_dir) if out_dir is not None else None
    sink = None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(config.to_dict(), indent=2) + "\n")
        sink = open(out / "metrics.jsonl", "w")
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=config.warmup_steps + config.steps * len(modes), desc="lm", unit="step", leave=False)
    tick = (lambda: bar.update(1)) if bar is not None else (lambda: None)
    try:
        eval_set = task.sample(config.eval_prompts_per_level * config.max_digits, np.random.default_rng([config.seed, 3]),
                               levels=np.repeat(task.levels, config.eval_prompts_per_level))
        w0 = time.perf_counter()
        wu = warmup(model, task, config, np.random.default_rng([config.seed, 1]), device, amp, eval_set, tick)
        wu["seconds"] = time.perf_counter() - w0
        if bar is not None:
            bar.total = wu["steps"] + config.steps * len(modes)
            bar.refresh()
        wu.update({f"eval_{k}": v for k, v in evaluate(model, task, eval_set, device, amp).items()})
        _write(sink, {"warmup": wu})
        base = {k: v.detach().clone() for k, v in model.state_dict().items()}
        ref = None
        if config.kl_coef > 0:
            ref = copy.deepcopy(model).requires_grad_(False)
        results = {}
        for i, m in enumerate(modes):  # with a time budget, each remaining mode gets an equal share of what is left
            share = (config.time_budget - (time.perf_counter() - t0)) / (len(modes) - i) if config.time_budget > 0 else math.inf
            results[m] = train_mode(m, model, ref, base, config, task, eval_set, device, amp, sink, tick, time.perf_counter() + share)
    finally:
        if bar is not None:
            bar.close()
        if sink is not None:
            sink.close()
    summaries = {m: _mode_summary(m, r, config) for m, r in results.items()}
    first = summaries[modes[0]]
    errs = [s["identity_max_rel_err"] for s in summaries.values() if s["identity_max_rel_err"] is not None]
    summary: dict[str, Any] = {
        "identity_max_rel_err": max(errs) if errs else None,
        "groups_checked": sum(s["groups_checked"] for s in summaries.values()),
        "loglog_slope": first["loglog_slope"],
        "loglog_r2": first["loglog_r2"],
        "primary_mode": modes[0],
        "loglog_slope_by_mode": {m: s["loglog_slope"] for m, s in summaries.items()},
        "gap_slope_by_mode": {m: s["gap_slope"] for m, s in summaries.items()},
        "device": str(device),
        "amp": amp,
        "seconds": time.perf_counter() - t0,
        "n_params": count_params(model),
        "model": config.model,
        "warmup": wu,
        "learning_speed": _learning_speed(summaries),
        "modes": summaries,
    }
    if out is not None:
        (out / "summary.json").write_text(dumps(summary) + "\n")
        from grpo_identity.trainer.lm.plots import plot_run

        plot_run(results, summary, out / "lm_identity.png")
    return summary
