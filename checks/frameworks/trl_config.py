"""TRL's configuration as the driver builds it: a ``GRPOConfig`` from TRL's own parser, the user's keys, what the
driver sets and what it leaves alone (:func:`grpo_config`).  Shared by the driver (:mod:`.trl`) and its optimizer
step (:mod:`.trl_step`), below both."""

from __future__ import annotations

import atexit
import contextlib
import functools
import io
import os
import shutil
import tempfile
import warnings
from importlib.metadata import version
from typing import Any

from grpo_identity.checks.frameworks import RESPONSE_LENGTH, AdapterError, FrameworkSpec, redacted
from grpo_identity.checks.frameworks.contract import Difference, DriverSettings
from grpo_identity.checks.frameworks.registry import FRAMEWORK_TABLE

__all__ = [
    "DIFFERENCES",
    "grpo_config",
    "config_argv",
    "user_keys",
    "int_or",
    "COMPLETION_LENGTH",
    "DRIVER_FORCED",
    "DRIVER_DEFAULTS",
    "unused_output_dir",
]

_TRAINER, _CONFIG = "trl.trainer.grpo_trainer:GRPOTrainer", "trl.trainer.grpo_config:GRPOConfig"
_FIRST = FRAMEWORK_TABLE["trl"].first[0] if FRAMEWORK_TABLE["trl"].first else "0"  # the oldest release it drives
#: how TRL's releases differ where the driver reads their code (:class:`~.contract.Difference`)
DIFFERENCES = {
    "score": Difference(
        f"{_TRAINER}._generate_and_score_completions",
        _FIRST,
        "samples and scores a batch, the advantages included: the driver's advantage path",
    ),
    "sample": Difference(
        f"{_TRAINER}._generate",
        "0.24.0",
        "the sampling step of _generate_and_score_completions, memoised per batch shape (in every release the "
        "model's generate samples one row per repeated prompt)",
    ),
    "logps": Difference(
        f"{_TRAINER}._get_per_token_logps_and_entropies",
        "0.20.0",
        "the trainer's per-token log-probabilities (before it _get_per_token_logps)",
    ),
    "loss_type": Difference(f"{_CONFIG}.loss_type", "0.17.0", "the loss's aggregation (before it one loss: 'grpo')"),
    "generation_batches": Difference(
        f"{_CONFIG}.steps_per_generation",
        "0.18.0",
        "a generation batch for every steps_per_generation micro-batches (before it one per micro-batch)",
    ),
    "compute_loss": Difference(
        f"{_TRAINER}._compute_loss", "0.17.0", "the loss compute_loss delegates to (before it compute_loss itself)"
    ),
    "scale_rewards": Difference(f"{_CONFIG}.scale_rewards", "0.16.0", "the advantages' scaling (a bool until 0.22)"),
    "reward_weights": Difference(f"{_CONFIG}.reward_weights", "0.15.0", "the reward functions' weights"),
    "delta": Difference(f"{_CONFIG}.delta", "0.18.0", "the upper clip of the importance ratio (two-sided GRPO)"),
    "sampling_level": Difference(
        f"{_CONFIG}.importance_sampling_level", "0.20.0", "the ratio per token or per sequence (before it per token)"
    ),
    "kl_correction": Difference(
        f"{_CONFIG}.use_bias_correction_kl", "0.26.0", "the KL term weighted by the importance ratio"
    ),
    "engine": Difference(
        "trl.generation.vllm_generation:VLLMGeneration",
        "0.28.0",
        "the rollout engine (vLLM) behind use_vllm, which the driver stands in (trl_rollout.Engine)",
    ),
    "is_mode": Difference(
        f"{_CONFIG}.vllm_importance_sampling_mode",
        "0.26.0",
        "the rollout correction's level and rule (before it: truncated, per token)",
    ),
    "is_clip_max": Difference(
        f"{_CONFIG}.vllm_importance_sampling_clip_max", "1.6.0", "the correction's upper bound (before it: _cap)"
    ),
    "is_clip_min": Difference(f"{_CONFIG}.vllm_importance_sampling_clip_min", "1.6.0", "the correction's lower bound"),
    "components": Difference(
        f"{_CONFIG}.multi_objective_aggregation",
        "0.27.0",
        "how several rewards combine (before it they are summed, then normalised)",
    ),
}

#: completion length budget (tokens) of the gradient probes
COMPLETION_LENGTH = RESPONSE_LENGTH
#: what the probes need whatever the user set: the CPU, completions of 1–6 tokens, nothing logged, saved or pushed
#: to the Hub, no folder of the user's written (the report lists each, with the user's value where it differed)
DRIVER_FORCED: dict[str, Any] = {
    "use_cpu": True,
    "max_completion_length": COMPLETION_LENGTH,
    "report_to": "none",
    "save_strategy": "no",
    "push_to_hub": False,
    "hub_token": None,
    "hub_model_id": None,
    "output_dir": "<unused_output_dir()>",
}


@functools.cache
def unused_output_dir() -> str:
    """GRPOConfig's required ``output_dir``: one new folder, made at the first call, left empty (nothing is saved or
    logged there, :data:`DRIVER_FORCED`; TRL's trainer creates it), under a name no other process or user could have
    made first.  A rank forked after the first call shares it (the step calls this before it forks its ranks).  In
    the audit's child it lies in the child's temporary folder and goes with it; where the driver runs in the
    caller's process, it lies in the system's and is removed when that process exits (not by a fork of it)."""
    folder = tempfile.mkdtemp(prefix="grpo-identity-trl-unused-")
    atexit.register(_remove_unused, os.getpid(), folder)
    return folder


def _remove_unused(pid: int, folder: str) -> None:
    """At exit: remove the folder ``folder`` made by process ``pid``, where this is that process."""
    if os.getpid() == pid:
        shutil.rmtree(folder, ignore_errors=True)


#: what the driver sets where the user set nothing (the batch size follows the user's num_generations)
DRIVER_DEFAULTS: dict[str, Any] = {
    "bf16": False,
    "beta": 0.0,
    "logging_steps": 1,
    "num_generations": 2,
    "per_device_train_batch_size": 2,
}
#: the dataclasses of TRL's ``trl grpo`` script besides GRPOConfig: their keys are the script's, not
#: the trainer's, and a config written for ``trl grpo --config`` holds them
_SCRIPT_CLASSES = ("ScriptArguments", "ModelConfig", "DatasetMixtureConfig", "GRPOScriptArguments")


def grpo_config(spec: FrameworkSpec) -> Any:
    """The ``GRPOConfig`` TRL's parser builds from ``spec``, as ``trl grpo --config`` builds it: the
    driver's defaults where the user set nothing, the YAML file, each ``--set`` (later ones win), then
    what the probes need (:data:`DRIVER_FORCED`).  Keys of the ``trl grpo`` script that are no
    ``GRPOConfig`` field (``model_name_or_path``, ``dataset_name`` …) are ignored with a note; any
    other unknown key is TRL's error.  ``args.grpo_identity_settings`` says what the driver chose."""
    warnings.filterwarnings("ignore")
    try:
        from trl import GRPOConfig, TrlParser
    except ImportError as exc:
        raise AdapterError(f"TRL {version('trl')} has no GRPOConfig / TrlParser: {exc}") from None
    parser = TrlParser((GRPOConfig,))
    argv, user, defaults, forced = config_argv(parser, spec)
    parser.set_defaults(**defaults)
    args, ignored = _parse(parser, argv, spec)
    for key, value in forced.items():
        if value is None:  # no argv form: a None the parser would read as the string "None"
            setattr(args, key, None)
    args.grpo_identity_settings = DriverSettings(
        forced={k: {"driver": _shown(k, v), "yours": redacted(k, user.get(k))} for k, v in forced.items()},
        defaults=defaults,
        ignored=tuple(ignored),
        note=f"num_generations set by each probe (2, 3, 4, 8 …); yours: {user.get('num_generations', 'not set')}",
    )
    return args


def config_argv(parser: Any, spec: FrameworkSpec) -> tuple[list[str], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """What :func:`grpo_config` hands TRL's parser: the argv (the YAML file, each ``--set``, then
    :data:`DRIVER_FORCED` with a value), the user's keys, the driver's defaults (the parser's, where the user set
    none) and the forced settings of this release's GRPOConfig."""
    user = user_keys(spec)
    fields = {a.dest for a in parser._actions}
    defaults = {k: v for k, v in DRIVER_DEFAULTS.items() if k not in user}
    if "num_generations" in user and "per_device_train_batch_size" not in user:
        defaults["per_device_train_batch_size"] = int_or(user["num_generations"], 2)
    defaults = {k: v for k, v in defaults.items() if k in fields}
    argv = ["--output_dir", unused_output_dir()]
    if spec.config:
        argv += ["--config", spec.config]
    for key, value in spec.sets:
        argv += [f"--{key}", *_values(parser, key, value)]
    forced = {k: unused_output_dir() if k == "output_dir" else v for k, v in DRIVER_FORCED.items() if k in fields}
    for key, value in forced.items():
        argv += [f"--{key}", str(value)] if value is not None else []
    return argv, user, defaults, forced


def _shown(key: str, value: Any) -> Any:
    """A forced value as the report says it (the output folder is the child's own, a different path each time)."""
    return "a temporary folder of the audit's, removed after it" if key == "output_dir" else value


def _values(parser: Any, key: str, value: str) -> list[str]:
    """A ``--set`` value as the parser's argv: a list field's (``reward_weights=1,0.5``) split at commas."""
    action = next((a for a in parser._actions if a.dest == key), None)
    if action is not None and action.nargs in ("+", "*"):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [value]


def user_keys(spec: FrameworkSpec) -> dict[str, Any]:
    """The keys the user set, in the YAML file and with --set (their raw values)."""
    keys: dict[str, Any] = {}
    if spec.config:
        import yaml

        try:
            with open(spec.config) as fh:
                loaded = yaml.safe_load(fh)
        except Exception as exc:  # an unreadable file: TRL's parser says it again, in its words
            loaded = None
            del exc
        if isinstance(loaded, dict):
            keys.update(loaded)
    keys.update(dict(spec.sets))
    return keys


def int_or(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _script_keys() -> set[str]:
    """The keys of the ``trl grpo`` script's other dataclasses, in this release."""
    import dataclasses
    import importlib

    found: set[str] = set()
    for module in ("trl", "trl.scripts.utils", "trl.scripts.grpo"):
        try:
            mod = importlib.import_module(module)
        except Exception:  # a release without the module (or one that needs a GPU stack to import)
            continue
        for name in _SCRIPT_CLASSES:
            cls = getattr(mod, name, None)
            if cls is not None and dataclasses.is_dataclass(cls):
                found |= {f.name for f in dataclasses.fields(cls)}
    return found


def _parse(parser: Any, argv: list[str], spec: FrameworkSpec) -> tuple[Any, list[str]]:
    """The GRPOConfig, and the script's keys that were ignored; TRL's own error otherwise."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args, remaining = parser.parse_args_and_config(args=argv, return_remaining_strings=True)
    except SystemExit:  # argparse: a value of the wrong type
        last = [ln for ln in err.getvalue().splitlines() if ln.strip()]
        why = last[-1].split("error: ")[-1] if last else "bad arguments"
        raise AdapterError(f"TRL {version('trl')} rejects the config ({spec.describe()}): {why}") from None
    except Exception as exc:  # GRPOConfig.__post_init__'s checks, an unreadable YAML file
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise AdapterError(f"TRL {version('trl')} rejects the config ({spec.describe()}): {why}") from None
    unknown = [a[2:].split("=")[0] for a in remaining if a.startswith("--")]
    script = _script_keys()
    wrong = [k for k in unknown if k not in script]
    if wrong:
        raise AdapterError(
            f"TRL {version('trl')} rejects the config ({spec.describe()}): {', '.join(wrong)} "
            "is no GRPOConfig field nor a key of the trl grpo script"
        )
    return args, unknown
