"""The driver contract: what a framework driver provides, what it builds, and what it says about what it built.

A **driver** is the module ``grpo_identity.checks.frameworks.NAME`` of a :data:`.registry.FRAMEWORK_TABLE` row
(:class:`Driver`).  It provides ``import_check()`` (a release environment's smoke test), ``build(spec,
level)``, which builds the framework's own trainer objects from the user's configuration and returns a
:class:`Built` target, and ``DIFFERENCES``, its table of the ways the framework's releases differ in the code it
reads (:class:`Difference`).  Everything else about the framework (its releases, pins, settings, the configurations
the findings table audits) is its registry row's.  A target that runs the optimizer step describes it with a
:class:`StepPlan`.

A **built target** answers the audit's questions with typed methods, one per question:

- ``advantages(rewards, G, scores=None)``: the trainer's advantages (``scores``: one column per reward function);
- ``gradient(rewards, G, lengths)``: the advantages, −∂loss/∂log π per token and the mask (level gradient);
- ``step(rewards, G, lengths, request)``: the optimizer step split or unsplit
  (:mod:`grpo_identity.checks.measure.steps`), where the info gives the step's geometry;
- ``off_policy(rewards, G, lengths, settings)``: one step at moved weights
  (:mod:`grpo_identity.checks.measure.offpolicy`), where the info announces it;

and carries a :class:`DriverInfo`.  The rest of the audit calls targets as ``fn(rewards, G[, lengths[,
request]])`` (the form a user's own gradient or step function has); :meth:`Built.__call__` is the one place such a
call is told apart into those methods, so a driver never reads ``lengths is None`` or a request's keys.

>>> class Echo(Built):
...     def advantages(self, rewards, G, scores=None):
...         return rewards - rewards.mean()
>>> echo = Echo(DriverInfo("demo", "0.1", "its own advantages"), "advantage")
>>> echo(__import__("numpy").array([1.0, 0.0]), 2).tolist()
[0.5, -0.5]
>>> echo.grpo_identity_info["version"], echo.grpo_identity_info["ranks"]
('0.1', 'one')
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from grpo_identity.checks import LEVELS
from grpo_identity.checks.frameworks import AdapterError
from grpo_identity.checks.frameworks.registry import release_key

__all__ = [
    "DriverSettings",
    "geometry",
    "StepPlan",
    "DriverInfo",
    "Built",
    "Driver",
    "Difference",
    "RANKS",
    "per_row",
]

#: how a step's data-parallel ranks ran: one rank, real processes (every driver), or emulated (a driver whose
#: framework's rank path cannot run on a CPU: :attr:`StepPlan.emulated`; none now)
RANKS = ("one", "emulated", "processes")


@dataclass(frozen=True)
class DriverSettings:
    """What the driver set in the framework's config, beside what the user set (the report lists it)."""

    forced: dict[str, dict[str, Any]] = field(default_factory=dict)
    """key -> {"driver": its value, "yours": the user's value or None}: set whatever the user set (the CPU, short
    completions, no logging or checkpoints)."""
    defaults: dict[str, Any] = field(default_factory=dict)
    """key -> value the driver chose where the user set none (a step's split, a group size)."""
    ignored: tuple[str, ...] = ()
    """The user's keys the framework's trainer does not read (keys of its launch script), ignored with a note."""
    note: str = ""
    """What else the driver chose, in words (the group size each probe sets)."""

    def to_dict(self) -> dict[str, Any]:
        return {"forced": self.forced, "defaults": self.defaults, "ignored": list(self.ignored), "note": self.note}


def geometry(
    group_size: int,
    step_rows: int,
    generation_rows: int,
    *,
    layouts: dict[str, str] | None = None,
    ranks: str = "one",
    holes: bool = False,
    truncation: bool = False,
    ragged: bool = False,
    settings: dict[str, Any] | None = None,
    objective: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A step target's ``info["step"]`` (:mod:`grpo_identity.checks.measure.steps` describes it; a driver's comes
    from its :class:`StepPlan`).  Also ``steps.geometry``, as step targets written by hand call it."""
    return {
        "objective": dict(objective) if objective else None,
        "group_size": int(group_size),
        "step_rows": int(step_rows),
        "generation_rows": int(generation_rows),
        "layouts": dict(layouts or {"split": "as configured", "unsplit": "one micro-batch, one rank"}),
        "ranks": ranks,
        "holes": bool(holes),
        "truncation": bool(truncation),
        "ragged": bool(ragged),
        "settings": dict(settings or {}),
    }


@dataclass(frozen=True)
class StepPlan:
    """A driver's optimizer step, as the framework splits it: the one record every driver fills, and the audit's
    ``info["step"]`` (:meth:`geometry`).  What runs the split stays the driver's, because it is the framework's own
    settings (verl's ``StepSplit``, AReaL's ``_Split``, TRL's per-rank ``Layout``, OpenRLHF's parsed options); what
    the split is, what the driver chose for it, and how it is described are here, once.

    >>> plan = StepPlan(4, 8, 16, "two micro-batches", "one micro-batch", ranks=2, chosen={"micro": 4})
    >>> geo = plan.geometry()
    >>> geo["ranks"], geo["step_rows"], geo["layouts"]["split"]
    ('processes', 8, 'two micro-batches')
    """

    group_size: int
    """Answers per prompt."""
    step_rows: int
    """Answers per optimizer step, all ranks together."""
    generation_rows: int
    """Answers per generation batch."""
    split: str
    """The configured layout, in the framework's words (its functions and settings)."""
    unsplit: str
    """The layout it is compared with: each optimizer step of the split as one micro-batch on one rank."""
    settings: dict[str, Any] = field(default_factory=dict)
    """The framework's split settings as the step runs them."""
    ranks: int = 1
    """Data-parallel ranks; more than one run as processes, unless :attr:`emulated`."""
    emulated: bool = False
    """The ranks are emulated in one process, where the framework's rank path cannot run on a CPU (``split``
    says how)."""
    chosen: dict[str, Any] = field(default_factory=dict)
    """The split settings the user did not set, with the driver's values (they join the report's defaults)."""
    objective: dict[str, Any] | None = None
    """The loss's documented objective (:meth:`grpo_identity.objectives.Objective.for_step`)."""
    holes: bool = False
    """The step may leave answers out (the framework drops or pads rows)."""
    truncation: bool = False
    """Answers may be cut at the length budget."""
    ragged: bool = False
    """Micro-batches may hold different numbers of answers."""
    export: dict[str, Any] | None = None
    """What an exported test needs to run the split itself (:mod:`grpo_identity.checks.export`)."""

    @property
    def ranks_run(self) -> str:
        """How the ranks run (:data:`RANKS`)."""
        return "one" if self.ranks < 2 else "emulated" if self.emulated else "processes"

    def geometry(self) -> dict[str, Any]:
        """``info["step"]`` (:func:`geometry`), with the export recipe."""
        geo = geometry(
            self.group_size,
            self.step_rows,
            self.generation_rows,
            layouts={"split": self.split, "unsplit": self.unsplit},
            ranks=self.ranks_run,
            holes=self.holes,
            truncation=self.truncation,
            ragged=self.ragged,
            settings=self.settings,
            objective=self.objective,
        )
        return geo if self.export is None else {**geo, "export": dict(self.export)}


def per_row(records: list[dict[str, Any]], n: int, ranks: int, framework: str) -> dict[str, Any]:
    """A step run's micro-batch records as the step audit's per-row arrays (advantages, coefficients, mask, step,
    rank, micro_batch, generation).  A record holds its ``rows`` (the caller's order), ``step``, ``rank``, ``micro``,
    ``generation`` and per row its advantage, coefficients and mask; each rank's coefficients count 1/``ranks``, as
    data parallelism averages the ranks' gradients.  Every row must be trained on exactly once (else an
    :class:`AdapterError` naming ``framework``, its release included)."""
    import numpy as np

    from grpo_identity.checks.frameworks import RESPONSE_LENGTH

    T = max([RESPONSE_LENGTH, *(len(c) for rec in records for c in rec["coefficients"])])
    out = {"advantages": np.zeros(n), "coefficients": np.zeros((n, T)), "mask": np.zeros((n, T))}
    out.update({k: np.full(n, -1) for k in ("step", "rank", "micro_batch", "generation")})
    seen = np.zeros(n, dtype=int)
    for rec in records:
        for i, row in enumerate(rec["rows"]):
            width = len(rec["coefficients"][i])
            out["advantages"][row] = rec["advantages"][i]
            out["coefficients"][row, :width] = np.asarray(rec["coefficients"][i]) / ranks
            out["mask"][row, :width] = rec["mask"][i]
            out["step"][row], out["rank"][row], out["micro_batch"][row] = rec["step"], rec["rank"], rec["micro"]
            out["generation"][row] = rec.get("generation", 0)
            seen[row] += 1
    if not np.all(seen == 1):
        raise AdapterError(
            f"{framework}: the trainer trained on {int((seen > 0).sum())} of the {n} answers its sampler drew "
            f"({int((seen > 1).sum())} more than once): the driver cannot read this step"
        )
    return out


@dataclass(frozen=True)
class DriverInfo:
    """What a built target is and how it was built: the report's head, the step and off-policy audits' input."""

    framework: str
    release: str
    """The framework's version, as installed where the target runs."""
    entry: str
    """The framework's code the target runs, in words (its functions and what stands in for what)."""
    options: dict[str, Any] = field(default_factory=dict)
    """The user's ``--set`` keys and raw values (an estimator function's keyword options)."""
    settings: DriverSettings = field(default_factory=DriverSettings)
    stand_ins: tuple[str, ...] = ()
    """Modules or objects the driver put in place of the framework's own (an empty ``flash_attn``, a stub engine)."""
    dtype: str = "float32"
    """The dtype the framework computes advantages in."""
    details: dict[str, Any] = field(default_factory=dict)
    """The framework's own settings that decide the advantages and the loss (estimator, normalisation, loss type)."""
    lengths_optional: bool = False
    """The gradient target answers ``lengths=None`` with the advantages alone."""
    step: StepPlan | None = None
    """The optimizer step as configured (:meth:`with_step`): the target answers step requests."""
    step_unavailable: str | None = None
    """Why the target runs no optimizer step (a release the driver cannot split), where it runs none."""
    off_policy: dict[str, Any] | None = None
    """What an off-policy step runs under: the target answers off-policy requests."""
    rollout_correction: dict[str, Any] | None = None
    """The configured correction of the rollout engine's log-probabilities (``estimator``, ``cap``, ``low``,
    ``setting``; :mod:`grpo_identity.checks.measure.rollout`): the target answers rollout requests."""
    async_groups: dict[str, Any] | None = None
    """How the trainer takes asynchronous groups (``max_staleness``, ``setting``, ``documented``;
    :mod:`grpo_identity.checks.measure.arrival`): the target answers arrival requests."""
    components: dict[str, Any] | None = None
    """Several reward functions (weights, aggregation): the target takes ``scores``."""

    @property
    def ranks(self) -> str:
        """How the step's data-parallel ranks run (:data:`RANKS`): the step's, else one."""
        return "one" if self.step is None else self.step.ranks_run

    @property
    def objective(self) -> dict[str, Any] | None:
        """The loss's objective as the step names it (None without a step)."""
        return None if self.step is None else self.step.objective

    def with_step(self, plan: StepPlan, **changes: Any) -> DriverInfo:
        """This info with ``changes``, ``plan`` as its step and what the plan chose among its defaults."""
        return replace(replace(self, **changes).with_step_defaults(plan.chosen), step=plan)

    def with_step_defaults(self, chosen: dict[str, Any]) -> DriverInfo:
        """This info with the step's ``chosen`` settings among its defaults; a key the per-G probes set to another
        value keeps both values."""
        defaults = dict(self.settings.defaults)
        for key, value in chosen.items():
            both = key in defaults and str(defaults[key]) != str(value)
            defaults[key] = f"{defaults[key]} (the per-G probes), {value} (the step)" if both else value
        return replace(self, settings=replace(self.settings, defaults=defaults))

    def to_dict(self) -> dict[str, Any]:
        """The info as the report and the audit's JSON carry it (``target_info``)."""
        out: dict[str, Any] = {
            "framework": self.framework,
            "version": self.release,
            "entry": self.entry,
            "options": dict(self.options),
            **self.details,
            "dtype": self.dtype,
            "driver_settings": self.settings.to_dict(),
            "stand_ins": list(self.stand_ins),
            "ranks": self.ranks,
        }
        optional = {
            "lengths_optional": self.lengths_optional or None,
            "step": None if self.step is None else self.step.geometry(),
            "step_unavailable": self.step_unavailable,
            "off_policy": self.off_policy,
            "rollout_correction": self.rollout_correction,
            "async_groups": self.async_groups,
            "components": self.components,
        }
        return {**out, **{k: v for k, v in optional.items() if v is not None}}


class Built:
    """A target a driver built: the typed methods of the module docstring, the one dispatch of the audit's calls.

    A subclass hands its :class:`DriverInfo` and level to ``__init__`` (``driver_info``: ``info`` is the name the
    audit's own targets give their info dict) and overrides the methods its framework answers; the others refuse.
    :attr:`third` names what the advantage level's third positional argument is: reward columns (``scores``,
    where the info names ``components``), or group ids for a function audited as its user calls it."""

    #: what a third positional argument at the advantage level holds: 'scores' or 'ids'
    third = "scores"

    def __init__(self, info: DriverInfo, level: str = "advantage") -> None:
        if level not in LEVELS:
            raise ValueError(f"level must be one of {', '.join(LEVELS)}, got {level!r}")
        self.driver_info = info
        self.level = level

    @property
    def grpo_identity_info(self) -> dict[str, Any]:
        """The target's info as every audit target carries it."""
        return self.driver_info.to_dict()

    def advantages(self, rewards: Any, G: int, scores: Any = None) -> Any:
        raise NotImplementedError(f"{self.driver_info.framework}: this target computes no advantages")

    def gradient(self, rewards: Any, G: int, lengths: Any) -> dict[str, Any]:
        raise NotImplementedError(f"{self.driver_info.framework}: this target runs no loss (level advantage)")

    def step(self, rewards: Any, G: int, lengths: Any, request: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError(f"{self.driver_info.framework}: this target runs no optimizer step")

    def off_policy(self, rewards: Any, G: int, lengths: Any, settings: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError(f"{self.driver_info.framework}: this target runs no off-policy step")

    def three_policy(self, rewards: Any, G: int, lengths: Any, rollout: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError(f"{self.driver_info.framework}: this target takes no rollout log-probabilities")

    def async_groups(self, arrival: dict[str, Any]) -> dict[str, Any]:
        """The advantages of each delivery of ``arrival`` (``{"steps": [{"trained", "advantages"}, ...]}``;
        :mod:`grpo_identity.checks.measure.arrival`); a NotImplementedError for a delivery the framework cannot
        be given (the case is then a note)."""
        raise NotImplementedError(f"{self.driver_info.framework}: this target takes no asynchronous deliveries")

    def __call__(self, rewards: Any, group_size: int, *extra: Any) -> Any:
        """Level advantage: ``fn(rewards, G[, third])``, the advantages (``third``: see :attr:`third`).  Level
        gradient: ``fn(rewards, G)``, the advantages as an array; ``fn(rewards, G, lengths)``, the gradient
        (``lengths`` None: the advantages, as a dict); ``fn(rewards, G, lengths, request)``: a step (``layout``),
        an off-policy step (``off_policy``), the step given rollout log-probabilities (``rollout``), deliveries of
        asynchronous groups (``arrival``) or the advantages of several reward columns (``scores``)."""
        G = int(group_size)
        if self.level == "advantage" or not extra:
            if len(extra) > 1:
                raise TypeError(f"an advantage target takes rewards, G and at most {self.third}; got {2 + len(extra)}")
            if extra and extra[0] is not None and self.third == "scores":
                return self.advantages(rewards, G, self._scores(extra[0]))
            return self.advantages(rewards, G, *extra)
        if len(extra) > 2:
            raise TypeError(f"a gradient target takes rewards, G, lengths and a request; got {2 + len(extra)}")
        lengths, request = extra[0], (extra[1] if len(extra) > 1 else None)
        if request is not None and "scores" in request:
            return {"advantages": self.advantages(rewards, G, scores=self._scores(request["scores"]))}
        if request is not None and "off_policy" in request:
            return self.off_policy(rewards, G, _need(lengths, "an off-policy request"), request["off_policy"])
        if request is not None and "arrival" in request:
            return self.async_groups(request["arrival"])
        if request is not None and "rollout" in request:
            return self.three_policy(rewards, G, _need(lengths, "a rollout request"), request["rollout"])
        if request is not None:
            return self.step(rewards, G, _need(lengths, "a step request"), request)
        if lengths is None:
            return {"advantages": self.advantages(rewards, G)}
        return self.gradient(rewards, G, lengths)

    def _scores(self, scores: Any) -> Any:
        """Reward columns, for a target whose info names its reward ``components`` (else a TypeError)."""
        if self.driver_info.components is None:
            raise TypeError(f"{self.driver_info.framework}: this target scores one reward, not reward columns")
        return scores


def _need(lengths: Any, what: str) -> Any:
    import numpy as np

    if lengths is None:
        raise ValueError(f"{what} needs the answers' lengths")
    return np.asarray(lengths)


@runtime_checkable
class Driver(Protocol):
    """A driver module (``checks/frameworks/NAME.py``), as :mod:`grpo_identity.checks.calls.adapters` uses it."""

    DIFFERENCES: dict[str, Difference]

    def import_check(self) -> None: ...

    def build(self, spec: Any, level: str) -> Built: ...


@dataclass(frozen=True)
class Difference:
    """One way a framework's releases differ where its driver reads their code.  Each driver keeps a table of
    them (``DIFFERENCES``, name → Difference) in place of probes spread through its code, and asks the table.

    Whether the installed release has it is read from that release's code (:meth:`present`), so a backport or a
    development build is taken as it is; the table's release numbers are checked against the code of every release
    environment the tests build (tests/checks/frameworks/test_contract.py).

    >>> Difference("json:JSONDecoder.decode", "2.6", "decodes").present()
    True
    >>> Difference("json:JSONDecoder.no_such", "9.0", "absent").expected("8.1")
    False
    """

    where: str
    """``module:Name.member`` (``Name`` defined in ``module``; a member it defines or a dataclass field), or
    ``module`` alone."""
    since: str
    """The first release that has it."""
    what: str
    """What it is and what the driver does with it, in words."""

    def present(self) -> bool:
        """Whether the installed release has it: the module imports (a bare module: it is found) and holds the
        names."""
        module, _, path = self.where.partition(":")
        try:
            if not path:
                return importlib.util.find_spec(module) is not None
            obj: Any = importlib.import_module(module)
        except (ImportError, ValueError):
            return False
        for name in path.split("."):
            if not hasattr(obj, name) and name not in getattr(obj, "__dataclass_fields__", {}):
                return False
            obj = getattr(obj, name, None)
        return True

    def require(self, release: str) -> None:
        """An :class:`AdapterError` where it is not :meth:`present` (``release``: the framework and its version, in
        words, for the message)."""
        if not self.present():
            name = self.where.replace(":", ".")
            raise AdapterError(
                f"{release} has no {name}, which the driver reads ({self.what}; releases from {self.since} on have it)"
            )

    def value_of(self, obj: Any, default: Any = None) -> Any:
        """``obj``'s member that :attr:`where` names last (a config's field), or ``default`` where the release has
        none."""
        return getattr(obj, self.where.rpartition(".")[2]) if self.present() else default

    def expected(self, release: str) -> bool:
        """Whether ``release`` has it, by the table."""
        return release_key(release) >= release_key(self.since)
