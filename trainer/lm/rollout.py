"""Rollouts: G sampled answers per prompt, verified, with DAPO's resampling of silent groups and
an independent probe of each prompt's success rate.

Each draw samples G + n_probe completions per prompt in one batched, KV-cached call.  The first
G form the group; the other n_probe estimate that prompt's solve rate p̂ and silent rate
p^G + (1−p)^G independently of the group (:func:`.lm_identity.silent_estimate`), so that the
measured silent fraction can be set against its prediction (PAPER claim 6).  With a dial whose
keep rule is ``nonzero_std`` (DAPO), silent groups are discarded and fresh prompts drawn, up to
``dapo_max_draws`` rounds; the batch may end up short.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from grpo_identity.dial import Dial
from grpo_identity.trainer.lm.identity import silent_estimate
from grpo_identity.trainer.lm.model import sample
from grpo_identity.trainer.lm.task import PAD, DigitTask

__all__ = ["Rollout", "rollout"]


@dataclass
class Rollout:
    """One step's training batch, n groups of G answers laid out group by group."""

    seqs: torch.Tensor
    """(n·G, P+T) prompt and completion tokens, right-padded"""
    mask: torch.Tensor
    """(n·G, T) float: 1 on completion tokens up to and including EOS"""
    lengths: torch.Tensor
    """(n·G,) completion lengths"""
    rewards: torch.Tensor
    """(n·G,) float32 rewards in {0, 1}"""
    levels: np.ndarray
    """(n,) difficulty level of each group"""
    p_probe: np.ndarray
    """(n,) probe estimate of each group's solve rate (NaN without probes)"""
    first_silent: float
    """fraction of silent groups in the first draw"""
    first_silent_pred: float
    """its prediction: mean over the first draw's prompts of the probe's silent-rate estimate"""
    samples: int
    """answers sampled for training, resamples included (probes excluded)"""
    draws: int
    """rounds of drawing prompts"""
    generated_tokens: int = 0
    """tokens sampled, probes included"""


def rollout(
    model: nn.Module,
    task: DigitTask,
    dial: Dial,
    *,
    n_prompts: int,
    group_size: int,
    n_probe: int,
    max_draws: int,
    temperature: float,
    rng: np.random.Generator,
    generator: torch.Generator,
    device: torch.device,
    amp: bool,
) -> Rollout:
    """Sample, verify and (for DAPO) resample one step's groups."""
    G, per = group_size, group_size + n_probe
    kept: list[tuple] = []  # (prompt, completions, lengths, rewards, level, p̂) per kept group
    first_silent = first_pred = float("nan")
    samples = tokens = draws = 0
    rounds = max_draws if dial.keep == "nonzero_std" else 1
    for draw in range(rounds):
        need = n_prompts - len(kept)
        if need <= 0:
            break
        draws += 1
        probs = task.sample(need, rng)
        prompts = torch.as_tensor(probs.prompts, device=device)  # (need, P)
        comp, lengths = sample(
            model,
            prompts.repeat_interleave(per, 0),
            task.max_answer_len,
            temperature=temperature,
            generator=generator,
            amp=amp,
        )  # (need·per, T)
        answers = [a for a in probs.answers for _ in range(per)]
        r = task.rewards(comp.cpu().numpy(), answers).reshape(need, per)  # (need, G + n_probe)
        samples += need * G
        tokens += int(lengths.sum())
        comp = comp.reshape(need, per, -1)
        lengths = lengths.reshape(need, per)
        k = r[:, :G].sum(1)
        silent = (k == 0) | (k == G)
        j = r[:, G:].sum(1)
        p_hat = j / n_probe if n_probe else np.full(need, np.nan)
        if draw == 0:
            first_silent = float(silent.mean())
            if n_probe:
                first_pred = float(np.mean([silent_estimate(int(x), n_probe, G) for x in j]))
        for i in range(need):
            if dial.keep == "nonzero_std" and silent[i]:
                continue
            kept.append((prompts[i], comp[i, :G], lengths[i, :G], r[i, :G], int(probs.levels[i]), float(p_hat[i])))
    batch = _assemble(kept, G, task.prompt_len, device)
    return Rollout(
        **batch,
        first_silent=first_silent,
        first_silent_pred=first_pred,
        samples=samples,
        draws=draws,
        generated_tokens=tokens,
    )


def _assemble(kept: list[tuple], G: int, P: int, device: torch.device) -> dict[str, Any]:
    """The kept groups as one right-padded batch: seqs, mask, lengths, rewards, levels, p_probe."""
    T = max((int(c[2].max()) for c in kept), default=1)
    seqs, mask, lens, rewards = [], [], [], []
    for prompt, comp_g, len_g, r_g, _, _ in kept:
        body = torch.full((G, T), PAD, dtype=torch.long, device=device)  # (G, T)
        w = min(T, comp_g.shape[1])
        body[:, :w] = comp_g[:, :w]
        seqs.append(torch.cat([prompt.expand(G, -1), body], dim=1))  # (G, P+T)
        mask.append((torch.arange(T, device=device)[None, :] < len_g[:, None]).float())
        lens.append(len_g)
        rewards.append(torch.as_tensor(r_g, device=device))
    empty = lambda *s, dt=torch.long: torch.zeros(*s, dtype=dt, device=device)  # noqa: E731
    return {
        "seqs": torch.cat(seqs) if kept else empty(0, P + T),
        "mask": torch.cat(mask) if kept else empty(0, T, dt=torch.float32),
        "lengths": torch.cat(lens) if kept else empty(0),
        "rewards": torch.cat(rewards).float() if kept else empty(0, dt=torch.float32),
        "levels": np.array([c[4] for c in kept], dtype=np.int64),
        "p_probe": np.array([c[5] for c in kept], dtype=float),
    }
