"""How the audit calls a user's function (``checks.calls.calling``): the signature decides the form, the
annotation or the first call the input kind, and the advantages come back from whatever the
function returns; what it cannot call is a ``CallError`` that says what to pass."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _user_code import (
    compute_grpo_advantages,
    dr_grpo_grid,
    dr_grpo_keyword_only,
    grpo_by_uid,
    grpo_returns_a_dict,
    grpo_returns_a_tuple,
    needs_a_temperature,
    takes_only_strings,
    verl_like_estimator,
)

from grpo_identity import dial as D
from grpo_identity.checks.calls.calling import Caller, CallError, CallOptions
from grpo_identity.checks.options import OptionError

R = np.array([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0])  # two groups of 4


@pytest.mark.parametrize(
    "fn, form, call",
    [
        (compute_grpo_advantages, "flat", "compute_grpo_advantages(R, group_size=G)"),
        (dr_grpo_keyword_only, "flat", "dr_grpo_keyword_only(R, num_generations=G)"),
        (dr_grpo_grid, "grid", "dr_grpo_grid(R2)"),
        (grpo_by_uid, "ids", "grpo_by_uid(R, uids=IDS)"),
        (
            verl_like_estimator,
            "verl",
            "verl_like_estimator(token_level_rewards=TR, response_mask=MASK, index=UIDS)",
        ),
        (grpo_returns_a_tuple, "flat", "grpo_returns_a_tuple(R, group_size=G)"),
    ],
)
def test_the_signature_decides_how_the_function_is_called(fn, form, call):
    caller = Caller.for_function(fn)
    assert caller.plan.form == form and caller.plan.describe() == call


class _GRPOModule(torch.nn.Module):
    def forward(self, rewards: torch.Tensor, group_size: int) -> torch.Tensor:
        return torch.as_tensor(D.advantages(rewards.numpy(), group_size, D.GRPO))


def _unwrapped(fn):
    def wrapper(*args, **kwargs):  # a decorator without functools.wraps: only *args, **kwargs are told
        return fn(*args, **kwargs)

    return wrapper


@pytest.mark.parametrize(
    "fn, call",
    [
        (_GRPOModule(), "fn(R, group_size=G)"),  # a torch module: its forward's parameters
        (_unwrapped(lambda rewards, G: D.advantages(rewards, G, D.GRPO)), "wrapper(R, G)"),  # by position
    ],
)
def test_a_callable_that_tells_only_args_and_kwargs_gets_rewards_and_g_by_position_or_its_forwards_names(fn, call):
    caller = Caller.for_function(fn)
    assert caller.plan.form == "flat" and caller.plan.describe() == call
    assert np.allclose(caller(R, 4), D.advantages(R, 4, D.GRPO))


def _float32_only(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    assert rewards.dtype == torch.float32, f"expects float32 rewards, got {rewards.dtype}"
    return torch.as_tensor(D.advantages(rewards.double().numpy(), group_size, D.GRPO))


def _int_index(token_level_rewards, response_mask, index):
    ids = np.array([int(i) for i in index])  # this codebase's prompt ids are ints
    scores = (token_level_rewards * response_mask).sum(-1).numpy()
    out = np.zeros_like(scores)
    for g in np.unique(ids):
        out[ids == g] = D.advantages(scores[ids == g], int((ids == g).sum()), D.GRPO)
    adv = torch.as_tensor(out)[:, None] * response_mask
    return adv, adv


def test_a_first_call_refused_as_the_audit_makes_it_is_a_call_error_naming_the_option_under_which_it_runs():
    with pytest.raises(CallError) as exc:
        Caller.for_function(_float32_only)(R, 4)
    assert str(exc.value) == (
        "_float32_only raised AssertionError: expects float32 rewards, got torch.float64 when called as "
        "_float32_only(R, group_size=G) with torch float64 rewards; it runs when given --reward-dtype float32"
    )
    assert np.allclose(
        Caller.for_function(_float32_only, CallOptions(reward_dtype="float32"))(R, 4), D.advantages(R, 4, D.GRPO)
    )
    with pytest.raises(CallError, match=r'it runs when given --call "_int_index\(token_level_rewards=TR, '
                       r'response_mask=MASK, index=IDS\)"$'):  # fmt: skip
        Caller.for_function(_int_index)(R, 4)


def test_an_exception_no_other_call_avoids_or_one_after_an_answer_is_the_functions_own():
    def broken(rewards: torch.Tensor, group_size: int):
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        Caller.for_function(broken)(R, 4)
    calls = []

    def second_fails(rewards: torch.Tensor, group_size: int):
        calls.append(rewards.dtype)
        if len(calls) > 1:
            assert rewards.dtype == torch.float32
        return rewards

    caller = Caller.for_function(second_fails)
    caller(R, 4)
    with pytest.raises(AssertionError):
        caller(R, 4)
    assert calls == [torch.float64, torch.float64]  # no call of another dtype after the first answer


@pytest.mark.parametrize(
    "fn, dial",
    [
        (compute_grpo_advantages, D.VERL),
        (dr_grpo_keyword_only, D.DR_GRPO),
        (dr_grpo_grid, D.DR_GRPO),
        (grpo_by_uid, D.Dial(eps=1e-6)),
        (verl_like_estimator, D.VERL),
        (grpo_returns_a_tuple, D.GRPO),
        (grpo_returns_a_dict, D.GRPO),
    ],
)
def test_each_form_gives_one_advantage_per_reward_in_the_batchs_order(fn, dial):
    out = Caller.for_function(fn)(R, 4)
    A = out.detach().double().numpy() if isinstance(out, torch.Tensor) else np.asarray(out, dtype=np.float64)
    assert np.allclose(A, D.advantages(R, 4, dial), atol=1e-6)


def test_the_input_kind_comes_from_the_annotation_else_from_the_first_call():
    assert Caller.for_function(compute_grpo_advantages).plan.input == "torch"  # annotated
    caller = Caller.for_function(lambda rewards, G: rewards.view(-1, G).sum(1).repeat_interleave(G) * 0.0 + rewards)
    assert caller.plan.input == "auto"
    caller(R, 4)  # numpy has no .view(-1, G) with these arguments: torch is tried next, and kept
    assert caller.plan.input == "torch"
    only_lists = Caller.for_function(lambda rewards, G: [r - sum(rewards) / len(rewards) for r in rewards])
    only_lists(R, 4)
    assert only_lists.plan.input in ("numpy", "list")


def test_a_function_that_takes_no_input_the_audit_can_pass_is_a_call_error_saying_what_to_pass():
    caller = Caller.for_function(takes_only_strings)
    with pytest.raises(CallError, match="takes none of numpy arrays, torch tensors or lists.*--input.*--call"):
        caller(R, 4)


def test_an_exception_that_is_not_about_the_input_is_the_functions_own():
    def broken(rewards, G):
        raise RuntimeError("division by zero in my code")

    with pytest.raises(RuntimeError, match="division by zero"):
        Caller.for_function(broken)(R, 4)


def test_a_parameter_the_audit_cannot_fill_asks_for_a_template_and_the_template_fills_it():
    with pytest.raises(CallError, match=r"needs temperature.*--call"):
        Caller.for_function(needs_a_temperature)
    options = CallOptions(call="needs_a_temperature(R, G, temperature=2.0)")
    caller = Caller.for_function(needs_a_temperature, options)
    assert np.allclose(caller(R, 4), D.advantages(R, 4, D.DR_GRPO) / 2)
    picked = Caller.for_function(grpo_returns_a_tuple, CallOptions(call="grpo_returns_a_tuple(R, G)[0]"))
    assert picked.plan.form == "template"


@pytest.mark.parametrize(
    "call, words",
    [
        ("fn(rewards=R, temp=T)", "uses 'T'"),
        ("fn(rewards=__import__('os'))", "neither a name nor a literal"),
        ("not a call", "is no Python call"),
        ("R + G", "must be a call"),
    ],
)
def test_a_template_is_parsed_safely_and_a_bad_one_names_the_option(call, words):
    with pytest.raises(OptionError, match=words) as info:
        CallOptions(call=call)
    assert info.value.field == "call"


def test_rewards_go_in_the_dtype_asked_for_and_bfloat16_needs_torch():
    seen = {}

    def record(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
        seen["dtype"] = rewards.dtype
        return rewards - rewards.view(-1, group_size).mean(1).repeat_interleave(group_size)

    Caller.for_function(record, CallOptions(reward_dtype="bfloat16"))(R, 4)
    assert seen["dtype"] == torch.bfloat16
    with pytest.raises(OptionError, match="bfloat16 needs torch tensors"):
        CallOptions(input="numpy", reward_dtype="bfloat16")


def test_rows_in_any_order_with_group_ids_reach_a_function_that_takes_them():
    caller = Caller.for_function(grpo_by_uid)
    order = np.random.default_rng(0).permutation(R.size)
    ids = np.repeat([70, 30], 4)[order]
    assert np.allclose(caller(R[order], 4, ids), grpo_by_uid(R, np.repeat([0, 1], 4))[order])
    with pytest.raises(CallError, match="takes no group ids"):
        Caller.for_function(dr_grpo_keyword_only)(R, 4, ids)


def test_a_function_written_for_lists_is_called_with_lists_and_its_list_is_read():
    from _user_code import grpo_on_lists

    caller = Caller.for_function(grpo_on_lists)
    assert caller.plan.input == "list"  # `rewards: list`
    assert np.allclose(caller(R, 4), D.advantages(R, 4, D.GRPO))


def test_a_bug_every_input_meets_alike_is_the_functions_own_not_a_refusal():
    from _user_code import loops_with_a_bug

    with pytest.raises(TypeError, match="'float' object cannot be interpreted as an integer"):
        Caller.for_function(loops_with_a_bug)(R, 4)


def test_an_isinstance_assert_sends_the_first_call_on_to_torch_and_ids_go_in_the_rewards_kind():
    from _user_code import torch_by_group_ids, torch_only_by_assert

    caller = Caller.for_function(torch_only_by_assert)
    caller(R, 4)
    assert caller.plan.input == "torch"
    by_ids = Caller.for_function(torch_by_group_ids)
    out = by_ids(R, 4, np.repeat([7, 3], 4))
    assert np.allclose(out.numpy(), D.advantages(R, 4, D.GRPO))


@pytest.mark.parametrize("name, kind", [("torch_rewards_numpy_index", "numpy"), ("torch_rewards_list_index", "list")])
def test_group_ids_go_in_the_kind_their_own_annotation_names(name, kind):
    import _user_code

    caller = Caller.for_function(getattr(_user_code, name))
    assert (caller.plan.input, caller.plan.ids_input) == ("torch", kind)
    out = caller(R, 4, np.repeat([7, 3], 4))
    assert np.allclose(out.numpy(), D.advantages(R, 4, D.GRPO))


def test_a_required_parameter_that_is_not_the_group_size_asks_for_a_template():
    from _user_code import needs_num_prompts

    with pytest.raises(CallError, match=r'needs num_prompts.*--call "needs_num_prompts\(R, num_prompts=\.\.\.\)"'):
        Caller.for_function(needs_num_prompts)


@pytest.mark.parametrize(
    "call, words",
    [
        ("__import__('os').system('x')(R, G)", "by its name"),
        ("fn(R, **{'eps': 1e-3})", "not \\*\\*mappings"),
        ("fn(R, G)[0:1]", "picks the output with"),
    ],
)
def test_a_template_calls_a_name_with_named_values_and_picks_by_index_or_key(call, words):
    with pytest.raises(OptionError, match=words):
        CallOptions(call=call)


def test_a_list_of_ints_comes_back_as_ints_for_the_audit_to_read_as_indices_or_flags():
    from _user_code import kept_row_indices

    caller = Caller.for_function(kept_row_indices)
    out = caller(np.array([1.0, 0.0, 1.0, 1.0]), 2)
    assert out.dtype == np.int64 and out.tolist() == [0, 1]  # not read here: [0, 1] may be indices or flags
    assert caller(np.array([1.0, 1.0]), 2).tolist() == []
    adv = Caller.for_function(lambda rewards, G: [1, -1])(np.array([1.0, 0.0]), 2)
    assert adv.dtype == np.int64 and adv.tolist() == [1, -1]  # an advantage function's ints stay its values


def prime_rl_style(rewards, samples_per_problem):
    """prime-rl's form: rewards and the answers per problem, by position."""
    r = torch.as_tensor(rewards, dtype=torch.float32).view(-1, samples_per_problem)
    return (r - r.mean(dim=1, keepdim=True)).flatten()


def open_instruct_style(scores, num_samples_per_prompt_rollout):
    """open-instruct's form: numpy scores and the samples per prompt."""
    s = np.asarray(scores).reshape(-1, num_samples_per_prompt_rollout)
    return (s - s.mean(axis=1, keepdims=True)).reshape(-1)


def one_count(rewards, per_prompt: int):
    r = np.asarray(rewards).reshape(-1, per_prompt)
    return (r - r.mean(axis=1, keepdims=True)).reshape(-1)


@pytest.mark.parametrize(
    "fn, call",
    [
        (prime_rl_style, "prime_rl_style(R, samples_per_problem=G)"),
        (open_instruct_style, "open_instruct_style(R, num_samples_per_prompt_rollout=G)"),
        (one_count, "one_count(R, per_prompt=G)"),  # the one required int
    ],
)
def test_the_group_size_parameters_real_frameworks_name_are_recognised_and_the_audit_runs(fn, call):
    from grpo_identity.checks import audit

    assert Caller.for_function(fn, CallOptions()).plan.describe() == call
    report = audit(fn, expect="dr_grpo", isolate=False, max_examples=20)
    assert report.verdict == "pass" and report.matches == "dr_grpo", report.format()


def count_of_groups(rewards, num_groups: int):
    return np.asarray(rewards) * 0


def seeded(rewards, seed: int):
    return np.asarray(rewards) * 0


@pytest.mark.parametrize("fn", [count_of_groups, seeded])
def test_an_int_that_names_something_else_is_not_taken_for_the_group_size(fn):
    with pytest.raises(CallError, match="which the audit cannot pass"):
        Caller.for_function(fn, CallOptions())(R, 4)
