"""OpenRLHF's optimizer step on one machine, as grpo-identity runs it: ``train_ppo_ray``'s own command line and
checks, the experience maker's ``compute_advantages_and_returns`` on the rollout's micro-batches, the replay
buffers filled as ``PPOTrainer.train_step`` fills them, and each rank's real ``ActorPPOTrainer.ppo_train``, with
what needs GPUs stood in: DeepSpeed's engine (:class:`Engine`: ``backward`` divides by the accumulation steps, a
step at the boundary; its all-reduce, :class:`Reductions`, over the ranks' real ``torch.distributed`` group), the
policy (one leaf tensor of log-probabilities per row, :class:`Policy`) and the GPU-only packages ``flash_attn``
and ``vllm`` (:class:`StandIns`, while OpenRLHF is imported).

The OpenRLHF driver (``grpo_identity.checks.frameworks.openrlhf``) runs its split steps with these, on the ranks
the configuration names, each a process of one gloo group; an exported test pack (``grpo-identity export-tests
openrlhf``) runs one rank itself, in a group of its own process (:func:`one_process`), with ``CASE`` written in
by the exporter.  Imports: the standard library and numpy here, OpenRLHF and what it
installs (torch, ray's module) inside the functions.
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

CASE: dict[str, Any] = {}  # the exporter writes the case here
#: response and prompt tokens of a probe row (the driver's are the same)
WIDTH, PROMPT = 6, 2


class Refused(ValueError):
    """This release or configuration cannot be run here (an API the runner does not know, a config OpenRLHF
    rejects).  grpo-identity's driver binds the name to its own usage error (AdapterError) when it imports this
    module; in an exported test it is this class."""


@contextlib.contextmanager
def _patched(patches: list[tuple[Any, str, Any]]) -> Iterator[None]:
    """``(object, name, value)``: each attribute set while the block runs, as it was afterwards."""
    from unittest import mock

    with contextlib.ExitStack() as stack:
        for obj, name, value in patches:
            stack.enter_context(mock.patch.object(obj, name, value))
        yield


#: packages OpenRLHF's import chain reaches that only exist for CUDA
GPU_ONLY = ("flash_attn", "vllm")


#: modules imported before the stand-ins go in: transformers 5.5 (OpenRLHF 0.10's pin) asks at import
#: whether ``flash_attn`` is installed and then looks its distribution up (a stand-in has none)
BEFORE_STAND_INS = ("transformers.integrations.flash_attention",)


#: a row's number in its prompt's first token: ID_BASE + row
ID_BASE = 1000


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


@contextlib.contextmanager  # also the SkyRL driver's (checks/frameworks/skyrl.py): one stand-in mechanism
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


LOADED: dict[str, Any] = {"stand_ins": set()}


def openrlhf_modules() -> dict[str, Any]:
    """OpenRLHF's modules the driver calls (imported once, under the stand-ins)."""
    if "ray" not in LOADED:
        warnings.filterwarnings("ignore")
        for name in BEFORE_STAND_INS:
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
        with stand_ins() as finder:
            try:
                mods = {name: importlib.import_module(name) for name in (*MODULES, "openrlhf.utils", "ray")}
            except ImportError as exc:
                raise Refused(f"OpenRLHF {release()}: its trainer modules do not import here ({exc})") from None
            finally:
                LOADED["stand_ins"].update(m.partition(".")[0] for m in finder.made)
        LOADED.update(mods)
    return LOADED


def release() -> str:
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
                raise Refused(f"OpenRLHF {release()}: {opt} is a flag; --set {key}=true or false, got {value!r}")
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


def parse_command_line(
    sets: list[tuple[str, str]], check: Callable[[Any], None] | None = None, described: str = ""
) -> Any:
    """The config ``train_ppo_ray``'s own parser and checks build from ``sets`` (``--set`` pairs, in order: later
    ones win): the nested namespace its ``hierarchize`` makes (``args.algo.advantage.estimator`` …).  ``check``
    sees that namespace as ``hierarchize`` returns it, before ``train_ppo_ray``'s own checks (which divide by some of
    its values); what it raises goes through.  ``described``: the configuration as the messages name it."""
    import argparse
    import runpy

    mods = openrlhf_modules()
    config = module_named("openrlhf.utils.config")
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
    err = io.StringIO()
    with _patched(patches):  # outside the try: a missing attribute is the driver's error, not the config's
        try:
            with stand_ins() as finder:
                try:
                    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                        runpy.run_module(CLI_MODULE, run_name="__main__", alter_sys=False)
                finally:
                    LOADED["stand_ins"].update(m.partition(".")[0] for m in finder.made)
        except _Parsed as done:
            return done.config
        except Refused:  # the driver's check of the parsed config
            raise
        except SystemExit:  # argparse: an unknown option, a value of the wrong type or choice
            last = [ln for ln in err.getvalue().splitlines() if ln.strip()]
            raise Refused(
                f"OpenRLHF {release()} rejects the config ({described}): "
                f"{last[-1].split('error: ')[-1] if last else 'bad arguments'}"
            ) from None
        except AssertionError as exc:  # train_ppo_ray's checks after parsing
            raise Refused(
                f"OpenRLHF {release()} rejects the config ({described}): {str(exc) or 'an assertion of train_ppo_ray'}"
            ) from None
        except ImportError as exc:
            raise Refused(f"OpenRLHF {release()}: {CLI_MODULE} does not import here ({exc})") from None
        except Exception as exc:  # its checks fail on a config they do not expect (gae without a reward model …)
            raise Refused(
                f"OpenRLHF {release()}: {CLI_MODULE} fails on this config ({described}): {type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''}"
            ) from None
        raise Refused(
            f"OpenRLHF {release()}: {CLI_MODULE} ran to its end without calling get_strategy(args) (the driver knows "
            "the 0.10–0.11 command line)"
        )


def experience_maker(args: Any) -> Any:
    """A real ``RemoteExperienceMaker``: no model groups, the strategy's args, the trainer's KL controller."""
    from types import SimpleNamespace

    mods = openrlhf_modules()
    em, klc = mods["openrlhf.trainer.ppo_utils.experience_maker"], mods["openrlhf.trainer.ppo_utils.kl_controller"]
    for module, name in ((em, "RemoteExperienceMaker"), (klc, "FixedKLController"), (klc, "AdaptiveKLController")):
        if not hasattr(module, name):
            raise Refused(f"OpenRLHF {release()} has no {module.__name__}.{name} (the driver knows 0.10–0.11)")
    kl = args.algo.kl
    kl_ctl = (
        klc.AdaptiveKLController(kl.init_coef, kl.target, kl.horizon)
        if kl.target
        else klc.FixedKLController(kl.init_coef)
    )  # as PPOTrainer builds it
    tokenizer = SimpleNamespace(pad_token_id=0)
    return em.RemoteExperienceMaker(None, None, None, None, kl_ctl, SimpleNamespace(args=args), tokenizer)


def rollout_samples(
    rewards: np.ndarray, lengths: np.ndarray, first: int = 0, holes: Any = None, truncated: Any = None
) -> list[Any]:
    """One ``Experience`` per response, as the samples generator returns them (group by group): the
    prompt's first token is ``ID_BASE`` + the row's number (``first`` + position), which is how the
    driver's policy (:class:`Policy`) knows the row of each sequence it is given; ``holes[i]``
    tokens of response i masked out of ``action_mask`` from its second token on (what several
    ``action_ranges`` of a multi-turn agent leave); ``truncated[i]``: vLLM stopped response i at
    its length budget (``finish_reason == "length"``)."""
    import torch

    Experience = openrlhf_modules()["openrlhf.trainer.ppo_utils.experience"].Experience
    n = len(rewards)
    holes = np.zeros(n, dtype=int) if holes is None else np.asarray(holes, dtype=int)
    truncated = np.zeros(n, dtype=bool) if truncated is None else np.asarray(truncated, dtype=bool)
    out = []
    rows = zip(np.asarray(rewards, dtype=np.float64), np.asarray(lengths, dtype=int), holes, truncated)
    for i, (r, ell, h, cut) in enumerate(rows):
        seq = torch.arange(3, 3 + PROMPT + int(ell)).unsqueeze(0)  # (1, prompt + response)
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
                total_length=torch.tensor([PROMPT + int(ell)]),
                prompts=[f"prompt {first + i}"],
                labels=[""],
            )
        )
    return out


def experiences_of(maker: Any, rewards: np.ndarray, lengths: np.ndarray, first: int = 0, **marks: Any) -> list[Any]:
    """The rollout micro-batches after ``compute_advantages_and_returns`` (``marks``: holes,
    truncated, as :func:`rollout_samples` takes them)."""
    import torch

    micro = maker.split_rollout_samples(rollout_samples(rewards, lengths, first, **marks))
    engine_logps = correction_settings(maker.strategy.args) is not None
    for exp in micro:  # what make_experience adds: on-policy, the reference equal to the actor, no critic
        exp.action_log_probs = torch.zeros(exp.action_mask.shape, dtype=torch.float32)
        if engine_logps:  # vLLM's log-probabilities, asked for where the correction is on: equal (on-policy)
            exp.rollout_log_probs = torch.zeros(exp.action_mask.shape, dtype=torch.float32)
        exp.base_action_log_probs = torch.zeros(exp.action_mask.shape, dtype=torch.float32)
        exp.kl = torch.zeros(exp.action_mask.shape, dtype=torch.float32)
        exp.values = None
    return maker.compute_advantages_and_returns(micro)


def correction_settings(args: Any) -> dict[str, Any] | None:
    """The vLLM importance-sampling correction the config turns on, as the three-policy probe's estimator
    (``estimator``, ``cap``, ``low``, ``setting``), and ``off``: the ``PolicyLoss`` attribute and value that switch
    it off; None where it is off.  0.9–0.11.0: ``is_correction_enable`` with ``is_correction_type`` tis (clamp(r, low,
    high)), icepop (r masked outside [low, high]) or seq-mask-tis (r per token, the answer kept where the geometric
    mean is in bounds); 0.11.2: ``is_correction_level`` token/seq × ``is_correction_mode`` clip/mask, gated by the
    ratio (another gating is no known estimator).  Under GSPO the correction is not a weight (no estimator)."""
    adv = args.algo.advantage
    off: tuple[str, Any]
    low, high = ([0.0, *adv.is_correction_threshold] if len(adv.is_correction_threshold) == 1
                 else list(adv.is_correction_threshold))  # fmt: skip
    if hasattr(adv, "is_correction_level"):
        if adv.is_correction_level == "off":
            return None
        chosen = f"{adv.is_correction_level}+{adv.is_correction_mode}"
        if adv.is_correction_gating != "ratio":
            chosen += f", gating {adv.is_correction_gating}"
        estimator = {"token+clip": "token_truncate", "token+mask": "token_mask", "seq+mask": "geometric_gate"}
        keys, off = "is_correction_level/mode/gating/threshold", ("is_correction_level", "off")
    else:
        if not getattr(adv, "is_correction_enable", False):
            return None
        chosen = str(adv.is_correction_type)
        estimator = {"tis": "token_truncate", "icepop": "token_mask", "seq-mask-tis": "geometric_gate"}
        keys, off = "is_correction_enable/type/threshold", ("enable_vllm_is_correction", False)
    gspo = str(args.actor.policy_loss_type) == "gspo"
    return {
        "estimator": None if gspo else estimator.get(chosen),
        "cap": float(high),
        "low": float(low),
        "setting": f"algo.advantage.{keys}: {chosen}, [{low:g}, {high:g}]" + (" under GSPO" if gspo else ""),
        "off": off,
    }


def per_response(experiences: list[Any], n: int, estimator: str) -> np.ndarray:
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


def module_named(name: str) -> Any:
    """An OpenRLHF module beyond :data:`MODULES` (imported once, under the stand-ins)."""
    if name not in LOADED:
        openrlhf_modules()
        with stand_ins() as finder:
            try:
                LOADED[name] = importlib.import_module(name)
            except ImportError as exc:
                raise Refused(f"OpenRLHF {release()}: {name} does not import here ({exc})") from None
            finally:
                LOADED["stand_ins"].update(m.partition(".")[0] for m in finder.made)
    return LOADED[name]


def rank_counts(args: Any) -> tuple[int, int]:
    """(data-parallel ranks, accumulated micro-batches a step) as ``DeepspeedStrategy.setup_distributed``
    computes them (``dp_size``, ``accumulated_gradient``) from a config :func:`check_split` passed."""
    world = int(args.actor.num_nodes) * int(args.actor.num_gpus_per_node)
    ring, tp = int(args.ds.ring_attn_size), int(args.ds.tensor_parallel_size)
    return world // ring // tp, int(args.train.batch_size) * ring * tp // int(args.train.micro_batch_size) // world


def actor_group(calls: list[Callable[..., Any]]) -> Any:
    """A ``RayActorGroup`` without Ray: actor r's ``execute_batch.remote(method, data, start, end)`` is
    ``calls[r]``."""
    launcher = module_named("openrlhf.trainer.ray.launcher")
    group = object.__new__(launcher.RayActorGroup)
    group.duplicate_actors = 1
    group._actor_handlers = [SimpleNamespace(execute_batch=SimpleNamespace(remote=call)) for call in calls]
    return group


class Ledger:
    """Where each row was trained: optimizer step, rank, micro-batch within (step, rank); −1 for a
    row no micro-batch held (``DataLoader(drop_last=True)``)."""

    def __init__(self, n: int) -> None:
        self.step, self.rank, self.micro = (np.full(n, -1, dtype=np.int64) for _ in range(3))

    def record(self, rows: Any, step: int, rank: int, micro: int) -> None:
        idx = np.asarray(rows, dtype=np.int64)
        self.step[idx], self.rank[idx], self.micro[idx] = step, rank, micro


class Policy:
    """The actor as ``training_step`` calls it (``self.actor(sequences, action_mask, …)``): the
    log-probabilities of each row's response tokens are a leaf tensor (T,) of its own (a backward
    touches only its micro-batch's rows), found by the row number the prompt's first token carries;
    on-policy (zero, the rollout's old log-probs too)."""

    def __init__(self, n: int) -> None:
        import torch

        self.leaves = [torch.zeros(WIDTH, requires_grad=True) for _ in range(n)]
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

    def train(self, mode: bool = True) -> Policy:
        return self

    def eval(self) -> Policy:
        return self


class Engine:
    """One data-parallel rank's ``DeepspeedStrategy`` and DeepSpeed engine, stood in: ``backward``
    divides the loss by the engine's ``gradient_accumulation_steps`` (``DeepSpeedEngine.backward``:
    ``loss / gradient_accumulation_steps()``; ``get_ds_train_config`` sets it to 1 under
    ``train.dynamic_batch_enable``) and accumulates; ``optimizer_step`` is a step of the engine at
    its accumulation boundary (every call under dynamic batching, where OpenRLHF calls it only at a
    step's last micro-batch).  The average over ranks of data parallelism is the caller's (the rows
    of the ranks are disjoint: each token's gradient is its rank's, divided by the ranks)."""

    def __init__(self, args: Any, rank: int, dp: int, ledger: Ledger) -> None:
        self.args, self.rank, self.ledger, self.reductions = args, rank, ledger, Reductions(dp)
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
        """``DeepspeedStrategy.all_reduce`` of a tensor (:class:`Reductions`); the logged metrics (a dict) as
        they are."""
        if isinstance(data, dict):
            return data
        self.reductions.all_reduce(data, op)
        return data

    def get_grad_norm(self, model: Any) -> float:
        return 0.0

    def moving_average(self, *args: Any, **kwargs: Any) -> None:
        return None

    def print(self, *args: Any, **kwargs: Any) -> None:
        return None


class Reductions:
    """``DeepspeedStrategy.all_reduce`` over the ranks' ``torch.distributed`` group, as OpenRLHF's strategy
    reduces: a mean divides by the ranks, then sums; a sum, min or max is that reduction; any other op is
    refused by name (never a sum in its place)."""

    def __init__(self, dp: int) -> None:
        self.dp = dp

    @staticmethod
    def reduction(op: Any) -> str:
        """``op`` (a name, or torch's ``ReduceOp``) as one of sum, min, max, mean."""
        name = str(op).lower().rpartition(".")[2]
        known = {"sum": "sum", "min": "min", "max": "max", "mean": "mean", "avg": "mean"}
        if name not in known:
            raise Refused(
                f"OpenRLHF {release()}: an all-reduce with op {op!r}; the driver's ranks reduce by sum, min, max or "
                "mean only"
            )
        return known[name]

    def all_reduce(self, tensor: Any, op: Any = "mean") -> None:
        import torch.distributed as dist

        name = self.reduction(op)
        if name == "mean":
            tensor /= self.dp
        ops = {"min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}
        dist.all_reduce(tensor, op=ops.get(name, dist.ReduceOp.SUM))


def actor_trainer(args: Any, engine: Engine, policy: Policy) -> Any:
    """A real ``ActorPPOTrainer`` (its ``PolicyLoss`` from the config, its ``NaiveReplayBuffer``) on the
    stood-in engine and the driver's policy; no vLLM engines, no EMA."""
    import torch

    pa = module_named("openrlhf.trainer.ray.ppo_actor")
    if not hasattr(pa, "ActorPPOTrainer"):
        raise Refused(f"OpenRLHF {release()} has no {pa.__name__}.ActorPPOTrainer (the driver knows 0.10–0.11)")
    scheduler = SimpleNamespace(get_last_lr=lambda: [0.0])
    quiet = [(pa, "torch_dist_barrier_and_cuda_sync", lambda: None), (torch.cuda, "current_device", lambda: 0)]
    with _patched(quiet):
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
    trainer.max_epochs = 1  # the first epoch (see the driver's step_plan)
    return trainer


def distribute(experiences: list[Any], trainers: list[Any]) -> None:
    """The rollout micro-batches to the ranks' replay buffers as ``PPOTrainer.train_step`` sends them:
    ``RayActorGroup.async_run_method_batch(method_name="append", …)`` (its own slicing into chunks
    per rank) onto ``BaseModelActor.execute_batch`` of each rank (``ray.put`` the identity)."""
    launcher = module_named("openrlhf.trainer.ray.launcher")

    def call(trainer: Any) -> Callable[..., Any]:
        actor = SimpleNamespace(append=trainer.replay_buffer.append, strategy=trainer.strategy)

        def remote(method: str, data: Any, start: int, end: int) -> Any:
            return launcher.BaseModelActor.execute_batch(actor, method, data, start, end)

        return remote

    with _patched([(openrlhf_modules()["ray"], "put", lambda data: data)]):
        actor_group([call(t) for t in trainers]).async_run_method_batch(method_name="append", experience=experiences)


def train_rank(trainer: Any, kl_ctl: float, seed: int, rank: int) -> list[int]:
    """One rank's ``ActorPPOTrainer.ppo_train`` on its replay buffer, its ``DataLoader`` shuffled by the seed
    ``seed`` × 1000 + ``rank``; the rows it held."""
    import torch

    rows = sorted({int(r) for item in trainer.replay_buffer.items for r in row_of(item)})
    with _patched([(torch.cuda, "current_device", lambda: "cpu")]), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed * 1000 + rank)  # the DataLoader's shuffle
        trainer.ppo_train(kl_ctl)
    return rows


def same_micro_batches(trainers: list[Any], args: Any) -> None:
    """Every rank holds as many micro-batches (``len(buffer) // train.micro_batch_size``; under
    dynamic batching ``setup_dynamic_batch`` evens them out itself), else DeepSpeed's accumulation
    boundaries fall apart across the ranks: an adapter error naming the counts."""
    if args.train.dynamic_batch_enable:
        return
    counts = [len(t.replay_buffer) // int(args.train.micro_batch_size) for t in trainers]
    if len(set(counts)) > 1:
        raise Refused(
            f"OpenRLHF {release()}: the ranks get {counts} micro-batches of a generation batch (rollout.batch_size × "
            "n_samples_per_prompt answers in rollout.micro_batch_size chunks over the ranks): DeepSpeed's "
            "accumulation boundaries would differ from rank to rank"
        )


def row_of(item: Any) -> list[int]:
    return (item.sequences.reshape(-1, item.sequences.shape[-1])[:, 0].long() - ID_BASE).tolist()


#: a generation batch of the step: its rows, its rollout micro-batches (advantages set), the advantage per row, KL coef
Batch = tuple[slice, list[Any], np.ndarray, float]


def generation_batches(
    args: Any, rewards: np.ndarray, lengths: np.ndarray, marks: dict[str, np.ndarray]
) -> list[Batch]:
    """Per generation batch of ``rollout.batch_size`` × G rows (the last one shorter where the rows
    end sooner): its rows, its rollout micro-batches after the experience maker's advantages
    (:func:`experiences_of`), the advantage per row, the KL coefficient."""
    rows = int(args.rollout.batch_size) * int(args.rollout.n_samples_per_prompt)
    out = []
    for first in range(0, len(rewards), rows):
        chunk = slice(first, min(first + rows, len(rewards)))
        maker = experience_maker(args)
        exps = experiences_of(maker, rewards[chunk], lengths[chunk], first, **{k: v[chunk] for k, v in marks.items()})
        advantages = per_response(exps, chunk.stop - chunk.start, args.algo.advantage.estimator)
        out.append((chunk, exps, advantages, float(maker.kl_ctl.value)))
    return out


def train_split(
    args: Any, batches: list[Batch], n: int, on_ranks: Callable[[list[Any], list[Engine], float, int], None]
) -> tuple[Ledger, Policy]:
    """(ledger, policy) of the split layout: each generation batch into the ranks' replay buffers
    (``async_run_method_batch``; ``balance_experiences`` first under dynamic batching), then each
    rank's ``ActorPPOTrainer.ppo_train`` (:func:`train_rank`), run by ``on_ranks(trainers, engines, kl_ctl,
    seed)``: the driver's rank processes, or :func:`one_process`.  The engines' counters run on from batch
    to batch, as DeepSpeed's do (a window the last batch leaves open keeps its step: DeepSpeed applies it at
    the next boundary)."""
    dp = rank_counts(args)[0]
    ledger, policy = Ledger(n), Policy(n)
    engines = [Engine(args, r, dp, ledger) for r in range(dp)]
    balance = openrlhf_modules()["openrlhf.trainer.ppo_utils.experience"].balance_experiences
    for b, (_, exps, _, kl) in enumerate(batches):
        if args.train.dynamic_batch_enable:
            exps = balance(exps, args)
        trainers = [actor_trainer(args, e, policy) for e in engines]
        distribute(exps, trainers)
        same_micro_batches(trainers, args)
        on_ranks(trainers, engines, kl, b)
    return ledger, policy


def one_process(trainers: list[Any], engines: list[Engine], kl_ctl: float, seed: int) -> None:
    """The one rank's :func:`train_rank` here, in a ``torch.distributed`` group of this one process (gloo)."""
    import tempfile

    import torch.distributed as dist

    if len(trainers) != 1:
        raise Refused(f"OpenRLHF {release()}: the exported step runs one rank, not {len(trainers)}")
    with tempfile.TemporaryDirectory(prefix="exported-grpo-step-") as folder:
        store = f"file://{folder}/group"
        dist.init_process_group("gloo", init_method=store, rank=0, world_size=1)
        try:
            train_rank(trainers[0], kl_ctl, seed, 0)
        finally:
            dist.destroy_process_group()


def first_step_rows() -> dict[int, dict[str, Any]]:
    """Per answer of optimizer step 0 as ``ppo_train`` updated it (one rank): its coefficients −∂loss/∂log π per
    response token, its loss mask and its advantage; the generation batches of ``CASE`` one after the other."""
    warnings.filterwarnings("ignore")
    args = parse_command_line([tuple(pair) for pair in CASE["sets"]], described="the exported case")
    rewards, lengths = np.asarray(CASE["rewards"], dtype=float), np.asarray(CASE["lengths"], dtype=int)
    marks = {"holes": np.asarray(CASE["holes"], dtype=int), "truncated": np.asarray(CASE["truncated"], dtype=bool)}
    batches = generation_batches(args, rewards, lengths, marks)
    ledger, policy = train_split(args, batches, len(rewards), one_process)
    advantages = np.concatenate([adv for _, _, adv, _ in batches])
    mask = np.arange(WIDTH)[None, :] < lengths[:, None]
    for i, h in enumerate(marks["holes"]):
        mask[i, 1 : 1 + h] = False
    coefficients = -policy.gradient()
    return {
        int(i): {
            "coefficients": coefficients[i].tolist(),
            "mask": mask[i].astype(float).tolist(),
            "advantage": advantages[i],
        }
        for i in np.flatnonzero(ledger.step == 0)
    }
