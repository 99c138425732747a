"""The controlled Bernoulli-logit run: M scalar policies trained by GRPO, Dr. GRPO and DAPO with
real policy gradients (PAPER claim 9), checking the identity at every step.

Each prompt x has one parameter θ_x and solves with p_x = sigmoid(θ_x).  A step samples G
rollouts per prompt, forms advantages with the dial (:mod:`grpo_identity.dial`), builds the
policy-gradient loss

    L(θ) = −(1/G) Σ_x Σ_i Â_{x,i} log π_θ(y_{x,i})

and takes a plain SGD step with the autograd gradient.  The identity (Theorem 1) predicts
∂L/∂θ_x = −c(k_x)·(s̄₊ − s̄₋) with c the dial's coefficient (GRPO σ, Dr. GRPO σ², DAPO
1{0<k<G}σ) and s̄₊ − s̄₋ = 1 for this policy; the largest |autograd − prediction| over every
prompt, step and arm is ``identity_max_abs_err``.  DAPO redraws a silent group up to
``max_draws`` times per prompt and step (a group still silent after that gives no gradient);
its sample count over GRPO's is ``dapo_oversample``.

Initial difficulties: interior solve rates (0 < p̂ < 1) of the configured source, clipped to
[0.02, 0.98]; with no source, the synthetic stand-in of
:func:`grpo_identity.analysis.solve_rates.synthetic_default` (recorded as ``solve_rate_source``).

torch is imported inside :func:`run_bernoulli`; the run uses one torch thread and float64.

>>> r = run_bernoulli(BernoulliConfig(num_prompts=40, steps=3))
>>> r["identity_max_abs_err"] < 1e-12, sorted(r["hard_final"])
(True, ['dapo', 'dr_grpo', 'grpo'])
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
import numpy.typing as npt

from grpo_identity.analysis.realdata import gradient_weights, is_extreme, mass_share
from grpo_identity.analysis.solve_rates import resolve
from grpo_identity.analysis.stats import r_squared
from grpo_identity.closed_forms import silent_rate
from grpo_identity.trainer.config import BernoulliConfig

__all__ = ["BernoulliConfig", "ARMS", "HARD_QUANTILE", "MASS_BIN_EDGES", "initial_solve_rates", "run_bernoulli", "plot_bernoulli"]

#: the three arms, by dial preset name
ARMS = ("grpo", "dr_grpo", "dapo")
#: the hardest initial quartile: prompts with initial p at or below this quantile
HARD_QUANTILE = 0.25
#: bin edges of the solve rate for the gradient-mass panel: 16 bins of four k/64 values each,
#: edges between grid points so that rounding never moves a k/64 value across an edge
MASS_BIN_EDGES = tuple([0.0] + [(4 * j - 0.5) / 64 for j in range(1, 16)] + [1.0])
MASS_BINS = len(MASS_BIN_EDGES) - 1

FloatArray = npt.NDArray[np.float64]


def initial_solve_rates(config: BernoulliConfig) -> tuple[FloatArray, str]:
    """The M initial solve rates (interior values of the source, clipped) and the source's name."""
    source = resolve(config.solve_rates).interior()
    rng = np.random.default_rng(config.seed)
    p0 = np.clip(source.sample(config.num_prompts, rng), config.clip_low, config.clip_high)
    return p0, source.source


class _Measurements:
    """What one arm measures while it trains (kept apart from the training state): per-step
    curves, the identity's largest error, sample counts and the gradient mass by difficulty."""

    def __init__(self, arm: str, p0: FloatArray, config: BernoulliConfig) -> None:
        self.arm, self.G, self.steps = arm, config.group_size, config.steps
        self.hard = np.argsort(p0, kind="stable")[: max(1, int(round(HARD_QUANTILE * config.num_prompts)))]
        self.curves: dict[str, list[float]] = {k: [] for k in ("silent_measured", "silent_predicted", "mean_p", "hard_mean_p", "samples")}
        self.max_err = 0.0
        self.samples = 0
        self.silent_after = 0.0
        self.grad_mass = {"all": 0.0, "extreme": 0.0}
        self.expected_mass = {form: {"all": 0.0, "extreme": 0.0} for form in ("finite_g", "large_g")}
        self.first_step_share = 0.0
        self.mass_by_bin: FloatArray = np.zeros(MASS_BINS)  # first step only
        self.expected_by_bin: dict[str, FloatArray] = {"finite_g": np.zeros(MASS_BINS), "large_g": np.zeros(MASS_BINS)}

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

    def gradient(self, step: int, p_np: FloatArray, grad: FloatArray) -> None:
        """Gradient mass |∂L/∂θ| on extreme prompts, and its closed forms; by bin at step 0."""
        mag = np.abs(grad)
        ext = is_extreme(p_np)
        self.grad_mass["all"] += float(mag.sum())
        self.grad_mass["extreme"] += float(mag[ext].sum())
        which = np.clip(np.digitize(p_np, np.asarray(MASS_BIN_EDGES)) - 1, 0, MASS_BINS - 1)
        if step == 0:
            self.first_step_share = mass_share(mag, ext)
            self.mass_by_bin = np.bincount(which, weights=mag, minlength=MASS_BINS).astype(np.float64)
        if self.arm == "dapo":
            return
        for form, gs in (("finite_g", self.G), ("large_g", None)):
            w = gradient_weights(p_np, gs)[self.arm]
            self.expected_mass[form]["all"] += float(w.sum())
            self.expected_mass[form]["extreme"] += float(w[ext].sum())
            if step == 0:
                self.expected_by_bin[form] = np.bincount(which, weights=w, minlength=MASS_BINS).astype(np.float64)

    def result(self, p_final: FloatArray) -> dict[str, Any]:
        """The arm's measurements, JSON-ready."""
        def share(v: FloatArray) -> list[float]:
            return (v / v.sum()).tolist() if v.sum() > 0 else v.tolist()

        gm = self.grad_mass
        out: dict[str, Any] = {
            "identity_max_abs_err": self.max_err,
            "curves": self.curves,
            "hard_final": float(p_final[self.hard].mean()),
            "final_mean_p": float(p_final.mean()),
            "samples": self.samples,
            "silent_after_draws": self.silent_after / self.steps,
            "mass_by_bin": share(self.mass_by_bin),
            "extreme_share_measured": gm["extreme"] / gm["all"] if gm["all"] > 0 else 0.0,
            "extreme_share_first_step": self.first_step_share,
        }
        if self.arm != "dapo":
            out["extreme_share_expected"] = {f: v["extreme"] / v["all"] if v["all"] > 0 else 0.0 for f, v in self.expected_mass.items()}
            out["expected_by_bin"] = {f: share(v) for f, v in self.expected_by_bin.items()}
        return out


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
    for step in range(config.steps):
        p = torch.sigmoid(theta)  # (M,)
        p_np = p.detach().numpy().copy()
        meas.start_step(p_np)
        y, silent_first, samples, silent_after = _draw_groups(p, draws, G, gen)
        meas.draws(silent_first, samples, silent_after)
        grad = _policy_gradient(theta, y, dial, G)
        meas.identity(_identity_error(grad, y, p, G, dial))
        meas.gradient(step, p_np, grad)
        opt.step()
        if bar is not None:
            bar.update(1)
    return meas.result(torch.sigmoid(theta).detach().numpy())


def _round(x: Any, digits: int = 6) -> Any:
    if isinstance(x, float):
        return float(f"{x:.{digits}g}")
    if isinstance(x, dict):
        return {k: _round(v, digits) for k, v in x.items()}
    if isinstance(x, list):
        return [_round(v, digits) for v in x]
    return x


def run_bernoulli(config: BernoulliConfig | None = None, progress: bool = False) -> dict[str, Any]:
    """Run the three arms (GRPO, Dr. GRPO, DAPO) of the controlled run and measure them.

    Returns a JSON-ready dict: ``identity_max_abs_err``, ``r2_silent`` (measured silent fraction
    of the first draw against E[p^G + (1−p)^G] at the current p, pooled over the steps of the
    three arms; per arm in ``r2_silent_by_arm``), ``extreme_share`` ({"grpo", "dr_grpo"} →
    {"measured", "finite_g", "large_g"}: share of gradient mass on prompts with p < 0.1 or > 0.9
    at the initial solve rates, as the paper reports it: measured = |autograd gradient| of the
    first step, finite_g = E[g] / E[σ²], large_g = √(p(1−p)) / p(1−p)), ``extreme_share_run``
    (the same summed over every step of the run, closed forms over the same (step, prompt) solve
    rates), ``hard_final`` (final
    mean solve rate of the hardest initial quartile, per arm), ``dapo_oversample`` (DAPO's
    samples / GRPO's), ``seconds``, ``solve_rate_source``, ``config`` and the per-step
    ``curves`` and ``mass_by_p`` (share of gradient mass per solve-rate bin at the first step)
    used by :func:`plot_bernoulli`.
    """
    import torch

    config = config or BernoulliConfig()
    start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        p0, source = initial_solve_rates(config)
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=len(ARMS) * config.steps, desc="train bernoulli", unit="step", leave=False)
        try:
            arms = {arm: _run_arm(arm, p0, config, bar) for arm in ARMS}
        finally:
            if bar is not None:
                bar.close()
    finally:
        torch.set_num_threads(threads)

    measured = np.concatenate([arms[a]["curves"]["silent_measured"] for a in ARMS])
    predicted = np.concatenate([arms[a]["curves"]["silent_predicted"] for a in ARMS])
    ext0 = is_extreme(p0)
    initial = {
        arm: {
            "measured": arms[arm]["extreme_share_first_step"],
            "finite_g": mass_share(gradient_weights(p0, config.group_size)[arm], ext0),
            "large_g": mass_share(gradient_weights(p0)[arm], ext0),
        }
        for arm in ("grpo", "dr_grpo")
    }
    result: dict[str, Any] = {
        "identity_max_abs_err": max(arms[a]["identity_max_abs_err"] for a in ARMS),
        "identity_max_abs_err_by_arm": {a: arms[a]["identity_max_abs_err"] for a in ARMS},
        "r2_silent": r_squared(measured, predicted),
        "r2_silent_by_arm": {a: r_squared(arms[a]["curves"]["silent_measured"], arms[a]["curves"]["silent_predicted"]) for a in ARMS},
        "extreme_share": initial,
        "extreme_share_run": {
            a: {"measured": arms[a]["extreme_share_measured"], **arms[a]["extreme_share_expected"]} for a in ("grpo", "dr_grpo")
        },
        "hard_final": {a: arms[a]["hard_final"] for a in ARMS},
        "hard_initial": float(np.sort(p0)[: max(1, int(round(HARD_QUANTILE * config.num_prompts)))].mean()),
        "final_mean_solve_rate": {a: arms[a]["final_mean_p"] for a in ARMS},
        "dapo_oversample": arms["dapo"]["samples"] / arms["grpo"]["samples"],
        "dapo_silent_after_draws": arms["dapo"]["silent_after_draws"],
        "solve_rate_source": source,
        "config": dataclasses.asdict(config),
        "curves": {a: arms[a]["curves"] for a in ARMS},
        "mass_by_p": {
            "bin_edges": list(MASS_BIN_EDGES),
            **{a: {"measured": arms[a]["mass_by_bin"], **arms[a]["expected_by_bin"]} for a in ("grpo", "dr_grpo")},
        },
    }
    result["seconds"] = time.perf_counter() - start
    return _round(result)


_LABELS = {"grpo": "GRPO", "dr_grpo": "Dr. GRPO", "dapo": "DAPO"}


def plot_bernoulli(result: dict[str, Any], path: str) -> None:
    """The paper's three panels: (a) measured silent fraction against E[p^G + (1−p)^G] over
    training; (b) share of gradient mass by initial solve rate, GRPO against Dr. GRPO (measured
    first-step bars, finite-G and large-G closed-form lines); (c) mean solve rate of the hardest
    initial quartile over training, per arm.  Writes a PNG."""
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
    a.set_title(f"(a) silent groups vs E[p^G+(1-p)^G], R² = {result['r2_silent']:.4f}", fontsize=9)
    a.legend(fontsize=7)

    edges = np.asarray(result["mass_by_p"]["bin_edges"])
    centres = 0.5 * (edges[1:] + edges[:-1])
    width = np.diff(edges)
    for i, arm in enumerate(("dr_grpo", "grpo")):
        mb = result["mass_by_p"][arm]
        bars = b.bar(centres + (i - 0.5) * width * 0.45, mb["measured"], width * 0.45, alpha=0.6, label=f"{_LABELS[arm]} measured")
        colour = bars.patches[0].get_facecolor()[:3]
        b.plot(centres, mb["finite_g"], "-", color=colour, lw=1.2, label=f"{_LABELS[arm]} finite-G form")
        b.plot(centres, mb["large_g"], ":", color=colour, lw=1.2, label=f"{_LABELS[arm]} large-G form")
    es = result["extreme_share"]
    b.set_title(f"(b) gradient mass at the start; extreme: GRPO {100 * es['grpo']['measured']:.1f} %, Dr. GRPO {100 * es['dr_grpo']['measured']:.1f} %", fontsize=9)
    b.set_xlabel("initial solve rate p")
    b.set_ylabel("share of |gradient|, first step")
    b.legend(fontsize=7)

    for arm in ARMS:
        cv = result["curves"][arm]
        c.plot(np.arange(len(cv["hard_mean_p"])), cv["hard_mean_p"], label=f"{_LABELS[arm]} (final {result['hard_final'][arm]:.2f})")
    c.set_xlabel("step")
    c.set_ylabel("mean p, hardest initial quartile")
    c.set_title(f"(c) hardest quartile; DAPO uses {result['dapo_oversample']:.2f}× the samples", fontsize=9)
    c.legend(fontsize=7)
    fig.suptitle(f"Bernoulli-logit run: M={cfg['num_prompts']}, G={cfg['group_size']}, lr={cfg['lr']}, {cfg['steps']} steps; {result['solve_rate_source']}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
