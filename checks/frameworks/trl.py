"""TRL driver: ``GRPOTrainer`` itself, built from a ``GRPOConfig`` that TRL's own parser reads.

- config: ``trl.TrlParser((GRPOConfig,)).parse_args_and_config`` on ``--KEY VALUE`` pairs (and
  ``--config FILE``, a YAML mapping, exactly as ``trl grpo --config`` reads it); an unknown key is
  the parser's own error;
- model: a one-layer Llama built from a config and a word-level tokenizer (no download);
- advantages: the trainer's ``_generate_and_score_completions`` on n_groups × G rows (as its
  repeat sampler lays them out) with a reward function that returns the audit's rewards;
- gradient: those same inputs with completions cut to different lengths (an EOS at that position,
  the mask after it 0, as generation leaves them), then the trainer's ``compute_loss``
  differentiated by autograd with respect to each completion token's log-probability (the
  trainer's log-probability method is wrapped to keep that tensor's gradient; nothing else changes);
- ``beta`` ≠ 0: the policy is saved to a temporary folder and the trainer given its path, so that TRL builds
  its reference model as it builds it for a checkpoint (:func:`policy_for`); the reference's log-probabilities
  are TRL's method on TRL's reference model, on the probe's completions;
- off-policy (:mod:`grpo_identity.checks.measure.offpolicy`): the same inputs, old and reference log-probabilities at
  the current weights, then ``compute_loss`` at weights moved by a seeded noise (:func:`_off_policy_step`).

``num_generations`` is the group size of each probe batch: the audit sets it per call.
"""

from __future__ import annotations

import contextlib
import itertools
import tempfile
from dataclasses import replace
from importlib.metadata import version
from typing import Any, Callable, Iterator

import numpy as np

from grpo_identity.checks.frameworks import AdapterError, FrameworkSpec, patched_attributes
from grpo_identity.checks.frameworks.contract import Built, DriverInfo, DriverSettings
from grpo_identity.checks.frameworks.exported.trl import retain_logps as kept_logps
from grpo_identity.checks.frameworks.exported.trl import tiny_policy
from grpo_identity.checks.frameworks.trl_config import DIFFERENCES, grpo_config, user_keys
from grpo_identity.checks.frameworks.trl_rollout import (
    ENGINE_STAND_IN,
    correction_settings,
    engine_stood_in,
    rollout_step,
)

__all__ = [
    "DIFFERENCES",
    "import_check",
    "build",
    "TrlTarget",
]


def import_check() -> None:
    """Import what the driver needs (a release environment's smoke test)."""
    import importlib

    importlib.import_module("trl")
    importlib.import_module("grpo_identity.checks.calls.target")


@contextlib.contextmanager
def policy_for(args: Any, words: list[str] | tuple[str, ...] = ()) -> Iterator[tuple[Any, Any]]:
    """The tokenizer and the ``model`` argument of ``GRPOTrainer`` for ``args``: the tiny policy itself where
    ``beta`` is 0.  Where ``beta`` is not, TRL builds a reference model, and from 0.17 on it loads it from the
    policy's path (``model.config._name_or_path``), which a policy built from a config does not have; so the
    policy is saved to a temporary folder and the trainer is given that path, from which TRL loads both the
    policy and the reference itself, as it does for a user's checkpoint (no hub, no download).  The folder is
    removed when the block ends (build the trainer inside it: TRL reads the folder while it is built)."""
    tokenizer, model = tiny_policy(words)
    if not float(getattr(args, "beta", 0.0) or 0.0):
        yield tokenizer, model
        return
    from transformers.utils import logging as hf_logging

    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # "Loading weights" of a tiny local folder is not the user's business
    try:
        with tempfile.TemporaryDirectory(prefix="grpo-identity-trl-policy-") as folder:
            model.save_pretrained(folder)
            tokenizer.save_pretrained(folder)
            yield tokenizer, folder
    finally:
        if bar:
            hf_logging.enable_progress_bar()


def reward_components(spec: FrameworkSpec, args: Any) -> int:
    """How many reward functions the trainer gets: one per entry of your ``reward_weights``; two where you
    set ``multi_objective_aggregation`` alone (TRL weighs them 1, 1); else one."""
    weights = DIFFERENCES["reward_weights"].value_of(args)
    if weights:
        return len(weights)
    return 2 if "multi_objective_aggregation" in user_keys(spec) else 1


def _reward_funcs(args: Any, state: dict[str, Any], components: int) -> list[Callable[..., list[float | None]]]:
    """One reward function per component: column j of ``state["rewards"]`` when it is (n, K); the audit's
    rewards otherwise, carried by the first function of nonzero weight (divided by its weight, so that the
    weighted sum is the rewards themselves) with the others 0."""
    pivot, weight = _pivot(args)

    def make(j: int) -> Callable[..., list[float | None]]:
        def reward_fn(completions: list[Any], **kwargs: Any) -> list[float | None]:
            r = state["rewards"]
            if r is None or len(r) != len(completions):
                raise RuntimeError("reward batch and completion batch differ in length")
            if r.ndim == 2:
                return [float(v) for v in r[:, j]]
            none = state.get("none", ())  # the rows whose every reward function returns None
            return [None if i in none else float(v) / weight if j == pivot else 0.0 for i, v in enumerate(r)]

        reward_fn.__name__ = f"component_{j}" if components > 1 else "reward_fn"
        return reward_fn

    return [make(j) for j in range(components)]


def _pivot(args: Any) -> tuple[int, float]:
    """The first reward function of nonzero weight, and its weight (0 and 1 without weights)."""
    weights = [float(w) for w in (DIFFERENCES["reward_weights"].value_of(args) or [1.0])]
    pivot = next((j for j, w in enumerate(weights) if w), 0)
    return pivot, weights[pivot] or 1.0


def _trainer(args: Any, state: dict[str, Any], components: int = 1) -> Any:
    from datasets import Dataset
    from trl import GRPOTrainer

    funcs = _reward_funcs(args, state, components)
    try:
        with policy_for(args) as (tokenizer, model), engine_stood_in(args):
            trainer = GRPOTrainer(
                model=model,
                reward_funcs=funcs if components > 1 else funcs[0],
                args=args,
                processing_class=tokenizer,
                train_dataset=Dataset.from_dict({"prompt": ["a b"] * 2}),
            )
        _sample_once(trainer)
        return trainer
    except AdapterError:  # the driver's own refusal, named once
        raise
    except Exception as exc:
        raise AdapterError(
            f"TRL {version('trl')}: GRPOTrainer rejects the config: "
            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from None


def retain_logps(trainer: Any, kept: dict[str, Any]) -> None:
    """The log-probabilities ``compute_loss`` differentiates kept with their gradient, as ``kept["logps"]``
    (:func:`~grpo_identity.checks.frameworks.exported.trl.retain_logps`); a release with no method to wrap is an
    AdapterError."""
    try:
        kept_logps(trainer, kept)
    except RuntimeError as exc:
        raise AdapterError(f"TRL {version('trl')}: {exc} (the driver needs one)") from None


def _sample_once(trainer: Any) -> None:
    """The trainer's sampling, cheap.  The sampled completions are not read: the reward function returns the
    audit's rewards, and the gradient and off-policy probes put answers of their own in their place
    (:func:`_lay_out`: only the sample's width, where it is the wider, pads them), so one repeated sample gives
    the same results as a fresh one per call, at a fraction of the cost: the hypothesis search calls the trainer
    hundreds of times per audit, at dozens of batch sizes.  The model's ``generate`` samples one row for a batch of
    one repeated prompt (:func:`_one_row_per_prompt`); releases with ``_generate`` (the sampling step of
    ``_generate_and_score_completions``) also get that memoised per batch shape, which saves its tokenizing and
    decoding."""
    _one_row_per_prompt(trainer.model)
    if not DIFFERENCES["sample"].present():
        return
    memo: dict[Any, Any] = {}
    generate = trainer._generate
    trainer.grpo_identity_generate = generate  # the sampling step itself (the rollout probe's engine answers vary)

    def sample_once(prompts: list[Any], *args: Any, **kwargs: Any) -> Any:
        if args or kwargs:  # a signature this driver does not know: sample every time
            return generate(prompts, *args, **kwargs)
        key = (len(prompts), repr(prompts[:1]))
        if key not in memo:
            memo[key] = generate(prompts)
        return _fresh(memo[key])

    trainer._generate = sample_once


def _one_row_per_prompt(model: Any) -> None:
    """``model.generate`` on a batch of one repeated prompt (the audit's batches) samples one row, once per prompt,
    mask, width and generation settings, and repeats it; the weights are taken to stay as they are (the advantage
    and gradient targets never step them).  Any other call (rows that differ, another batch input) samples as
    called, and so does every call of a prompt whose one-row output was not a tensor."""
    import torch

    generate = model.generate
    memo: dict[Any, Any] = {}

    def generate_rows(*args: Any, **kwargs: Any) -> Any:
        rows = _one_prompt(args, kwargs)
        if rows is None:
            return generate(*args, **kwargs)
        settings = {k: v for k, v in kwargs.items() if k not in rows}
        key = (*((k, tuple(t.shape[1:]), t[:1].cpu().numpy().tobytes()) for k, t in rows.items()), repr(settings))
        if key not in memo:
            out = generate(**settings, **{k: t[:1] for k, t in rows.items()})
            memo[key] = out if isinstance(out, torch.Tensor) else None
        out = memo[key]
        return generate(*args, **kwargs) if out is None else out.repeat(len(rows["input_ids"]), 1)

    model.generate = generate_rows


def _one_prompt(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """``{"input_ids": …, "attention_mask": …}`` (the mask where given) of a ``generate`` call whose batch is one
    prompt repeated and holds no other tensor; None for any other call."""
    import torch

    if len(args) > 1 or (args and "input_ids" in kwargs):
        return None
    rows = {"input_ids": args[0] if args else kwargs.get("input_ids")}
    if kwargs.get("attention_mask") is not None:
        rows["attention_mask"] = kwargs["attention_mask"]
    if any(isinstance(v, torch.Tensor) for k, v in kwargs.items() if k not in rows):
        return None
    repeated = all(isinstance(t, torch.Tensor) and t.dim() == 2 and bool((t == t[:1]).all()) for t in rows.values())
    return rows if repeated else None


def _fresh(obj: Any) -> Any:
    """A copy of the lists, tuples and dicts in ``obj`` (what the caller may change in place), as plain lists,
    tuples and dicts (a named tuple or a list subclass comes back plain); the leaves (token ids, strings, tensors)
    are shared.  Much cheaper than ``copy.deepcopy``."""
    if isinstance(obj, (list, tuple)):
        kinds = set(map(type, obj))
        if not _holds_containers(kinds):  # a row of token ids: copied at C speed
            items = obj
        elif kinds == {list} and not _holds_containers(set(map(type, itertools.chain.from_iterable(obj)))):
            items = list(map(list, obj))  # rows of token ids, the batch's usual shape
        else:
            items = [_fresh(x) for x in obj]
        return list(items) if isinstance(obj, list) else tuple(items)
    if isinstance(obj, dict):
        return {k: _fresh(v) for k, v in obj.items()}
    return obj


def _holds_containers(kinds: set[type]) -> bool:
    """Whether any of the types ``kinds`` is a list, tuple or dict (which :func:`_fresh` copies)."""
    return any(issubclass(t, (list, tuple, dict)) for t in kinds)


def _advantages_only(trainer: Any) -> contextlib.AbstractContextManager[None]:
    """Scoring for the advantages alone: the reference model's forward pass (``beta`` ≠ 0) and the old policy's
    (the rollout correction's), whose log-probabilities the advantages never read, are skipped (``beta`` read as 0
    and the correction as off while the batch is scored: the advantage audit calls the trainer hundreds of times)."""
    patches = [(trainer, "beta", 0.0)]
    if getattr(trainer, "vllm_importance_sampling_correction", None) is not None:  # nor the old policy's pass
        patches.append((trainer, "vllm_importance_sampling_correction", False))
    return patched_attributes(patches)


def _score(trainer: Any, state: dict[str, Any], rewards: np.ndarray, G: int) -> dict[str, Any]:
    import torch

    trainer.num_generations = trainer.num_generations_eval = int(G)
    state["rewards"] = np.asarray(rewards, dtype=np.float64)
    inputs = [{"prompt": "a b"} for _ in range(len(rewards))]  # (n_groups·G,) rows, group by group
    with torch.no_grad():
        return trainer._generate_and_score_completions(inputs)


def async_settings(args: Any) -> dict[str, Any]:
    """``info["async_groups"]``: no staleness bound (TRL samples each prompt's G answers together, at the current
    weights: a group never arrives short, split, late or across versions, and those cases are not run); a batch-wide
    σ where ``scale_rewards="batch"`` documents it.  A reward function may return None for an answer, which TRL
    documents as ignored (an answer every function returns None for: nansum made it a 0 before 1.6.0, trl #5902)."""
    scale = str(DIFFERENCES["scale_rewards"].value_of(args, ""))
    documented = {"group_scale_foreign": "scale_rewards=batch: the whole batch's σ"} if scale == "batch" else {}
    return {
        "max_staleness": None,
        "setting": "GRPOTrainer samples each prompt's num_generations answers together",
        "documented": documented,
    }


@contextlib.contextmanager
def _quiet_about_none(on: bool) -> Iterator[None]:
    """TRL's warning about an answer whose every reward function returns None ("All reward functions returned None
    for the following kwargs …", after accelerate's "[RANK 0]") dropped while a delivery has such answers: they are
    the probe's, on purpose, and the user would read the warning as a fault of their own reward function.  Every
    other record is kept."""
    import logging

    class NoneRewards(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return "All reward functions returned None" not in record.getMessage()

    names = [n for n in list(logging.root.manager.loggerDict) if n == "trl" or n.startswith("trl.")] if on else []
    loggers, drop = [logging.getLogger(n) for n in names], NoneRewards()
    try:
        for logger in loggers:  # a filter acts where the record is made, not on the records its children pass up
            logger.addFilter(drop)
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(drop)


def _deliveries(trainer: Any, state: dict[str, Any], arrival: dict[str, Any]) -> list[dict[str, Any]]:
    """Each delivery scored by ``_generate_and_score_completions``, its groups in blocks of G (:func:`group_order`);
    a None reward is the reward functions' None."""
    from grpo_identity.checks.measure.arrival import group_order

    G, steps = int(arrival["G"]), []
    for step, now in zip(arrival["steps"], arrival["versions"]):
        groups = list(dict.fromkeys(step["group"]))
        if any(step["group"].count(g) != G for g in groups) or set(step["version"]) != {now}:
            raise NotImplementedError("TRL samples each prompt's G answers together, at the current weights")
        if not all(step["length"]):
            raise NotImplementedError("TRL's advantages do not read the answers' lengths: no tokens is not probed")
        order = group_order(step["group"])
        rewards = [step["reward"][j] for j in order]
        state["none"] = {i for i, r in enumerate(rewards) if r is None}
        try:
            with _advantages_only(trainer), _quiet_about_none(bool(state["none"])):
                out = _score(trainer, state, np.array([0.0 if r is None else r for r in rewards]), G)
        finally:
            state["none"] = set()
        advantages = out["advantages"].detach().cpu().numpy().astype(np.float64)
        steps.append({"trained": [step["id"][j] for j in order], "advantages": advantages.tolist()})
    return steps


def build(spec: FrameworkSpec, level: str) -> TrlTarget:
    """The target of ``spec`` at ``level`` (:mod:`.contract`)."""
    return TrlTarget(spec, level)


class TrlTarget(Built):
    """``GRPOTrainer`` built from ``spec``'s config.  Advantages: the trainer's ``_generate_and_score_completions``.
    Gradient: −∂loss/∂log π per completion token, autograd through ``GRPOTrainer.compute_loss``; a step request
    (:mod:`grpo_identity.checks.measure.steps`) runs the optimizer step of ``GRPOTrainer.train()`` as configured or
    unsplit (:mod:`.trl_step`); an off-policy request (:mod:`grpo_identity.checks.measure.offpolicy`) one step at
    weights moved after the batch was scored (:func:`_off_policy_step`).  Where ``beta`` ≠ 0 the reference model's
    log-probabilities are those of TRL's own reference model on the probe's completions."""

    def __init__(self, spec: FrameworkSpec, level: str) -> None:
        from grpo_identity.checks.frameworks import trl_step

        DIFFERENCES["score"].require(f"TRL {version('trl')}")  # checked once: the search scores hundreds of batches
        self.whole = spec
        # the step before the trainer: a GRPOConfig resets accelerate's shared state
        plan = trl_step.step_plan(spec) if level == "gradient" else None
        spec = trl_step.one_process(spec)
        args = grpo_config(spec)
        self.state: dict[str, Any] = {"rewards": None}
        components = reward_components(spec, args)
        self.trainer = trainer = _trainer(args, self.state, components)
        if plan is None:
            super().__init__(_info(spec, args, "GRPOTrainer._generate_and_score_completions", components), level)
            return
        if not hasattr(trainer, "current_gradient_accumulation_steps"):
            trainer.current_gradient_accumulation_steps = 1  # set by the training loop before each step
        self.kept: dict[str, Any] = {}
        retain_logps(trainer, self.kept)
        self.eos = trainer.processing_class.eos_token_id
        self.pad = trainer.processing_class.pad_token_id
        self.off_policy_info = off_policy_settings(trainer, args)
        self.words = [int(i) for i in trainer.processing_class.convert_tokens_to_ids(["a", "b", "c", "d"])]
        info = _info(spec, args, "GRPOTrainer.compute_loss (autograd)", components)
        details = {**info.details, "mixed_precision": str(getattr(trainer.accelerator, "mixed_precision", "no"))}
        info = replace(
            info,
            details=details,
            lengths_optional=True,
            off_policy=self.off_policy_info,
            async_groups=async_settings(args),
        )
        if getattr(args, "use_vllm", False):
            unavailable = "use_vllm: the split step's rank processes do not stand in the engine yet"
            info = replace(info, rollout_correction=correction_settings(args), step_unavailable=unavailable)
        else:
            info = info.with_step(plan)
        super().__init__(info, level)

    def advantages(self, rewards: np.ndarray, G: int, scores: np.ndarray | None = None) -> np.ndarray:
        """``scores``: one column per reward function, (n, K), in place of ``rewards``."""
        with _advantages_only(self.trainer):
            out = _score(self.trainer, self.state, rewards if scores is None else np.asarray(scores), G)
        return out["advantages"].detach().cpu().numpy().astype(np.float64)  # TRL's fp32 values, in the caller's dtype

    def step(self, rewards: np.ndarray, G: int, lengths: np.ndarray, request: dict[str, Any]) -> dict[str, Any]:
        from grpo_identity.checks.frameworks import trl_step

        return trl_step.run_layout(
            self.whole, request["layout"], rewards, lengths, G, truncated=request.get("truncated")
        )

    def off_policy(self, rewards: np.ndarray, G: int, lengths: np.ndarray, settings: dict[str, Any]) -> dict[str, Any]:
        inputs = _score(self.trainer, self.state, rewards, G)
        words = (self.words, int(settings.get("seed", 0)))  # the answers' words from the seed
        inputs = _lay_out(inputs, np.asarray(lengths, dtype=int), self.eos, self.pad, words)
        return _off_policy_step(self.trainer, self.kept, inputs, settings, self.off_policy_info)

    def async_groups(self, arrival: dict[str, Any]) -> dict[str, Any]:
        return {"steps": _deliveries(self.trainer, self.state, arrival)}

    def three_policy(self, rewards: np.ndarray, G: int, lengths: np.ndarray, rollout: dict[str, Any]) -> dict[str, Any]:
        """The step given the rollout engine's log-probabilities (:func:`.trl_rollout.rollout_step`)."""
        if self.driver_info.rollout_correction is None:
            raise NotImplementedError("TRL: the config sets no rollout correction (use_vllm and its correction)")
        inputs = _score(self.trainer, self.state, rewards, G)
        laid = _lay_out(inputs, np.asarray(lengths, dtype=int), self.eos, self.pad, (self.words, 0))
        generate = self.trainer.grpo_identity_generate
        return rollout_step(
            self.trainer, generate, laid, rollout, lambda scored: _loss_gradient(self.trainer, self.kept, scored)
        )

    def gradient(self, rewards: np.ndarray, G: int, lengths: np.ndarray) -> dict[str, Any]:
        trainer = self.trainer
        inputs = _score(trainer, self.state, rewards, G)
        inputs = _lay_out(inputs, np.asarray(lengths, dtype=int), self.eos, self.pad, (self.words, 0))
        on_policy(inputs, _unread_ratio(trainer))
        if inputs.get("ref_per_token_logps") is not None:  # scored on the sampled completions: again on the probe's
            inputs["ref_per_token_logps"] = _reference_logps(trainer, inputs)
        coefficients = _loss_gradient(trainer, self.kept, inputs)
        return {
            "advantages": inputs["advantages"].detach().double().numpy(),
            "coefficients": coefficients,
            "mask": inputs["completion_mask"].double().numpy(),
        }


def _unread_ratio(trainer: Any) -> tuple[str, ...]:
    """``("importance_sampling_ratio",)`` where the loss does not read it (no engine, or its correction off)."""
    on = getattr(trainer, "use_vllm", False) and getattr(trainer, "vllm_importance_sampling_correction", False)
    return () if on else ("importance_sampling_ratio",)


def _components(args: Any, components: int) -> dict[str, Any] | None:
    """``{weights, multi_objective_aggregation}`` where the trainer has several reward functions (the audit then
    probes how it combines them), else None."""
    if components <= 1:
        return None
    weights = [float(w) for w in (DIFFERENCES["reward_weights"].value_of(args) or [1.0] * components)]
    setting = str(DIFFERENCES["components"].value_of(args, "none (the release sums, then normalises)"))
    return {"weights": weights, "multi_objective_aggregation": setting}


def _lay_out(
    inputs: dict[str, Any], lengths: np.ndarray, eos: int, pad: int, words: tuple[list[int], int]
) -> dict[str, Any]:
    """``inputs`` with the probe's answers in place of the sampled completions: ``words`` (token ids, seed) drawn
    by a generator of that seed, (B, longest of ``lengths``), the EOS at each answer's length, padding and a mask
    of 0 after it, as generation leaves them.  The answers depend on the seed and the lengths alone, not on the
    sample (its width only pads them, where it is the wider: the scored tensors keep their shape)."""
    import torch

    sampled = inputs["completion_ids"]  # (B, T): T is the longest completion generated
    choice = torch.tensor(words[0], dtype=sampled.dtype)
    longest = int(np.max(lengths))
    generator = torch.Generator().manual_seed(words[1])
    ids = choice[torch.randint(len(words[0]), (sampled.shape[0], longest), generator=generator)]
    if sampled.shape[1] > longest:
        ids = torch.cat([ids, torch.full((ids.shape[0], sampled.shape[1] - longest), pad, dtype=ids.dtype)], dim=1)
    mask = torch.zeros(ids.shape, dtype=inputs["completion_mask"].dtype)
    for i, ell in enumerate(lengths):
        ids[i, ell - 1], ids[i, ell:], mask[i, :ell] = eos, pad, 1  # EOS at ell, nothing after
    inputs = {**inputs, "completion_ids": ids, "completion_mask": mask}
    if "num_items_in_batch" in inputs:
        inputs["num_items_in_batch"] = mask.sum()
    return inputs


def on_policy(inputs: dict[str, Any], unread: tuple[str, ...] = ()) -> None:
    """The batch of an on-policy first step: old = current, as TRL reads an old log-probability of None (0.18 and
    0.19 read the key unguarded: it stays, as None); the sampler's log-probabilities and ``unread`` ratios gone
    (``.get(key, old)`` falls back to the old ones), the engine's ratio kept where the loss reads it (use_vllm with
    its correction: the stand-in agrees with the trainer)."""
    if "old_per_token_logps" in inputs:
        inputs["old_per_token_logps"] = None
    for key in ("sampling_per_token_logps", *unread):
        inputs.pop(key, None)


def _loss_gradient(trainer: Any, kept: dict[str, Any], inputs: dict[str, Any]) -> np.ndarray:
    """−∂loss/∂log π per completion token (n, T): ``compute_loss`` as ``Trainer.training_step`` calls it (under
    the trainer's autocast context), differentiated by autograd."""
    trainer.model.zero_grad()
    kept.pop("logps", None)
    with trainer.compute_loss_context_manager():
        loss = trainer.compute_loss(trainer.model, inputs)
    loss.backward()
    grad = kept["logps"].grad
    return -grad.double().numpy()


def _per_token_logps(trainer: Any, model: Any, inputs: dict[str, Any]) -> Any:
    """log π(yᵢₜ) of ``model`` on the completions of ``inputs``, by the trainer's own method, as its scoring
    calls it (no gradient): the old policy's and the reference's log-probabilities are computed so."""
    import torch

    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    method = (
        trainer._get_per_token_logps_and_entropies if DIFFERENCES["logps"].present() else trainer._get_per_token_logps
    )
    with torch.no_grad():
        out = method(model, ids, attention, inputs["completion_ids"].size(1))
    return (out[0] if isinstance(out, tuple) else out).detach()


def _reference_logps(trainer: Any, inputs: dict[str, Any]) -> Any:
    """The reference model's log-probabilities on the probe's completions (``beta`` ≠ 0)."""
    if getattr(trainer, "ref_model", None) is None:
        raise AdapterError(
            f"TRL {version('trl')}: beta is {trainer.beta} but the trainer holds no reference model (the driver "
            "knows only the one TRL loads from the policy's path, not a PEFT policy's disabled adapter)"
        )
    return _per_token_logps(trainer, trainer.ref_model, inputs)


def off_policy_settings(trainer: Any, args: Any) -> dict[str, Any]:
    """``info["off_policy"]`` (:mod:`grpo_identity.checks.measure.offpolicy`): what an off-policy step runs under."""
    level = DIFFERENCES["sampling_level"].value_of(args)
    stored = (
        "set by the driver to the trainer's own log-probabilities at the unperturbed weights (TRL stores none when "
        "num_iterations = 1 and generation is aligned with the optimizer steps, and stores exactly these when "
        "num_iterations > 1)"
    )
    iterations = _reads_old_only_with_iterations(trainer)
    if iterations:
        stored += f"; TRL {version('trl')} reads them only when num_iterations > 1, so the step runs with 2"
    return {
        "perturbation": "every parameter plus scale × N(0, 1) noise from a generator seeded by the request's seed",
        "beta": float(trainer.beta),
        "importance_sampling_level": str(level) if level is not None else "token (the release has no setting)",
        "epsilon": float(trainer.epsilon_low),
        "epsilon_high": float(trainer.epsilon_high),
        "delta": DIFFERENCES["delta"].value_of(args),
        "old_logps": stored,
        "kl_bias_correction": bool(DIFFERENCES["kl_correction"].value_of(args, False)) and float(trainer.beta) != 0.0,
        "num_iterations_for_old": iterations,
    }


def _reads_old_only_with_iterations(trainer: Any) -> bool:
    """Whether the release's loss reads the stored old log-probabilities only when ``num_iterations > 1``
    (0.16; later releases read them whenever they are there)."""
    import inspect

    method = type(trainer)._compute_loss if DIFFERENCES["compute_loss"].present() else type(trainer).compute_loss
    try:
        return "self.num_iterations > 1" in inspect.getsource(method)
    except (OSError, TypeError):
        return False


@contextlib.contextmanager
def _perturbed(model: Any, seed: int, scale: float) -> Iterator[None]:
    """The policy's parameters moved by a fixed seeded noise, ``scale`` × N(0, 1) on every parameter (the tiny
    policy's logits are small: the probe's 0.1 moves log π by about 0.2 per token), restored exactly afterwards."""
    import torch

    saved = [p.detach().clone() for p in model.parameters()]
    generator = torch.Generator().manual_seed(int(seed))
    try:
        with torch.no_grad():
            for p in model.parameters():
                if scale:
                    noise = torch.randn(p.shape, generator=generator, dtype=torch.float32).to(p.dtype)
                    p.add_(noise * float(scale))
        yield
    finally:
        with torch.no_grad():
            for p, q in zip(model.parameters(), saved):
                p.copy_(q)
        model.zero_grad(set_to_none=True)


def _off_policy_step(
    trainer: Any, kept: dict[str, Any], inputs: dict[str, Any], settings: dict[str, Any], info: dict[str, Any]
) -> dict[str, Any]:
    """One step after the policy has moved: the batch scored at the current weights (advantages; old and
    reference log-probabilities at those weights, :func:`off_policy_settings`), then ``compute_loss`` at the
    weights perturbed by a seeded noise (``settings``: seed, scale).  Per token: −∂loss/∂log π, log π − log π_old
    and log π − log π_ref (``beta`` ≠ 0)."""
    old = _per_token_logps(trainer, trainer.model, inputs)
    inputs = {**inputs, "old_per_token_logps": old}
    for key in ("sampling_per_token_logps", *_unread_ratio(trainer)):
        inputs.pop(key, None)  # the stand-in engine agrees with the trainer: its ratio kept where the loss reads it
    beta = float(trainer.beta)
    ref = _reference_logps(trainer, inputs) if beta != 0.0 else None
    if ref is not None:
        inputs["ref_per_token_logps"] = ref
    iterations = getattr(trainer, "num_iterations", 1)
    if info["num_iterations_for_old"]:
        trainer.num_iterations = max(2, int(iterations))
    try:
        with _perturbed(trainer.model, int(settings.get("seed", 0)), float(settings.get("scale", 0.0))):
            coefficients = _loss_gradient(trainer, kept, inputs)
            logps = kept["logps"].detach()
    finally:
        trainer.num_iterations = iterations
    return {
        "advantages": inputs["advantages"].detach().double().numpy(),
        "coefficients": coefficients,
        "mask": inputs["completion_mask"].double().numpy(),
        "log_ratio_old": (logps - old).double().numpy(),
        "log_ratio_ref": None if ref is None else (logps - ref).double().numpy(),
        "beta": beta,
        "clip": {"epsilon": info["epsilon"], "epsilon_high": info["epsilon_high"], "delta": info["delta"]},
    }


def _info(spec: FrameworkSpec, args: Any, entry: str, components: int) -> DriverInfo:
    chose = getattr(args, "grpo_identity_settings", None) or DriverSettings()
    details = {
        "scale_rewards": str(DIFFERENCES["scale_rewards"].value_of(args, "")),
        "loss_type": str(DIFFERENCES["loss_type"].value_of(args, "none (the release has one loss)")),
    }
    engine = (ENGINE_STAND_IN,) if getattr(args, "use_vllm", False) else ()
    return DriverInfo(
        "trl",
        version("trl"),
        entry,
        dict(spec.sets),
        chose,
        stand_ins=engine,
        details=details,
        components=_components(args, components),
    )
