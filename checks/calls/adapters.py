"""Built-in audit targets: the dial's presets and the real frameworks, configured as their users
configure them.

Every adapter is a function ``fn(rewards, group_size)`` (1-D float64 rewards laid out group by
group → one advantage per reward; for a filter, one bool per group) built from a name:

- a preset of :mod:`grpo_identity.dial` (``grpo``, ``dr_grpo``, ``dapo``, ``rloo``; ``preset:NAME``
  for any, and for the presets named like a framework: ``preset:trl``, ``preset:verl``,
  ``preset:openrlhf``): the dial itself, the reference;
- ``trl`` with ``--set KEY=VALUE`` (``GRPOConfig`` fields: ``scale_rewards``, ``loss_type`` …;
  short form ``trl:scale_rewards=none``): TRL's ``GRPOTrainer`` itself
  (:mod:`~grpo_identity.checks.frameworks.trl`);
- ``verl`` with ``--set`` dotted config paths (``algorithm.adv_estimator=grpo``,
  ``algorithm.norm_adv_by_std_in_grpo=false``, ``actor_rollout_ref.actor.loss_agg_mode=…``;
  short form ``verl:grpo:norm_adv_by_std_in_grpo=false``): the trainer's own advantage dispatch
  (:mod:`~grpo_identity.checks.frameworks.verl`);
- ``verl:estimator=NAME[,key=value]``: verl's ``core_algos`` estimator function called directly,
  which **bypasses the trainer** (its dispatch, config object and batch layout);
- ``openrlhf`` with ``--set`` options of its ``train_ppo_ray`` command line
  (``algo.advantage.estimator=group_norm``, ``algo.advantage.no_std_norm=true``,
  ``actor.loss_agg_mode=…``; short form ``openrlhf:group_norm``): its experience maker's
  ``compute_advantages_and_returns`` (:mod:`~grpo_identity.checks.frameworks.openrlhf`; OpenRLHF
  requires flash-attn, so it is audited from its release environment: ``--release 0.11.2``).

With ``kind='gradient'`` a framework adapter returns ``fn(rewards, G, lengths)`` for
:mod:`~grpo_identity.checks.gradient`: a driver's :class:`~grpo_identity.checks.frameworks.contract.Built`
target (the driver contract, :mod:`~grpo_identity.checks.frameworks.contract`).  The frameworks are imported only
inside the builders.  Each built function carries ``grpo_identity_info`` (framework, version, options) for the
report.
A configuration the framework rejects (an unknown key, a bad value, an estimator it does not
know) is an :class:`~grpo_identity.checks.frameworks.AdapterError`: a usage error, not a FAIL.

>>> fn = build("dr_grpo")
>>> fn(__import__("numpy").array([1., 0.]), 2).tolist()
[0.5, -0.5]
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from grpo_identity.checks.frameworks import FRAMEWORKS, AdapterError, FrameworkSpec, is_framework, parse_spec
from grpo_identity.checks.frameworks.contract import Driver
from grpo_identity.checks.frameworks.registry import FRAMEWORK_TABLE

__all__ = ["ADAPTERS", "names", "is_adapter", "build", "describe"]

#: adapter family -> one-line description (for ``--help`` and reports): the presets, then each framework's forms
ADAPTERS: dict[str, str] = {
    "<preset>": "a preset of the dial (grpo, dr_grpo, dapo, rloo; preset:NAME for any, e.g. preset:openrlhf): the "
    "reference itself",
    **{form: line for e in FRAMEWORK_TABLE.values() for form, line in ((e.name, e.summary), *e.forms)},
}

#: versions the CI tests pin (``make setup`` installs exactly these)
TESTED_VERSIONS = {e.name: e.tested for e in FRAMEWORK_TABLE.values()}


def names() -> list[str]:
    """Example adapter names (every preset, plus the framework forms)."""
    from grpo_identity.dial import PRESETS

    return [
        *(p for p in PRESETS if p not in FRAMEWORKS),
        *(f"preset:{p}" for p in PRESETS if p in FRAMEWORKS),
        "trl",
        "trl:scale_rewards=batch",
        "trl:scale_rewards=none",
        "verl:grpo",
        "verl:grpo_vectorized",
        "verl:rloo",
        "verl:grpo:norm_adv_by_std_in_grpo=false",
        "verl:estimator=grpo_vectorized",
        "openrlhf:group_norm",
        "openrlhf:dr_grpo",
    ]


def describe(spec: Any) -> str:
    """A target spec as the user wrote it (a framework spec in its command-line form)."""
    return spec.describe() if isinstance(spec, FrameworkSpec) else str(spec)


def is_adapter(spec: str) -> bool:
    """Whether ``spec`` names a built-in adapter (rather than FILE.py:FUNCTION or MODULE:FUNCTION)."""
    from grpo_identity.dial import PRESETS

    head = spec.split(":")[0].strip().lower()
    return head in PRESETS or head in ("preset", "dial") or is_framework(spec)


def build(spec: str | FrameworkSpec, kind: str = "advantage") -> Callable[..., Any]:
    """The adapter function named by ``spec`` (imports the framework it needs)."""
    if isinstance(spec, FrameworkSpec):
        return _framework(spec, kind)
    if is_framework(spec):
        return _framework(parse_spec(spec), kind)
    parts = [p.strip() for p in spec.split(":")]
    framework = parts[0].lower()
    if framework in ("preset", "dial"):
        if len(parts) != 2 or not parts[1] or "=" in parts[1]:
            raise ValueError(f"write a preset as preset:NAME, got {spec!r}")
        return _preset(parts[1], kind)
    if len(parts) > 1:
        raise ValueError(f"a preset takes no options, got {spec!r}")
    return _preset(framework, kind)


def _framework(fs: FrameworkSpec, kind: str) -> Callable[..., Any]:
    """A framework driver's target, tried once on one group so that a configuration the framework
    rejects only when it runs (TRL checks ``scale_rewards`` at the first batch) is an adapter error."""
    if kind in ("filter", "row-filter"):
        raise AdapterError(f"{fs.describe()} computes advantages; only presets can be audited as filters")
    import importlib

    drv: Driver = importlib.import_module(FRAMEWORK_TABLE[fs.framework].driver)
    from importlib.metadata import version

    release = f"{fs.framework} {version(fs.framework)}"
    if fs.estimator is not None and kind == "gradient":
        raise AdapterError(
            f"{fs.describe()} is the estimator function alone: it has no loss, so --level gradient needs the trainer "
            "path (verl --set algorithm.adv_estimator=…)"
        )
    try:
        fn = drv.build(fs, "gradient" if kind == "gradient" else "advantage")
    except (AdapterError, ImportError):
        raise
    except Exception as exc:  # an API this driver does not know in this release
        raise AdapterError(
            f"{release}: the driver cannot build {fs.describe()} on this release: {_first_line(exc)}"
        ) from None
    try:
        fn(np.array([1.0, 0.0]), 2, *((np.array([1, 2]),) if kind == "gradient" else ()))
    except AdapterError:
        raise
    except AttributeError as exc:
        raise AdapterError(f"{release}: the driver does not know this release's API ({_first_line(exc)})") from None
    except (ValueError, KeyError, TypeError, NotImplementedError, AssertionError) as exc:
        raise AdapterError(
            f"{fs.describe()}: {release} rejects this configuration on its first batch: {_first_line(exc)}"
        ) from None
    return fn


def _first_line(exc: BaseException) -> str:
    from grpo_identity.foundation import error_text

    return error_text(exc)


def _preset(name: str, kind: str) -> Callable[..., Any]:
    from grpo_identity import dial as D

    d = D.preset(name)
    if kind == "filter":

        def keep(rewards: np.ndarray, group_size: int) -> np.ndarray:
            return D.keep_mask(rewards, group_size, d)

        fn = keep
    elif kind == "row-filter":

        def keep_rows(rewards: np.ndarray, group_size: int) -> np.ndarray:
            return np.repeat(D.keep_mask(rewards, group_size, d), group_size)

        fn = keep_rows
    else:

        def adv(rewards: np.ndarray, group_size: int) -> np.ndarray:
            return D.advantages(rewards, group_size, d)

        fn = adv
    info = {"framework": "grpo-identity dial", "preset": d.name, **d.params()}
    fn.grpo_identity_info = info  # type: ignore[attr-defined]
    return fn
