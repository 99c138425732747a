"""The tasks: digit arithmetic with an exact checker and a mix of difficulty levels.

Two tasks share one vocabulary (digits, ``+``, ``=``, BOS, EOS, PAD), the difficulty mix and the
supervised batches; a prompt has a fixed length P and answers are written least significant
digit first (the order a small transformer can learn), then EOS.  Difficulty level
d ∈ 1..max_digits is the length of the numbers in the prompt, so harder levels need longer
answers and more carries, and per-prompt success rates spread over (0, 1).  The reward is 1
when the completion up to its first EOS is a correct answer, else 0.

- ``addition`` (:class:`AdditionTask`): ``BOS a + b =``, both operands of exactly d digits; one
  correct answer, a + b, so every correct completion is the same sequence.
- ``split`` (:class:`SplitTask`): ``BOS s =``, s of exactly d digits (d = 1: 1–9); any
  ``a + b`` with a + b = s is correct: s + 1 answers at least, so correct completions differ and
  the covariance Σ₊ of their scores is not 0.

``Problems.answers`` holds one correct answer per prompt, which the warm-up imitates: addition's
only one, split's drawn uniformly from its s + 1 in canonical form (a and b zero-padded to d
digits).  Numpy only (the trainer turns the arrays into tensors).

>>> task = AdditionTask(max_digits=2)
>>> task.decode(task.answer_tokens(47, 85))
'231|'
>>> p = task.sample(3, np.random.default_rng(0))
>>> p.prompts.shape, task.prompt_len
((3, 7), 7)
>>> split = SplitTask(max_digits=2)
>>> split.decode(split.answer_tokens(5, 42, width=2))
'50+24|'
>>> ref = split.answer_tokens(10, 37, width=2)  # a correct answer to ^47=
>>> [split.is_correct(split.answer_tokens(a, b), ref) for a, b in [(5, 42), (47, 0), (5, 41)]]
[True, True, False]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import numpy.typing as npt

__all__ = [
    "PAD",
    "BOS",
    "EOS",
    "PLUS",
    "EQUALS",
    "VOCAB",
    "DigitTask",
    "AdditionTask",
    "SplitTask",
    "TASK_CLASSES",
    "make_task",
    "Problems",
]

PAD, BOS, EOS, PLUS, EQUALS = 0, 1, 2, 3, 4
_DIGIT0 = 5
#: token strings by id (digits are ids 5..14)
VOCAB: tuple[str, ...] = ("_", "^", "|", "+", "=", *"0123456789")


@dataclass(frozen=True)
class Problems:
    """A batch of prompts with what the checker needs."""

    prompts: npt.NDArray[np.int64]
    """(N, P) token ids"""
    answers: list[list[int]]
    """one correct answer's token ids per prompt, EOS included (the warm-up's target; the checker's reference)"""
    levels: npt.NDArray[np.int64]
    """(N,) difficulty level d"""


def _digits(x: int, width: int) -> list[int]:
    """Tokens of x, most significant digit first, zero-padded to ``width``."""
    return [_DIGIT0 + int(c) for c in str(x).zfill(width)]


def _digits_lsb(x: int, width: int = 0) -> list[int]:
    """Tokens of x, least significant digit first, zero-padded to ``width``."""
    return [_DIGIT0 + int(c) for c in reversed(str(x).zfill(width))]


class DigitTask:
    """What the tasks share: the difficulty mix, the vocabulary, supervised batches, decoding.

    A task defines ``prompt_len``, ``max_answer_len``, ``sample`` and ``is_correct``.
    """

    name = ""

    def __init__(self, max_digits: int = 3, difficulty_weights: Sequence[float] = ()) -> None:
        if not 1 <= max_digits <= 9:
            raise ValueError(f"max_digits must be in 1..9, got {max_digits!r}")
        w = np.ones(max_digits) if len(difficulty_weights) == 0 else np.asarray(difficulty_weights, dtype=float)
        if w.shape != (max_digits,) or (w < 0).any() or w.sum() <= 0:
            raise ValueError(
                f"difficulty_weights must be {max_digits} numbers >= 0 with a positive sum, got {list(w)!r}"
            )
        self.max_digits = max_digits
        self.weights = w / w.sum()
        self.levels = np.arange(1, max_digits + 1)

    @property
    def vocab_size(self) -> int:
        return len(VOCAB)

    @property
    def prompt_len(self) -> int:
        raise NotImplementedError

    @property
    def max_answer_len(self) -> int:
        raise NotImplementedError

    def sample(self, n: int, rng: np.random.Generator, levels: npt.NDArray[np.int64] | None = None) -> Problems:
        """n problems; levels drawn from the difficulty mix unless given."""
        raise NotImplementedError

    def is_correct(self, completion: Sequence[int], answer: Sequence[int]) -> bool:
        """Whether one completion (token ids, EOS included when sampled) answers the prompt of ``answer``."""
        raise NotImplementedError

    def _levels(self, n: int, rng: np.random.Generator, levels: npt.NDArray[np.int64] | None) -> np.ndarray:
        return np.asarray(rng.choice(self.levels, size=n, p=self.weights) if levels is None else levels, dtype=np.int64)

    def rewards(self, completions: npt.NDArray[np.int64], answers: Sequence[Sequence[int]]) -> npt.NDArray[np.float32]:
        """The checker: 1.0 where completion i is a correct answer to the prompt of ``answers[i]``.

        ``completions`` is (N, T); row i is checked against ``answers[i]``.
        """
        completions = np.asarray(completions)
        if completions.shape[0] != len(answers):
            raise ValueError(f"{completions.shape[0]} completions but {len(answers)} answers")
        return np.array([self.is_correct(list(row), ans) for row, ans in zip(completions, answers)], dtype=np.float32)

    def supervised_batch(self, n: int, rng: np.random.Generator) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """Prompt + answer sequences padded to P + max_answer_len, and the mask of answer tokens."""
        probs = self.sample(n, rng)
        T = self.max_answer_len
        seqs = np.full((n, self.prompt_len + T), PAD, dtype=np.int64)  # (N, P + T)
        mask = np.zeros_like(seqs, dtype=bool)
        seqs[:, : self.prompt_len] = probs.prompts
        for i, ans in enumerate(probs.answers):
            seqs[i, self.prompt_len : self.prompt_len + len(ans)] = ans
            mask[i, self.prompt_len : self.prompt_len + len(ans)] = True
        return seqs, mask

    @staticmethod
    def decode(tokens: Sequence[int]) -> str:
        """Token ids as text (PAD shown as '_', BOS '^', EOS '|')."""
        return "".join(VOCAB[int(t)] for t in tokens)


class AdditionTask(DigitTask):
    """Addition of two d-digit numbers, d drawn from a difficulty mix: one correct answer."""

    name = "addition"

    @property
    def prompt_len(self) -> int:
        """P = 2·max_digits + 3 (BOS, a, +, b, =)."""
        return 2 * self.max_digits + 3

    @property
    def max_answer_len(self) -> int:
        """Longest answer, EOS included: max_digits + 1 digits + EOS."""
        return self.max_digits + 2

    def answer_tokens(self, a: int, b: int) -> list[int]:
        """Digits of a + b, least significant first, then EOS."""
        return _digits_lsb(a + b) + [EOS]

    def sample(self, n: int, rng: np.random.Generator, levels: npt.NDArray[np.int64] | None = None) -> Problems:
        """n problems; levels drawn from the difficulty mix unless given."""
        levels = self._levels(n, rng, levels)
        lo = np.where(levels == 1, 0, 10 ** (levels - 1))
        hi = 10**levels
        a = rng.integers(lo, hi)
        b = rng.integers(lo, hi)
        D = self.max_digits
        prompts = np.array([[BOS, *_digits(x, D), PLUS, *_digits(y, D), EQUALS] for x, y in zip(a, b)], dtype=np.int64)
        prompts = prompts.reshape(len(levels), self.prompt_len)  # (N, P), also for N = 0
        answers = [self.answer_tokens(int(x), int(y)) for x, y in zip(a, b)]
        return Problems(prompts=prompts, answers=answers, levels=levels)

    def is_correct(self, completion: Sequence[int], answer: Sequence[int]) -> bool:
        """Exact: the completion, up to and including its first EOS, is the answer."""
        return len(answer) <= len(completion) and list(completion[: len(answer)]) == list(answer)


class SplitTask(DigitTask):
    """Write s as a sum of two numbers: ``BOS s =`` → ``a + b``, any a, b ≥ 0 with a + b = s.

    s has exactly d digits (d = 1: 1–9, so every prompt has at least two answers); a and b are
    written least significant digit first, each with any number of digits.  The warm-up's
    answers draw a uniformly from 0..s and zero-pad a and b to d digits: s + 1 sequences.
    """

    name = "split"

    @property
    def prompt_len(self) -> int:
        """P = max_digits + 2 (BOS, s, =)."""
        return self.max_digits + 2

    @property
    def max_answer_len(self) -> int:
        """Longest canonical answer, EOS included: 2·max_digits digits, +, EOS."""
        return 2 * self.max_digits + 2

    def answer_tokens(self, a: int, b: int, width: int = 0) -> list[int]:
        """``a + b``: both least significant digit first, zero-padded to ``width``, then EOS."""
        return [*_digits_lsb(a, width), PLUS, *_digits_lsb(b, width), EOS]

    def sample(self, n: int, rng: np.random.Generator, levels: npt.NDArray[np.int64] | None = None) -> Problems:
        """n problems; levels drawn from the difficulty mix unless given; a canonical answer each."""
        levels = self._levels(n, rng, levels)
        s = rng.integers(np.where(levels == 1, 1, 10 ** (levels - 1)), 10**levels)
        a = rng.integers(0, s + 1)
        prompts = np.array([[BOS, *_digits(x, self.max_digits), EQUALS] for x in s], dtype=np.int64)
        prompts = prompts.reshape(len(levels), self.prompt_len)  # (N, P), also for N = 0
        answers = [self.answer_tokens(int(x), int(t - x), width=int(d)) for x, t, d in zip(a, s, levels)]
        return Problems(prompts=prompts, answers=answers, levels=levels)

    @staticmethod
    def parse(tokens: Sequence[int]) -> tuple[int, int] | None:
        """(a, b) of a completion ``a + b`` ended by EOS; None for anything else.

        >>> SplitTask.parse(SplitTask().answer_tokens(5, 42, width=2))
        (5, 42)
        """
        seq = [int(t) for t in tokens]
        if EOS not in seq:
            return None
        body = seq[: seq.index(EOS)]
        if body.count(PLUS) != 1:
            return None
        cut = body.index(PLUS)
        parts = body[:cut], body[cut + 1 :]
        if any(not p or any(not _DIGIT0 <= t < _DIGIT0 + 10 for t in p) for p in parts):
            return None
        a, b = (int("".join(str(t - _DIGIT0) for t in reversed(p))) for p in parts)
        return a, b

    def is_correct(self, completion: Sequence[int], answer: Sequence[int]) -> bool:
        """By value: the completion is some ``a + b`` whose sum is that of the reference ``answer``."""
        got, ref = self.parse(completion), self.parse(answer)
        if ref is None:
            raise ValueError(f"the reference answer {self.decode(answer)!r} is not of the form a+b|")
        return got is not None and sum(got) == sum(ref)


#: the tasks by name (LMConfig.task)
TASK_CLASSES: dict[str, type[DigitTask]] = {"addition": AdditionTask, "split": SplitTask}


def make_task(name: str, max_digits: int = 3, difficulty_weights: Sequence[float] = ()) -> DigitTask:
    """The task ``name`` (addition or split) with its difficulty mix."""
    if name not in TASK_CLASSES:
        raise ValueError(f"task must be one of {', '.join(TASK_CLASSES)}, got {name!r}")
    return TASK_CLASSES[name](max_digits, difficulty_weights)
