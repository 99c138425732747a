"""Built-in audit targets: the dial's presets and the real frameworks' advantage code.

Every adapter is a function ``fn(rewards, group_size)`` (1-D float64 rewards laid out group by
group → one advantage per reward; for a filter, one bool per group) built from a name:

- a preset of :mod:`grpo_identity.dial` (``grpo``, ``dr_grpo``, ``dapo``, ``rloo``,
  ``openrlhf``; ``preset:NAME`` for any, e.g. ``preset:trl``): the dial itself, the reference;
- ``trl`` / ``trl:scale_rewards=group|batch|none`` (also ``multi_objective_aggregation=…``): TRL's
  real ``GRPOTrainer._generate_and_score_completions`` on a tiny offline model (no download);
- ``verl[:ESTIMATOR][:key=value,…]`` (default estimator ``grpo``) (``grpo``, ``grpo_vectorized``, ``rloo``, ``rloo_vectorized``,
  … with e.g. ``norm_adv_by_std_in_grpo=false``, ``epsilon=1e-6``): verl's registered
  ``core_algos`` estimators on per-token rewards with a uid index.

The frameworks are imported only inside the builders (never at import of this module).  Each
built function carries ``grpo_identity_info`` (framework, version, options) for the report.

>>> fn = build("dr_grpo")
>>> fn(__import__("numpy").array([1., 0.]), 2).tolist()
[0.5, -0.5]
"""

from __future__ import annotations

import ast
from typing import Any, Callable

import numpy as np

__all__ = ["ADAPTERS", "names", "is_adapter", "build", "parse"]

#: adapter family -> one-line description (for ``--help`` and reports)
ADAPTERS: dict[str, str] = {
    "<preset>": "a preset of the dial (grpo, dr_grpo, dapo, rloo, openrlhf; preset:NAME for any): the reference itself",
    "trl": "TRL GRPOTrainer's advantage (options: scale_rewards=group|batch|none, multi_objective_aggregation=…)",
    "verl": "verl core_algos estimator: verl:grpo, verl:grpo_vectorized, verl:rloo, … (options: norm_adv_by_std_in_grpo=false, epsilon=…)",
}

#: versions the CI tests pin (``make setup`` installs exactly these)
TESTED_VERSIONS = {"trl": "1.16.0", "verl": "0.9.1"}


def names() -> list[str]:
    """Example adapter names (every preset, plus the framework forms)."""
    from grpo_identity.dial import PRESETS

    return [*(p for p in PRESETS if p not in ("trl", "verl")), "preset:trl", "preset:verl", "trl", "trl:scale_rewards=batch", "trl:scale_rewards=none", "verl:grpo", "verl:grpo_vectorized", "verl:rloo", "verl:grpo:norm_adv_by_std_in_grpo=false"]


def parse(spec: str) -> tuple[str, str | None, dict[str, Any]]:
    """Split ``framework[:estimator][:key=value,…]`` into its parts (values read as Python literals)."""
    parts = [p for chunk in spec.split(":") for p in chunk.split(",") if p]
    if not parts:
        raise ValueError("empty adapter name")
    framework, estimator, options = parts[0].strip().lower(), None, {}
    for p in parts[1:]:
        if "=" in p:
            key, _, raw = p.partition("=")
            options[key.strip()] = _literal(raw.strip())
        elif estimator is None:
            estimator = p.strip()
        else:
            raise ValueError(f"adapter {spec!r}: more than one estimator name ({estimator!r}, {p!r})")
    return framework, estimator, options


def _literal(raw: str) -> Any:
    low = raw.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return raw


def is_adapter(spec: str) -> bool:
    """Whether ``spec`` names a built-in adapter (rather than FILE.py:FUNCTION or MODULE:FUNCTION)."""
    from grpo_identity.dial import PRESETS

    head = spec.split(":")[0].strip().lower()
    return head in PRESETS or head in ("trl", "verl", "preset", "dial")


def build(spec: str, kind: str = "advantage") -> Callable[..., Any]:
    """The adapter function named by ``spec`` (imports the framework it needs)."""

    framework, estimator, options = parse(spec)
    if framework in ("preset", "dial"):
        if estimator is None or options:
            raise ValueError(f"write a preset as preset:NAME, got {spec!r}")
        return _preset(estimator, kind)
    if framework not in ("trl", "verl"):
        if estimator is not None or options:
            raise ValueError(f"a preset takes no options, got {spec!r}")
        return _preset(framework, kind)
    if kind == "filter":
        raise ValueError(f"adapter {spec!r} computes advantages; only presets can be audited as filters")
    if framework == "trl":
        if estimator is not None:
            raise ValueError(f"trl takes options only (e.g. trl:scale_rewards=batch), got {estimator!r}")
        return _trl(options)
    return _verl(estimator or "grpo", options)


def _preset(name: str, kind: str) -> Callable[..., Any]:
    from grpo_identity import dial as D

    d = D.preset(name)
    if kind == "filter":

        def keep(rewards: np.ndarray, group_size: int) -> np.ndarray:
            return D.keep_mask(rewards, group_size, d)

        fn = keep
    else:

        def adv(rewards: np.ndarray, group_size: int) -> np.ndarray:
            return D.advantages(rewards, group_size, d)

        fn = adv
    fn.grpo_identity_info = {"framework": "grpo-identity dial", "preset": d.name, **d.params()}  # type: ignore[attr-defined]
    return fn


# --- verl ----------------------------------------------------------------------------------------
def _verl(estimator: str, options: dict[str, Any]) -> Callable[..., Any]:
    from importlib.metadata import version

    import torch
    from verl.trainer.ppo import core_algos

    try:
        est = core_algos.get_adv_estimator_fn(estimator)
    except (ValueError, KeyError) as exc:
        raise ValueError(f"verl has no advantage estimator {estimator!r}: {exc}") from None

    def verl_advantage(rewards: np.ndarray, group_size: int) -> np.ndarray:
        n, T = len(rewards), 3
        # rows in a shuffled order (a fixed permutation per batch size): verl groups by uid, not
        # by position, so the adapter exercises that too
        order = np.random.default_rng(n).permutation(n)
        # verl's outcome estimators take per-token rewards (bs, T), summed over the response
        token_rewards = torch.zeros(n, T, dtype=torch.float32)  # (bs, T)
        token_rewards[:, -1] = torch.as_tensor(np.asarray(rewards)[order], dtype=torch.float32)
        mask = torch.ones(n, T, dtype=torch.float32)
        # one uid per prompt, as verl's trainer assigns them (strings, object array)
        index = np.array([f"uid-{i // group_size:05d}" for i in order], dtype=object)
        adv, _ = est(token_level_rewards=token_rewards, response_mask=mask, index=index, **options)
        out = np.empty(n, dtype=np.float64)  # verl's fp32 values, handed back in the caller's dtype
        out[order] = adv[:, 0].numpy()  # (bs,): the advantage is broadcast over the tokens
        return out

    verl_advantage.grpo_identity_info = {"framework": "verl", "version": version("verl"), "estimator": estimator, "options": options, "dtype": "float32"}  # type: ignore[attr-defined]
    return verl_advantage


# --- TRL -----------------------------------------------------------------------------------------
def _trl(options: dict[str, Any]) -> Callable[..., Any]:
    """TRL's GRPOTrainer on a one-layer Llama built from a config and a word-level tokenizer.

    Each call sets the group size and the rewards the reward function will return, then runs the
    trainer's own ``_generate_and_score_completions`` on n_groups × G copies of a prompt (one row
    per completion, as TRL's repeat sampler lays them out) and reads ``advantages``.
    """
    import tempfile
    import warnings
    from importlib.metadata import version

    import torch
    from datasets import Dataset
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from trl import GRPOConfig, GRPOTrainer

    warnings.filterwarnings("ignore")
    vocab = {w: i for i, w in enumerate(["<pad>", "<eos>", "<unk>", "a", "b", "c", "d"])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    tokenizer.padding_side = "left"
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32, pad_token_id=0, bos_token_id=1, eos_token_id=1))
    state: dict[str, Any] = {"rewards": None}

    def reward_fn(completions: list[Any], **kwargs: Any) -> list[float]:
        r = state["rewards"]
        if r is None or len(r) != len(completions):
            raise RuntimeError("reward batch and completion batch differ in length")
        return [float(v) for v in r]

    opts = {"scale_rewards": "group", **options}
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="grpo-identity-trl-"),
        use_cpu=True,
        bf16=False,
        report_to="none",
        num_generations=2,
        per_device_train_batch_size=2,
        max_completion_length=1,
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        **opts,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=reward_fn, args=args, processing_class=tokenizer, train_dataset=Dataset.from_dict({"prompt": ["a b"] * 2}))

    def trl_advantage(rewards: np.ndarray, group_size: int) -> np.ndarray:
        trainer.num_generations = trainer.num_generations_eval = int(group_size)
        state["rewards"] = np.asarray(rewards, dtype=np.float64)
        inputs = [{"prompt": "a b"} for _ in range(len(rewards))]  # (n_groups·G,) rows, group by group
        with torch.no_grad():
            out = trainer._generate_and_score_completions(inputs)
        return out["advantages"].detach().cpu().numpy().astype(np.float64)  # TRL's fp32 values, in the caller's dtype

    trl_advantage.grpo_identity_info = {"framework": "trl", "version": version("trl"), "entry": "GRPOTrainer._generate_and_score_completions", "options": opts, "dtype": "float32"}  # type: ignore[attr-defined]
    return trl_advantage
