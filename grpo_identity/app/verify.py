"""The main job: prove, check, reproduce and render everything, then write one report.

:func:`verify` proves every theorem, audits the built-in presets (and TRL and verl where
installed), recomputes the paper's closed-form numbers, runs the controlled Bernoulli-logit run,
fits DAPO's curve, summarises real data when a solve-rate file is given, reads the stored LM run
and renders the notebooks.  Each comparison is an :class:`Item` (claim, paper value, project
value, status); the report is written as ``report.json`` and ``report.html``.

Status ``pass`` / ``fail``, or ``skipped`` where an input is missing (no Big-Math file, no DAPO
curve, a framework not installed): skipped items say why and do not make the run fail.
"""

from __future__ import annotations

import html
import importlib.util
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from grpo_identity import paper

__all__ = ["Item", "verify", "write_report", "DEFAULT_DAPO_CURVE"]

ROOT = Path(__file__).resolve().parents[2]
#: where the digitised DAPO Fig. 3b curve lies beside a checkout (not shipped with the package)
DEFAULT_DAPO_CURVE = ROOT.parent / "shared" / "data" / "dapo_fig3b_accuracy1_fraction.csv"
STORED_RESULTS = ROOT / "results"


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
        return {"section": self.section, "name": self.name, "paper": self.paper, "project": self.project,
                "ok": self.ok, "status": self.status, "note": self.note}


def _item(section: str, name: str, paper_value: Any, project: Any, ok: bool, note: str = "") -> Item:
    return Item(section, name, paper_value, project, "pass" if ok else "fail", note)


def _skip(section: str, name: str, paper_value: Any, why: str) -> Item:
    return Item(section, name, paper_value, None, "skipped", why)


# --- the stages -------------------------------------------------------------------------------
def _proofs() -> list[Item]:
    from grpo_identity.proofs import THEOREMS

    items = []
    for t in THEOREMS:
        r = t.prove()
        note = "" if r.status == "proved" else f"residual: {r.residual}"
        items.append(_item("proofs", f"{t.name} {t.title}", f"{t.paper_ref}", f"{r.status} in {r.seconds:.2f} s", r.status == "proved", note))
    return items


def _closed_forms() -> list[Item]:
    from grpo_identity import closed_forms as C

    items = []
    for row in C.group_size_table():
        exact, law = paper.GROUP_SIZE_TABLE[row["p"]][C.PAPER_TABLE_EPS.index(row["eps"])]
        name = f"group size p={row['p']}, fidelity {1 - row['eps']:.0%}"
        project = f"{row['G_exact']} ({round(row['G_law'])})"
        items.append(_item("closed forms", name, f"{exact} ({law})", project, row["G_exact"] == exact and round(row["G_law"]) == law))
    for (G, p), value in paper.FIDELITY.items():
        v = round(float(C.fidelity(G, p)), 4)
        items.append(_item("closed forms", f"fidelity φ(G={G}, p={p})", f"{value:.4f}", f"{v:.4f}", v == value))
    for (G, p), value in paper.ATTENUATION_FIRST_ORDER.items():
        v = round(float(C.attenuation_first_order(G, p)), 2)
        items.append(_item("closed forms", f"first-order law at G={G}, p={p}", value, v, v == value))
    for p, value in paper.DIFFICULTY_WEIGHT.items():
        v = round(float(C.difficulty_weight(p)), 1)
        items.append(_item("closed forms", f"difficulty weight w({p})", value, v, v == value))
    for p, value in paper.DIFFICULTY_PENALTY.items():
        v = round(float(C.difficulty_weight(p)) ** 2 / 4, 1)
        items.append(_item("closed forms", f"difficulty penalty 1/(4p(1−p)) at p={p}", value, v, v == value))
    return items


_PRESET_AUDITS = (("grpo", "grpo", "advantage"), ("dr_grpo", "dr_grpo", "advantage"), ("rloo", "rloo", "advantage"), ("dapo", "dapo", "filter"))
#: the paper audits no framework: what the report's paper column says for TRL and verl
_FRAMEWORK_PAPER = "beyond the paper"
_FRAMEWORK_AUDITS = (("trl", "trl", "grpo"), ("verl", "verl:grpo", "grpo"), ("verl", "verl:grpo_vectorized", "grpo"))


def _audits(frameworks: bool, max_examples: int) -> list[Item]:
    from grpo_identity.checks import audit

    items = []
    for target, expect, kind in _PRESET_AUDITS:
        rep = audit(target, kind=kind, expect=expect, max_examples=max_examples)
        items.append(_item("audits", f"audit preset {target} ({kind})", "identity holds (Theorem 1): pass", f"{rep.verdict} (matches {rep.matches})", rep.verdict == "pass"))
    for package, target, expect in _FRAMEWORK_AUDITS:
        name = f"audit {target} against {expect} (expected: GRPO up to Bessel's ddof 1 and ε)"
        if not frameworks:
            items.append(_skip("audits", name, _FRAMEWORK_PAPER, "frameworks not requested"))
            continue
        if importlib.util.find_spec(package) is None:
            items.append(_skip("audits", name, _FRAMEWORK_PAPER, f"{package} is not installed"))
            continue
        rep = audit(target, kind="advantage", expect=expect, max_examples=max_examples)
        inf = rep.inferred.to_dict() if hasattr(rep.inferred, "to_dict") else dict(rep.inferred)
        project = f"{rep.verdict}: centre {inf.get('centre')}, {inf.get('scale')}, ddof {inf.get('ddof')}, ε ≈ {inf.get('eps', 0):.2g}"
        silent = inf.get("silent_nonbinary_max_abs")
        note = f"{package} {_version(package)}" + (f"; silent groups of 0.1 rewards in fp32: max |Â| = {silent:.2g}" if silent is not None else "")
        items.append(_item("audits", name, _FRAMEWORK_PAPER, project, rep.verdict in ("pass", "deviation"), note))
    return items


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "?"


#: the Bernoulli run is float64: the autograd gradient equals σ(k)·(s̄₊ − s̄₋) to rounding
IDENTITY_ABS_TOL = 1e-10


def _bernoulli(solve_rates: str | None = None) -> tuple[list[Item], dict[str, Any]]:
    from grpo_identity.trainer.bernoulli import BernoulliConfig, run_bernoulli

    r = run_bernoulli(BernoulliConfig(solve_rates=solve_rates))
    ref = paper.CONTROLLED_RUN
    ext, hard = r["extreme_share"], r["hard_final"]
    src = r["solve_rate_source"]
    items = [
        _item("controlled run", "autograd gradient equals the identity's σ (max abs error)", "exact", f"{r['identity_max_abs_err']:.2g}", r["identity_max_abs_err"] <= IDENTITY_ABS_TOL),
        _item("controlled run", "R² of silent fraction against E[p^G + (1−p)^G]", ref["r2_silent"], round(r["r2_silent"], 4), round(r["r2_silent"], 3) >= ref["r2_silent"]),
        _item("controlled run", "extreme-prompt gradient share, GRPO > Dr. GRPO",
              f"{ref['extreme_share']['grpo']:.1%} > {ref['extreme_share']['dr_grpo']:.1%}",
              f"{ext['grpo']['measured']:.1%} > {ext['dr_grpo']['measured']:.1%}", ext["grpo"]["measured"] > ext["dr_grpo"]["measured"],
              f"solve rates: {src}"),
        _item("controlled run", "measured extreme share equals the finite-G closed form (±1 pt)", "—",
              f"GRPO {ext['grpo']['measured']:.3f} vs {ext['grpo']['finite_g']:.3f}; Dr. GRPO {ext['dr_grpo']['measured']:.3f} vs {ext['dr_grpo']['finite_g']:.3f}",
              all(abs(ext[a]["measured"] - ext[a]["finite_g"]) <= 0.01 for a in ("grpo", "dr_grpo"))),
        _item("controlled run", "hardest quartile final solve rate, GRPO > Dr. GRPO",
              f"{ref['hard_final']['grpo']} vs {ref['hard_final']['dr_grpo']}", f"{hard['grpo']:.3f} vs {hard['dr_grpo']:.3f}",
              hard["grpo"] > hard["dr_grpo"] and hard["grpo"] >= 0.95),
        _item("controlled run", "DAPO fastest on the hardest quartile", "DAPO fastest", f"DAPO {hard['dapo']:.3f}", hard["dapo"] >= max(hard["grpo"], hard["dr_grpo"])),
        _item("controlled run", "DAPO oversampling factor", f"{ref['dapo_oversample']}×", f"{r['dapo_oversample']:.2f}×", abs(r["dapo_oversample"] - ref["dapo_oversample"]) <= 0.5),
    ]
    return items, r


def _dapo_fit(curve: Path | None, solve_rates: str | None) -> list[Item]:
    ref = paper.DAPO_FIT
    if curve is None or not Path(curve).is_file():
        return [_skip("DAPO", "fit of Fig. 3b with E_p[p^32] (one timescale)", ref["competence_r2"], f"no DAPO curve at {curve}; pass --dapo-curve")]
    from grpo_identity.analysis.dapo_fit import fit

    r = fit(curve, solve_rates, n_bootstrap=200)
    c, s = r["competence"], r["saturating"]
    lo, hi = c["r2_bootstrap"]
    return [
        _item("DAPO", "R² of E_p[p^32] under one timescale", f"{ref['competence_r2']} ({ref['competence_r2_bootstrap'][0]}–{ref['competence_r2_bootstrap'][1]})",
              f"{c['r2']:.3f} ({lo:.3f}–{hi:.3f})", c["r2"] >= ref["competence_r2_bootstrap"][0],
              f"pass: at least the paper's bootstrap lower bound; solve rates: {r['solve_rate_source']}"),
        _item("DAPO", "R² of the two-parameter saturating curve (better, as in the paper)", ref["saturating_r2"], f"{s['r2']:.3f}",
              round(s["r2"], 2) == ref["saturating_r2"] and s["r2"] >= c["r2"], "independent of the solve rates: the paper's value to 2 decimals"),
    ]


def _realdata(solve_rates: str | None) -> list[Item]:
    ref = paper.BIG_MATH
    if solve_rates is None:
        return [_skip("Big-Math", "Big-Math solve-rate numbers (claim 8)", "4.0 % / 7.2 % …", "no Big-Math file; pass --solve-rates PATH (or hf:open-r1/Big-Math-RL-Verified-Processed online)")]
    from grpo_identity.analysis.realdata import summarise
    from grpo_identity.analysis.solve_rates import resolve

    s = summarise(resolve(solve_rates))

    def close(name: str, want: float, got: float, tol: float) -> Item:
        return _item("Big-Math", name, f"{want:.1%}", f"{got:.1%}", abs(got - want) <= tol)

    items = [close("fraction with p̂ = 0", ref["frac_p0"], s["frac_p0"], 0.0006), close("fraction with p̂ = 1", ref["frac_p1"], s["frac_p1"], 0.0006)]
    for G, want in ref["silent_closed_form"].items():
        items.append(close(f"silent fraction, closed form, G={G}", want, s["silent_closed_form"][G], 0.006))
    for G, want in ref["silent_subsampled"].items():
        items.append(close(f"silent fraction, {G} of 64 logged rollouts", want, s["silent_subsampled"][G], 0.006))
    for arm, shares in ref["mass_share"].items():
        for part, want in shares.items():
            items.append(close(f"{arm} gradient-mass share on {part} prompts", want, s["mass_share"][arm][part], 0.0006))
    return items


def _stored_lm(results: Path = STORED_RESULTS) -> list[Item]:
    """One item per stored language-model run ``results/lm-*/summary.json`` (read, not re-run)."""
    from grpo_identity.trainer.lm.identity import REL_TOL

    runs = sorted(p.parent for p in results.glob("lm-*/summary.json"))
    if not runs:
        name = "LM trainer: identity g = c(k,G)(s̄₊ − s̄₋) in a transformer"
        return [_skip("LM trainer", name, "beyond the paper", f"no stored run under {results.name}/lm-*")]
    items = []
    for run in runs:
        s = json.loads((run / "summary.json").read_text())
        err = s.get("identity_max_rel_err")
        project = f"max rel err {err:.2g} over {s.get('groups_checked')} groups" if err is not None else "no identity_max_rel_err"
        items.append(_item("LM trainer", f"LM trainer {run.name}: identity g = c(k,G)(s̄₊ − s̄₋) in a transformer",
                           f"beyond the paper (fp32 goal ≤ {REL_TOL:.0e})", project,
                           err is not None and err <= REL_TOL, f"read from results/{run.name}, not re-run"))
    return items


def _render(out: Path) -> list[Item]:
    from grpo_identity.app.render import render

    r = render(out / "notebooks", execute=True)
    items = []
    for nb in r["notebooks"]:
        ok = nb["errors"] == 0
        items.append(_item("notebooks", f"notebook {nb['name']} executes and renders", "—", f"{nb['errors']} error cells, {nb['figures']} figures, {nb['seconds']:.1f} s", ok))
    return items


# --- the job ----------------------------------------------------------------------------------
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
    """Run every stage and write ``report.json`` and ``report.html`` into ``out``.

    Returns ``{"all_ok": bool, "seconds": float, "items": [{"section", "name", "paper",
    "project", "ok", "status", "note"}], "report": {"json", "html"}}``; ``all_ok`` is True when no
    item failed (skipped items say why in ``note``).
    """
    from grpo_identity.app.render import output_folder

    out = output_folder(out)
    if solve_rates is not None and not str(solve_rates).startswith("hf:") and not Path(solve_rates).is_file():
        raise ValueError(f"--solve-rates: no such file: {solve_rates}")
    start = time.perf_counter()
    stages: list[tuple[str, Callable[[], list[Item]]]] = [
        ("proofs", _proofs),
        ("closed forms", _closed_forms),
        ("audits", lambda: _audits(frameworks, max_examples)),
        ("controlled run", lambda: _bernoulli(solve_rates)[0]),
        ("DAPO fit", lambda: _dapo_fit(Path(dapo_curve) if dapo_curve else None, solve_rates)),
        ("real data", lambda: _realdata(solve_rates)),
        ("LM trainer", _stored_lm),
    ]
    if render:
        stages.append(("notebooks", lambda: _render(out)))
    items: list[Item] = []
    timings: dict[str, float] = {}
    bar: Any = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(stages), desc="verify", unit="stage", leave=False)
    try:
        for name, stage in stages:
            if bar is not None:
                bar.set_postfix_str(name)
            t = time.perf_counter()
            try:
                items.extend(stage())
            except Exception as exc:  # a broken stage is a failed item, never a lost report
                items.append(Item(name, f"{name} stage ran", "—", f"{type(exc).__name__}: {exc}".splitlines()[0], "fail"))
            timings[name] = round(time.perf_counter() - t, 2)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    result = {
        "all_ok": all(i.status != "fail" for i in items),
        "seconds": round(time.perf_counter() - start, 2),
        "stage_seconds": timings,
        "counts": {s: sum(i.status == s for i in items) for s in ("pass", "fail", "skipped")},
        "items": [i.to_dict() for i in items],
    }
    result["report"] = write_report(result, out, notebooks_index=(out / "notebooks" / "index.html") if render else None)
    return result


def write_report(result: dict[str, Any], out: Path, notebooks_index: Path | None = None) -> dict[str, str]:
    """Write ``report.json`` and a self-contained ``report.html``; return their paths."""
    from grpo_identity.app.report import dumps

    out = Path(out)
    paths = {"json": str(out / "report.json"), "html": str(out / "report.html")}
    body = {k: v for k, v in result.items() if k != "report"} | {"report": paths}
    (out / "report.json").write_text(dumps(body) + "\n")
    (out / "report.html").write_text(_html(result, notebooks_index, out))
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
            f"<tr><td>{esc(it['name'])}{note}</td><td>{esc(_cell(it['paper']))}</td><td>{esc(_cell(it['project']))}</td>"
            f'<td style="color:{colour};font-weight:600">{esc(it["status"])}</td></tr>'
        )
    counts = result["counts"]
    verdict = "everything holds" if result["all_ok"] else "SOMETHING FAILED"
    link = ""
    if notebooks_index is not None and notebooks_index.exists():
        link = f'<p>Notebooks: <a href="{esc(str(notebooks_index.relative_to(out)))}">{esc(str(notebooks_index.relative_to(out)))}</a></p>'
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>grpo-identity verify</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #1f2328; }}
table {{ border-collapse: collapse; width: 100%; }} td, th {{ border-bottom: 1px solid #d0d7de; padding: .35em .6em; text-align: left; vertical-align: top; }}
tr.section th {{ background: #f6f8fa; padding-top: 1em; }} .note {{ color: #656d76; font-size: .85em; }}
</style></head><body>
<h1>grpo-identity verify: {esc(verdict)}</h1>
<p>The group-standard-deviation identity (arXiv 2607.00152): {counts['pass']} passed, {counts['fail']} failed,
{counts['skipped']} skipped, in {result['seconds']:.0f} s.</p>
{link}
<table><thead><tr><th>claim</th><th>paper</th><th>project</th><th>status</th></tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody></table>
</body></html>
"""


def format_summary(result: dict[str, Any]) -> str:
    """The summary table for people."""
    from grpo_identity.app.report import format_table

    def cut(v: Any, n: int = 48) -> str:
        t = _cell(v)
        return t if len(t) <= n else t[: n - 1] + "…"

    rows = [[i["section"], cut(i["name"], 60), cut(i["paper"]), cut(i["project"]), i["status"]] for i in result["items"]]
    c = result["counts"]
    tail = f"\n{c['pass']} passed, {c['fail']} failed, {c['skipped']} skipped in {result['seconds']:.1f} s"
    return format_table(rows, ["section", "claim", "paper", "project", "status"]) + tail
