"""The task: multi-digit addition with an exact checker and a mix of difficulty levels.

A prompt is ``BOS a + b =`` with both operands zero-padded to ``max_digits`` (so every prompt has
the same length P = 2·max_digits + 3); the answer is the digits of a + b, least significant
first (the order a small transformer can learn), then EOS.  Difficulty level d ∈ 1..max_digits
is the length of the operands: both have exactly d digits (d = 1: 0–9), so harder levels need
longer answers and more carries, and per-prompt success rates spread over (0, 1).
The reward is 1 when the completion up to its first EOS is exactly the answer, else 0.

Numpy only (the trainer turns the arrays into tensors).

>>> task = AdditionTask(max_digits=2)
>>> task.decode(task.answer_tokens(47, 85))
'231|'
>>> p = task.sample(3, np.random.default_rng(0))
>>> p.prompts.shape, task.prompt_len
((3, 7), 7)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["PAD", "BOS", "EOS", "PLUS", "EQUALS", "VOCAB", "AdditionTask", "Problems"]

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
    """answer token ids per prompt, EOS included"""
    levels: npt.NDArray[np.int64]
    """(N,) difficulty level d"""


class AdditionTask:
    """Addition of two d-digit numbers, d drawn from a difficulty mix."""

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
        """P = 2·max_digits + 3 (BOS, a, +, b, =)."""
        return 2 * self.max_digits + 3

    @property
    def max_answer_len(self) -> int:
        """Longest answer, EOS included: max_digits + 1 digits + EOS."""
        return self.max_digits + 2

    def _digits(self, x: int, width: int) -> list[int]:
        return [_DIGIT0 + int(c) for c in str(x).zfill(width)]

    def answer_tokens(self, a: int, b: int) -> list[int]:
        """Digits of a + b, least significant first, then EOS."""
        return [_DIGIT0 + int(c) for c in reversed(str(a + b))] + [EOS]

    def sample(self, n: int, rng: np.random.Generator, levels: npt.NDArray[np.int64] | None = None) -> Problems:
        """n problems; levels drawn from the difficulty mix unless given."""
        if levels is None:
            levels = rng.choice(self.levels, size=n, p=self.weights)
        levels = np.asarray(levels, dtype=np.int64)
        lo = np.where(levels == 1, 0, 10 ** (levels - 1))
        hi = 10**levels
        a = rng.integers(lo, hi)
        b = rng.integers(lo, hi)
        D = self.max_digits
        prompts = np.array(
            [[BOS, *self._digits(x, D), PLUS, *self._digits(y, D), EQUALS] for x, y in zip(a, b)], dtype=np.int64
        )
        prompts = prompts.reshape(len(levels), self.prompt_len)  # (N, P), also for N = 0
        answers = [self.answer_tokens(int(x), int(y)) for x, y in zip(a, b)]
        return Problems(prompts=prompts, answers=answers, levels=levels)

    def rewards(self, completions: npt.NDArray[np.int64], answers: Sequence[Sequence[int]]) -> npt.NDArray[np.float32]:
        """Exact checker: 1.0 where the completion, up to and including its first EOS, equals the answer.

        ``completions`` is (N, T); row i is checked against ``answers[i]``.
        """
        completions = np.asarray(completions)
        if completions.shape[0] != len(answers):
            raise ValueError(f"{completions.shape[0]} completions but {len(answers)} answers")
        out = np.zeros(len(answers), dtype=np.float32)
        for i, (row, ans) in enumerate(zip(completions, answers)):
            L = len(ans)
            out[i] = float(L <= row.shape[0] and list(row[:L]) == list(ans))
        return out

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
