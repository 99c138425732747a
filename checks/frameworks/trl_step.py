"""TRL's optimizer step as its trainer splits it: ``GRPOTrainer.train()`` itself, for the split-step
audit (:mod:`grpo_identity.checks.measure.steps`).

Each layout is a real training run of the tiny policy (:func:`~grpo_identity.checks.frameworks.trl.tiny_policy`)
under the user's ``GRPOConfig``: TRL's sampler, its ``_prepare_inputs`` (generation batches split into
``per_device_train_batch_size`` slices, ``steps_per_generation``), the ``Trainer``'s gradient accumulation, its
``compute_loss`` and ``accelerate``'s data parallelism over ``num_processes`` CPU processes (one gloo group,
each rank forked from the audit's process with the environment and state ``accelerate launch`` gives a rank).
The driver changes three things, and says so:

- generation: the model's ``generate`` returns the audit's answers (a member marker, filler tokens, the EOS at
  the answer's length) for the prompts it is given; every rank gathers the prompts of the call so that each
  answer of a group gets its own member index in the order TRL gathers the ranks' rows;
- rewards: a reward function that returns the audit's reward of each (prompt, member);
- ``learning_rate`` 0 (the parameters stay where they are, so every micro-batch is on-policy) and the log-
  probabilities kept for their gradient: each micro-batch's −∂loss/∂log π is read after the trainer's
  backward, divided by the number of processes (DDP averages the ranks' gradients).

``num_processes`` is the launcher's setting (``accelerate launch --num_processes``), not a ``GRPOConfig`` field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any

import numpy as np

from grpo_identity.checks.frameworks import (
    RESPONSE_LENGTH,
    STEP_GROUP_SIZE,
    AdapterError,
    FrameworkSpec,
    cispo_cap,
    whole_number,
)
from grpo_identity.checks.frameworks._ranks import (
    ProcessRanks,
    RankProcessError,
    accelerate_rank,
    gather_objects,
    rank_index,
    world_size,
)
from grpo_identity.checks.frameworks.contract import StepPlan, per_row
from grpo_identity.checks.frameworks.trl_config import DIFFERENCES

__all__ = ["SPLIT_KEYS", "LAUNCH_KEYS", "step_plan", "export_recipe", "run_layout"]

#: the GRPOConfig settings that decide how an optimizer step is split
SPLIT_KEYS = (
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "steps_per_generation",
    "generation_batch_size",
)
#: settings of the launcher, not of GRPOConfig (bounds: processes on this machine)
LAUNCH_KEYS = {"num_processes": (1, 4)}
#: what the driver sets for every step run: the parameters never move (every micro-batch is on-policy), and
#: each generation batch is trained on once (the first of ``num_iterations`` passes: the one whose
#: normalisation the audit reads)
STEP_FORCED = {"learning_rate": "0.0", "num_iterations": "1", "disable_tqdm": "true", "logging_steps": "1000000"}


def _new_trl() -> bool:
    """TRL generates one generation batch per ``steps_per_generation`` steps (0.18 on); older releases
    generate per micro-batch."""
    return DIFFERENCES["generation_batches"].present()


def launch_settings(spec: FrameworkSpec) -> tuple[FrameworkSpec, int]:
    """``spec`` without the launcher's keys, and the number of processes (1 unless set)."""
    processes, sets = 1, []
    for key, value in spec.sets:
        if key not in LAUNCH_KEYS:
            sets.append((key, value))
            continue
        low, high = LAUNCH_KEYS[key]
        processes = whole_number(value, key, least=low, most=high, who="TRL")
    return FrameworkSpec(spec.framework, tuple(sets), spec.config, spec.level, release=spec.release), processes


def one_process(spec: FrameworkSpec) -> FrameworkSpec:
    """``spec`` for one process: without the launcher's keys, and, where it names several processes, with the
    per-device batch of the whole world (TRL checks its batch sizes against the world size it sees)."""
    bare, processes = launch_settings(spec)
    if processes == 1:
        return bare
    merged = dict(bare.sets)
    merged["per_device_train_batch_size"] = str(_int_setting(bare, merged, "per_device_train_batch_size") * processes)
    return FrameworkSpec(bare.framework, tuple(merged.items()), bare.config, bare.level, release=bare.release)


def _user_keys_of(spec: FrameworkSpec) -> dict[str, Any]:
    from grpo_identity.checks.frameworks.trl_config import user_keys

    return user_keys(spec)


def _user_split(spec: FrameworkSpec) -> dict[str, Any]:
    keys = _user_keys_of(spec)
    return {k: keys[k] for k in (*SPLIT_KEYS, "num_generations") if k in keys}


@dataclass(frozen=True)
class Layout:
    """A layout's settings: ``sets`` for every rank's GRPOConfig (after the user's, so they win), the
    number of processes, and the numbers of its step."""

    sets: tuple[tuple[str, str], ...]
    processes: int
    group_size: int
    step_rows: int
    generation_rows: int
    settings: dict[str, Any]
    chosen: dict[str, int] = field(default_factory=dict)
    """The split settings the driver chose where the user set none."""


def _parse(spec: FrameworkSpec, sets: tuple[tuple[str, str], ...], processes: int) -> Any:
    """The GRPOConfig of one rank, parsed here as one process: TRL checks its batch sizes against the world
    size it sees, so the per-device batch is parsed as the whole world's (then divided back)."""
    from grpo_identity.checks.frameworks.trl_config import grpo_config

    merged = dict((*spec.sets, *sets))
    if processes > 1:
        per_device = _int_setting(spec, merged, "per_device_train_batch_size")
        merged["per_device_train_batch_size"] = str(per_device * processes)
    args = grpo_config(FrameworkSpec(spec.framework, (*merged.items(), *STEP_FORCED.items()), spec.config))
    args.per_device_train_batch_size //= processes
    return args


def _int_setting(spec: FrameworkSpec, merged: dict[str, Any], key: str) -> int:
    from grpo_identity.checks.frameworks.trl_config import DRIVER_DEFAULTS, int_or, user_keys

    value = merged.get(key, user_keys(spec).get(key, DRIVER_DEFAULTS.get(key)))
    return int_or(value, 1)


def _layout(spec: FrameworkSpec, processes: int, name: str) -> Layout:
    """The split layout (the user's settings, or two accumulated micro-batches of one group each where the user
    set none) or the unsplit one (each optimizer step of the split layout as one micro-batch on one process).
    Every split number the run uses is in the layout's ``sets`` (each rank's config), so what the ranks run is
    what the geometry says."""
    user = _user_split(spec)
    _check_whole_numbers(user)
    G = int(user.get("num_generations", _default_group(user, processes)))
    sets: tuple[tuple[str, str], ...] = (("num_generations", str(G)),)
    if not any(k in user for k in SPLIT_KEYS) and processes == 1:
        sets += (("per_device_train_batch_size", str(G)), ("gradient_accumulation_steps", "2"))
    elif "per_device_train_batch_size" not in user:
        sets += (("per_device_train_batch_size", str(G)),)  # grpo_config's default where num_generations is set
    chosen = {k: int(v) for k, v in sets if k not in user}
    args = _parse(spec, sets, processes)
    pinned = ["per_device_train_batch_size", "gradient_accumulation_steps"]
    pinned += [] if "generation_batch_size" in user else ["steps_per_generation"]  # TRL takes one of the two
    sets += tuple((k, str(getattr(args, k))) for k in pinned if getattr(args, k, None) is not None and k not in user)
    G, step_rows, generation_rows = _numbers(args, processes)
    settings: dict[str, Any] = {"num_generations": G}
    settings.update({k: getattr(args, k) for k in SPLIT_KEYS if getattr(args, k, None) is not None})
    settings["num_processes"] = processes
    iterations = _user_keys_of(spec).get("num_iterations")
    if iterations not in (None, 1, "1"):
        settings["num_iterations"] = f"1 (yours {iterations}: the first pass over each generation batch)"
    split = Layout(_last_wins(sets), processes, G, step_rows, generation_rows, settings, chosen)
    if name == "split":
        return split
    unsplit: tuple[tuple[str, str], ...] = (
        ("num_generations", str(G)),
        ("per_device_train_batch_size", str(step_rows)),
        ("gradient_accumulation_steps", "1"),
    )
    if _new_trl():  # the user's generation_batch_size must be overridden by the same key (TRL takes one of two)
        per_generation = max(1, generation_rows // step_rows)
        key = "generation_batch_size" if "generation_batch_size" in user else "steps_per_generation"
        unsplit += ((key, str(per_generation * step_rows if key == "generation_batch_size" else per_generation)),)
    settings = {k: v for k, v in unsplit if k != "num_generations"}
    return Layout(unsplit, 1, G, step_rows, generation_rows, {**settings, "num_processes": 1})


def _default_group(user: dict[str, Any], processes: int) -> int:
    """The step's group size where the user set none: :data:`STEP_GROUP_SIZE`, or, where TRL generates per
    micro-batch (before 0.18) and the user's micro-batch holds no whole group of it, one that fits."""
    if _new_trl() or "per_device_train_batch_size" not in user:
        return STEP_GROUP_SIZE
    micro = int(str(user["per_device_train_batch_size"])) * processes
    return next((g for g in (STEP_GROUP_SIZE, 3, 2) if micro % g == 0), STEP_GROUP_SIZE)


def _last_wins(sets: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return tuple(dict(sets).items())


def _check_whole_numbers(user: dict[str, Any]) -> None:
    """The user's split numbers are whole numbers ≥ 1 (TRL divides by them)."""
    for key in (*SPLIT_KEYS, "num_generations"):
        if key in user:
            whole_number(user[key], key, who="TRL")


def _numbers(args: Any, processes: int) -> tuple[int, int, int]:
    """(G, answers per optimizer step, answers per generation batch) of one rank's config."""
    G = int(args.num_generations)
    step_rows = int(args.per_device_train_batch_size) * int(args.gradient_accumulation_steps) * processes
    if _new_trl():
        generation_rows = int(args.per_device_train_batch_size) * int(args.steps_per_generation) * processes
    else:
        generation_rows = int(args.per_device_train_batch_size) * processes
    return G, step_rows, generation_rows


def step_plan(spec: FrameworkSpec) -> StepPlan:
    """The configured step (:class:`~grpo_identity.checks.frameworks.contract.StepPlan`): the user's split settings,
    or the driver's default split."""
    bare, processes = launch_settings(spec)
    split, unsplit = _layout(bare, processes, "split"), _layout(bare, processes, "unsplit")
    user_set = any(k in _user_split(bare) for k in SPLIT_KEYS) or processes > 1

    def words(settings: dict[str, Any]) -> str:
        return ", ".join(f"{k}={v}" for k, v in settings.items())

    return StepPlan(
        split.group_size,
        split.step_rows,
        split.generation_rows,
        split=words(split.settings) + ("" if user_set else " (the driver's default split: you set none)"),
        unsplit=words(unsplit.settings),
        settings=split.settings,
        ranks=processes,
        chosen=split.chosen,
        objective=objective(_parse(bare, split.sets, processes)),
        truncation=True,
        export=export_recipe(spec),
    )


def objective(args: Any) -> dict[str, Any] | None:
    """The documented objective of the configured ``loss_type`` (:data:`grpo_identity.objectives.LOSS_SETTINGS`;
    releases before ``loss_type`` existed aggregate as 'grpo'), with the length budget it may divide by."""
    from grpo_identity.objectives import objective_of

    loss_type = str(DIFFERENCES["loss_type"].value_of(args) or "grpo")
    found = objective_of("trl", "loss_type", loss_type)
    if found is None:
        return None
    budget = int(getattr(args, "max_completion_length", None) or RESPONSE_LENGTH)
    return found.for_step(budget, cispo_cap(loss_type, args))


def export_recipe(spec: FrameworkSpec) -> dict[str, Any]:
    """What an exported test (:mod:`grpo_identity.checks.export`) needs to run the split layout's steps itself:
    the argv TRL's parser reads (the driver's defaults spelled out, ``<output_dir>`` and ``<config>`` for the
    test's own paths, no secret), the config file's text (secrets left out), the number of processes, the release."""
    from trl import GRPOConfig, TrlParser

    from grpo_identity.checks.frameworks import config_text, is_secret
    from grpo_identity.checks.frameworks.trl_config import config_argv, unused_output_dir

    bare, processes = launch_settings(spec)
    split = _layout(bare, processes, "split")
    sets = tuple((k, v) for k, v in (*bare.sets, *split.sets, *STEP_FORCED.items()) if not is_secret(k))
    argv, _, defaults, _ = config_argv(TrlParser((GRPOConfig,)), FrameworkSpec("trl", sets, bare.config))
    shown = {unused_output_dir(): "<output_dir>", bare.config: "<config>"}
    argv = [a for k, v in defaults.items() for a in (f"--{k}", str(v))] + [shown.get(a, a) for a in argv]
    return {"argv": argv, "config_text": config_text(bare.config), "processes": processes, "release": version("trl")}


def run_layout(
    spec: FrameworkSpec,
    layout: str,
    rewards: np.ndarray,
    lengths: np.ndarray,
    G: int,
    param_grads: bool = False,
    truncated: Any = None,
) -> dict[str, Any]:
    """Train on the rows (contiguous groups of G) under ``layout``; per row: advantages, coefficients, mask,
    step, rank, micro_batch, generation (the caller's order).  ``param_grads``: also the model's whole
    gradient as the optimizer receives it at each step (after the ranks' all-reduce), rank 0's, as
    ``param_grads`` (steps × parameters)."""
    bare, processes = launch_settings(spec)
    chosen = _layout(bare, processes, layout)
    ranks = chosen.processes
    job = {
        "sets": [list(kv) for kv in (*bare.sets, *chosen.sets, *STEP_FORCED.items())],
        "config": bare.config,
        "rewards": np.asarray(rewards, dtype=float).tolist(),
        "lengths": np.asarray(lengths, dtype=int).tolist(),
        "group_size": int(G),
        "param_grads": bool(param_grads),
        "truncated": [bool(x) for x in (truncated if truncated is not None else [False] * len(rewards))],
    }
    records = _run_here(job) if ranks == 1 else _run_ranks(job, ranks)
    out = per_row([r for r in records if "rows" in r], len(rewards), ranks, f"TRL {version('trl')}")
    if param_grads:
        steps = sorted((r["step"], r["param_grad"]) for r in records if "param_grad" in r and r["rank"] == 0)
        out["param_grads"] = np.asarray([g for _, g in steps])
    return out


def _run_ranks(job: dict[str, Any], ranks: int) -> list[dict[str, Any]]:
    """The run on ``ranks`` CPU processes in one gloo group (:class:`~grpo_identity.checks.frameworks._ranks.
    ProcessRanks`), each a rank as ``accelerate launch --multi_gpu --num_processes`` starts one
    (:func:`~grpo_identity.checks.frameworks._ranks.accelerate_rank`);
    their records."""
    from grpo_identity.checks.frameworks.trl_config import unused_output_dir

    unused_output_dir()  # made before the fork: the ranks share it, and this process removes it
    try:
        replies = ProcessRanks(ranks).run(lambda rank: _run_here(job, accelerate_rank(rank, ranks)))
    except RankProcessError as exc:
        raise AdapterError(f"TRL {version('trl')} on {ranks} processes: {exc}") from None
    return [record for records in replies for record in records]


def _run_here(job: dict[str, Any], rank: int = 0) -> list[dict[str, Any]]:
    """One process's share of the run: ``GRPOTrainer.train()`` for the job's optimizer steps
    (:class:`~grpo_identity.checks.frameworks.exported.trl.StepRunner`), each micro-batch's record with its rank
    and generation batch."""
    import warnings

    warnings.filterwarnings("ignore")
    from grpo_identity.checks.frameworks.exported.trl import StepRunner
    from grpo_identity.checks.frameworks.trl_config import grpo_config

    spec = FrameworkSpec("trl", tuple((str(k), str(v)) for k, v in job["sets"]), job["config"])
    args = grpo_config(spec)
    rewards, G = job["rewards"], int(job["group_size"])
    step_rows = int(args.per_device_train_batch_size) * int(args.gradient_accumulation_steps)
    args.max_steps = max(1, len(rewards) // max(1, step_rows * world_size()))
    truncated = job.get("truncated") or [False] * len(rewards)
    runner = StepRunner(args, rewards, job["lengths"], G, truncated, RESPONSE_LENGTH, gather_objects, rank_index)
    grads: list[dict[str, Any]] = []
    try:
        records = runner.train((_ParamGrads(grads, rank),) if job.get("param_grads") else ())
    except RuntimeError as exc:
        raise AdapterError(f"TRL {version('trl')}: {exc}") from None
    accumulation = int(args.gradient_accumulation_steps)
    per_generation = int(DIFFERENCES["generation_batches"].value_of(args) or 1)  # micro-batches per generation
    for record in records:
        record["rank"] = rank
        record["generation"] = (record["step"] * accumulation + record["micro"]) // per_generation
    return records + grads


class _ParamGrads:
    """A trainer callback: the model's gradient as the optimizer receives it, at each step."""

    def __init__(self, out: list[dict[str, Any]], rank: int) -> None:
        self.out, self.rank = out, rank

    def __getattr__(self, name: str) -> Any:
        if name.startswith("on_"):
            return lambda *a, **k: None
        raise AttributeError(name)

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        import torch

        model = kwargs["model"]
        flat = torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None])
        self.out.append({"step": int(state.global_step), "rank": self.rank, "param_grad": flat.double().tolist()})
