"""The main job: prove, check, reproduce and render everything, then write one report.

:func:`verify` proves every theorem, audits the built-in presets (and TRL and verl where
installed), recomputes the paper's closed-form numbers and its 14 Big-Math numbers (from the
shipped histogram, or ``--solve-rates``), runs the controlled Bernoulli-logit run on those solve
rates, fits DAPO's curve (shipped, or ``--dapo-curve``), compares the versions each stored run
under ``results/`` recorded with the running ones, reads the stored LM runs (the fixed-policy
runs' pre-registered criteria too, where recorded) and renders the notebooks.  Each comparison
is an :class:`Item` (claim, paper value, project value, status); the report is written as
``report.json`` and ``report.html``.

How an item passes:

* a number the paper prints: the project's value rounded to the paper's printed decimals
  (``paper.PRINTED_DECIMALS``) equals the printed value (Big-Math, closed forms);
* a number of the controlled run: within the tolerance its own seed-to-seed spread sets
  (:func:`grpo_identity.trainer.bernoulli_seeds.tolerance`, spread read from
  ``results/bernoulli_seeds/spread.json``).

Status ``pass`` / ``fail``, or ``skipped`` where an input is missing (a framework or an optional
package not installed, no stored seed spread for these settings): skipped items say why (and
which extra to install) and do not make the run fail.
"""

from __future__ import annotations

import html
import importlib.util
import json
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from grpo_identity import data, paper
from grpo_identity.checks.frameworks.registry import FRAMEWORK_TABLE
from grpo_identity.foundation import EXTRAS, error_text, missing_extra, write_text_atomic

__all__ = [
    "Item",
    "Stage",
    "verify",
    "write_report",
    "format_summary",
    "counts_line",
    "DEFAULT_DAPO_CURVE",
    "SEED_SPREAD",
    "TABLE_WIDTH",
]

ROOT = Path(__file__).resolve().parents[2]
#: the digitised DAPO Fig. 3b curve shipped with the package
DEFAULT_DAPO_CURVE = data.path(data.DAPO_CURVE)
STORED_RESULTS = ROOT / "results"
#: the controlled run's stored seed-to-seed spread (python -m grpo_identity.trainer.bernoulli_seeds)
SEED_SPREAD = STORED_RESULTS / "bernoulli_seeds" / "spread.json"
#: the terminal summary fits this many columns
TABLE_WIDTH = 120


@dataclass
class Item:
    """One line of the report: a claim, the paper's value, the project's value, a status."""

    section: str
    name: str
    paper: Any
    project: Any
    status: str  # "pass" | "fail" | "skipped"
    note: str = ""

    @property
    def ok(self) -> bool | None:
        return None if self.status == "skipped" else self.status == "pass"

    def to_dict(self) -> dict[str, Any]:
        return {
            "section": self.section,
            "name": self.name,
            "paper": self.paper,
            "project": self.project,
            "ok": self.ok,
            "status": self.status,
            "note": self.note,
        }


def _item(section: str, name: str, paper_value: Any, project: Any, ok: bool, note: str = "") -> Item:
    return Item(section, name, paper_value, project, "pass" if ok else "fail", note)


def _skip(section: str, name: str, paper_value: Any, why: str) -> Item:
    return Item(section, name, paper_value, None, "skipped", why)


#: what a run of one's own needs installed
_TRAINER_EXTRA = f"grpo-identity[{EXTRAS['torch']}]"


def _not_stored(what: str, where: str, results: Path, command: str) -> str:
    """Why an item that reads a stored run has none.  In a checkout (``results/`` exists): the
    command that stores one there.  From a pip install there is no ``results/`` (the stored runs
    ship with the source checkout), and nothing may be written into the installed package: say
    so, and how a run of one's own is made."""
    if results.is_dir():
        return f"no {what} under {results.name}/{where}: {command} --out {results.name}/NAME stores one"
    return (
        f"the {what} ship with the source checkout, not the pip package: clone the repository and run verify "
        f"there (a run of your own: pip install '{_TRAINER_EXTRA}', then {command} --out DIR)"
    )


#: the hooks of the progress bar that runs now (set by :func:`_run_stages` while it runs)
_NOW: list[Callable[[str], None]] = []


def _running(name: str) -> None:
    """Tell the progress bar, if one runs, which item a stage starts now (before a slow one)."""
    for hook in _NOW:
        hook(name)


# --- the stages -------------------------------------------------------------------------------
def _proofs() -> Iterator[Item]:
    from grpo_identity.proofs import THEOREMS

    for t in THEOREMS:
        _running(f"{t.name} {t.title}")
        r = t.prove()
        note = "" if r.status == "proved" else f"residual: {r.residual}"
        yield _item(
            "proofs",
            f"{t.name} {t.title}",
            f"{t.paper_ref}",
            f"{r.status} in {r.seconds:.2f} s",
            r.status == "proved",
            note,
        )


def _closed_forms() -> Iterator[Item]:
    from grpo_identity import closed_forms as C

    for row in C.group_size_table():
        exact, law = paper.GROUP_SIZE_TABLE[row["p"]][C.PAPER_TABLE_EPS.index(row["eps"])]
        name = f"group size p={row['p']}, fidelity {1 - row['eps']:.0%}"
        project = f"{row['G_exact']} ({round(row['G_law'])})"
        yield _item(
            "closed forms", name, f"{exact} ({law})", project, row["G_exact"] == exact and round(row["G_law"]) == law
        )
    for (G, p), value in paper.FIDELITY.items():
        v = round(float(C.fidelity(G, p)), 4)
        yield _item("closed forms", f"fidelity φ(G={G}, p={p})", f"{value:.4f}", f"{v:.4f}", v == value)
    for (G, p), value in paper.ATTENUATION_FIRST_ORDER.items():
        v = round(float(C.attenuation_first_order(G, p)), 2)
        yield _item("closed forms", f"first-order law at G={G}, p={p}", value, v, v == value)
    for p, value in paper.DIFFICULTY_WEIGHT.items():
        v = round(float(C.difficulty_weight(p)), 1)
        yield _item("closed forms", f"difficulty weight w({p})", value, v, v == value)
    for p, value in paper.DIFFICULTY_PENALTY.items():
        v = round(float(C.difficulty_weight(p)) ** 2 / 4, 1)
        yield _item("closed forms", f"difficulty penalty 1/(4p(1−p)) at p={p}", value, v, v == value)


_PRESET_AUDITS = (
    ("grpo", "grpo", "advantage"),
    ("dr_grpo", "dr_grpo", "advantage"),
    ("rloo", "rloo", "advantage"),
    ("dapo", "dapo", "filter"),
)
#: the paper audits no framework: what the report's paper column says for TRL and verl
_FRAMEWORK_PAPER = "beyond the paper"
#: (package, target, expected preset): each registry row's ``verify`` audits
_FRAMEWORK_AUDITS = tuple((e.name, t, x) for e in FRAMEWORK_TABLE.values() for t, x in e.verify)


def _audits(frameworks: bool, max_examples: int) -> Iterator[Item]:
    from grpo_identity.checks import audit

    for target, expect, kind in _PRESET_AUDITS:
        _running(f"audit preset {target}")
        rep = audit(target, kind=kind, expect=expect, max_examples=max_examples)
        yield _item(
            "audits",
            f"audit preset {target} ({kind})",
            "identity holds (Theorem 1): pass",
            f"{rep.verdict} (matches {rep.matches})",
            rep.verdict == "pass",
        )
    for package, target, expect in _FRAMEWORK_AUDITS:
        name = f"audit {target} against {expect} (expected: GRPO up to Bessel's ddof 1 and ε)"
        if not frameworks:
            yield _skip("audits", name, _FRAMEWORK_PAPER, "frameworks not requested")
            continue
        if importlib.util.find_spec(package) is None:
            why = f"{package} is not installed: pip install 'grpo-identity[{EXTRAS[package]}]'"
            yield _skip("audits", name, _FRAMEWORK_PAPER, why)
            continue
        _running(f"audit {target}")
        try:
            rep = audit(target, kind="advantage", expect=expect, max_examples=max_examples)
        except Exception as exc:  # this framework's audit broke: say all of why, and audit the others
            yield _item("audits", name, _FRAMEWORK_PAPER, error_text(exc), False, f"{package} {_version(package)}")
            continue
        inf = rep.inferred.to_dict() if hasattr(rep.inferred, "to_dict") else dict(rep.inferred)
        project = (
            f"{rep.verdict}: centre {inf.get('centre')}, {inf.get('scale')}, ddof {inf.get('ddof')}, "
            f"ε ≈ {inf.get('eps', 0):.2g}"
        )
        silent = inf.get("silent_nonbinary_max_abs")
        note = f"{package} {_version(package)}" + (
            f"; silent groups of 0.1 rewards in fp32: max |Â| = {silent:.2g}" if silent is not None else ""
        )
        yield _item("audits", name, _FRAMEWORK_PAPER, project, rep.verdict in ("pass", "deviation"), note)


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "?"


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
            f"verify there (a spread of your own: pip install '{_TRAINER_EXTRA}', then "
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
    return _item(
        "controlled run",
        label,
        _RUN_PAPER_FORMAT[top](want),
        f"{shown} (±{scale * tol:.2g}{' pt' if scale != 1 else ''})",
        abs(value - want) <= tol,
        note,
    )


def _bernoulli(solve_rates: str | None = None, spread_path: Path | None = None) -> Iterator[Item]:
    from grpo_identity.analysis.solve_rates import BIG_MATH
    from grpo_identity.trainer.bernoulli import BernoulliConfig, run_bernoulli
    from grpo_identity.trainer.bernoulli_seeds import quantities

    config = BernoulliConfig(solve_rates=None if solve_rates == BIG_MATH else solve_rates)  # None: the shipped Big-Math
    _running("training the three arms")
    r = run_bernoulli(config)
    ext, hard = r["extreme_share"], r["hard_final"]
    yield _item(
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
    yield _item(
        "controlled run",
        "extreme share at p0, GRPO > Dr. GRPO",
        f"{ref['extreme_share']['grpo']:.1%} > {ref['extreme_share']['dr_grpo']:.1%}",
        f"{ext['grpo']['measured']:.1%} > {ext['dr_grpo']['measured']:.1%}",
        ext["grpo"]["measured"] > ext["dr_grpo"]["measured"],
    )
    yield _item(
        "controlled run",
        "measured extreme share equals the finite-G form (±1 pt)",
        "finite-G forms",
        f"{ext['grpo']['measured']:.3f} vs {ext['grpo']['finite_g']:.3f}; "
        f"{ext['dr_grpo']['measured']:.3f} vs {ext['dr_grpo']['finite_g']:.3f}",
        all(abs(ext[a]["measured"] - ext[a]["finite_g"]) <= 0.01 for a in ("grpo", "dr_grpo")),
        "GRPO; Dr. GRPO: measured vs E[g] / p(1−p)(1−1/G)",
    )
    yield _item(
        "controlled run",
        "hardest quartile: GRPO > Dr. GRPO, DAPO fastest",
        f"{ref['hard_final']['grpo']} > {ref['hard_final']['dr_grpo']}, DAPO fastest",
        f"{hard['grpo']:.3f} > {hard['dr_grpo']:.3f}; DAPO {hard['dapo']:.3f}",
        hard["dapo"] >= hard["grpo"] > hard["dr_grpo"],
    )


def _dapo_fit(curve: Path | None, solve_rates: str | None) -> Iterator[Item]:
    ref = paper.DAPO_FIT
    if curve is None:
        yield _skip(
            "DAPO", "fit of Fig. 3b with E_p[p^32] (one timescale)", ref["competence_r2"], "no DAPO curve given"
        )
        return
    from grpo_identity.analysis.dapo_fit import fit

    _running("fit with 200 bootstrap resamples")
    r = fit(curve, solve_rates, n_bootstrap=200)
    c, s = r["competence"], r["saturating"]
    lo, hi = c["r2_bootstrap"]
    yield _item(
        "DAPO",
        "R² of E_p[p^32] under one timescale",
        f"{ref['competence_r2']} ({ref['competence_r2_bootstrap'][0]}–{ref['competence_r2_bootstrap'][1]})",
        f"{c['r2']:.3f} ({lo:.3f}–{hi:.3f})",
        c["r2"] >= ref["competence_r2_bootstrap"][0],
        f"pass: at least the paper's bootstrap lower bound; solve rates: {r['solve_rate_source']}",
    )
    yield _item(
        "DAPO",
        "R² of the two-parameter saturating curve (better)",
        ref["saturating_r2"],
        f"{s['r2']:.3f}",
        round(s["r2"], 2) == ref["saturating_r2"] and s["r2"] >= c["r2"],
        "independent of the solve rates: the paper's value to 2 decimals",
    )


def _realdata_expected() -> int:
    ref = paper.BIG_MATH
    return (
        2
        + len(ref["silent_closed_form"])
        + len(ref["silent_subsampled"])
        + sum(len(v) for v in ref["mass_share"].values())
    )


def _realdata(solve_rates: str | None) -> Iterator[Item]:
    """The 14 Big-Math numbers of claim 8, each rounded to the paper's printed decimals."""
    from grpo_identity.analysis.realdata import summarise
    from grpo_identity.analysis.solve_rates import resolve

    ref, dec = paper.BIG_MATH, paper.PRINTED_DECIMALS
    s = summarise(resolve(solve_rates))
    note = f"{s['source']}; the project's value rounded to the paper's printed digits"

    def printed(name: str, key: str, want: float, got: float) -> Item:
        d = dec[key]
        shown = f"{100 * want:.{max(d - 2, 0)}f} %"
        return _item(
            "Big-Math", name, shown, f"{100 * got:.{max(d - 2, 0) + 2}f} %", round(got, d) == round(want, d), note
        )

    yield printed("fraction with p̂ = 0", "frac_p0", ref["frac_p0"], s["frac_p0"])
    yield printed("fraction with p̂ = 1", "frac_p1", ref["frac_p1"], s["frac_p1"])
    for G, want in ref["silent_closed_form"].items():
        yield printed(f"silent fraction, closed form, G={G}", "silent_closed_form", want, s["silent_closed_form"][G])
    for G, want in ref["silent_subsampled"].items():
        yield printed(
            f"silent fraction, G={G} of 64 logged rollouts", "silent_subsampled", want, s["silent_subsampled"][G]
        )
    for arm, shares in ref["mass_share"].items():
        for part, want in shares.items():
            label = {"grpo": "GRPO", "dr_grpo": "Dr. GRPO"}[arm]
            yield printed(
                f"{label} gradient-mass share on {part} prompts", "mass_share", want, s["mass_share"][arm][part]
            )


def _stored_lm(results: Path = STORED_RESULTS) -> Iterator[Item]:
    """One item per stored language-model run ``results/lm-*/summary.json`` (read, not re-run)."""
    runs = sorted(
        p.parent for p in results.glob("lm-*/summary.json") if not p.parent.name.startswith("lm-conditional-")
    )  # those: _stored_conditional
    if not runs:
        name = "LM trainer: identity g = c(k,G)(s̄₊ − s̄₋) in a transformer"
        why = _not_stored("stored LM runs", "lm-*", results, "grpo-identity train lm")
        yield _skip("LM trainer", name, "beyond the paper", why)
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
        yield _item(
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
            yield _item(sec, what, f"{e} (c ∝ σ^{e})", _interval_text(d), iv is not None and iv[0] <= e <= iv[1], note)
    for mode, cs in c["cosine_min"]["by_mode"].items():
        med = cs["median"]
        yield _item(
            sec,
            f"{name} {mode}: cosine of E[g|k], E[g|k'] (median of {cs['pairs']} pairs)",
            "1",
            f"median {med:.3f}, min {cs['value']:.2f}",
            med is not None and abs(med - 1) <= 0.05,
            note + "; pass: within 0.05 of 1",
        )
    gp = c["grad_p_rel_err"]
    yield _item(
        sec,
        f"{name} {gp.get('mode')}: E[g|k]/c against ∇p/(p(1−p)), relative difference",
        "0",
        "n/a" if gp["value"] is None else f"{gp['value']:.3f} (max {gp['max']:.3f})",
        gp["value"] is not None and gp["value"] <= 0.10,
        note + "; median over prompts, split halves; pass: at most 0.10",
    )
    for mode, ns in c["noise_slope_by_mode"].items():
        r = ns["measured_over_predicted_median"]
        yield _item(
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
    yield _item(
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
            yield _item(
                "LM conditional",
                f"{folder.name}: pre-registered {crit} replicated over {len(runs)} seeds",
                "met in every seed",
                f"met in {met} of {len(runs)} seeds",
                met == len(runs),
                f"read from results/{folder.name}/seed-*, not re-run; pass: met in every seed",
            )


def _stored_conditional(results: Path = STORED_RESULTS) -> Iterator[Item]:
    """The stored fixed-policy runs (:func:`_conditional_runs`; read, not re-run), then each
    replication's criteria over its seeds."""
    runs = _conditional_runs(results)
    if not runs:
        yield _skip(
            "LM conditional",
            "E[g | k] = c(k, G)·∇p/(p(1−p)) at a fixed policy",
            "beyond the paper (G7–G8)",
            _not_stored(
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


def _conditional_count(results: Path = STORED_RESULTS) -> int:
    return max(1, 14 * len(_conditional_runs(results)))


def _stored_environments(results: Path = STORED_RESULTS) -> Iterator[Item]:
    """One item per stored run ``results/*/``: the python and package versions it recorded against
    the running ones.  A difference is a note (status skipped), never a failure: the stored numbers
    were made with the recorded versions, and a rerun here may differ."""
    from grpo_identity import provenance

    here = provenance.environment()
    sec = "stored runs"
    if not results.is_dir():
        why = _not_stored("stored runs", "*", results, "grpo-identity train lm")
        yield _skip(sec, "stored runs: recorded versions against this environment", "—", why)
        return
    for folder in sorted(p for p in results.iterdir() if p.is_dir()):
        records = provenance.recorded(folder)
        name = f"results/{folder.name}: recorded versions against this environment"
        if not records:
            why = "no provenance recorded (made before runs recorded their versions): regenerate it to record them"
            yield Item(sec, name, "—", "not recorded", "skipped", why)
            continue
        diffs = sorted({d for r in records for d in provenance.differences(r, here)})
        commits = sorted(
            {(r.get("commit") or "no commit")[:12] + (" (modified)" if r.get("dirty") else "") for r in records}
        )
        made = f"recorded at {', '.join(commits)}"
        if diffs:
            yield Item(sec, name, "—", "differs: " + "; ".join(diffs), "skipped", f"a note, not a failure; {made}")
        else:
            named = set().union(*(r.get("versions") or {} for r in records))
            same = ", ".join(["python", *[n for n in provenance.PACKAGES if n in named]])
            yield Item(sec, name, "—", f"same ({same})", "pass", made)


def _stored_count(results: Path = STORED_RESULTS) -> int:
    return max(1, len([p for p in results.iterdir() if p.is_dir()]) if results.is_dir() else 1)


#: what executing and rendering the notebooks imports (all in the 'notebooks' extra)
_NOTEBOOK_MODULES = (
    "jupytext",
    "nbformat",
    "nbclient",
    "nbconvert",
    "ipykernel",
    "matplotlib",
    "jupyter_server_mathjax",
)


def _render(out: Path, progress: bool = False) -> Iterator[Item]:
    from grpo_identity.app.render import NOTEBOOKS_DIR, render

    if not NOTEBOOKS_DIR.is_dir():  # a pip install: the jupytext sources are not in the package
        why = (
            "the notebooks ship with the source checkout, not the pip package: clone the repository, "
            "pip install '.[notebooks]' and run verify there"
        )
        yield _skip("notebooks", "notebooks execute and render", "—", why)
        return
    for module in _NOTEBOOK_MODULES:  # a missing one is a skipped stage naming the extra, not a failure
        if importlib.util.find_spec(module) is None:
            raise ModuleNotFoundError(f"No module named {module!r}", name=module)

    r = render(out / "notebooks", execute=True, progress=progress)
    for nb in r["notebooks"]:
        ok = nb["errors"] == 0
        yield _item(
            "notebooks",
            f"notebook {nb['name']} executes and renders",
            "—",
            f"{nb['errors']} error cells, {nb['figures']} figures, {nb['seconds']:.1f} s",
            ok,
        )


# --- the job ----------------------------------------------------------------------------------
@dataclass
class Stage:
    """One stage of the job: its section name, the items it yields, how many it will yield."""

    name: str
    run: Callable[[], Iterable[Item]]
    expected: int


def _notebook_count() -> int:
    from grpo_identity.app.render import NOTEBOOKS_DIR

    return max(1, len(list(NOTEBOOKS_DIR.glob("[0-9]*.py"))))


def _stages(
    out: Path,
    solve_rates: str | None,
    dapo_curve: Path | None,
    frameworks: bool,
    render: bool,
    max_examples: int,
    progress: bool = False,
) -> list[Stage]:
    from grpo_identity.trainer.bernoulli_seeds import QUANTITIES

    n_closed = (
        sum(len(v) for v in paper.GROUP_SIZE_TABLE.values()) + len(paper.FIDELITY) + len(paper.ATTENUATION_FIRST_ORDER)
    )
    n_closed += len(paper.DIFFICULTY_WEIGHT) + len(paper.DIFFICULTY_PENALTY)
    try:
        from grpo_identity.proofs import THEOREMS

        n_proofs = len(THEOREMS)
    except ImportError:  # the stage itself reports it
        n_proofs = 1
    stages = [
        Stage("proofs", _proofs, n_proofs),
        Stage("closed forms", _closed_forms, n_closed),
        Stage("audits", lambda: _audits(frameworks, max_examples), len(_PRESET_AUDITS) + len(_FRAMEWORK_AUDITS)),
        Stage("Big-Math", lambda: _realdata(solve_rates), _realdata_expected()),
        Stage("controlled run", lambda: _bernoulli(solve_rates), 1 + len(QUANTITIES) + 3),
        Stage("DAPO", lambda: _dapo_fit(dapo_curve, solve_rates), 2),
        Stage("stored runs", _stored_environments, _stored_count()),
        Stage("LM trainer", _stored_lm, max(1, len(list(STORED_RESULTS.glob("lm-*/summary.json"))))),
        Stage("LM conditional", _stored_conditional, _conditional_count()),
    ]
    if render:
        stages.append(Stage("notebooks", lambda: _render(out, progress), _notebook_count()))
    return stages


def _run_stage(stage: Stage, tick: Callable[[Item], None]) -> list[Item]:
    """The stage's items, each handed to ``tick`` once made; an exception becomes one failed item
    (or a skipped one naming the extra to install, when an optional package is missing), never a
    lost report."""
    items: list[Item] = []
    try:
        for item in stage.run():
            items.append(item)
            tick(item)
    except ImportError as exc:
        hint = missing_extra(exc)
        if hint is None:
            items.append(Item(stage.name, f"{stage.name} stage ran", "—", error_text(exc), "fail"))
        else:
            items.append(Item(stage.name, f"{stage.name} stage", "—", None, "skipped", hint))
        tick(items[-1])
    except Exception as exc:  # a broken stage is a failed item, never a lost report
        items.append(Item(stage.name, f"{stage.name} stage ran", "—", error_text(exc), "fail"))
        tick(items[-1])
    return items


def verify(
    out: str | Path = "out/verify",
    *,
    solve_rates: str | None = None,
    dapo_curve: str | Path | None = DEFAULT_DAPO_CURVE,
    frameworks: bool = True,
    render: bool = True,
    max_examples: int = 200,
    progress: bool = False,
) -> dict[str, Any]:
    """The verification report: every stage run, written as ``report.json`` and ``report.html``.

    The stages prove the theorems, audit the presets (and the frameworks), recompute the paper's
    numbers, run the controlled Bernoulli-logit run, fit DAPO's curve, read the stored LM runs and
    render the notebooks; a full run takes minutes.  The inputs are checked before any work.

    Parameters
    ----------
    out : str or pathlib.Path
        The output folder (created if missing).
    solve_rates : str, optional
        A solve-rate spec for the Big-Math numbers and the controlled run: ``bigmath``, a file,
        or ``hf:NAME``; None: the shipped Big-Math histogram.
    dapo_curve : str or pathlib.Path, optional
        The digitised DAPO curve (default: the copy shipped with the package).
    frameworks : bool
        Whether to audit TRL and verl where they are installed.
    render : bool
        Whether to execute and render the notebooks into ``out/notebooks``.
    max_examples : int
        Hypothesis examples per audit.
    progress : bool
        Whether to show a progress bar on stderr (shown at once; it names the running stage, its
        number of all the stages, the last item made and how many remain).

    Returns
    -------
    dict
        ``{"all_ok": bool, "seconds": float, "stage_seconds", "counts", "items": [{"section",
        "name", "paper", "project", "ok", "status", "note"}], "report": {"json", "html"}}``;
        ``all_ok`` is True when no item failed (skipped items say why); ``counts`` has ``pass``,
        ``fail``, ``skipped`` and ``checked`` (passed + failed).

    Raises
    ------
    ValueError
        An output folder that cannot be written, or a ``solve_rates`` file that does not exist.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     verify(tmp, solve_rates="no-such-file.csv")
    Traceback (most recent call last):
    ...
    ValueError: --solve-rates: no such file: no-such-file.csv
    """
    from grpo_identity.analysis.solve_rates import BIG_MATH
    from grpo_identity.app.render import output_folder

    out = output_folder(out)
    if (
        solve_rates is not None
        and solve_rates != BIG_MATH
        and not str(solve_rates).startswith("hf:")
        and not Path(solve_rates).is_file()
    ):
        raise ValueError(f"--solve-rates: no such file: {solve_rates}")
    start = time.perf_counter()
    curve = Path(dapo_curve) if dapo_curve else None
    items, timings = _run_all(
        lambda: _stages(out, solve_rates, curve, frameworks, render, max_examples, progress), progress
    )
    result = _result(items, timings, time.perf_counter() - start)
    result["report"] = write_report(result, out, notebooks_index=(out / "notebooks" / "index.html") if render else None)
    return result


#: the progress bar names an item in at most this many characters
_ITEM_WIDTH = 48


def _result(items: list[Item], timings: dict[str, float], seconds: float) -> dict[str, Any]:
    """The result :func:`verify` returns (without the report's paths)."""
    counts = {s: sum(i.status == s for i in items) for s in ("pass", "fail", "skipped")}
    return {
        "all_ok": all(i.status != "fail" for i in items),
        "seconds": round(seconds, 2),
        "stage_seconds": timings,
        "counts": counts | {"checked": counts["pass"] + counts["fail"]},
        "items": [i.to_dict() for i in items],
    }


def _run_all(build: Callable[[], list[Stage]], progress: bool) -> tuple[list[Item], dict[str, float]]:
    """The stages ``build`` makes, run (:func:`_run_stages`); with ``progress``, under a bar on
    stderr drawn before they are built (building them imports SymPy: seconds)."""
    if not progress:
        return _run_stages(build())
    from tqdm import tqdm

    with tqdm(desc="verify: loading", unit="item", leave=False) as bar:
        return _run_stages(build(), bar)


def _run_stages(stages: list[Stage], bar: Any = None) -> tuple[list[Item], dict[str, float]]:
    """Every stage's items, and its seconds by name; ``bar`` (a tqdm bar, or None) counts the
    items and names the running stage ("verify [3/10] audits") and the item it runs now (where
    the stage says, :func:`_running`) or the last one it made."""
    items: list[Item] = []
    timings: dict[str, float] = {}

    def show(what: str, name: str, refresh: bool) -> None:
        cut = name if len(name) <= _ITEM_WIDTH else name[: _ITEM_WIDTH - 1] + "…"
        bar.set_postfix_str(f"{what}: {cut}", refresh=refresh)

    def tick(item: Item) -> None:
        if bar is not None:
            show("done", item.name, refresh=False)
            bar.update(1)

    hooks = [lambda name: show("now", name, refresh=True)] if bar is not None else []
    if bar is not None:
        bar.total = sum(s.expected for s in stages)
    _NOW.extend(hooks)
    try:
        for number, stage in enumerate(stages, 1):
            if bar is not None:
                bar.set_description_str(f"verify [{number}/{len(stages)}] {stage.name}", refresh=False)
                bar.set_postfix_str("")  # and draw: the stage's first item may take a while
            t = time.perf_counter()
            got = _run_stage(stage, tick)
            if bar is not None and len(got) != stage.expected:  # keep the total honest
                bar.total += len(got) - stage.expected
                bar.refresh()
            items.extend(got)
            timings[stage.name] = round(time.perf_counter() - t, 2)
    finally:
        for hook in hooks:
            _NOW.remove(hook)
    return items, timings


def write_report(result: dict[str, Any], out: Path, notebooks_index: Path | None = None) -> dict[str, str]:
    """Write ``report.json`` and a self-contained ``report.html``; return their paths."""
    from grpo_identity.app.report import dumps

    out = Path(out)
    paths = {"json": str(out / "report.json"), "html": str(out / "report.html")}
    body = {k: v for k, v in result.items() if k != "report"} | {"report": paths}
    write_text_atomic(out / "report.json", dumps(body) + "\n")
    write_text_atomic(out / "report.html", _html(result, notebooks_index, out))
    return paths


def _cell(value: Any) -> str:
    """A value as a report cell: '—' where there is none (a skipped item)."""
    return "—" if value is None else str(value)


_COLOURS = {"pass": "#1a7f37", "fail": "#cf222e", "skipped": "#9a6700"}


def _html(result: dict[str, Any], notebooks_index: Path | None, out: Path) -> str:
    esc = html.escape
    rows: list[str] = []
    section = None
    for it in result["items"]:
        if it["section"] != section:
            section = it["section"]
            rows.append(f'<tr class="section"><th colspan="4">{esc(section)}</th></tr>')
        colour = _COLOURS[it["status"]]
        note = f'<div class="note">{esc(it["note"])}</div>' if it["note"] else ""
        rows.append(
            f"<tr><td>{esc(it['name'])}{note}</td><td>{esc(_cell(it['paper']))}</td>"
            f"<td>{esc(_cell(it['project']))}</td>"
            f'<td style="color:{colour};font-weight:600">{esc(it["status"])}</td></tr>'
        )
    verdict = "everything holds" if result["all_ok"] else "SOMETHING FAILED"
    link = ""
    if notebooks_index is not None and notebooks_index.exists():
        index = esc(str(notebooks_index.relative_to(out)))
        link = f'<p>Notebooks: <a href="{index}">{index}</a></p>'
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>grpo-identity verify</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #1f2328; }}
table {{ border-collapse: collapse; width: 100%; }}
td, th {{ border-bottom: 1px solid #d0d7de; padding: .35em .6em; text-align: left; vertical-align: top; }}
tr.section th {{ background: #f6f8fa; padding-top: 1em; }} .note {{ color: #656d76; font-size: .85em; }}
</style></head><body>
<h1>grpo-identity verify: {esc(verdict)}</h1>
<p>The group-standard-deviation identity (arXiv 2607.00152): {esc(counts_line(result))}.</p>
{link}
<table><thead><tr><th>claim</th><th>paper</th><th>project</th><th>status</th></tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody></table>
</body></html>
"""


def _fit_widths(natural: list[int], floors: list[int], budget: int) -> list[int]:
    """Column widths within ``budget`` characters: the widest column gives way first, never
    below its floor."""
    widths = list(natural)
    while sum(widths) > budget:
        i = max(range(len(widths)), key=lambda j: widths[j] - floors[j])
        if widths[i] <= floors[i]:
            break
        widths[i] -= 1
    return widths


def format_summary(result: dict[str, Any], width: int = TABLE_WIDTH) -> str:
    """The summary table for people, at most ``width`` characters a line: one title line per
    section, then its items (long cells end in "…"; the HTML report has them in full)."""
    from grpo_identity.app.report import format_table

    headers = ["claim", "paper", "project", "status"]
    items = result["items"]
    rows = [["  " + i["name"], _cell(i["paper"]), _cell(i["project"]), i["status"]] for i in items]
    natural = [max([len(h)] + [len(r[c]) for r in rows]) for c, h in enumerate(headers)]
    floors = [min(f, n) for f, n in zip([40, 16, 24, natural[3]], natural)]
    widths = _fit_widths(natural, floors, width - 2 * (len(headers) - 1))

    def cut(t: str, n: int) -> str:
        return t if len(t) <= n else t[: n - 1] + "…"

    lines = format_table([[cut(v, w) for v, w in zip(r, widths)] for r in rows], headers).split("\n")
    out, section = lines[:2], None
    for item, line in zip(items, lines[2:]):
        if item["section"] != section:
            section = item["section"]
            out.append(section)
        out.append(line)
    failed = [(i["name"], _cell(i["project"])) for i in items if i["status"] == "fail"]
    if failed:  # a cut cell hides why: each failure in full
        out.append("failed, in full:")
        out += [_wrapped(f"{name}: {project}", width) for name, project in failed]
    reasons = list(dict.fromkeys((i["section"], i["note"]) for i in items if i["status"] == "skipped"))
    if reasons:  # the table has no room for them: each distinct reason once, by section
        out.append("skipped, and why:")
        out += [_wrapped(f"{section}: {note or 'no reason given'}", width) for section, note in reasons]
    return "\n".join(out) + "\n" + counts_line(result)


def _wrapped(text: str, width: int) -> str:
    return textwrap.fill(
        text, width, initial_indent="  ", subsequent_indent="    ", break_long_words=False, break_on_hyphens=False
    )


def counts_line(result: dict[str, Any]) -> str:
    """The summary line: how many items were checked (passed + failed) and how many skipped.

    >>> counts_line({"counts": {"pass": 3, "fail": 1, "skipped": 2}, "seconds": 1.0})
    '4 checked, 2 skipped: 3 passed, 1 failed in 1.0 s'
    >>> counts_line({"counts": {"pass": 3, "fail": 0, "skipped": 0}, "seconds": 1.0})
    '3 checked: 3 passed, 0 failed in 1.0 s'
    """
    c = result["counts"]
    skipped = f", {c['skipped']} skipped" if c["skipped"] else ""
    checked = c["pass"] + c["fail"]
    return f"{checked} checked{skipped}: {c['pass']} passed, {c['fail']} failed in {result['seconds']:.1f} s"
