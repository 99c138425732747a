"""Mutation testing of the math core and the checks (``make mutate``; not part of ``make test``/CI).

mutmut mutates a copy of the sources and imports it from that copy's folder, so the copy must
have the layout the package installs as: ``checks/`` under ``grpo_identity/`` (pyproject's
package-dir).  This script lays out that copy in ``build/mutate`` (files copied, not linked:
mutmut writes its mutants beside them), runs ``mutmut run`` there with the configuration of
pyproject's ``[tool.mutmut]`` (the modules to mutate, the fast tests that cover them), and prints
the kill rate per module and overall, and every surviving mutant.

    python scripts/mutate.py              # stage a fresh copy, run, summarise
    python scripts/mutate.py --resume     # go on with an unfinished run (same copy)
    python scripts/mutate.py --sample 5   # only the mutants numbered …5 in each function: a
                                          # systematic 1-in-10 sample, for a busy machine
    python scripts/mutate.py --only 'grpo_identity.dial.*'   # some mutants only (names or globs)
    python scripts/mutate.py --summary    # only summarise the last run
    python scripts/mutate.py --json FILE  # also write the summary as JSON

Run from the repository root.  Hypothesis runs derandomised (``HYPOTHESIS_PROFILE=ci``) so that
a mutant's verdict does not depend on the draw.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGE = ROOT / "build" / "mutate"
#: repository folder -> where it lives in the installed package
MAPPED = {
    "grpo_identity": "grpo_identity",
    "checks": "grpo_identity/checks",
    "proofs": "grpo_identity/proofs",
    "trainer": "grpo_identity/trainer",
}
#: mutmut's exit codes of a mutant run (its ``status_by_exit_code``), by what they mean here
KILLED, SURVIVED, TIMEOUT, NO_TESTS = {1, 3, 37}, {0}, {36, -24, 24, 152, 255}, {5, 33}


def stage() -> None:
    """Copy the sources into build/mutate in the installed layout, with the tests and pyproject."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
    if STAGE.exists():
        shutil.rmtree(STAGE)
    STAGE.mkdir(parents=True)
    for src, dest in MAPPED.items():
        shutil.copytree(ROOT / src, STAGE / dest, ignore=ignore, dirs_exist_ok=True)
    shutil.copytree(ROOT / "tests", STAGE / "tests", ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", STAGE / "pyproject.toml")


def run_mutmut(max_children: int | None, sample: str, only: list[str]) -> int:
    """``mutmut run`` in the copy; ``sample``: last digits of the mutant numbers to run ('' = all);
    ``only``: mutant names or globs to run (with ``sample``: both)."""
    env = {**os.environ, "HYPOTHESIS_PROFILE": "ci", "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", "mutmut", "run"] + ([f"--max-children={max_children}"] if max_children else [])
    cmd += [f"*__mutmut_*{d}" for d in sample]  # mutmut numbers the mutants of each function 1, 2, …
    cmd += only
    return subprocess.call(cmd, cwd=STAGE, env=env)


@dataclass
class ModuleResult:
    """The mutants of one module by outcome.  A timeout counts as a kill (the mutant made the tests
    hang); a mutant no selected test runs ("no tests") counts as a survivor."""

    killed: int = 0
    timeout: int = 0
    survived: int = 0
    no_tests: int = 0
    unjudged: int = 0
    """Not checked (an interrupted run) or an outcome mutmut calls suspicious."""
    survivors: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.killed + self.timeout + self.survived + self.no_tests + self.unjudged

    @property
    def kill_rate(self) -> float:
        judged = self.killed + self.timeout + self.survived + self.no_tests
        return (self.killed + self.timeout) / judged if judged else float("nan")


def results(sample: str = "") -> dict[str, ModuleResult]:
    """Per mutated module (dotted name), from mutmut's ``*.py.meta`` files; with ``sample``, only
    the mutants whose number ends in one of its digits."""
    out: dict[str, ModuleResult] = {}
    for meta in sorted((STAGE / "mutants").rglob("*.py.meta")):
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        r = ModuleResult()
        for name, code in sorted(codes.items()):
            if sample and name[-1] not in sample:
                continue
            if code in KILLED:
                r.killed += 1
            elif code in TIMEOUT:
                r.timeout += 1
            elif code in SURVIVED:
                r.survived += 1
                r.survivors.append(name)
            elif code in NO_TESTS:
                r.no_tests += 1
                r.survivors.append(f"{name} (no test runs it)")
            else:
                r.unjudged += 1
        out[str(meta.relative_to(STAGE / "mutants"))[: -len(".py.meta")].replace("/", ".")] = r
    return out


def print_summary(res: dict[str, ModuleResult]) -> None:
    """One row per module and one overall, then every survivor."""
    print(
        f"{'module':36} {'mutants':>8} {'killed':>7} {'timeout':>8} {'survived':>9} "
        f"{'no tests':>9} {'unjudged':>9} {'kill rate':>10}"
    )
    rows = list(res.items())
    total = ModuleResult(
        *(sum(getattr(r, f) for _, r in rows) for f in ("killed", "timeout", "survived", "no_tests", "unjudged"))
    )
    for module, r in rows + [("overall", total)]:
        print(
            f"{module:36} {r.total:>8} {r.killed:>7} {r.timeout:>8} {r.survived:>9} "
            f"{r.no_tests:>9} {r.unjudged:>9} {r.kill_rate:>10.1%}"
        )
    for _, r in rows:
        for name in r.survivors:
            print(f"survived: {name}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--resume", action="store_true", help="go on with the last, unfinished run on its copy (default: a fresh copy)"
    )
    ap.add_argument("--summary", action="store_true", help="only summarise the last run")
    ap.add_argument(
        "--max-children", type=int, default=None, help="parallel mutant runs (default: mutmut's, the CPU count)"
    )
    ap.add_argument(
        "--sample",
        default="",
        help="run only the mutants whose number ends in one of these digits (e.g. 5: one in ten)",
    )
    ap.add_argument(
        "--only",
        nargs="+",
        default=[],
        metavar="MUTANT",
        help="run only these mutants (names or globs, as the summary prints them)",
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the summary to this file")
    args = ap.parse_args(argv)
    if args.sample and not args.sample.isdigit():
        print(f"--sample takes digits, got {args.sample!r}", file=sys.stderr)
        return 2
    if not args.summary:
        if not (args.resume and (STAGE / "mutants").exists()):
            stage()
        rc = run_mutmut(args.max_children, args.sample, args.only)
        if rc != 0:
            print(f"mutmut run exited with {rc}", file=sys.stderr)
            return rc
    if not (STAGE / "mutants").exists():
        print("no mutation run to summarise: run `make mutate` first", file=sys.stderr)
        return 2
    res = results(args.sample)
    print_summary(res)
    if args.json:
        args.json.write_text(
            json.dumps({m: {**asdict(r), "total": r.total, "kill_rate": r.kill_rate} for m, r in res.items()}, indent=1)
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
