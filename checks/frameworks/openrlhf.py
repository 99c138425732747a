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
- step (a request of :mod:`grpo_identity.checks.steps`): the rows one generation batch
  (``rollout.batch_size`` × G answers) after another through the experience maker, then into the
  ranks' replay buffers as ``PPOTrainer.train_step`` sends them (``RayActorGroup
  .async_run_method_batch``, after ``balance_experiences`` under ``train.dynamic_batch_enable``),
  then each rank's real ``ActorPPOTrainer.ppo_train`` (its ``DataLoader`` of
  ``train.micro_batch_size``, shuffled as it shuffles, ``drop_last``; or the replay buffer's
  token-budget partitions; 0.11's ``iter_grad_accum_global_norm`` windows; ``training_step``).  A
  row no micro-batch held (``drop_last``, or the rows ``setup_dynamic_batch``'s whole steps of
  ``train.batch_size`` leave over) comes back with step −1.  The unsplit layout runs the optimizer
  steps the split made, each as one micro-batch on one rank (the rows the split left out, a step
  per generation batch).  What needs GPUs is emulated, and the target's info says so (``"ranks":
  "emulated"``): DeepSpeed's engine is a stand-in (``backward`` divides the loss by
  ``gradient_accumulation_steps``, ``step`` applies at the accumulation boundary: :class:`_Engine`);
  the data-parallel ranks run one after another, their gradients averaged, and each all-reduce of
  OpenRLHF's own code is given the sum (min, max) of what every rank reduced there
  (:class:`_Collectives`); the policy is one leaf tensor of log-probabilities (:class:`_Policy`).
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

import contextlib
import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import io
import sys
import warnings
from dataclasses import replace
from importlib.metadata import version
from types import ModuleType, SimpleNamespace
from typing import Any, Callable, Iterator

import numpy as np

from grpo_identity.checks.frameworks import (
    PROMPT_LENGTH,
    STEP_GROUP_SIZE,
    AdapterError,
    FrameworkSpec,
    lengths_for,
    patched_attributes,
)

__all__ = [
    "import_check",
    "StandIns",
    "stand_ins",
    "cli_args",
    "argv_of",
    "advantage_target",
    "gradient_target",
    "lengths_for",
    "GPU_ONLY",
]

#: packages OpenRLHF's import chain reaches that only exist for CUDA
GPU_ONLY = ("flash_attn", "vllm")
#: modules imported before the stand-ins go in: transformers 5.5 (OpenRLHF 0.10's pin) asks at import
#: whether ``flash_attn`` is installed and then looks its distribution up (a stand-in has none)
BEFORE_STAND_INS = ("transformers.integrations.flash_attention",)
#: what the driver sets before the user's options (theirs come after and win); the group size
#: (``rollout.n_samples_per_prompt``) comes after those
DRIVER_SETS = (("rollout.micro_batch_size", "3"),)
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
#: a row's number in its prompt's first token: ID_BASE + row
ID_BASE = 1000
#: ``ppo_train`` passes at most, until the all-reduced counts settle
MAX_PASSES = 4
#: the replay buffer's module (its ``dist`` under dynamic batching)
REPLAY = "openrlhf.trainer.ppo_utils.replay_buffer"
#: the CLI module whose parser the driver runs
CLI_MODULE = "openrlhf.cli.train_ppo_ray"
#: the modules the driver calls into
MODULES = (
    "openrlhf.trainer.ppo_utils.experience_maker",
    "openrlhf.trainer.ppo_utils.experience",
    "openrlhf.trainer.ppo_utils.kl_controller",
    "openrlhf.models.loss",
)


class StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A finder that answers every module under ``roots`` (``vllm``, ``vllm.inputs`` …) with an empty
    package whose attributes are inert placeholder classes; any other name is left to the real finders."""

    def __init__(self, roots: tuple[str, ...]) -> None:
        self.roots = tuple(roots)
        self.made: list[str] = []

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname.partition(".")[0] not in self.roots:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> None:
        return None  # the default module object

    def exec_module(self, module: ModuleType) -> None:
        module.__path__ = []
        setattr(module, "__getattr__", _placeholder_of(module.__name__))  # noqa: B010 (a module-level __getattr__)
        self.made.append(module.__name__)


def _placeholder_of(module: str) -> Callable[[str], Any]:
    def attribute(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)

        def refuse(self: Any, *a: Any, **k: Any) -> None:
            raise RuntimeError(
                f"{module}.{name} is a grpo-identity stand-in (a GPU-only package): the audit never calls it"
            )

        return type(name, (), {"__init__": refuse, "__module__": module})

    return attribute


@contextlib.contextmanager
def stand_ins(roots: tuple[str, ...] = GPU_ONLY) -> Iterator[StandIns]:
    """Install a :class:`StandIns` finder for ``roots`` (packages not installed only) while the block
    runs; afterwards the finder is gone and so are the stand-in modules (what imported them keeps them)."""
    missing = tuple(r for r in roots if r not in sys.modules and importlib.util.find_spec(r) is None)
    finder = StandIns(missing)
    sys.meta_path.insert(0, finder)
    try:
        yield finder
    finally:
        sys.meta_path.remove(finder)
        for name in [m for m in sys.modules if m.partition(".")[0] in missing]:
            if getattr(sys.modules[name].__spec__, "loader", None) is finder:
                del sys.modules[name]


#: the settings that give each per-sample weight and each preset (what a report suggests)
SETTINGS: dict[str, dict[str, str]] = {
    "per_sample_weight": {
        "1/length": "actor.loss_agg_mode=seq-mean-token-mean",
        "1/step_tokens": "actor.loss_agg_mode=token-mean",
    },
    "preset": {
        "dr_grpo": "algo.advantage.estimator=dr_grpo (and a reward.clip_range beyond your rewards)",
        "rloo": "algo.advantage.estimator=rloo (and a reward.clip_range beyond your rewards)",
    },
}


def import_check() -> None:
    """Import what the driver needs and parse a default command line (a release environment's smoke test)."""
    fn = advantage_target(FrameworkSpec("openrlhf", sets=(("algo.advantage.estimator", "group_norm"),)))
    fn(np.array([1.0, 0.0]), 2)
    importlib.import_module("grpo_identity.checks.target")


_LOADED: dict[str, Any] = {"stand_ins": set()}


def _openrlhf() -> dict[str, Any]:
    """OpenRLHF's modules the driver calls (imported once, under the stand-ins)."""
    if "ray" not in _LOADED:
        warnings.filterwarnings("ignore")
        for name in BEFORE_STAND_INS:
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
        with stand_ins() as finder:
            try:
                mods = {name: importlib.import_module(name) for name in (*MODULES, "openrlhf.utils", "ray")}
            except ImportError as exc:
                raise AdapterError(f"OpenRLHF {_release()}: its trainer modules do not import here ({exc})") from None
            finally:
                _LOADED["stand_ins"].update(m.partition(".")[0] for m in finder.made)
        _LOADED.update(mods)
    return _LOADED


def _release() -> str:
    try:
        return version("openrlhf")
    except Exception:
        return "(not installed)"


def argv_of(parser: Any, sets: list[tuple[str, str]]) -> list[str]:
    """``--set`` pairs as OpenRLHF's command line: ``--KEY VALUE``; a flag (``store_true``) is given
    for ``true`` and left out for ``false``; an option of several numbers takes ``a,b``. A key the
    parser does not know stays ``--KEY VALUE`` (the parser's own error names it)."""
    actions = {opt: a for a in parser._actions for opt in a.option_strings}
    argv: list[str] = []
    for key, value in sets:
        opt = key if key.startswith("-") else f"--{key}"
        action = actions.get(opt)
        if action is not None and action.nargs == 0:  # a flag: store_true / store_false
            on = value.strip().lower()
            if on not in ("true", "false", "1", "0", "yes", "no"):
                raise AdapterError(f"OpenRLHF {_release()}: {opt} is a flag; --set {key}=true or false, got {value!r}")
            if (on in ("true", "1", "yes")) == (action.const is not False):
                argv.append(opt)
            else:  # the flag's opposite: drop an earlier occurrence (later --set wins)
                argv = [a for a in argv if a != opt]
        elif action is not None and action.nargs not in (None, "?"):
            argv += [opt, *value.replace(",", " ").split()]
        else:
            argv += [opt, value]
    return argv


class _Parsed(Exception):
    """Raised where ``train(args)`` would configure the strategy: carries the checked config."""

    def __init__(self, args: Any) -> None:
        super().__init__("parsed")
        self.config = args


def cli_args(
    spec: FrameworkSpec,
    group_size: int,
    driver_sets: tuple[tuple[str, str], ...] = DRIVER_SETS,
    check: Callable[[Any], None] | None = None,
) -> Any:
    """The config ``train_ppo_ray``'s own parser and checks build from ``spec`` (``driver_sets``, the
    user's, then ``--rollout.n_samples_per_prompt group_size``): the nested namespace its
    ``hierarchize`` makes (``args.algo.advantage.estimator`` …).  ``check`` sees that namespace as
    ``hierarchize`` returns it, before ``train_ppo_ray``'s own checks (which divide by some of its values)."""
    import argparse
    import runpy

    if spec.config:
        raise AdapterError(f"OpenRLHF {_release()}: train_ppo_ray takes no config file; give its options with --set")
    mods = _openrlhf()
    config = _module("openrlhf.utils.config")
    sets = [*driver_sets, *spec.sets, ("rollout.n_samples_per_prompt", str(int(group_size)))]
    original, hierarchize = argparse.ArgumentParser.parse_args, config.hierarchize

    def parse(parser: Any, args: Any = None, namespace: Any = None) -> Any:
        return original(parser, argv_of(parser, sets), namespace)

    def checked(args: Any) -> Any:
        nested = hierarchize(args)
        if check is not None:
            check(nested)
        return nested

    def stop(args: Any) -> Any:
        raise _Parsed(args)

    patches = [
        (argparse.ArgumentParser, "parse_args", parse),
        (config, "hierarchize", checked),
        (mods["ray"], "is_initialized", lambda: True),
        (mods["openrlhf.utils"], "get_strategy", stop),
    ]
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
    err = io.StringIO()
    try:
        for obj, name, new in patches:
            setattr(obj, name, new)
        with stand_ins() as finder, contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                runpy.run_module(CLI_MODULE, run_name="__main__", alter_sys=False)
            finally:
                _LOADED["stand_ins"].update(m.partition(".")[0] for m in finder.made)
    except _Parsed as done:
        return done.config
    except AdapterError:  # the driver's check of the parsed config
        raise
    except SystemExit:  # argparse: an unknown option, a value of the wrong type or choice
        last = [ln for ln in err.getvalue().splitlines() if ln.strip()]
        raise AdapterError(
            f"OpenRLHF {_release()} rejects the config ({spec.describe()}): "
            f"{last[-1].split('error: ')[-1] if last else 'bad arguments'}"
        ) from None
    except AssertionError as exc:  # train_ppo_ray's checks after parsing
        raise AdapterError(
            f"OpenRLHF {_release()} rejects the config ({spec.describe()}): "
            f"{str(exc) or 'an assertion of train_ppo_ray'}"
        ) from None
    except ImportError as exc:
        raise AdapterError(f"OpenRLHF {_release()}: {CLI_MODULE} does not import here ({exc})") from None
    except Exception as exc:  # its checks fail on a config they do not expect (gae without a reward model …)
        raise AdapterError(
            f"OpenRLHF {_release()}: {CLI_MODULE} fails on this config ({spec.describe()}): {type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}"
        ) from None
    finally:
        for obj, name, old in saved:
            setattr(obj, name, old)
    raise AdapterError(
        f"OpenRLHF {_release()}: {CLI_MODULE} ran to its end without calling get_strategy(args) (the driver knows "
        "the 0.10–0.11 command line)"
    )


def _maker(args: Any) -> Any:
    """A real ``RemoteExperienceMaker``: no model groups, the strategy's args, the trainer's KL controller."""
    from types import SimpleNamespace

    mods = _openrlhf()
    em, klc = mods["openrlhf.trainer.ppo_utils.experience_maker"], mods["openrlhf.trainer.ppo_utils.kl_controller"]
    for module, name in ((em, "RemoteExperienceMaker"), (klc, "FixedKLController"), (klc, "AdaptiveKLController")):
        if not hasattr(module, name):
            raise AdapterError(f"OpenRLHF {_release()} has no {module.__name__}.{name} (the driver knows 0.10–0.11)")
    kl = args.algo.kl
    kl_ctl = (
        klc.AdaptiveKLController(kl.init_coef, kl.target, kl.horizon)
        if kl.target
        else klc.FixedKLController(kl.init_coef)
    )  # as PPOTrainer builds it
    tokenizer = SimpleNamespace(pad_token_id=0)
    return em.RemoteExperienceMaker(None, None, None, None, kl_ctl, SimpleNamespace(args=args), tokenizer)


def _rollout(
    rewards: np.ndarray, lengths: np.ndarray, first: int = 0, holes: Any = None, truncated: Any = None
) -> list[Any]:
    """One ``Experience`` per response, as the samples generator returns them (group by group): the
    prompt's first token is ``ID_BASE`` + the row's number (``first`` + position), which is how the
    driver's policy (:class:`_Policy`) knows the row of each sequence it is given; ``holes[i]``
    tokens of response i masked out of ``action_mask`` from its second token on (what several
    ``action_ranges`` of a multi-turn agent leave); ``truncated[i]``: vLLM stopped response i at
    its length budget (``finish_reason == "length"``)."""
    import torch

    Experience = _openrlhf()["openrlhf.trainer.ppo_utils.experience"].Experience
    n = len(rewards)
    holes = np.zeros(n, dtype=int) if holes is None else np.asarray(holes, dtype=int)
    truncated = np.zeros(n, dtype=bool) if truncated is None else np.asarray(truncated, dtype=bool)
    out = []
    rows = zip(np.asarray(rewards, dtype=np.float64), np.asarray(lengths, dtype=int), holes, truncated)
    for i, (r, ell, h, cut) in enumerate(rows):
        seq = torch.arange(3, 3 + PROMPT_LENGTH + int(ell)).unsqueeze(0)  # (1, prompt + response)
        seq[0, 0] = ID_BASE + first + i
        action = torch.ones(1, int(ell), dtype=torch.bool)  # (1, response)
        action[0, 1 : 1 + int(h)] = False
        out.append(
            Experience(
                sequences=seq,
                attention_mask=torch.ones_like(seq),
                action_mask=action,
                rewards=torch.tensor([float(r)], dtype=torch.float32),
                response_length=torch.tensor([int(ell)]),
                truncated=torch.tensor([bool(cut)]),
                total_length=torch.tensor([PROMPT_LENGTH + int(ell)]),
                prompts=[f"prompt {first + i}"],
                labels=[""],
            )
        )
    return out


def _experiences(maker: Any, rewards: np.ndarray, lengths: np.ndarray, first: int = 0, **marks: Any) -> list[Any]:
    """The rollout micro-batches after ``compute_advantages_and_returns`` (``marks``: holes,
    truncated, as :func:`_rollout` takes them)."""
    import torch

    micro = maker.split_rollout_samples(_rollout(rewards, lengths, first, **marks))
    for exp in micro:  # what make_experience adds: on-policy, the reference equal to the actor, no critic
        exp.action_log_probs = torch.zeros(exp.action_mask.shape, dtype=torch.float32)
        exp.base_action_log_probs = torch.zeros(exp.action_mask.shape, dtype=torch.float32)
        exp.kl = torch.zeros(exp.action_mask.shape, dtype=torch.float32)
        exp.values = None
    return maker.compute_advantages_and_returns(micro)


def _per_response(experiences: list[Any], n: int, estimator: str) -> np.ndarray:
    """One advantage per response (its value on its response tokens), by ``index``; refuses token
    advantages that vary within a response (not an outcome advantage)."""
    out = np.full(n, np.nan)
    for exp in experiences:
        adv, mask = exp.advantages.double(), exp.action_mask.bool()  # (B, A)
        for row, i in enumerate(exp.index):
            tokens = adv[row][mask[row]]
            if float(tokens.max() - tokens.min()) > 1e-6 * max(1.0, float(tokens.abs().max())):
                raise RuntimeError(
                    f"estimator {estimator!r} gives token advantages that vary within a response (spread "
                    f"{float(tokens.max() - tokens.min()):.3g}): not an outcome advantage of one value per answer"
                )
            out[i] = float(tokens[0])
    if np.isnan(out).any():
        raise RuntimeError("the experience maker returned fewer responses than it was given")
    return out


def _value(args: Any, key: str) -> Any:
    """The parsed value of a dotted option (``train.batch_size``)."""
    return functools.reduce(getattr, key.split("."), args)


GAE = (
    "OpenRLHF {release}: algo.advantage.estimator=gae needs a critic's values; the driver audits the critic-free "
    "estimators (reinforce, rloo, reinforce_baseline, group_norm, dr_grpo …)"
)


class _Configs:
    """The parsed config per group size (OpenRLHF checks the group size when it parses), and the
    configs of the step's two layouts."""

    def __init__(self, spec: FrameworkSpec) -> None:
        self.spec = spec
        self.by_g: dict[Any, Any] = {}
        named = [v.strip().lower() for k, v in spec.sets if k.lstrip("-") == "algo.advantage.estimator"]
        if not named:
            raise AdapterError(
                f"OpenRLHF {_release()}: set the estimator (--set algo.advantage.estimator=group_norm, dr_grpo, "
                "rloo, reinforce_baseline, reinforce …); its default, gae, needs a critic"
            )
        if named[-1] == "gae":  # the CLI wants a reward model for gae
            raise AdapterError(GAE.format(release=_release()))
        keys = [k.lstrip("-") for k, _ in spec.sets]
        self.user_split = [k for k in SPLIT_KEYS if k in keys]
        sizes = [int(v) for k, v in spec.sets if k.lstrip("-") == "rollout.n_samples_per_prompt"]
        self.group_size = sizes[-1] if sizes else STEP_GROUP_SIZE

    def get(self, G: int) -> Any:
        if G not in self.by_g:
            self.by_g[G] = cli_args(self.spec, G)
            if self.by_g[G].algo.advantage.estimator == "gae":
                raise AdapterError(GAE.format(release=_release()))
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


def advantage_target(spec: FrameworkSpec) -> Callable[..., Any]:
    """fn(rewards, G): the advantages OpenRLHF's experience maker computes from ``spec``'s options."""
    configs = _Configs(spec)

    def openrlhf_advantage(rewards: np.ndarray, group_size: int) -> np.ndarray:
        args = configs.get(int(group_size))
        rewards = np.asarray(rewards, dtype=np.float64)
        exps = _experiences(_maker(args), rewards, lengths_for(len(rewards)))
        return _per_response(exps, len(rewards), args.algo.advantage.estimator)

    openrlhf_advantage.grpo_identity_info = _info(  # type: ignore[attr-defined]
        spec, configs.get(2), "RemoteExperienceMaker.compute_advantages_and_returns"
    )
    return openrlhf_advantage


def gradient_target(spec: FrameworkSpec) -> Callable[..., Any]:
    """fn(rewards, G, lengths, request=None) → {advantages, coefficients, mask}: −∂loss/∂log π per
    response token (autograd through the actor's ``PolicyLoss`` as ``ActorPPOTrainer`` builds it),
    rows in the caller's order.  With a step request (:mod:`grpo_identity.checks.steps`), the
    optimizer steps ``ActorPPOTrainer.ppo_train`` makes of the rows (:func:`_run_step`), with
    ``step``, ``rank`` and ``micro_batch`` per row."""
    import torch

    configs = _Configs(spec)
    mods = _openrlhf()
    if not hasattr(mods["openrlhf.models.loss"], "PolicyLoss"):
        raise AdapterError(f"OpenRLHF {_release()} has no openrlhf.models.loss.PolicyLoss (the driver knows 0.10–0.11)")
    loss_utils = _module("openrlhf.utils.loss_utils", optional=True)  # 0.10.3 on: the loss's global normalisers
    loss_fns: dict[int, Any] = {}

    def openrlhf_policy_loss_gradient(
        rewards: np.ndarray, group_size: int, lengths: np.ndarray | None, request: dict[str, Any] | None = None
    ) -> dict[str, np.ndarray]:
        if request is not None:
            return _run_step(configs, rewards, int(group_size), np.asarray(lengths, dtype=int), request)
        args = configs.get(int(group_size))
        rewards = np.asarray(rewards, dtype=np.float64)
        exps = _experiences(
            _maker(args), rewards, lengths_for(len(rewards)) if lengths is None else np.asarray(lengths, dtype=int)
        )
        adv = _per_response(exps, len(rewards), args.algo.advantage.estimator)
        if lengths is None:  # the advantages alone (the advantage audit of the same run)
            return {"advantages": adv}
        Experience = mods["openrlhf.trainer.ppo_utils.experience"].Experience
        batch = Experience.concat_experiences(exps, 0)  # the whole batch as one training micro-batch (one step)
        mask = batch.action_mask
        log_prob = torch.full(mask.shape, -1.0, requires_grad=True)  # (B, A); on-policy: old = current
        info = loss_utils.get_loss_batch_info(SimpleNamespace(), mask) if loss_utils is not None else {}
        if int(group_size) not in loss_fns:
            loss_fns[int(group_size)] = _trainer(args, _Engine(args, 0, 1, _Ledger(0)), _Policy(0)).actor_loss_fn
        loss, *_ = loss_fns[int(group_size)](
            log_prob, log_prob.detach(), batch.advantages, action_mask=mask, rollout_log_probs=None, **info
        )
        (grad,) = torch.autograd.grad(loss, log_prob)
        coeff, m = np.empty(mask.shape), np.empty(mask.shape)
        coeff[batch.index], m[batch.index] = -grad.double().numpy(), mask.double().numpy()
        return {"advantages": adv, "coefficients": coeff, "mask": m}

    # the split first: settings OpenRLHF cannot run are an AdapterError naming a value that runs (check_split)
    unavailable = _unreproducible(configs.step(configs.group_size, "split"))
    args = configs.get(2)
    info = {
        **_info(spec, args, "compute_advantages_and_returns + ActorPPOTrainer.actor_loss_fn (models.loss.PolicyLoss)"),
        "loss_agg_mode": str(getattr(args.actor, "loss_agg_mode", "token-mean (no actor.loss_agg_mode here)")),
        "policy_loss_type": str(args.actor.policy_loss_type),
        "lengths_optional": True,
    }
    if unavailable:  # a split the driver cannot reproduce: the per-G gradient probes still run
        info["step_unavailable"] = unavailable
    else:
        info["step"] = step_geometry(configs)
    openrlhf_policy_loss_gradient.grpo_identity_info = info  # type: ignore[attr-defined]
    return openrlhf_policy_loss_gradient


def _info(spec: FrameworkSpec, args: Any, entry: str) -> dict[str, Any]:
    adv = args.algo.advantage
    return {
        "framework": "openrlhf",
        "version": _release(),
        "entry": entry,
        "options": dict(spec.sets),
        "estimator": str(adv.estimator),
        "no_std_norm": bool(adv.no_std_norm),
        "gamma": float(adv.gamma),
        "kl_init_coef": float(args.algo.kl.init_coef),
        "reward_clip_range": list(args.reward.clip_range),
        "micro_batch_size": int(args.rollout.micro_batch_size),
        "stand_ins": sorted(_LOADED["stand_ins"]),
        "dtype": "float32",
    }


# --- the optimizer step: ActorPPOTrainer.ppo_train on emulated DeepSpeed ranks ----------------------
def _module(name: str, optional: bool = False) -> Any:
    """An OpenRLHF module beyond :data:`MODULES` (imported once, under the stand-ins); None for an
    ``optional`` one this release does not have."""
    if name not in _LOADED:
        _openrlhf()
        if optional and importlib.util.find_spec(name) is None:
            _LOADED[name] = None
        else:
            with stand_ins() as finder:
                try:
                    _LOADED[name] = importlib.import_module(name)
                except ImportError as exc:
                    raise AdapterError(f"OpenRLHF {_release()}: {name} does not import here ({exc})") from None
                finally:
                    _LOADED["stand_ins"].update(m.partition(".")[0] for m in finder.made)
    return _LOADED[name]


def _ranks(args: Any) -> tuple[int, int]:
    """(data-parallel ranks, accumulated micro-batches a step) as ``DeepspeedStrategy.setup_distributed``
    computes them (``dp_size``, ``accumulated_gradient``) from a config :func:`check_split` passed."""
    world = int(args.actor.num_nodes) * int(args.actor.num_gpus_per_node)
    ring, tp = int(args.ds.ring_attn_size), int(args.ds.tensor_parallel_size)
    return world // ring // tp, int(args.train.batch_size) * ring * tp // int(args.train.micro_batch_size) // world


def _unreproducible(args: Any) -> str | None:
    """Why the driver cannot run this (valid) split, or None."""
    ring, tp = int(args.ds.ring_attn_size), int(args.ds.tensor_parallel_size)
    if ring * tp == 1:
        return None
    return (
        f"OpenRLHF {_release()}: ds.ring_attn_size={ring}, ds.tensor_parallel_size={tp}: the driver runs data-parallel "
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
    raise AdapterError(f"OpenRLHF {_release()}: {why}{hint}")


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


def _actor_group(calls: list[Callable[..., Any]]) -> Any:
    """A ``RayActorGroup`` without Ray: actor r's ``execute_batch.remote(method, data, start, end)`` is
    ``calls[r]``."""
    launcher = _module("openrlhf.trainer.ray.launcher")
    group = object.__new__(launcher.RayActorGroup)
    group.duplicate_actors = 1
    group._actor_handlers = [SimpleNamespace(execute_batch=SimpleNamespace(remote=call)) for call in calls]
    return group


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
    with patched_attributes([(_openrlhf()["ray"], "put", lambda data: data)]):
        _actor_group([call(r) for r in range(dp)]).async_run_method_batch(method_name="append", experience=sizes)
    return got


def step_geometry(configs: _Configs) -> dict[str, Any]:
    """The configured step (``info["step"]``): G (the user's ``rollout.n_samples_per_prompt``, else
    :data:`~grpo_identity.checks.frameworks.STEP_GROUP_SIZE`), ``train.batch_size`` answers per
    optimizer step, ``rollout.batch_size`` × G per generation batch; the split settings in force;
    what of the split is emulated, said once in the split layout's words."""
    from grpo_identity.checks.steps import geometry

    G = configs.group_size
    args = configs.step(G, "split")
    dp, ga = _ranks(args)
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
        f"{dp} data-parallel ranks run one after another, each all-reduce given the sum (or min, max) of what every "
        "rank reduced there"
        if dp > 1
        else "one rank"
    )
    layouts = {
        "split": f"ActorPPOTrainer.ppo_train, {cut}; a stand-in for DeepSpeed's engine (backward ÷ accumulation "
        f"steps, a step at the boundary); {ranks}",
        "unsplit": "the split's optimizer steps, each as one micro-batch on one rank (train.batch_size = "
        "train.micro_batch_size = the step's answers); answers the split leaves out, one step per generation batch",
    }
    return geometry(
        G,
        int(args.train.batch_size),
        int(args.rollout.batch_size) * G,
        layouts=layouts,
        ranks="emulated" if dp > 1 else "one",
        holes=True,
        truncation=True,
        ragged=False,
        settings=settings,
        objective=objective(args),
    )


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


class _Ledger:
    """Where each row was trained: optimizer step, rank, micro-batch within (step, rank); −1 for a
    row no micro-batch held (``DataLoader(drop_last=True)``)."""

    def __init__(self, n: int) -> None:
        self.step, self.rank, self.micro = (np.full(n, -1, dtype=np.int64) for _ in range(3))

    def record(self, rows: Any, step: int, rank: int, micro: int) -> None:
        idx = np.asarray(rows, dtype=np.int64)
        self.step[idx], self.rank[idx], self.micro[idx] = step, rank, micro


class _Policy:
    """The actor as ``training_step`` calls it (``self.actor(sequences, action_mask, …)``): the
    log-probabilities of each row's response tokens are a leaf tensor (T,) of its own (a backward
    touches only its micro-batch's rows), found by the row number the prompt's first token carries;
    on-policy (zero, the rollout's old log-probs too)."""

    def __init__(self, n: int) -> None:
        import torch

        from grpo_identity.checks.frameworks import RESPONSE_LENGTH

        self.leaves = [torch.zeros(RESPONSE_LENGTH, requires_grad=True) for _ in range(n)]
        self.rows: Any = None

    def __call__(self, sequences: Any, action_mask: Any, *args: Any, return_output: bool = False, **kw: Any) -> Any:
        import torch

        self.rows = (sequences[:, 0].long() - ID_BASE).tolist()
        log_probs = torch.stack([self.leaves[r] for r in self.rows])[:, : action_mask.shape[1]]
        output = SimpleNamespace(entropy=torch.zeros(sequences.shape), aux_loss=torch.zeros(()))
        return (log_probs, output) if return_output else log_probs

    def gradient(self) -> np.ndarray:
        """∂loss/∂log π accumulated so far, (rows, T)."""
        return np.stack(
            [np.zeros(leaf.shape) if leaf.grad is None else leaf.grad.double().numpy() for leaf in self.leaves]
        )

    def zero_grad(self, rows: list[int]) -> None:
        for r in rows:
            self.leaves[r].grad = None

    def train(self, mode: bool = True) -> _Policy:
        return self

    def eval(self) -> _Policy:
        return self


class _Engine:
    """One data-parallel rank's ``DeepspeedStrategy`` and DeepSpeed engine, emulated: ``backward``
    divides the loss by the engine's ``gradient_accumulation_steps`` (``DeepSpeedEngine.backward``:
    ``loss / gradient_accumulation_steps()``; ``get_ds_train_config`` sets it to 1 under
    ``train.dynamic_batch_enable``) and accumulates; ``optimizer_step`` is a step of the engine at
    its accumulation boundary (every call under dynamic batching, where OpenRLHF calls it only at a
    step's last micro-batch).  The average over ranks of data parallelism is the caller's (the rows
    of the ranks are disjoint: each token's gradient is its rank's, divided by the ranks)."""

    def __init__(self, args: Any, rank: int, dp: int, ledger: _Ledger, collectives: Any = None) -> None:
        self.args, self.rank, self.ledger, self.collectives = args, rank, ledger, collectives
        dynamic = bool(args.train.dynamic_batch_enable)
        self.accumulated_gradient = int(args.train.batch_size) // int(args.train.micro_batch_size) // dp
        self.gas = 1 if dynamic else self.accumulated_gradient
        self.dynamic = dynamic
        self.ring_attn_group = None
        self.ds_device_mesh = {"dp": SimpleNamespace(get_group=lambda: None)}
        self.steps, self.micro_steps = 0, 0

    def is_rank_0(self) -> bool:
        return False  # tqdm's progress bars off

    def backward(self, loss: Any, model: Any, optimizer: Any, **kwargs: Any) -> None:
        (loss / self.gas).backward()
        self.ledger.record(model.rows, self.steps, self.rank, self.micro_steps)
        self.micro_steps += 1

    def optimizer_step(self, optimizer: Any, model: Any, scheduler: Any, name: str = "model", **kwargs: Any) -> None:
        if self.dynamic or self.micro_steps == self.gas:
            self.steps, self.micro_steps = self.steps + 1, 0

    def all_reduce(self, data: Any, op: str = "mean") -> Any:
        """``DeepspeedStrategy.all_reduce`` of a tensor (a max or a sum over the ranks; the mean a sum
        of the values over the ranks); the logged metrics (a dict) as they are."""
        if isinstance(data, dict):
            return data
        self.collectives.all_reduce(data, op)
        return data

    def get_grad_norm(self, model: Any) -> float:
        return 0.0

    def moving_average(self, *args: Any, **kwargs: Any) -> None:
        return None

    def print(self, *args: Any, **kwargs: Any) -> None:
        return None


class _Collectives:
    """``torch.distributed`` as OpenRLHF's loss and replay-buffer code sees it on one of ``dp``
    ranks (its modules' ``dist``): the ranks run one after another, so a pass records what each
    rank reduces, and the next pass returns, at each call, the reduction (sum, min, max) over the
    ranks of what the previous pass recorded there: the gathered counts, as the all-reduce gives
    them.  Passes repeat until a pass records what the one before it did."""

    ReduceOp = SimpleNamespace(SUM="sum", MIN="min", MAX="max", AVG="mean")

    def __init__(self, dp: int) -> None:
        self.dp, self.rank = dp, 0
        self.recorded: list[list[tuple[str, Any]]] = [[] for _ in range(dp)]
        self.previous: list[list[tuple[str, Any]]] | None = None

    @staticmethod
    def reduction(op: Any) -> str:
        """``op`` as one of sum, min, max, mean (``ReduceOp.AVG``; ``DeepspeedStrategy.all_reduce``'s
        "mean"): this :data:`ReduceOp`'s values, or torch's ``ReduceOp`` of those names; any other is an
        AdapterError naming it (never a sum in its place)."""
        name = str(op).lower().rpartition(".")[2]
        known = {"sum": "sum", "min": "min", "max": "max", "mean": "mean", "avg": "mean"}
        if name not in known:
            raise AdapterError(
                f"OpenRLHF {_release()}: an all-reduce with op {op!r}; the driver's ranks reduce by sum, min, max or "
                "mean only"
            )
        return known[name]

    def next_pass(self) -> None:
        self.previous, self.recorded = self.recorded, [[] for _ in range(self.dp)]

    def settled(self) -> bool:
        """This pass reduced what the previous one did (and every rank made the same calls)."""
        calls = {len(r) for r in self.recorded}
        if len(calls) > 1:
            raise AdapterError(
                f"OpenRLHF {_release()}: the ranks make different numbers of all-reduce calls {sorted(calls)} (a real "
                "run would hang): give every rank the same number of micro-batches"
            )
        if self.previous is None:
            return not any(self.recorded) or self.dp == 1
        return all(
            op == op0 and bool((t == t0).all())
            for now, before in zip(self.recorded, self.previous)
            for (op, t), (op0, t0) in zip(now, before)
        )

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def get_world_size(self, group: Any = None) -> int:
        return self.dp

    def get_rank(self, group: Any = None) -> int:
        return self.rank

    def all_reduce(self, tensor: Any, op: Any = "sum", group: Any = None, **kwargs: Any) -> None:
        import torch

        op = self.reduction(op)
        calls = self.recorded[self.rank]
        k = len(calls)
        calls.append((op, tensor.detach().clone()))
        if self.previous is None or not all(len(p) > k for p in self.previous):
            return  # the first pass: this rank's own value
        values = torch.stack([p[k][1] for p in self.previous])
        reduced = values.amin(0) if op == "min" else values.amax(0) if op == "max" else values.sum(0)
        tensor.copy_(reduced / self.dp if op == "mean" else reduced)


def _trainer(args: Any, engine: _Engine, policy: _Policy) -> Any:
    """A real ``ActorPPOTrainer`` (its ``PolicyLoss`` from the config, its ``NaiveReplayBuffer``) on the
    emulated engine and the driver's policy; no vLLM engines, no EMA."""
    import torch

    pa = _module("openrlhf.trainer.ray.ppo_actor")
    if not hasattr(pa, "ActorPPOTrainer"):
        raise AdapterError(f"OpenRLHF {_release()} has no {pa.__name__}.ActorPPOTrainer (the driver knows 0.10–0.11)")
    scheduler = SimpleNamespace(get_last_lr=lambda: [0.0])
    quiet = [(pa, "torch_dist_barrier_and_cuda_sync", lambda: None), (torch.cuda, "current_device", lambda: 0)]
    with patched_attributes(quiet):
        trainer = pa.ActorPPOTrainer(
            engine,
            policy,
            ema_model=None,
            actor_optim=None,
            actor_scheduler=scheduler,
            micro_train_batch_size=int(args.train.micro_batch_size),
            tokenizer=None,
            vllm_engines=None,
        )
    trainer.max_epochs = 1  # the first epoch (see step_geometry)
    return trainer


def _distribute(experiences: list[Any], trainers: list[Any]) -> None:
    """The rollout micro-batches to the ranks' replay buffers as ``PPOTrainer.train_step`` sends them:
    ``RayActorGroup.async_run_method_batch(method_name="append", …)`` (its own slicing into chunks
    per rank) onto ``BaseModelActor.execute_batch`` of each rank (``ray.put`` the identity)."""
    launcher = _module("openrlhf.trainer.ray.launcher")

    def call(trainer: Any) -> Callable[..., Any]:
        actor = SimpleNamespace(append=trainer.replay_buffer.append, strategy=trainer.strategy)

        def remote(method: str, data: Any, start: int, end: int) -> Any:
            return launcher.BaseModelActor.execute_batch(actor, method, data, start, end)

        return remote

    with patched_attributes([(_openrlhf()["ray"], "put", lambda data: data)]):
        _actor_group([call(t) for t in trainers]).async_run_method_batch(method_name="append", experience=experiences)


def _train(trainers: list[Any], engines: list[_Engine], collectives: _Collectives, kl_ctl: float, seed: int) -> None:
    """``ppo_train`` on every rank, in passes until the all-reduced counts settle (:class:`_Collectives`);
    each pass starts from the same engines' counters and the same shuffles."""
    import torch

    homes = [m for m in (_module("openrlhf.utils.loss_utils", optional=True), _module(REPLAY)) if m is not None]
    policy = trainers[0].actor
    start = [(e.steps, e.micro_steps) for e in engines]
    rows = sorted({int(r) for t in trainers for item in t.replay_buffer.items for r in _row_of(item)})
    patches = [(m, "dist", collectives) for m in homes if hasattr(m, "dist")]
    with patched_attributes([*patches, (torch.cuda, "current_device", lambda: "cpu")]):
        for _ in range(MAX_PASSES):
            for engine, (steps, micro) in zip(engines, start):
                engine.steps, engine.micro_steps = steps, micro
            policy.zero_grad(rows)
            for rank, trainer in enumerate(trainers):
                collectives.rank = rank
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(seed * 1000 + rank)  # the DataLoader's shuffle
                    trainer.ppo_train(kl_ctl)
            if collectives.settled():
                break
            collectives.next_pass()
        else:
            raise AdapterError(f"OpenRLHF {_release()}: the all-reduced counts did not settle in {MAX_PASSES} passes")
    collectives.recorded, collectives.previous = [[] for _ in range(collectives.dp)], None
    for trainer in trainers:
        trainer.replay_buffer.clear()


def _same_micro_batches(trainers: list[Any], args: Any) -> None:
    """Every rank holds as many micro-batches (``len(buffer) // train.micro_batch_size``; under
    dynamic batching ``setup_dynamic_batch`` evens them out itself), else DeepSpeed's accumulation
    boundaries fall apart across the ranks: an adapter error naming the counts."""
    if args.train.dynamic_batch_enable:
        return
    counts = [len(t.replay_buffer) // int(args.train.micro_batch_size) for t in trainers]
    if len(set(counts)) > 1:
        raise AdapterError(
            f"OpenRLHF {_release()}: the ranks get {counts} micro-batches of a generation batch (rollout.batch_size × "
            "n_samples_per_prompt answers in rollout.micro_batch_size chunks over the ranks): DeepSpeed's "
            "accumulation boundaries would differ from rank to rank"
        )


def _row_of(item: Any) -> list[int]:
    return (item.sequences.reshape(-1, item.sequences.shape[-1])[:, 0].long() - ID_BASE).tolist()


#: a generation batch of the step: its rows, its rollout micro-batches (advantages set), the advantage per row, KL coef
_Batch = tuple[slice, list[Any], np.ndarray, float]


def _run_step(
    configs: _Configs, rewards: np.ndarray, G: int, lengths: np.ndarray, request: dict[str, Any]
) -> dict[str, np.ndarray]:
    """The rows through OpenRLHF's step path, one generation batch (``rollout.batch_size`` × G rows)
    after another (:func:`_generation_batches`), split as configured (:func:`_train_split`); for the
    unsplit layout, the optimizer steps the split made of them, each again as one micro-batch on one
    rank (:func:`_train_unsplit`).  Coefficients: −∂/∂log π of the accumulated loss, averaged over
    the ranks; a row no micro-batch held has step −1 and zero coefficients."""
    from grpo_identity.checks.frameworks import RESPONSE_LENGTH

    rewards = np.asarray(rewards, dtype=np.float64)
    n = len(rewards)
    if any(int(size) != G for size in request.get("sizes") or [G]):
        raise AdapterError(f"OpenRLHF {_release()} delivers whole groups of rollout.n_samples_per_prompt answers")
    marks = {
        "holes": np.asarray(request.get("holes") or [0] * n, dtype=int),
        "truncated": np.asarray(request.get("truncated") or [False] * n, dtype=bool),
    }
    args = configs.step(G, "split")
    batches = _generation_batches(args, rewards, lengths, marks)
    ledger, policy = _train_split(args, batches, n)
    dp = _ranks(args)[0]
    if request["layout"] == "unsplit":
        generation = np.arange(n) // (int(args.rollout.batch_size) * G)
        steps = _unsplit_steps(ledger.step, generation)
        batches = _generation_batches(args, rewards, lengths, marks)  # fresh experiences for the second run
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


def _generation_batches(
    args: Any, rewards: np.ndarray, lengths: np.ndarray, marks: dict[str, np.ndarray]
) -> list[_Batch]:
    """Per generation batch of ``rollout.batch_size`` × G rows (the last one shorter where the rows
    end sooner): its rows, its rollout micro-batches after the experience maker's advantages
    (:func:`_experiences`), the advantage per row, the KL coefficient."""
    rows = int(args.rollout.batch_size) * int(args.rollout.n_samples_per_prompt)
    out = []
    for first in range(0, len(rewards), rows):
        chunk = slice(first, min(first + rows, len(rewards)))
        maker = _maker(args)
        exps = _experiences(maker, rewards[chunk], lengths[chunk], first, **{k: v[chunk] for k, v in marks.items()})
        advantages = _per_response(exps, chunk.stop - chunk.start, args.algo.advantage.estimator)
        out.append((chunk, exps, advantages, float(maker.kl_ctl.value)))
    return out


def _train_split(args: Any, batches: list[_Batch], n: int) -> tuple[_Ledger, _Policy]:
    """(ledger, policy) of the split layout: each generation batch into the ranks' replay buffers
    (``async_run_method_batch``; ``balance_experiences`` first under dynamic batching), then each
    rank's ``ActorPPOTrainer.ppo_train``; the engines' counters run on from batch to batch, as
    DeepSpeed's do (a window the last batch leaves open keeps its step: DeepSpeed applies it at the
    next boundary)."""
    dp = _ranks(args)[0]
    ledger, policy, collectives = _Ledger(n), _Policy(n), _Collectives(dp)
    engines = [_Engine(args, r, dp, ledger, collectives) for r in range(dp)]
    balance = _openrlhf()["openrlhf.trainer.ppo_utils.experience"].balance_experiences
    for b, (_, exps, _, kl) in enumerate(batches):
        if args.train.dynamic_batch_enable:
            exps = balance(exps, args)
        trainers = [_trainer(args, e, policy) for e in engines]
        _distribute(exps, trainers)
        _same_micro_batches(trainers, args)
        _train(trainers, engines, collectives, kl, b)
    return ledger, policy


def _unsplit_steps(split: np.ndarray, generation: np.ndarray) -> np.ndarray:
    """The unsplit layout's optimizer step per row: the split's, and for the rows the split left out
    (step −1), one more step per generation batch after the split's last."""
    steps = split.copy()
    after = int(split.max()) + 1 if (split >= 0).any() else 0
    for k, g in enumerate(np.unique(generation[split < 0])):
        steps[(split < 0) & (generation == g)] = after + k
    return steps


def _train_unsplit(configs: _Configs, G: int, batches: list[_Batch], steps: np.ndarray) -> tuple[_Ledger, _Policy]:
    """(ledger, policy) of the unsplit layout: each optimizer step's rows (``steps``) in one rank's
    replay buffer (``NaiveReplayBuffer.append`` of their rollout micro-batches, the step's rows kept),
    trained by ``ppo_train`` under :data:`UNSPLIT` (one micro-batch of all of them, one rank)."""
    ledger, policy = _Ledger(len(steps)), _Policy(len(steps))
    for s in np.unique(steps[steps >= 0]):
        rows = set(np.flatnonzero(steps == s).tolist())
        args = configs.step(G, "unsplit", len(rows))
        collectives = _Collectives(1)
        engine = _Engine(args, 0, 1, ledger, collectives)
        engine.steps = int(s)
        trainer = _trainer(args, engine, policy)
        buffer = trainer.replay_buffer
        for chunk, exps, _, _ in batches:
            if rows.intersection(range(chunk.start, chunk.stop)):
                for exp in exps:
                    buffer.append(exp)
        buffer.items[:] = [item for item in buffer.items if _row_of(item)[0] in rows]
        _train([trainer], [engine], collectives, batches[0][3], int(s))
    return ledger, policy
