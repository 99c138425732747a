"""The frameworks the audit drives, one :class:`FrameworkEntry` each: the only place a framework is registered.

A row names the framework (and so its driver module, ``grpo_identity.checks.frameworks.NAME``), the release CI
installs and a bare audit falls back to, the adapter line of ``--help``, the config key a short form's bare word
sets, and what a release environment needs beyond the release's own requirements
(:mod:`~grpo_identity.checks.calls.releases` reads :func:`pins_table` and :func:`no_deps_table`).  Standard library
only.

>>> FRAMEWORK_TABLE["verl"].estimator_key
'algorithm.adv_estimator'
>>> FRAMEWORK_TABLE["trl"].driver
'grpo_identity.checks.frameworks.trl'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

__all__ = ["FrameworkEntry", "FRAMEWORK_TABLE", "pins_table", "no_deps_table"]

#: (first release, first release no longer needing them, requirements)
Pins = tuple[tuple[str, str, tuple[str, ...]], ...]


@dataclass(frozen=True)
class FrameworkEntry:
    """One framework: its name, its tested release, its adapter forms and what its release environments need."""

    name: str
    tested: str
    """The release the lock installs (``make setup``) and a bare ``audit NAME`` falls back to where none is."""
    summary: str
    """The adapter's line in ``--help`` and the docs."""
    estimator_key: str | None = None
    """The config key a bare word of the short form sets (``verl:rloo``), or None where the short form has none."""
    forms: tuple[tuple[str, str], ...] = ()
    """Further adapter forms of this framework, (form, line), e.g. verl's estimator function alone."""
    pins: Pins = ()
    """Extra requirements of a release environment, by release range (installed with their dependencies)."""
    no_deps: Pins = ()
    """Packages installed with ``--no-deps`` beside the release, which then goes in with ``--no-deps`` too: for
    frameworks whose declared requirements cannot install here (a CUDA stack, another torch); what they do need
    is then in :attr:`pins`."""
    settings: Mapping[str, Mapping[str, str]] = field(default_factory=dict, hash=False, compare=False)
    """The setting that gives each per-sample weight law (``per_sample_weight``), each preset (``preset``) and a
    split-invariant step (``split``): what a report suggests (:func:`~grpo_identity.checks.frameworks.setting_for`)."""
    verify: tuple[tuple[str, str], ...] = ()
    """(target, expected preset) that ``grpo-identity verify`` audits where the framework is installed."""
    first: tuple[str, str] | None = None
    """The oldest release the driver audits at any level, and why (what older ones lack); None where no floor is
    known.  An older ``--release`` is refused before its environment is made; the driver's own table of release
    differences reads it for what it requires first."""

    @property
    def driver(self) -> str:
        """The driver's module."""
        return f"grpo_identity.checks.frameworks.{self.name.replace('-', '_')}"


_TRL = FrameworkEntry(
    "trl",
    "1.16.0",
    "TRL's GRPOTrainer from a GRPOConfig (--set scale_rewards=none, --set loss_type=dr_grpo …; short form "
    "trl:scale_rewards=none)",
    pins=(
        # TRL 0.x imports trl/extras/vllm_client.py, which wants vllm under transformers 5; releases before 0.17
        # run under the transformers of their time (4.56's Trainer calls _get_train_sampler(dataset), which
        # 0.16's override does not take)
        ("0.0", "0.17", ("transformers>=4.50,<4.52",)),
        ("0.17", "0.23", ("transformers>=4.56.1,<4.57",)),
        ("0.23", "1.0", ("transformers<5",)),
    ),
    settings={
        "per_sample_weight": {
            "constant": "loss_type=dr_grpo",
            "1/length": "loss_type=grpo",
            "1/step_tokens": "loss_type=bnpo (or dapo)",
        },
        "preset": {"dr_grpo": "scale_rewards=none", "trl": "scale_rewards=group"},
        "split": {
            "1/micro_batch_tokens": "loss_type=dapo (normalised by the generation batch's gathered token count), "
            "dr_grpo or grpo: bnpo and 0.16's single loss divide each micro-batch by its own tokens",
            "1/rank_tokens": "loss_type=dapo (the token count gathered over the ranks), dr_grpo or grpo",
            "1/generation_tokens": "steps_per_generation a multiple of gradient_accumulation_steps (no optimizer step "
            "across two generation batches)",
        },
    },
    verify=(("trl", "grpo"),),
    first=("0.16.0", "the first with GRPOTrainer._generate_and_score_completions, which the driver runs"),
)
_VERL = FrameworkEntry(
    "verl",
    "0.9.1",
    "verl's trainer dispatch from its config (--set algorithm.adv_estimator=grpo …; short form "
    "verl:grpo:norm_adv_by_std_in_grpo=false)",
    estimator_key="algorithm.adv_estimator",
    forms=(
        (
            "verl:estimator=NAME",
            "verl's core_algos estimator function alone, e.g. verl:estimator=grpo_vectorized (bypasses the trainer)",
        ),
    ),
    pins=(
        # verl before 0.8 imports transformers names that 5.x removed (AutoModelForVision2Seq), and
        # pins numpy < 2, which the newest pyarrow (and the datasets built on it) no longer import with
        ("0.0", "0.8", ("transformers<5", "pyarrow<21", "datasets<4")),
        # the trainer module (ray_trainer) imports these beyond verl's declared requirements
        ("0.0", "99", ("cachetools", "uvicorn", "fastapi", "pillow", "torchdata")),
        # verl declares datasets unbounded: as of 0.9.1's day uv's resolver backtracked to datasets 1.1.1 (2020),
        # whose features module needs pyarrow.PyExtensionType, gone from the pyarrow >= 19 verl requires
        ("0.8", "99", ("datasets>=3",)),
    ),
    settings={
        "per_sample_weight": {
            "constant": "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum",
            "1/length": "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
            "1/step_tokens": "actor_rollout_ref.actor.loss_agg_mode=token-mean",
        },
        "preset": {
            "dr_grpo": "algorithm.adv_estimator=grpo with algorithm.norm_adv_by_std_in_grpo=false",
            "verl": "algorithm.adv_estimator=grpo",
            "rloo": "algorithm.adv_estimator=rloo",
        },
        "split": {
            "invariant": "verl ≥ 0.8 (or trainer.use_legacy_worker_impl=disable on 0.7.x): the engine worker's "
            "token-mean counts the whole step's tokens; or actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum",
        },
    },
    verify=(("verl:grpo", "grpo"), ("verl:grpo_vectorized", "grpo")),
)
_AREAL = FrameworkEntry(
    "areal",
    "1.0.4",
    "AReaL's PPO actor (compute_advantages) from its config (--set actor.reward_norm.mean_level=group --set "
    "actor.adv_norm=null …)",
    pins=(
        # what ``import areal.trainer.ppo.actor`` / ``areal.api.cli_args`` needs (areal/__init__ imports
        # its whole infra: loggers, stats backends, the launcher), at AReaL's own pins where it has them; the
        # first ten are AReaL 1.0.4's declared requirements (its ranges), the rest what its modules import
        (
            "0.0",
            "99",
            (
                "transformers>=5.0.0,<=5.3.0",
                "datasets>=3.0.0",
                "peft<=0.18.1",
                "huggingface-hub",
                "torchdata",
                "pandas",
                "lark",
                "aiohttp>=3.13.3,<4",
                "ray",
                "wandb",
                "omegaconf==2.4.0.dev2",
                "hydra-core==1.4.0.dev1",
                "colorlog",
                "tenacity",
                "flask",
                "uvloop>=0.21.0",
                "numba",
                "einops",
                "aiofiles",
                "openai",
                "swanlab==0.6.12",
                "trackio",
                "tensorboardX",
                "tabulate",
                "pybase64",
            ),
        ),
    ),
    # AReaL declares torch<2.11 and ~80 requirements (agent SDKs, litellm, openhands, sglang's
    # stack); its advantage path needs only what its pins list
    no_deps=(("0.0", "99", ()),),
    settings={
        "preset": {
            "dr_grpo": "actor.reward_norm.mean_level=group with actor.reward_norm.std_level=null",
            "rloo": "actor.reward_norm.mean_level=group, actor.reward_norm.mean_leave1out=true, "
            "actor.reward_norm.std_level=null",
        },
    },
)
_OPENRLHF = FrameworkEntry(
    "openrlhf",
    "0.11.2",
    "OpenRLHF's experience maker from its train_ppo_ray options (--set algo.advantage.estimator=group_norm …; "
    "short form openrlhf:group_norm; --release 0.11.2)",
    estimator_key="algo.advantage.estimator",
    pins=(
        # OpenRLHF goes in with --no-deps (it requires flash-attn); what its experience maker and its
        # train_ppo_ray module import, at the versions 0.11.2 declares (ray without [default]: no dashboard)
        ("0.0", "99", ("ray", "deepspeed", "transformers", "peft", "pylatexenc", "aiohttp", "pillow")),
        ("0.10", "0.11", ("ray==2.48.0", "deepspeed==0.18.9", "transformers==5.5.4")),
        ("0.11", "0.12", ("ray==2.55.0", "deepspeed==0.19.6", "transformers==5.15.0")),
    ),
    # OpenRLHF declares flash-attn==2.8.3 (CUDA only) and vllm in extras; torchdata's own
    # requirements would resolve torch again
    no_deps=(("0.0", "99", ("torchdata",)),),
    settings={
        "per_sample_weight": {
            "1/length": "actor.loss_agg_mode=seq-mean-token-mean",
            "1/step_tokens": "actor.loss_agg_mode=token-mean",
        },
        "preset": {
            "dr_grpo": "algo.advantage.estimator=dr_grpo (and a reward.clip_range beyond your rewards)",
            "rloo": "algo.advantage.estimator=rloo (and a reward.clip_range beyond your rewards)",
        },
    },
)

_SKYRL = FrameworkEntry(
    "skyrl",
    "0.3.0",
    "SkyRL's trainer and policy worker from its config (--set trainer.algorithm.advantage_estimator=grpo --set "
    "trainer.algorithm.loss_reduction=token_mean …; short form skyrl:grpo; --release 0.3.0)",
    estimator_key="trainer.algorithm.advantage_estimator",
    pins=(
        # skyrl goes in with --no-deps: its skyrl-train extra (what the trainer imports) requires flash-attn on
        # Linux; these are that extra's CPU parts the trainer and the policy worker import, at its pins
        (
            "0.0",
            "99",
            ("loguru", "jaxtyping", "omegaconf", "hydra-core==1.3.2", "tensordict", "tqdm", "peft", "datasets>=4.0.0")
            + ("safetensors", "tokenizers", "typer", "rich", "cloudpathlib", "pillow", "pydantic", "aiohttp")
            + ("fastapi", "uvicorn"),
        ),
        ("0.1", "0.2", ("transformers>=4.56.1,<5", "ray==2.51.1", "skyrl-gym==0.2.0")),
        ("0.2", "0.3", ("transformers>=5.0,<=5.3.0", "ray==2.51.1", "skyrl-gym==0.3.0")),
        ("0.3", "0.4", ("transformers>=5.6.1,<=5.8.0", "ray==2.56.0", "skyrl-gym==0.4.0")),
    ),
    # torchdata's own requirements would resolve torch again
    no_deps=(("0.0", "99", ("torchdata",)),),
    settings={
        "per_sample_weight": {
            "constant": "trainer.algorithm.loss_reduction=seq_mean_token_sum_norm",
            "1/length": "trainer.algorithm.loss_reduction=sequence_mean",
            "1/step_tokens": "trainer.algorithm.loss_reduction=token_mean",
            "1/group_tokens": "trainer.algorithm.loss_reduction=prompt_mean (0.3.0 on)",
        },
        "preset": {
            "dr_grpo": "trainer.algorithm.advantage_estimator=grpo with trainer.algorithm.grpo_norm_by_std=false",
            "rloo": "trainer.algorithm.advantage_estimator=rloo",
        },
        "split": {
            "invariant": "skyrl ≥ 0.2.0 with trainer.algorithm.loss_reduction=token_mean (token_mean_legacy, and "
            "token_mean before 0.2.0, average the micro-batches' token means)",
        },
    },
)

_SWIFT = FrameworkEntry(
    "ms-swift",
    "4.6.0",
    "ms-swift's GRPOTrainer from its swift rlhf arguments (--set loss_type=dapo --set gradient_accumulation_steps=2 "
    "…; short form ms-swift:rloo; --release 4.6.0)",
    estimator_key="advantage_estimator",
    pins=(
        # ms-swift goes in with --no-deps: its declared requirements (about 40, gradio and tensorboard among them)
        # allow a trl older than its GRPOConfig accepts (it requires trl>=0.26 at run time); these are what its
        # GRPO trainer imports (msgspec is imported, and undeclared, in every 4.x release)
        (
            "4.4",
            "99",
            ("trl>=0.26,<1.0", "peft>=0.11,<0.21", "accelerate", "modelscope>=1.23", "pillow", "json-repair")
            + ("einops", "dacite", "msgspec", "pyyaml", "pydantic"),
        ),
        ("4.4", "4.6", ("transformers>=4.56.2,<5.17", "datasets>=3.0,<4.8.5")),
        ("4.6", "99", ("transformers>=4.56.2,<5.20", "datasets>=4.0,<4.8.5")),
    ),
    no_deps=(("4.4", "99", ()),),
    settings={
        "per_sample_weight": {
            "constant": "loss_type=dr_grpo",
            "1/length": "loss_type=grpo",
            "1/step_tokens": "loss_type=dapo (or cispo)",
        },
        "split": {
            "1/micro_batch_tokens": "loss_type=dapo with steps_per_generation = gradient_accumulation_steps (the "
            "default: dapo divides by the generation batch's gathered token count), dr_grpo or grpo: bnpo divides "
            "each micro-batch by its own tokens",
            "1/accumulation": "ms-swift ≥ 4.6.0 (dapo, cispo and fipo were divided by gradient_accumulation_steps "
            "twice before it: issue #10117)",
        },
    },
)

#: name -> entry, in the order the docs and ``--help`` list them
FRAMEWORK_TABLE: dict[str, FrameworkEntry] = {e.name: e for e in (_TRL, _VERL, _AREAL, _OPENRLHF, _SKYRL, _SWIFT)}


def pins_table() -> dict[tuple[str, str, str], tuple[str, ...]]:
    """(framework, first release, first release no longer needing them) -> extra requirements, of every entry (rows
    of one range together)."""
    return _by_range("pins")


def no_deps_table() -> dict[tuple[str, str, str], tuple[str, ...]]:
    """(framework, first release, first release no longer needing them) -> the packages installed with
    ``--no-deps`` beside the release, of every entry."""
    return _by_range("no_deps")


def _by_range(field: str) -> dict[tuple[str, str, str], tuple[str, ...]]:
    """Each entry's rows of ``field`` keyed by (framework, range); two rows of one range add up, never replace."""
    out: dict[tuple[str, str, str], tuple[str, ...]] = {}
    for e in FRAMEWORK_TABLE.values():
        for lo, hi, reqs in getattr(e, field):
            out[(e.name, lo, hi)] = out.get((e.name, lo, hi), ()) + tuple(reqs)
    return out


def release_key(release: str) -> tuple[int, ...]:
    """A release's number as a tuple to compare, equal across spellings of one release (``"0.22.2"`` → (0, 22, 2);
    ``"0.16"`` and ``"0.16.0"`` → (0, 16): trailing zeros dropped; a part's digits only: ``1rc1`` → 11)."""
    out = []
    for part in release.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    while out and out[-1] == 0:
        out.pop()
    return tuple(out)
