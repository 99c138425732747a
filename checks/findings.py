"""Every finding an audit can report: its name, where in the audit it comes from, the severities it is raised
with and what it means.  This is the one list: the modules raise these names, the report's JSON schema
enumerates them, and the docs' findings table is this list.  ``tests/checks/test_findings.py`` reads the
modules' source and checks that every name raised is here, at a severity written here, and that every name
here is raised somewhere.

A finding's severity is the one its module raises it with, except where the verdict excuses it: a fail or a
deviation about a property that a recognised variant gives up by design (:data:`grpo_identity.variants.DEPARTURES`)
becomes a deviation (a note where that variant was expected), and one on rewards outside a binary-only variant's
definition a note.  :func:`may_report` says which severities a report can therefore carry.

Standard library at import (the variants' departures are read when asked).

>>> FINDINGS["zero_sum_per_group"].severities
('fail',)
>>> meaning("no_such_finding")
''
>>> may_report("zero_sum_per_group", "deviation")  # RLOO-like variants give it up by design
True
>>> may_report("keeps_whole_groups", "deviation")
False
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FindingKind", "FINDINGS", "STAGES", "meaning", "by_design", "may_report"]

#: where in the audit a finding comes from, in the order the audit runs
STAGES = (
    *("probe", "advantage", "layout", "filter", "verdict", "diagnosis", "gradient", "step", "off-policy"),
    *("three-policy", "async", "tool"),
)


@dataclass(frozen=True)
class FindingKind:
    """One finding name: the stage of the audit that raises it, the severities it may carry ('fail' breaks
    the identity, 'deviation' is a bounded factor or a documented reading, 'note' leaves the verdict alone)
    and what it means for the update."""

    name: str
    stage: str
    severities: tuple[str, ...]
    meaning: str


_F, _D, _N = ("fail",), ("deviation",), ("note",)
_FN, _DF, _FDN = ("fail", "note"), ("fail", "deviation"), ("fail", "deviation", "note")
_KINDS = (
    # the designed probe batches and the edge probes
    FindingKind(
        "probe", "probe", _F, "The target raised on the designed probe batches, so nothing of it could be measured."
    ),
    FindingKind(
        "probe_singleton",
        "probe",
        _N,
        "G = 1: a lone answer has σ = 0, so the identity gives it no push; NaN, "
        "a nonzero value (the raw reward, no baseline) or a refusal is named.",
    ),
    FindingKind(
        "probe_remainder",
        "probe",
        _FN,
        "n·G + G//2 rewards: a partial last group refused, or accepted with the whole groups unchanged (notes); "
        "a wrong shape, NaN or inf, or whole groups changed by it (fails).",
    ),
    FindingKind(
        "probe_tiny_spread",
        "probe",
        _FN,
        "A group whose rewards differ by 1e-5: how far the target blows a "
        "spread up (dividing by a σ of 1e-5 gives O(1) advantages from noise).",
    ),
    FindingKind(
        "probe_filter_singleton",
        "probe",
        _N,
        "G = 1 for a filter: every group has σ = 0; what the filter keeps is named.",
    ),
    # the advantage properties
    FindingKind(
        "well_formed",
        "advantage",
        _F,
        "One finite advantage per reward, of the rewards' shape and a float "
        "dtype, and the caller's rewards left untouched.",
    ),
    FindingKind(
        "silent_groups_exactly_zero",
        "advantage",
        _F,
        "A group whose rewards are all equal (σ = 0) gets "
        "advantages other than 0, beyond the output's rounding: g = 0 there, so any push is spurious.",
    ),
    FindingKind(
        "zero_sum_per_group",
        "advantage",
        _F,
        "A group's advantages do not sum to 0 (beyond rounding): the baseline does not remove the group's mean.",
    ),
    FindingKind(
        "permutation_equivariant",
        "advantage",
        _F,
        "Permuting the answers within a group does not permute their advantages the same way.",
    ),
    FindingKind(
        "two_valued_per_group",
        "advantage",
        _F,
        "Two-valued rewards do not give two advantages per group, the "
        "higher reward the higher (a sign flip fails here).",
    ),
    FindingKind(
        "groups_independent",
        "advantage",
        _F,
        "A group's advantages depend on the other groups of the batch "
        "or their order (beyond the one factor a batch std applies to all).",
    ),
    FindingKind(
        "stateless",
        "advantage",
        _F,
        "The same rewards give different advantages on the next call or after other calls (running statistics "
        "kept between calls, an answer that changes from call to call).",
    ),
    FindingKind(
        "matches_dial",
        "advantage",
        _F,
        "The advantages differ from the reference dial's (the expected preset, "
        "or the inferred point), so c(k, G) differs too.",
    ),
    FindingKind(
        "identity_in_vector_form",
        "advantage",
        _F,
        "g = (1/G) Σ Âᵢ sᵢ is not c·(s̄₊ − s̄₋) on two-valued "
        "groups (Theorem 1), or not c·β̂ on continuous ones (G9), for random score vectors.",
    ),
    # the layout properties (targets that take group ids)
    FindingKind(
        "layout_independent",
        "layout",
        _F,
        "Rows in another order, or with other id labels, get other "
        "advantages than when the groups come one after another.",
    ),
    FindingKind(
        "ragged_groups",
        "layout",
        _FDN,
        "Groups of different sizes do not each get their own group's "
        "advantages: fixed blocks of G assumed, zeros padded into a group's statistics, or a lone answer "
        "pushed (NaN fails; its raw reward is a deviation).",
    ),
    # the filter properties
    FindingKind(
        "filter_well_formed",
        "filter",
        _F,
        "The filter does not return one flag per group (or per answer, or "
        "the kept rows' indices), or modifies the rewards.",
    ),
    FindingKind(
        "filter_groups_independent", "filter", _F, "A group's keep decision depends on its neighbours or their order."
    ),
    FindingKind(
        "filter_stateless",
        "filter",
        _F,
        "The same rewards get other keep decisions after other calls, or when permuted within a group.",
    ),
    FindingKind(
        "keeps_groups_with_nonzero_std",
        "filter",
        _F,
        "The filter keeps other groups than the expected keep rule (DAPO's: σ > 0) keeps.",
    ),
    FindingKind(
        "keeps_whole_groups",
        "filter",
        _F,
        "A row filter keeps some answers of a group and drops others; a keep "
        "rule decides by the group's σ, for the whole group.",
    ),
    FindingKind(
        "keep_tolerance",
        "filter",
        _D,
        "The keep rule is the expected one up to a tolerance (max − min, a "
        "relative one, or the float32 resolution), which the report names.",
    ),
    # the verdict on the advantages
    FindingKind(
        "dial", "verdict", _F, "No point of the dial fits the advantages, or the point is in no preset's family."
    ),
    FindingKind(
        "matches_preset",
        "verdict",
        _FDN,
        "c(k, G) against the expected preset (or the nearest): a factor of "
        "the same family is a deviation, another family a fail.",
    ),
    FindingKind(
        "matches_declared",
        "verdict",
        _FDN,
        "The measured c(k, G) against the one the user declared (--expect with a formula or a table).",
    ),
    FindingKind(
        "variant",
        "verdict",
        _FDN,
        "What the target computes, recognised as a named variant, and where that "
        "stands relative to the identity (a documented reading of it is a deviation that names the reading).",
    ),
    FindingKind(
        "silent_nonbinary_groups_zero",
        "verdict",
        _FDN,
        "Groups of equal non-binary rewards (every reward 0.1, 0.3, 1/3 …) get |Â| > 0: a note where it is the "
        "float rounding of the group mean, a fail where it is non-finite or beyond rounding.",
    ),
    FindingKind(
        "reward_aggregation",
        "verdict",
        _N,
        "How a driver that scores several reward components combines them, measured.",
    ),
    # the diagnoses of a fail that matches nothing
    FindingKind(
        "merged_groups",
        "diagnosis",
        _F,
        "Several groups share one affine map of their rewards: their ids collide, so they are normalised as one group.",
    ),
    FindingKind(
        "reward_folded",
        "diagnosis",
        _F,
        "The advantages are a group's normalisation of Rᵢ + c·Lᵢ: a per-token "
        "term (a length penalty) folded into the reward before the group statistics.",
    ),
    # the gradient level
    FindingKind(
        "per_sample_weight",
        "gradient",
        _DF,
        "How an answer's score is weighted in the update: any law but a constant (1/|oᵢ|, 1/tokens of the step, "
        "…) is a deviation (G1 holds with weighted means, the direction changes); no known law is a fail.",
    ),
    FindingKind(
        "uniform_within_answer",
        "gradient",
        _F,
        "The tokens of one answer get different coefficients, so the update is no multiple of the answer's score sᵢ.",
    ),
    FindingKind(
        "identity_G1", "gradient", _F, "With the weight law found, the update is not c·(s̄₊ʷ − s̄₋ʷ) (theorem G1)."
    ),
    FindingKind(
        "silent_groups_zero_gradient",
        "gradient",
        _F,
        "An answer of a silent group (σ = 0) gets a nonzero "
        "token coefficient: the update moves on a group that carries no signal.",
    ),
    FindingKind(
        "masked_tokens",
        "gradient",
        _F,
        "Tokens past the end of an answer (masked padding) get a nonzero gradient, or the loss's mask counts "
        "other tokens than the answer's.",
    ),
    FindingKind(
        "update_scale",
        "gradient",
        _D,
        "The update's scale κ, over the mean over the batch's prompts of their updates (1/G)·Σᵢ Âᵢsᵢ, changes "
        "with the batch (∝ 1/G: the loss divides by the group size once more; ∝ the prompts: it sums over them).",
    ),
    FindingKind(
        "split_step",
        "gradient",
        _N,
        "The optimizer step could not be run split (the framework's own path "
        "cannot run it here); the rest of the audit stands.",
    ),
    FindingKind(
        "off_policy",
        "gradient",
        _N,
        "The off-policy step could not be run, or answered malformed; the rest of the audit stands.",
    ),
    FindingKind(
        "setting",
        "gradient",
        _N,
        "The framework's setting that gives what the report did not find (a "
        "constant per-sample weight, an update independent of the split).",
    ),
    # the optimizer step as the trainer splits it
    FindingKind(
        "split_invariance",
        "step",
        _FDN,
        "The update changes with how the step is split into micro-batches, accumulation and ranks (ρ ≠ 1), and "
        "the law that explains it; a note where there is no update to split (G = 1).",
    ),
    FindingKind(
        "masked_normaliser",
        "step",
        _F,
        "The step's normaliser counts tokens its loss masks (truncated or "
        "padded answers), so answers weigh by what the mask removed.",
    ),
    FindingKind(
        "group_slicing",
        "step",
        _FN,
        "A group one answer short changes the other groups' advantages, or its "
        "own blow up (a partial block normalised by a zero std); a note where the short group is refused.",
    ),
    FindingKind(
        "step_scale",
        "step",
        _DF,
        "An optimizer step of another size than its loss type's objective "
        "defines, with the factor; a deviation where a generation batch's steps average to it.",
    ),
    FindingKind(
        "step_weights",
        "step",
        _F,
        "Within one optimizer step, answers weigh otherwise than the objective's wᵢ (the range of fᵢ is named).",
    ),
    FindingKind(
        "objective",
        "step",
        _N,
        "The objective the step is judged against, and the other documented reading of the loss type where one exists.",
    ),
    # after the policy has moved
    FindingKind(
        "importance_weight",
        "off-policy",
        _N,
        "The importance weight the step applies, where it is none or no known law.",
    ),
    FindingKind(
        "clip_rule", "off-policy", _D, "The tokens the clip zeroes differ from those the configured rule predicts."
    ),
    FindingKind(
        "identity_off_policy",
        "off-policy",
        _F,
        "Off-policy, the update is not c·(s̃̄₊ʷ − s̃̄₋ʷ) with importance-weighted scores.",
    ),
    FindingKind(
        "off_policy_silent_groups",
        "off-policy",
        _F,
        "After the policy moved, a silent group's answers get a "
        "nonzero coefficient from the surrogate (not from a KL term).",
    ),
    FindingKind(
        "kl_moves_silent_groups",
        "off-policy",
        _D,
        "A KL term moves the silent groups: with β > 0 that is the KL's own gradient, named by its law.",
    ),
    # three policies: the rollout engine's, the trainer's old and current one (theorem G11)
    FindingKind(
        "three_policy",
        "three-policy",
        _N,
        "The step with rollout log-probabilities could not be run, or answered malformed; the rest of the audit "
        "stands.",
    ),
    FindingKind(
        "correction_estimator",
        "three-policy",
        _D,
        "The rollout correction computes another estimator than the documented one (a product of token ratios where "
        "the geometric mean is documented, say), or none that is known.",
    ),
    FindingKind(
        "correction_in_graph",
        "three-policy",
        _F,
        "The correction weight is recomputed from π_θ and left in the graph, so gradient flows through it: twice the "
        "detached weight below its cap (G11).",
    ),
    FindingKind(
        "correction_on_policy",
        "three-policy",
        _DF,
        "With rollout log-probabilities equal to the trainer's the correction is not exactly 1: a deviation where "
        "the configuration says so (a cap below 1), else a fail.",
    ),
    FindingKind(
        "rollout_logps_shifted",
        "three-policy",
        _F,
        "The rollout log-probabilities are one token off the trainer's: with equal policies each weight is "
        "π_old,t/π_old,t∓1.",
    ),
    FindingKind(
        "rollout_logps_filled",
        "three-policy",
        _F,
        "Missing rollout log-probabilities are filled with 0 (μ := 1), so each token weighs π_old(y) itself.",
    ),
    FindingKind(
        "rollout_logps_missing",
        "three-policy",
        _FN,
        "Without rollout log-probabilities the step runs instead of refusing: as if on-policy (a note), or with "
        "weights of no known rule.",
    ),
    FindingKind(
        "correction_non_finite",
        "three-policy",
        _F,
        "Non-finite rollout log-probabilities (μ = 0, NaN, an overflowing ratio) reach the gradient as inf or NaN.",
    ),
    FindingKind(
        "rollout_logps_non_finite",
        "three-policy",
        _D,
        "Non-finite rollout log-probabilities are taken without a word; the weights their tokens got are named.",
    ),
    FindingKind(
        "rollout_support_truncated",
        "three-policy",
        _F,
        "The engine's log-probabilities are renormalised over the tokens a top-p/top-k sampler keeps and the trainer's "
        "over the whole vocabulary: with equal policies each token weighs its position's kept mass S ≤ 1 (G11).",
    ),
    FindingKind(
        "identity_three_policy",
        "three-policy",
        _F,
        "With the rollout correction the update is not c·(s̃̄₊ − s̃̄₋) with the uncorrected c and ω-weighted scores.",
    ),
    # asynchronous groups: short, split, late, across weight versions; answers with no reward or no tokens
    FindingKind(
        "async_groups",
        "async",
        _N,
        "The asynchronous-groups probe could not be run, or checked less: a delivery refused, no staleness bound, "
        "a variant with no baseline.",
    ),
    FindingKind(
        "group_baseline_foreign",
        "async",
        _DF,
        "A group's baseline is not its own answers' mean: another group's reward, a batch-wide mean or a dropped "
        "answer entered it (a short or split group falling back to the batch, say).",
    ),
    FindingKind(
        "group_scale_foreign",
        "async",
        _DF,
        "A group's advantages are centred on its own answers but scaled by a statistic of others (a batch-wide σ): "
        "a deviation where the configuration documents it.",
    ),
    FindingKind(
        "empty_answer_dropped",
        "async",
        _DF,
        "An answer with no tokens is left out of its group's baseline: it was sampled with the group and has a "
        "reward, so the others' advantages move.",
    ),
    FindingKind(
        "reward_none_trained",
        "async",
        _DF,
        "An answer with no reward (None) is trained on: the None was filled in and entered its group's baseline.",
    ),
    FindingKind("staleness_ignored", "async", _DF, "Answers older than the configured staleness bound are trained on."),
    FindingKind(
        "group_mixed_versions",
        "async",
        _DF,
        "One group's baseline mixes answers of several weight versions (a group resumed across updates): not one "
        "group of the theorem; a deviation where the configuration documents it.",
    ),
    FindingKind(
        "answers_lost_or_repeated",
        "async",
        _F,
        "An answer is trained twice or was never sent, or one with a reward and tokens (within the bound, of its "
        "group's newest version) is never trained while the rest of its group is.",
    ),
    FindingKind(
        "async_crash_or_nan",
        "async",
        _F,
        "A delivery of asynchronous groups crashed the step or gave non-finite advantages.",
    ),
    # the tool
    FindingKind(
        "isolate",
        "tool",
        _N,
        "The pytest plugin ran the target in this process (it cannot be re-imported in a child), and says why.",
    ),
)

#: name -> its kind, in the order of :data:`STAGES`
FINDINGS: dict[str, FindingKind] = {k.name: k for k in sorted(_KINDS, key=lambda k: STAGES.index(k.stage))}


def meaning(name: str) -> str:
    """What a finding named ``name`` means ('' for a name that is not one)."""
    kind = FINDINGS.get(name)
    return kind.meaning if kind is not None else ""


def by_design(name: str) -> bool:
    """Whether some variant gives up the property ``name`` by design (its finding is then excused)."""
    from grpo_identity.variants import DEPARTURES

    return any(name in props for props in DEPARTURES.values())


def may_report(name: str, severity: str) -> bool:
    """Whether a report can carry the finding ``name`` at ``severity``: raised so, or excused by the verdict
    (by design: a deviation or a note; outside a binary-only variant's definition: a note)."""
    kind = FINDINGS.get(name)
    if kind is None:
        return False
    raised = set(kind.severities)
    if raised & {"fail", "deviation"}:
        raised.add("note")
        if by_design(name):
            raised.add("deviation")
    return severity in raised
