"""The controlled Bernoulli-logit run: M scalar policies trained by GRPO, Dr. GRPO and DAPO with
real policy gradients (PAPER claim 9), checking the identity at every step.

Each prompt x has one parameter θ_x and solves with p_x = sigmoid(θ_x).  A step samples G
rollouts per prompt, forms advantages with the dial (:mod:`grpo_identity.dial`), builds the
policy-gradient loss

    L(θ) = −(1/G) Σ_x Σ_i Â_{x,i} log π_θ(y_{x,i})

and takes a plain SGD step with the autograd gradient.  The identity (Theorem 1) predicts
∂L/∂θ_x = −c(k_x)·(s̄₊ − s̄₋) with c the dial's coefficient (GRPO σ, Dr. GRPO σ², DAPO
1{0<k<G}σ) and s̄₊ − s̄₋ = 1 for this policy; the largest |autograd − prediction| over every
prompt, step and arm is ``identity_max_abs_err``.  (The paper's own run adds the closed-form
gain σ to θ; this run differentiates the loss, so the identity is tested, not assumed.)

The measurements follow the paper's definitions:

* initial solve rates: ``num_prompts`` draws with replacement from the interior (0 < p̂ < 1)
  solve rates of the source (default: the shipped Big-Math histogram), clipped to
  [clip_low, clip_high];
* ``r2_silent``: R² of the GRPO arm's measured silent fraction (first draw of each step)
  against E[p^G + (1−p)^G] at the current p; ``r2_silent_pooled`` pools the three arms;
* ``extreme_share``: share of gradient mass on extreme prompts at the *initial* solve rates:
  |∂L/∂θ| summed over ``mass_draws`` independent groups at p0, in 10 bins of width 0.1, the
  bins whose centre is < 0.1 or > 0.9 (p0 < 0.1 or p0 ≥ 0.9); next to it the finite-G forms
  E[g] and p(1−p)(1−1/G) and the large-G forms √(p(1−p)) and p(1−p), binned alike;
* ``hard_final``: final mean solve rate of the prompts with p0 at or below the 25 % quantile of
  p0 (ties included);
* ``dapo_oversample``: DAPO redraws a silent group up to ``max_draws`` draws in all, every
  draw's G samples counted; its samples over GRPO's.

torch is imported inside :func:`run_bernoulli`; the run uses one torch thread and float64.

>>> r = run_bernoulli(BernoulliConfig(num_prompts=40, steps=3, mass_draws=8))
>>> r["identity_max_abs_err"] < 1e-12, sorted(r["hard_final"])
(True, ['dapo', 'dr_grpo', 'grpo'])
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
import numpy.typing as npt

from grpo_identity.analysis.realdata import gradient_weights, is_extreme
from grpo_identity.analysis.solve_rates import resolve
from grpo_identity.analysis.stats import r_squared
from grpo_identity.closed_forms import silent_rate
from grpo_identity.trainer.config import BernoulliConfig

__all__ = [
    "BernoulliConfig",
    "ARMS",
    "HARD_QUANTILE",
    "MASS_BINS",
    "initial_solve_rates",
    "hardest_quartile",
    "mass_bin",
    "initial_gradient_mass",
    "run_bernoulli",
    "plot_bernoulli",
]

#: the three arms, by dial preset name
ARMS = ("grpo", "dr_grpo", "dapo")
#: the hardest initial quartile: prompts with initial p at or below this quantile of p0
HARD_QUANTILE = 0.25
#: bins of the initial solve rate for the gradient mass: 10 of width 0.1, as the paper's
MASS_BINS = 10
#: at most this many rollouts (draws × M × G) in one batch of the initial-mass measurement
MASS_BATCH_ROLLOUTS = 1 << 21

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def initial_solve_rates(config: BernoulliConfig) -> tuple[FloatArray, str]:
    """The M initial solve rates (interior values of the source, clipped) and the source's name."""
    source = resolve(config.solve_rates).interior()
    rng = np.random.default_rng(config.seed)
    p0 = np.clip(source.sample(config.num_prompts, rng), config.clip_low, config.clip_high)
    return p0, source.source


def hardest_quartile(p0: FloatArray) -> BoolArray:
    """The prompts whose initial solve rate is at or below the 25 % quantile of p0 (ties in).

    >>> hardest_quartile(np.array([0.1, 0.1, 0.2, 0.5, 0.9])).tolist()
    [True, True, False, False, False]
    """
    return np.asarray(p0 <= np.quantile(p0, HARD_QUANTILE), dtype=bool)


def mass_bin(p: FloatArray) -> npt.NDArray[np.intp]:
    """Index of the 0.1-wide bin of each solve rate, 0 … 9 (p = 1 in the last)."""
    return np.clip(np.digitize(p, np.linspace(0.0, 1.0, MASS_BINS + 1)) - 1, 0, MASS_BINS - 1)


#: the extreme bins: centre < 0.1 or > 0.9 (the paper's panel (b))
EXTREME_BINS = is_extreme((np.arange(MASS_BINS) + 0.5) / MASS_BINS)


class _Measurements:
    """What one arm measures while it trains (kept apart from the training state): per-step
    curves, the identity's largest error, sample counts and the gradient mass over the run."""

    def __init__(self, arm: str, p0: FloatArray, config: BernoulliConfig) -> None:
        self.arm, self.G, self.steps = arm, config.group_size, config.steps
        self.hard = hardest_quartile(p0)
        self.curves: dict[str, list[float]] = {
            k: [] for k in ("silent_measured", "silent_predicted", "mean_p", "hard_mean_p", "samples")
        }
        self.max_err = 0.0
        self.samples = 0
        self.silent_after = 0.0
        self.run_mass = {form: {"all": 0.0, "extreme": 0.0} for form in ("measured", "finite_g", "large_g")}

    def start_step(self, p_np: FloatArray) -> None:
        """Solve rates at the start of a step: mean, hardest quartile, predicted silent fraction."""
        self.curves["mean_p"].append(float(p_np.mean()))
        self.curves["hard_mean_p"].append(float(p_np[self.hard].mean()))
        self.curves["silent_predicted"].append(float(np.mean(silent_rate(self.G, p_np))))

    def draws(self, silent_first: float, samples: int, silent_after: float) -> None:
        """The step's groups: silent fraction of the first draw, samples drawn, still silent after."""
        self.curves["silent_measured"].append(silent_first)
        self.samples += samples
        self.curves["samples"].append(float(self.samples))
        self.silent_after += silent_after

    def identity(self, err: float) -> None:
        """Largest |autograd − prediction| so far; a NaN propagates (max() would drop it)."""
        self.max_err = err if not err <= self.max_err else self.max_err

    def gradient(self, p_np: FloatArray, grad: FloatArray) -> None:
        """Gradient mass |∂L/∂θ| on extreme prompts over the run, and its closed forms."""
        ext = is_extreme(p_np)
        weights = {"measured": np.abs(grad)}
        if self.arm != "dapo":
            weights |= {
                "finite_g": gradient_weights(p_np, self.G)[self.arm],
                "large_g": gradient_weights(p_np)[self.arm],
            }
        for form, w in weights.items():
            self.run_mass[form]["all"] += float(w.sum())
            self.run_mass[form]["extreme"] += float(w[ext].sum())

    def result(self, p_final: FloatArray) -> dict[str, Any]:
        """The arm's measurements, JSON-ready."""
        forms = ("measured", "finite_g", "large_g") if self.arm != "dapo" else ("measured",)
        return {
            "identity_max_abs_err": self.max_err,
            "curves": self.curves,
            "hard_final": float(p_final[self.hard].mean()),
            "final_mean_p": float(p_final.mean()),
            "samples": self.samples,
            "silent_after_draws": self.silent_after / self.steps,
            "extreme_share_run": {
                f: self.run_mass[f]["extreme"] / self.run_mass[f]["all"] if self.run_mass[f]["all"] > 0 else 0.0
                for f in forms
            },
        }


def _draw_groups(p: Any, draws: int, G: int, gen: Any) -> tuple[Any, float, int, float]:
    """One step's groups: ``draws`` groups of G rollouts per prompt; DAPO keeps the first
    non-silent draw (a prompt silent in every draw keeps its last one).

    Returns (y (M, G) with 1 = correct, silent fraction of the first draw, samples drawn,
    fraction still silent after the draws)."""
    import torch

    M = p.shape[0]
    u = torch.rand(draws, M, G, generator=gen, dtype=torch.float64)
    y_all = (u < p.detach()[None, :, None]).to(torch.float64)  # (D, M, G)
    k_all = y_all.sum(-1)  # (D, M)
    live_all = (k_all > 0) & (k_all < G)
    first_live = torch.where(live_all.any(0), live_all.to(torch.int64).argmax(0), torch.full((M,), draws - 1))  # (M,)
    rows = torch.arange(M)
    silent_first = float((~live_all[0]).double().mean())
    silent_after = float((~live_all[first_live, rows]).double().mean())
    return y_all[first_live, rows], silent_first, G * int((first_live + 1).sum()), silent_after


def _policy_gradient(theta: Any, y: Any, dial: Any, G: int) -> Any:
    """∂L/∂θ of L(θ) = −(1/G) Σ_x Σ_i Â_{x,i} log π_θ(y_{x,i}), by autograd; shape (M,), numpy."""
    import torch.nn.functional as F

    from grpo_identity.dial import advantages as dial_advantages

    adv = dial_advantages(y, G, dial)  # (M, G)
    log_pi = y * F.logsigmoid(theta)[:, None] + (1 - y) * F.logsigmoid(-theta)[:, None]  # (M, G)
    loss = -(adv * log_pi).sum() / G
    theta.grad = None
    loss.backward()
    return theta.grad.detach().numpy()


def _identity_error(grad: FloatArray, y: Any, p: Any, G: int, dial: Any) -> float:
    """max_x |∂L/∂θ_x − (−c(k_x)·(s̄₊ − s̄₋))|, scores s = ∂ log π / ∂θ = y − p (Theorem 1)."""
    from grpo_identity.dial import coefficient, score_gap

    scores = (y - p.detach()[:, None]).reshape(-1, 1)  # (M·G, 1)
    gap = score_gap(y.reshape(-1), scores, G)[:, 0].numpy()  # (M,)
    predicted = -np.asarray(coefficient(y.sum(1).numpy(), G, dial)) * gap
    return float(np.abs(grad - predicted).max())


def _run_arm(arm: str, p0: FloatArray, config: BernoulliConfig, bar: Any) -> dict[str, Any]:
    """Train one arm with plain SGD on the real loss; return its measurements (numpy)."""
    import torch

    from grpo_identity.dial import preset

    dial = preset(arm)
    G = config.group_size
    draws = config.max_draws if arm == "dapo" else 1
    gen = torch.Generator().manual_seed(config.seed)
    theta = torch.logit(torch.as_tensor(p0, dtype=torch.float64)).requires_grad_(True)  # (M,)
    opt = torch.optim.SGD([theta], lr=config.lr)
    meas = _Measurements(arm, p0, config)
    for _ in range(config.steps):
        p = torch.sigmoid(theta)  # (M,)
        p_np = p.detach().numpy().copy()
        meas.start_step(p_np)
        y, silent_first, samples, silent_after = _draw_groups(p, draws, G, gen)
        meas.draws(silent_first, samples, silent_after)
        grad = _policy_gradient(theta, y, dial, G)
        meas.identity(_identity_error(grad, y, p, G, dial))
        meas.gradient(p_np, grad)
        opt.step()
        if bar is not None:
            bar.update(1)
    return meas.result(torch.sigmoid(theta).detach().numpy())


def _mass_seed(seed: int) -> int:
    """A seed for the initial-mass draws, independent of the training streams of ``seed``."""
    return int(np.random.SeedSequence([seed, 1]).generate_state(1)[0])


def initial_gradient_mass(p0: FloatArray, config: BernoulliConfig) -> tuple[dict[str, FloatArray], float]:
    """|∂L/∂θ_x| of GRPO and Dr. GRPO summed over ``config.mass_draws`` independent groups of G
    rollouts at the initial solve rates p0 (the same groups for both), by autograd of the loss.

    Returns ({"grpo", "dr_grpo"} → per-prompt mass, shape (M,), the identity's largest error
    on these gradients).  Batches of at most ``MASS_BATCH_ROLLOUTS`` rollouts bound the memory.
    """
    import torch

    from grpo_identity.dial import preset

    M, G, R = p0.size, config.group_size, config.mass_draws
    gen = torch.Generator().manual_seed(_mass_seed(config.seed))
    theta0 = torch.logit(torch.as_tensor(p0, dtype=torch.float64))  # (M,)
    mass = {arm: np.zeros(M) for arm in ("grpo", "dr_grpo")}
    max_err = 0.0
    per_batch = max(1, MASS_BATCH_ROLLOUTS // (M * G))
    for start in range(0, R, per_batch):
        n = min(per_batch, R - start)
        p = torch.sigmoid(theta0).repeat(n)  # (n·M,)
        y = (torch.rand(n * M, G, generator=gen, dtype=torch.float64) < p[:, None]).to(torch.float64)  # (n·M, G)
        for arm in mass:
            theta = theta0.repeat(n).requires_grad_(True)  # (n·M,): one leaf per draw and prompt
            grad = _policy_gradient(theta, y, preset(arm), G)
            err = _identity_error(grad, y, p, G, preset(arm))
            max_err = err if not err <= max_err else max_err
            mass[arm] += np.abs(grad).reshape(n, M).sum(0)
    return mass, max_err


def _bin_share(weights: FloatArray, bins: npt.NDArray[np.intp]) -> FloatArray:
    per_bin = np.asarray(np.bincount(bins, weights=weights, minlength=MASS_BINS), dtype=np.float64)
    return per_bin / per_bin.sum() if per_bin.sum() > 0 else per_bin


def _initial_shares(p0: FloatArray, config: BernoulliConfig, mass: dict[str, FloatArray]) -> dict[str, dict[str, Any]]:
    """Per arm: the share of gradient mass by 0.1-bin of p0 and on the extreme bins, measured
    (``mass``), finite-G (E[g], p(1−p)(1−1/G)) and large-G (√(p(1−p)), p(1−p))."""
    bins = mass_bin(p0)
    out: dict[str, dict[str, Any]] = {}
    for arm in ("grpo", "dr_grpo"):
        forms = {
            "measured": mass[arm],
            "finite_g": gradient_weights(p0, config.group_size)[arm],
            "large_g": gradient_weights(p0)[arm],
        }
        by_bin = {form: _bin_share(w, bins) for form, w in forms.items()}
        out[arm] = {
            "extreme": {form: float(v[EXTREME_BINS].sum()) for form, v in by_bin.items()},
            "by_bin": {form: v.tolist() for form, v in by_bin.items()},
        }
    return out


def _round(x: Any, digits: int = 6) -> Any:
    if isinstance(x, float):
        return float(f"{x:.{digits}g}")
    if isinstance(x, dict):
        return {k: _round(v, digits) for k, v in x.items()}
    if isinstance(x, list):
        return [_round(v, digits) for v in x]
    return x


def _progress_bar(config: BernoulliConfig) -> Any:
    """The run's progress bar on stderr, over every arm's steps; drawn at once, while the
    initial gradient mass (seconds) is measured."""
    from tqdm import tqdm

    return tqdm(total=len(ARMS) * config.steps, desc="train bernoulli: initial gradient mass", unit="step", leave=False)


def _run_arms(p0: FloatArray, config: BernoulliConfig, bar: Any = None) -> dict[str, dict[str, Any]]:
    """Train the three arms from the same p0 (one torch thread); ``bar`` (a tqdm bar, or None)
    names the arm in training and counts the steps."""
    arms = {}
    for arm in ARMS:
        if bar is not None:
            bar.set_description_str(f"train bernoulli: {arm} arm")
        arms[arm] = _run_arm(arm, p0, config, bar)
    return arms


def run_bernoulli(config: BernoulliConfig | None = None, progress: bool = False) -> dict[str, Any]:
    """Run the three arms (GRPO, Dr. GRPO, DAPO) of the controlled run and measure them.

    Returns a JSON-ready dict: ``identity_max_abs_err`` (over every step, arm and the initial-mass
    draws), ``r2_silent`` (GRPO arm, the paper's definition; ``r2_silent_pooled`` over the three
    arms, ``r2_silent_by_arm``), ``extreme_share`` ({"grpo", "dr_grpo"} → {"measured",
    "finite_g", "large_g"}, at the initial solve rates, see the module docstring),
    ``extreme_share_run`` (the same over every step of the run, extreme = p < 0.1 or > 0.9),
    ``hard_final`` (per arm), ``hard_initial``, ``hard_count``, ``final_mean_solve_rate``,
    ``dapo_oversample``, ``dapo_silent_after_draws``, ``seconds``, ``solve_rate_source``,
    ``config``, the per-step ``curves`` and ``mass_by_p`` (share per 0.1-bin of p0) used by
    :func:`plot_bernoulli`.  ``progress``: a bar on stderr over every arm's steps, naming the arm
    in training (drawn at once, while the initial gradient mass is measured).
    """
    import torch

    config = config or BernoulliConfig()
    start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    bar = _progress_bar(config) if progress else None
    try:
        p0, source = initial_solve_rates(config)
        mass, mass_err = initial_gradient_mass(p0, config)
        arms = _run_arms(p0, config, bar)
    finally:
        torch.set_num_threads(threads)
        if bar is not None:
            bar.close()
    shares = _initial_shares(p0, config, mass)
    curves = {a: arms[a]["curves"] for a in ARMS}
    pooled = [np.concatenate([curves[a][k] for a in ARMS]) for k in ("silent_measured", "silent_predicted")]
    hard = hardest_quartile(p0)
    result: dict[str, Any] = {
        "identity_max_abs_err": max([mass_err] + [arms[a]["identity_max_abs_err"] for a in ARMS]),
        "identity_max_abs_err_by_arm": {a: arms[a]["identity_max_abs_err"] for a in ARMS} | {"initial_mass": mass_err},
        "r2_silent": r_squared(curves["grpo"]["silent_measured"], curves["grpo"]["silent_predicted"]),
        "r2_silent_pooled": r_squared(*pooled),
        "r2_silent_by_arm": {a: r_squared(curves[a]["silent_measured"], curves[a]["silent_predicted"]) for a in ARMS},
        "extreme_share": {a: shares[a]["extreme"] for a in shares},
        "extreme_share_run": {a: arms[a]["extreme_share_run"] for a in ARMS},
        "hard_final": {a: arms[a]["hard_final"] for a in ARMS},
        "hard_initial": float(p0[hard].mean()),
        "hard_count": int(hard.sum()),
        "final_mean_solve_rate": {a: arms[a]["final_mean_p"] for a in ARMS},
        "dapo_oversample": arms["dapo"]["samples"] / arms["grpo"]["samples"],
        "dapo_silent_after_draws": arms["dapo"]["silent_after_draws"],
        "solve_rate_source": source,
        "config": dataclasses.asdict(config),
        "curves": curves,
        "mass_by_p": {
            "bin_edges": np.linspace(0.0, 1.0, MASS_BINS + 1).tolist(),
            **{a: shares[a]["by_bin"] for a in shares},
        },
    }
    result["seconds"] = time.perf_counter() - start
    return _round(result)


_LABELS = {"grpo": "GRPO", "dr_grpo": "Dr. GRPO", "dapo": "DAPO"}


def plot_bernoulli(result: dict[str, Any], path: str) -> None:
    """The paper's three panels: (a) measured silent fraction against E[p^G + (1−p)^G] over
    training; (b) share of gradient mass by 0.1-bin of the initial solve rate, GRPO against
    Dr. GRPO (measured over ``mass_draws`` groups at p0: bars; finite-G and large-G forms: lines);
    (c) mean solve rate of the hardest initial quartile over training, per arm.  Writes a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg = result["config"]
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(13, 3.6))
    for arm in ARMS:
        cv = result["curves"][arm]
        steps = np.arange(len(cv["silent_measured"]))
        (line,) = a.plot(steps, cv["silent_measured"], ".", ms=3, label=f"{_LABELS[arm]} measured")
        a.plot(steps, cv["silent_predicted"], "-", color=line.get_color(), lw=1)
    a.set_xlabel("step")
    a.set_ylabel("silent fraction")
    a.set_title(f"(a) silent groups vs E[p^G+(1-p)^G], R² (GRPO) = {result['r2_silent']:.4f}", fontsize=9)
    a.legend(fontsize=7)

    edges = np.asarray(result["mass_by_p"]["bin_edges"])
    centres = 0.5 * (edges[1:] + edges[:-1])
    width = np.diff(edges)
    for i, arm in enumerate(("dr_grpo", "grpo")):
        mb = result["mass_by_p"][arm]
        bars = b.bar(
            centres + (i - 0.5) * width * 0.45,
            mb["measured"],
            width * 0.45,
            alpha=0.6,
            label=f"{_LABELS[arm]} measured",
        )
        colour = bars.patches[0].get_facecolor()[:3]
        b.plot(centres, mb["finite_g"], "-", color=colour, lw=1.2, label=f"{_LABELS[arm]} finite-G form")
        b.plot(centres, mb["large_g"], ":", color=colour, lw=1.2, label=f"{_LABELS[arm]} large-G form")
    es = result["extreme_share"]
    b.set_title(
        f"(b) gradient mass at the start; extreme: GRPO {100 * es['grpo']['measured']:.1f} %, "
        f"Dr. GRPO {100 * es['dr_grpo']['measured']:.1f} %",
        fontsize=9,
    )
    b.set_xlabel("initial solve rate p")
    b.set_ylabel(f"share of |gradient| at p0 ({cfg.get('mass_draws', '?')} draws)")
    b.set_ylim(0, 1.45 * b.get_ylim()[1])
    b.legend(fontsize=6, ncol=2, loc="upper center")

    for arm in ARMS:
        cv = result["curves"][arm]
        c.plot(
            np.arange(len(cv["hard_mean_p"])),
            cv["hard_mean_p"],
            label=f"{_LABELS[arm]} (final {result['hard_final'][arm]:.2f})",
        )
    c.set_xlabel("step")
    c.set_ylabel("mean p, hardest initial quartile")
    c.set_title(f"(c) hardest quartile; DAPO uses {result['dapo_oversample']:.2f}× the samples", fontsize=9)
    c.legend(fontsize=7)
    fig.suptitle(
        f"Bernoulli-logit run: M={cfg['num_prompts']}, G={cfg['group_size']}, lr={cfg['lr']}, "
        f"{cfg['steps']} steps; {result['solve_rate_source']}",
        fontsize=8,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
