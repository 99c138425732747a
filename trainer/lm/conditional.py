"""The fixed-policy experiment: the expected update E[g | k] against σ_k in a real transformer.

The conditional-expectation theorems (G7 and G8): at a fixed policy, for one prompt,

    E[g | k] = c(k, G)·(μ₊ − μ₋),    Cov(g | k) = c²·(Σ₊/k + Σ₋/(G − k)),

μ±, Σ± the mean and covariance of the score sᵢ = ∇(wᵢ log π(yᵢ)) of a correct / incorrect
answer; c = σ_k (GRPO), σ_k² (Dr. GRPO).  With unweighted scores (constant aggregation)
E[s] = 0, so μ₊ − μ₋ = ∇p / (p(1 − p)) with ∇p = E[s·R].  ‖g‖ of one group is dominated by the
noise term, whose GRPO size does not grow with σ; E[g | k] is what scales.

Procedure (:func:`run_conditional`): warm up as the trainer does, freeze the model; measure the
solve rate of ``cond_candidates`` prompts with ``cond_probe`` answers each and keep up to
``cond_prompts`` distinct ones inside [cond_p_low, cond_p_high]; for each kept prompt

1. draw ``cond_ref_answers`` answers: their per-sample scores (streamed in chunks, never
   stored) give two independent halves of μ₊ − μ₋ and of ∇p / (p(1 − p)), and tr Σ±;
2. draw ``cond_groups`` groups of G answers; for every group and mode, g is the autograd
   gradient of the real loss (:func:`.identity.group_gradient`), kept as a row of a matrix whose
   Gram matrix feeds :mod:`.conditional_stats`;
3. check every group along ``cond_directions`` random directions (:mod:`.projected`), and the
   first ``cond_exact_groups`` also with exact per-sample scores.

With ``time_budget`` > 0 no further prompt is started once the time per prompt so far would
overrun it (at least two prompts are measured).  Sampling runs under bf16 autocast where
``amp`` is on; every gradient, score and comparison is fp32.

:func:`.conditional_summary.summarise` turns the per-prompt measurements into the report.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from grpo_identity.dial import advantages
from grpo_identity.foundation import dumps, write_text_atomic
from grpo_identity.trainer.lm.config import LMConfig, aggregation_of, conditional_modes, dial_of
from grpo_identity.trainer.lm.identity import check_identity, flatten, group_gradient, per_sample_scores, trainable
from grpo_identity.trainer.lm.loss import sample_weights
from grpo_identity.trainer.lm.model import count_params, sample
from grpo_identity.trainer.lm.projected import projected_check, projected_scores, random_directions
from grpo_identity.trainer.lm.train import RunEnv, setup_run, warm_phase

__all__ = ["run_conditional", "select_prompts", "draw_answers", "reference_moments", "measure_prompt"]


def run_conditional(
    config: LMConfig, progress: bool = False, *, out_dir: str | Path | None = None, command: str | None = None
) -> dict[str, Any]:
    """Warm up, freeze, and measure E[g | k] on many groups of a few intermediate prompts.

    Returns a JSON-ready dict whose ``conditional`` entry holds ``slope_by_mode``,
    ``cosine_min``, ``grad_p_rel_err``, ``noise_slope_by_mode``, ``groups``, the cells,
    ``prompts`` (each with its text and ``correct_distinct``, the distinct correct answers among
    its groups), ``task`` and ``preregistered`` (the pre-registered estimator and criteria,
    :mod:`.preregistered`), and
    ``identity_max_rel_err`` / ``groups_checked`` as a training run's summary has them; with
    ``out_dir``: config.json, summary.json, conditional.png and provenance.json (``command``,
    the versions, the commit) there.
    """
    from grpo_identity.trainer.lm.conditional_summary import goal_errors, summarise
    from grpo_identity.trainer.lm.preregistered import evaluate

    t0 = time.perf_counter()
    env = setup_run(config)
    wu = warm_phase(env, config)
    gen = torch.Generator(device=env.device).manual_seed(config.seed + 11)
    rng = np.random.default_rng([config.seed, 11])
    chosen, candidates = select_prompts(env, config, rng, gen)
    tick = _progress(progress, len(chosen))
    measured = []
    for i, (prompt, answer, level, p_probe) in enumerate(chosen):
        per_prompt = (time.perf_counter() - t0) / max(i, 1) if i else 0.0
        if config.time_budget > 0 and i >= 2 and time.perf_counter() - t0 + per_prompt > config.time_budget:
            break  # the budget would run out during the next prompt: stop with what is measured
        m = measure_prompt(env, config, prompt, answer, gen, seed=config.seed * 1000 + i)
        m.update(level=level, p_probe=p_probe, prompt=env.task.decode(prompt.tolist()))
        measured.append(m)
        tick()
    cond = summarise(measured, config, np.random.default_rng([config.seed, 12]))
    for entry, m in zip(cond["prompts"], measured):  # what the task gives each prompt, beside the analysis
        entry.update(prompt=m["prompt"], correct_distinct=m["correct_distinct"])
    cond["task"] = config.task
    cond["candidates"] = candidates
    cond["preregistered"] = evaluate(cond)
    pc = cond["projected_check"]
    errs = [e for e in goal_errors(pc).values() if e is not None]
    summary = {
        "experiment": "conditional",
        "conditional": cond,
        # the identity checked on every group (projected, normalised) and on a few (exact): the larger error
        "identity_max_rel_err": max(errs) if errs else None,
        "groups_checked": pc["groups_projected"],
        "device": str(env.device),
        "amp": env.amp,
        "model": config.model,
        "n_params": count_params(env.model),
        "warmup": wu,
        "seconds": time.perf_counter() - t0,
    }
    if out_dir is not None:
        _write_outputs(Path(out_dir), config, summary, command)
    return summary


def _progress(on: bool, total: int) -> Callable[[], None]:
    if not on:
        return lambda: None
    from tqdm import tqdm

    bar = tqdm(total=total, desc="conditional", unit="prompt", leave=False)
    return lambda: bar.update(1)


def _write_outputs(out: Path, config: LMConfig, summary: dict[str, Any], command: str | None) -> None:
    import json

    from grpo_identity import provenance
    from grpo_identity.trainer.lm.plots import plot_conditional

    out.mkdir(parents=True, exist_ok=True)
    provenance.write(out, command)
    write_text_atomic(out / "config.json", json.dumps(config.to_dict(), indent=2) + "\n")
    write_text_atomic(out / "summary.json", dumps(summary) + "\n")
    plot_conditional(summary, out / "conditional.png")


def draw_answers(
    env: RunEnv, config: LMConfig, prompt: torch.Tensor, answer: list[int], n: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """n sampled answers to one prompt (P,), in chunks: seqs (n, P+T), mask (n, T), lengths (n,), rewards (n,)."""
    comps, lens = [], []
    for start in range(0, n, config.cond_chunk * 8):
        m = min(config.cond_chunk * 8, n - start)
        c, ln = sample(
            env.model,
            prompt[None].expand(m, -1),
            env.task.max_answer_len,
            temperature=config.temperature,
            generator=gen,
            amp=env.amp,
        )
        comps.append(torch.nn.functional.pad(c, (0, env.task.max_answer_len - c.shape[1]), value=0))
        lens.append(ln)
    comp, lengths = torch.cat(comps), torch.cat(lens)
    T = int(lengths.max())
    comp = comp[:, :T]  # (n, T)
    rewards = torch.as_tensor(env.task.rewards(comp.cpu().numpy(), [answer] * n), device=env.device)
    seqs = torch.cat([prompt[None].expand(n, -1), comp], dim=1)  # (n, P+T)
    mask = (torch.arange(T, device=env.device)[None] < lengths[:, None]).float()
    return seqs, mask, lengths, rewards


def select_prompts(
    env: RunEnv, config: LMConfig, rng: np.random.Generator, gen: torch.Generator
) -> tuple[list[tuple[torch.Tensor, list[int], int, float]], list[dict[str, Any]]]:
    """Up to ``cond_prompts`` distinct prompts whose measured solve rate lies in [cond_p_low, cond_p_high].

    Returns the kept (prompt (P,), answer, level, p̂) and every candidate's level and p̂.  A
    candidate equal to a kept prompt is measured (the random streams stay those of a run without
    the check) but not kept again.
    """
    probs = env.task.sample(config.cond_candidates, rng)
    kept: list[tuple[torch.Tensor, list[int], int, float]] = []
    kept_keys: set[tuple[int, ...]] = set()
    seen: list[dict[str, Any]] = []
    for i in range(config.cond_candidates):
        prompt = torch.as_tensor(probs.prompts[i], device=env.device)
        _, _, _, r = draw_answers(env, config, prompt, probs.answers[i], config.cond_probe, gen)
        p_hat = float(r.float().mean())
        seen.append({"level": int(probs.levels[i]), "p_probe": p_hat})
        key = tuple(probs.prompts[i].tolist())
        inside = config.cond_p_low <= p_hat <= config.cond_p_high
        if inside and key not in kept_keys and len(kept) < config.cond_prompts:
            kept.append((prompt, probs.answers[i], int(probs.levels[i]), p_hat))
            kept_keys.add(key)
    if len(kept) < 2:
        raise ValueError(
            f"only {len(kept)} distinct prompts among {config.cond_candidates} candidates have a solve rate in "
            f"[{config.cond_p_low:g}, {config.cond_p_high:g}]: raise --cond-candidates or widen the range"
        )
    return kept, seen


def _mode_weights(config: LMConfig, mode: str, lengths: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """Each answer's aggregation weight wᵢ under the mode (per answer: seq_mean or constant)."""
    return sample_weights(
        lengths, aggregation_of(config, mode), n_groups=1, group_size=len(lengths), max_new_tokens=max_new_tokens
    )


def reference_moments(
    env: RunEnv, config: LMConfig, seqs: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor, rewards: torch.Tensor
) -> dict[str, dict[str, Any]]:
    """Per mode: two independent halves (even / odd answers) of μ₊ − μ₋ and of ∇p/(p(1 − p)), and tr Σ±.

    Scores are streamed in chunks of ``cond_chunk`` (unweighted once, then scaled by each mode's wᵢ).
    """
    modes = conditional_modes(config)
    P, T_max = env.task.prompt_len, env.task.max_answer_len
    D = sum(p.numel() for p in trainable(env.model)[1])
    zeros = lambda: torch.zeros(D, dtype=torch.float64, device=env.device)  # noqa: E731
    acc = {m: {(h, c): [zeros(), 0.0, 0] for h in (0, 1) for c in (True, False)} for m in modes}  # Σs, Σ‖s‖², count
    n = len(rewards)
    for start in range(0, n, config.cond_chunk):
        sl = slice(start, min(n, start + config.cond_chunk))
        u = per_sample_scores(
            env.model, seqs[sl], mask[sl], torch.ones(sl.stop - start, device=env.device), prompt_len=P
        ).double()
        half = torch.arange(start, sl.stop, device=env.device) % 2
        for m in modes:
            s = u * _mode_weights(config, m, lengths[sl], T_max).double()[:, None]  # (chunk, D)
            for h in (0, 1):
                for c in (True, False):
                    rows = (half == h) & ((rewards[sl] > 0.5) == c)
                    a = acc[m][(h, c)]
                    a[0] += s[rows].sum(0)
                    a[1] += float((s[rows] ** 2).sum())
                    a[2] += int(rows.sum())
    return {m: _moments(acc[m]) for m in modes}


def _moments(acc: dict[tuple[int, bool], list[Any]]) -> dict[str, Any]:
    """Halves of μ₊ − μ₋ and ∇p/(p(1−p)) and the class traces from per-half, per-class sums."""
    out: dict[str, Any] = {"class": [], "grad_p": [], "p_half": []}
    for h in (0, 1):
        (sp, _, np_), (sn, _, nn_) = acc[(h, True)], acc[(h, False)]
        if np_ == 0 or nn_ == 0:
            raise ValueError(
                "a half of the reference answers has no correct or no incorrect answer: raise --cond-ref-answers"
            )
        N = np_ + nn_
        p = np_ / N
        out["class"].append(sp / np_ - sn / nn_)
        out["grad_p"].append((sp / N) / (p * (1 - p)))  # ∇p̂ = mean of R·s
        out["p_half"].append(p)
    for c, name in ((True, "tr_pos"), (False, "tr_neg")):
        S = acc[(0, c)][0] + acc[(1, c)][0]
        Q = acc[(0, c)][1] + acc[(1, c)][1]
        n = acc[(0, c)][2] + acc[(1, c)][2]
        out[name] = (Q - float(S @ S) / n) / (n - 1) if n > 1 else float("nan")
    out["n_pos"] = acc[(0, True)][2] + acc[(1, True)][2]
    out["n_neg"] = acc[(0, False)][2] + acc[(1, False)][2]
    return out


def measure_prompt(
    env: RunEnv, config: LMConfig, prompt: torch.Tensor, answer: list[int], gen: torch.Generator, *, seed: int
) -> dict[str, Any]:
    """One prompt: reference moments, then every group's g per mode, reduced to Gram matrices and checks."""
    ref = reference_moments(env, config, *draw_answers(env, config, prompt, answer, config.cond_ref_answers, gen))
    G = config.group_size
    seqs, mask, lengths, rewards = draw_answers(env, config, prompt, answer, config.cond_groups * G, gen)
    k = rewards.reshape(-1, G).sum(1).round().long().cpu().numpy()  # (n_groups,)
    D = sum(p.numel() for p in trainable(env.model)[1])
    V = random_directions(D, config.cond_directions, seed=seed, device=env.device)  # (K, D)
    u_proj = torch.cat(
        [
            projected_scores(
                env.model,
                seqs[i : i + config.cond_chunk],
                mask[i : i + config.cond_chunk],
                torch.ones(min(config.cond_chunk, len(seqs) - i), device=env.device),
                V,
                prompt_len=env.task.prompt_len,
            )
            for i in range(0, len(seqs), config.cond_chunk)
        ]
    )  # (n·G, K)
    out: dict[str, Any] = {
        "k": k.tolist(),
        "correct_distinct": _distinct_correct(seqs[:, env.task.prompt_len :], lengths, rewards),
        "n_ref": config.cond_ref_answers,
        "p_ref": float(np.mean(ref[conditional_modes(config)[0]]["p_half"])),
        "modes": {},
    }
    for m in conditional_modes(config):
        out["modes"][m] = _measure_mode(env, config, m, seqs, mask, lengths, rewards, k, V, u_proj, ref[m])
    return out


def _distinct_correct(completions: torch.Tensor, lengths: torch.Tensor, rewards: torch.Tensor) -> int:
    """How many different sequences the correct answers are (1 for addition: Σ₊ = 0 then)."""
    comp, lens = completions.cpu().numpy(), lengths.cpu().numpy()  # (n, T), (n,)
    right = np.flatnonzero(rewards.cpu().numpy() > 0.5)
    return len({tuple(comp[i, : lens[i]].tolist()) for i in right})


def _measure_mode(
    env: RunEnv,
    config: LMConfig,
    mode: str,
    seqs: torch.Tensor,
    mask: torch.Tensor,
    lengths: torch.Tensor,
    rewards: torch.Tensor,
    k: np.ndarray,
    V: torch.Tensor,
    u_proj: torch.Tensor,
    ref: dict[str, Any],
) -> dict[str, Any]:
    """Every group's g under one mode's real loss; its Gram matrix, dots with the references, checks."""
    G, P, T_max = config.group_size, env.task.prompt_len, env.task.max_answer_len
    dial = dial_of(mode)
    live = np.flatnonzero((k > 0) & (k < G))
    D = V.shape[1]
    M = torch.zeros(len(live), D, device=env.device)  # (n_live, D): one row per non-silent group
    proj_errs, proj_norm_errs, exact_errs, silent_nonzero = [], [], [], 0
    for j in range(len(k)):
        sl = slice(j * G, (j + 1) * G)
        w = _mode_weights(config, mode, lengths[sl], T_max)
        adv = advantages(rewards[sl], G, dial)
        pg, _, _ = group_gradient(
            env.model,
            seqs[sl],
            mask[sl],
            w,
            adv,
            prompt_len=P,
            group_size=G,
            clip_low=config.clip_low,
            clip_high=config.clip_high,
        )
        g = -flatten(pg)  # (D,)
        if k[j] in (0, G):
            silent_nonzero += int(bool(g.abs().max() > 0))
            continue
        row = int(np.searchsorted(live, j))
        M[row] = g
        chk = projected_check(g, V, u_proj[sl] * w[:, None], rewards[sl], adv, dial)
        proj_errs.append(chk.rel_err)
        # ‖V e‖ / (√K ‖g‖): E‖Ve‖² = K‖e‖² for Gaussian V, so this estimates ‖e‖/‖g‖ without the
        # heavy tail of ‖Vg‖ (small when every direction is nearly orthogonal to g)
        proj_norm_errs.append(chk.rel_err * chk.g_norm / (V.shape[0] ** 0.5 * float(g.norm())))
        if row < config.cond_exact_groups:
            scores = per_sample_scores(env.model, seqs[sl], mask[sl], w, prompt_len=P)
            exact_errs.append(check_identity(g, scores, rewards[sl], adv, dial).rel_err)
    gram = (M @ M.T).double().cpu().numpy()
    refs = {name: torch.stack([r.float() for r in ref[name]]) for name in ("class", "grad_p")}  # (2, D) each
    return {
        "aggregation": aggregation_of(config, mode),
        "live": live.tolist(),
        "gram": gram,
        "dots": {name: (M @ r.T).double().cpu().numpy() for name, r in refs.items()},
        "ref_gram": {name: (r.double() @ r.double().T).cpu().numpy() for name, r in refs.items()},
        "tr_pos": float(ref["tr_pos"]),
        "tr_neg": float(ref["tr_neg"]),
        "projected_errs": proj_errs,
        "projected_norm_errs": proj_norm_errs,
        "exact_errs": exact_errs,
        "silent_nonzero": silent_nonzero,
    }
