"""The offline reader: live diagnostics read back from a run's logs, drawn into one HTML page.

What is read under LOGDIR (a folder, searched recursively, or one file):

* ``trainer_state.json`` (what a transformers / TRL trainer saves with each checkpoint; the
  latest one is used): the ``identity/…`` entries of its ``log_history``;
* ``*.jsonl``, one JSON object a line, each either a metrics record — ``{"step": 3,
  "identity/silent_frac": 0.4, …}`` or verl's file logger's ``{"step": 3, "data": {…}}`` — or a
  **per-group rewards** record that any trainer can dump, ``{"step": 3, "prompt": "…",
  "rewards": [1, 0, 0, 1], "advantages": [...]}`` (``prompt`` and ``advantages`` optional). From
  those the metrics are computed here with :func:`~grpo_identity.integrations.metrics.step_metrics`
  (the steps in order, one solve-rate tracker; without advantages the dial's own are used, so
  the audit shows nothing).

The page (inline SVG, no script, works offline) has one figure per question: silent fraction
measured vs predicted, share of update mass on extreme and medium prompts, deviation from the
identity, fidelity per difficulty band, recommended G against the G used.
"""

from __future__ import annotations

import html
import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from grpo_identity import dial as D
from grpo_identity.foundation import UsageError
from grpo_identity.integrations.metrics import BANDS, DEFAULT_EPS, PREFIX, SolveRateTracker, step_metrics

__all__ = ["FIGURES", "read_series", "page", "write_page"]

#: figure id -> (title, y label, [(metric without the prefix, legend)])
FIGURES: dict[str, tuple[str, str, list[tuple[str, str]]]] = {
    "silent": (
        "Silent fraction: measured vs predicted p^G + (1-p)^G",
        "fraction of groups",
        [("silent_frac", "measured"), ("silent_frac_pred", "predicted")],
    ),
    "mass": (
        "Share of update mass",
        "share",
        [("mass_share_extreme", "extreme (p < 0.1 or > 0.9)"), ("mass_share_medium", "medium (0.4 to 0.6)")],
    ),
    "deviation": (
        "Deviation from the identity of the configured method",
        "absolute deviation",
        [
            ("coef_dev_max", "coefficient, max"),
            ("coef_dev_mean", "coefficient, mean"),
            ("adv_dev_max", "advantage, max"),
        ],
    ),
    "fidelity": ("Fidelity of the current G per difficulty band", "fidelity", [(f"fidelity/{b}", b) for b in BANDS]),
    "group_size": ("Recommended G against the G used", "G", [("recommended_G", "recommended"), ("group_size", "used")]),
}
Series = dict[str, list[tuple[float, float]]]


def _files(path: Path) -> tuple[list[Path], list[Path]]:
    if path.is_file():
        return ([path], []) if path.name.endswith(".json") else ([], [path])
    if not path.is_dir():
        raise FileNotFoundError(f"LOGDIR {path} does not exist")
    return sorted(path.rglob("trainer_state.json")), sorted(path.rglob("*.jsonl"))


def _records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{path}:{n}: not JSON ({exc.msg})") from None
            if not isinstance(rec, dict) or not isinstance(rec.get("step"), (int, float)):
                raise UsageError(f'{path}:{n}: a record must be a JSON object with a numeric "step"')
            yield n, rec


def _from_groups(
    groups: dict[float, list[tuple[str, dict[str, Any]]]], dial: D.Dial, eps: float
) -> dict[float, dict[str, float]]:
    """Metrics per step from per-group rewards records (steps in order, one tracker)."""
    tracker, out = SolveRateTracker(), {}
    for step in sorted(groups):
        recs = groups[step]
        bad = next(((w, r) for w, r in recs if not isinstance(r["rewards"], list)), None)
        if bad is not None:
            raise UsageError(
                f'{bad[0]}: step {step:g}: "rewards" must be a list of numbers, got {type(bad[1]["rewards"]).__name__}'
            )
        sizes = {len(r["rewards"]) for _, r in recs}
        if len(sizes) != 1:
            raise UsageError(f"step {step:g}: groups of different sizes {sorted(sizes)} (one G per step)")
        G = sizes.pop()
        try:
            rewards = np.array([r["rewards"] for _, r in recs], dtype=np.float64)  # (n, G)
            adv = np.array(
                [
                    r["advantages"]
                    if "advantages" in r
                    else D.advantages(np.asarray(r["rewards"], dtype=np.float64), G, dial)
                    for _, r in recs
                ],
                dtype=np.float64,
            )
        except (TypeError, ValueError) as exc:
            raise UsageError(
                f"{recs[0][0]}: step {step:g}: rewards and advantages must be lists of {G} numbers ({exc})"
            ) from None
        if adv.shape != rewards.shape or not np.all(np.isfinite(rewards)):
            raise UsageError(
                f"{recs[0][0]}: step {step:g}: every group needs {G} finite rewards and as many advantages"
            )
        prompts = [str(r.get("prompt", f"{where}#{i}")) for i, (where, r) in enumerate(recs)]
        out[step] = step_metrics(
            rewards.reshape(-1), adv.reshape(-1), G, dial, prompts=prompts, tracker=tracker, eps=eps
        ).metrics
    return out


def _state(path: Path) -> dict[str, Any]:
    """A trainer_state.json as a dict; anything else is one line naming the file."""
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not a JSON file ({exc})") from None
    if not isinstance(state, dict):
        raise UsageError(f"{path}: a trainer_state.json must hold a JSON object, got {type(state).__name__}")
    return state


def _global_step(path: Path) -> float:
    step = _state(path).get("global_step", 0)
    return float(step) if isinstance(step, (int, float)) else 0.0


def _log_history(path: Path) -> list[dict[str, Any]]:
    history = _state(path).get("log_history", [])
    if not isinstance(history, list) or not all(isinstance(e, dict) for e in history):
        raise UsageError(f'{path}: "log_history" must be a list of JSON objects')
    return history


def read_series(path: str | Path, *, dial: D.Dial = D.GRPO, eps: float = DEFAULT_EPS) -> Series:
    """Every ``identity/`` metric found under ``path`` as {name without the prefix: [(step, value)]}, by step."""
    states, jsonls = _files(Path(path))
    by_step: dict[float, dict[str, float]] = defaultdict(dict)
    if states:
        for e in _log_history(max(states, key=_global_step)):
            by_step[e.get("step", 0)].update({k: v for k, v in e.items() if k.startswith(PREFIX)})
    groups: dict[float, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for f in jsonls:
        for n, rec in _records(f):
            if "rewards" in rec:
                groups[rec["step"]].append((f"{f.name}:{n}", rec))
            else:
                data = rec["data"] if isinstance(rec.get("data"), dict) else rec
                by_step[rec["step"]].update({k: v for k, v in data.items() if k.startswith(PREFIX)})
    for step, m in _from_groups(groups, dial, eps).items():
        by_step[step].update(m)
    series: Series = defaultdict(list)
    for step in sorted(by_step):
        for k, v in by_step[step].items():
            if isinstance(v, (int, float)) and np.isfinite(v):
                series[k[len(PREFIX) :]].append((float(step), float(v)))
    if not series:
        raise UsageError(f"no identity/ metrics and no per-group rewards under {path}")
    return dict(series)


_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")


def _svg(lines: list[tuple[str, list[tuple[float, float]]]], ylabel: str, w: int = 640, h: int = 260) -> str:
    """A line chart: one polyline per (legend, points), axes labelled with their ranges."""
    pts = [p for _, ps in lines for p in ps]
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(0.0, min(p[1] for p in pts)), max(p[1] for p in pts)
    x1, y1 = (x1 if x1 > x0 else x0 + 1), (y1 if y1 > y0 else y0 + 1)
    L, R, T, B = 60, 20, 20, 40
    sx = lambda x: L + (x - x0) / (x1 - x0) * (w - L - R)
    sy = lambda y: h - B - (y - y0) / (y1 - y0) * (h - T - B)
    e = html.escape
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h + 20 * len(lines)}" role="img">',
        f'<line x1="{L}" y1="{h - B}" x2="{w - R}" y2="{h - B}" stroke="#333"/>',
        f'<line x1="{L}" y1="{T}" x2="{L}" y2="{h - B}" stroke="#333"/>',
        f'<text x="{L}" y="{h - B + 16}" font-size="11">step {x0:g}</text>',
        f'<text x="{w - R}" y="{h - B + 16}" font-size="11" text-anchor="end">{x1:g}</text>',
        f'<text x="{L - 4}" y="{h - B}" font-size="11" text-anchor="end">{y0:.3g}</text>',
        f'<text x="{L - 4}" y="{T + 8}" font-size="11" text-anchor="end">{y1:.3g}</text>',
        f'<text x="14" y="{(T + h - B) / 2}" font-size="11" transform="rotate(-90 14 {(T + h - B) / 2})" '
        f'text-anchor="middle">{e(ylabel)}</text>',
    ]
    for i, (legend, ps) in enumerate(lines):
        c = _COLOURS[i % len(_COLOURS)]
        points = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in ps)
        out.append(
            f'<polyline class="series" data-name="{e(legend)}" fill="none" stroke="{c}" stroke-width="2" '
            f'points="{points}"/>'
        )
        out.append(f'<text x="{L + 10}" y="{h + 14 + 20 * i}" font-size="12" fill="{c}">— {e(legend)}</text>')
    out.append("</svg>")
    return "".join(out)


def page(series: Series, title: str = "grpo-identity diagnose") -> str:
    """The HTML page: one figure per entry of :data:`FIGURES` that has data."""
    e = html.escape
    body = []
    for fid, (heading, ylabel, wanted) in FIGURES.items():
        lines = [(legend, series[k]) for k, legend in wanted if series.get(k)]
        if lines:
            body.append(f'<figure id="{fid}"><figcaption>{e(heading)}</figcaption>{_svg(lines, ylabel)}</figure>')
    steps = sorted({s for ps in series.values() for s, _ in ps})
    metrics = e(", ".join(sorted(series)))
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>'
        "<style>body{font-family:sans-serif;max-width:720px;margin:2em auto}"
        "figure{margin:1.5em 0}figcaption{font-weight:bold;margin-bottom:.4em}</style>"
        f"</head><body><h1>{e(title)}</h1>"
        f'<p id="summary">{len(steps)} steps ({steps[0]:g} to {steps[-1]:g}); metrics: {metrics}</p>'
        + "".join(body)
        + "</body></html>\n"
    )


def write_page(series: Series, out: str | Path, title: str = "grpo-identity diagnose") -> Path:
    """Write :func:`page` to ``out`` atomically (a temporary file renamed into place)."""
    target = Path(out)
    if target.is_dir():
        raise UsageError(f"--out {out} is a directory")
    if not target.parent.is_dir():
        raise UsageError(f"--out {out}: folder {target.parent} does not exist")
    tmp = target.with_name(f".{target.name}.partial")
    tmp.write_text(page(series, title), encoding="utf-8")
    tmp.replace(target)
    return target
