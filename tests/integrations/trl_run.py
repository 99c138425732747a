"""A tiny TRL GRPO run with the identity callback, for ``accelerate launch`` (or plain python).

    python -m accelerate.commands.launch --multi_gpu --num_processes 2 tests/integrations/trl_run.py OUT [REWARD [G]]

(``--multi_gpu`` on a machine without GPUs: torchrun processes on the CPU, gloo backend.) Each
process writes ``OUT/rows-<rank>.jsonl`` (the rows its reward function scored: step, prompt,
reward, in the order TRL hands them over) and ``OUT/log-<rank>.json`` (its distributed set-up
and ``state.log_history``); the callback's main process writes ``OUT/identity.jsonl``. REWARD is
``binary`` (default) or ``silent07`` (every reward 0.7); G the group size (default 4).
"""

from __future__ import annotations

import json
import os
import sys
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from grpo_identity.checks.frameworks.trl import tiny_policy  # noqa: E402
from grpo_identity.integrations.trl import IdentityCallback  # noqa: E402

#: prompts per process and step, steps
PER_DEVICE_PROMPTS, STEPS = 1, 3
PROMPTS = ["a b", "b c", "c d", "d a"]


def main(out: str, reward: str = "binary", group_size: str = "4") -> None:
    G = int(group_size)
    torch.set_num_threads(1)
    rank = int(os.environ.get("RANK", "0"))
    tokenizer, model = tiny_policy()
    rows = open(os.path.join(out, f"rows-{rank}.jsonl"), "w")

    def reward_fn(prompts: list[str], completions: list[str], trainer_state: object, **kwargs: object) -> list[float]:
        if reward == "silent07":
            r = [0.7] * len(completions)
        else:  # "d a" always solved (a silent group); otherwise solved when the answer starts with a or b
            r = [1.0 if p == "d a" or c.strip()[:1] in ("a", "b") else 0.0 for p, c in zip(prompts, completions)]
        for p, v in zip(prompts, r):
            step = trainer_state.global_step  # type: ignore[attr-defined]
            rows.write(json.dumps({"step": step, "prompt": p, "reward": v}) + "\n")
        rows.flush()
        return r

    args = GRPOConfig(
        output_dir=os.path.join(out, "trainer"),  # nothing is saved there (save_strategy "no")
        use_cpu=True,
        bf16=False,
        report_to="none",
        num_generations=G,
        per_device_train_batch_size=G * PER_DEVICE_PROMPTS,
        max_completion_length=2,
        max_steps=STEPS,
        logging_steps=1,
        save_strategy="no",
        beta=0.0,
        learning_rate=1e-2,
        seed=0,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_fn,
        args=args,
        processing_class=tokenizer,
        train_dataset=Dataset.from_dict({"prompt": PROMPTS * 4}),
    )
    trainer.add_callback(IdentityCallback(trainer, log_file=os.path.join(out, "identity.jsonl")))
    trainer.train()
    dist = torch.distributed.is_initialized()
    setup = {
        "distributed_type": str(trainer.accelerator.distributed_type),
        "backend": torch.distributed.get_backend() if dist else None,
        "world_size": torch.distributed.get_world_size() if dist else 1,
        "is_main_process": trainer.accelerator.is_main_process,
    }
    with open(os.path.join(out, f"log-{rank}.json"), "w") as f:
        json.dump({**setup, "log_history": trainer.state.log_history}, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
