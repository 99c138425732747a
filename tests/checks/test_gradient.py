"""The gradient level (``checks.gradient``) on hand-made gradient targets, no framework needed:
each per-sample weight law is named and theorem G1 holds with it; uneven token weights, a silent
group with a gradient and a weight of no known law fail; a bf16 loss is judged at bf16's
precision; and ``audit(level="gradient")`` folds in the advantage audit of the same target."""

from __future__ import annotations

import numpy as np
import pytest

from grpo_identity import dial as D
from grpo_identity.checks import audit
from grpo_identity.checks.gradient import audit_gradient

T = 8
#: every answer weighs one over the batch's answers: a loss that averages (the identity's scale, κ = 1)
MEAN = lambda L, total, n: np.full(L.shape, 1.0 / n)  # noqa: E731


def _target(weight, advantage=D.GRPO, spread=0.0, silent_leak=0.0):
    """A gradient target: aᵢₜ = Âᵢ·weight(Lᵢ, L)·(1 + spread·t) on the answer's tokens."""

    def fn(rewards, G, lengths):
        A = D.advantages(rewards, G, advantage)
        mask = (np.arange(T)[None, :] < lengths[:, None]).astype(float)  # (n, T)
        w = weight(lengths.astype(float), lengths.astype(float).sum(), len(rewards))
        coeff = (A * w)[:, None] * (1 + spread * np.arange(T))[None, :] * mask
        R = rewards.reshape(-1, G)
        silent = np.repeat(R.max(1) == R.min(1), G)
        coeff[silent] += silent_leak * mask[silent]
        return {"advantages": A, "coefficients": coeff, "mask": mask}

    return fn


@pytest.mark.parametrize(
    "weight, law, verdict",
    [
        (lambda L, total, n: np.full(L.shape, 1.0 / (n * T)), "constant", "pass"),
        (lambda L, total, n: 1.0 / (n * L), "1/length", "deviation"),
        (lambda L, total, n: np.full(L.shape, 1.0 / total), "1/step_tokens", "deviation"),
    ],
)
def test_the_per_sample_weight_is_named_and_the_identity_holds_with_it(weight, law, verdict):
    report = audit_gradient(_target(weight))
    assert report.inferred.per_sample_weight == law
    assert report.verdict == verdict, report.format()
    assert report.inferred.silent_groups_zero_gradient and report.inferred.uniform_within_answer
    assert max(row["G1_residual"] for row in report.coefficient_table) < 1e-9


def test_a_weight_of_one_over_the_groups_tokens_is_named_and_the_identity_holds_with_it():
    # DAPO's per-prompt reading (SkyRL's loss_reduction=prompt_mean): each token weighs 1/(its group's tokens)
    def fn(rewards, G, lengths):
        A = D.advantages(rewards, G, D.GRPO)
        mask = (np.arange(T)[None, :] < lengths[:, None]).astype(float)
        group_tokens = np.repeat(lengths.reshape(-1, G).sum(1), G).astype(float)
        return {"advantages": A, "coefficients": (A / group_tokens)[:, None] * mask, "mask": mask}

    report = audit_gradient(fn)
    assert report.inferred.per_sample_weight == "1/group_tokens" and report.verdict == "deviation", report.format()
    assert max(row["G1_residual"] for row in report.coefficient_table) < 1e-9
    assert "each group counts alike" in report.format()
    from grpo_identity.checks.gradient import _weights

    L = np.array([1.0, 3, 2, 2, 5, 1])  # groups of 3: 6 and 8 tokens
    assert _weights("1/group_tokens", L, 3).tolist() == [1 / 6] * 3 + [1 / 8] * 3


def test_a_weight_that_follows_no_law_fails():
    report = audit_gradient(_target(lambda L, total, n: 1.0 / (L * L)))
    assert report.verdict == "fail" and report.inferred.per_sample_weight == "other"


def test_token_weights_that_vary_within_an_answer_fail():
    report = audit_gradient(_target(lambda L, total, n: np.ones_like(L), spread=0.1))
    assert report.verdict == "fail" and not report.inferred.uniform_within_answer
    assert "uniform_within_answer" in [f.property for f in report.findings]


def test_a_silent_group_with_a_gradient_fails_and_says_where():
    report = audit_gradient(_target(lambda L, total, n: np.ones_like(L), silent_leak=1e-3))
    assert report.verdict == "fail" and not report.inferred.silent_groups_zero_gradient
    assert any(f.property == "silent_groups_zero_gradient" and "σ = 0" in f.message for f in report.findings)


def test_an_expected_preset_compares_the_advantage_coefficient():
    mean = _target(MEAN, advantage=D.DR_GRPO)
    same, other = audit_gradient(mean, expect="dr_grpo"), audit_gradient(mean, expect="grpo")
    assert same.verdict == "pass", same.format()
    assert other.verdict == "deviation" and any(f.property == "matches_preset" for f in other.findings)


def _per_group_size(n):
    """G of a probe batch of n answers ((G + 3)·G: a group per k = 0…G and two silent groups)."""
    return round((-3 + (9 + 4 * n) ** 0.5) / 2)


@pytest.mark.parametrize(
    "weight, kappa, law",
    [
        (lambda L, total, n: np.full(L.shape, 1.0 / (n * T)), lambda G, N: 1 / T, None),  # Dr. GRPO's budget
        (lambda L, total, n: np.full(L.shape, 1.0 / (n * _per_group_size(n))), lambda G, N: 1 / G, "1/G"),
        (lambda L, total, n: np.ones_like(L), lambda G, N: N, "the number of answers"),  # loss.sum()
        (lambda L, total, n: 1.0 / L, lambda G, N: N, "the number of answers"),  # a sum of token means
        (lambda L, total, n: np.full(L.shape, 1.0 / (total * n)), lambda G, N: 1 / N, "1/(number of answers)"),
    ],
)
def test_the_update_scale_over_the_mean_of_the_prompts_updates_is_read_and_must_not_change_with_the_batch(
    weight, kappa, law
):
    report = audit_gradient(_target(weight))
    got = {int(G): k for G, k in report.inferred.update_scale.items()}
    assert got == pytest.approx({G: kappa(G, (G + 3) * G) for G in (2, 3, 4, 8)}, rel=1e-9)
    scale = [f for f in report.findings if f.property == "update_scale"]
    if law is None:
        assert not scale and report.verdict == "pass", report.format()
        assert "update scale κ (over the mean of the prompts' updates): 0.125 at G=2" in report.format()
    else:
        assert [f.severity for f in scale] == ["deviation"] and f"κ ∝ {law} (" in scale[0].message, report.format()
        assert "at G=2 (5 prompts)" in scale[0].message and report.verdict == "deviation"


def test_a_mask_that_is_not_the_answers_tokens_fails_once_naming_each_group_size():
    def every_token(rewards, G, lengths):  # the lengths ignored: the padding is trained on
        A = D.advantages(rewards, G, D.GRPO)
        mask = np.ones((rewards.size, T))
        return {"advantages": A, "coefficients": A[:, None] * mask / rewards.size, "mask": mask}

    report = audit_gradient(every_token)
    masked = [f for f in report.findings if f.property == "masked_tokens"]
    assert len(masked) == 1 and report.verdict == "fail", report.format()
    assert masked[0].message.startswith("G=2: the loss's mask counts 8 tokens for an answer of ")
    assert all(f"G={G}: " in masked[0].message for G in (3, 4, 8))


def test_the_json_names_level_verdict_inferred_weight_and_findings():
    out = audit_gradient(_target(lambda L, total, n: 1.0 / L)).to_dict()
    assert out["level"] == "gradient" and out["verdict"] == "deviation"
    assert out["inferred"]["per_sample_weight"] == "1/length"
    assert {"property", "message", "severity"} <= set(out["findings"][0])


# --- the gradient level as the audit runs it: the advantage audit of the same target folded in ---
def test_the_gradient_level_also_audits_the_advantages_of_the_same_target():
    report = audit(
        _target(lambda L, total, n: np.full(L.shape, 1.0 / n), advantage=D.DR_GRPO),
        level="gradient",
        expect="dr_grpo",
        isolate=False,
        max_examples=30,
    )
    out = report.to_dict()
    assert out["verdict"] == "pass" and out["matches"] == "dr_grpo", report.format()
    assert (
        out["inferred"]["scale"] == "none"
        and out["inferred"]["centre"] == "mean"
        and out["inferred"]["per_sample_weight"] == "constant"
    )
    assert (
        out["advantage"]["level"] == "advantage"
        and len(out["advantage"]["properties"]) >= 5
        and out["advantage"]["examples"] >= 5
    )
    assert "advantage level" in report.format() and "inferred dial: centre mean, scale none" in report.format()


def test_the_worse_verdict_of_the_two_levels_wins_and_the_preset_check_is_said_once():
    alone = audit_gradient(_target(MEAN, advantage=D.DR_GRPO), expect="grpo")
    both = audit(
        _target(MEAN, advantage=D.DR_GRPO),
        level="gradient",
        expect="grpo",
        isolate=False,
        max_examples=30,
    )
    assert alone.verdict == "deviation"  # the gradient level alone: c(k, G) off by a factor
    assert both.verdict == "fail" and both.matches == "dr_grpo"  # the advantage level: c ∝ σ² where GRPO's c ∝ σ
    assert [f.property for f in both.findings].count("matches_preset") == 1


def _as_bf16(x):
    import torch

    return torch.as_tensor(x, dtype=torch.float32).to(torch.bfloat16).float().double().numpy()


def test_a_loss_computed_in_bf16_is_judged_at_bf16_precision_not_failed_for_rounding():
    fp32 = _target(lambda L, total, n: 1.0 / (n * L))

    def bf16(rewards, G, lengths):  # the same loss, its coefficients rounded to bfloat16
        out = fp32(rewards, G, lengths)
        return {**out, "coefficients": _as_bf16(out["coefficients"])}

    report = audit_gradient(bf16)
    assert report.inferred.coefficient_precision == "bfloat16" and report.inferred.per_sample_weight == "1/length", (
        report.format()
    )
    assert report.verdict == "deviation" and report.inferred.uniform_within_answer
    assert audit_gradient(fp32).inferred.coefficient_precision == "float32"


def test_bf16_rounding_does_not_hide_a_wrong_weight():
    wrong = _target(lambda L, total, n: 1.0 / (L * L))

    def bf16(rewards, G, lengths):
        out = wrong(rewards, G, lengths)
        return {**out, "coefficients": _as_bf16(out["coefficients"])}

    assert audit_gradient(bf16).verdict == "fail"


def test_a_driver_that_says_lengths_are_optional_is_spared_its_loss_in_the_advantage_audit():
    inner, seen = _target(MEAN), []

    def fn(rewards, G, lengths):
        seen.append(lengths is None)
        return {"advantages": D.advantages(rewards, G, D.GRPO)} if lengths is None else inner(rewards, G, lengths)

    fn.grpo_identity_info = {"lengths_optional": True}
    report = audit(fn, level="gradient", isolate=False, max_examples=20)
    assert report.verdict == "pass" and report.matches == "grpo", report.format()
    assert seen.count(False) == 2 * 4 and seen.count(True) > 20  # two gradient probes per G; the rest without a loss


def test_an_exact_float64_loss_is_judged_at_float32_tolerance_even_if_its_values_are_short_fractions():
    report = audit_gradient(_target(lambda L, total, n: np.ones_like(L), advantage=D.DR_GRPO))  # a loss.sum()
    assert report.inferred.coefficient_precision == "float32" and report.inferred.per_sample_weight == "constant"
    assert [f.property for f in report.findings if f.severity != "note"] == ["update_scale"], report.format()


def test_a_custom_dial_can_be_expected_at_the_gradient_level():
    mine = D.GRPO.replace(eps=1e-3)
    report = audit(
        _target(MEAN, advantage=mine),
        level="gradient",
        expect=mine,
        isolate=False,
        max_examples=20,
    )
    assert report.expected == mine.name and report.verdict in ("pass", "deviation"), report.format()


CARELESS_FILE = """
import numpy as np

_BUFFER = {}

def _step(rewards, G, lengths, advantages):
    mask = (np.arange(8)[None, :] < np.asarray(lengths)[:, None]).astype(float)
    return {"advantages": advantages, "coefficients": advantages[:, None] * mask, "mask": mask}

def shared(rewards, G, lengths):  # hands out one advantages buffer, overwritten call after call
    R = rewards.reshape(-1, G)
    buffer = _BUFFER.setdefault(len(rewards), np.empty(len(rewards)))
    buffer[:] = (R - R.mean(1, keepdims=True)).reshape(-1)
    return _step(rewards, G, lengths, buffer)

def in_place(rewards, G, lengths):  # centres the caller's rewards where they lie
    R = rewards.reshape(-1, G)
    R -= R.mean(1, keepdims=True)
    return _step(rewards, G, lengths, rewards.copy())

def integers(rewards, G, lengths):
    R = rewards.reshape(-1, G)
    return _step(rewards, G, lengths, (R - R.mean(1, keepdims=True)).reshape(-1).astype(int))
"""


@pytest.mark.parametrize("isolate", [True, False], ids=["child", "this process"])
@pytest.mark.parametrize(
    "fn, said",
    [
        ("shared", "hands out one shared buffer"),
        ("in_place", "modified its input rewards in place"),
        ("integers", "advantages are floating point"),
    ],
)
def test_the_advantages_of_a_gradient_target_get_the_advantage_levels_checks_in_either_transport(
    fn, said, isolate, tmp_path, monkeypatch
):
    """The checks of one call's advantages (the caller's rewards untouched, no shared buffer, floating point) are
    made where the target runs, in a child as in this process: a child's output arrives as a copy."""
    (tmp_path / "careless.py").write_text(CARELESS_FILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    target = f"{tmp_path / 'careless.py'}:{fn}" if isolate else getattr(__import__("careless"), fn)
    report = audit(target, level="gradient", isolate=isolate, max_examples=10)
    failed = [f.message for f in report.findings if f.severity == "fail" and f.property == "well_formed"]
    assert report.verdict == "fail" and len(failed) == 1 and said in failed[0], report.format()


GRADIENT_FILE = """
import numpy as np

def dr_grpo_sum(rewards, G, lengths):  # Dr. GRPO advantages, each answer's token losses summed, answers averaged
    A = (rewards.reshape(-1, G) - rewards.reshape(-1, G).mean(1, keepdims=True)).reshape(-1)
    mask = (np.arange(8)[None, :] < lengths[:, None]).astype(float)
    return {"advantages": A, "coefficients": A[:, None] * mask / len(A), "mask": mask}
"""


def test_a_function_in_a_file_is_audited_at_the_gradient_level_in_a_child_process(tmp_path):
    path = tmp_path / "loss.py"
    path.write_text(GRADIENT_FILE)
    report = audit(f"{path}:dr_grpo_sum", level="gradient", expect="dr_grpo", max_examples=20)
    assert report.level == "gradient" and report.verdict == "pass", report.format()
    assert report.inferred.per_sample_weight == "constant" and report.matches == "dr_grpo"


def test_a_gradient_target_is_built_from_an_advantage_function_and_a_loss_in_a_few_lines():

    from grpo_identity.checks.gradient import gradient_target

    def adv(rewards, group_size):
        r = rewards.reshape(-1, group_size)
        return (r - r.mean(1, keepdims=True)).reshape(-1)

    def token_mean_over_the_batch(logprobs, advantages, mask):
        return -(logprobs * advantages[:, None] * mask).sum() / mask.sum()

    def token_sum_answer_mean(logprobs, advantages, mask):
        return -(logprobs * advantages[:, None] * mask).sum() / len(advantages)

    assert audit_gradient(gradient_target(adv, token_mean_over_the_batch)).inferred.per_sample_weight == "1/step_tokens"
    report = audit_gradient(gradient_target(adv, token_sum_answer_mean))
    assert report.inferred.per_sample_weight == "constant" and report.verdict == "pass", report.format()


def test_a_silent_groups_gradient_at_float32_resolution_is_zero_and_a_push_is_not():
    from grpo_identity.checks.gradient import _silent_gradient

    r = np.array([0.0, 0.0, 1.0, 0.0])  # a silent group, then a live one
    C = np.array([[3e-9, 3e-9], [3e-9, 3e-9], [0.7, 0.7], [-0.7, -0.7]])  # a batch-whitening residue on the silent
    assert _silent_gradient(2, r, C) is None
    C[0] = [0.05, 0.05]  # a push of 7 % of the live answers'
    assert _silent_gradient(2, r, C).property == "silent_groups_zero_gradient"


TORCH_FILE = """
import numpy as np
import torch

def dr_grpo_sum(rewards, G, lengths):  # as GRADIENT_FILE, on torch tensors as a loss gives them: float32, autograd
    r = torch.as_tensor(np.asarray(rewards), dtype=torch.float32).reshape(-1, G)
    A = (r - r.mean(1, keepdim=True)).reshape(-1)
    mask = (torch.arange(8)[None, :] < torch.as_tensor(np.asarray(lengths))[:, None]).float()
    logp = torch.zeros(len(A), 8, requires_grad=True)
    (-(A[:, None] * logp * mask).sum() / len(A)).backward()
    return {"advantages": A.to(DTYPE), "coefficients": -logp.grad.to(DTYPE), "mask": mask}
"""


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_gradient_target_that_returns_torch_tensors_is_audited_in_a_child_and_in_this_process(tmp_path, dtype):
    pytest.importorskip("torch")
    path = tmp_path / "torch_loss.py"
    path.write_text(TORCH_FILE + f"\nDTYPE = torch.{dtype}\n")
    for isolate in (True, False):
        report = audit(f"{path}:dr_grpo_sum", level="gradient", expect="dr_grpo", max_examples=20, isolate=isolate)
        assert report.verdict == "pass" and report.matches == "dr_grpo", report.format()
        assert report.inferred.per_sample_weight == "constant"


MALFORMED_FILE = """
import numpy as np

def _ok(rewards, lengths):
    mask = (np.arange(8)[None, :] < np.asarray(lengths)[:, None]).astype(float)
    return {"advantages": np.zeros(len(rewards)), "coefficients": mask.copy(), "mask": mask}

def array(rewards, G, lengths=None):
    return np.zeros(len(rewards))

def no_mask(rewards, G, lengths=None):
    out = _ok(rewards, lengths)
    del out["mask"]
    return out

def text(rewards, G, lengths=None):
    return {**_ok(rewards, lengths), "coefficients": "abc"}

def nan_token(rewards, G, lengths=None):
    out = _ok(rewards, lengths)
    out["coefficients"][0, 0] = np.nan
    return out

def too_short(rewards, G, lengths=None):
    out = _ok(rewards, lengths)
    return {**out, "coefficients": out["coefficients"][:, :2], "mask": out["mask"][:, :2]}
"""


@pytest.mark.parametrize(
    "fn, said",
    [
        ("array", "returned a value of type ndarray on the gradient probes, not a dict of 'advantages'"),
        ("no_mask", "returned a dict without 'mask' on the gradient probes, which the audit reads beside"),
        ("text", "returned 'coefficients' as an array of <U3 on the gradient probes, not of real numbers"),
        (
            "nan_token",
            "returned NaN or inf in 1 coefficients of tokens inside the mask whose answers' advantages are finite",
        ),
        ("too_short", "returned shapes 10 · 10×2 · 10×2 for advantages · coefficients · mask on the gradient probes"),
    ],
)
def test_a_gradient_output_of_the_wrong_form_is_one_failed_probe_that_says_what_is_wrong(tmp_path, fn, said):
    path = tmp_path / "malformed.py"
    path.write_text(MALFORMED_FILE)
    report = audit(f"{path}:{fn}", level="gradient", max_examples=5)
    assert report.verdict == "fail" and [f.property for f in report.findings] == ["probe"], report.format()
    assert said in report.findings[0].message, report.findings[0].message


DYING_STEP = """
import os
from grpo_identity.checks.measure.steps import geometry, micro_batch_mean

def step(rewards, G, lengths, request=None):
    if request is not None:  # the split step: the process dies
        os._exit(3)
    return micro_batch_mean(rewards, G, lengths, {"layout": "unsplit", "holes": [0] * len(rewards)}, scope="step")

step.grpo_identity_info = {"step": geometry(4, 8, 8)}
"""


def test_a_target_that_dies_in_the_split_step_is_a_failed_probe_that_names_the_step(tmp_path):
    path = tmp_path / "dying.py"
    path.write_text(DYING_STEP)
    report = audit(f"{path}:step", level="gradient", max_examples=5)
    assert report.verdict == "fail" and [f.property for f in report.findings] == ["probe"], report.format()
    assert report.findings[0].message.startswith("the target crashed on the optimizer step, split: ")


def test_nan_advantages_of_silent_groups_are_the_advantage_audits_finding_and_the_weight_is_still_named():
    """A group std with no epsilon: silent groups' advantages and coefficients are NaN; the coefficients of every
    other answer are finite, so the weight law is measured and the advantage audit names the NaN."""

    def no_eps(rewards, G, lengths):
        R = rewards.reshape(-1, G)
        with np.errstate(invalid="ignore", divide="ignore"):
            A = ((R - R.mean(1, keepdims=True)) / R.std(1, keepdims=True)).reshape(-1)
        mask = (np.arange(T)[None, :] < lengths[:, None]).astype(float)
        return {"advantages": A, "coefficients": (A / lengths)[:, None] * mask, "mask": mask}

    report = audit(no_eps, level="gradient", isolate=False, max_examples=20)
    assert report.verdict == "fail" and "probe" not in {f.property for f in report.findings}, report.format()
    assert "well_formed" in {f.property for f in report.findings}
    assert report.inferred.per_sample_weight == "1/length"


@pytest.mark.parametrize("expect", ["maxrl", "c=sigma**2"])
def test_a_variant_or_a_coefficient_expected_at_the_gradient_level_is_the_reports_expected(expect):
    report = audit(_target(MEAN, advantage=D.DR_GRPO), level="gradient", expect=expect, isolate=False, max_examples=10)
    assert report.expected == report.advantage.expected == expect


def test_a_gradient_past_an_answers_end_fails_and_a_mask_that_leaves_out_a_silent_answer_does_not():
    def leaky(rewards, G, lengths):  # the mask is right, the coefficients run one token past each answer
        A = D.advantages(rewards, G, D.GRPO)
        mask = (np.arange(T)[None, :] < lengths[:, None]).astype(float)
        past = (np.arange(T)[None, :] < np.minimum(lengths + 1, T)[:, None]).astype(float)
        return {"advantages": A, "coefficients": A[:, None] * past / len(A), "mask": mask}

    def dapo_mask(rewards, G, lengths):  # silent groups' answers out of the mask (their Â = 0: no gradient lost)
        A = D.advantages(rewards, G, D.GRPO)
        live = np.repeat(np.ptp(rewards.reshape(-1, G), axis=1) > 0, G)
        mask = (np.arange(T)[None, :] < lengths[:, None]) * live[:, None] * 1.0
        return {"advantages": A, "coefficients": A[:, None] * mask / len(A), "mask": mask}

    masked = [f for f in audit_gradient(leaky).findings if f.property == "masked_tokens"]
    assert len(masked) == 1 and "tokens past the end of an answer get a gradient" in masked[0].message
    assert not [f for f in audit_gradient(dapo_mask).findings if f.property == "masked_tokens"]


def test_a_dapo_loss_that_averages_over_the_kept_prompts_has_no_update_scale_finding():
    def kept_mean(rewards, G, lengths):  # each answer's token sum over the live answers' count
        A = D.advantages(rewards, G, D.GRPO)
        live = np.repeat(np.ptp(rewards.reshape(-1, G), axis=1) > 0, G)
        mask = (np.arange(T)[None, :] < lengths[:, None]).astype(float)
        return {"advantages": A, "coefficients": A[:, None] * mask / live.sum(), "mask": mask}

    report = audit_gradient(kept_mean)
    assert report.inferred.per_sample_weight == "constant" and report.verdict == "pass", report.format()


def test_every_named_weight_law_gives_the_loss_that_averages_what_it_counts_an_update_scale_of_one():
    from grpo_identity.checks.gradient import LAWS, _law

    G = 4
    L = [np.array([3.0, 5, 2, 7, 4, 4, 9, 1]), np.array([6.0, 2, 8, 3, 5, 1, 2, 7])]  # two batches of two prompts
    averages = {  # each answer's weight in the loss that averages over answers, tokens or prompts, written out
        "constant": lambda L: np.full_like(L, 1 / L.size),
        "1/step_tokens": lambda L: np.full_like(L, 1 / L.sum()),
        "1/length": lambda L: 1 / (L.size * L),
        "1/group_tokens": lambda L: 1 / (L.size // G * np.repeat(L.reshape(-1, G).sum(1), G)),
    }
    assert set(averages) == set(LAWS)
    for name, weight in averages.items():
        law, _, value = _law([weight(li) for li in L], L, G)
        assert law == name and LAWS[law].per_prompt(L[0], G) * value == pytest.approx(1.0), name
