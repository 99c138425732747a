"""The frameworks the audit drives, one :class:`FrameworkEntry` each: the only place a framework is registered.

A row names the framework (and so its driver module, ``grpo_identity.checks.frameworks.NAME``), the release CI
installs and a bare audit falls back to, the adapter line of ``--help``, the config key a short form's bare word
sets, and what a release environment needs beyond the release's own requirements (:mod:`..releases` reads
:func:`pins_table` and :func:`no_deps_table`).  Standard library only.

>>> FRAMEWORK_TABLE["verl"].estimator_key
'algorithm.adv_estimator'
>>> FRAMEWORK_TABLE["trl"].driver
'grpo_identity.checks.frameworks.trl'
"""

from __future__ import annotations

from dataclasses import dataclass

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

    @property
    def driver(self) -> str:
        """The driver's module."""
        return f"grpo_identity.checks.frameworks.{self.name}"


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
)

#: name -> entry, in the order the docs and ``--help`` list them
FRAMEWORK_TABLE: dict[str, FrameworkEntry] = {e.name: e for e in (_TRL, _VERL, _AREAL, _OPENRLHF)}


def pins_table() -> dict[tuple[str, str, str], tuple[str, ...]]:
    """(framework, first release, first release no longer needing them) -> extra requirements, of every entry."""
    return {(e.name, lo, hi): reqs for e in FRAMEWORK_TABLE.values() for lo, hi, reqs in e.pins}


def no_deps_table() -> dict[tuple[str, str, str], tuple[str, ...]]:
    """(framework, first release, first release no longer needing them) -> the packages installed with
    ``--no-deps`` beside the release, of every entry."""
    return {(e.name, lo, hi): pkgs for e in FRAMEWORK_TABLE.values() for lo, hi, pkgs in e.no_deps}
