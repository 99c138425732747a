"""The claims the main job checks, and how one is reported: one :class:`Item` per claim (the paper's value, the
project's, a status), made by each domain's ``claims`` module and run by ``grpo-identity verify``
(:mod:`grpo_identity.app.verify`: the stages in order, then the report).

Each domain states its own claims where its code is: the proofs (:mod:`grpo_identity.proofs.claims`), the closed
forms, Big-Math and DAPO numbers (:mod:`grpo_identity.analysis.claims`), the audits
(:mod:`grpo_identity.checks.claims`), the controlled run and the stored LM runs
(:mod:`grpo_identity.trainer.claims`).  This module holds what they share, and the claims of the stored runs'
environments (:func:`stored_environments`).  A claim's function yields items; a slow one says what it runs now
(:func:`running`) for the progress bar.

>>> checked("closed forms", "w(0.5)", 2.0, 2.0, True).to_dict()["status"]
'pass'
>>> skipped("audits", "audit trl", "beyond the paper", "trl is not installed").ok is None
True
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from grpo_identity.foundation import EXTRAS

__all__ = [
    "Item",
    "Stage",
    "checked",
    "skipped",
    "running",
    "announcing",
    "not_stored",
    "stored_environments",
    "stored_count",
    "STORED_RESULTS",
    "TRAINER_EXTRA",
]

#: the stored runs of a source checkout (none beside a pip install: the items that read them say so)
STORED_RESULTS = Path(__file__).resolve().parents[1] / "results"
#: what a run of one's own needs installed
TRAINER_EXTRA = f"grpo-identity[{EXTRAS['torch']}]"


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


def checked(section: str, name: str, paper_value: Any, project: Any, ok: bool, note: str = "") -> Item:
    """A claim checked: ``pass`` where ``ok``, else ``fail``."""
    return Item(section, name, paper_value, project, "pass" if ok else "fail", note)


def skipped(section: str, name: str, paper_value: Any, why: str) -> Item:
    """A claim not checked here, and why (which extra to install, which run to store)."""
    return Item(section, name, paper_value, None, "skipped", why)


@dataclass
class Stage:
    """One stage of the job: its section name, the items it yields, how many it will yield."""

    name: str
    run: Callable[[], Iterable[Item]]
    expected: int


#: the hooks of the progress bar that runs now (set by :func:`announcing` while a bar runs)
_NOW: list[Callable[[str], None]] = []


def running(name: str) -> None:
    """Tell the progress bar, if one runs, which item a stage starts now (before a slow one)."""
    for hook in _NOW:
        hook(name)


@contextmanager
def announcing(hook: Callable[[str], None]) -> Iterator[None]:
    """While the block runs, :func:`running` hands each name to ``hook``."""
    _NOW.append(hook)
    try:
        yield
    finally:
        _NOW.remove(hook)


def not_stored(what: str, where: str, results: Path, command: str) -> str:
    """Why an item that reads a stored run has none.  In a checkout (``results/`` exists): the
    command that stores one there.  From a pip install there is no ``results/`` (the stored runs
    ship with the source checkout), and nothing may be written into the installed package: say
    so, and how a run of one's own is made."""
    if results.is_dir():
        return f"no {what} under {results.name}/{where}: {command} --out {results.name}/NAME stores one"
    return (
        f"the {what} ship with the source checkout, not the pip package: clone the repository and run verify "
        f"there (a run of your own: pip install '{TRAINER_EXTRA}', then {command} --out DIR)"
    )


def stored_environments(results: Path = STORED_RESULTS) -> Iterator[Item]:
    """One item per stored run ``results/*/``: the python and package versions it recorded against
    the running ones.  A difference is a note (status skipped), never a failure: the stored numbers
    were made with the recorded versions, and a rerun here may differ."""
    from grpo_identity import provenance

    here = provenance.environment()
    sec = "stored runs"
    if not results.is_dir():
        why = not_stored("stored runs", "*", results, "grpo-identity train lm")
        yield skipped(sec, "stored runs: recorded versions against this environment", "—", why)
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


def stored_count(results: Path = STORED_RESULTS) -> int:
    return max(1, len([p for p in results.iterdir() if p.is_dir()]) if results.is_dir() else 1)
