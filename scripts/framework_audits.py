"""Run the framework audits the documentation reports, and write their table from the audits' own output.

Every row of :data:`CASES` is one configuration, audited at each of its releases by the CLI
(``grpo-identity audit … --release R --json``), run in-process as a user's script or CI job would
run them: each release's environment is built first if missing, and its framework is imported
once, in a warm child that audits every configuration of that release afresh.  The releases are
shared out among ``--jobs`` worker processes (one per core by default), each release's audits in
one worker.  The JSON
of every audit and its wall time go to ``results/frameworks/audits.jsonl``, the command and the
versions that made them to ``results/frameworks/meta.json``; ``results/frameworks/table.md`` is
rendered from the audits alone; it is the one copy of the table: the site's
``docs/findings/frameworks.md`` includes it (``--8<-- "results/frameworks/table.md"``) and
``tests/app/test_packaging.py`` checks that it agrees with audits.jsonl.

    python scripts/framework_audits.py                 # every case (a few minutes on 2 cores)
    python scripts/framework_audits.py --only trl      # the cases whose target starts with trl
    python scripts/framework_audits.py --render-only   # re-render table.md from audits.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from grpo_identity.checks.frameworks.registry import FRAMEWORK_TABLE
from grpo_identity.checks.measure.arrival import CASES as CASE_NAMES

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "frameworks"
#: the page of the documentation site that includes table.md
DOCS_PAGE = ROOT / "docs" / "findings" / "frameworks.md"

#: (target and options as typed after ``grpo-identity audit``, releases): every framework's ``cases`` in its
#: registry row (:data:`grpo_identity.checks.frameworks.registry.FRAMEWORK_TABLE`), framework by framework
CASES: list[tuple[str, tuple[str, ...]]] = [case for entry in FRAMEWORK_TABLE.values() for case in entry.cases]


def run_case(target: str, release: str) -> dict:
    """One audit through the CLI, in this process; its JSON (or its usage error) and its wall time."""
    from grpo_identity.app.cli import main as cli

    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli(["audit", *target.split(), "--release", release, "--json"])
    seconds = time.perf_counter() - t0
    row = {"target": target, "release": release, "exit_code": code, "wall_seconds": round(seconds, 1)}
    if code in (0, 1) and out.getvalue().strip():
        row["report"] = json.loads(out.getvalue())
    else:
        lines = [ln for ln in err.getvalue().splitlines() if "error:" in ln] or err.getvalue().splitlines()
        row["error"] = (lines or [f"exit code {code}"])[-1]
    return row


def run_release(cases: list[tuple[str, str]]) -> list[dict]:
    """The audits of one release, in order (one warm child serves them all); a worker's task."""
    rows = []
    for target, release in cases:
        row = run_case(target, release)
        print(f"{row['wall_seconds']:6.1f} s  {target} @ {release}: {_cell(row)[0]}", flush=True)
        rows.append(row)
    return rows


def _run_all(todo: list[tuple[str, str]], jobs: int) -> list[dict]:
    """Every audit of ``todo``, each release's in one worker process, the largest releases first."""
    from concurrent.futures import ProcessPoolExecutor

    by_release: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for target, release in todo:
        by_release.setdefault((target.split()[0], release), []).append((target, release))
    groups = sorted(by_release.values(), key=len, reverse=True)
    if jobs == 1:
        return [row for group in groups for row in run_release(group)]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return [row for rows in pool.map(run_release, groups) for row in rows]


#: the paths whose code or pins make the audits (a change elsewhere, results/ or docs/, leaves them as they were)
CODE_PATHS = (
    "checks",
    "grpo_identity",
    "proofs",
    "trainer",
    "scripts",
    "pyproject.toml",
    "requirements.lock",
    "constraints.txt",
)


def provenance(argv: list[str]) -> dict:
    """The command and the versions that made the stored audits."""
    import platform
    from importlib.metadata import version

    def git(*args: str) -> str | None:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    # the code that made the rows is the commit's only where nothing under the code's paths differs or is new
    changed = git("status", "--porcelain", "--", *CODE_PATHS)
    packages = ("grpo-identity", "numpy", "torch", "hypothesis", "transformers")
    return {
        "command": " ".join(["python", "scripts/framework_audits.py", *argv]),
        "commit": commit or None,
        "uncommitted_changes": bool(changed) if commit and changed is not None else None,
        "python": platform.python_version(),
        "versions": {name: version(name) for name in packages},
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
    }


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


def _cell(row: dict) -> list[str]:
    """verdict, matches, dial, per-sample weight, the split step, silent groups, the off-policy importance
    weight, the three-policy probe, the first failing finding (else the first deviation another column does not
    show)."""
    if "report" not in row:
        why = row["error"].split("error: ", 1)[-1].replace("|", "/")
        return ["adapter error", *["-"] * 8, why if len(why) <= 160 else "…" + why[-159:]]
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
    """The markdown table: one line per (configuration, release), in the order run."""
    columns = ["audit (`grpo-identity audit …`)", "release", "verdict", "matches", "dial", "per-sample weight"]
    columns += ["optimizer step as split", "silent-group gradient", "off-policy weight", "three policies"]
    columns += ["asynchronous groups"]
    columns += ["first failing (else deviating) finding", "s"]
    head = "| " + " | ".join(columns) + " |"
    lines = [head, "|" + "---|" * len(columns)]
    for row in rows:
        cells = " | ".join(_cell(row))
        lines.append(f"| `{row['target']}` | {row['release']} | {cells} | {row['wall_seconds']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--only",
        metavar="PREFIX",
        help="run only the cases whose target starts with PREFIX (the others keep their rows)",
    )
    p.add_argument(
        "--render-only", action="store_true", help="render table.md from audits.jsonl without running anything"
    )
    # the table was once copied into README.md; the site includes table.md instead, so the option only
    # writes table.md (as every run does) and stays accepted for the scripts that pass it
    p.add_argument("--table", "--readme", dest="table", action="store_true", help="write table.md (every run does)")
    p.add_argument("--out", type=Path, default=OUT, help=f"folder of the results (default {OUT.relative_to(ROOT)})")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: one per core)")
    args = p.parse_args(argv)
    if args.jobs < 1:
        p.error(f"--jobs must be >= 1, got {args.jobs}")
    out_dir: Path = args.out
    out_dir.mkdir(parents=True, exist_ok=True)
    log = out_dir / "audits.jsonl"
    old = [json.loads(ln) for ln in log.read_text().splitlines() if ln.strip()] if log.is_file() else []
    if args.render_only:
        rows = old
    else:
        kept = {(r["target"], r["release"]): r for r in old}
        todo = [(t, r) for t, releases in CASES for r in releases if not args.only or t.startswith(args.only)]
        t_all = time.perf_counter()
        done = {(row["target"], row["release"]): row for row in _run_all(todo, args.jobs)}
        total = time.perf_counter() - t_all
        print(f"{total:6.1f} s  in all ({len(todo)} audits, {args.jobs} workers)", flush=True)
        rows = [
            done.get((t, r)) or kept[(t, r)]
            for t, releases in CASES
            for r in releases
            if (t, r) in done or (t, r) in kept
        ]
        log.write_text("".join(json.dumps(r) + "\n" for r in rows))
        meta = {**provenance(list(argv if argv is not None else sys.argv[1:])), "total_seconds": round(total, 1)}
        meta_file = out_dir / "meta.json"
        # with --only, the full run's record stays and the rows run again are recorded beside it, in place of an
        # earlier run of the same command (whose rows are gone)
        if args.only and meta_file.is_file():
            full = json.loads(meta_file.read_text())
            earlier = [r for r in full.get("reruns", []) if r.get("command") != meta["command"]]
            meta = {**full, "reruns": [*earlier, {**meta, "audits": len(todo)}]}
        meta_file.write_text(json.dumps(meta, indent=2) + "\n")
    table = render(rows)
    (out_dir / "table.md").write_text(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
