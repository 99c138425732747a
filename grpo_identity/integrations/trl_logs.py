"""What the identity predicts about a plain TRL run, read off the metrics TRL itself logs.

A TRL ``GRPOTrainer`` run without this project's callback still leaves, in the ``log_history``
of its ``trainer_state.json``, three numbers per logged step (read in TRL 0.16.0, 0.22.2 and
1.16.0's ``_generate_and_score_completions`` and ``log``):

* ``reward``: the mean over the gathered generation batch (every process) of the rewards, the
  weighted sum of the reward functions (NaN rows left out since 1.x);
* ``frac_reward_zero_std`` (TRL ≥ 0.18): the share of groups whose reward std (torch ``std``,
  ddof 1) is ``isclose`` to 0 (atol 1e-8), i.e. the *silent* groups — with ``scale_rewards``
  'group' or 'none'; with 'batch' (and with the default 'group' in 0.22.0–0.22.1, whose
  branches were swapped) it tests the whole batch's std, so it is 0 or 1;
* ``reward_std``: the mean over groups of the per-group std (ddof 1) up to TRL 0.26; the std
  of the whole batch (ddof 1) from 0.27. Not used here: for binary rewards the batch std is
  fixed by the mean, √(r̄(1 − r̄)·N/(N − 1)), and says nothing about how difficulty varies.

``rewards/<name>/mean`` and ``/std`` (TRL ≥ 0.17; ``rewards/<name>`` in 0.16) are per reward
function. Each value in ``log_history`` is the mean of the per-generation-batch values since the
previous log (``logging_steps``). The group size G (``num_generations``) is not in
``trainer_state.json`` (TRL keeps it only in ``training_args.bin``, a pickle this module does
not open), so it is passed in.

What is predicted, assuming **binary rewards** (a group of G independent draws at its prompt's
solve rate p): the silent fraction is E[p^G + (1 − p)^G] over the prompts (PAPER claim 6,
:func:`~grpo_identity.closed_forms.silent_rate`). Two predictions from the logged mean r̄:

* **lower bound** f(r̄) = silent_rate(G, r̄): every prompt at the same p = r̄. f is convex, so
  prompts of mixed difficulty (and averaging over a logging window) only raise the fraction
  (Jensen); a logged fraction clearly under it means the rewards are not binary, or the groups
  are not independent draws;
* **saturation model**: a share ρ of the prompts is saturated (p ∈ {0, 1}: silent at any G),
  the rest at r̄: ρ + (1 − ρ)·f(r̄). It has the same mean and Var(p) = ρ·r̄(1 − r̄) (ρ is the
  intraclass correlation of the rewards). ρ is fitted by moments on the steps *before* each
  step (so each step's value is a prediction, not a fit), ρ̂ = Σ(F − f)/Σ(1 − f) clipped to
  [0, 1]; the first step has none.

Binomial noise of a logged fraction is about √(F(1 − F)/n) for n groups per generation batch,
which the log does not record. numpy only.

>>> round(silent_lower_bound(4, 0.5), 6)
0.125
>>> round(saturated_share([0.5, 0.5], [0.125, 0.125]), 6)
0.428571
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from grpo_identity.closed_forms import fidelity, group_size_exact, silent_rate

__all__ = [
    "REWARD",
    "ZERO_STD",
    "REWARD_STD",
    "LoggedStep",
    "CostRow",
    "Comparison",
    "logged_steps",
    "silent_lower_bound",
    "saturated_share",
    "prior_shares",
    "model_silent",
    "cost_table",
    "compare",
]

#: TRL's keys in ``log_history``: the mean reward, the share of zero-std groups, the reward std
REWARD, ZERO_STD, REWARD_STD = "reward", "frac_reward_zero_std", "reward_std"


@dataclass(frozen=True)
class LoggedStep:
    """One training entry of ``log_history`` that carries TRL's ``reward``."""

    step: float
    reward: float
    frac_zero_std: float | None
    reward_std: float | None


@dataclass(frozen=True)
class CostRow:
    """What a group size costs at the run's mean solve rate: the expected share of silent groups
    (homogeneous prompts; and under the saturation model), the rollouts per prompt spent on them
    and the fidelity φ(G, r̄) of the live groups' update (Corollary 2)."""

    G: int
    label: str
    silent_bound: float
    silent_model: float | None
    wasted_rollouts: float
    fidelity: float | None


@dataclass
class Comparison:
    """Logged against predicted silent fractions over a TRL run, and the group-size cost table."""

    group_size: int
    group_size_source: str
    steps: list[LoggedStep]
    bound: list[float]
    model: list[float | None]
    saturated_share: float | None
    mean_reward: float
    cost: list[CostRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "group_size": self.group_size,
            "group_size_source": self.group_size_source,
            "mean_reward": self.mean_reward,
            "saturated_share": self.saturated_share,
            "steps": [
                {**asdict(s), "silent_bound": b, "silent_model": m}
                for s, b, m in zip(self.steps, self.bound, self.model)
            ],
            "cost": [asdict(r) for r in self.cost],
            "notes": list(self.notes),
        }


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def logged_steps(history: Sequence[dict[str, Any]]) -> list[LoggedStep]:
    """The training entries of a ``log_history`` with a finite ``reward`` (eval entries are
    ``eval_reward``; the final summary entry has none), in step order, one per step (the last)."""
    by_step: dict[float, LoggedStep] = {}
    for e in history:
        r, step = _number(e.get(REWARD)), _number(e.get("step"))
        if r is not None and step is not None:
            by_step[step] = LoggedStep(step, r, _number(e.get(ZERO_STD)), _number(e.get(REWARD_STD)))
    return [by_step[s] for s in sorted(by_step)]


def silent_lower_bound(G: int, reward_mean: float | Sequence[float]) -> Any:
    """The silent fraction if every prompt had solve rate r̄: f(r̄) = p^G + (1 − p)^G at p = r̄,
    a lower bound for prompts of mixed difficulty (f is convex). r̄ must be in [0, 1].

    >>> silent_lower_bound(4, [0.0, 0.5])
    array([1.   , 0.125])
    """
    return silent_rate(G, reward_mean)


def saturated_share(logged: Sequence[float], bound: Sequence[float]) -> float | None:
    """The share ρ of saturated prompts that matches the logged silent fractions on average:
    ρ = Σ(F − f)/Σ(1 − f), clipped to [0, 1]; None when nothing is logged or f = 1 throughout."""
    F, f = np.asarray(logged, dtype=np.float64), np.asarray(bound, dtype=np.float64)
    room = float((1.0 - f).sum())
    if F.size == 0 or room <= 0:
        return None
    return float(np.clip((F - f).sum() / room, 0.0, 1.0))


def prior_shares(logged: Sequence[float | None], bound: Sequence[float]) -> list[float | None]:
    """For each step, :func:`saturated_share` of the steps before it that logged a fraction (None: not logged),
    by running sums, so a run of n logged steps costs O(n).

    >>> [None if r is None else round(r, 6) for r in prior_shares([0.5, None, 0.5], [0.125, 0.125, 0.125])]
    [None, 0.428571, 0.428571]
    """
    out: list[float | None] = []
    excess = room = 0.0
    for F, f in zip(logged, bound):
        out.append(float(np.clip(excess / room, 0.0, 1.0)) if room > 0 else None)
        if F is not None:
            excess, room = excess + F - f, room + 1.0 - f
    return out


def model_silent(G: int, reward_mean: float, rho: float) -> float:
    """The saturation model's silent fraction ρ + (1 − ρ)·f(r̄).

    >>> model_silent(4, 0.5, 0.0), model_silent(4, 0.5, 1.0)
    (0.125, 1.0)
    """
    return float(rho + (1.0 - rho) * silent_rate(G, reward_mean))


def cost_table(G: int, mean_reward: float, rho: float | None, eps: float) -> list[CostRow]:
    """The silent share at G/2, G, 2G, 4G and at the smallest G whose fidelity at r̄ reaches 1 − ε."""
    sizes: dict[int, str] = {}
    if G // 2 >= 2:
        sizes[G // 2] = "G/2"
    sizes.update({G: "G (this run)", 2 * G: "2G", 4 * G: "4G"})
    live = 0.0 < mean_reward < 1.0
    if live:
        try:
            g_eps: int | None = group_size_exact(eps, mean_reward)
        except ValueError:  # no G within the search's bound reaches 1 − ε at so rare a success
            g_eps = None
        if g_eps is not None:
            sizes[g_eps] = f"fidelity {1 - eps:g} at r̄" + (" (= " + sizes[g_eps] + ")" if g_eps in sizes else "")
    rows = []
    for g in sorted(sizes):
        bound = float(silent_rate(g, mean_reward))
        model = model_silent(g, mean_reward, rho) if rho is not None else None
        share = model if model is not None else bound
        phi = float(fidelity(g, mean_reward)) if live else None
        rows.append(CostRow(g, sizes[g], bound, model, share * g, phi))
    return rows


def compare(
    history: Sequence[dict[str, Any]], group_size: int, *, source: str = "--G", eps: float = 0.1
) -> Comparison | None:
    """Logged against predicted silent fractions for each logged step (see the module docstring);
    None when no entry carries TRL's ``reward``."""
    G = int(group_size)
    steps = logged_steps(history)
    if not steps:
        return None
    notes: list[str] = []
    outside = [s.step for s in steps if not 0.0 <= s.reward <= 1.0]
    if outside:
        return Comparison(
            G,
            source,
            steps,
            [math.nan] * len(steps),
            [None] * len(steps),
            None,
            float(np.mean([s.reward for s in steps])),
            notes=[
                f"no prediction: the logged mean reward is outside [0, 1] at step {outside[0]:g} "
                "(the prediction needs binary rewards)"
            ],
        )
    bound = silent_lower_bound(G, [s.reward for s in steps]).tolist()
    model = [
        model_silent(G, s.reward, rho) if rho is not None else None
        for s, rho in zip(steps, prior_shares([s.frac_zero_std for s in steps], bound))
    ]
    logged = [(s.frac_zero_std, b) for s, b in zip(steps, bound) if s.frac_zero_std is not None]
    rho_all = saturated_share([F for F, _ in logged], [b for _, b in logged]) if logged else None
    if not logged:
        present = any(ZERO_STD in e for e in history)  # logged, but never a finite number (NaN, null)
        notes.append(
            f"every logged {ZERO_STD} is NaN or not a number: only the predictions are drawn"
            if present
            else f"TRL did not log {ZERO_STD} (added in TRL 0.18): only the predictions are drawn"
        )
    elif all(F in (0.0, 1.0) for F, _ in logged) and len(logged) > 1:
        notes.append(
            f"every logged {ZERO_STD} is 0 or 1: with scale_rewards='batch' (or TRL 0.22.0-0.22.1's default) "
            "TRL tests the whole batch's std, not each group's"
        )
    if logged and np.mean([F for F, _ in logged]) < np.mean([b for _, b in logged]):
        notes.append(
            f"the logged fraction is on average under the lower bound ({np.mean([F for F, _ in logged]):.3g} < "
            f"{np.mean([b for _, b in logged]):.3g}): the rewards are probably not binary, or G is not {G}"
        )
    mean_reward = float(np.mean([s.reward for s in steps]))
    return Comparison(
        G, source, steps, bound, model, rho_all, mean_reward, cost_table(G, mean_reward, rho_all, eps), notes
    )
