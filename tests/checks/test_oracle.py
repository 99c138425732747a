"""The absolute oracle (``checks.measure.oracle``): a step run against its loss type's objective, on numpy step targets
whose answer is known — exact objectives pass; a factor both layouts share (1/GA twice, a normaliser over the
generation batch, ranks counted twice) fails ``step_scale`` with its cause named while split invariance stays
silent; a normaliser averaged over a generation batch's steps is a deviation that names its range; weights that
depart inside a step fail ``step_weights``."""

from __future__ import annotations

import numpy as np
import pytest

from grpo_identity.checks.gradient import audit_gradient
from grpo_identity.checks.measure import oracle as O
from grpo_identity.checks.measure import steps as S
from grpo_identity.objectives import OBJECTIVES, objective_of

T = 6


def numpy_step(
    accumulation: int = 2,
    ranks: int = 1,
    steps_per_generation: int = 1,
    normaliser: str = "step_tokens",
    factor: float = 1.0,
):
    """A step target made of numpy: two optimizer steps of n/2 answers each (the geometry's), each split into
    ``ranks`` × ``accumulation`` micro-batches in the split layout (one in the unsplit one); group-centred
    advantages; every token of answer i weighs Âᵢ·factor / the ``normaliser`` ('step_tokens': its step's tokens;
    'generation_tokens': its generation batch's, which holds ``steps_per_generation`` steps; 'average_window': the
    generation batch's tokens over its steps; 'micro_tokens': its micro-batch's tokens times the micro-batches of
    the step; 'length_rows': |oᵢ| times the step's answers).  ``factor`` applies to both layouts alike."""

    def fn(r, G, L, request=None):
        r = np.asarray(r, dtype=float)
        n = r.size
        A = (r.reshape(-1, G) - r.reshape(-1, G).mean(1, keepdims=True)).reshape(-1)
        L = np.asarray(L, dtype=int)
        mask = (np.arange(T)[None, :] < L[:, None]).astype(float)
        split = (request or {}).get("layout") == "split"
        per_step = n // 2
        step = np.arange(n) // per_step
        pieces = ranks * accumulation if split else 1
        piece = (np.arange(n) % per_step) // (per_step // pieces)
        rank, micro = piece // accumulation if split else piece * 0, piece % accumulation if split else piece
        generation = step // steps_per_generation
        tokens = mask.sum(1)

        def total(key):
            _, inverse = np.unique(key, return_inverse=True)
            return np.bincount(inverse, weights=tokens)[inverse]

        denominator = {
            "step_tokens": total(step),
            "generation_tokens": total(generation),
            "average_window": total(generation) / steps_per_generation,
            "micro_tokens": total(step * 100 + piece) * pieces,
            "length_rows": tokens * per_step,
        }[normaliser]
        coefficients = (A * factor / denominator)[:, None] * mask
        return {
            "advantages": A,
            "coefficients": coefficients,
            "mask": mask,
            "step": step,
            "rank": rank,
            "micro_batch": micro,
            "generation": generation,
        }

    return fn


def _geo(objective="token_mean", **kw):
    rows = 16
    gen = rows * kw.pop("steps_per_generation", 1)
    return S.geometry(4, rows, gen, objective={"name": objective, "setting": "loss=demo", **kw})


def _audit(target, geo):
    return S.audit_step(target, geo)


def test_an_exact_objective_raises_nothing_and_records_each_steps_factor_of_one():
    out = _audit(numpy_step(), _geo())
    assert out.invariant and out.findings == []
    assert out.objective["factors"] == [1.0, 1.0] and out.objective["name"] == "token_mean"


@pytest.mark.parametrize(
    "kw, factor, cause",
    [
        ({"factor": 0.5}, 0.5, "1/gradient_accumulation_steps applied twice (1/2 once more)"),
        ({"factor": 2.0}, 2.0, "the accumulation's 1/gradient_accumulation_steps missing (×2)"),
        ({"factor": 1 / 4, "ranks": 4, "accumulation": 1}, 1 / 4, "ranks counted twice (1/4 once more)"),
        ({"factor": 4.0, "ranks": 4, "accumulation": 1}, 4.0, "ranks summed, not averaged (×4)"),
    ],
)
def test_a_shared_factor_fails_step_scale_with_its_cause_while_split_invariance_stays_silent(kw, factor, cause):
    out = _audit(numpy_step(**kw), _geo())
    assert out.invariant  # the split-vs-unsplit comparison cannot see it: both layouts share it
    (finding,) = [f for f in out.findings if f.property == "step_scale"]
    assert finding.severity == "fail" and finding.counterexample["factor"] == pytest.approx(factor, rel=1e-6)
    # both runs are off by it, so the split's accumulation or ranks are named as constants, and the layouts said
    assert f"{cause}: the configured value, divided in both runs" in finding.counterexample["causes"]
    assert "likely (both layouts alike)" in finding.message


def test_a_normaliser_over_the_whole_generation_batch_fails_and_is_named():
    target = numpy_step(normaliser="generation_tokens", steps_per_generation=2)
    out = _audit(target, _geo(steps_per_generation=2))
    assert out.invariant
    (finding,) = [f for f in out.findings if f.property == "step_scale"]
    assert finding.severity == "fail" and "a normaliser over the whole generation batch" in finding.message
    assert 0.3 < finding.counterexample["factor"] < 0.7  # about 1/steps_per_generation


def test_a_normaliser_averaged_over_the_generation_batchs_steps_is_a_deviation_naming_its_range():
    target = numpy_step(normaliser="average_window", steps_per_generation=2)
    out = _audit(target, _geo(steps_per_generation=2))
    (finding,) = [f for f in out.findings if f.property == "step_scale"]
    lo, hi = finding.counterexample["range"]
    assert finding.severity == "deviation" and lo < 1 < hi and (lo + hi) / 2 == pytest.approx(1.0)
    assert "the generation batch's mean step" in finding.message


def test_weights_that_depart_inside_a_step_fail_step_weights():
    # the documented objective is the token mean; the code divides each answer by its own length (GRPO's form)
    out = _audit(numpy_step(normaliser="length_rows"), _geo("token_mean"))
    assert out.invariant  # shared by both layouts
    (finding,) = [f for f in out.findings if f.property == "step_weights"]
    assert finding.severity == "fail" and "inside optimizer step 0" in finding.message
    # the same code judged by the objective it does follow: nothing
    assert [f for f in _audit(numpy_step(normaliser="length_rows"), _geo("seq_mean_token_mean")).findings] == []


def test_a_micro_batch_normaliser_is_its_documented_objective():
    bnpo = objective_of("trl", "loss_type", "bnpo")
    out = _audit(numpy_step(normaliser="micro_tokens"), S.geometry(4, 16, 16, objective=bnpo.for_step(T)))
    assert out.invariant is False  # the split changes it: the documented behaviour, seen by split invariance
    assert not [f for f in out.findings if f.property in ("step_scale", "step_weights", "objective")]


def test_where_the_paper_reads_the_loss_otherwise_a_note_names_both_and_which_one_judged():
    dapo = objective_of("trl", "loss_type", "dapo")
    out = _audit(numpy_step(), S.geometry(4, 16, 16, objective=dapo.for_step(T)))
    (note,) = out.findings
    assert note.property == "objective" and note.severity == "note"
    assert "judged by the framework's documented objective token_mean" in note.message
    assert "group_token_mean" in note.message and "2503.14476" in note.message


def test_the_gradient_report_fails_on_step_scale_and_carries_the_objective():
    target = numpy_step(factor=0.5)
    target.grpo_identity_info = {"step": _geo()}
    report = audit_gradient(target, name="demo")
    assert report.verdict == "fail"
    assert report.inferred.step["objective"]["factors"] == [0.5, 0.5]
    assert "against its objective token_mean" in report.format()


def test_a_geometry_naming_an_unknown_objective_is_refused():
    assert "must name one of" in S.check_geometry(_geo("token_avg"))


def test_every_documented_setting_names_a_known_objective_and_every_objective_a_known_weight_law():
    from grpo_identity.checks.report import WEIGHTS
    from grpo_identity.objectives import LOSS_SETTINGS

    for setting in LOSS_SETTINGS.values():
        assert setting.objective in OBJECTIVES and setting.alternative in (None, *OBJECTIVES)
    assert all(o.law in WEIGHTS or o.law == "other" for o in OBJECTIVES.values())


def test_the_causes_are_read_from_the_runs_layout():
    d = S.design(_geo(), T)
    run = S.run_layout(numpy_step(ranks=2, accumulation=2), d, "split")
    named = {words: value for _, words, value in O.causes(run, 0)}
    assert named["1/gradient_accumulation_steps applied twice (1/2 once more)"] == 0.5
    assert named["ranks summed, not averaged (×2)"] == 2.0


@pytest.mark.parametrize("cap, named", [(0.2, True), (5.0, False)])
def test_an_importance_weight_capped_below_one_is_named_where_it_gives_the_shared_factor(cap, named):
    # CISPO's weight clamp(ratio, max=epsilon_high): on-policy (ratio 1) a cap of 0.2 scales both layouts by 0.2
    geo = _geo(ratio_cap=cap, ratio_cap_setting=f"epsilon_high={cap:g}")
    out = _audit(numpy_step(factor=min(cap, 1.0)), geo)
    found = [f for f in out.findings if f.property == "step_scale"]
    if not named:
        assert found == []  # a cap above 1 leaves the on-policy step whole
        return
    (finding,) = found
    assert finding.counterexample["causes"] == [
        "the importance weight capped at 0.2, below its on-policy value 1 (epsilon_high=0.2: set it above 1)"
    ]


def test_a_factor_only_the_split_has_is_named_by_the_split_s_own_mechanism():
    """1/GA applied twice for real: the split run (two accumulated micro-batches) is halved, the unsplit one (no
    accumulation) is not, so split invariance sees a rescaled step and the oracle names the accumulation."""

    def twice(r, G, L, request=None):
        out = numpy_step()(r, G, L, request)
        if (request or {}).get("layout") == "split":
            out = {**out, "coefficients": out["coefficients"] / 2}
        return out

    out = _audit(twice, _geo())
    (finding,) = [f for f in out.findings if f.property == "step_scale"]
    assert finding.counterexample["causes"] == ["1/gradient_accumulation_steps applied twice (1/2 once more)"]
    assert [f.severity for f in out.findings if f.property == "split_invariance"] == ["deviation"]


def test_a_geometry_without_the_budget_its_objective_divides_by_is_refused():
    assert "give its 'budget'" in S.check_geometry(_geo("seq_mean_token_sum_norm"))
    assert "must name one of" in S.check_geometry(_geo("group_token_mean"))  # needs group keys a step run lacks
