"""How the audit calls a user's function: as it is written, not through a wrapper.

The audit probes with 1-D float64 rewards laid out group by group and a group size G; a
:class:`Caller` turns that into the call the function was written for, and its result back into
one advantage (or keep flag) per reward:

- **inputs**: numpy arrays, torch tensors or lists, in a reward dtype (``--reward-dtype``); read
  from the rewards' annotation, else from a first call on a small batch (``--input`` says it);
- **signatures**: rewards and the group size positionally (``fn(rewards, G)``), the group size as a
  keyword (``group_size=``, ``G=``, ``num_generations=`` …), keyword-only parameters, a single 2-D
  argument (``[n_prompts, G]`` in, the same shape out), rewards with group ids (``index``,
  ``uid``, ``uids``, ``group_ids`` …: any order, any sizes), verl's estimator signature
  (``token_level_rewards, response_mask, index`` → ``(advantages, returns)``);
- **outputs**: an array or tensor of any float dtype, a tuple (its first array) or a dict (its
  ``advantages``);
- anything else: a template, ``--call "fn(rewards=R, num_generations=G, eps=1e-6)"``.

The plan is made once, where the function lives (in the audit's child process), and reported
in the audit's ``target_info["call"]``.

>>> def mine(rewards, *, group_size, eps=1e-6):
...     return rewards.reshape(-1, group_size).mean(1).repeat(group_size) - rewards
>>> caller = Caller.for_function(mine)
>>> caller.plan.describe()
'mine(R, group_size=G)'
>>> caller(__import__("numpy").array([1., 0.]), 2).tolist()
[-0.5, 0.5]
"""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np

from grpo_identity.dial import is_torch

__all__ = [
    "INPUTS",
    "REWARD_DTYPES",
    "FORMS",
    "GROUP_SIZE_NAMES",
    "IDS_NAMES",
    "CallPlan",
    "CallOptions",
    "Caller",
    "CallError",
    "to_numpy",
]

#: what the rewards are handed over as
INPUTS = ("numpy", "torch", "list")
#: the dtypes the rewards can be handed over in (bfloat16 needs torch)
REWARD_DTYPES = ("float64", "float32", "float16", "bfloat16")
#: the call forms: rewards and G; a 2-D grid; rewards and group ids; verl's estimator; a template
FORMS = ("flat", "grid", "ids", "verl", "template")
#: parameter names that take the group size
GROUP_SIZE_NAMES = (
    "group_size",
    "G",
    "g",
    "num_generations",
    "n_generations",
    "num_samples",
    "n_samples",
    "n_samples_per_prompt",
    "samples_per_prompt",
    "rollout_n",
    "samples_per_problem",
    "num_samples_per_prompt_rollout",
    "num_samples_per_prompt",
    "rollouts_per_example",
    "rollouts_per_prompt",
    "num_rollouts",
    "n_rollouts",
)
#: the shapes of the names frameworks give the group size beyond :data:`GROUP_SIZE_NAMES` (answers per prompt,
#: problem, example or question; a count of samples, rollouts, generations, completions or responses)
_GROUP_SIZE_PATTERN = re.compile(
    r"^(n|num|number_of)_?(samples|rollouts|generations|completions|responses)(_per_\w+)?$"
    r"|^(samples|rollouts|generations|completions|responses)_per_(prompt|problem|example|question|group|query)\w*$"
)
#: names a required second positional parameter may have to be read as the group size
_POSITIONAL_SIZE_NAMES = (*GROUP_SIZE_NAMES, "k", "size", "gs", "n_per_group")
#: parameter names that take one group id per reward
IDS_NAMES = ("index", "uid", "uids", "group_ids", "group_id", "group_index", "ids", "prompt_ids", "prompt_index")
#: parameter names that take the rewards (else the first positional parameter)
REWARD_NAMES = ("rewards", "reward", "scores", "score", "r", "R", "values")
#: the names a --call template may use
TEMPLATE_NAMES = {
    "R": "the rewards, 1-D (n·G,)",
    "R2": "the rewards as a grid (n, G)",
    "RC": "the rewards as a column (n·G, 1): one reward function",
    "TR": "token-level rewards (n·G, T): unequal lengths, the reward on each answer's last token",
    "MASK": "the response mask (n·G, T): ones on each answer's tokens, a masked hole in some",
    "ONES": "a weight of 1 for the one reward function, shape (1,)",
    "G": "the group size",
    "N": "the number of groups",
    "IDS": "integer group ids, one per reward",
    "UIDS": "string group ids, one per reward (verl's uid)",
    "ROWS": "a distinct id per reward (request ids), as a list",
}


class CallError(ValueError):
    """The function cannot be called as the audit calls it (a usage error, exit code 2): the
    message says what to pass (``--input``, ``--call``)."""


@dataclass(frozen=True)
class CallOptions:
    """What the user said about calling their function (all optional)."""

    input: str | None = None
    """'numpy', 'torch' or 'list'; None: from the annotation or a first call."""
    reward_dtype: str = "float64"
    call: str | None = None
    """A template such as ``fn(rewards=R, num_generations=G)`` (names: :data:`TEMPLATE_NAMES`)."""

    def __post_init__(self) -> None:
        from grpo_identity.foundation import OptionError

        if self.input is not None and self.input not in INPUTS:
            raise OptionError("input", f"must be one of {', '.join(INPUTS)}, got {self.input!r}")
        if self.reward_dtype not in REWARD_DTYPES:
            raise OptionError("reward_dtype", f"must be one of {', '.join(REWARD_DTYPES)}, got {self.reward_dtype!r}")
        if self.reward_dtype == "bfloat16" and self.input in ("numpy", "list"):
            raise OptionError("reward_dtype", f"bfloat16 needs torch tensors, not {self.input} (give --input torch)")
        if self.call is not None:
            _parse_template(self.call)


@dataclass(frozen=True)
class CallPlan:
    """How the function is called (see the module docstring)."""

    name: str
    form: str
    input: str
    reward_dtype: str
    rewards_arg: str | None = None
    """The rewards' keyword, or None: the first positional argument."""
    group_size_arg: str | None = None
    """The group size's keyword; '' for the second positional argument; None: not passed."""
    ids_arg: str | None = None
    ids_input: str | None = None
    """The group ids' kind where their own annotation names one (verl's ``index: np.ndarray`` beside torch
    rewards); None: the rewards' kind."""
    template: str | None = None
    output: str = "array"
    """Where the advantages were: 'array', 'tuple[i]', or "dict['key']"."""

    @property
    def takes_ids(self) -> bool:
        """It takes group ids: rows may come in any order."""
        return self.form in ("ids", "verl") or (self.template is not None and _uses(self.template, "IDS", "UIDS"))

    @property
    def takes_group_size(self) -> bool:
        """It takes G: groups must all have G answers."""
        if self.template is not None:
            return _uses(self.template, "G", "R2")
        return bool(self.group_size_arg is not None)

    def describe(self) -> str:
        """The call in Python's words, e.g. ``fn(rewards=R, group_size=G)``."""
        if self.template is not None:
            return self.template
        if self.form == "verl":
            return f"{self.name}(token_level_rewards=TR, response_mask=MASK, index=UIDS)"
        value = "R2" if self.form == "grid" else "R"
        parts = [f"{self.rewards_arg}={value}" if self.rewards_arg else value]
        if self.group_size_arg == "":
            parts.append("G")
        elif self.group_size_arg:
            parts.append(f"{self.group_size_arg}=G")
        if self.ids_arg:
            parts.append(f"{self.ids_arg}=IDS")
        return f"{self.name}({', '.join(parts)})"

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "call": self.describe(),
            "takes_ids": self.takes_ids,
            "takes_group_size": self.takes_group_size,
        }


# --- the plan from the signature --------------------------------------------------------------------
def _parameters(fn: Callable[..., Any], forward: bool = True) -> list[inspect.Parameter]:
    """The named parameters of ``fn`` (a torch module's: its ``forward``'s); none where it has no signature (a
    builtin) or only ``*args, **kwargs`` (a decorator's wrapper): rewards and G are then passed by position."""
    try:
        params = [
            p for p in inspect.signature(fn).parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return []
    method = getattr(fn, "forward", None) if forward and not params else None  # one level: a module's forward
    return _parameters(method, forward=False) if callable(method) and method is not fn else params


def _find(params: list[inspect.Parameter], names: tuple[str, ...]) -> inspect.Parameter | None:
    return next((p for p in params if p.name in names), None)


def _needs(p: inspect.Parameter) -> bool:
    return p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)


def _form_of(fn: Callable[..., Any], name: str, options: CallOptions) -> CallPlan:
    """The call form the signature says (the input kind is settled later)."""
    base = {"name": name, "input": options.input or "numpy", "reward_dtype": options.reward_dtype}
    if options.call is not None:
        return CallPlan(form="template", template=options.call, **base)
    params = _parameters(fn)
    if not params:
        return CallPlan(form="flat", group_size_arg="", **base)
    if _find(params, ("token_level_rewards",)) is not None:  # verl's estimators take torch tensors
        verl = {**base, "input": "torch"}
        return CallPlan(form="verl", rewards_arg="token_level_rewards", ids_arg="index", **verl)
    rewards = _find(params, REWARD_NAMES) or params[0]
    rest = [p for p in params if p is not rewards]
    ids, size = _find(rest, IDS_NAMES), _group_size_param(rest)
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    rewards_arg = None if rewards.kind in positional and rewards is params[0] else rewards.name
    if ids is not None:
        return CallPlan(form="ids", rewards_arg=rewards_arg, ids_arg=ids.name, group_size_arg=_size_arg(size), **base)
    if size is None:
        second = next((p for p in rest if p.kind in positional), None)
        if second is not None and _needs(second):
            if second.name in _POSITIONAL_SIZE_NAMES:  # fn(rewards, k): the group size by position
                return CallPlan(form="flat", rewards_arg=rewards_arg, group_size_arg="", **base)
            return CallPlan(form="flat", rewards_arg=rewards_arg, **base)  # a parameter it cannot fill
        return CallPlan(form="grid", rewards_arg=rewards_arg, **base)
    return CallPlan(form="flat", rewards_arg=rewards_arg, group_size_arg=_size_arg(size), **base)


#: int parameters that are never the group size (a seed, a count of groups or prompts, a length, a rank …)
_NOT_A_SIZE = re.compile(
    r"seed|^(n|num|number_of)_?(groups?|prompts?|problems?|questions?|batch(es)?)$|batch_size|step|epoch|rank|world"
    r"|dim|len|^max_|^min_|idx|index|_id$|group_count|^groups$",
    re.I,
)


def _group_size_param(params: list[inspect.Parameter]) -> inspect.Parameter | None:
    """The parameter that takes the group size: a name frameworks use (:data:`GROUP_SIZE_NAMES`, or one of the shape
    :data:`_GROUP_SIZE_PATTERN`: ``samples_per_problem``, ``num_samples_per_prompt_rollout`` …), else the one required
    parameter annotated ``int`` (a function of rewards and one count)."""
    named = _find(params, GROUP_SIZE_NAMES) or next((p for p in params if _GROUP_SIZE_PATTERN.match(p.name)), None)
    if named is not None:
        return named
    ints = [p for p in params if _needs(p) and p.annotation in (int, "int") and not _NOT_A_SIZE.search(p.name)]
    return ints[0] if len(ints) == 1 else None


def _size_arg(p: inspect.Parameter | None) -> str | None:
    if p is None:
        return None
    return "" if p.kind == inspect.Parameter.POSITIONAL_ONLY else p.name


def _unfilled(fn: Callable[..., Any], plan: CallPlan) -> list[str]:
    """Required parameters the plan does not fill."""
    if plan.form == "template":
        return []
    if plan.form == "verl":
        verl = {"token_level_rewards", "response_mask", "index"}
        return [p.name for p in _parameters(fn) if _needs(p) and p.name not in verl]
    filled = {plan.rewards_arg, plan.group_size_arg, plan.ids_arg} - {None, ""}
    params = _parameters(fn)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    by_position = 1 + (plan.group_size_arg == "") if plan.rewards_arg is None else 0
    taken = {p.name for p in positional[:by_position]}
    return [p.name for p in params if _needs(p) and p.name not in filled | taken]


# --- the inputs ---------------------------------------------------------------------------------
def _annotated_input(fn: Callable[..., Any], plan: CallPlan) -> str | None:
    """numpy, torch or list, as the rewards' annotation says (None when it says nothing)."""
    params = _parameters(fn)
    return _annotated_kind(_find(params, (plan.rewards_arg,)) if plan.rewards_arg else (params[0] if params else None))


def _annotated_kind(p: inspect.Parameter | None) -> str | None:
    """numpy, torch or list, as a parameter's annotation says (None when it says nothing)."""
    text = "" if p is None or p.annotation is inspect.Parameter.empty else str(p.annotation)
    if "Tensor" in text or "torch" in text:
        return "torch"
    if "ndarray" in text or "NDArray" in text or "ArrayLike" in text or "numpy" in text:
        return "numpy"
    if (
        p is not None
        and p.annotation in (list, tuple)
        or text.lower().startswith(("list", "sequence", "<class 'list'>"))
    ):
        return "list"
    if "List[" in text or "Sequence[" in text:
        return "list"
    return None


def _convert(x: np.ndarray, input: str, dtype: str) -> Any:
    """``x`` (float64 numpy) as the function takes it."""
    if input == "torch":
        import torch

        return torch.tensor(x, dtype=getattr(torch, dtype))
    if input == "list":
        return x.astype(dtype).tolist()
    return x.astype(dtype)


def _back(x: Any) -> np.ndarray:
    """An input the function got, as float64 numpy (to see whether it changed it in place)."""
    return np.asarray(to_numpy(x), dtype=np.float64)


# --- the outputs ------------------------------------------------------------------------------------
def to_numpy(out: Any) -> np.ndarray:
    """The target's output as a numpy array (torch tensors detached, bf16/fp16 widened to fp32)."""
    if is_torch(out):
        t = out.detach().cpu()
        if t.dtype.is_floating_point and t.dtype.itemsize < 4:
            t = t.float()
        return t.numpy()
    return np.asarray(out)


def _advantages_of(out: Any) -> tuple[Any, str]:
    """The advantages in what the function returned, and where they were."""
    if isinstance(out, dict):
        for key in ("advantages", "advantage", "adv", "advs", "keep", "mask"):
            if key in out:
                return out[key], f"dict[{key!r}]"
        first = next(iter(out), None)
        return (out[first], f"dict[{first!r}]") if first is not None else (out, "dict")
    if isinstance(out, tuple) and out and not isinstance(out[0], (int, float, bool)):
        return out[0], "tuple[0]"
    return out, "array"


# --- the caller -----------------------------------------------------------------------------------------
class Caller:
    """A user's function called as it is written (see the module docstring).

    ``caller(rewards, G)``: float64 rewards group by group → the function's raw advantages (an
    array or tensor, flattened to one per reward); ``caller(rewards, G, ids)``: rows in any order
    with one group id each (the ``ids`` and ``verl`` forms only).  ``caller.passed`` is the input
    the function got, as float64 numpy, after the call (a function that changes its input in place
    shows it there)."""

    def __init__(self, fn: Callable[..., Any], plan: CallPlan) -> None:
        self.fn, self.plan = fn, plan
        self.passed: np.ndarray | None = None
        self._answered = False  # it has answered a call: an exception is then its own, never the call's

    @classmethod
    def for_function(
        cls, fn: Callable[..., Any], options: CallOptions | None = None, name: str | None = None
    ) -> Caller:
        """The caller of ``fn``: its plan from the signature and the options; the input kind from
        ``--input``, else the rewards' annotation, else the first call (numpy, then torch, then
        lists: the first the function takes).  :class:`CallError` when the signature needs more
        than the audit can pass."""
        options = options or CallOptions()
        name = name or str(getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__", "fn"))
        plan = _form_of(fn, name, options)
        missing = _unfilled(fn, plan)
        if missing:
            so_far = plan.describe()[:-1]  # the call the signature gives, without its ")"
            wanted = "=..., ".join(missing)
            raise CallError(
                f"{name} needs {', '.join(missing)}, which the audit cannot pass: give --call "
                f'"{so_far}, {wanted}=...)" (names: {", ".join(TEMPLATE_NAMES)}, and literals), or, for an object '
                f"no name or literal gives, audit a function of yours that makes it and calls {name}"
            )
        if plan.form == "verl":
            return cls(fn, plan)
        annotated = None if options.input else _annotated_input(fn, plan)
        if annotated in ("numpy", "list") and options.reward_dtype == "bfloat16":
            raise CallError(f"{name} takes {annotated} rewards (its annotation says so); bfloat16 needs torch tensors")
        decided = options.input or annotated or ("torch" if options.reward_dtype == "bfloat16" else "auto")
        ids_input = _annotated_kind(_find(_parameters(fn), (plan.ids_arg,))) if plan.ids_arg else None
        return cls(fn, _replace(plan, input=decided, ids_input=ids_input))

    def __call__(self, rewards: np.ndarray, group_size: int, ids: Any = None) -> Any:
        try:
            if self.plan.input == "auto":
                out = self._first_call(rewards, group_size, ids)
            else:
                out = self._call(rewards, group_size, ids)
        except CallError:
            raise
        except Exception as exc:
            option = None if self._answered else self._runs_with(rewards, group_size, ids)
            if option is None:
                raise
            said = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}" if str(exc) else type(exc).__name__
            raise CallError(
                f"{self.plan.name} raised {said} when called as {self.plan.describe()} with {self.plan.input} "
                f"{self.plan.reward_dtype} rewards; it runs when given {option}"
            ) from None
        self._answered = True
        return out

    def _runs_with(self, rewards: np.ndarray, group_size: int, ids: Any) -> str | None:
        """The option under which a first call that raised runs (the function refuses how the audit calls it, not
        the rewards): float32 rewards, verl's index as integer ids; None where none does."""
        plan, tries = self.plan, []
        if plan.reward_dtype == "float64" and plan.input != "auto":
            tries.append((_replace(plan, reward_dtype="float32"), "--reward-dtype float32"))
        if plan.form == "verl":
            call = f"{plan.name}(token_level_rewards=TR, response_mask=MASK, index=IDS)"
            tries.append((_replace(plan, form="template", template=call), f'--call "{call}"'))
        for alternative, option in tries:
            self.plan = alternative
            try:
                self._call(rewards, group_size, ids)
                return option
            except Exception:
                continue
            finally:
                self.plan = plan
        return None

    def _first_call(self, rewards: np.ndarray, group_size: int, ids: Any) -> Any:
        """The first call, on each input kind in turn (torch first for a module that imports torch and
        not numpy, else numpy, torch, lists): the first the function takes decides the plan.  An
        exception that cannot be about the input's kind is the function's own (it takes that kind,
        and fails); so is one every kind meets alike (the same message: a bug, not a refusal).  When
        every kind is refused, each its own way: :class:`CallError`."""
        tried: list[tuple[str, BaseException]] = []
        for kind in _input_order(self.fn):
            self.plan = _replace(self.plan, input=kind)
            try:
                return self._call(rewards, group_size, ids)
            except Exception as exc:  # the function's own exception: judged below
                tried.append((kind, exc))
                if not _about_types(exc):
                    raise
        first_kind, first = tried[0]
        if len({(type(e), str(e)) for _, e in tried}) == 1:  # the same failure whatever it is given
            self.plan = _replace(self.plan, input=first_kind)
            raise first
        self.plan = _replace(self.plan, input="auto")
        said = "; ".join(f"{k}: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}" for k, e in tried)
        raise CallError(
            f"{self.plan.name} takes none of numpy arrays, torch tensors or lists as the audit passes them "
            f"({self.plan.describe()}): {said}. Say what it takes with --input, or how to call it "
            "with --call"
        )

    def _call(self, rewards: np.ndarray, group_size: int, ids: Any = None) -> Any:
        plan = self.plan
        G = int(group_size)
        if ids is None:  # one after another, G at a time (a partial last group keeps its own id)
            ids = np.arange(rewards.size) // G if G > 0 else np.zeros(rewards.size, dtype=int)
        elif plan.form not in ("ids", "verl", "template"):
            raise CallError(f"{plan.describe()} takes no group ids")
        if plan.form == "verl":
            return self._verl(rewards, ids)
        x = _convert(rewards.reshape(-1, G) if plan.form == "grid" else rewards, plan.input, plan.reward_dtype)
        if plan.form == "template":
            out = _run_template(self.fn, plan.template or "", x, rewards, G, ids, plan)
        else:
            args, kwargs = self._arguments(x, G, ids)
            out = self.fn(*args, **kwargs)
        self.passed = _back(x).reshape(-1)
        adv, _ = _advantages_of(out)
        return _flat_output(adv, rewards.size, plan.input, flatten=plan.form in ("grid", "template"))

    def _arguments(self, x: Any, G: int, ids: Any) -> tuple[list[Any], dict[str, Any]]:
        plan = self.plan
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        if plan.rewards_arg:
            kwargs[plan.rewards_arg] = x
        else:
            args.append(x)
        if plan.group_size_arg == "":
            args.append(G)
        elif plan.group_size_arg:
            kwargs[plan.group_size_arg] = G
        if plan.ids_arg:
            kwargs[plan.ids_arg] = _ids_as(ids, plan.ids_input or plan.input)
        return args, kwargs

    def _verl(self, rewards: np.ndarray, ids: Any) -> Any:
        """verl's estimator on the token view of a rollout (:func:`~grpo_identity.checks.frameworks.token_view`:
        unequal lengths, masked holes, the reward on each answer's last token); the advantage of an answer is
        the one on its tokens (they must agree: a finding if not)."""
        import torch

        from grpo_identity.checks.frameworks import token_view

        scores, mask = token_view(rewards)
        x = _convert(scores, "torch", self.plan.reward_dtype)
        index = np.array([f"uid-{i}" for i in np.asarray(ids).reshape(-1)], dtype=object)
        out = self.fn(token_level_rewards=x, response_mask=torch.as_tensor(mask, dtype=torch.float32), index=index)
        self.passed = _back(x).sum(axis=1)
        adv, _ = _advantages_of(out)
        return advantage_per_answer(adv, mask)


def advantage_per_answer(adv: Any, mask: Any) -> Any:
    """One advantage per answer from token advantages (n, T): the one on its first token, where every token
    of the answer carries the same (a ValueError naming the spread if not); 1-D advantages as they are."""
    A = _back(adv) if not isinstance(adv, np.ndarray) else adv.astype(np.float64)
    if getattr(A, "ndim", 1) != 2:
        return adv
    if A.shape != mask.shape:
        raise ValueError(f"the advantages have shape {A.shape}, the token rewards {mask.shape}")
    live = mask > 0
    spread = float(np.abs(np.where(live, A - A[:, :1], 0.0)).max(initial=0.0))
    if spread > 1e-6 * max(float(np.abs(A[live]).max(initial=0.0)), 1e-30):
        raise ValueError(f"the advantages vary over an answer's tokens (by up to {spread:.3g})")
    return adv[:, 0] if hasattr(adv, "__getitem__") else A[:, 0]


def _input_order(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The input kinds to try first: torch first for a function whose module imports torch and not
    numpy (a torch function may also run on numpy arrays, with numpy's semantics), else numpy."""
    names = getattr(fn, "__globals__", None) or getattr(getattr(fn, "func", None), "__globals__", {}) or {}
    modules = {getattr(v, "__name__", "") for v in names.values() if type(v).__name__ == "module"}
    if "torch" in modules and "numpy" not in modules:
        return ("torch", "numpy", "list")
    return INPUTS


def _flat_output(adv: Any, n: int, input: str, flatten: bool = False) -> Any:
    """One value per reward: a grid (n, G) or a column flattened; a list of floats as an array when
    the function works in lists (from an array-taking function a list stays a finding); a list of
    ints as an int array, read where the target's kind is known (a row filter's kept rows' indices,
    ``zero_variance_filter``-style, or its flags: :class:`~grpo_identity.checks.measure.properties.WholeGroups`).
    A 2-D result is flattened only where the call passed 2-D rewards (``flatten``): a function given 1-D rewards
    keeps its shape, which the audit checks."""
    if isinstance(adv, (list, tuple)) and (input == "list" or not adv or isinstance(adv[0], (int, np.integer))):
        if all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in adv):
            return np.asarray(adv, dtype=np.int64)
        return np.asarray(adv, dtype=np.float64 if any(isinstance(v, float) for v in adv) else None)
    if flatten and hasattr(adv, "ndim") and adv.ndim == 2 and int(np.prod(adv.shape)) == n:
        return adv.reshape(-1)
    return adv


def _replace(plan: CallPlan, **changes: Any) -> CallPlan:
    from dataclasses import replace

    return replace(plan, **changes)


def _about_types(exc: BaseException) -> bool:
    """Whether an exception may say the input was of the wrong kind (an attribute or a method the
    input lacks, a type check, an assert on isinstance): only a first call on another kind tells."""
    if isinstance(exc, (TypeError, AttributeError, AssertionError)):
        return True
    text = str(exc).lower()
    return any(word in text for word in ("ndarray", "sub-type", "must be tensor", "not a tensor", "expected tensor"))


def _ids_as(ids: Any, input: str) -> Any:
    """Group ids in the kind the rewards go in: a numpy array, a torch tensor, or a list."""
    ids = np.asarray(ids).reshape(-1)
    if input == "torch" and np.issubdtype(ids.dtype, np.integer):
        import torch

        return torch.as_tensor(ids)
    return ids.tolist() if input == "list" else ids


# --- templates --------------------------------------------------------------------------------------
def _parse_template(text: str) -> ast.Call:
    """A template's call expression (``fn(rewards=R, num_generations=G)``, optionally ``[0]`` or
    ``["advantages"]`` after it); :class:`~grpo_identity.foundation.OptionError` otherwise."""
    from grpo_identity.foundation import OptionError

    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise OptionError("call", f"is no Python call: {exc.msg}") from None
    call = tree.value if isinstance(tree, ast.Subscript) else tree
    if not isinstance(call, ast.Call):
        raise OptionError("call", f"must be a call such as fn(rewards=R, group_size=G), got {text!r}")
    func = call.func
    while isinstance(func, ast.Attribute):
        func = func.value
    if not isinstance(func, ast.Name):
        raise OptionError("call", f"must call the function by its name, got {ast.unparse(call.func)!r}")
    if any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
        raise OptionError("call", "takes named arguments and values, not **mappings or *sequences")
    if isinstance(tree, ast.Subscript):
        try:
            picked = ast.literal_eval(tree.slice)
        except ValueError:
            picked = None
        if not isinstance(picked, (int, str)):
            raise OptionError("call", f'picks the output with [an index] or ["a key"], got [{ast.unparse(tree.slice)}]')
    for node in [*call.args, *(k.value for k in call.keywords)]:
        if isinstance(node, ast.Name) and node.id not in TEMPLATE_NAMES:
            names = ", ".join(f"{k} ({v})" for k, v in TEMPLATE_NAMES.items())
            raise OptionError("call", f"uses {node.id!r}; a template may use {names} and literals")
        if not isinstance(node, ast.Name):
            try:
                ast.literal_eval(node)
            except ValueError:
                raise OptionError("call", f"argument {ast.unparse(node)!r} is neither a name nor a literal") from None
    return call


def _run_template(
    fn: Callable[..., Any], text: str, x: Any, rewards: np.ndarray, G: int, ids: Any, plan: CallPlan
) -> Any:
    tree = ast.parse(text.strip(), mode="eval").body
    call = tree.value if isinstance(tree, ast.Subscript) else tree
    assert isinstance(call, ast.Call)
    ids = np.asarray(ids).reshape(-1)
    from grpo_identity.checks.frameworks import token_view

    token, mask = token_view(rewards)
    names: dict[str, Callable[[], Any]] = {  # built only when the template uses them
        "R": lambda: x,
        "R2": lambda: _convert(rewards.reshape(-1, G), plan.input, plan.reward_dtype),
        "RC": lambda: _convert(rewards.reshape(-1, 1), plan.input, plan.reward_dtype),
        "TR": lambda: _convert(token, plan.input, plan.reward_dtype),
        "MASK": lambda: _convert(mask, plan.input, "float32"),
        "ONES": lambda: _convert(np.ones(1), plan.input, plan.reward_dtype),
        "G": lambda: G,
        "N": lambda: int(np.unique(ids).size),
        "IDS": lambda: _ids_as(ids, plan.input),
        "UIDS": lambda: np.array([f"uid-{i}" for i in ids], dtype=object),
        "ROWS": lambda: list(range(rewards.size)),
    }

    def value(node: ast.expr) -> Any:
        return names[node.id]() if isinstance(node, ast.Name) else ast.literal_eval(node)

    out = fn(*[value(a) for a in call.args], **{k.arg: value(k.value) for k in call.keywords if k.arg})
    if isinstance(tree, ast.Subscript):
        out = out[ast.literal_eval(tree.slice)]
    if _uses(text, "TR"):  # advantages per token: the one on an answer's tokens
        A, _ = _advantages_of(out)
        return advantage_per_answer(A, mask)
    return out


def _uses(template: str, *names: str) -> bool:
    """Whether the template refers to any of ``names``."""
    tree = ast.parse(template.strip(), mode="eval")
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(tree))
