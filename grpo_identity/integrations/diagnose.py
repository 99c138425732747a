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
  the audit shows nothing). Beside a valid ``trainer_state.json``, a ``*.jsonl`` that is neither
  (say TRL's or a user's own completions dump) is ignored with a note, not an error;
* **a plain TRL run** (no callback of this project): TRL's own ``reward`` and
  ``frac_reward_zero_std`` in the same ``log_history``, compared with the silent fraction the
  identity predicts from the logged mean reward and the group size G
  (:mod:`grpo_identity.integrations.trl_logs`). G is not in ``trainer_state.json``: it is the
  ``group_size`` argument (``--G``), else the callback's logged ``identity/group_size``.

The page (inline SVG, no script, works offline) has one figure per question: silent fraction
measured vs predicted, share of update mass on extreme and medium prompts, deviation from the
identity, fidelity per difficulty band, recommended G against the G used; for a TRL log, the
logged zero-std fraction against the prediction, the mean reward and what the group size costs
in silent groups. A figure of a deviation draws the live audit's tolerance
(:data:`DEVIATION_TOL`) and its y-axis reaches at least :data:`TOL_HEADROOM` times it, so float
noise (1e-17) reads as 0, far under the tolerance, never as spikes.
"""

from __future__ import annotations

import html
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from grpo_identity import dial as D
from grpo_identity.checks.measure.properties import Tolerance
from grpo_identity.foundation import UsageError, write_text_atomic
from grpo_identity.integrations import trl_logs
from grpo_identity.integrations.metrics import BANDS, DEFAULT_EPS, PREFIX, SolveRateTracker, step_metrics

__all__ = [
    "FIGURES",
    "DEVIATION_TOL",
    "TOL_HEADROOM",
    "Run",
    "read_run",
    "read_series",
    "figure_limits",
    "figures",
    "page",
    "write_page",
]

#: the live audit's tolerance on an advantage's deviation, for float32 advantages (TRL's), relative
#: to the group's advantage scale (about 1 for standardised advantages); the one in the checks
DEVIATION_TOL = Tolerance.for_precision("float32").rtol
#: a deviation figure's y-axis reaches at least this many tolerances
TOL_HEADROOM = 5.0

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
    "trl_silent": (
        "Silent groups: TRL's frac_reward_zero_std against the identity's prediction",
        "fraction of groups",
        [
            ("frac_reward_zero_std", "logged by TRL"),
            ("silent_frac_model", "predicted: saturated share + (1 - share) f(mean reward)"),
            ("silent_frac_bound", "lower bound f(mean reward) = p^G + (1-p)^G"),
        ],
    ),
    "trl_reward": ("Mean reward logged by TRL", "reward", [("reward", "reward")]),
}
#: figures of a deviation: their tolerance line (legend, value)
TOLERANCES: dict[str, tuple[str, float]] = {
    "deviation": (f"tolerance {DEVIATION_TOL:g} (float32, x the group's advantage scale)", DEVIATION_TOL)
}
#: figures of a share or a fraction: y from 0 to 1
UNIT_Y = ("silent", "mass", "fidelity", "trl_silent")
Series = dict[str, list[tuple[float, float]]]


@dataclass
class Run:
    """What was read under LOGDIR: the series drawn, the TRL comparison (a TRL log) and the
    files left out, each with why."""

    series: Series
    trl: trl_logs.Comparison | None = None
    ignored: list[str] = field(default_factory=list)
    #: what the page could not show and the option that would show it (a TRL log without --G)
    notes: list[str] = field(default_factory=list)


def _files(path: Path) -> tuple[list[Path], list[Path]]:
    if path.is_file():
        return ([path], []) if path.name.endswith(".json") else ([], [path])
    if not path.is_dir():
        raise FileNotFoundError(f"LOGDIR {path} does not exist")
    return sorted(path.rglob("trainer_state.json")), sorted(path.rglob("*.jsonl"))


#: the longest line of a jsonl log that is read (a record of one step's groups is far below it)
MAX_LINE_BYTES = 16 << 20


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """The file's lines, read one at a time (a log of gigabytes is never held whole; a line past
    :data:`MAX_LINE_BYTES` or bytes that are not UTF-8 stop the reading at once, with the line's number)."""
    with open(path, "rb") as fh:
        n = 0
        while True:
            raw = fh.readline(MAX_LINE_BYTES + 3)  # room for the line's end, "\r\n"
            if not raw:
                return
            n += 1
            if len(raw.rstrip(b"\r\n")) > MAX_LINE_BYTES:
                raise UsageError(f"{path}:{n}: a line longer than {MAX_LINE_BYTES} bytes: not a log of records")
            try:
                yield n, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise UsageError(f"{path}:{n}: not UTF-8 text (byte {exc.start})") from None


#: the largest |step| read (a float64 holds every integer step up to 2**53 exactly)
MAX_STEP = 2**53


def _step(value: Any, where: str) -> float:
    """A record's ``step``: a finite number (not a boolean) of at most :data:`MAX_STEP`; one line naming
    ``where`` otherwise."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not (ok and abs(value) <= MAX_STEP):  # (NaN compares false; an int of any size compares)
        raise UsageError(f'{where}: "step" must be a finite number of at most {MAX_STEP:,}, got {value!r:.40}')
    return value


#: the largest group size a log may give (``identity/group_size``): the CLI's own bound on ``--G``
MAX_GROUP_SIZE = 1_000_000
#: the largest metric value drawn (a float64 of any size is drawn; an integer of more digits is not a metric)
MAX_METRIC = 1e300


def _is_number(v: Any) -> bool:
    """A logged value that is a finite number a float holds (a JSON integer may have any number of digits)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) <= MAX_METRIC


def _json(text: str, where: str) -> Any:
    """``text`` parsed as JSON; one line naming ``where`` for text that is not, or is nested too deeply."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where}: not JSON ({exc.msg})") from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise UsageError(f"{where}: not JSON that can be read ({str(exc).split(':')[0][:80]})") from None
    except RecursionError:
        raise UsageError(f"{where}: JSON nested too deeply to read") from None


def _records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for n, line in _lines(path):
        if line.strip():
            rec = _json(line, f"{path}:{n}")
            if not isinstance(rec, dict) or "step" not in rec:
                raise UsageError(f'{path}:{n}: a record must be a JSON object with a numeric "step"')
            _step(rec["step"], f"{path}:{n}")
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
        state = _json(path.read_text(encoding="utf-8"), str(path))
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not a JSON file ({exc})") from None
    if not isinstance(state, dict):
        raise UsageError(f"{path}: a trainer_state.json must hold a JSON object, got {type(state).__name__}")
    return state


def _global_step(path: Path) -> float:
    step = _state(path).get("global_step", 0)
    ok = isinstance(step, (int, float)) and not isinstance(step, bool) and abs(step) <= MAX_STEP
    return float(step) if ok else 0.0


def _log_history(path: Path) -> list[dict[str, Any]]:
    history = _state(path).get("log_history", [])
    if not isinstance(history, list) or not all(isinstance(e, dict) for e in history):
        raise UsageError(f'{path}: "log_history" must be a list of JSON objects')
    for i, e in enumerate(history):
        _step(e.get("step", 0), f"{path}: log_history[{i}]")
    return history


def _jsonl(path: Path) -> tuple[dict[float, dict[str, Any]], dict[float, list[tuple[str, dict[str, Any]]]]]:
    """One ``*.jsonl``: its identity metrics by step and its per-group rewards records by step."""
    metrics: dict[float, dict[str, Any]] = defaultdict(dict)
    groups: dict[float, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for n, rec in _records(path):
        if "rewards" in rec:
            groups[rec["step"]].append((f"{path.name}:{n}", rec))
        else:
            data = rec["data"] if isinstance(rec.get("data"), dict) else rec
            found = {k: v for k, v in data.items() if k.startswith(PREFIX)}
            if found:
                metrics[rec["step"]].update(found)
    return metrics, groups


#: the note of a TRL log whose group size nobody gave: its series are drawn, the prediction is not
NO_GROUP_SIZE = (
    "{state}: the group size is not recorded in trainer_state.json; pass --G (TRL's num_generations) for the "
    "identity's prediction of the silent fraction and the group-size cost"
)


def _group_size(by_step: dict[float, dict[str, Any]], group_size: int | None) -> tuple[int | None, str]:
    if group_size is not None:
        return int(group_size), "--G"
    logged = [m[PREFIX + "group_size"] for _, m in sorted(by_step.items()) if PREFIX + "group_size" in m]
    if logged and _is_number(logged[-1]) and 2 <= logged[-1] <= MAX_GROUP_SIZE:
        return int(logged[-1]), "identity/group_size logged by the callback"
    return None, ""


def read_run(
    path: str | Path, *, dial: D.Dial = D.GRPO, eps: float = DEFAULT_EPS, group_size: int | None = None
) -> Run:
    """Everything :func:`page` draws from ``path`` (see the module docstring)."""
    root = Path(path)
    states, jsonls = _files(root)
    by_step: dict[float, dict[str, Any]] = defaultdict(dict)
    history: list[dict[str, Any]] = []
    state = max(states, key=_global_step) if states else None
    if state is not None:
        history = _log_history(state)
        for e in history:
            by_step[e.get("step", 0)].update({k: v for k, v in e.items() if k.startswith(PREFIX)})
    ignored: list[str] = []
    groups: dict[float, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for f in jsonls:
        name = f.relative_to(root) if root.is_dir() else f.name
        try:
            metrics, mine = _jsonl(f)
            _from_groups(mine, dial, eps)  # each file checked on its own first
        except UsageError as exc:
            if state is None:
                raise
            reason = str(exc).replace(str(f), str(name))
            ignored.append(f"ignored {name}: not written by grpo-identity's callback ({reason})")
            continue
        if not metrics and not mine:
            ignored.append(f"ignored {name}: no identity/ metrics and no per-group rewards records")
        for step, m in metrics.items():
            by_step[step].update(m)
        for step, recs in mine.items():
            groups[step].extend(recs)
    for step, m in _from_groups(groups, dial, eps).items():
        by_step[step].update(m)
    series: Series = defaultdict(list)
    for step in sorted(by_step):
        for k, v in by_step[step].items():
            if _is_number(v):
                series[k[len(PREFIX) :]].append((float(step), float(v)))
    comparison, notes = None, []
    if state is not None and trl_logs.logged_steps(history):
        G, source = _group_size(by_step, group_size)
        if G is None:
            notes.append(NO_GROUP_SIZE.format(state=state.name))
            for logged in trl_logs.logged_steps(history):
                _add(series, "reward", logged.step, logged.reward)
                _add(series, "frac_reward_zero_std", logged.step, logged.frac_zero_std)
        else:
            comparison = trl_logs.compare(history, G, source=source, eps=eps)
    if comparison is not None:
        for i, s in enumerate(comparison.steps):
            _add(series, "reward", s.step, s.reward)
            _add(series, "frac_reward_zero_std", s.step, s.frac_zero_std)
            _add(series, "silent_frac_bound", s.step, comparison.bound[i])
            _add(series, "silent_frac_model", s.step, comparison.model[i])
    if not series:
        raise UsageError(f"no identity/ metrics, no per-group rewards and no TRL reward metrics under {path}")
    return Run(dict(series), comparison, ignored, notes)


def _add(series: Series, name: str, step: float, value: float | None) -> None:
    if value is not None and np.isfinite(value):
        series[name].append((float(step), float(value)))


def read_series(path: str | Path, *, dial: D.Dial = D.GRPO, eps: float = DEFAULT_EPS) -> Series:
    """Every ``identity/`` metric found under ``path`` as {name without the prefix: [(step, value)]}, by step."""
    return read_run(path, dial=dial, eps=eps).series


def figure_limits(fid: str, lines: list[tuple[str, list[tuple[float, float]]]]) -> tuple[float, float]:
    """The y-limits of figure ``fid``: [0, 1] for a fraction; for a deviation at least
    [0, TOL_HEADROOM × tolerance], so float noise sits at the bottom under the tolerance line;
    else the data's range from 0 (or below)."""
    ys = [y for _, ps in lines for _, y in ps]
    lo, hi = min(0.0, min(ys)), max(ys)
    if fid in UNIT_Y:
        lo, hi = min(lo, 0.0), max(hi, 1.0)
    if fid in TOLERANCES:
        hi = max(hi, TOL_HEADROOM * TOLERANCES[fid][1])
    return lo, (hi if hi > lo else lo + 1.0)


_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")


def _svg(
    lines: list[tuple[str, list[tuple[float, float]]]],
    ylabel: str,
    ylim: tuple[float, float],
    tolerance: tuple[str, float] | None = None,
    w: int = 640,
    h: int = 260,
) -> str:
    """A line chart: one polyline per (legend, points) over ``ylim``, axes labelled with their
    ranges; ``tolerance`` (legend, value) a dashed horizontal line."""
    pts = [p for _, ps in lines for p in ps]
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    (y0, y1), x1 = ylim, (x1 if x1 > x0 else x0 + 1)
    L, R, T, B = 60, 20, 20, 40
    sx = lambda x: L + (x - x0) / (x1 - x0) * (w - L - R)
    sy = lambda y: h - B - (y - y0) / (y1 - y0) * (h - T - B)
    e = html.escape
    extra = 1 if tolerance else 0
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h + 20 * (len(lines) + extra)}" '
        f'role="img" data-ylim="{y0:.6g} {y1:.6g}">',
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
    if tolerance:
        legend, tol = tolerance
        out.append(
            f'<line class="tolerance" data-value="{tol:g}" x1="{L}" y1="{sy(tol):.1f}" x2="{w - R}" y2="{sy(tol):.1f}" '
            'stroke="#555" stroke-dasharray="6 4"/>'
        )
        out.append(
            f'<text x="{L + 10}" y="{h + 14 + 20 * len(lines)}" font-size="12" fill="#555">- - {e(legend)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def figures(series: Series) -> dict[str, dict[str, Any]]:
    """The figures :func:`page` draws, by id: title, y label, lines, y-limits, tolerance."""
    out = {}
    for fid, (heading, ylabel, wanted) in FIGURES.items():
        lines = [(legend, series[k]) for k, legend in wanted if series.get(k)]
        if lines:
            tol = TOLERANCES.get(fid)
            out[fid] = {
                "title": heading,
                "ylabel": ylabel,
                "lines": lines,
                "ylim": list(figure_limits(fid, lines)),
                "tolerance": tol[1] if tol else None,
            }
    return out


def _trl_section(c: trl_logs.Comparison) -> str:
    e = html.escape
    pct = lambda x: "—" if x is None else f"{100 * x:.1f} %"
    rho = "not logged" if c.saturated_share is None else f"{100 * c.saturated_share:.0f} %"
    rows = "".join(
        f"<tr><td>{r.G}</td><td>{e(r.label)}</td><td>{pct(r.silent_bound)}</td><td>{pct(r.silent_model)}</td>"
        f"<td>{r.wasted_rollouts:.2f}</td><td>{'—' if r.fidelity is None else f'{r.fidelity:.3f}'}</td></tr>"
        for r in c.cost
    )
    notes = "".join(f"<li>{e(n)}</li>" for n in c.notes)
    table = (
        "<table><tr><th>G</th><th></th><th>silent, all prompts at the mean</th><th>silent, with saturated "
        f"prompts</th><th>rollouts per prompt on silent groups</th><th>fidelity at the mean</th></tr>{rows}</table>"
        if rows
        else ""  # a mean reward outside [0, 1]: no prediction, a note says why
    )
    return (
        f'<section id="trl"><h2>What the group size costs</h2><p>G = {c.group_size} ({e(c.group_size_source)}); '
        f"mean reward over the run {c.mean_reward:.3f}; saturated share of prompts (always or never solved, "
        f"fitted to TRL's frac_reward_zero_std) {rho}. The prediction assumes binary rewards drawn independently "
        "within a group; each step's model value uses the share fitted on the steps before it.</p>"
        + table
        + (f"<ul>{notes}</ul>" if notes else "")
        + "</section>"
    )


def page(series: Series, title: str = "grpo-identity diagnose", run: Run | None = None) -> str:
    """The HTML page: one figure per entry of :data:`FIGURES` that has data, the TRL cost table
    and the files left out (``run``)."""
    e = html.escape
    body = []
    for fid, f in figures(series).items():
        svg = _svg(f["lines"], f["ylabel"], tuple(f["ylim"]), TOLERANCES.get(fid))
        body.append(f'<figure id="{fid}"><figcaption>{e(f["title"])}</figcaption>{svg}</figure>')
    if run is not None and run.trl is not None:
        body.append(_trl_section(run.trl))
    if run is not None and run.notes:
        body.append('<ul id="notes">' + "".join(f"<li>{e(n)}</li>" for n in run.notes) + "</ul>")
    if run is not None and run.ignored:
        body.append('<ul id="ignored">' + "".join(f"<li>{e(n)}</li>" for n in run.ignored) + "</ul>")
    steps = sorted({s for ps in series.values() for s, _ in ps})
    metrics = e(", ".join(sorted(series)))
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>'
        "<style>body{font-family:sans-serif;max-width:720px;margin:2em auto}"
        "figure{margin:1.5em 0}figcaption{font-weight:bold;margin-bottom:.4em}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}</style>"
        f"</head><body><h1>{e(title)}</h1>"
        f'<p id="summary">{len(steps)} steps ({steps[0]:g} to {steps[-1]:g}); metrics: {metrics}</p>'
        + "".join(body)
        + "</body></html>\n"
    )


def write_page(series: Series, out: str | Path, title: str = "grpo-identity diagnose", run: Run | None = None) -> Path:
    """Write :func:`page` to ``out`` atomically (a temporary file renamed into place)."""
    target = Path(out)
    if target.is_dir():
        raise UsageError(f"--out {out} is a directory")
    if not target.parent.is_dir():
        raise UsageError(f"--out {out}: folder {target.parent} does not exist")
    write_text_atomic(target, page(series, title, run))  # never a device, FIFO or link; no guessable partial name
    return target
