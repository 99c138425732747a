"""The table of a grid's audits, rendered from their rows alone (``audits.jsonl`` of ``grpo-identity matrix``): one
line per (configuration, release) with the verdict, the dial, the per-sample weight, the split step, silent groups,
the off-policy weight, the three-policy probe, asynchronous groups and the first failing (else deviating) finding.
Markdown (:func:`render`: the documentation's framework table includes it) and a page of HTML (:func:`render_html`).

>>> row = {"target": "grpo", "release": "", "wall_seconds": 0.4, "report": {"verdict": "pass", "matches": "grpo"}}
>>> render([row]).splitlines()[2][:41]
'| `grpo` | - | PASS | grpo | no dial fits'
"""

from __future__ import annotations

import html
import re

from grpo_identity.checks.measure.arrival import CASES as CASE_NAMES

__all__ = ["render", "render_html", "cells", "COLUMNS"]

#: the table's columns, in order
COLUMNS = [
    "audit (`grpo-identity audit …`)",
    "release",
    "verdict",
    "matches",
    "dial",
    "per-sample weight",
    "optimizer step as split",
    "silent-group gradient",
    "off-policy weight",
    "three policies",
    "asynchronous groups",
    "first failing (else deviating) finding",
    "s",
]


def _dial(inf: dict) -> str:
    if inf.get("centre") is None:
        return "no dial fits"
    if inf.get("scale") == "none":
        return "no std"
    return f"{inf['scale'].replace('_', ' ')}, ddof {inf['ddof']}, ε {inf['eps']:.2g}"


def _step(inf: dict) -> str:
    """The optimizer step as split: its weight law, split-invariant or not (with the micro-batches' weight
    ratios to the unsplit step's)."""
    step = inf.get("step") or {}
    if not step:
        return "-"
    ratios = [p["weight_ratio"] for p in step.get("pieces", []) if p.get("weight_ratio") is not None]
    if step.get("invariant") is None:
        return f"{step.get('weight')}"
    if step["invariant"]:
        return f"{step.get('weight')}, invariant"
    spread = f" ({min(ratios):.3g}–{max(ratios):.3g}×)" if ratios else ""
    return f"**{step.get('weight')}**, **not invariant**{spread}"


#: deviations the table shows in a column of their own
_OWN_COLUMN = ("per_sample_weight", "split_invariance")


def cells(row: dict) -> list[str]:
    """verdict, matches, dial, per-sample weight, the split step, silent groups, the off-policy importance
    weight, the three-policy probe, the first failing finding (else the first deviation another column does not
    show)."""
    if "report" not in row:
        why = row["error"].split("error: ", 1)[-1].replace("|", "/")
        return _without_report("adapter error", why if len(why) <= 160 else "…" + why[-159:])
    d = row["report"]
    inf = d.get("inferred", {})
    findings = d.get("findings", [])
    first = next((f for f in findings if f.get("severity") == "fail"), None) or next(
        (f for f in findings if f.get("severity") == "deviation" and f.get("property") not in _OWN_COLUMN), None
    )
    silent = {True: "0", False: "**not 0**", None: "-"}[inf.get("silent_groups_zero_gradient")]
    why = f"{first['property']}: {first['message']}".replace("|", "/")[:160] if first else ""
    weight = inf.get("per_sample_weight") or "-"
    moved = (inf.get("off_policy") or {}).get("importance_weight") or "-"
    return [
        d["verdict"].upper(),
        d.get("matches") or "-",
        _dial(inf),
        weight,
        _step(inf),
        silent,
        moved,
        _three(inf),
        _async(inf),
        why,
    ]


def _three(inf: dict) -> str:
    """The three-policy probe: the estimator, and what departs (in the graph, not 1 on-policy, what missing and
    non-finite rollout log-probabilities become)."""
    fit = inf.get("three_policy") or {}
    if not fit:
        return "-"
    parts = [fit.get("estimator") or "?"] + (["**in the graph**"] if fit.get("in_graph") else [])
    parts += [] if fit.get("on_policy_as_configured", fit.get("on_policy_weight_one")) else ["**≠ 1 on-policy**"]
    parts += [f"missing: {fit.get('missing')}", f"non-finite: {fit.get('non_finite')}"]
    if fit.get("support") in ("truncated", "other"):  # a truncating sampler's log-probabilities against the trainer's
        parts.append(f"**sampler: weighs its kept mass** ({(fit.get('settings') or {}).get('sampler')})")
    return "; ".join(parts)


def _async(inf: dict) -> str:
    """The asynchronous-groups probe: each case that departs, with its findings; else how many cases ran."""
    fit = inf.get("async_groups") or {}
    if not fit:
        return "-"
    cases = fit.get("cases") or {}
    bad = [f"{c}: {', '.join(v['problems'])}" for c, v in cases.items() if v.get("problems")]
    bad += [f"{c}: {v['outcome']}" for c, v in cases.items() if v["outcome"] == "crashed"]
    ran = sum(v["outcome"] == "trained" for v in cases.values())
    bad = ([f"whole groups: {', '.join(fit['calibration'])}"] if fit.get("calibration") else []) + bad
    clean = "as the identity" if fit.get("isolated", True) else "own baseline not judged"
    return "; ".join(f"**{b}**" for b in bad) or f"{clean} ({ran} of {len(CASE_NAMES)} cases run)"


def render(rows: list[dict]) -> str:
    """The markdown table: one line per (configuration, release), in the order given."""
    head = "| " + " | ".join(COLUMNS) + " |"
    lines = [head, "|" + "---|" * len(COLUMNS)]
    for row in rows:
        lines.append(f"| `{row['target']}` | {row['release'] or '-'} | {' | '.join(_cells(row))} | {_seconds(row)} |")
    return "\n".join(lines) + "\n"


def _cells(row: dict) -> list[str]:
    """:func:`cells`, or a line saying the row cannot be read (a report of another shape, by other code)."""
    try:
        return cells(row)
    except Exception as exc:  # a stored row is data: one unreadable row never costs the table
        return _without_report("unreadable row", f"{type(exc).__name__}: rerun this audit")


def _without_report(verdict: str, why: str) -> list[str]:
    """The cells of a row with no report to show: its verdict column, dashes, and why in the last."""
    return [verdict, *["-"] * (len(COLUMNS) - 5), why]  # target, release and seconds are not cells


def _seconds(row: dict) -> str:
    seconds = row.get("wall_seconds")
    return f"{seconds:.0f}" if isinstance(seconds, (int, float)) else "-"


def render_html(rows: list[dict], title: str) -> str:
    """One page of HTML: the same table, its verdicts coloured, the words in bold where the markdown has them."""

    def cell(text: str, tag: str = "td") -> str:
        inner = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", html.escape(text))
        inner = re.sub(r"`(.+?)`", r"<code>\1</code>", inner)
        return f"<{tag}>{inner}</{tag}>"

    head = "".join(cell(c, "th") for c in COLUMNS)
    body = []
    for row in rows:
        values = [f"`{row['target']}`", row["release"] or "-", *_cells(row), _seconds(row)]
        verdict = values[2].split()[0].lower()
        body.append(f'<tr class="{html.escape(verdict)}">' + "".join(cell(v) for v in values) + "</tr>")
    style = (
        "body{font-family:sans-serif;margin:1em}table{border-collapse:collapse;font-size:13px}"
        "td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}th{background:#f3f3f3;position:sticky;top:0}"
        "tr.pass td:nth-child(3){background:#d8f5d8}tr.deviation td:nth-child(3){background:#fff2c6}"
        "tr.fail td:nth-child(3){background:#f9d0d0}tr.adapter td:nth-child(3){background:#ddd}"
    )
    return (
        f'<!doctype html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{style}</style></head>\n<body><h1>{html.escape(title)}</h1>\n<table><thead><tr>{head}</tr></thead>"
        "<tbody>\n" + "\n".join(body) + "\n</tbody></table></body></html>\n"
    )
