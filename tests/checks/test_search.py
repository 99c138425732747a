"""The property search (``checks.measure.search``): one property run under hypothesis, its violation
shrunk; a non-finite output is one ``well_formed`` finding (``FiniteGuard``), never a cascade of
false comparisons; target errors in words; hypothesis's storage moved while the audit searches,
nothing written where the audit runs, and the same examples whatever else the process loaded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from grpo_identity import dial as D
from grpo_identity.checks import audit
from grpo_identity.checks.calls.target import TargetCrashed, TargetError, TargetMalformed, TargetTimeout
from grpo_identity.checks.measure import properties as P
from grpo_identity.checks.measure.search import AnswerMemo, failure, quiet_hypothesis, run_property
from grpo_identity.foundation import cache_dir

CTX64 = P.Context(P.Tolerance.for_precision("float64"))


def test_a_property_that_holds_gives_no_violation_and_counts_its_examples():
    violation, count = run_property(
        P.zero_sum_per_group, lambda r, G: D.advantages(r, G, D.GRPO), CTX64, 20, ("binary",)
    )
    assert violation is None and count == 20


def test_a_broken_property_is_shrunk_to_one_small_group():
    violation, count = run_property(P.zero_sum_per_group, lambda r, G: r, CTX64, 50, ("binary",))
    assert violation is not None and violation.property == "zero_sum_per_group" and count > 0
    assert (violation.counterexample["group_size"], violation.counterexample["n_groups"]) == (2, 1)


def test_a_failure_is_shrunk_without_hypothesiss_explain_phase(monkeypatch):
    from hypothesis.internal.conjecture import shrinker

    def explain(self):
        raise AssertionError("the explain phase ran")

    monkeypatch.setattr(shrinker.Shrinker, "_explain", explain)
    violation, _ = run_property(P.zero_sum_per_group, lambda r, G: r, CTX64, 50, ("binary",))
    assert violation is not None and violation.counterexample["group_size"] == 2


def test_the_examples_are_drawn_from_the_search_seed_alone(monkeypatch):
    from grpo_identity.checks.measure import search

    def drawn():
        seen = []
        run_property(P.zero_sum_per_group, lambda r, G: seen.append(r.tobytes()) or 0 * r, CTX64, 10, ("binary",))
        return seen

    first = drawn()
    assert drawn() == first
    monkeypatch.setattr(search, "SEARCH_SEED", search.SEARCH_SEED + 1)
    assert drawn() != first


@pytest.mark.parametrize(
    "exc, words",
    [
        (TargetTimeout("ran past the 1 s timeout"), "the target timed out on the probes: ran past the 1 s timeout"),
        (TargetCrashed("exit code 7"), "the target crashed on the probes: exit code 7"),
        (TargetError("KeyError: 'x'"), "the target raised on the probes: KeyError: 'x'"),
        (
            TargetMalformed("returned None, not an array of advantages"),
            "the target returned None on the probes, not an array of advantages",
        ),
    ],
    ids=["timeout", "crash", "exception", "malformed"],
)
def test_a_target_error_is_said_in_words(exc, words):
    assert failure(exc, " on the probes") == words


def test_hypothesis_stores_in_the_projects_cache_while_the_audit_searches_and_is_restored_after():
    from hypothesis import configuration

    def home():
        return configuration.storage_directory(intent_to_write=False).home_directory

    before = home()
    with quiet_hypothesis():
        assert home() == Path(cache_dir("hypothesis"))
    assert home() == before


NAN_TARGET = """
import numpy as np

def nan(rewards, G):
    return np.full(len(rewards), np.nan)
"""


def test_a_target_returning_nan_gets_one_non_finite_finding_and_no_false_comparisons(tmp_path):
    path = tmp_path / "targets.py"
    path.write_text(NAN_TARGET)
    report = audit(f"{path}:nan", expect="grpo", max_examples=20, isolate=False)
    assert report.verdict == "fail"
    assert [f.property for f in report.findings if f.severity == "fail"] == ["well_formed"]
    assert "non-finite advantage nan" in report.findings[0].message
    assert "up to inf" not in report.format() and "stateless" not in report.format()


def test_nan_only_in_silent_groups_is_reported_as_non_finite_there():
    def zero_over_zero(rewards, G):
        R = rewards.reshape(-1, G)
        with np.errstate(invalid="ignore", divide="ignore"):
            return ((R - R.mean(1, keepdims=True)) / R.std(1, keepdims=True)).reshape(-1)

    report = audit(zero_over_zero, expect="grpo", max_examples=20)
    assert [f.property for f in report.findings if f.severity == "fail"] == ["well_formed"]
    assert "rewards [0, 0]" in report.findings[0].message


OFF_BY_A_BIT = """
from grpo_identity import dial as D

def off(rewards, G):
    return D.advantages(rewards, G, D.GRPO) + 0.1 * (rewards[0] > 0.5)
"""


def test_an_audit_leaves_no_hypothesis_folder_where_it_runs(tmp_path):
    (tmp_path / "t.py").write_text(OFF_BY_A_BIT)
    cmd = [sys.executable, "-m", "grpo_identity", "audit", "t.py:off", "--max-examples", "30"]
    assert subprocess.run(cmd, cwd=tmp_path, capture_output=True).returncode == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.py"]


def test_the_examples_do_not_depend_on_what_else_the_process_has_loaded(tmp_path):
    (tmp_path / "t.py").write_text(OFF_BY_A_BIT)
    # a module of the caller's, full of numbers hypothesis would otherwise mix into its draws
    (tmp_path / "numbers_here.py").write_text("".join(f"C{i} = {i * 7.123456:.6f}\n" for i in range(300)))
    script = (
        "import json, sys; sys.path.insert(0, '.'); {extra}"
        "from grpo_identity.checks import audit; "
        "d = audit('t.py:off', max_examples=60).to_dict(); d.pop('seconds'); print(json.dumps(d, sort_keys=True))"
    )
    outs = []
    for extra in ("", "import numbers_here; "):
        proc = subprocess.run([sys.executable, "-c", script.format(extra=extra)], cwd=tmp_path, capture_output=True)
        outs.append(json.loads(proc.stdout))
    assert outs[0] == outs[1]
    assert outs[0]["verdict"] == "fail"


class _Counted:
    """The dial's GRPO advantages (zeros where the rewards are not float: only the calls are counted), counting the
    calls that reach it."""

    def __init__(self):
        self.calls = 0

    def __call__(self, rewards, G, *extra):
        self.calls += 1
        if rewards.dtype.kind != "f" or rewards.ndim != 1 or not float(G).is_integer():
            return np.zeros(rewards.size)
        return D.advantages(rewards, G, D.GRPO)


def test_an_input_answered_before_is_answered_from_memory_only_while_serving():
    target = _Counted()
    memo = AnswerMemo(target)
    r = np.array([1.0, 0.0, 0.0, 0.0])
    first = memo(r, 2)
    expected = first.copy()
    first[:] = 5.0  # the caller's array: what is remembered stays as answered
    with memo.serve(True):
        again = memo(r.copy(), 2)
        again[:] = 7.0  # a served copy, too
        assert np.array_equal(memo(r, 2), expected)
        with memo.serve(False):  # the blocks nest
            memo(r, 2)
        assert np.array_equal(memo(r, 2), expected)
    assert target.calls == 2  # three of the five calls were answered from memory
    memo(r, 2)  # serving ends with the block
    assert (target.calls, memo.serving) == (3, False)


def test_only_the_same_rewards_group_size_and_extra_arguments_byte_for_byte_are_the_same_input():
    target = _Counted()
    memo = AnswerMemo(target)
    r, ids = np.array([1.0, 0.0, 0.0, 0.0]), np.array([0, 0, 1, 1])
    others = [(r, 4), (r.view(np.int64), 2), (r.reshape(2, 2), 2), (r, 2, ids), (r, 2, ids[::-1].copy())]
    with memo.serve(True):
        for call in [(r, 2), *others, (r, 2.5), (r, 2.5)]:  # a group size that is no integer: never remembered
            memo(*call)
        assert target.calls == 8
        for call in [(r, 2), *others]:
            memo(*call)
    assert target.calls == 8  # the six inputs again: each answered from memory


def test_an_audit_asks_the_target_fewer_times_than_its_properties_call_it():
    target = _Counted()
    report = audit(target, expect="grpo", max_examples=90)
    assert report.verdict == "pass"
    plain = _Counted()
    for prop in P.ADVANTAGE_PROPERTIES:  # every property on its share of the examples, each call real
        run_property(prop, plain, P.Context(P.Tolerance.for_precision("float64")), 10, ("binary",))
    assert target.calls < plain.calls * 0.8, (target.calls, plain.calls)


def _running_std():
    """GRPO over a running σ: the mean of every σ seen so far (state carried from call to call)."""
    seen = []

    def running(rewards, G):
        R = rewards.reshape(-1, G)
        seen.append(float(R.std(1).mean()))
        return ((R - R.mean(1, keepdims=True)) / (np.mean(seen) + 1e-6)).reshape(-1)

    return running


def test_a_target_that_keeps_state_is_still_found_out_by_stateless():
    report = audit(_running_std(), max_examples=90)
    assert "stateless" in [f.property for f in report.findings], report.format()


def test_what_the_memo_holds_is_bounded_and_past_the_bound_every_call_reaches_the_target(monkeypatch):
    from grpo_identity.checks.measure import search

    monkeypatch.setattr(search, "_MEMO_NUMBERS", 24)  # two inputs of 4 rewards, their ids and their answers
    target = _Counted()
    memo = AnswerMemo(target)
    batches = [np.array([1.0, 0.0, 0.0, float(i)]) for i in range(3)]
    with memo.serve(True):
        for r in batches * 2:
            memo(r, 2, np.array([0, 0, 1, 1]))
    assert target.calls == 4  # of six calls: the third input was answered but not remembered


def test_the_memo_tells_the_first_answer_to_an_input_whether_or_not_it_serves():
    answers = iter([np.array([1.0, -1.0]), np.array([2.0, -2.0])])
    memo = AnswerMemo(lambda r, G: next(answers))
    r = np.array([1.0, 0.0])
    assert memo.earlier(r, 2) is None
    memo(r, 2)
    memo(r, 2)  # not serving: the target answers again, and differently
    first = memo.earlier(r, 2)
    assert first.tolist() == [1.0, -1.0] and memo.earlier(np.array([0.0, 1.0]), 2) is None
    first[0] = 9.0  # a copy: the memory is not changed through it
    assert memo.earlier(r, 2).tolist() == [1.0, -1.0]


def _equal_groups_by_id(rewards, uids):
    """GRPO over group ids, assuming every group has the same size (it reshapes by the number of ids)."""
    order = np.argsort(uids, kind="stable")
    R = np.asarray(rewards)[order].reshape(len(np.unique(uids)), -1)
    A = D.advantages(R.reshape(-1), R.shape[1], D.GRPO)
    out = np.empty_like(A)
    out[order] = A
    return out


def test_a_call_that_raises_is_reported_with_the_rows_and_ids_the_property_passed_so_it_reproduces():
    report = audit(_equal_groups_by_id, max_examples=60)
    (ragged,) = [f for f in report.findings if f.property == "ragged_groups"]
    example = ragged.counterexample
    assert "raised" in ragged.message and len(example["rewards"]) == len(example["group_ids"]), report.format()
    with pytest.raises(ValueError) as exc:
        _equal_groups_by_id(np.array(example["rewards"]), np.array(example["group_ids"]))
    assert f"ValueError: {exc.value}" in ragged.message


def test_an_answer_that_flips_from_call_to_call_is_found_out_by_stateless():
    calls = [0]

    def flips(rewards, G):
        calls[0] += 1
        return D.advantages(rewards, G, D.GRPO) * (1.0 if calls[0] % 2 else 1.5)

    report = audit(flips, max_examples=90)
    stateless = [f for f in report.findings if f.property == "stateless"]
    assert stateless and "on the next call" in stateless[0].message, report.format()


def _grpo_in_place(rewards, G):
    out = D.advantages(rewards.copy(), G, D.GRPO)
    rewards[0] += 1.0  # the caller's rewards change
    return out


_BUFFER = np.zeros(4)


def _grpo_shared(rewards, G):
    _BUFFER[:] = D.advantages(rewards, G, D.GRPO)
    return _BUFFER  # one buffer, handed out call after call


@pytest.mark.parametrize("transport", ["this process", "a child"])
@pytest.mark.parametrize(("fn", "said"), [(_grpo_in_place, "in place"), (_grpo_shared, "shared buffer")])
def test_what_a_call_did_wrong_reaches_well_formed_through_every_view_over_the_target(transport, fn, said):
    from grpo_identity.checks.calls.child import ChildTarget
    from grpo_identity.checks.calls.target import LocalTarget, RoundedRewards
    from grpo_identity.checks.measure.search import FiniteGuard
    from grpo_identity.checks.measure.strategies import RewardBatch

    batch = RewardBatch(np.array([1.0, 0.0, 0.0, 1.0]), 2, "binary")
    with LocalTarget(fn) if transport == "this process" else ChildTarget(fn) as opened:
        seen = FiniteGuard(AnswerMemo(RoundedRewards(opened, "float32")))  # as the audit stacks them
        assert seen.call(batch.contiguous(), 2).value.shape == (4,)
        with pytest.raises(P.PropertyViolation, match=said):
            P.well_formed(seen, batch, CTX64, np.random.default_rng(0))


def test_every_view_over_a_target_answers_call_itself_and_reads_the_rest_from_the_target_under_it():
    import grpo_identity.checks.gradient  # noqa: F401  (the views it defines)
    from grpo_identity.checks.calls.target import LocalTarget, View

    def subclasses(cls):
        return [c for sub in cls.__subclasses__() for c in (sub, *subclasses(sub))]

    views = subclasses(View)
    assert {"RoundedRewards", "AdvantageView", "AnswerMemo", "FiniteGuard", "WholeGroups"} <= {
        v.__name__ for v in views
    }
    assert all("call" in vars(v) for v in views), [v.__name__ for v in views if "call" not in vars(v)]
    under = LocalTarget(lambda r, G: r, name="under")
    assert AnswerMemo(under).name == "under" and AnswerMemo(under).calls == 0


def _row_filter_in_place(rewards, G):
    keep = np.repeat(rewards.reshape(-1, G).std(1) > 0, G)
    rewards[:] = 0.0  # the caller's rewards change
    return keep


def test_a_row_filter_that_changes_its_input_is_seen_through_its_whole_groups_view():
    from grpo_identity.checks.calls.target import LocalTarget
    from grpo_identity.checks.measure.strategies import RewardBatch

    batch = RewardBatch(np.array([1.0, 0.0, 1.0, 1.0]), 2, "binary")
    seen = P.WholeGroups(LocalTarget(_row_filter_in_place, kind="row-filter"))
    assert seen.call(batch.contiguous(), 2).value.tolist() == [True, False]
    with pytest.raises(P.PropertyViolation, match="in place"):
        P.filter_well_formed(seen, batch, CTX64, np.random.default_rng(0))


_GRPO_BUFFER: dict[int, np.ndarray] = {}


def _grpo_one_buffer_per_size(rewards, group_size):
    out = _GRPO_BUFFER.setdefault(rewards.size, np.empty(rewards.size))
    out[:] = D.advantages(rewards, group_size, D.GRPO)
    return out


def test_a_shared_buffer_is_one_well_formed_finding_on_a_group_that_is_not_silent_the_same_on_every_run():
    """The second call's rewards 1 − r change the advantages of every group that is not silent: the finding
    shrinks to the smallest such group and replays.  Counting also the first call's overwrite of the call before
    it (another example's) made the finding depend on what ran before: a flaky silent group."""
    _GRPO_BUFFER.clear()
    report = audit(_grpo_one_buffer_per_size, expect="grpo", isolate=False)
    found = [f for f in report.findings if f.property == "well_formed"]
    assert report.verdict == "fail" and len(found) == 1, report.format()
    assert "shared buffer" in found[0].message and "flaky" not in found[0].message, found[0].message
    rewards = found[0].counterexample["rewards"]
    assert len(set(rewards)) > 1, found[0].counterexample
