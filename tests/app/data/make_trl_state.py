"""Write a real ``trainer_state.json`` of a plain TRL ``GRPOTrainer`` run (no callback of this
project), the fixture of ``grpo-identity diagnose`` on an ordinary TRL run folder.

    python tests/app/data/make_trl_state.py OUT.json [G]

A one-layer Llama built from a config (no download), 8 steps on the CPU, ``logging_steps=1``,
four prompts of different difficulty per step and a binary reward; the run saves a checkpoint
and its ``trainer_state.json`` (what TRL writes, unchanged) is copied to OUT.json. The fixtures
``trl-<release>.trainer_state.json`` beside this file were written by it under each release's
interpreter (same seed, each release's own keys; 0.22.2 and 1.16.0 give the same rewards, 0.16.0 other
ones after step 1). Heavy imports stay inside ``main`` so that collecting this folder imports nothing heavy.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import warnings

STEPS, PROMPTS_PER_STEP = 8, 4
PROMPTS = ["a b", "b c", "c d", "d a"]


def solved(prompt: str, completion: str) -> float:
    """'d a' is always solved, 'c d' never; the others when the answer starts with a or b."""
    if prompt == "d a":
        return 1.0
    if prompt == "c d":
        return 0.0
    return 1.0 if completion.strip()[:1] in ("a", "b") else 0.0


def main(out: str, group_size: str = "4") -> None:
    warnings.filterwarnings("ignore")
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from grpo_identity.checks.frameworks.trl import tiny_policy

    G = int(group_size)
    torch.set_num_threads(1)
    tokenizer, model = tiny_policy()

    def correct(prompts: list[str], completions: list[str], **kwargs: object) -> list[float]:
        return [solved(p, c) for p, c in zip(prompts, completions)]

    with tempfile.TemporaryDirectory() as tmp:
        args = GRPOConfig(
            output_dir=tmp,
            use_cpu=True,
            bf16=False,
            report_to="none",
            num_generations=G,
            per_device_train_batch_size=G * PROMPTS_PER_STEP,
            max_completion_length=2,
            max_steps=STEPS,
            logging_steps=1,
            save_strategy="steps",
            save_steps=STEPS,
            save_only_model=True,
            beta=0.0,
            learning_rate=1e-2,
            seed=0,
            dataloader_num_workers=0,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=correct,
            args=args,
            processing_class=tokenizer,
            train_dataset=Dataset.from_dict({"prompt": PROMPTS * 16}),
        )
        trainer.train()
        shutil.copyfile(os.path.join(tmp, f"checkpoint-{STEPS}", "trainer_state.json"), out)


if __name__ == "__main__":
    main(*sys.argv[1:])
