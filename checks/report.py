"""The audit's result: one :class:`Report` per audit, whatever its level, rendered from data.

A report holds the verdict, the preset the target matches, what the probes inferred (a typed fit: the dial
(:class:`AdvantageFit`), the keep rule of a filter (:class:`FilterFit`), or the per-sample weight, the split step
and the off-policy step of the gradient level (:class:`GradientFit`)), the findings and the tables.  A
gradient-level audit folds the advantage-level audit of the same run in as ``advantage`` (a :class:`Report` too).
``to_dict`` is the JSON the CLI prints (every fit as one flat ``inferred`` object); ``format`` renders the same
data as text, section by section, and never reads another report's text.  The verdict rules live in
:mod:`grpo_identity.checks.verdict`.

>>> inf = AdvantageFit(centre="mean", scale="none", alpha=1.0)
>>> r = Report("my_adv", "advantage", "advantage", "pass", "dr_grpo", None, inf, [])
>>> r.to_dict()["verdict"], r.passed
('pass', True)
>>> print(r.format().splitlines()[1])
verdict: PASS   matches: dr_grpo   expected: any preset
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, TypedDict

import numpy as np

from grpo_identity import dial as D
from grpo_identity.checks import KINDS, LEVELS
from grpo_identity.foundation import format_table

__all__ = [
    "VERDICTS",
    "SEVERITIES",
    "LEVELS",
    "KINDS",
    "WEIGHTS",
    "Finding",
    "AdvantageFit",
    "FilterFit",
    "GradientFit",
    "StepFit",
    "OffPolicyFit",
    "ThreePolicyFit",
    "AsyncGroupsFit",
    "AggregationFit",
    "Fit",
    "inferred_dict",
    "Report",
    "AuditReport",
]

#: the verdicts, best first
VERDICTS = ("pass", "deviation", "fail")
#: a finding's severity: it breaks the identity, it is a bounded factor, or it changes nothing
SEVERITIES = ("fail", "deviation", "note")
#: per-sample weight laws of the gradient level, their denominator's scope named, and what each means
#: for the update (the split step's laws: :mod:`grpo_identity.checks.measure.steps`)
WEIGHTS = {
    "constant": "every answer weighs the same (the paper's 1/G), however the step is split",
    "1/length": "length bias: an answer's push scales as 1/|yᵢ| (long correct answers move less, "
    "long wrong ones are penalised less)",
    "1/step_tokens": "every token weighs 1/(tokens of the optimizer step), so an answer's weight depends on the "
    "other groups' lengths, not on how the step is split",
    "1/group_tokens": "every token weighs 1/(tokens of its group's answers): each group counts alike whatever its "
    "length, and an answer's weight depends on its group's other answers (DAPO's per-prompt reading)",
    "1/step_rows": "an answer weighs 1/(answers in its optimizer step): answers of a short step push harder",
    "1/(length·step_rows)": "an answer weighs 1/(|yᵢ|·answers in its optimizer step)",
    "1/generation_tokens": "every token weighs 1/(tokens of the generation batch, which spans several optimizer steps)",
    "1/rank_tokens": "a token weighs 1/(tokens on its rank): ranks holding fewer tokens push harder",
    "1/micro_batch_tokens": "a token weighs 1/(tokens of its micro-batch): short micro-batches push harder",
    "1/micro_batch_rows": "an answer weighs 1/(answers in its micro-batch): small micro-batches push harder",
    "1/(length·micro_batch_rows)": "an answer weighs 1/(|yᵢ|·answers in its micro-batch)",
    "1/(length·rank_rows)": "an answer weighs 1/(|yᵢ|·answers on its rank)",
}
#: target_info keys the report's first line shows
#: (the drivers name the estimator 'estimator' and the loss by its framework's own key)
_INFO_KEYS = (
    "framework", "version", "entry", "estimator", "preset", "scale_rewards", "loss_type", "loss_agg_mode",
    "loss_reduction", "options",
)  # fmt: skip
#: counterexample keys a finding's second line shows, in this order
_EXAMPLE_KEYS = ("group_size", "n_groups", "k", "group", "group_rewards", "group_output", "rewards", "values")


@dataclass
class Finding:
    """One broken property, or a note: its name, an explicit message, the (shrunk) counterexample."""

    property: str
    message: str
    counterexample: dict[str, Any] = field(default_factory=dict)
    severity: str = "fail"
    """'fail' (breaks the identity), 'deviation' (a bounded factor), or 'note' (no effect on the verdict)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "property": self.property,
            "message": self.message,
            "counterexample": self.counterexample,
            "severity": self.severity,
        }


class AggregationFit(TypedDict, total=False):
    """How a driver that scores several reward components combines them
    (:mod:`grpo_identity.checks.measure.aggregation`); empty where the audit did not probe it."""

    rule: str
    """'sum_then_normalize', 'normalize_then_sum' or 'other'."""
    weights: list[float]
    """The configured weight of each component."""
    moved_reward_changes: float
    """The largest change of an advantage when part of a reward moves from one component to another, each answer's
    weighted sum kept (a sum first does not change)."""
    rescaled_component_changes: float
    """The largest change when one component is rescaled affinely (normalising each first does not change)."""
    reshaped_component_changes: float
    """The largest change when one component is reshaped, not affinely."""
    ignores_a_component: bool
    """That reshaping changes nothing: the target ignores a component (the rule is then 'other')."""


@dataclass
class AdvantageFit:
    """The advantage level: the point of the dial the target's advantages fit (``None`` where nothing fits), and
    what else its probes measured.

    The dial is centre, scale, ddof, ε and a constant factor α; :meth:`reference` computes the advantages it
    predicts for any batch."""

    centre: str | None = None
    scale: str | None = None
    ddof: int | None = None
    eps: float | None = None
    eps_resolution: float = 0.0
    eps_inside_sqrt: bool = False
    """The ε sits under the square root, √(σ² + ε) (a ``whiten``-style scale), not σ + ε: off the
    dial, a bounded factor σ/√(σ² + ε) on c(k, G)."""
    alpha: float | None = None
    """A constant factor on the advantages (1 for every preset)."""
    precision: str = "float64"
    """The dtype the target computes in, which sets the tolerances it is judged with ('bool' for a filter)."""
    fit_residual: float | None = None
    coupled: bool = False
    """The advantages of a group change with the other groups of the batch."""
    silent_nonbinary_max_abs: float | None = None
    """Largest |Â| on silent groups of 0.1, 0.3, 1/3 … (0 when exactly zero)."""
    silent_nonbinary_worst: dict[str, float] | None = None
    """The reward value and G where that largest residue appeared."""
    coefficients: dict[int, list[float]] = field(default_factory=dict)
    """c(k, G) = (k/G)·Â₊ for k = 0…G, by probed G."""
    batch_std: dict[int, float] = field(default_factory=dict)
    """Population std of each probe batch (for batch-std dials)."""
    aggregation: AggregationFit = field(default_factory=lambda: AggregationFit())
    """How a driver that scores several reward components combines them; empty where the audit did not probe it."""
    why: str = ""
    """Why no dial fits, or what the fit rests on, in words."""

    def describe(self) -> str:
        """The dial in a few words: ``centre mean, group_std (ddof 1, eps 0.0001)``."""
        if self.centre is None:
            return "no dial fits"
        if self.scale == "none":
            return f"centre {self.centre}, no std"
        where = " inside √" if self.eps_inside_sqrt else ""
        return f"centre {self.centre}, {self.scale} (ddof {self.ddof}, eps {float(self.eps or 0):.3g}{where})"

    def dial(self) -> D.Dial | None:
        """The inferred point of the dial (α aside), or ``None``."""
        if self.centre is None or self.scale is None:
            return None
        return D.Dial(
            centre=self.centre,  # type: ignore[arg-type]
            scale=self.scale,  # type: ignore[arg-type]
            ddof=self.ddof or 0,
            eps=float(self.eps or 0.0),
            eps_where="variance" if self.eps_inside_sqrt else "std",
        )

    def reference(self) -> Callable[[np.ndarray, int], np.ndarray] | None:
        """α · dial advantages: what the target should return on any batch."""
        d = self.dial()
        if d is None:
            return None
        a = float(self.alpha or 1.0)
        return lambda r, G: a * D.advantages(r, G, d)

    def reference_ids(self) -> Callable[[np.ndarray, np.ndarray], np.ndarray] | None:
        """α · dial advantages of rows in any order with group ids (groups of any size)."""
        d = self.dial()
        if d is None:
            return None
        a = float(self.alpha or 1.0)
        return lambda r, ids: a * D.advantages(r, dial=d, group_ids=ids)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["coefficients"] = {str(G): c for G, c in self.coefficients.items()}
        out["batch_std"] = {str(G): s for G, s in self.batch_std.items()}
        return out


@dataclass
class FilterFit:
    """A filter (kind 'filter' or 'row-filter'): the keep rule its kept groups fit."""

    keep: str | None = None
    """'nonzero_std', 'all' or 'other' (advantages cannot show a keep rule)."""
    keep_tolerance: float | None = None
    """How far below σ > 0 a 'nonzero_std' filter still drops groups (None: exactly)."""
    keep_measure: str | None = None
    """What that tolerance is measured in: 'max − min', 'std (ddof 0)', 'std (ddof 1)', 'relative',
    or a dtype's resolution ('float32 resolution')."""
    precision: str = "bool"
    """A filter computes keep flags."""
    why: str = ""
    """What the rule rests on, or the first group it gets wrong, in words."""

    def describe(self) -> str:
        """The keep rule in a few words: ``keeps nonzero_std (σ > 0 up to 1e-06 max − min)``."""
        if self.keep is None:
            return "no keep rule inferred"
        within = f" (σ > 0 up to {self.keep_tolerance:.3g} {self.keep_measure})" if self.keep_tolerance else ""
        return f"keeps {self.keep}{within}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class StepFit(TypedDict, total=False):
    """A framework's optimizer step as its trainer splits it (:mod:`grpo_identity.checks.measure.steps`); empty
    where the target announces no step."""

    weight: str
    """The per-sample weight law of the split step (a key of :data:`WEIGHTS`, or 'other')."""
    weight_unsplit: str
    """The law of the same batch as one unsplit step."""
    invariant: bool | None
    layouts: dict[str, str]
    """'split' and 'unsplit': each run's micro-batches, accumulation and ranks in words."""
    settings: dict[str, Any]
    ranks: str
    """How the data-parallel ranks ran: one of :data:`~grpo_identity.checks.frameworks.contract.RANKS`."""
    pieces: list[dict[str, Any]]
    """Per micro-batch: step, rank, micro_batch, rows, tokens and its weight over the unsplit step's."""
    objective: dict[str, Any]
    """The step against the objective its loss type defines (:mod:`grpo_identity.checks.measure.oracle`): ``name``,
    ``formula``, ``setting``, ``factors`` (each optimizer step's scale on it) and ``seconds``."""
    seconds: float
    """The wall time of the split and the unsplit runs, together."""


class OffPolicyFit(TypedDict, total=False):
    """A step after the policy has moved (:mod:`grpo_identity.checks.measure.offpolicy`); empty where the target
    announces no off-policy step."""

    importance_weight: str
    """'token', 'sequence' (GSPO), 'none' or 'other'."""
    importance_weight_means: str
    fit_residual: float | None
    nearest_law: str | None
    kl_law: str | None
    beta: float
    clip: dict[str, Any]
    """The configured ``epsilon``, ``epsilon_high`` and ``delta``."""
    clipped_share: float | None
    clip_predicted_share: float | None
    clip_rule_matches: bool | None
    """Against the configured ``clip``."""
    clip_mismatched_tokens: int | None
    clip_example: dict[str, Any] | None
    silent_groups_zero_gradient: bool | None
    silent_size: dict[str, Any]
    """Where silent groups move: their coefficients' size against the non-silent answers'."""
    identity_holds: bool | None
    identity_weight: str
    """The per-sample weight law the identity was checked with (the gradient level's)."""
    identity: list[dict[str, Any]]
    """Per group: c on- and off-policy, their ratio and the residual of theorem G10."""
    perturbation: dict[str, Any]
    settings: dict[str, Any]
    """The target's (where its old log-probabilities come from, its importance-sampling level)."""
    seconds: float


class ThreePolicyFit(TypedDict, total=False):
    """The step given the rollout engine's log-probabilities (:mod:`grpo_identity.checks.measure.rollout`, theorem
    G11); empty where the target announces no rollout correction."""

    estimator: str
    """The estimator the correction computes (a key of ``ESTIMATORS``), or 'other'."""
    estimator_means: str
    in_graph: bool
    """The weight is recomputed from π_θ and left in the graph."""
    fit_residual: float
    documented: str | None
    on_policy_weight_one: bool
    on_policy_as_configured: bool
    """Equal log-probabilities weigh 1, or as the configured estimator says (a cap below 1)."""
    on_policy_weight_range: list[float]
    shift: int | None
    """±1 where the rollout log-probabilities are a token off the trainer's."""
    missing: str
    """Without rollout log-probabilities: 'refused', 'on-policy', 'filled with 0', 'non-finite' or 'other'."""
    missing_message: str
    non_finite: str
    """Given μ = 0, NaN and an overflowing ratio: 'refused', 'crashed', 'finite' or 'non-finite'."""
    non_finite_message: str
    non_finite_weights: dict[str, Any]
    """Per value (μ = 0, NaN, e⁹⁰ on one token, one call each): the token's weight, or 'refused', 'crashed',
    'non-finite'."""
    support: str
    """Under the configured truncating sampler (top-p/top-k), equal policies: 'replayed' (weight 1), 'truncated'
    (each token weighs the estimator of its kept mass, G11), 'other', or 'untruncated' (the sampler kept every probed
    token's whole distribution); absent without one."""
    kept_mass_range: list[float]
    support_weight_range: list[float]
    identity_holds: bool | None
    identity_estimator: str | None
    """The estimator whose weights the identity is checked with: the documented one, else the fitted one."""
    identity: list[dict[str, Any]]
    """Per group: c corrected over c uncorrected, and the residual of theorem G11."""
    mismatch: dict[str, Any]
    settings: dict[str, Any]
    seconds: float


class AsyncGroupsFit(TypedDict, total=False):
    """Groups that arrive short, split, late or across weight versions, and answers with no reward or no tokens
    (:mod:`grpo_identity.checks.measure.arrival`); empty where the target announces no asynchronous groups."""

    max_staleness: int | None
    """The staleness bound the target announced (None: none, so late answers are not checked)."""
    calibrated: bool
    """Whole fresh groups' advantages are a·(r − r̄), a > 0, so a group's mean baseline is checked against it."""
    isolated: bool
    """Whole fresh groups in one batch get what each gets alone (no batch statistic), so each group is checked
    against the same answers delivered alone."""
    calibration: list[str]
    """The findings of the whole fresh groups (a batch statistic, answers left untrained, a crash)."""
    cases: dict[str, dict[str, Any]]
    """Per case (``CASES``): 'trained' (with the answers trained per step, the findings' names, and per step),
    'refused', 'crashed' or 'unsupported' (a delivery the driver cannot give its framework; with the message)."""
    seconds: float


@dataclass
class GradientFit:
    """The gradient level: the per-sample weight of the loss's gradient, the optimizer step as the trainer splits
    it, and the step after the policy has moved; with the advantage level's fit of the same run (``advantage``)."""

    per_sample_weight: str | None = None
    """A law of :data:`WEIGHTS` ('constant', '1/length', '1/step_tokens' …) or 'other'."""
    coefficient_precision: str | None = None
    """'float32', or 'bfloat16' when the loss's coefficients are bf16 numbers."""
    weight_by_group_size: dict[str, dict[str, str]] = field(default_factory=dict)
    """The weight law and its evidence at each probed G."""
    silent_groups_zero_gradient: bool | None = None
    uniform_within_answer: bool | None = None
    """Every token of an answer gets the same coefficient."""
    update_scale: dict[str, float] = field(default_factory=dict)
    """κ at each probed G (a weight law of a name): the update over the mean over the batch's prompts of their
    updates (1/G)·Σᵢ Âᵢsᵢ; 1 for a loss that averages, a constant for one that also divides by a constant (Dr.
    GRPO's generation budget), and a κ that changes with G is the ``update_scale`` deviation."""
    step: StepFit = field(default_factory=lambda: StepFit())
    off_policy: OffPolicyFit = field(default_factory=lambda: OffPolicyFit())
    three_policy: ThreePolicyFit = field(default_factory=lambda: ThreePolicyFit())
    async_groups: AsyncGroupsFit = field(default_factory=lambda: AsyncGroupsFit())
    advantage: AdvantageFit = field(default_factory=AdvantageFit)
    """The advantage-level fit of the same run's advantages (empty where none was audited)."""

    def describe(self) -> str:
        """The advantage level's dial in a few words (:meth:`AdvantageFit.describe`)."""
        return self.advantage.describe()

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self) if f.name != "advantage"}
        return {**self.advantage.to_dict(), **out}


#: what the probes tell about a target, one type per level and kind
Fit = AdvantageFit | FilterFit | GradientFit
#: the keys of ``Report.to_dict()["inferred"]``, in the order the JSON has always had: every fit's fields, so one
#: JSON shape serves every report
INFERRED_KEYS = (
    *("centre", "scale", "ddof", "eps", "eps_resolution", "eps_inside_sqrt", "alpha"),
    *("keep", "keep_tolerance", "keep_measure", "precision", "fit_residual", "coupled"),
    *("silent_nonbinary_max_abs", "silent_nonbinary_worst", "coefficients", "batch_std", "why"),
    *("per_sample_weight", "coefficient_precision", "weight_by_group_size", "silent_groups_zero_gradient"),
    *("uniform_within_answer", "step", "off_policy", "three_policy", "async_groups", "aggregation", "update_scale"),
)


#: keys this version added to ``inferred``: every report writes them, the schema does not require them, so that
#: the reports of earlier versions (the stored framework audits among them) still validate
INFERRED_NEW = ("three_policy", "async_groups")


def inferred_dict(fit: Fit) -> dict[str, Any]:
    """``fit`` as the report's flat ``inferred`` object: its own fields over every other fit's defaults."""
    blank = {**GradientFit().to_dict(), **FilterFit().to_dict(), **AdvantageFit().to_dict()}
    return {**{k: blank[k] for k in INFERRED_KEYS}, **fit.to_dict()}


@dataclass
class Report:
    """One audit's result, at either level (see the module docstring)."""

    target: str
    level: str
    kind: str
    verdict: str
    matches: str | None
    expected: str | None
    inferred: Fit
    """What the probes tell: an :class:`AdvantageFit`, a :class:`FilterFit` (kind filter) or a :class:`GradientFit`
    (level gradient).  ``to_dict`` writes every fit as one flat object (:func:`inferred_dict`)."""
    findings: list[Finding]
    factors: list[dict[str, Any]] = field(default_factory=list)
    """c_target / c_expected per G (at k = G/2, and min/max over k), for a deviation."""
    coefficient_table: list[dict[str, Any]] = field(default_factory=list)
    """The level's table: c(k, G) against the reference (advantage), or the effective coefficient
    of the gradient with theorem G1's residual (gradient)."""
    examples: int = 0
    properties: list[str] = field(default_factory=list)
    seconds: float = 0.0
    target_info: dict[str, Any] = field(default_factory=dict)
    advantage: Report | None = None
    """Gradient level: the advantage-level audit of the advantages the same run computed."""

    @property
    def passed(self) -> bool:
        """True for 'pass' and 'deviation' (the CLI's exit code 0 without ``--strict``)."""
        return self.verdict != "fail"

    @property
    def properties_run(self) -> list[str]:
        """The properties run (an older name of :attr:`properties`)."""
        return self.properties

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of ``grpo-identity audit --json``."""
        out = {
            "target": self.target,
            "level": self.level,
            "kind": self.kind,
            "verdict": self.verdict,
            "matches": self.matches,
            "expected": self.expected,
            "inferred": inferred_dict(self.inferred),
            "findings": [f.to_dict() for f in self.findings],
            "factors": self.factors,
            "coefficient_table": self.coefficient_table,
            "examples": self.examples,
            "properties": self.properties,
            "seconds": round(self.seconds, 3),
            "target_info": self.target_info,
        }
        if self.advantage is not None:
            out["advantage"] = self.advantage.to_dict()
        return out

    def format(self) -> str:
        """The report as text: head, the gradient section, the advantage section, the findings."""
        lines = _head(self)
        if isinstance(self.inferred, GradientFit):
            lines += _gradient_section(self.inferred, self.coefficient_table)
            lines += _step_section(self.inferred.step)
            lines += _off_policy_section(self.inferred.off_policy)
            lines += _three_policy_section(self.inferred.three_policy)
            lines += _async_groups_section(self.inferred.async_groups)
            if self.advantage is not None:
                sub = "\n".join(_advantage_section(self.advantage)).splitlines()
                lines += ["", "advantage level (the same configuration's advantages, property-tested):"]
                lines += [f"  {ln}" if ln else ln for ln in sub]
        else:
            lines += _advantage_section(self)
        return "\n".join(lines + _findings_section(self.findings))


# --- sections of the text ------------------------------------------------------------------------
def _head(r: Report) -> list[str]:
    shown = {k: v for k, v in r.target_info.items() if k in _INFO_KEYS and v not in ({}, None, "")}
    info = ", ".join(f"{k} {v}" for k, v in shown.items())
    head = f"audit of {r.target}" + (f" ({info})" if info else "") + f", level {r.level}, kind {r.kind}"
    expected = r.expected or "any preset"
    lines = [head, f"verdict: {r.verdict.upper()}   matches: {r.matches or '-'}   expected: {expected}"]
    lines += _driver_lines(r.target_info.get("driver_settings") or {})
    if r.target_info.get("stand_ins"):  # what the framework imports or runs that the driver stood in for
        lines.append("stood in: " + ", ".join(map(str, r.target_info["stand_ins"])))
    call = r.target_info.get("call")
    if call:
        ids = f", ids as {call['ids_input']}" if call.get("ids_input") not in (None, call.get("input")) else ""
        lines.append(f"called as: {call.get('call')}, rewards as {call.get('input')} {call.get('reward_dtype')}{ids}")
    env = r.target_info.get("environment")
    if env:
        lines.append(_environment_line(env))
    return lines


def _driver_lines(settings: dict[str, Any]) -> list[str]:
    """What the driver set (:class:`~grpo_identity.checks.frameworks.contract.DriverSettings`), a line each."""
    forced = [
        f"{k} {v['driver']}" + (f" (yours {v['yours']})" if v.get("yours") not in (None, v["driver"]) else "")
        for k, v in (settings.get("forced") or {}).items()
    ]
    lines = []  # entries apart by "; ": a value may hold commas ("2 (the per-G probes), 4 (the step)")
    if forced or settings.get("note"):
        lines.append("driver settings: " + "; ".join(x for x in (*forced, settings.get("note")) if x))
    if settings.get("defaults"):
        chosen = "; ".join(f"{k}={v}" for k, v in settings["defaults"].items())
        lines.append(f"driver defaults (you set none of these): {chosen}")
    if settings.get("ignored"):
        lines.append("ignored (keys of the framework's script, not of its trainer): " + ", ".join(settings["ignored"]))
    return lines


def _environment_line(env: dict[str, Any]) -> str:
    """Where a release ran: ``environment: resolved as of 2025-08-30 (uv), torch 2.13.0+cpu, … (PATH)``."""
    versions = env.get("versions") or {}
    shown = ", ".join(f"{k} {versions[k]}" for k in ("transformers", "torch", "numpy") if k in versions)
    when = f" {env['as_of'][:10]}" if env.get("as_of") else ""
    line = f"environment: {env.get('method', '?')}{when}" + (f"; {shown}" if shown else "") + f" ({env.get('path')})"
    return line + (f"\n  note: {env['note']}" if env.get("note") else "")


def _gradient_section(inf: GradientFit, table: list[dict[str, Any]]) -> list[str]:
    law = inf.per_sample_weight
    yes = {True: "yes", False: "NO", None: "not measured"}
    lines = [
        f"per-sample weight: {law} ({WEIGHTS.get(law or '', 'no known law')})",
        f"silent groups give zero gradient: {yes[inf.silent_groups_zero_gradient]}; "
        f"token weights uniform within an answer: {yes[inf.uniform_within_answer]}",
    ]
    if inf.update_scale:
        kappa = ", ".join(f"{k:.4g} at G={G}" for G, k in inf.update_scale.items())
        lines.append(f"update scale κ (over the mean of the prompts' updates): {kappa}")
    if table:
        rows = [
            [r["G"], r["k"], r["c_gradient"], r["c_advantage"], _or_dash(r["c_reference"]), r["G1_residual"]]
            for r in table
        ]
        headers = ["G", "k", "c gradient", "c advantage", "c reference", "G1 residual"]
        lines += [
            "",
            "effective coefficient c in g = c·(s̄₊ʷ − s̄₋ʷ) (the loss's scale included) and the "
            "advantage-level c(k, G) = (k/G)·Â₊:",
            format_table(rows, headers),
        ]
    return lines


def _step_section(step: StepFit) -> list[str]:
    if not step:
        return []
    yes = {True: "yes", False: "NO", None: "not measured"}
    layouts = step.get("layouts") or {}
    lines = [
        "",
        f"optimizer step as split ({layouts.get('split', '-')}; ranks {step.get('ranks', 'one')}): "
        f"weight {step.get('weight')}; unsplit ({layouts.get('unsplit', '-')}): weight {step.get('weight_unsplit')}",
        f"split-invariant: {yes[step.get('invariant')]}",
    ]
    objective = step.get("objective") or {}
    if objective:
        lines.append(
            f"against its objective {objective.get('name')} (wᵢ = {objective.get('formula')}; "
            f"{objective.get('setting')}): each optimizer step {_factors_text(objective.get('factors') or [])} of it"
        )
    pieces = step.get("pieces") or []
    if pieces:
        keys = ("step", "rank", "micro_batch", "rows", "tokens")
        rows = [[*(p[k] for k in keys), _or_dash(p["weight_ratio"])] for p in pieces]
        headers = ["step", "rank", "micro-batch", "answers", "tokens", "weight / unsplit"]
        lines += [format_table(rows, headers)]
    return lines


def _factors_text(factors: list[float]) -> str:
    """``1×`` (every step the same) or ``0.87× … 1.13×``."""
    if not factors:
        return "not measured"
    lo, hi = min(factors), max(factors)
    return f"{lo:.4g}×" if hi - lo <= 1e-9 else f"{lo:.4g}× … {hi:.4g}×"


def _off_policy_section(off: OffPolicyFit) -> list[str]:
    if not off:
        return []
    yes = {True: "yes", False: "NO", None: "not judged"}
    moved = off.get("perturbation") or {}
    settings = off.get("settings") or {}
    law = off.get("importance_weight")
    lines = [
        "",
        f"off-policy step (the policy moved by seeded noise of {moved.get('scale')} after the batch was scored; "
        f"configured importance_sampling_level {settings.get('importance_sampling_level', '-')}):",
        f"  importance weight: {law} ({off.get('importance_weight_means')}); fit residual "
        f"{_num(off.get('fit_residual'))}" + (f", nearest law {off['nearest_law']}" if off.get("nearest_law") else ""),
    ]
    clip = off.get("clip") or {}
    predicted = off.get("clip_predicted_share")
    configured = ""
    if predicted is not None:
        configured = f" (the configured ε {clip.get('epsilon')} / ε_high {clip.get('epsilon_high')}: {_num(predicted)})"
    lines.append(
        f"  clipped share {_num(off.get('clipped_share'))} of the live tokens of non-silent answers{configured}; "
        f"clip rule min(ρÂ, clip(ρ)·Â) as configured: {yes[off.get('clip_rule_matches')]}"
    )
    if off.get("beta"):
        lines.append(f"  KL term: β = {off['beta']:g}, −∂KL/∂log π fitted as {off.get('kl_law') or 'none'}")
    size = off.get("silent_size")
    silent = yes[off.get("silent_groups_zero_gradient")]
    if size:
        silent += (
            f" (their token coefficients reach {_num(size['max_ratio'])}× the largest of the non-silent answers', "
            f"norm {_num(size['norm_ratio'])}× theirs; KL law {size.get('kl_law')})"
        )
    lines.append(f"  silent groups give zero gradient: {silent}")
    rows = off.get("identity") or []
    holds = yes[off.get("identity_holds")]
    if rows:
        ratios = [row["ratio"] for row in rows]
        holds += (
            f" (c off-policy / on-policy {_num(min(ratios))} … {_num(max(ratios))} over {len(rows)} groups, "
            f"residual ≤ {_num(max(row['residual'] for row in rows))})"
        )
    lines.append(f"  identity with importance-weighted scores, g = c·(s̃̄₊ʷ − s̃̄₋ʷ), c on-policy's (G10): {holds}")
    if settings.get("old_logps"):
        lines.append(f"  old log-probabilities: {settings['old_logps']}")
    return lines


def _three_policy_section(fit: ThreePolicyFit) -> list[str]:
    if not fit:
        return []
    yes = {True: "yes", False: "NO", None: "not judged"}
    settings = fit.get("settings") or {}
    documented = fit.get("documented") or "-"
    lines = [
        "",
        f"three policies (rollout log-probabilities log π_old − N(0, {(fit.get('mismatch') or {}).get('scale')}²) "
        f"per token; {settings.get('setting') or 'the configured correction'}):",
        f"  estimator: {fit.get('estimator')} ({fit.get('estimator_means')}); documented {documented}; fit residual "
        f"{_num(fit.get('fit_residual'))}"
        + ("; recomputed from π_θ and left in the graph" if fit.get("in_graph") else ""),
        f"  equal log-probabilities give weight 1: {yes[fit.get('on_policy_weight_one')]}"
        + (f" (shifted by {fit['shift']:+d} token)" if fit.get("shift") else ""),
        f"  missing rollout log-probabilities: {fit.get('missing')}; non-finite ones: {fit.get('non_finite')}",
    ]
    if fit.get("support"):
        lo, hi = fit.get("kept_mass_range") or [float("nan")] * 2
        kept = f"keeping a mass {_num(lo)} … {_num(hi)} of each token's distribution"
        lines.append(f"  the sampler ({settings.get('sampler')}) {kept}, equal policies weigh: {fit['support']}")
    rows = fit.get("identity") or []
    holds = yes[fit.get("identity_holds")]
    if rows:
        ratios = [row["ratio"] for row in rows]
        holds += f" (c corrected / uncorrected {_num(min(ratios))} … {_num(max(ratios))} over {len(rows)} groups)"
    lines.append(
        f"  identity with {fit.get('identity_estimator') or '-'}'s weights, g = c·(s̃̄₊ − s̃̄₋), c uncorrected's (G11): "
        f"{holds}"
    )
    return lines


def _async_groups_section(fit: AsyncGroupsFit) -> list[str]:
    if not fit:
        return []
    bound = fit.get("max_staleness")
    judged = (
        "against the same answers alone" if fit.get("isolated", True) else "not: whole groups share a batch statistic"
    )
    judged += "" if fit.get("calibrated") else "; no a·(r − r̄) baseline"
    lines = ["", f"asynchronous groups (staleness bound {'none announced' if bound is None else bound}; each group "
             f"judged {judged}):"]  # fmt: skip
    if fit.get("calibration"):
        lines.append(f"  whole fresh groups: {', '.join(fit['calibration'])}")
    clean = "as the identity" if fit.get("isolated", True) else "trained (its own baseline not judged)"
    for case, got in (fit.get("cases") or {}).items():
        said = got["outcome"] if got["outcome"] != "trained" else ", ".join(got.get("problems") or []) or clean
        lines.append(f"  {case}: {said}")
    return lines


def _num(x: Any) -> str:
    return "-" if x is None else f"{x:.4g}"


def _advantage_section(r: Report) -> list[str]:
    lines = [_dial_line(r)]
    inf = r.inferred
    if isinstance(inf, AdvantageFit) and r.kind == "advantage" and inf.silent_nonbinary_max_abs is not None:
        broken = any(f.property == "silent_groups_exactly_zero" for f in r.findings)
        binary = "NOT exactly 0 (see findings)" if broken else "exactly 0"
        lines.append(f"silent groups: binary {binary}; all-0.1-style groups |Â| ≤ {inf.silent_nonbinary_max_abs:.3g}")
    lines.append(f"properties: {len(r.properties)} run on {r.examples} hypothesis examples in {r.seconds:.1f} s")
    if isinstance(inf, AdvantageFit) and inf.aggregation:
        weights = ", ".join(f"{w:g}" for w in inf.aggregation.get("weights", []))
        rule = inf.aggregation.get("rule")
        lines.append(f"reward components: {rule} (weights {weights}; see finding reward_aggregation)")
    if r.coefficient_table:
        rows = [
            [t["G"], t["k"], t["c_target"], _or_dash(t["c_reference"]), _or_dash(t["ratio"])]
            for t in r.coefficient_table
        ]
        reference = r.coefficient_table[0]["reference"]
        against = f"against {reference}" if reference else "measured as (k/G)·Â₊ (no per-group reference)"
        lines += [
            "",
            f"update coefficient c(k, G) in g = c·(s̄₊ − s̄₋), {against}:",
            format_table(rows, ["G", "k", "c target", "c reference", "ratio"]),
        ]
    if r.factors:
        rows = [[f["G"], f["factor_at_half"], f["factor_min"], f["factor_max"]] for f in r.factors]
        lines += ["", format_table(rows, ["G", "factor at k=G/2", "min over k", "max over k"])]
    return lines


def _dial_line(r: Report) -> str:
    inf = r.inferred
    if isinstance(inf, FilterFit):
        return f"inferred keep rule: {inf.keep} ({inf.why})"
    if isinstance(inf, GradientFit):
        inf = inf.advantage
    if inf.centre is None:
        return f"inferred dial: none fits ({inf.why})"
    parts = [f"centre {inf.centre}", f"scale {inf.scale}"]
    if inf.scale != "none":
        where = " inside the square root, √(σ² + ε)" if inf.eps_inside_sqrt else ""
        parts += [f"ddof {inf.ddof}", f"eps {inf.eps:.3g}{where} (resolution {inf.eps_resolution:.1g})"]
    if inf.alpha not in (None, 1.0):
        parts.append(f"constant factor {inf.alpha:.6g}")
    if any(f.property == "matches_dial" and f.severity == "fail" for f in r.findings):  # shown only where it fits
        return f"inferred dial: none fits (the nearest, {', '.join(parts)}, departs: finding matches_dial)"
    return "inferred dial: " + ", ".join(parts) + f"; computes in {inf.precision}"


def _findings_section(findings: list[Finding]) -> list[str]:
    if not findings:
        return ["findings: none"]
    lines = ["", "findings:"]
    for f in findings:
        lines.append(f"  [{f.severity}] {f.property}: {f.message}")
        shown = {k: f.counterexample[k] for k in _EXAMPLE_KEYS if k in f.counterexample}
        if shown:
            lines.append(f"      counterexample: {shown}")
    return lines


def _or_dash(x: Any) -> Any:
    return "-" if x is None else x


#: the name :class:`Report` had when the gradient level had a report type of its own
AuditReport = Report
