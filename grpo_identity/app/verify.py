"""The main job: prove, check, reproduce and render everything, then write one report.

A runner over each domain's claims plus a renderer: every domain states its claims in its own ``claims`` module
(:mod:`grpo_identity.claims` holds what they share); this module runs them as stages, in order, under one
progress bar, renders the notebooks, and writes the report.

:func:`verify` proves every theorem, audits the built-in presets (and the frameworks where installed), recomputes
the paper's closed-form numbers and its 14 Big-Math numbers (from the shipped histogram, or ``--solve-rates``),
runs the controlled Bernoulli-logit run on those solve rates, fits DAPO's curve (shipped, or ``--dapo-curve``),
compares the versions each stored run under ``results/`` recorded with the running ones, reads the stored LM runs
(the fixed-policy runs' pre-registered criteria too, where recorded) and renders the notebooks.  Each comparison
is an :class:`~grpo_identity.claims.Item` (claim, paper value, project value, status); the report is written as
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
import textwrap
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from grpo_identity import claims, data
from grpo_identity.claims import Item, Stage, checked, skipped
from grpo_identity.foundation import error_text, missing_extra, write_text_atomic

__all__ = [
    "Item",
    "Stage",
    "verify",
    "write_report",
    "format_summary",
    "counts_line",
    "DEFAULT_DAPO_CURVE",
    "TABLE_WIDTH",
]

#: the digitised DAPO Fig. 3b curve shipped with the package
DEFAULT_DAPO_CURVE = data.path(data.DAPO_CURVE)
#: the terminal summary fits this many columns
TABLE_WIDTH = 120


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
        yield skipped("notebooks", "notebooks execute and render", "—", why)
        return
    for module in _NOTEBOOK_MODULES:  # a missing one is a skipped stage naming the extra, not a failure
        if importlib.util.find_spec(module) is None:
            raise ModuleNotFoundError(f"No module named {module!r}", name=module)

    r = render(out / "notebooks", execute=True, progress=progress)
    for nb in r["notebooks"]:
        ok = nb["errors"] == 0
        yield checked(
            "notebooks",
            f"notebook {nb['name']} executes and renders",
            "—",
            f"{nb['errors']} error cells, {nb['figures']} figures, {nb['seconds']:.1f} s",
            ok,
        )


# --- the job ----------------------------------------------------------------------------------
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
    """Each domain's claims (its ``claims`` module), in the order the report lists them, then the notebooks."""
    from grpo_identity.analysis import claims as analysis
    from grpo_identity.checks import claims as checks
    from grpo_identity.trainer import claims as trainer

    stages = [
        Stage("proofs", _theorems, _theorem_count()),
        Stage("closed forms", analysis.closed_forms, analysis.closed_form_count()),
        Stage("audits", lambda: checks.audits(frameworks, max_examples), checks.audit_count()),
        Stage("Big-Math", lambda: analysis.big_math(solve_rates), analysis.big_math_count()),
        Stage("controlled run", lambda: trainer.controlled_run(solve_rates), trainer.controlled_run_count()),
        Stage("DAPO", lambda: analysis.dapo_fit(dapo_curve, solve_rates), 2),
        Stage("stored runs", claims.stored_environments, claims.stored_count()),
        Stage("LM trainer", trainer.stored_lm, trainer.stored_lm_count()),
        Stage("LM conditional", trainer.stored_conditional, trainer.conditional_count()),
    ]
    if render:
        stages.append(Stage("notebooks", lambda: _render(out, progress), _notebook_count()))
    return stages


def _theorems() -> Iterator[Item]:
    """The proofs' claims, imported as the stage runs (the proofs package loads SymPy and every theorem: where
    that fails, the stage's item says so and the report is still written)."""
    from grpo_identity.proofs import claims as proofs

    yield from proofs.theorems()


def _theorem_count() -> int:
    try:
        from grpo_identity.proofs import claims as proofs
    except ImportError:  # the stage itself reports it
        return 1
    return proofs.theorem_count()


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
    the stage says, :func:`grpo_identity.claims.running`) or the last one it made."""
    items: list[Item] = []
    timings: dict[str, float] = {}

    def show(what: str, name: str, refresh: bool) -> None:
        cut = name if len(name) <= _ITEM_WIDTH else name[: _ITEM_WIDTH - 1] + "…"
        bar.set_postfix_str(f"{what}: {cut}", refresh=refresh)

    def tick(item: Item) -> None:
        if bar is not None:
            show("done", item.name, refresh=False)
            bar.update(1)

    def now(name: str) -> None:
        if bar is not None:
            show("now", name, refresh=True)

    if bar is not None:
        bar.total = sum(s.expected for s in stages)
    with claims.announcing(now):
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
