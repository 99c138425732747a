"""OpenRLHF driver: its experience maker's own advantage code, from its own command line.

- config: the argparse parser of ``openrlhf.cli.train_ppo_ray`` (built in that module's
  ``__main__`` block, so the module is run as ``__main__`` by :mod:`runpy`) reads ``--KEY VALUE``
  pairs (``--set algo.advantage.estimator=group_norm``; a flag takes ``true``/``false``; an option
  of two numbers takes ``a,b``); its checks after parsing run too (``group_norm`` needs
  ``n_samples_per_prompt > 1`` …), and the run stops where ``train(args)`` would configure the
  DeepSpeed strategy (``ray.is_initialized`` answers True meanwhile, so no Ray cluster starts).
  ``--rollout.n_samples_per_prompt`` is the group size of each probe batch: the driver sets it per
  call, last;
- batch: one ``Experience`` per response (prompt and response tokens, ``action_mask``, the reward,
  ``response_length``), responses of different lengths, ``index`` = position, group by group as the
  samples generator leaves them; then the experience maker's own ``split_rollout_samples`` packs
  them into micro-batches of ``--rollout.micro_batch_size`` (right padding); the fields its
  ``make_experience`` adds come from an on-policy step with the reference equal to the actor
  (``kl`` zero, ``action_log_probs`` zero, no critic values);
- advantages: ``RemoteExperienceMaker.compute_advantages_and_returns`` on those micro-batches (a
  real ``RemoteExperienceMaker``, its model groups None, ``strategy.args`` the parsed config, the
  KL controller the trainer's), read back per response through each micro-batch's ``index``;
- gradient: the actor's ``PolicyLoss`` as a real ``ActorPPOTrainer`` builds it from the config
  (clip range, 0.11's ``loss_agg_mode`` → ``token_level_loss``), on the whole batch as one
  micro-batch (0.11: ``batch_num_tokens``/``global_batch_size`` of that batch, one rank),
  differentiated by autograd with respect to each response token's log-probability;
- step (a request of :mod:`grpo_identity.checks.measure.steps`): the rows one generation batch
  (``rollout.batch_size`` × G answers) after another through the experience maker, then into the
  ranks' replay buffers as ``PPOTrainer.train_step`` sends them (``RayActorGroup
  .async_run_method_batch``, after ``balance_experiences`` under ``train.dynamic_batch_enable``),
  then each rank's real ``ActorPPOTrainer.ppo_train`` (its ``DataLoader`` of
  ``train.micro_batch_size``, shuffled as it shuffles, ``drop_last``; or the replay buffer's
  token-budget partitions; 0.11's ``iter_grad_accum_global_norm`` windows; ``training_step``).  A
  row no micro-batch held (``drop_last``, or the rows ``setup_dynamic_batch``'s whole steps of
  ``train.batch_size`` leave over) comes back with step −1.  The unsplit layout runs the optimizer
  steps the split made, each as one micro-batch on one rank (the rows the split left out, a step
  per generation batch).  What needs GPUs is a stand-in, and the target's info says so: DeepSpeed's
  engine (``backward`` divides the loss by ``gradient_accumulation_steps``, ``step`` applies at the
  accumulation boundary: :class:`Engine`; its gradient average over the ranks is the driver's, each
  rank's gradient divided by the ranks) and the policy, one leaf tensor of log-probabilities
  (:class:`Policy`).  The data-parallel ranks are processes of one gloo group
  (:class:`~grpo_identity.checks.frameworks._ranks.ProcessRanks`; ``"ranks": "processes"``), so each
  all-reduce of OpenRLHF's own code is torch's own over the ranks.
  Where the user set no split option (:data:`SPLIT_KEYS`) the split is :data:`DEFAULT_SPLIT` (2
  ranks × 2 accumulated micro-batches a step) and G is ``STEP_GROUP_SIZE``.  Split settings
  OpenRLHF cannot run are an AdapterError when the target is built, naming a value that runs
  (:func:`split_problem`); ring attention and tensor parallelism, which the driver cannot
  reproduce, leave the step out (``info["step_unavailable"]``).

OpenRLHF's import chain reaches ``flash_attn`` and ``vllm`` (GPU only): while the driver imports
OpenRLHF it installs a ``sys.meta_path`` finder (:class:`StandIns`) that answers any module under
those names with an empty stand-in; the finder and its modules are removed afterwards, and the
target's ``grpo_identity_info`` names them (``stand_ins``).
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
from dataclasses import replace
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np

from grpo_identity.checks.frameworks import (
    RESPONSE_LENGTH,
    STEP_GROUP_SIZE,
    AdapterError,
    FrameworkSpec,
    lengths_for,
    patched_attributes,
)
from grpo_identity.checks.frameworks._ranks import ProcessRanks
from grpo_identity.checks.frameworks.contract import Built, Difference, DriverInfo, DriverSettings, StepPlan
from grpo_identity.checks.frameworks.exported import openrlhf as runner
from grpo_identity.checks.frameworks.exported.openrlhf import (
    GPU_ONLY,
    LOADED,
    Batch,
    Engine,
    Ledger,
    Policy,
    StandIns,
    actor_group,
    actor_trainer,
    argv_of,
    correction_settings,
    experience_maker,
    experiences_of,
    generation_batches,
    module_named,
    openrlhf_modules,
    parse_command_line,
    per_response,
    rank_counts,
    release,
    row_of,
    stand_ins,
    train_rank,
    train_split,
)

# what the runner refuses is this driver's usage error (exit 2, the release and the setting named)
runner.Refused = AdapterError  # type: ignore[misc,assignment]

__all__ = [
    "DIFFERENCES",
    "import_check",
    "StandIns",
    "stand_ins",
    "cli_args",
    "argv_of",
    "build",
    "OpenRLHFTarget",
    "lengths_for",
    "GPU_ONLY",
]


#: what the driver sets before the user's options (theirs come after and win); the group size
#: (``rollout.n_samples_per_prompt``) comes after those
DRIVER_SETS = (("rollout.micro_batch_size", "3"),)
#: how OpenRLHF's releases differ where the driver reads their code (:class:`~.contract.Difference`)
DIFFERENCES = {
    "policy_loss": Difference(
        "openrlhf.models.loss:PolicyLoss", "0.0.1", "the actor's loss as ActorPPOTrainer builds it: the gradient's"
    ),
    "loss_utils": Difference(
        "openrlhf.utils.loss_utils",
        "0.10.3",
        "the loss's global normalisers (get_loss_batch_info), passed to the loss where the release has them",
    ),
}
#: the options that cut OpenRLHF's optimizer step (0.10 and 0.11 name them alike)
SPLIT_KEYS = (
    "rollout.batch_size",
    "rollout.micro_batch_size",
    "train.batch_size",
    "train.micro_batch_size",
    "actor.num_nodes",
    "actor.num_gpus_per_node",
    "train.max_epochs",
    "train.dynamic_batch_enable",
    "train.max_tokens_per_gpu",
    "rollout.max_tokens_per_gpu",
    "ds.ring_attn_size",
    "ds.tensor_parallel_size",
)
#: the split the step audit runs when the user set none of :data:`SPLIT_KEYS`: 4 prompts a generation
#: batch, 8 answers an optimizer step on 2 ranks of 2 micro-batches of 2 answers (accumulation and ranks)
DEFAULT_SPLIT = (
    ("rollout.batch_size", "4"),
    ("rollout.micro_batch_size", "2"),
    ("train.batch_size", "8"),
    ("train.micro_batch_size", "2"),
    ("actor.num_nodes", "1"),
    ("actor.num_gpus_per_node", "2"),
)
#: the numeric options of the split (with the group size): each must be at least 1 (None: unset, where allowed)
SPLIT_NUMBERS = (
    "rollout.n_samples_per_prompt",
    *(k for k in SPLIT_KEYS if k != "train.dynamic_batch_enable"),
)
#: the unsplit layout: one optimizer step of the split layout, its ``rows`` answers in one micro-batch on one rank
UNSPLIT = (
    ("train.batch_size", "{rows}"),
    ("train.micro_batch_size", "{rows}"),
    ("actor.num_nodes", "1"),
    ("actor.num_gpus_per_node", "1"),
    ("train.dynamic_batch_enable", "false"),
)
#: how many values of a setting the search for one that fixes an impossible split tries (nearest first)
FIX_SEARCH = 256


def import_check() -> None:
    """Import what the driver needs and parse a default command line (a release environment's smoke test)."""
    fn = build(FrameworkSpec("openrlhf", sets=(("algo.advantage.estimator", "group_norm"),)), "advantage")
    fn(np.array([1.0, 0.0]), 2)
    importlib.import_module("grpo_identity.checks.calls.target")


def _value(args: Any, key: str) -> Any:
    """The parsed value of a dotted option (``train.batch_size``)."""
    return functools.reduce(getattr, key.split("."), args)


GAE = (
    "OpenRLHF {release}: algo.advantage.estimator=gae needs a critic's values; the driver audits the critic-free "
    "estimators (reinforce, rloo, reinforce_baseline, group_norm, dr_grpo …)"
)


def cli_args(
    spec: FrameworkSpec,
    group_size: int,
    driver_sets: tuple[tuple[str, str], ...] = DRIVER_SETS,
    check: Callable[[Any], None] | None = None,
) -> Any:
    """The config ``train_ppo_ray``'s own parser and checks build from ``spec`` (``driver_sets``, the user's, then
    ``--rollout.n_samples_per_prompt group_size``; :func:`~grpo_identity.checks.frameworks.exported.openrlhf.
    parse_command_line`); ``check`` sees the parsed namespace first."""
    if spec.config:
        raise AdapterError(f"OpenRLHF {release()}: train_ppo_ray takes no config file; give its options with --set")
    sets = [*driver_sets, *spec.sets, ("rollout.n_samples_per_prompt", str(int(group_size)))]
    return parse_command_line(sets, check, spec.describe())


class _Configs:
    """The parsed config per group size (OpenRLHF checks the group size when it parses), and the
    configs of the step's two layouts."""

    def __init__(self, spec: FrameworkSpec) -> None:
        self.spec = spec
        self.by_g: dict[Any, Any] = {}
        named = [v.strip().lower() for k, v in spec.sets if k.lstrip("-") == "algo.advantage.estimator"]
        if not named:
            raise AdapterError(
                f"OpenRLHF {release()}: set the estimator (--set algo.advantage.estimator=group_norm, dr_grpo, "
                "rloo, reinforce_baseline, reinforce …); its default, gae, needs a critic"
            )
        if named[-1] == "gae":  # the CLI wants a reward model for gae
            raise AdapterError(GAE.format(release=release()))
        keys = [k.lstrip("-") for k, _ in spec.sets]
        self.user_split = [k for k in SPLIT_KEYS if k in keys]
        sizes = [int(v) for k, v in spec.sets if k.lstrip("-") == "rollout.n_samples_per_prompt"]
        self.group_size = sizes[-1] if sizes else STEP_GROUP_SIZE

    def get(self, G: int) -> Any:
        if G not in self.by_g:
            self.by_g[G] = cli_args(self.spec, G)
            if self.by_g[G].algo.advantage.estimator == "gae":
                raise AdapterError(GAE.format(release=release()))
        return self.by_g[G]

    def step(self, G: int, layout: str, rows: int = 0) -> Any:
        """The config of a step layout: ``split``, the user's split settings (:data:`DEFAULT_SPLIT`
        where they set none), checked by :func:`check_split`; ``unsplit``, the same with ``rows``
        answers in one micro-batch on one rank (:data:`UNSPLIT`)."""
        key = (G, layout, rows if layout == "unsplit" else 0)
        if key not in self.by_g:
            base = () if self.user_split else DEFAULT_SPLIT
            spec = self.spec
            if layout == "unsplit":
                spec = replace(spec, sets=(*spec.sets, *((k, v.format(rows=rows)) for k, v in UNSPLIT)))
            self.by_g[key] = cli_args(spec, G, driver_sets=base, check=check_split if layout == "split" else None)
        return self.by_g[key]


def build(spec: FrameworkSpec, level: str) -> OpenRLHFTarget:
    """The target of ``spec`` at ``level`` (:mod:`.contract`)."""
    return OpenRLHFTarget(spec, level)


class OpenRLHFTarget(Built):
    """OpenRLHF's experience maker from ``spec``'s options.  Advantages: ``RemoteExperienceMaker
    .compute_advantages_and_returns``.  Gradient: −∂loss/∂log π per response token (autograd through the actor's
    ``PolicyLoss`` as ``ActorPPOTrainer`` builds it), rows in the caller's order.  A step request
    (:mod:`grpo_identity.checks.measure.steps`): the optimizer steps ``ActorPPOTrainer.ppo_train`` makes of the rows
    (:func:`_run_step`), with ``step``, ``rank`` and ``micro_batch`` per row."""

    def __init__(self, spec: FrameworkSpec, level: str) -> None:
        self.configs = configs = _Configs(spec)
        # the split first: settings OpenRLHF cannot run are an AdapterError naming a value that runs (check_split)
        unavailable = _unreproducible(configs.step(configs.group_size, "split")) if level == "gradient" else None
        args = configs.get(2)
        info = _info(spec, args, "RemoteExperienceMaker.compute_advantages_and_returns")
        if level == "gradient":
            info = self._loss(info, args, unavailable)
        super().__init__(info, level)

    def _loss(self, info: DriverInfo, args: Any, unavailable: str | None) -> DriverInfo:
        configs = self.configs
        self.mods = openrlhf_modules()
        DIFFERENCES["policy_loss"].require(f"OpenRLHF {release()}")
        # present() finds the module without importing it; openrlhf.utils itself is imported above, under the stand-ins
        self.loss_utils = module_named("openrlhf.utils.loss_utils") if DIFFERENCES["loss_utils"].present() else None
        self.loss_fns: dict[int, Any] = {}
        details = {
            **info.details,
            "loss_agg_mode": str(getattr(args.actor, "loss_agg_mode", "token-mean (no actor.loss_agg_mode here)")),
            "policy_loss_type": str(args.actor.policy_loss_type),
        }
        changes: dict[str, Any] = {
            "entry": "compute_advantages_and_returns + ActorPPOTrainer.actor_loss_fn (models.loss.PolicyLoss)",
            "details": details,
            "stand_ins": tuple(sorted(LOADED["stand_ins"])),  # loss_utils' import may have added some
            "lengths_optional": True,
        }
        self.correction = correction_settings(args)
        if self.correction:
            changes["rollout_correction"] = {k: v for k, v in self.correction.items() if k != "off"}
        if unavailable:  # a split the driver cannot reproduce: the per-G probes still run
            return replace(info.with_step_defaults(_step_chosen(configs)), step_unavailable=unavailable, **changes)
        return info.with_step(step_plan(configs), **changes)

    def advantages(self, rewards: np.ndarray, G: int, scores: Any = None) -> np.ndarray:
        args = self.configs.get(G)
        rewards = np.asarray(rewards, dtype=np.float64)
        exps = experiences_of(experience_maker(args), rewards, lengths_for(len(rewards)))
        return per_response(exps, len(rewards), args.algo.advantage.estimator)

    def step(self, rewards: np.ndarray, G: int, lengths: np.ndarray, request: dict[str, Any]) -> dict[str, Any]:
        return _run_step(self.configs, rewards, G, np.asarray(lengths, dtype=int), request)

    def gradient(self, rewards: np.ndarray, G: int, lengths: np.ndarray) -> dict[str, Any]:
        out = self._policy_loss(rewards, G, lengths, None)
        return {k: out[k] for k in ("advantages", "coefficients", "mask")}

    def three_policy(self, rewards: np.ndarray, G: int, lengths: np.ndarray, rollout: dict[str, Any]) -> dict[str, Any]:
        if not self.correction:
            raise NotImplementedError("OpenRLHF: this config turns no rollout correction on")
        return self._policy_loss(rewards, G, lengths, rollout)

    def _policy_loss(self, rewards: np.ndarray, G: int, lengths: np.ndarray, rollout: dict[str, Any] | None
                     ) -> dict[str, Any]:  # fmt: skip
        """The whole batch as one training micro-batch through the actor's ``PolicyLoss``, on-policy.  ``rollout``
        None: log π = −1 on every token, vLLM's log-probabilities equal to it where the correction is on; else the
        seeded log π_old per token and log μ = log π_old − X (None: no log-probabilities), the correction on or
        switched off (rows in the caller's order, RESPONSE_LENGTH wide, with ``old_logps``)."""
        import torch

        from grpo_identity.checks.measure.rollout import seeded_old_logps

        args = self.configs.get(G)
        rewards = np.asarray(rewards, dtype=np.float64)
        n = len(rewards)
        exps = experiences_of(experience_maker(args), rewards, np.asarray(lengths, dtype=int))
        adv = per_response(exps, n, args.algo.advantage.estimator)
        Experience = self.mods["openrlhf.trainer.ppo_utils.experience"].Experience
        batch = Experience.concat_experiences(exps, 0)  # the whole batch as one training micro-batch (one step)
        mask, order = batch.action_mask, np.asarray(batch.index)
        width = mask.shape[1] if rollout is None else RESPONSE_LENGTH
        if rollout is None:
            old, x, correct = torch.full(mask.shape, -1.0), np.zeros((n, width)), True
        else:
            seeded = seeded_old_logps((n, RESPONSE_LENGTH))[order][:, : mask.shape[1]]
            old, x, correct = (
                torch.as_tensor(seeded, dtype=torch.float32) * mask,
                rollout["log_ratio"],
                rollout["correct"],
            )
        engine = None  # vLLM's log π per token, X exactly 0 off the answer (a NaN there poisons a sequence mean)
        if self.correction and x is not None:
            engine = old - torch.as_tensor(np.asarray(x, dtype=np.float64)[order][:, : mask.shape[1]]).float() * mask
        log_prob = old.clone().requires_grad_(True)
        utils = self.loss_utils
        info = utils.get_loss_batch_info(SimpleNamespace(), mask) if utils is not None else {}
        if G not in self.loss_fns:
            self.loss_fns[G] = actor_trainer(args, Engine(args, 0, 1, Ledger(0)), Policy(0)).actor_loss_fn
        fn = self.loss_fns[G]
        off = [] if correct or not self.correction else [(fn, *self.correction["off"])]
        with patched_attributes(off):
            loss, *_ = fn(log_prob, old, batch.advantages, action_mask=mask, rollout_log_probs=engine, **info)
        (grad,) = torch.autograd.grad(loss, log_prob)
        coeff, m, logps = (np.zeros((n, width)) for _ in range(3))
        cols = slice(0, mask.shape[1])
        coeff[order, cols], m[order, cols] = -grad.double().numpy(), mask.double().numpy()
        logps[order, cols] = old.double().numpy()
        return {"advantages": adv, "coefficients": coeff, "mask": m, "old_logps": logps}


def _info(spec: FrameworkSpec, args: Any, entry: str) -> DriverInfo:
    adv = args.algo.advantage
    details = {
        "estimator": str(adv.estimator),
        "no_std_norm": bool(adv.no_std_norm),
        "gamma": float(adv.gamma),
        "kl_init_coef": float(args.algo.kl.init_coef),
        "reward_clip_range": list(args.reward.clip_range),
        "micro_batch_size": int(args.rollout.micro_batch_size),
    }
    user = {k.lstrip("-") for k, _ in spec.sets}
    settings = DriverSettings(
        defaults={k: v for k, v in DRIVER_SETS if k not in user},
        note="rollout.n_samples_per_prompt set by each probe (2, 3, 4, 8 …), last",
    )
    return DriverInfo(
        "openrlhf",
        release(),
        entry,
        dict(spec.sets),
        settings,
        stand_ins=tuple(sorted(LOADED["stand_ins"])),
        details=details,
    )


# --- the optimizer step: ActorPPOTrainer.ppo_train on rank processes, DeepSpeed stood in -----------------
def _unreproducible(args: Any) -> str | None:
    """Why the driver cannot run this (valid) split, or None."""
    ring, tp = int(args.ds.ring_attn_size), int(args.ds.tensor_parallel_size)
    if ring * tp == 1:
        return None
    return (
        f"OpenRLHF {release()}: ds.ring_attn_size={ring}, ds.tensor_parallel_size={tp}: the driver runs data-parallel "
        "ranks only (ring attention and tensor parallelism split one sequence over GPUs)"
    )


def check_split(args: Any) -> None:
    """Refuse, as an AdapterError naming the setting and a value that runs, split settings OpenRLHF
    cannot run (:func:`split_problem`), the values as ``train_ppo_ray`` parsed them."""
    values = {key: _value(args, key) for key in SPLIT_NUMBERS}
    dynamic = bool(args.train.dynamic_batch_enable)
    found = split_problem(values, dynamic)
    if found is None:
        return
    key, why = found
    fix = _fixing(values, dynamic, key)
    hint = f"; --set {key}={fix} would run" if fix is not None else ""
    raise AdapterError(f"OpenRLHF {release()}: {why}{hint}")


def split_problem(values: dict[str, Any], dynamic: bool) -> tuple[str, str] | None:
    """The first rule the split settings ``values`` break, as (the setting to change, why), or None:
    each number ≥ 1; the device mesh (``DeepspeedStrategy.setup_distributed``: ranks in whole ring ×
    tensor-parallel groups); ``train_ppo_ray``'s own check (at least one rollout micro-batch per
    data-parallel rank); DeepSpeed's batch check (``DeepSpeedConfig._batch_assertion``: ``train_batch_size``
    = micro-batch × accumulation steps × ranks, ``get_ds_train_config`` leaves it out under dynamic
    batching); under dynamic batching, ``NaiveReplayBuffer.setup_dynamic_batch``'s per-rank batch
    (``train.batch_size // ranks``, which it divides by); else every rank as many micro-batches (each
    micro-batch's metrics are all-reduced: a rank with fewer would leave the others waiting)."""
    for key in SPLIT_NUMBERS:
        if values[key] is not None and int(values[key]) < 1:
            return key, f"{key}={values[key]} must be at least 1"
    v = {k: int(x) for k, x in values.items() if x is not None}
    world = v["actor.num_nodes"] * v["actor.num_gpus_per_node"]
    parallel = v["ds.ring_attn_size"] * v["ds.tensor_parallel_size"]
    dp, rows = world // parallel, v["rollout.batch_size"] * v["rollout.n_samples_per_prompt"]
    if world % parallel:
        return "actor.num_gpus_per_node", (
            f"{world} GPUs do not make whole groups of ds.ring_attn_size × ds.tensor_parallel_size = {parallel}"
        )
    if rows // v["rollout.micro_batch_size"] < dp:
        key = "rollout.micro_batch_size" if rows >= dp else "rollout.batch_size"
        return key, (
            f"train_ppo_ray refuses {rows} answers a generation batch in rollout.micro_batch_size="
            f"{v['rollout.micro_batch_size']} chunks over {dp} data-parallel ranks (fewer chunks than ranks)"
        )
    batch, micro = v["train.batch_size"] * parallel, v["train.micro_batch_size"]
    if not dynamic and (batch % (micro * world) or batch < micro * world):
        return "train.batch_size", (
            f"DeepSpeed refuses train.batch_size={v['train.batch_size']}: not train.micro_batch_size={micro} × "
            f"{world} GPUs × a whole number of accumulation steps"
        )
    if dynamic and v["train.batch_size"] < dp:
        return "train.batch_size", (
            f"under train.dynamic_batch_enable, setup_dynamic_batch divides by train.batch_size // {dp} ranks, "
            f"0 for train.batch_size={v['train.batch_size']}"
        )
    counts = [r // micro for r in _shares(rows, v["rollout.micro_batch_size"], dp)]
    if not dynamic and len(set(counts)) > 1:
        return "rollout.micro_batch_size", (
            f"the ranks get {counts} micro-batches of a generation batch (its {rows} answers in "
            f"rollout.micro_batch_size={v['rollout.micro_batch_size']} chunks as RayActorGroup.async_run_method_batch "
            "deals them, then "
            f"train.micro_batch_size={micro}): each micro-batch's all-reduce would leave the other ranks waiting"
        )
    return None


def _fixing(values: dict[str, Any], dynamic: bool, key: str) -> int | None:
    """The value of ``key`` nearest its own (the larger first at equal distance) under which
    :func:`split_problem` finds nothing, within :data:`FIX_SEARCH` tries; None if none does."""
    now = max(int(values[key]), 1)
    tries = sorted(range(1, now + FIX_SEARCH // 2), key=lambda x: (abs(x - now), -x))[:FIX_SEARCH]
    return next((x for x in tries if split_problem({**values, key: x}, dynamic) is None), None)


def _shares(rows: int, micro: int, dp: int) -> list[int]:
    """The answers each of ``dp`` ranks gets of a generation batch of ``rows`` answers cut into
    ``micro``-answer rollout micro-batches (``split_rollout_samples``), as ``RayActorGroup
    .async_run_method_batch`` deals the micro-batches out."""
    got = [0] * dp

    def call(rank: int) -> Callable[..., Any]:
        def remote(method: str, data: Any, start: int, end: int) -> None:
            got[rank] += sum(data["experience"][start:end])

        return remote

    sizes = [min(micro, rows - first) for first in range(0, rows, micro)]
    with patched_attributes([(openrlhf_modules()["ray"], "put", lambda data: data)]):
        actor_group([call(r) for r in range(dp)]).async_run_method_batch(method_name="append", experience=sizes)
    return got


def step_plan(configs: _Configs) -> StepPlan:
    """The configured step (:class:`~grpo_identity.checks.frameworks.contract.StepPlan`): G (the user's
    ``rollout.n_samples_per_prompt``, else :data:`~grpo_identity.checks.frameworks.STEP_GROUP_SIZE`),
    ``train.batch_size`` answers per optimizer step, ``rollout.batch_size`` × G per generation batch; the split
    settings in force; what of the split is stood in, said once in the split layout's words."""
    G = configs.group_size
    args = configs.step(G, "split")
    dp, ga = rank_counts(args)
    dynamic = bool(args.train.dynamic_batch_enable)
    settings: dict[str, Any] = {key: _value(args, key) for key in SPLIT_KEYS}
    settings.update(
        {
            "split": "as set: " + ", ".join(configs.user_split)
            if configs.user_split
            else "the driver's default (no split setting given): " + ", ".join(f"{k}={v}" for k, v in DEFAULT_SPLIT),
            "data_parallel_ranks": dp,
            "gradient_accumulation_steps": 1 if dynamic else ga,
            "train.max_epochs audited": "the first epoch (each epoch repeats the split, reshuffled)",
        }
    )
    cut = (
        f"micro-batches by token budget (train.max_tokens_per_gpu={args.train.max_tokens_per_gpu})"
        if dynamic
        else f"{ga} accumulated micro-batch{'es' if ga > 1 else ''} of train.micro_batch_size="
        f"{args.train.micro_batch_size} a step"
    )
    ranks = (
        f"{dp} data-parallel ranks, each a process of one gloo group (OpenRLHF's all-reduces are torch's own)"
        if dp > 1
        else "one rank"
    )
    return StepPlan(
        G,
        int(args.train.batch_size),
        int(args.rollout.batch_size) * G,
        split=f"ActorPPOTrainer.ppo_train, {cut}; a stand-in for DeepSpeed's engine (backward ÷ accumulation "
        f"steps, a step at the boundary); {ranks}",
        unsplit="the split's optimizer steps, each as one micro-batch on one rank (train.batch_size = "
        "train.micro_batch_size = the step's answers); answers the split leaves out, one step per generation batch",
        settings=settings,
        ranks=dp,
        chosen=_step_chosen(configs),
        objective=objective(args),
        holes=True,
        truncation=True,
        export=export_recipe(configs),
    )


def _step_chosen(configs: _Configs) -> dict[str, Any]:
    """The step's split settings the user did not set, with the driver's values: :data:`DEFAULT_SPLIT` where they set
    none of :data:`SPLIT_KEYS`, and the group size."""
    chosen: dict[str, Any] = {} if configs.user_split else dict(DEFAULT_SPLIT)
    if not any(k.lstrip("-") == "rollout.n_samples_per_prompt" for k, _ in configs.spec.sets):
        chosen["rollout.n_samples_per_prompt"] = configs.group_size
    return chosen


def export_recipe(configs: _Configs) -> dict[str, Any]:
    """What an exported test (:mod:`grpo_identity.checks.export`) needs to run the split layout's steps itself
    (:func:`grpo_identity.checks.frameworks.exported.openrlhf.first_step_rows`): the command line's ``--set``
    pairs as the split layout parses them (no secret), the ranks, the release."""
    from grpo_identity.checks.frameworks import is_secret

    G = configs.group_size
    base = () if configs.user_split else DEFAULT_SPLIT
    sets = [*base, *configs.spec.sets, ("rollout.n_samples_per_prompt", str(G))]
    return {
        "sets": [[k, v] for k, v in sets if not is_secret(k)],
        "processes": rank_counts(configs.step(G, "split"))[0],
        "release": release(),
    }


def objective(args: Any) -> dict[str, Any] | None:
    """The documented objective of the configured aggregation (``actor.loss_agg_mode``, from 0.11; GSPO runs in
    sequence mode); None for releases that document none (0.10 aggregates per micro-batch, undocumented)."""
    from grpo_identity.objectives import objective_of

    if str(getattr(args.actor, "policy_loss_type", "ppo")) == "gspo":
        setting, value = "actor.policy_loss_type", "gspo"
    elif getattr(args.actor, "loss_agg_mode", None) is not None:
        setting, value = "actor.loss_agg_mode", str(args.actor.loss_agg_mode)
    else:
        return None
    found = objective_of("openrlhf", setting, value)
    return None if found is None else found.for_step()


def _run_step(
    configs: _Configs, rewards: np.ndarray, G: int, lengths: np.ndarray, request: dict[str, Any]
) -> dict[str, np.ndarray]:
    """The rows through OpenRLHF's step path, one generation batch (``rollout.batch_size`` × G rows)
    after another (:func:`generation_batches`), split as configured (:func:`train_split`); for the
    unsplit layout, the optimizer steps the split made of them, each again as one micro-batch on one
    rank (:func:`_train_unsplit`).  Coefficients: −∂/∂log π of the accumulated loss, averaged over
    the ranks; a row no micro-batch held has step −1 and zero coefficients."""

    rewards = np.asarray(rewards, dtype=np.float64)
    n = len(rewards)
    if any(int(size) != G for size in request.get("sizes") or [G]):
        raise AdapterError(f"OpenRLHF {release()} delivers whole groups of rollout.n_samples_per_prompt answers")
    marks = {
        "holes": np.asarray(request.get("holes") or [0] * n, dtype=int),
        "truncated": np.asarray(request.get("truncated") or [False] * n, dtype=bool),
    }
    args = configs.step(G, "split")
    batches = generation_batches(args, rewards, lengths, marks)
    ledger, policy = train_split(args, batches, n, _on_rank_processes)
    dp = rank_counts(args)[0]
    if request["layout"] == "unsplit":
        generation = np.arange(n) // (int(args.rollout.batch_size) * G)
        steps = _unsplit_steps(ledger.step, generation)
        batches = generation_batches(args, rewards, lengths, marks)  # fresh experiences for the second run
        (ledger, policy), dp = _train_unsplit(configs, G, batches, steps), 1
    mask = np.arange(RESPONSE_LENGTH)[None, :] < lengths[:, None]
    for i, h in enumerate(marks["holes"]):
        mask[i, 1 : 1 + h] = False
    return {
        "advantages": np.concatenate([adv for _, _, adv, _ in batches]),
        "coefficients": -policy.gradient() / dp,
        "mask": mask.astype(np.float64),
        "step": ledger.step,
        "rank": ledger.rank,
        "micro_batch": ledger.micro,
    }


def _unsplit_steps(split: np.ndarray, generation: np.ndarray) -> np.ndarray:
    """The unsplit layout's optimizer step per row: the split's, and for the rows the split left out
    (step −1), one more step per generation batch after the split's last."""
    steps = split.copy()
    after = int(split.max()) + 1 if (split >= 0).any() else 0
    for k, g in enumerate(np.unique(generation[split < 0])):
        steps[(split < 0) & (generation == g)] = after + k
    return steps


def _train_unsplit(configs: _Configs, G: int, batches: list[Batch], steps: np.ndarray) -> tuple[Ledger, Policy]:
    """(ledger, policy) of the unsplit layout: each optimizer step's rows (``steps``) in one rank's
    replay buffer (``NaiveReplayBuffer.append`` of their rollout micro-batches, the step's rows kept),
    trained by ``ppo_train`` under :data:`UNSPLIT` (one micro-batch of all of them, one rank)."""
    ledger, policy = Ledger(len(steps)), Policy(len(steps))
    for s in np.unique(steps[steps >= 0]):
        rows = set(np.flatnonzero(steps == s).tolist())
        args = configs.step(G, "unsplit", len(rows))
        engine = Engine(args, 0, 1, ledger)
        engine.steps = int(s)
        trainer = actor_trainer(args, engine, policy)
        buffer = trainer.replay_buffer
        for chunk, exps, _, _ in batches:
            if rows.intersection(range(chunk.start, chunk.stop)):
                for exp in exps:
                    buffer.append(exp)
        buffer.items[:] = [item for item in buffer.items if row_of(item)[0] in rows]
        _on_rank_processes([trainer], [engine], batches[0][3], int(s))
    return ledger, policy


def _on_rank_processes(trainers: list[Any], engines: list[Engine], kl_ctl: float, seed: int) -> None:
    """Each rank's ``ppo_train`` (:func:`~grpo_identity.checks.frameworks.exported.openrlhf.train_rank`) in a
    process of its own, all in one gloo group, so OpenRLHF's all-reduces (its loss normalisers', its replay
    buffer's, its strategy's) are torch's own over the ranks; each rank's ledger rows, gradients and engine
    counters are brought back."""
    policy, ledger = trainers[0].actor, engines[0].ledger

    def rank_pass(rank: int) -> dict[str, Any]:
        rows = train_rank(trainers[rank], kl_ctl, seed, rank)
        where = {key: getattr(ledger, key)[rows] for key in ("step", "rank", "micro")}
        grads = [policy.leaves[r].grad for r in rows]
        return {
            "rows": rows,
            "where": where,
            "grads": grads,
            "counters": (engines[rank].steps, engines[rank].micro_steps),
        }

    for engine, reply in zip(engines, ProcessRanks(len(engines)).run(rank_pass)):
        rows = np.asarray(reply["rows"], dtype=np.int64)
        for key, values in reply["where"].items():
            getattr(ledger, key)[rows] = values
        for row, grad in zip(reply["rows"], reply["grads"]):
            policy.leaves[row].grad = grad
        engine.steps, engine.micro_steps = reply["counters"]
