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
- gradient: the actor's ``PolicyLoss`` built from the config as ``PolicyModelActor`` builds it
  (clip range, ``loss_agg_mode`` → ``token_level_loss``), on the whole batch as one micro-batch
  (``batch_num_tokens``/``global_batch_size`` of that batch, one rank), differentiated by autograd
  with respect to each response token's log-probability.

OpenRLHF's import chain reaches ``flash_attn`` and ``vllm`` (GPU only): while the driver imports
OpenRLHF it installs a ``sys.meta_path`` finder (:class:`StandIns`) that answers any module under
those names with an empty stand-in; the finder and its modules are removed afterwards, and the
target's ``grpo_identity_info`` names them (``stand_ins``).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import io
import sys
import warnings
from importlib.metadata import version
from types import ModuleType, SimpleNamespace
from typing import Any, Callable, Iterator

import numpy as np

from grpo_identity.checks.frameworks import PROMPT_LENGTH, AdapterError, FrameworkSpec, lengths_for

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
#: what the driver sets before the user's options (theirs come after and win); the group size
#: (``rollout.n_samples_per_prompt``) comes after those
DRIVER_SETS = (("rollout.micro_batch_size", "3"),)
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
        "1/batch_tokens": "actor.loss_agg_mode=token-mean",
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


def cli_args(spec: FrameworkSpec, group_size: int) -> Any:
    """The config ``train_ppo_ray``'s own parser and checks build from ``spec`` (driver sets, the
    user's, then ``--rollout.n_samples_per_prompt group_size``): the nested namespace its
    ``hierarchize`` makes (``args.algo.advantage.estimator`` …)."""
    import argparse
    import runpy

    if spec.config:
        raise AdapterError(f"OpenRLHF {_release()}: train_ppo_ray takes no config file; give its options with --set")
    mods = _openrlhf()
    sets = [*DRIVER_SETS, *spec.sets, ("rollout.n_samples_per_prompt", str(int(group_size)))]
    original = argparse.ArgumentParser.parse_args

    def parse(parser: Any, args: Any = None, namespace: Any = None) -> Any:
        return original(parser, argv_of(parser, sets), namespace)

    def stop(args: Any) -> Any:
        raise _Parsed(args)

    patches = [
        (argparse.ArgumentParser, "parse_args", parse),
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
        "the 0.11 command line)"
    )


def _maker(args: Any) -> Any:
    """A real ``RemoteExperienceMaker``: no model groups, the strategy's args, the trainer's KL controller."""
    from types import SimpleNamespace

    mods = _openrlhf()
    em, klc = mods["openrlhf.trainer.ppo_utils.experience_maker"], mods["openrlhf.trainer.ppo_utils.kl_controller"]
    for module, name in ((em, "RemoteExperienceMaker"), (klc, "FixedKLController"), (klc, "AdaptiveKLController")):
        if not hasattr(module, name):
            raise AdapterError(f"OpenRLHF {_release()} has no {module.__name__}.{name} (the driver knows 0.11)")
    kl = args.algo.kl
    kl_ctl = (
        klc.AdaptiveKLController(kl.init_coef, kl.target, kl.horizon)
        if kl.target
        else klc.FixedKLController(kl.init_coef)
    )  # as PPOTrainer builds it
    tokenizer = SimpleNamespace(pad_token_id=0)
    return em.RemoteExperienceMaker(None, None, None, None, kl_ctl, SimpleNamespace(args=args), tokenizer)


def _rollout(rewards: np.ndarray, lengths: np.ndarray) -> list[Any]:
    """One ``Experience`` per response, as the samples generator returns them (group by group)."""
    import torch

    Experience = _openrlhf()["openrlhf.trainer.ppo_utils.experience"].Experience
    out = []
    for i, (r, ell) in enumerate(zip(np.asarray(rewards, dtype=np.float64), np.asarray(lengths, dtype=int))):
        seq = torch.arange(3, 3 + PROMPT_LENGTH + int(ell)).unsqueeze(0)  # (1, prompt + response)
        action = torch.ones(1, int(ell), dtype=torch.bool)  # (1, response)
        out.append(
            Experience(
                sequences=seq,
                attention_mask=torch.ones_like(seq),
                action_mask=action,
                rewards=torch.tensor([float(r)], dtype=torch.float32),
                response_length=torch.tensor([int(ell)]),
                truncated=torch.tensor([False]),
                total_length=torch.tensor([PROMPT_LENGTH + int(ell)]),
                prompts=[f"prompt {i}"],
                labels=[""],
            )
        )
    return out


def _experiences(maker: Any, rewards: np.ndarray, lengths: np.ndarray) -> list[Any]:
    """The micro-batches after ``compute_advantages_and_returns``."""
    import torch

    micro = maker.split_rollout_samples(_rollout(rewards, lengths))
    for exp in micro:  # what make_experience adds: on-policy, the reference equal to the actor, no critic
        exp.action_log_probs = torch.zeros(exp.action_mask.shape, dtype=torch.float32)
        exp.kl = torch.zeros(exp.action_mask.shape, dtype=torch.float32)
        exp.values, exp.base_action_log_probs = None, None
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


class _Configs:
    """The parsed config per group size (OpenRLHF checks the group size when it parses)."""

    def __init__(self, spec: FrameworkSpec) -> None:
        self.spec = spec
        self.by_g: dict[int, Any] = {}
        named = [v.strip().lower() for k, v in spec.sets if k.lstrip("-") == "algo.advantage.estimator"]
        if not named:
            raise AdapterError(
                f"OpenRLHF {_release()}: set the estimator (--set algo.advantage.estimator=group_norm, dr_grpo, "
                "rloo, reinforce_baseline, reinforce …); its default, gae, needs a critic"
            )
        if named[-1] == "gae" or self.get(2).algo.advantage.estimator == "gae":  # the CLI wants a reward model for gae
            raise AdapterError(
                f"OpenRLHF {_release()}: algo.advantage.estimator=gae needs a critic's values; the driver audits the "
                "critic-free estimators (reinforce, rloo, reinforce_baseline, group_norm, dr_grpo …)"
            )

    def get(self, G: int) -> Any:
        if G not in self.by_g:
            self.by_g[G] = cli_args(self.spec, G)
        return self.by_g[G]


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
    """fn(rewards, G, lengths) → {advantages, coefficients, mask}: −∂loss/∂log π per response token
    (autograd through the actor's ``PolicyLoss`` and its aggregation), rows in the caller's order."""
    import torch

    configs = _Configs(spec)
    mods = _openrlhf()
    loss_mod = mods["openrlhf.models.loss"]
    for name in ("PolicyLoss", "aggregate_loss"):
        if not hasattr(loss_mod, name):
            raise AdapterError(f"OpenRLHF {_release()} has no openrlhf.models.loss.{name} (the driver knows 0.11)")
    from openrlhf.utils.loss_utils import get_loss_batch_info

    def openrlhf_policy_loss_gradient(
        rewards: np.ndarray, group_size: int, lengths: np.ndarray | None
    ) -> dict[str, np.ndarray]:
        args = configs.get(int(group_size))
        rewards = np.asarray(rewards, dtype=np.float64)
        exps = _experiences(
            _maker(args), rewards, lengths_for(len(rewards)) if lengths is None else np.asarray(lengths, dtype=int)
        )
        adv = _per_response(exps, len(rewards), args.algo.advantage.estimator)
        if lengths is None:  # the advantages alone (the advantage audit of the same run)
            return {"advantages": adv}
        Experience = mods["openrlhf.trainer.ppo_utils.experience"].Experience
        batch = Experience.concat_experiences(
            exps, 0
        )  # the whole batch as one training micro-batch (one optimizer step)
        mask = batch.action_mask
        log_prob = torch.full(mask.shape, -1.0, requires_grad=True)  # (B, A); on-policy: old = current
        info = get_loss_batch_info(SimpleNamespace(), mask)
        loss, *_ = _policy_loss(loss_mod, args)(
            log_prob, log_prob.detach(), batch.advantages, action_mask=mask, rollout_log_probs=None, **info
        )
        (grad,) = torch.autograd.grad(loss, log_prob)
        coeff, m = np.empty(mask.shape), np.empty(mask.shape)
        coeff[batch.index], m[batch.index] = -grad.double().numpy(), mask.double().numpy()
        return {"advantages": adv, "coefficients": coeff, "mask": m}

    args = configs.get(2)
    openrlhf_policy_loss_gradient.grpo_identity_info = {  # type: ignore[attr-defined]
        **_info(spec, args, "compute_advantages_and_returns + models.loss.PolicyLoss (aggregate_loss)"),
        "loss_agg_mode": str(args.actor.loss_agg_mode),
        "policy_loss_type": str(args.actor.policy_loss_type),
        "lengths_optional": True,
    }
    return openrlhf_policy_loss_gradient


def _policy_loss(loss_mod: Any, args: Any) -> Any:
    """The actor's loss as ``PolicyModelActor`` builds it from the config."""
    actor, adv = args.actor, args.algo.advantage
    return loss_mod.PolicyLoss(
        clip_eps_low=actor.eps_clip_low_high[0],
        clip_eps_high=actor.eps_clip_low_high[1],
        dual_clip=actor.dual_clip,
        token_level_loss=actor.loss_agg_mode == "token-mean",
        policy_loss_type=actor.policy_loss_type,
        is_correction_level=adv.is_correction_level,
        is_correction_mode=adv.is_correction_mode,
        is_correction_gating=adv.is_correction_gating,
        is_correction_threshold=adv.is_correction_threshold,
    )


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
