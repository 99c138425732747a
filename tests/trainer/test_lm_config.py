"""The LM trainer's settings (standard library only): eager validation, the task field, the named
configurations."""

from __future__ import annotations

import pytest

from grpo_identity.trainer.lm.config import CONFIGS, TASKS, LMConfig, named_config


def test_configs_validate_eagerly_and_named_sizes_exist():
    assert set(CONFIGS) == {"cpu-smoke", "small", "gpu", "cpu-conditional"}
    with pytest.raises(ValueError, match="n_head"):
        LMConfig(n_embd=64, n_head=5)
    with pytest.raises(ValueError, match="unknown config"):
        named_config("huge")
    with pytest.raises(ValueError, match="mode"):
        LMConfig(mode="ppo")  # type: ignore[arg-type]


def test_the_task_defaults_to_addition_and_an_unknown_task_is_refused_by_name():
    assert LMConfig().task == "addition" and TASKS == ("addition", "split")
    assert all(cfg.task == "addition" for name, cfg in CONFIGS.items() if name != "cpu-conditional")
    with pytest.raises(ValueError, match=r"^task must be one of addition, split, got 'multiply'$"):
        LMConfig(task="multiply")  # type: ignore[arg-type]
    assert named_config("cpu-smoke", task="split").task == "split"


def test_cpu_conditional_is_the_fixed_policy_experiment_on_split_with_twelve_prompts():
    cfg = named_config("cpu-conditional")
    assert (cfg.experiment, cfg.task, cfg.threads, cfg.device) == ("conditional", "split", 1, "auto")
    assert cfg.cond_prompts >= 12 and (cfg.cond_p_low, cfg.cond_p_high) == (0.2, 0.8)
    assert cfg.cond_groups >= 4 * CONFIGS["cpu-smoke"].cond_groups
