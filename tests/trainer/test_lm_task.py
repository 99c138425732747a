"""The LM tasks (numpy only): the split task's checker accepts every a + b = s and nothing else,
its prompts have several correct answers, and the task names agree with the config's."""

from __future__ import annotations

import numpy as np
import pytest

from grpo_identity.trainer.lm.config import TASKS
from grpo_identity.trainer.lm.task import EOS, PAD, PLUS, TASK_CLASSES, AdditionTask, SplitTask, make_task

SPLIT = SplitTask(max_digits=2)
REF = SPLIT.answer_tokens(10, 37, width=2)  # one correct answer to ^47=


def _padded(rows: list[list[int]]) -> np.ndarray:
    """Completions as the sampler returns them: (N, T), PAD after the first EOS."""
    T = max(len(r) for r in rows)
    return np.array([r + [PAD] * (T - len(r)) for r in rows], dtype=np.int64)


def test_split_checker_accepts_every_pair_that_sums_to_s_padded_or_not():
    rows = [SPLIT.answer_tokens(a, 47 - a, width=2) for a in range(48)]
    rows += [SPLIT.answer_tokens(a, 47 - a) for a in (0, 5, 47)]  # unpadded: "0+74|", "5+24|", "74+0|"
    assert SPLIT.rewards(_padded(rows), [REF] * len(rows)).tolist() == [1.0] * len(rows)
    assert len({tuple(r) for r in rows}) == len(rows)  # 51 different correct sequences for one prompt


def test_split_checker_refuses_a_wrong_sum_and_every_malformed_answer():
    wrong = [
        SPLIT.answer_tokens(10, 36, width=2),  # 46
        SPLIT.answer_tokens(10, 38, width=2),  # 48
        SPLIT.answer_tokens(74, 0),  # "47" read least significant digit first: 74 + 0
        SPLIT.answer_tokens(10, 37, width=2)[:-1],  # no EOS
        [*SPLIT.answer_tokens(10, 37, width=2)[:-1], PLUS, EOS],  # a second +
        [PLUS, *SPLIT.answer_tokens(47, 0)[2:]],  # an empty a
        SPLIT.answer_tokens(47, 0)[:3] + [EOS],  # an empty b
        [EOS],
    ]
    assert SPLIT.rewards(_padded(wrong), [REF] * len(wrong)).tolist() == [0.0] * len(wrong)
    assert SPLIT.parse(SPLIT.answer_tokens(5, 42, width=2)) == (5, 42)
    with pytest.raises(ValueError, match="not of the form"):
        SPLIT.is_correct(REF, [EOS])


def test_addition_has_one_correct_sequence_where_split_has_s_plus_one():
    add = AdditionTask(max_digits=2)
    ans = add.answer_tokens(20, 27)
    same_value = [*ans[:-1], 5, EOS]  # "74" + a zero on top: 47 by value, another sequence
    assert add.rewards(_padded([ans, same_value]), [ans] * 2).tolist() == [1.0, 0.0]
    assert SPLIT.rewards(_padded([SPLIT.answer_tokens(20, 27), REF]), [REF] * 2).tolist() == [1.0, 1.0]


def test_split_problems_have_d_digit_sums_and_canonical_answers_that_vary():
    task = SplitTask(max_digits=3, difficulty_weights=(1, 1, 2))
    p = task.sample(600, np.random.default_rng(0))
    s = np.array([int(task.decode(row[1:-1])) for row in p.prompts])
    assert p.prompts.shape == (600, task.prompt_len) == (600, 5)
    assert all(len(str(x)) == d for x, d in zip(s, p.levels)) and s.min() >= 1  # d = 1: 1..9, never 0
    assert set(p.levels.tolist()) == {1, 2, 3}
    assert all(len(a) == 2 * d + 2 <= task.max_answer_len for a, d in zip(p.answers, p.levels))
    assert [sum(task.parse(a)) for a in p.answers] == s.tolist()  # each reference answer is correct
    assert task.rewards(_padded(p.answers), p.answers).tolist() == [1.0] * 600
    # the warm-up's answers to one prompt: a uniform in 0..s, so different sequences (~17 draws per 1-digit s)
    by_s: dict[int, set[tuple[int, ...]]] = {}
    for x, a in zip(s, p.answers):
        by_s.setdefault(int(x), set()).add(tuple(a))
    assert all(len(by_s[x]) > 1 for x in range(1, 10))


def test_task_names_are_the_configs_and_an_unknown_name_is_refused():
    assert tuple(TASK_CLASSES) == TASKS
    assert isinstance(make_task("split", 2), SplitTask) and isinstance(make_task("addition"), AdditionTask)
    with pytest.raises(ValueError, match="task must be one of addition, split, got 'multiply'"):
        make_task("multiply")
    with pytest.raises(ValueError, match="difficulty_weights"):
        make_task("split", 2, (1.0,))
