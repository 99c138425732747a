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
import statistics
import tempfile
import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")

CASE: dict[str, Any] = {}  # the exporter writes the case here
#: relative tolerance of a coefficient, of the step's largest (float32 log-probabilities of a tiny model)
RTOL = 1e-4


def _policy(words: list[str]) -> tuple[Any, Any]:
    """A word-level tokenizer and a one-layer Llama from a config, seeded."""
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


class _Step:
    """GRPOTrainer.train() for one step, its generation and rewards the probe's, its log-probabilities kept."""

    def __init__(self, args: Any) -> None:
        self.args = args
        self.G, self.rewards, self.lengths = int(CASE["group_size"]), CASE["rewards"], CASE["lengths"]
        self.truncated, self.width = CASE["truncated"], int(CASE["width"])
        self.members: dict[int, int] = {}
        self.kept: list[tuple[int, Any, Any]] = []

    def run(self, folder: str) -> dict[int, dict[str, Any]]:
        from datasets import Dataset
        from trl import GRPOTrainer

        groups = len(self.rewards) // self.G
        words = [f"g{g}" for g in range(groups)] + [f"m{j}" for j in range(self.G)]
        self.tokenizer, model = _policy(words)
        if float(getattr(self.args, "beta", 0.0) or 0.0):  # TRL loads its reference model from the policy's path
            model.save_pretrained(os.path.join(folder, "policy"))
            self.tokenizer.save_pretrained(os.path.join(folder, "policy"))
            model = os.path.join(folder, "policy")
        weights = list(getattr(self.args, "reward_weights", None) or [])
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=self._reward_funcs(weights),
            args=self.args,
            processing_class=self.tokenizer,
            train_dataset=Dataset.from_dict({"prompt": [f"g{g}" for g in range(groups)]}),
        )
        trainer.model.generate = self._generate
        self._keep_logps(trainer)
        with contextlib.redirect_stdout(io.StringIO()):
            trainer.train()
        return self._read()

    def _reward_funcs(self, weights: list[float]) -> Any:
        """The probe's rewards, carried by the first function of nonzero weight (divided by it), the others 0."""
        if len(weights) <= 1:
            return self._reward
        pivot = next((j for j, w in enumerate(weights) if float(w)), 0)
        weight = float(weights[pivot]) or 1.0

        def carrier(*a: Any, **k: Any) -> list[float]:
            return [v / weight for v in self._reward(*a, **k)]

        def zero(completions: list[Any], **k: Any) -> list[float]:
            return [0.0] * len(completions)

        return [carrier if j == pivot else zero for j in range(len(weights))]

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        """The probe's answers for the prompts of this call: member j of group g in the order they come."""
        ids: Any = kwargs.get("input_ids", args[0] if args else None)
        completions = []
        for prompt in ids:
            g = self._group_of(prompt)
            j = self.members.get(g, 0)
            self.members[g] = j + 1
            completions.append(self._answer(g, j))
        return torch.cat([ids, torch.tensor(completions, dtype=ids.dtype, device=ids.device)], dim=1)

    def _group_of(self, prompt_ids: Any) -> int:
        words = self.tokenizer.convert_ids_to_tokens([int(t) for t in prompt_ids])
        return int(next(w for w in reversed(words) if w.startswith("g"))[1:])

    def _answer(self, g: int, j: int) -> list[int]:
        """Member marker, filler, the EOS at the answer's length (none for a truncated answer), padding."""
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
        """The log-probabilities compute_loss differentiates, kept with their gradient and the batch."""
        name = next(n for n in ("_get_per_token_logps_and_entropies", "_get_per_token_logps") if hasattr(trainer, n))
        original, loss, pending = getattr(trainer, name), trainer.compute_loss, {}

        def keep(*a: Any, **k: Any) -> Any:
            out = original(*a, **k)
            logps = out[0] if isinstance(out, tuple) else out
            if logps.requires_grad:
                logps.retain_grad()
                pending["logps"] = logps
            return out

        def compute_loss(model: Any, inputs: Any, *a: Any, **k: Any) -> Any:
            pending.clear()
            value = loss(model, inputs, *a, **k)
            if "logps" in pending:
                self.kept.append((trainer.state.global_step, pending["logps"], inputs))
            return value

        setattr(trainer, name, keep)
        trainer.compute_loss = compute_loss

    def _read(self) -> dict[int, dict[str, Any]]:
        """Per answer of optimizer step 0: its coefficients, loss mask and advantage."""
        rows: dict[int, dict[str, Any]] = {}
        for step, logps, inputs in self.kept:
            if int(step) != 0:
                continue
            mask = inputs["completion_mask"] * inputs.get("tool_mask", 1)
            for i, (prompt, answer) in enumerate(zip(inputs["prompt_ids"], inputs["completion_ids"])):
                j = int(self.tokenizer.convert_ids_to_tokens(int(answer[0]))[1:])
                rows[self._group_of(prompt) * self.G + j] = {
                    "coefficients": (-logps.grad[i]).double().tolist(),
                    "mask": mask[i].double().tolist(),
                    "advantage": float(inputs["advantages"].reshape(len(mask), -1)[i, 0]),
                }
        return rows


@pytest.fixture(scope="module")
def first_step() -> dict[int, dict[str, Any]]:
    """The answers of optimizer step 0 as the trainer updated them."""
    warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory(prefix="exported-grpo-step-") as folder:
        return _Step(_config(folder)).run(folder)


def test_the_step_holds_the_probe_answers(first_step: dict[int, dict[str, Any]]) -> None:
    """The trainer's sampler put the answers into optimizer step 0 that the reference was computed for."""
    want = sorted(int(r) for r in CASE["expected"])
    if sorted(first_step) != want:
        pytest.fail(f"optimizer step 0 trained on answers {sorted(first_step)}, not {want}", pytrace=False)


def test_the_update_is_the_objective(first_step: dict[int, dict[str, Any]]) -> None:
    """Every loss token of every answer of step 0 gets the coefficient Âᵢ·wᵢ of the objective, scale included."""
    expected = {int(r): e for r, e in CASE["expected"].items()}
    largest = max(abs(e["coefficient"]) for e in expected.values()) or 1.0
    wrong, ratios = [], []
    for row, e in sorted(expected.items()):
        got = first_step.get(row)
        if got is None:
            continue
        tokens = [c for c, m in zip(got["coefficients"], got["mask"]) if m > 0]
        if len(tokens) != e["tokens"]:
            wrong.append(f"answer {row}: {len(tokens)} loss tokens, the reference has {e['tokens']}")
            continue
        off = [c for c in tokens if abs(c - e["coefficient"]) > RTOL * largest]
        if e["coefficient"]:
            ratios += [c / e["coefficient"] for c in tokens]
        if off:
            wrong.append(
                f"answer {row} (group {e['group']}, reward {e['reward']:g}, {e['tokens']} tokens): coefficient "
                f"{off[0]:.6g} where the objective gives Â·w = {e['advantage']:.6g}·{e['weight']:.6g} = "
                f"{e['coefficient']:.6g}"
            )
    objective = CASE["objective"]
    scale = statistics.median(ratios) if ratios else float("nan")
    head = (
        f"optimizer step 0 is {scale:.4g}× its objective {objective['name']} ({objective['formula']}, "
        f"{objective['setting']}: {objective['documented']}); the answers' ratios range "
        f"{min(ratios, default=float('nan')):.4g} … {max(ratios, default=float('nan')):.4g}"
    )
    if wrong:
        pytest.fail(head + "\n" + "\n".join(wrong[:8]), pytrace=False)
