"""Test packs a framework's maintainers can merge (``grpo-identity export-tests``): one optimizer step of a
configuration against the update its loss type's objective defines, as one self-contained pytest file.

The exporter runs the framework's split step through its driver (:mod:`grpo_identity.checks.measure.steps`: the probe's
answers, the trainer's own micro-batches and accumulation) to learn which answers the trainer puts into its
first optimizer step and which of their tokens the loss holds.  The reference is computed here, not read from
the framework: each answer's advantage from the one advantage implementation (:mod:`grpo_identity.dial`, the
point that reproduces the release's advantages on the probe), its weight from the loss type's documented
objective (:func:`grpo_identity.objectives.step_weights`), and the coefficient −∂loss/∂log π of each loss token
is their product, stored as literals with how they were derived.  The file is the framework's harness
(:mod:`grpo_identity.checks.frameworks.exported`) with that case written in: it imports pytest, torch and the
framework only, and fails where the trainer's step departs from the objective (a shared factor included, which
no comparison of the framework with itself can see).
"""

from __future__ import annotations

import datetime
import importlib.resources
import pprint
import textwrap
from dataclasses import dataclass
from typing import Any

import numpy as np

from grpo_identity.foundation import UsageError

__all__ = ["HARNESSES", "CASE_LINE", "Exported", "export_tests", "build_case", "fit_dial", "render"]

#: frameworks with an exported test: their runner under checks/frameworks/exported, and the modules it needs
HARNESSES: dict[str, tuple[str, tuple[str, ...]]] = {
    "trl": ("trl.py", ("torch", "trl")),
    "verl": ("verl.py", ("torch", "verl")),
    "openrlhf": ("openrlhf.py", ("torch", "openrlhf")),
}
#: the settings that make a framework's step one process (an exported test runs one), each set where the user set
#: it not (OpenRLHF: the driver's default split on one rank, whose batch sizes the user's may replace)
ONE_PROCESS: dict[str, tuple[tuple[str, str], ...]] = {
    "trl": (("num_processes", "1"),),
    "verl": (("trainer.n_gpus_per_node", "1"), ("trainer.nnodes", "1")),
    "openrlhf": (
        ("rollout.batch_size", "4"),
        ("rollout.micro_batch_size", "2"),
        ("train.batch_size", "8"),
        ("train.micro_batch_size", "2"),
        ("actor.num_nodes", "1"),
        ("actor.num_gpus_per_node", "1"),
    ),
}
#: the runner's line the case is written into
CASE_LINE = "CASE: dict[str, Any] = {}  # the exporter writes the case here"
#: the checks every test pack runs (checks/frameworks/exported/_check.py), from the line after this one
CHECKS_MARKER = "# --- exported: the checks ---"
#: the last words of the settings that count processes (what a refusal asks to set to 1)
_PROCESS_WORDS = ("num_processes", "n_gpus_per_node", "nnodes", "num_nodes", "num_gpus_per_node")
#: how close the dial's advantages must come to the release's on the probe (float32 advantages)
ADVANTAGE_TOL = 1e-5


@dataclass
class Exported:
    """What an export wrote, and what was measured here on the way."""

    path: str
    framework: str
    release: str
    objective: str
    dial: str
    rows: int
    """Answers of the optimizer step the file checks."""
    factor: float
    """The step's factor as measured here (1: the exported test passes on this release)."""
    command: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def format(self) -> str:
        verdict = (
            "passes on this release"
            if abs(self.factor - 1.0) <= 1e-3
            else f"FAILS on this release: its first optimizer step is {self.factor:.4g}× the objective"
        )
        return (
            f"wrote {self.path}: {self.framework} {self.release}, one optimizer step of {self.rows} answers against "
            f"the objective {self.objective} (advantages: {self.dial}); measured here, the test {verdict}\n"
            f"run it with: pytest {self.path}"
        )


def export_tests(spec: Any, options: Any, out: str, command: str) -> Exported:
    """Run ``spec``'s split step (in its release environment where it names one), compute the reference and
    write the test file ``out`` atomically.  A framework without a harness, a configuration without a step or a
    documented objective, and advantages no dial point reproduces are usage errors."""
    from grpo_identity.checks.auditor import open_target
    from grpo_identity.checks.frameworks import RESPONSE_LENGTH
    from grpo_identity.checks.measure import steps
    from grpo_identity.foundation import check_writable, write_text_atomic

    if spec.framework not in HARNESSES:
        raise UsageError(
            f"export-tests writes test packs for {', '.join(HARNESSES)}; {spec.framework} has none yet "
            f"(grpo-identity audit {spec.framework} runs the same checks here)"
        )
    check_writable(out)
    with open_target(one_process(spec), options) as (target, _release):
        info = dict(getattr(target, "info", {}) or {})
        geo = info.get("step") or {}
        _check_exportable(spec, geo, info)
        design = steps.design(geo, RESPONSE_LENGTH)
        run = steps.run_layout(target, design, "split")
    case, factor = build_case(run, design, geo, RESPONSE_LENGTH, HARNESSES[spec.framework][1])
    release = str(geo["export"].get("release") or info.get("version") or "?")
    text = render(spec.framework, case, command, release)
    write_text_atomic(out, text)
    return Exported(out, spec.framework, release, case["objective"]["name"], case["dial"], len(case["expected"]),
                    factor, command)  # fmt: skip


def _check_exportable(spec: Any, geo: dict[str, Any], info: dict[str, Any]) -> None:
    """The step can be exported: the driver runs it, its loss setting has a documented objective, one process."""
    recipe = geo.get("export")
    where = f"{spec.framework} {info.get('version', '')}".strip()
    if not geo or recipe is None:
        why = info.get("step_unavailable") or "this release's driver runs no optimizer step to export"
        raise UsageError(f"{where}: {why}")
    if not geo.get("objective"):
        raise UsageError(
            f"{where}: no documented objective is written down for this loss setting ({spec.describe()}), so there "
            "is no reference to export; grpo-identity audit runs the split-step checks"
        )
    if int(recipe.get("processes", 1)) != 1:
        keys = " and ".join(f"{k}=1" for k, v in ONE_PROCESS[spec.framework] if k.endswith(_PROCESS_WORDS) and v == "1")
        raise UsageError(f"export-tests writes a one-process test of the step: set {keys}")


def one_process(spec: Any) -> Any:
    """``spec`` with each of :data:`ONE_PROCESS`'s settings the user did not set (by ``--set`` or in the config
    file), before the user's (a user's own setting wins, and a number of processes other than 1 is refused)."""
    import dataclasses

    mine = {k.lstrip("-") for k, _ in spec.sets} | _file_keys(spec.config)
    added = tuple((k, v) for k, v in ONE_PROCESS.get(spec.framework, ()) if k not in mine)
    return dataclasses.replace(spec, sets=(*added, *spec.sets)) if added else spec


def _file_keys(path: str | None) -> set[str]:
    """The dotted keys of a YAML config file's settings (none without a file)."""
    if not path:
        return set()
    import yaml

    with open(path) as fh:
        loaded = yaml.safe_load(fh)

    def leaves(node: Any, prefix: str = "") -> set[str]:
        if not isinstance(node, dict):
            return {prefix[:-1]} if prefix else set()
        return {k for key, value in node.items() for k in leaves(value, f"{prefix}{key}.")}

    return leaves(loaded)


def fit_dial(rewards: np.ndarray, advantages: np.ndarray, G: int, batches: np.ndarray) -> Any:
    """The dial point whose advantages, computed batch by batch (``batches``: each row's generation batch, the
    batch a batch-wide std is taken over), come closest to ``advantages``, among the presets and each preset with
    the batch's std or none, if within :data:`ADVANTAGE_TOL` (presets that reproduce them equally well: the
    first); None where none does."""
    from grpo_identity import dial as D

    scale = max(1.0, float(np.abs(advantages).max()))
    best, best_error = None, ADVANTAGE_TOL * scale
    for base in D.PRESETS.values():
        for changed in ({}, {"scale": "batch_std"}, {"scale": "none"}):
            point = base.replace(**changed) if changed else base
            if changed and point.same_point(base):
                continue
            error = float(np.abs(dial_advantages(point, rewards, G, batches) - advantages).max())
            if error <= best_error and (best is None or error < best_error):
                best, best_error = point, error
    return best


def dial_advantages(point: Any, rewards: np.ndarray, G: int, batches: np.ndarray) -> np.ndarray:
    """``point``'s advantages of every row, each generation batch on its own (groups of G contiguous rows)."""
    from grpo_identity import dial as D

    out = np.zeros(len(rewards))
    groups = np.arange(len(rewards)) // G
    for b in np.unique(batches):
        inside = batches == b
        out[inside] = D.advantages(rewards[inside], dial=point, group_ids=groups[inside])
    return out


def build_case(
    run: Any, design: Any, geo: dict[str, Any], width: int, requires: tuple[str, ...] = ()
) -> tuple[dict[str, Any], float]:
    """The case of an exported test (what its ``CASE`` holds; ``requires``: the modules it needs), and optimizer
    step 0's factor as measured in ``run`` (the median of the measured coefficient over the reference one)."""
    from grpo_identity.objectives import OBJECTIVES, step_weights

    G, objective = int(design.group_size), dict(geo["objective"])
    batches = run.where["generation"]
    point = fit_dial(design.rewards, run.advantages, G, batches)
    if point is None:
        raise UsageError(
            "the advantages of this configuration match no point of the dial (a preset, or one with the batch's std "
            "or none): audit them first (grpo-identity audit … --level advantage)"
        )
    A = dial_advantages(point, design.rewards, G, batches)
    budget = float(objective.get("budget") or 1)
    groups = np.arange(len(A)) // G
    w = step_weights(objective["name"], run.where["step"], run.where["micro_batch"], run.loss_tokens, budget, groups)
    first = np.flatnonzero(run.where["step"] == 0)
    expected = {
        int(i): {
            "group": int(groups[i]),
            "reward": float(design.rewards[i]),
            "tokens": int(run.loss_tokens[i]),
            "advantage": float(A[i]),
            "weight": float(w[i]),
            "coefficient": float(A[i] * w[i]),
        }
        for i in first
    }
    live = [i for i in first if A[i] * w[i] != 0 and run.loss_tokens[i] > 0]
    if not live:
        raise UsageError(
            f"no answer of the first optimizer step carries a nonzero coefficient (rewards "
            f"{[float(design.rewards[i]) for i in first]}): nothing to check; give the step more answers per group"
        )
    factor = float(np.median([run.a[i] / (A[i] * w[i]) for i in live]))
    o = OBJECTIVES[objective["name"]]
    recipe = {k: v for k, v in geo["export"].items() if k not in ("processes", "release")}
    case = {
        "requires": list(requires),
        **recipe,
        "group_size": G,
        "width": int(width),
        "rewards": [float(r) for r in design.rewards],
        "lengths": [int(n) for n in design.lengths],
        "truncated": [bool(t) for t in design.truncated],
        "holes": [int(h) for h in design.holes],
        "objective": {
            "name": o.name,
            "formula": o.formula,
            "source": o.source,
            "setting": objective.get("setting"),
            "documented": objective.get("documented"),
            "budget": budget,
        },
        "dial": _described(point),
        "expected": expected,
    }
    return case, factor


def _described(point: Any) -> str:
    p = point.params()
    centre = {"mean": "r − mean(group)", "loo": "r − mean(others)", "none": "r"}[p["centre"]]
    scale = {"group_std": "the group's std", "batch_std": "the generation batch's std", "none": "1"}[p["scale"]]
    words = f"({centre}) / ({scale}" + (f" + {p['eps']:g})" if p["scale"] != "none" and p["eps"] else ")")
    if p["scale"] != "none":
        words += f", std with ddof {p['ddof']}"
    return f"{point.name}: {words}" if point.name != "custom" else words


def render(framework: str, case: dict[str, Any], command: str, release: str) -> str:
    """The test file: a header saying where it came from and how the reference was derived, then the harness
    with ``case`` written into its ``CASE`` line."""
    from grpo_identity import __version__

    folder = importlib.resources.files("grpo_identity.checks.frameworks.exported")
    runner = folder.joinpath(HARNESSES[framework][0]).read_text(encoding="utf-8")
    checks = folder.joinpath("_check.py").read_text(encoding="utf-8")
    if runner.count(CASE_LINE) != 1 or checks.count(CHECKS_MARKER) != 1:
        raise RuntimeError(f"the {framework} runner has no single case line, or the checks no marker")
    literal = pprint.pformat(case, width=112, sort_dicts=False)
    o = case["objective"]
    step = list(case["expected"].values())
    said = [
        f"Exported by grpo-identity {__version__} on {datetime.date.today().isoformat()} for {framework} {release}:",
        f"  {command}",
        "One optimizer step of this configuration against the update its loss type's objective defines. How the "
        "reference coefficients in CASE were derived (by grpo-identity, not read from the framework):",
        f"  the objective: {o['name']}, wᵢ = {o['formula']} ({o['setting']}; {o['source']})",
        f"  the advantages: Âᵢ = {case['dial']} (it reproduces this release's advantages on the probe to "
        f"{ADVANTAGE_TOL:g})",
        f"  the step checked: optimizer step 0, {len(step)} answers (N_S), {sum(e['tokens'] for e in step)} loss "
        f"tokens (T_S); L = {o['budget']:g}",
        "  every loss token of answer i has the coefficient −∂loss/∂log π = Âᵢ·wᵢ (on-policy: the ratio is 1, and "
        "a KL term is 0 at the reference policy)",
        "Run: pytest THIS_FILE (it needs pytest, torch and the framework; nothing of grpo-identity).",
    ]
    header = [
        wrapped
        for line in said
        for wrapped in textwrap.wrap(line, 116, subsequent_indent="    " if line.startswith("  ") else "")
    ]
    header = [f"# {line}" for line in header] + [""]
    body = runner.replace(CASE_LINE, f"CASE: dict[str, Any] = {literal}", 1).rstrip()
    return "\n".join(header) + body + "\n\n\n" + checks.split(CHECKS_MARKER, 1)[1].lstrip()
