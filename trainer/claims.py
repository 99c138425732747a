"""The trainer's claims for the main job (:mod:`grpo_identity.claims`): the controlled Bernoulli-logit run
(rerun here, each number within the tolerance its stored seed-to-seed spread sets), and the stored LM runs and
fixed-policy runs under ``results/`` (read, not rerun).  torch is imported only where there are runs to read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterator

from grpo_identity import paper
from grpo_identity.claims import STORED_RESULTS, TRAINER_EXTRA, Item, checked, not_stored, running, skipped

__all__ = [
    "SEED_SPREAD",
    "IDENTITY_ABS_TOL",
    "controlled_run",
    "controlled_run_count",
    "stored_lm",
    "stored_lm_count",
    "stored_conditional",
    "conditional_count",
]

#: the controlled run's stored seed-to-seed spread (python -m grpo_identity.trainer.bernoulli_seeds)
SEED_SPREAD = STORED_RESULTS / "bernoulli_seeds" / "spread.json"
#: the Bernoulli run is float64: the autograd gradient equals σ(k)·(s̄₊ − s̄₋) to rounding
IDENTITY_ABS_TOL = 1e-10
#: how each controlled-run number is printed in the report
_RUN_FORMAT: dict[str, Callable[[float], str]] = {
    "r2_silent": lambda x: f"{x:.4f}",
    "extreme_share": lambda x: f"{100 * x:.2f} %",
    "hard_final": lambda x: f"{x:.3f}",
    "dapo_oversample": lambda x: f"{x:.3f}×",
}
_RUN_PAPER_FORMAT: dict[str, Callable[[float], str]] = {
    "r2_silent": lambda x: f"{x:.3f}",
    "extreme_share": lambda x: f"{100 * x:.1f} %",
    "hard_final": lambda x: f"{x:.2f}",
    "dapo_oversample": lambda x: f"{x:.1f}×",
}
_RUN_NAMES = {
    "r2_silent": "R² of the GRPO arm's silent fraction vs E[p^G + (1−p)^G]",
    "extreme_share.grpo": "extreme-prompt gradient share at p0, GRPO",
    "extreme_share.dr_grpo": "extreme-prompt gradient share at p0, Dr. GRPO",
    "hard_final.grpo": "hardest quartile final solve rate, GRPO",
    "hard_final.dr_grpo": "hardest quartile final solve rate, Dr. GRPO",
    "dapo_oversample": "DAPO samples per GRPO sample",
}


def _paper_value(name: str) -> float:
    v: Any = paper.CONTROLLED_RUN
    for key in name.split("."):
        v = v[key]
    return float(v)


def _load_spread(path: Path, config: Any) -> tuple[dict[str, Any] | None, str]:
    """The stored seed spread if it was measured with ``config``'s settings (seed aside)."""
    import dataclasses

    if not path.is_file():
        if path.parent.parent.is_dir():  # a checkout's results/: the command that stores it there
            where = f"{path.parent.parent.name}/{path.parent.name}"
            return None, f"no stored seed spread: python -m grpo_identity.trainer.bernoulli_seeds --out {where}"
        return None, (
            "the seed spread that sets the tolerance ships with the source checkout "
            f"({path.parent.parent.name}/{path.parent.name}), not the pip package: clone the repository and run "
            f"verify there (a spread of your own: pip install '{TRAINER_EXTRA}', then "
            "python -m grpo_identity.trainer.bernoulli_seeds --out DIR)"
        )
    spread = json.loads(path.read_text())
    want = {k: v for k, v in dataclasses.asdict(config).items() if k != "seed"}
    if spread.get("config") != want:
        return None, f"the stored seed spread ({path.parent.name}) was measured with other settings or solve rates"
    return spread, ""


def _run_item(name: str, value: float, spread: dict[str, Any] | None, why: str) -> Item:
    from grpo_identity.trainer.bernoulli_seeds import tolerance

    top = name.split(".")[0]
    want = _paper_value(name)
    label, shown = _RUN_NAMES[name], _RUN_FORMAT[top](value)
    if spread is None:
        return Item("controlled run", label, _RUN_PAPER_FORMAT[top](want), shown, "skipped", why)
    sd, n = float(spread["sd"][name]), len(spread["seeds"])
    tol = tolerance(sd, paper.PRINTED_DECIMALS[top])
    scale = 100.0 if top == "extreme_share" else 1.0
    note = (
        f"tolerance ±{scale * tol:.2g}{' pt' if scale != 1 else ''} = 3·√2·s + half the paper's last digit; "
        f"s = {scale * sd:.2g} over {n} seeds (mean {_RUN_FORMAT[top](spread['mean'][name])})"
    )
    return checked(
        "controlled run",
        label,
        _RUN_PAPER_FORMAT[top](want),
        f"{shown} (±{scale * tol:.2g}{' pt' if scale != 1 else ''})",
        abs(value - want) <= tol,
        note,
    )


def controlled_run(solve_rates: str | None = None, spread_path: Path | None = None) -> Iterator[Item]:
    """The controlled run on ``solve_rates`` (None: the shipped Big-Math), each number against the paper's."""
    from grpo_identity.analysis.solve_rates import BIG_MATH
    from grpo_identity.trainer.bernoulli import BernoulliConfig, run_bernoulli
    from grpo_identity.trainer.bernoulli_seeds import quantities

    config = BernoulliConfig(solve_rates=None if solve_rates == BIG_MATH else solve_rates)  # None: the shipped Big-Math
    running("training the three arms")
    r = run_bernoulli(config)
    ext, hard = r["extreme_share"], r["hard_final"]
    yield checked(
        "controlled run",
        "autograd gradient equals the identity's σ (max abs error)",
        "exact",
        f"{r['identity_max_abs_err']:.2g}",
        r["identity_max_abs_err"] <= IDENTITY_ABS_TOL,
        f"solve rates: {r['solve_rate_source']}",
    )
    spread, why = _load_spread(SEED_SPREAD if spread_path is None else spread_path, config)
    for name, value in quantities(r).items():
        yield _run_item(name, value, spread, why)
    ref = paper.CONTROLLED_RUN
    yield checked(
        "controlled run",
        "extreme share at p0, GRPO > Dr. GRPO",
        f"{ref['extreme_share']['grpo']:.1%} > {ref['extreme_share']['dr_grpo']:.1%}",
        f"{ext['grpo']['measured']:.1%} > {ext['dr_grpo']['measured']:.1%}",
        ext["grpo"]["measured"] > ext["dr_grpo"]["measured"],
    )
    yield checked(
        "controlled run",
        "measured extreme share equals the finite-G form (±1 pt)",
        "finite-G forms",
        f"{ext['grpo']['measured']:.3f} vs {ext['grpo']['finite_g']:.3f}; "
        f"{ext['dr_grpo']['measured']:.3f} vs {ext['dr_grpo']['finite_g']:.3f}",
        all(abs(ext[a]["measured"] - ext[a]["finite_g"]) <= 0.01 for a in ("grpo", "dr_grpo")),
        "GRPO; Dr. GRPO: measured vs E[g] / p(1−p)(1−1/G)",
    )
    yield checked(
        "controlled run",
        "hardest quartile: GRPO > Dr. GRPO, DAPO fastest",
        f"{ref['hard_final']['grpo']} > {ref['hard_final']['dr_grpo']}, DAPO fastest",
        f"{hard['grpo']:.3f} > {hard['dr_grpo']:.3f}; DAPO {hard['dapo']:.3f}",
        hard["dapo"] >= hard["grpo"] > hard["dr_grpo"],
    )


def controlled_run_count() -> int:
    """How many items :func:`controlled_run` yields."""
    from grpo_identity.trainer.bernoulli_seeds import QUANTITIES

    return 1 + len(QUANTITIES) + 3


def stored_lm(results: Path = STORED_RESULTS) -> Iterator[Item]:
    """One item per stored language-model run ``results/lm-*/summary.json`` (read, not re-run)."""
    runs = sorted(
        p.parent for p in results.glob("lm-*/summary.json") if not p.parent.name.startswith("lm-conditional-")
    )  # those: stored_conditional
    if not runs:
        name = "LM trainer: identity g = c(k,G)(s̄₊ − s̄₋) in a transformer"
        why = not_stored("stored LM runs", "lm-*", results, "grpo-identity train lm")
        yield skipped("LM trainer", name, "beyond the paper", why)
        return
    from grpo_identity.trainer.lm.identity import REL_TOL  # torch: only where there are runs to read

    for run in runs:
        s = json.loads((run / "summary.json").read_text())
        err = s.get("identity_max_rel_err")
        project = (
            f"max rel err {err:.2g} over {s.get('groups_checked')} groups"
            if err is not None
            else "no identity_max_rel_err"
        )
        yield checked(
            "LM trainer",
            f"LM trainer {run.name}: identity g = c(k,G)(s̄₊ − s̄₋) in a transformer",
            f"beyond the paper (fp32 goal ≤ {REL_TOL:.0e})",
            project,
            err is not None and err <= REL_TOL,
            f"read from results/{run.name}, not re-run",
        )


def _interval_text(d: dict[str, Any]) -> str:
    iv = d.get("interval")
    return ("n/a" if d.get("value") is None else f"{d['value']:.2f}") + (
        f" [{iv[0]:.2f}, {iv[1]:.2f}]" if iv else " (no interval)"
    )


def _conditional_items(name: str, c: dict[str, Any], note: str) -> Iterator[Item]:
    """The checks of one stored fixed-policy run (the conditional-expectation theorems G7-G8)."""
    from grpo_identity.trainer.lm.conditional_summary import goal_errors
    from grpo_identity.trainer.lm.identity import REL_TOL

    sec = "LM conditional"
    for mode, sl in c["slope_by_mode"].items():
        e = sl["predicted"]
        for label, d in (("pooled", sl), ("weighted", sl["weighted"])):
            iv, v = d.get("interval"), d.get("value")
            what = f"{name} {mode}: slope ‖E[g|k]‖ vs σ_k, {label}, 95 % interval holds {e}"
            if (
                iv is not None and v is not None and not iv[0] <= v <= iv[1]
            ):  # a bootstrap interval that misses its own estimate decides nothing
                yield Item(
                    sec,
                    what,
                    f"{e} (c ∝ σ^{e})",
                    _interval_text(d),
                    "skipped",
                    note + "; the estimate lies outside its own bootstrap interval: unreliable, not counted",
                )
                continue
            yield checked(
                sec, what, f"{e} (c ∝ σ^{e})", _interval_text(d), iv is not None and iv[0] <= e <= iv[1], note
            )
    for mode, cs in c["cosine_min"]["by_mode"].items():
        med = cs["median"]
        yield checked(
            sec,
            f"{name} {mode}: cosine of E[g|k], E[g|k'] (median of {cs['pairs']} pairs)",
            "1",
            f"median {med:.3f}, min {cs['value']:.2f}",
            med is not None and abs(med - 1) <= 0.05,
            note + "; pass: within 0.05 of 1",
        )
    gp = c["grad_p_rel_err"]
    yield checked(
        sec,
        f"{name} {gp.get('mode')}: E[g|k]/c against ∇p/(p(1−p)), relative difference",
        "0",
        "n/a" if gp["value"] is None else f"{gp['value']:.3f} (max {gp['max']:.3f})",
        gp["value"] is not None and gp["value"] <= 0.10,
        note + "; median over prompts, split halves; pass: at most 0.10",
    )
    for mode, ns in c["noise_slope_by_mode"].items():
        r = ns["measured_over_predicted_median"]
        yield checked(
            sec,
            f"{name} {mode}: tr Cov(g|k) / c²(tr Σ₊/k + tr Σ₋/(G−k))",
            "1",
            f"{r:.2f} (median over cells)",
            r is not None and 0.8 <= r <= 1.25,
            note + "; pass: in [0.8, 1.25]",
        )
    yield from _preregistered_items(name, c.get("preregistered"), note)
    pc = c["projected_check"]
    goal = goal_errors(pc)
    yield checked(
        sec,
        f"{name}: identity along {pc['directions']} random directions and exact",
        f"beyond the paper (≤ {REL_TOL:.0e})",
        f"projected {_sci(goal['projected'])} ({pc['groups_projected']} groups), "
        f"exact {_sci(goal['exact'])} ({pc['groups_exact']})",
        all(x is not None and x <= REL_TOL for x in goal.values()) and pc["silent_groups_with_nonzero_grad"] == 0,
        note + "; projected: ‖Ve‖/(√K‖g‖), largest over the groups",
    )


def _sci(x: float | None) -> str:
    """``x`` as 1.2e-05, or n/a when nothing was measured."""
    return "n/a" if x is None else f"{x:.1e}"


#: a pre-registered criterion's verdict -> the item's status ("not testable" counts as neither)
_PREREGISTERED_STATUS = {"met": "pass", "not met": "fail", "not testable": "skipped"}


def _preregistered_items(name: str, p: dict[str, Any] | None, note: str) -> Iterator[Item]:
    """One item per pre-registered criterion of a run that has them (``conditional.preregistered``)."""
    if p is None:  # a run made before the analysis was pre-registered
        return
    from grpo_identity.trainer.lm.preregistered import observed_text

    fixed = f"analysis commit {p['commit'][:12]}" if p.get("commit") else "no analysis commit recorded"
    for crit, d in p["criteria_detail"].items():
        why = f"; {d['reason']}" if d["reason"] else ""
        yield Item(
            "LM conditional",
            f"{name} pre-registered {crit}: {d['rule']}",
            "beyond the paper (G7–G8)",
            f"{d['status']}: {observed_text(d['observed'])}",
            _PREREGISTERED_STATUS[d["status"]],
            f"{note}; {fixed}{why}",
        )


def _conditional_runs(results: Path) -> list[Path]:
    """The stored fixed-policy runs: ``results/lm-conditional-*/summary.json`` and the seeds of a
    replication, ``results/lm-conditional-*/seed-*/summary.json``."""
    found = [*results.glob("lm-conditional-*/summary.json"), *results.glob("lm-conditional-*/seed-*/summary.json")]
    return sorted(p.parent for p in found)


def _replication_items(results: Path) -> Iterator[Item]:
    """Per replication folder (``lm-conditional-*/seed-*``), each pre-registered criterion: met in how
    many of its seeds.  The rule, fixed before the seeds ran: a criterion replicates when it is met in
    every seed; one seed that does not meet it is a fail, and a seed where it is not testable counts as
    not met."""
    for folder in sorted({p.parent for p in results.glob("lm-conditional-*/seed-*")}):
        seeds = sorted(folder.glob("seed-*/summary.json"))
        runs = [json.loads(p.read_text())["conditional"].get("preregistered") or {} for p in seeds]
        names = sorted({crit for r in runs for crit in r.get("criteria", {})})
        for crit in names:
            met = sum(r.get("criteria", {}).get(crit) == "met" for r in runs)
            yield checked(
                "LM conditional",
                f"{folder.name}: pre-registered {crit} replicated over {len(runs)} seeds",
                "met in every seed",
                f"met in {met} of {len(runs)} seeds",
                met == len(runs),
                f"read from results/{folder.name}/seed-*, not re-run; pass: met in every seed",
            )


def stored_conditional(results: Path = STORED_RESULTS) -> Iterator[Item]:
    """The stored fixed-policy runs (:func:`_conditional_runs`; read, not re-run), then each
    replication's criteria over its seeds."""
    runs = _conditional_runs(results)
    if not runs:
        yield skipped(
            "LM conditional",
            "E[g | k] = c(k, G)·∇p/(p(1−p)) at a fixed policy",
            "beyond the paper (G7–G8)",
            not_stored(
                "stored fixed-policy runs",
                "lm-conditional-*",
                results,
                "grpo-identity train lm --experiment conditional --config cpu-smoke",
            ),
        )
        return
    for run in runs:
        c = json.loads((run / "summary.json").read_text())["conditional"]
        name = run.relative_to(results).as_posix()
        yield from _conditional_items(name, c, f"read from results/{name}, not re-run")
    yield from _replication_items(results)


def conditional_count(results: Path = STORED_RESULTS) -> int:
    return max(1, 14 * len(_conditional_runs(results)))


def stored_lm_count(results: Path = STORED_RESULTS) -> int:
    """How many items :func:`stored_lm` yields, about."""
    return max(1, len(list(results.glob("lm-*/summary.json"))))
