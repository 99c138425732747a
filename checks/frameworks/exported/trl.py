"""One optimizer step of TRL's ``GRPOTrainer`` against the update its loss type's objective defines.

``CASE`` holds the configuration as TRL's parser reads it, the probe's answers (rewards, lengths) and, for
every answer of the first optimizer step, the coefficient −∂loss/∂log π that the objective gives each of its
loss tokens, with how it was derived.  The test trains a one-layer Llama built from a config (nothing is
downloaded) for one optimizer step at learning rate 0, with the trainer's generation and rewards replaced by
the probe's, and reads the gradient of the log-probabilities ``compute_loss`` differentiates: what the
optimizer receives, accumulation included.  It needs pytest, torch and trl (with the transformers, datasets
and tokenizers trl installs), nothing else.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import warnings
from typing import Any, Callable

CASE: dict[str, Any] = {}  # the exporter writes the case here


def tiny_policy(words: list[str] | tuple[str, ...] = ()) -> tuple[Any, Any]:
    """A word-level tokenizer over seven words (and ``words``) and a one-layer Llama built from a config (no
    weights downloaded), seeded: the policy of every TRL run of grpo-identity and of its exported tests."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["<pad>", "<eos>", "<unk>", "a", "b", "c", "d", *words])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>",
        model_input_names=["input_ids", "attention_mask"],
    )  # fmt: skip
    tokenizer.padding_side = "left"
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=32, pad_token_id=0, bos_token_id=1, eos_token_id=1,
    )  # fmt: skip
    return tokenizer, LlamaForCausalLM(config)


def _config(folder: str) -> Any:
    """The GRPOConfig of the case, its output folder and config file in ``folder``; one optimizer step."""
    from trl import GRPOConfig, TrlParser

    config = os.path.join(folder, "config.yaml")
    if CASE.get("config_text") is not None:
        with open(config, "w") as fh:
            fh.write(CASE["config_text"])
    paths = {"<output_dir>": os.path.join(folder, "out"), "<config>": config}
    argv = [paths.get(a, a) for a in CASE["argv"]]
    args = TrlParser((GRPOConfig,)).parse_args_and_config(args=argv, return_remaining_strings=True)[0]
    for key in ("hub_token", "hub_model_id"):
        if hasattr(args, key):
            setattr(args, key, None)
    args.max_steps = 1
    return args


class StepRunner:
    """``GRPOTrainer.train()`` with the trainer's generation and rewards the probe's and the log-probabilities
    ``compute_loss`` differentiates kept with their gradient: grpo-identity's TRL driver runs its split steps with
    it (every step, its ranks as processes: ``gather`` and ``rank``), an exported test its step 0 (one process)."""

    def __init__(
        self,
        args: Any,
        rewards: Any,
        lengths: Any,
        G: int,
        truncated: Any,
        width: int,
        gather: Callable[[Any], list[Any]] | None = None,
        rank: Callable[[], int] | None = None,
    ) -> None:
        self.args, self.G, self.width = args, int(G), int(width)
        self.rewards, self.lengths, self.truncated = list(rewards), list(lengths), list(truncated)
        self.gather = gather or (lambda obj: [obj])
        self.rank = rank or (lambda: 0)
        self.members: dict[int, int] = {}
        self.kept: list[tuple[int, Any, Any]] = []

    def train(self, callbacks: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        """Train for ``args.max_steps`` steps; a record per micro-batch: its rows, optimizer step, index in the
        step, advantages, coefficients −∂loss/∂log π per response token and loss mask."""
        from datasets import Dataset
        from transformers.utils import logging as hf_logging
        from trl import GRPOTrainer

        groups = len(self.rewards) // self.G
        words = [f"g{g}" for g in range(groups)] + [f"m{j}" for j in range(self.G)]
        self.tokenizer, model = tiny_policy(words)
        hf_logging.set_verbosity_error()  # the trainer's notes on the tiny policy's tokenizer
        with tempfile.TemporaryDirectory(prefix="grpo-identity-trl-policy-") as folder:
            if float(getattr(self.args, "beta", 0.0) or 0.0):  # TRL loads its reference model from the policy's path
                model.save_pretrained(folder)
                self.tokenizer.save_pretrained(folder)
                model = folder
            trainer = GRPOTrainer(
                model=model,
                reward_funcs=carried(self.args, self._reward),
                args=self.args,
                processing_class=self.tokenizer,
                train_dataset=Dataset.from_dict({"prompt": [f"g{g}" for g in range(groups)]}),
            )
        trainer.model.generate = self._generate
        self._keep_logps(trainer)
        for callback in callbacks:
            trainer.add_callback(callback)
        with contextlib.redirect_stdout(io.StringIO()):  # the Trainer prints its final metrics
            trainer.train()
        return self._records()

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        """The probe's answers for the prompts of this call: member indices in the order TRL gathers the ranks'
        rows (each answer of a group its own member)."""
        import torch

        ids: Any = kwargs.get("input_ids", args[0] if args else None)
        groups = [self._group_of(row) for row in ids]
        everyone = self.gather(groups)
        counts = dict(self.members)
        for g in [g for part in everyone for g in part][: sum(len(x) for x in everyone[: self.rank()])]:
            counts[g] = counts.get(g, 0) + 1
        completions = []
        for g in groups:
            j = counts.get(g, 0)
            counts[g] = j + 1
            completions.append(self._answer(g, j))
        for g in [g for part in everyone for g in part]:
            self.members[g] = self.members.get(g, 0) + 1
        return torch.cat([ids, torch.tensor(completions, dtype=ids.dtype, device=ids.device)], dim=1)

    def _group_of(self, prompt_ids: Any) -> int:
        words = self.tokenizer.convert_ids_to_tokens([int(t) for t in prompt_ids])
        return int(next(w for w in reversed(words) if w.startswith("g"))[1:])

    def _answer(self, g: int, j: int) -> list[int]:
        """Member marker, filler, the EOS at the answer's length (none for a truncated answer: cut at the
        length budget), padding."""
        tok, j = self.tokenizer, min(j, self.G - 1)
        row, T = g * self.G + j, self.width
        body = [tok.convert_tokens_to_ids(f"m{j}")] + [tok.convert_tokens_to_ids("a")] * (int(self.lengths[row]) - 2)
        if self.truncated[row]:
            return (body + [tok.convert_tokens_to_ids("a")] * T)[:T]
        return (body + [tok.eos_token_id] + [tok.pad_token_id] * T)[:T]

    def _reward(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        out = []
        for p, c in zip(prompts, completions):
            g, j = int(str(p).split()[-1][1:]), int(str(c).split()[0][1:])
            out.append(float(self.rewards[g * self.G + j]))
        return out

    def _keep_logps(self, trainer: Any) -> None:
        """The log-probabilities compute_loss differentiates, kept with the step and the batch."""
        original, pending = trainer.compute_loss, dict[str, Any]()
        retain_logps(trainer, pending)

        def compute_loss(model: Any, inputs: Any, *a: Any, **k: Any) -> Any:
            pending.clear()
            value = original(model, inputs, *a, **k)
            if "logps" in pending:
                self.kept.append((trainer.state.global_step, pending["logps"], inputs))
            return value

        trainer.compute_loss = compute_loss

    def _records(self) -> list[dict[str, Any]]:
        records, micro, last = [], 0, None
        for step, logps, inputs in self.kept:
            micro, last = (micro + 1 if step == last else 0), step
            if logps.grad is None:
                raise RuntimeError("compute_loss's log-probabilities got no gradient")
            mask = inputs["completion_mask"] * inputs.get("tool_mask", 1)
            rows = [
                self._group_of(prompt) * self.G + int(self.tokenizer.convert_ids_to_tokens(int(answer[0]))[1:])
                for prompt, answer in zip(inputs["prompt_ids"], inputs["completion_ids"])
            ]
            records.append(
                {
                    "rows": rows,
                    "step": int(step),
                    "micro": micro,
                    "advantages": inputs["advantages"].detach().double().reshape(len(rows), -1)[:, 0].tolist(),
                    "coefficients": (-logps.grad).detach().double().tolist(),
                    "mask": mask.detach().double().tolist(),
                }
            )
        return records


def retain_logps(trainer: Any, kept: dict[str, Any]) -> None:
    """Wrap the method ``compute_loss`` gets its log-probabilities from (before 0.20: logps alone) so that the
    tensor keeps its gradient, as ``kept["logps"]`` (the old policy's, computed without gradient, are left
    alone)."""
    names = ("_get_per_token_logps_and_entropies", "_get_per_token_logps")
    hook = next((n for n in names if hasattr(trainer, n)), None)
    if hook is None:
        raise RuntimeError(f"GRPOTrainer has neither {' nor '.join(names)}")
    original = getattr(trainer, hook)

    def keep_logps(*a: Any, **k: Any) -> Any:
        out = original(*a, **k)
        logps = out[0] if isinstance(out, tuple) else out
        if logps.requires_grad:
            logps.retain_grad()
            kept["logps"] = logps
        return out

    setattr(trainer, hook, keep_logps)


def carried(args: Any, reward: Callable[..., list[float]]) -> Any:
    """``reward_funcs`` for a trainer whose rewards come from one function: that function, or, where
    ``reward_weights`` names K > 1 functions, it divided by the first nonzero weight and K − 1 functions of 0 (the
    weighted sum is its rewards)."""
    weights = [float(w) for w in (getattr(args, "reward_weights", None) or [])]
    if len(weights) <= 1:
        return reward
    pivot = next((j for j, w in enumerate(weights) if w), 0)
    weight = weights[pivot] or 1.0

    def carrier(*a: Any, **k: Any) -> list[float]:
        return [v / weight for v in reward(*a, **k)]

    def zero(completions: list[Any], **k: Any) -> list[float]:
        return [0.0] * len(completions)

    return [carrier if j == pivot else zero for j in range(len(weights))]


def first_step_rows() -> dict[int, dict[str, Any]]:
    """Per answer of optimizer step 0 as the trainer updated it: its coefficients −∂loss/∂log π per response
    token, its loss mask and its advantage."""
    warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory(prefix="exported-grpo-step-") as folder:
        args = _config(folder)
        runner = StepRunner(
            args, CASE["rewards"], CASE["lengths"], CASE["group_size"], CASE["truncated"], CASE["width"]
        )
        records = runner.train()
    return {
        row: {"coefficients": r["coefficients"][i], "mask": r["mask"][i], "advantage": r["advantages"][i]}
        for r in records
        if r["step"] == 0
        for i, row in enumerate(r["rows"])
    }
