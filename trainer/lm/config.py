"""The LM trainer's settings: one frozen record per run, whose field docs are the ``--help`` text.

A run of :func:`grpo_identity.trainer.lm.train.run_lm` is fully described by one
:class:`LMConfig` (saved as ``config.json`` beside the metrics).  Three named sizes:

- ``cpu-smoke``: a ~100k-parameter GPT-2 on 1–3 digit addition, three modes in well under
  two minutes on one CPU thread (CI runs it);
- ``small``: ~0.8M parameters, 1–4 digits, about six minutes on one CPU thread;
- ``gpu``: a ~25M-parameter Llama, 1–6 digits, about ten minutes on one H200 (a 540 s time
  budget stops each mode early if the estimate of ~1 s per step was optimistic).

Each size also sizes the fixed-policy conditional experiment (``experiment="conditional"``, the
``cond_*`` fields): ``cpu-smoke`` within five minutes on one CPU thread, ``gpu`` for one H200.
``cpu-conditional`` is that experiment on the split task (several correct answers per prompt,
so the noise term Σ₊ is not 0): 12 prompts, 960 groups each, within 15 minutes on one CPU thread.

Derived quantities (the dial of a mode, the aggregation a mode implies, the device) are kept
apart from the settings, in functions below the class.  Light: no torch at import.

>>> cfg = named_config("cpu-smoke", steps=3)
>>> cfg.steps, cfg.group_size, modes_of(cfg)
(3, 8, ('grpo', 'dr_grpo', 'dapo'))
>>> default_aggregation("dr_grpo")
'constant'
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal, Mapping

__all__ = [
    "LMConfig",
    "CONFIGS",
    "MODES",
    "AGGREGATIONS",
    "TASKS",
    "named_config",
    "lm_field_docs",
    "modes_of",
    "default_aggregation",
    "aggregation_of",
    "dial_of",
    "conditional_modes",
]

Mode = Literal["grpo", "dr_grpo", "dapo", "all"]
Aggregation = Literal["auto", "seq_mean", "token_mean", "constant"]

#: the three training modes, in report order
MODES: tuple[str, ...] = ("grpo", "dr_grpo", "dapo")
#: how per-token losses are summed into a group's loss (see lm_loss.sample_weights)
AGGREGATIONS: tuple[str, ...] = ("seq_mean", "token_mean", "constant")
#: the tasks (lm.task.TASK_CLASSES): one correct answer per prompt, or several
TASKS: tuple[str, ...] = ("addition", "split")


@dataclass(frozen=True)
class LMConfig:
    """Settings of one LM run (model, task, RL, measurement, system)."""

    # --- model ------------------------------------------------------------------------------
    model: Literal["gpt2", "llama"] = "gpt2"
    """architecture built from a transformers config, no downloaded weights: gpt2 or llama"""
    n_layer: int = 2
    """transformer layers"""
    n_embd: int = 64
    """hidden width"""
    n_head: int = 4
    """attention heads (must divide n_embd)"""

    # --- task -------------------------------------------------------------------------------
    task: Literal["addition", "split"] = "addition"
    """addition (a + b =, one correct answer) or split (s =, any a + b with a + b = s is correct)"""
    max_digits: int = 3
    """largest length of a prompt's numbers (addition: each operand; split: s); difficulty level d in 1..max_digits"""
    difficulty_weights: tuple[float, ...] = ()
    """relative frequency of each difficulty level (empty: uniform)"""

    # --- reinforcement learning -------------------------------------------------------------
    mode: Mode = "all"
    """advantage and keep rule: grpo, dr_grpo, dapo (dynamic sampling), or all three in turn"""
    group_size: int = 8
    """G, completions sampled per prompt"""
    prompts_per_step: int = 8
    """groups (prompts) per optimisation step"""
    steps: int = 40
    """RL steps per mode"""
    lr: float = 3e-4
    """AdamW learning rate of the RL phase"""
    weight_decay: float = 0.0
    """AdamW weight decay"""
    clip_low: float = 0.2
    """PPO ratio clip below 1 (ratio >= 1 - clip_low)"""
    clip_high: float = 0.2
    """PPO ratio clip above 1 (ratio <= 1 + clip_high; DAPO's clip-higher uses 0.28)"""
    kl_coef: float = 0.0
    """weight of the k3 KL penalty to the post-warm-up policy (0: none)"""
    aggregation: Aggregation = "auto"
    """token aggregation: seq_mean, token_mean, constant (Dr. GRPO); auto picks the mode's own"""
    inner_steps: int = 1
    """optimiser steps per batch of rollouts (PPO epochs); the identity is checked on the first"""
    temperature: float = 1.0
    """sampling temperature of the rollouts"""
    dapo_max_draws: int = 4
    """DAPO: rounds of drawing fresh prompts to replace silent groups"""

    # --- measurement ------------------------------------------------------------------------
    check_every: int = 1
    """check the identity on every n-th step (its first inner step)"""
    check_groups: int = 0
    """non-silent groups checked per checked step (0: all)"""
    probe_samples: int = 16
    """extra completions per prompt that estimate its success rate independently (0: none)"""
    eval_every: int = 5
    """greedy evaluation on a fixed prompt set every n steps"""
    eval_prompts_per_level: int = 64
    """evaluation prompts per difficulty level"""

    check_directions: int = 0
    """identity check of the RL steps: 0 exact per-sample scores (G·D memory), K > 0 K random
    directions by forward mode"""

    # --- the fixed-policy conditional experiment (--experiment conditional) -------------------
    experiment: Literal["train", "conditional"] = "train"
    """train: the RL runs; conditional: freeze the warmed-up policy and measure E[g | k] against sigma_k"""
    cond_prompts: int = 6
    """conditional: prompts kept, those with a measured solve rate inside [cond_p_low, cond_p_high]"""
    cond_groups: int = 240
    """conditional: groups of G answers drawn per prompt"""
    cond_candidates: int = 96
    """conditional: candidate prompts whose solve rate is measured"""
    cond_probe: int = 48
    """conditional: answers per candidate that measure its solve rate"""
    cond_p_low: float = 0.2
    """conditional: lowest measured solve rate kept"""
    cond_p_high: float = 0.8
    """conditional: highest measured solve rate kept"""
    cond_ref_answers: int = 512
    """conditional: answers per prompt, apart from the groups, that estimate grad p, mu+ - mu- and tr Sigma+-"""
    cond_min_cell: int = 8
    """conditional: fewest groups with one k for E[g | k] to enter the fits"""
    cond_bootstrap: int = 400
    """conditional: bootstrap resamples of the groups for the intervals"""
    cond_directions: int = 2
    """conditional: random directions of the projected check, run on every group"""
    cond_exact_groups: int = 4
    """conditional: groups per prompt and mode also checked with exact per-sample scores"""
    cond_chunk: int = 64
    """conditional: sequences per batched forward (sampling, per-sample scores, projections)"""

    # --- supervised warm-up -----------------------------------------------------------------
    warmup_steps: int = 800
    """most supervised steps before RL, so that success rates lie inside (0, 1)"""
    warmup_batch: int = 64
    """supervised batch size"""
    warmup_lr: float = 3e-3
    """supervised learning rate (constant)"""
    warmup_target: float = 0.5
    """stop the warm-up early once greedy accuracy on the eval set reaches this (0: run all steps)"""
    warmup_check_every: int = 50
    """supervised steps between checks of the warm-up target"""

    # --- system -----------------------------------------------------------------------------
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto (cuda when present), cpu or cuda"""
    amp: Literal["auto", "bf16", "off"] = "auto"
    """bf16 autocast for rollouts and batched forwards: auto (on for cuda), bf16, off; checks stay fp32"""
    threads: int = 1
    """torch CPU threads (two stall for seconds on small shared CPUs)"""
    seed: int = 0
    """seed of the model, the task and the sampling"""
    time_budget: float = 0.0
    """seconds for the whole run: each mode stops early to fit its share after the warm-up (0: no limit)"""

    def __post_init__(self) -> None:
        # checked in this order, so that a config with several faults names the same one each time
        _check_choices(self)
        _check_integers(self)
        _check_numbers(self)
        _check_combinations(self)

    def replace(self, **changes: Any) -> LMConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict of every field."""
        d = dataclasses.asdict(self)
        d["difficulty_weights"] = list(self.difficulty_weights)
        return d


# --- validation (run by LMConfig.__post_init__) ------------------------------------------------
#: the fields with a fixed set of values, and those values
_CHOICES: Mapping[str, tuple[str, ...]] = {
    "model": ("gpt2", "llama"),
    "task": TASKS,
    "mode": MODES + ("all",),
    "aggregation": ("auto",) + AGGREGATIONS,
    "device": ("auto", "cpu", "cuda"),
    "amp": ("auto", "bf16", "off"),
    "experiment": ("train", "conditional"),
}
#: integer fields that must be at least 1
_POSITIVE_INTEGERS = (
    "n_layer",
    "n_embd",
    "n_head",
    "max_digits",
    "prompts_per_step",
    "steps",
    "inner_steps",
    "dapo_max_draws",
    "check_every",
    "eval_every",
    "eval_prompts_per_level",
    "warmup_batch",
    "warmup_check_every",
    "threads",
    "cond_prompts",
    "cond_groups",
    "cond_candidates",
    "cond_probe",
    "cond_ref_answers",
    "cond_min_cell",
    "cond_bootstrap",
    "cond_directions",
    "cond_chunk",
)
#: integer fields that may be 0
_NONNEGATIVE_INTEGERS = (
    "check_groups",
    "probe_samples",
    "warmup_steps",
    "seed",
    "check_directions",
    "cond_exact_groups",
)
#: the largest value of fields with an upper end: every option is bounded (a run of 10**12 steps is refused, not
#: started; torch's thread pool crashes past a few thousand threads; a seed is 32 bits; a temperature below 1e-3 or
#: a learning rate past 100 overflows float32)
_AT_MOST: Mapping[str, float] = {
    "steps": 10**6,
    "warmup_steps": 10**6,
    "inner_steps": 1000,
    "threads": 1024,
    "seed": 2**32 - 1,
    "lr": 100.0,
    "warmup_lr": 100.0,
    "temperature": 100.0,
    "time_budget": 10**7,
}
#: the smallest temperature (its logits divided by it stay finite in float32)
MIN_TEMPERATURE = 1e-3
#: real fields that must be above 0, and those that may be 0
_POSITIVE_NUMBERS = ("lr", "warmup_lr", "temperature")
_NONNEGATIVE_NUMBERS = ("weight_decay", "clip_low", "clip_high", "kl_coef", "time_budget")
#: why the conditional experiment refuses DAPO and the token mean
_CONDITIONAL_NEEDS = (
    "the conditional experiment needs per-answer weights: mode grpo, dr_grpo or all, aggregation seq_mean or constant"
)


def _bad(cfg: LMConfig, name: str, want: str) -> ValueError:
    """The error for a field whose value is not ``want``."""
    return ValueError(f"{name} must be {want}, got {getattr(cfg, name)!r}")


def _is_integer(v: Any, least: int) -> bool:
    """``v`` is an integer (not a bool) of at least ``least``."""
    return not isinstance(v, bool) and isinstance(v, int) and v >= least


def _is_number(v: Any) -> bool:
    """``v`` is a finite int or float."""
    return isinstance(v, (int, float)) and math.isfinite(v)


def _check_choices(cfg: LMConfig) -> None:
    """Every enumerated field holds one of its values."""
    for name, allowed in _CHOICES.items():
        if getattr(cfg, name) not in allowed:
            raise _bad(cfg, name, "one of " + ", ".join(allowed))


def _check_integers(cfg: LMConfig) -> None:
    """Counts and sizes: integers in range, heads that divide the width, at most 9 digits."""
    for name in _POSITIVE_INTEGERS:
        if not _is_integer(getattr(cfg, name), 1):
            raise _bad(cfg, name, "an integer >= 1")
    for name in _NONNEGATIVE_INTEGERS:
        if not _is_integer(getattr(cfg, name), 0):
            raise _bad(cfg, name, "an integer >= 0")
    if not _is_integer(cfg.group_size, 2):
        raise _bad(cfg, "group_size", "an integer >= 2")
    if cfg.n_embd % cfg.n_head:
        raise ValueError(f"n_head must divide n_embd, got n_head={cfg.n_head}, n_embd={cfg.n_embd}")
    if cfg.max_digits > 9:
        raise _bad(cfg, "max_digits", "at most 9")


def _check_upper_ends(cfg: LMConfig) -> None:
    """The fields of :data:`_AT_MOST` at most their largest value."""
    for name, most in _AT_MOST.items():
        if getattr(cfg, name) > most:
            raise _bad(cfg, name, f"at most {int(most):,}" if float(most).is_integer() else f"at most {most:g}")


def _check_numbers(cfg: LMConfig) -> None:
    """Rates, coefficients and fractions: finite, and in their ranges."""
    for name in _POSITIVE_NUMBERS:
        v = getattr(cfg, name)
        if not (_is_number(v) and v > 0):
            raise _bad(cfg, name, "a finite number > 0")
    for name in _NONNEGATIVE_NUMBERS:
        v = getattr(cfg, name)
        if not (_is_number(v) and v >= 0):
            raise _bad(cfg, name, "a finite number >= 0")
    if cfg.temperature < MIN_TEMPERATURE:
        raise _bad(cfg, "temperature", f"at least {MIN_TEMPERATURE:g}")
    _check_upper_ends(cfg)
    if not (isinstance(cfg.warmup_target, (int, float)) and 0 <= cfg.warmup_target <= 1):
        raise _bad(cfg, "warmup_target", "a number in [0, 1]")
    low, high = cfg.cond_p_low, cfg.cond_p_high
    if not (isinstance(low, (int, float)) and isinstance(high, (int, float)) and 0 < low < high < 1):
        raise ValueError(f"cond_p_low and cond_p_high must satisfy 0 < low < high < 1, got {low!r} and {high!r}")


def _check_combinations(cfg: LMConfig) -> None:
    """Settings that constrain one another: the conditional experiment's, the clip, the weights."""
    if cfg.cond_min_cell < 2:
        raise _bad(cfg, "cond_min_cell", "an integer >= 2")
    if cfg.experiment == "conditional" and (cfg.mode == "dapo" or cfg.aggregation == "token_mean"):
        raise ValueError(_CONDITIONAL_NEEDS)
    if cfg.clip_low >= 1:
        raise _bad(cfg, "clip_low", "below 1")
    w = tuple(cfg.difficulty_weights)
    if w and (len(w) != cfg.max_digits or any(not (math.isfinite(x) and x >= 0) for x in w) or sum(w) <= 0):
        raise ValueError(f"difficulty_weights must be {cfg.max_digits} numbers >= 0 with a positive sum, got {w!r}")


#: named configurations (sizes); ``named_config`` applies overrides on top
CONFIGS: Mapping[str, LMConfig] = {
    "cpu-smoke": LMConfig(),
    "small": LMConfig(
        n_layer=4,
        n_embd=128,
        n_head=4,
        max_digits=4,
        steps=60,
        prompts_per_step=8,
        warmup_steps=1000,
        warmup_lr=2e-3,
        lr=2e-4,
        eval_every=10,
    ),
    "gpu": LMConfig(
        model="llama",
        n_layer=8,
        n_embd=512,
        n_head=8,
        max_digits=6,
        group_size=16,
        prompts_per_step=32,
        steps=120,
        lr=1e-4,
        warmup_steps=1500,
        warmup_batch=256,
        warmup_lr=1e-3,
        check_groups=8,
        probe_samples=32,
        eval_every=10,
        eval_prompts_per_level=64,
        inner_steps=2,
        time_budget=540.0,
        # the conditional experiment on one H200 within ~8 minutes:
        # g rows of 384 groups × ~25M fp32 parameters ≈ 38 GB per mode
        cond_prompts=12,
        cond_groups=384,
        cond_candidates=256,
        cond_probe=64,
        cond_ref_answers=2048,
        cond_directions=4,
    ),
    # the fixed-policy experiment where G8's noise term Σ₊/k is exercised: split has s + 1 correct
    # answers per prompt, so Σ₊ ≠ 0.  1–2 digit sums, warmed up to greedy accuracy 0.8, leave the
    # sampled solve rates of most two-digit sums in 0.25–0.7.  5.5 minutes on one CPU thread (the
    # Gram matrices grow as groups²); 8 directions, chosen when the goal still read ‖Ve‖/‖Vg‖, whose
    # tail some of ~23,000 checked groups reach with 2 or 4 (the goal now reads ‖Ve‖/(√K‖g‖),
    # conditional_summary.goal_errors); kept, so that the stored seeds rerun from their commands
    "cpu-conditional": LMConfig(
        experiment="conditional",
        task="split",
        max_digits=2,
        warmup_target=0.8,
        cond_prompts=12,
        cond_groups=960,
        cond_directions=8,
    ),
}


def named_config(name: str, **overrides: Any) -> LMConfig:
    """The named configuration ``name`` with ``overrides`` applied (None values ignored)."""
    if name not in CONFIGS:
        raise ValueError(f"unknown config {name!r}; choose from {', '.join(CONFIGS)}")
    return CONFIGS[name].replace(**{k: v for k, v in overrides.items() if v is not None})


def lm_field_docs() -> dict[str, str]:
    """Each field's docstring (its ``--help`` text), by field name."""
    from grpo_identity.trainer.config import field_docs

    return field_docs(LMConfig)


# --- derived quantities (not settings) ---------------------------------------------------------
def modes_of(cfg: LMConfig) -> tuple[str, ...]:
    """The modes a run trains, in order."""
    return MODES if cfg.mode == "all" else (cfg.mode,)


def default_aggregation(mode: str) -> str:
    """The aggregation each method's paper uses: GRPO per-sequence mean, Dr. GRPO a constant
    (max completion length), DAPO the token mean over the batch."""
    return {"grpo": "seq_mean", "dr_grpo": "constant", "dapo": "token_mean"}[mode]


def aggregation_of(cfg: LMConfig, mode: str) -> str:
    """The aggregation a mode runs with under ``cfg``."""
    return default_aggregation(mode) if cfg.aggregation == "auto" else cfg.aggregation


def dial_of(mode: str) -> Any:
    """The dial preset of a mode (grpo → GRPO, dr_grpo → DR_GRPO, dapo → DAPO)."""
    from grpo_identity.dial import preset

    return preset(mode)


def conditional_modes(cfg: LMConfig) -> tuple[str, ...]:
    """The modes the conditional experiment measures: GRPO and Dr. GRPO (DAPO's non-silent groups are GRPO's)."""
    return ("grpo", "dr_grpo") if cfg.mode == "all" else (cfg.mode,)
