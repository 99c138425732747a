"""The compact LM trainer: supervised warm-up, then GRPO / Dr. GRPO / DAPO on a digit task (addition
or split), with the identity g = c(k, G)·(s̄₊ − s̄₋) checked on real transformer gradients.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TextIO

import numpy as np
import torch
from torch import nn

from grpo_identity import closed_forms
from grpo_identity.analysis.realdata import is_extreme, is_medium
from grpo_identity.dial import advantages
from grpo_identity.foundation import check_writable, dumps, write_text_atomic
from grpo_identity.trainer.lm.config import LMConfig, aggregation_of, dial_of, modes_of
from grpo_identity.trainer.lm.identity import (
    check_identity,
    flatten,
    group_gradient,
    loglog_fit,
    per_sample_scores,
    trainable,
)
from grpo_identity.trainer.lm.loss import rl_loss, sample_weights
from grpo_identity.trainer.lm.model import autocast, build_model, count_params, resolve_device, sample, token_logprobs
from grpo_identity.trainer.lm.projected import projected_check, projected_scores, random_directions
from grpo_identity.trainer.lm.rollout import rollout
from grpo_identity.trainer.lm.task import DigitTask, Problems, make_task

__all__ = ["run_lm", "train_mode", "Learner", "warmup", "evaluate", "RunEnv", "setup_run", "warm_phase"]

#: the exponent of σ in c(k, G) for each mode: ‖g‖ ∝ σ^e·‖s̄₊ − s̄₋‖
COEF_EXPONENT = {"grpo": 1, "dr_grpo": 2, "dapo": 1}


def warmup(
    model: nn.Module,
    task: DigitTask,
    cfg: LMConfig,
    rng: np.random.Generator,
    device: torch.device,
    amp: bool,
    eval_set: Problems | None = None,
    tick: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
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
        mask = torch.as_tensor(mask_np[:, task.prompt_len :], device=device).float()  # (B, T)
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
def evaluate(model: nn.Module, task: DigitTask, problems: Problems, device: torch.device, amp: bool) -> dict[str, Any]:
    """Greedy accuracy on a fixed prompt set, overall and by difficulty level."""
    comp, _ = sample(
        model, torch.as_tensor(problems.prompts, device=device), task.max_answer_len, temperature=0.0, amp=amp
    )
    r = task.rewards(comp.cpu().numpy(), problems.answers)
    by = {str(int(d)): float(r[problems.levels == d].mean()) for d in np.unique(problems.levels)}
    return {"acc": float(r.mean()), "acc_by_level": by}


@dataclass(frozen=True)
class Learner:
    """What every step of a mode reads and none replaces: the policy (trained in place), its frozen KL
    reference (or None), the run's config, the task, the device and whether bf16 autocast is on."""

    model: nn.Module
    ref: nn.Module | None
    cfg: LMConfig
    task: DigitTask
    device: torch.device
    amp: bool


@dataclass(frozen=True)
class _Batch:
    """One step's rollouts with what the loss reads of them: advantages, per-sample weights (n·G,) and the KL
    reference's log-probs (None without KL)."""

    ro: Any
    adv: torch.Tensor
    w: torch.Tensor
    ref_logp: torch.Tensor | None


@dataclass
class _ModeRun:
    """What one mode carries from step to step: its dial, aggregation, optimiser and random streams."""

    mode: str
    dial: Any
    aggregation: str
    params: list[torch.Tensor]
    opt: torch.optim.Optimizer
    rng: np.random.Generator
    generator: torch.Generator


def _start_mode(mode: str, model: nn.Module, cfg: LMConfig, device: torch.device) -> _ModeRun:
    """Seed the mode's streams and build its optimiser (every mode starts identically)."""
    torch.manual_seed(cfg.seed)
    gen = torch.Generator(device=device).manual_seed(cfg.seed + 1)
    rng = np.random.default_rng([cfg.seed, 2])
    _, params = trainable(model)
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.99))
    return _ModeRun(mode, dial_of(mode), aggregation_of(cfg, mode), params, opt, rng, gen)


def train_mode(
    mode: str,
    learner: Learner,
    base: dict[str, torch.Tensor],
    eval_set: Problems,
    sink: TextIO | None = None,
    tick: Callable[[], None] = lambda: None,
    deadline: float = math.inf,
) -> dict[str, Any]:
    """Train one mode from the weights ``base``; return its per-step and per-group records and evals.

    ``learner.model`` is trained in place; ``sink`` receives one JSON line per step; ``tick`` is called once per
    step; past ``deadline`` (a ``time.perf_counter()`` value) the mode stops after its current step.
    """
    model, cfg, task, device, amp = learner.model, learner.cfg, learner.task, learner.device, learner.amp
    model.load_state_dict(base)
    run = _start_mode(mode, model, cfg, device)
    steps: list[dict[str, Any]] = []
    groups: list[dict[str, Any]] = []
    evals = [{"step": 0, "samples": 0, **evaluate(model, task, eval_set, device, amp)}]
    samples_total = 0
    t0 = time.perf_counter()
    for step in range(cfg.steps):
        ro = rollout(
            model,
            task,
            run.dial,
            n_prompts=cfg.prompts_per_step,
            group_size=cfg.group_size,
            n_probe=cfg.probe_samples,
            max_draws=cfg.dapo_max_draws,
            temperature=cfg.temperature,
            rng=run.rng,
            generator=run.generator,
            device=device,
            amp=amp,
        )
        samples_total += ro.samples
        rec = _step_record(mode, step, ro, samples_total)
        if len(ro.levels) == 0:  # DAPO found no informative group in any draw: nothing to learn from
            steps.append(rec)
            _write(sink, rec)
            tick()
            continue
        step_groups = _learn(run, learner, ro, step, rec)
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
    return {
        "steps": steps,
        "groups": groups,
        "evals": evals,
        "seconds": time.perf_counter() - t0,
        "aggregation": run.aggregation,
    }


def _step_record(mode: str, step: int, ro: Any, samples_total: int) -> dict[str, Any]:
    """The step's record before learning: batch size, reward, silent fraction and its prediction."""
    n = len(ro.levels)
    return {
        "mode": mode,
        "step": step,
        "n_groups": n,
        "reward_mean": float(ro.rewards.mean()) if n else float("nan"),
        "silent_frac": ro.first_silent,
        "silent_pred": ro.first_silent_pred,
        "samples": samples_total,
        "draws": ro.draws,
        "checked": False,
    }


def _learn(run: _ModeRun, learner: Learner, ro: Any, step: int, rec: dict[str, Any]) -> list[dict[str, Any]]:
    """One batch of rollouts: advantages, the first (checked or batched) step, the PPO epochs.

    Adds the step's measurements to ``rec``; returns the per-group records of a checked step.
    """
    cfg, task, ref = learner.cfg, learner.task, learner.ref
    G, n = cfg.group_size, len(ro.levels)
    adv = advantages(ro.rewards, G, run.dial)  # (n·G,)
    w = sample_weights(
        ro.lengths, run.aggregation, n_groups=n, group_size=G, max_new_tokens=task.max_answer_len
    )  # (n·G,)
    batch = _Batch(ro, adv, w, _frozen_logp(learner, ref, ro.seqs) if ref is not None and cfg.kl_coef > 0 else None)
    # π_old for the PPO epochs, in the precision those epochs use
    old_logp = _frozen_logp(learner, learner.model, ro.seqs) if cfg.inner_steps > 1 else None
    run.opt.zero_grad(set_to_none=True)
    step_groups: list[dict[str, Any]] = []
    if step % cfg.check_every == 0:
        rec["checked"] = True
        step_groups = _checked_gradient(run, learner, batch, step, rec)
    else:
        _batch_loss(learner, batch, None)[0].backward()
    run.opt.step()
    clip_fracs = []
    for _ in range(cfg.inner_steps - 1):  # PPO epochs on the same rollouts: now the ratio moves
        assert old_logp is not None
        run.opt.zero_grad(set_to_none=True)
        loss, logp = _batch_loss(learner, batch, old_logp)
        ratio = torch.exp(logp.detach() - old_logp)
        clipped = ((ratio < 1 - cfg.clip_low) | (ratio > 1 + cfg.clip_high)).float()
        clip_fracs.append(float((clipped * ro.mask).sum() / ro.mask.sum()))
        loss.backward()
        run.opt.step()
    if clip_fracs:
        rec["clip_frac"] = float(np.mean(clip_fracs))
    errs = [gr["rel_err"] for gr in step_groups if "rel_err" in gr]
    rec["identity_max_rel_err"] = max(errs) if errs else None
    if step_groups:  # Σ‖g‖ over this step's groups, by difficulty level
        rec["grad_mass_by_level"] = {
            str(d): sum(gr["g_norm"] for gr in step_groups if gr["level"] == d) for d in task.levels.tolist()
        }
    rec["groups"] = step_groups
    return step_groups


def _frozen_logp(learner: Learner, model: nn.Module, seqs: torch.Tensor) -> torch.Tensor:
    """Detached per-token log-probs (N, T) of ``model`` under the batched forward's precision."""
    with torch.no_grad(), autocast(learner.device, learner.amp):
        return token_logprobs(model, seqs, learner.task.prompt_len)


def _batch_loss(learner: Learner, batch: _Batch, old_logp: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch loss L (policy gradient + KL, mean over the n groups) and its log-probs (N, T).

    ``old_logp`` None means π_old = π_θ (the on-policy first step, ratio 1).
    """
    cfg, ro, n = learner.cfg, batch.ro, len(batch.ro.levels)
    with autocast(learner.device, learner.amp):
        logp = token_logprobs(learner.model, ro.seqs, learner.task.prompt_len)  # (n·G, T)
    pg, kl = rl_loss(
        logp,
        logp.detach() if old_logp is None else old_logp,
        batch.adv,
        ro.mask,
        batch.w,
        cfg.group_size,
        clip_low=cfg.clip_low,
        clip_high=cfg.clip_high,
        ref_logp=batch.ref_logp,
        kl_coef=cfg.kl_coef,
    )
    loss = pg / n
    if kl is not None:
        loss = loss + kl / n
    return loss, logp


def _checked_gradient(
    run: _ModeRun, learner: Learner, batch: _Batch, step: int, rec: dict[str, Any]
) -> list[dict[str, Any]]:
    """Each group's gradient in fp32 on its own, checked; their mean becomes the parameters' .grad.

    The mean of the groups' gradients is exactly the gradient of the batch loss.
    """
    cfg, ro, adv, w, ref_logp = learner.cfg, batch.ro, batch.adv, batch.w, batch.ref_logp
    G, n = cfg.group_size, len(ro.levels)
    acc = [torch.zeros_like(p) for p in run.params]
    kl_acc = [torch.zeros_like(p) for p in run.params] if ref_logp is not None else None
    step_groups: list[dict[str, Any]] = []
    dirs = None
    if cfg.check_directions > 0:  # the projected check: K random directions, fresh each step
        dirs = random_directions(
            sum(p.numel() for p in run.params),
            cfg.check_directions,
            seed=cfg.seed * 100_003 + step,
            device=run.params[0].device,
        )
    for j in range(n):
        sl = slice(j * G, (j + 1) * G)
        pg, kl, _ = group_gradient(
            learner.model,
            ro.seqs[sl],
            ro.mask[sl],
            w[sl],
            adv[sl],
            prompt_len=learner.task.prompt_len,
            group_size=G,
            clip_low=cfg.clip_low,
            clip_high=cfg.clip_high,
            ref_logp=None if ref_logp is None else ref_logp[sl],
            kl_coef=cfg.kl_coef,
        )
        for a, gp in zip(acc, pg):
            a.add_(gp, alpha=1.0 / n)
        if kl is not None and kl_acc is not None:
            for a, gk in zip(kl_acc, kl):
                a.add_(gk, alpha=1.0 / n)
        checks_left = cfg.check_groups == 0 or sum("rel_err" in gr for gr in step_groups) < cfg.check_groups
        check = (True if dirs is None else dirs) if checks_left else None
        step_groups.append(_group_record(run, learner, batch, j, -flatten(pg), step, check))
    for p, a in zip(run.params, acc):
        p.grad = a
    if kl_acc is not None:
        for p, a in zip(run.params, kl_acc):
            assert p.grad is not None
            p.grad.add_(a)
        rec["kl_grad_ratio"] = float(flatten(kl_acc).norm() / flatten(acc).norm().clamp_min(1e-30))
    return step_groups


def _group_record(
    run: _ModeRun, learner: Learner, batch: _Batch, j: int, g: torch.Tensor, step: int, check: Any
) -> dict[str, Any]:
    """Group ``j``'s record; a non-silent group is checked against its per-sample scores unless ``check`` is None.

    ``g`` (D,) is the group's ascent direction −∇ℓ_group.  ``check`` True: on the exact per-sample scores;
    directions (K, D): on projections (:mod:`.projected`; ``gap_norm`` and ``noise_share`` are then those of the
    projected vectors); None: not checked (its σ from the closed form).
    """
    G, model, prompt_len, dial = learner.cfg.group_size, learner.model, learner.task.prompt_len, run.dial
    ro = batch.ro
    sl = slice(j * G, (j + 1) * G)
    r, adv, w = ro.rewards[sl], batch.adv[sl], batch.w[sl]
    k = int(r.sum())
    grec: dict[str, Any] = {
        "step": step,
        "level": int(ro.levels[j]),
        "p_probe": float(ro.p_probe[j]),
        "k": k,
        "g_norm": float(g.norm()),
        "silent": k in (0, G),
    }
    if k in (0, G):
        grec["sigma"] = 0.0
    elif check is not None:
        if check is True:
            scores = per_sample_scores(model, ro.seqs[sl], ro.mask[sl], w, prompt_len=prompt_len)  # (G, D)
            chk = check_identity(g, scores, r, adv, dial)
        else:
            scores = projected_scores(model, ro.seqs[sl], ro.mask[sl], w, check, prompt_len=prompt_len)
            chk = projected_check(g, check, scores, r, adv, dial)
        grec.update(
            sigma=chk.sigma,
            coef=chk.coef,
            gap_norm=chk.gap_norm,
            rel_err=chk.rel_err,
            rel_err_sum=chk.rel_err_sum,
            noise_share=chk.noise_share,
        )
    else:
        grec["sigma"] = float(closed_forms.sigma(k, G))
    return grec


def _write(sink: TextIO | None, rec: dict[str, Any]) -> None:
    if sink is not None:
        sink.write(dumps(rec, indent=None) + "\n")
        sink.flush()


def _nanmedian(x: list[float]) -> float | None:
    a = np.asarray(x, dtype=float)
    return float(np.nanmedian(a)) if np.isfinite(a).any() else None


def _mode_summary(mode: str, res: dict[str, Any], cfg: LMConfig) -> dict[str, Any]:
    """Per-mode summary: identity errors, log-log fits, silent fraction, gradient mass, learning."""
    return {
        "mode": mode,
        "aggregation": res["aggregation"],
        **_identity_summary(mode, res["groups"]),
        **_silent_and_mass_summary(res["groups"], res["steps"]),
        **_learning_summary(res),
    }


def _identity_summary(mode: str, groups: list[dict[str, Any]]) -> dict[str, Any]:
    """The identity's errors over checked groups, and the log-log fits of ‖g‖ and ‖s̄₊ − s̄₋‖ against σ."""
    live = [g for g in groups if not g["silent"]]
    checked = [g for g in live if "rel_err" in g]
    silent = [g for g in groups if g["silent"]]
    fit_g = loglog_fit([g["sigma"] for g in live], [g["g_norm"] for g in live])
    fit_gap = loglog_fit([g["sigma"] for g in checked], [g["gap_norm"] for g in checked])
    fit_g_checked = loglog_fit([g["sigma"] for g in checked], [g["g_norm"] for g in checked])
    by_k = {
        str(k): {
            "n": len(gs),
            "sigma": gs[0]["sigma"],
            "g_norm_mean": float(np.mean([g["g_norm"] for g in gs])),
            "gap_norm_mean": float(np.mean([g["gap_norm"] for g in gs])),
            "noise_share_median": _nanmedian([g["noise_share"] for g in gs]),
        }
        for k in sorted({g["k"] for g in checked})
        for gs in [[g for g in checked if g["k"] == k]]
    }
    return {
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
        "slope_minus_gap_slope": None
        if fit_g_checked["slope"] is None or fit_gap["slope"] is None
        else fit_g_checked["slope"] - fit_gap["slope"],
    }


def _silent_and_mass_summary(groups: list[dict[str, Any]], steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Silent fraction against its probe prediction; Σ‖g‖ by difficulty level and by solve rate."""
    sf = np.array([s["silent_frac"] for s in steps], dtype=float)
    sp = np.array([s["silent_pred"] for s in steps], dtype=float)
    ok = np.isfinite(sf) & np.isfinite(sp)
    corr = float(np.corrcoef(sf[ok], sp[ok])[0, 1]) if ok.sum() > 2 and sf[ok].std() > 0 and sp[ok].std() > 0 else None
    total = sum(g["g_norm"] for g in groups) or 1.0
    mass = {
        str(d): sum(g["g_norm"] for g in groups if g["level"] == d) / total
        for d in sorted({g["level"] for g in groups})
    }
    pp = np.array([g["p_probe"] for g in groups], dtype=float)
    gn = np.array([g["g_norm"] for g in groups], dtype=float)
    extreme, medium = is_extreme(pp), is_medium(pp)
    return {
        "silent_frac_mean": float(np.nanmean(sf)) if np.isfinite(sf).any() else None,
        "silent_pred_mean": float(np.nanmean(sp)) if np.isfinite(sp).any() else None,
        "silent_frac_pred_corr": corr,
        "grad_mass_by_level": mass,
        "grad_mass_extreme_p": float(gn[extreme].sum() / gn.sum()) if gn.sum() > 0 else None,
        "grad_mass_medium_p": float(gn[medium].sum() / gn.sum()) if gn.sum() > 0 else None,
    }


def _learning_summary(res: dict[str, Any]) -> dict[str, Any]:
    """Greedy accuracy before, after and along the run; training reward in its first and last quarter."""
    steps, evals = res["steps"], res["evals"]
    accs = [e["acc"] for e in evals]
    rewards = [s["reward_mean"] for s in steps if s["n_groups"]]
    q = max(1, len(rewards) // 4)
    return {
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
        out["by_mode"][mode] = {
            "steps_to_target": hit[0] if hit else None,
            "samples_to_target": hit[1] if hit else None,
            "eval_acc_gain": s["eval_acc_gain"],
            "eval_acc_mean": s["eval_acc_mean"],
            "samples": s["samples"],
        }
    return out


def run_lm(
    config: LMConfig, progress: bool = False, *, out_dir: str | Path | None = None, command: str | None = None
) -> dict[str, Any]:
    """Warm up once, train every mode of ``config`` from the same weights, and summarise.

    Returns a JSON-ready dict with at least ``identity_max_rel_err`` (largest over modes),
    ``groups_checked`` (sum), ``loglog_slope``/``loglog_r2`` (of the first mode; every mode's under
    ``modes``), ``device`` and ``seconds``.  With ``out_dir``: config.json, metrics.jsonl,
    summary.json, lm_identity.png and provenance.json (``command``, the versions, the commit) there.
    """
    t0 = time.perf_counter()
    env = setup_run(config)
    modes = modes_of(config)
    out = Path(out_dir) if out_dir is not None else None
    sink = _open_outputs(out, config, command)
    bar, tick = _progress(progress, config.warmup_steps + config.steps * len(modes))
    try:
        wu = warm_phase(env, config, tick)
        if bar is not None:
            bar.total = wu["steps"] + config.steps * len(modes)
            bar.refresh()
        _write(sink, {"warmup": wu})
        base = {k: v.detach().clone() for k, v in env.model.state_dict().items()}
        ref = copy.deepcopy(env.model).requires_grad_(False) if config.kl_coef > 0 else None
        results = {}
        for i, m in enumerate(modes):  # with a time budget, each remaining mode gets an equal share of what is left
            share = (
                (config.time_budget - (time.perf_counter() - t0)) / (len(modes) - i)
                if config.time_budget > 0
                else math.inf
            )
            learner = Learner(env.model, ref, config, env.task, env.device, env.amp)
            results[m] = train_mode(m, learner, base, env.eval_set, sink, tick, time.perf_counter() + share)
    finally:
        if bar is not None:
            bar.close()
        if sink is not None:
            sink.close()
    summary = _run_summary({m: _mode_summary(m, r, config) for m, r in results.items()}, env, config, wu, t0)
    if out is not None:
        write_text_atomic(out / "summary.json", dumps(summary) + "\n")
        from grpo_identity.trainer.lm.plots import plot_run

        plot_run(results, summary, out / "lm_identity.png")
    return summary


@dataclass
class RunEnv:
    """What every experiment of one configuration shares: device, precision, task, model, eval set."""

    device: torch.device
    amp: bool
    task: DigitTask
    model: nn.Module
    eval_set: Problems


def setup_run(config: LMConfig) -> RunEnv:
    """Resolve the device and precision, build the task, the seeded model and the fixed eval set."""
    device = resolve_device(config.device)
    if device.type == "cpu":
        torch.set_num_threads(config.threads)
    amp = config.amp == "bf16" or (config.amp == "auto" and device.type == "cuda")
    task = make_task(config.task, config.max_digits, config.difficulty_weights)
    torch.manual_seed(config.seed)
    model = build_model(config, task.vocab_size, task.prompt_len + task.max_answer_len).to(device)
    eval_set = task.sample(
        config.eval_prompts_per_level * config.max_digits,
        np.random.default_rng([config.seed, 3]),
        levels=np.repeat(task.levels, config.eval_prompts_per_level),
    )
    return RunEnv(device, amp, task, model, eval_set)


def warm_phase(env: RunEnv, config: LMConfig, tick: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """The supervised warm-up of ``env.model`` in place, timed, with its greedy evaluation."""
    w0 = time.perf_counter()
    wu = warmup(
        env.model, env.task, config, np.random.default_rng([config.seed, 1]), env.device, env.amp, env.eval_set, tick
    )
    wu["seconds"] = time.perf_counter() - w0
    wu.update({f"eval_{k}": v for k, v in evaluate(env.model, env.task, env.eval_set, env.device, env.amp).items()})
    return wu


def _open_outputs(out: Path | None, config: LMConfig, command: str | None) -> TextIO | None:
    """Create ``out``, write provenance.json and config.json there and open metrics.jsonl (None without ``out``)."""
    if out is None:
        return None
    from grpo_identity import provenance

    out.mkdir(parents=True, exist_ok=True)
    provenance.write(out, command)
    write_text_atomic(out / "config.json", json.dumps(config.to_dict(), indent=2) + "\n")
    check_writable(out / "metrics.jsonl")  # streamed as the run goes: never through a link planted there
    return open(out / "metrics.jsonl", "w")


def _progress(on: bool, total: int) -> tuple[Any, Callable[[], None]]:
    """A tqdm bar of ``total`` steps (or None) and the tick that advances it."""
    if not on:
        return None, lambda: None
    from tqdm import tqdm

    bar = tqdm(total=total, desc="lm", unit="step", leave=False)
    return bar, lambda: bar.update(1)


def _run_summary(
    summaries: dict[str, dict[str, Any]], env: RunEnv, config: LMConfig, wu: dict[str, Any], t0: float
) -> dict[str, Any]:
    """The run's summary: the largest identity error over modes, the first mode's slopes, every mode's record."""
    first = next(iter(summaries.values()))
    errs = [s["identity_max_rel_err"] for s in summaries.values() if s["identity_max_rel_err"] is not None]
    return {
        "identity_max_rel_err": max(errs) if errs else None,
        "groups_checked": sum(s["groups_checked"] for s in summaries.values()),
        "loglog_slope": first["loglog_slope"],
        "loglog_r2": first["loglog_r2"],
        "primary_mode": first["mode"],
        "loglog_slope_by_mode": {m: s["loglog_slope"] for m, s in summaries.items()},
        "gap_slope_by_mode": {m: s["gap_slope"] for m, s in summaries.items()},
        "device": str(env.device),
        "amp": env.amp,
        "seconds": time.perf_counter() - t0,
        "n_params": count_params(env.model),
        "model": config.model,
        "warmup": wu,
        "learning_speed": _learning_speed(summaries),
        "modes": summaries,
    }
