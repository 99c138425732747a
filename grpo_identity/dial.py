"""The dial: the one advantage implementation of the project, with named presets.

A :class:`Dial` is a point in the family of group-relative advantages

    Âᵢ = (Rᵢ − centreᵢ) / (scale + eps),  groups kept by ``keep``,

with ``centre`` ∈ {group ``mean``, leave-one-out ``loo``, ``none``}, ``scale`` ∈ {``group_std``,
``batch_std``, ``none``}, the std's ``ddof`` ∈ {0, 1} and the keep rule ∈ {``all``,
``nonzero_std``}.  GRPO divides by σ, Dr. GRPO drops the division, DAPO discards the groups
with σ = 0 (PAPER §The three methods): three settings of one dial.

:func:`advantages` works on numpy arrays and torch tensors (torch is imported only when a tensor
is given).  Silent groups (all rewards equal) give exactly 0, never NaN.  :func:`coefficient`
gives the update coefficient c in g = c·(s̄₊ − s̄₋) for any dial; it is tested against
:func:`grpo_identity.formulas.update_coefficient`.

>>> import numpy as np
>>> advantages(np.array([1., 0., 0., 0.,  1., 1., 1., 1.]), 4, GRPO).round(4)
array([ 1.7321, -0.5774, -0.5774, -0.5774,  0.    ,  0.    ,  0.    ,  0.    ])
>>> float(coefficient(2, 4, GRPO)), float(coefficient(2, 4, DR_GRPO))
(0.5, 0.25)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Mapping

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:  # for annotations only: the dial imports torch when it is handed a tensor
    import torch

from grpo_identity._validate import check_group_size, check_num_correct
from grpo_identity.closed_forms import sigma

__all__ = [
    "Dial",
    "GRPO",
    "DR_GRPO",
    "DAPO",
    "RLOO",
    "TRL",
    "VERL",
    "OPENRLHF",
    "PRESETS",
    "preset",
    "advantages",
    "keep_mask",
    "coefficient",
    "group_updates",
    "score_gap",
    "is_torch",
]

Centre = Literal["mean", "loo", "none"]
Scale = Literal["group_std", "batch_std", "none"]
Keep = Literal["all", "nonzero_std"]
EpsWhere = Literal["std", "variance"]
_CENTRES = ("mean", "loo", "none")
_SCALES = ("group_std", "batch_std", "none")
_KEEPS = ("all", "nonzero_std")
_EPS_WHERE = ("std", "variance")


@dataclass(frozen=True)
class Dial:
    """One point of the advantage family; every convention is a named parameter.

    The family is Âᵢ = (Rᵢ − centreᵢ)/(scale + ε), with the groups that the keep rule drops set
    to 0; GRPO, Dr. GRPO and DAPO are three settings of it (PAPER §The three methods), and the
    presets (:data:`GRPO`, :data:`DR_GRPO`, :data:`DAPO`, :data:`RLOO`, :data:`TRL`, …) name the
    settings of papers and frameworks.  Frozen: :meth:`replace` gives a changed copy.

    Parameters
    ----------
    centre : {"mean", "loo", "none"}
        Baseline subtracted from each reward: the group mean, the mean of the other G − 1
        rewards (leave-one-out), or nothing.
    scale : {"group_std", "batch_std", "none"}
        Divisor: the group's std, the whole batch's std, or nothing (Dr. GRPO, RLOO).
    ddof : {0, 1}
        Delta degrees of freedom of the std: 0 the population std (the paper's σ), 1 Bessel's
        (torch's default).
    eps : float
        ε ≥ 0 added to the divisor (ignored when ``scale="none"``); see ``eps_where``.
    keep : {"all", "nonzero_std"}
        Which groups keep their advantages: all, or only those with nonzero std (DAPO's dynamic
        sampling).
    eps_where : {"std", "variance"}
        Where ε goes: std + ε (TRL, verl, OpenRLHF) or √(var + ε) (whitening).
    name : str
        Preset name, for reports (``"custom"`` for a dial of one's own).
    citation : str
        Where the convention comes from, one line.

    Raises
    ------
    ValueError
        A parameter outside its values, or ε negative or not finite.

    Examples
    --------
    >>> import numpy as np
    >>> trl_like = Dial(ddof=1, eps=1e-4)
    >>> trl_like.same_point(TRL), trl_like.name
    (True, 'custom')
    >>> advantages(np.array([1., 0., 0., 0.]), 4, trl_like).round(4)
    array([ 1.4997, -0.4999, -0.4999, -0.4999])
    >>> GRPO.replace(keep="nonzero_std").same_point(DAPO)
    True
    >>> Dial(centre="median")
    Traceback (most recent call last):
    ...
    ValueError: centre must be one of ('mean', 'loo', 'none'), got 'median'
    """

    centre: Centre = "mean"
    """Baseline subtracted from each reward: group ``mean``, leave-one-out ``loo`` or ``none``."""
    scale: Scale = "group_std"
    """Divisor: the group's std, the whole batch's std, or ``none``."""
    ddof: int = 0
    """Delta degrees of freedom of the std: 0 (population, the paper's σ) or 1 (Bessel, torch's default)."""
    eps: float = 0.0
    """Added to the std before dividing (ignored when ``scale='none'``); see ``eps_where``."""
    keep: Keep = "all"
    """Which groups are kept: ``all``, or only those with nonzero std (DAPO's dynamic sampling)."""
    eps_where: EpsWhere = "std"
    """Where ε goes: added to the std, std + ε (TRL, verl, OpenRLHF), or under the root, √(var + ε) (whitening)."""
    name: str = "custom"
    """Preset name, for reports."""
    citation: str = ""
    """Where the convention comes from, one line."""

    def __post_init__(self) -> None:
        if self.centre not in _CENTRES:
            raise ValueError(f"centre must be one of {_CENTRES}, got {self.centre!r}")
        if self.scale not in _SCALES:
            raise ValueError(f"scale must be one of {_SCALES}, got {self.scale!r}")
        if self.ddof not in (0, 1) or isinstance(self.ddof, bool):
            raise ValueError(f"ddof must be 0 or 1, got {self.ddof!r}")
        if not (isinstance(self.eps, (int, float)) and math.isfinite(self.eps) and self.eps >= 0):
            raise ValueError(f"eps must be a finite number >= 0, got {self.eps!r}")
        if self.keep not in _KEEPS:
            raise ValueError(f"keep must be one of {_KEEPS}, got {self.keep!r}")
        if self.eps_where not in _EPS_WHERE:
            raise ValueError(f"eps_where must be one of {_EPS_WHERE}, got {self.eps_where!r}")

    def replace(self, **changes: Any) -> Dial:
        """A copy with some parameters changed (named ``custom`` unless a name is given)."""
        changes.setdefault("name", "custom")
        changes.setdefault("citation", "")
        return dataclasses.replace(self, **changes)

    def params(self) -> dict[str, Any]:
        """The dial parameters as a dict (no name, no citation)."""
        return {
            "centre": self.centre,
            "scale": self.scale,
            "ddof": self.ddof,
            "eps": self.eps,
            "keep": self.keep,
            "eps_where": self.eps_where,
        }

    def same_point(self, other: Dial) -> bool:
        """Whether two dials compute the same advantages (names ignored)."""
        return self.params() == other.params()


GRPO = Dial(name="grpo", citation="Shao et al. 2024 (DeepSeekMath), eq. for outcome supervision; population std")
DR_GRPO = Dial(
    scale="none", name="dr_grpo", citation="Liu et al. 2025 (Understanding R1-Zero-Like Training), drops the std"
)
DAPO = Dial(keep="nonzero_std", name="dapo", citation="Yu et al. 2025 (DAPO), dynamic sampling drops groups with std 0")
RLOO = Dial(
    centre="loo", scale="none", name="rloo", citation="Ahmadian et al. 2024 (Back to Basics), leave-one-out baseline"
)
TRL = Dial(ddof=1, eps=1e-4, name="trl", citation="TRL GRPOTrainer: (r - mean) / (std + 1e-4), torch std (ddof 1)")
VERL = Dial(
    ddof=1,
    eps=1e-6,
    name="verl",
    citation="verl core_algos.compute_grpo_outcome_advantage: epsilon 1e-6, torch.std (ddof 1)",
)
OPENRLHF = Dial(
    ddof=1,
    eps=1e-9,
    name="openrlhf",
    citation="OpenRLHF experience maker, group_norm: (r - mean) / (std + 1e-9), ddof 1",
)

#: every named preset, by name
PRESETS: Mapping[str, Dial] = {d.name: d for d in (GRPO, DR_GRPO, DAPO, RLOO, TRL, VERL, OPENRLHF)}


def preset(name: str) -> Dial:
    """The preset called ``name`` (case-insensitive; '-' and ' ' read as '_')."""
    key = name.strip().lower().replace("-", "_").replace(" ", "_").replace(".", "")
    if key not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}")
    return PRESETS[key]


# --- array backends: the same algorithm on numpy and torch ------------------------------------
def is_torch(x: Any) -> bool:
    """Whether ``x`` is a torch object (a tensor), told without importing torch."""
    return type(x).__module__.split(".")[0] == "torch"


class _Numpy:
    @staticmethod
    def as_float(x: Any) -> tuple[Any, Any]:
        x = np.asarray(x)
        out_dtype = x.dtype if np.issubdtype(x.dtype, np.floating) else np.dtype(np.float64)
        work = np.float32 if out_dtype == np.float16 else out_dtype
        return x.astype(work, copy=False), out_dtype

    all_finite = staticmethod(lambda x: bool(np.isfinite(x).all()))
    mean = staticmethod(lambda x: x.mean(axis=-1, keepdims=True))
    sum = staticmethod(lambda x: x.sum(axis=-1, keepdims=True))
    max = staticmethod(lambda x: x.max(axis=-1, keepdims=True))
    min = staticmethod(lambda x: x.min(axis=-1, keepdims=True))
    sqrt = staticmethod(np.sqrt)
    where = staticmethod(np.where)
    cast = staticmethod(lambda x, dtype: x.astype(dtype, copy=False))
    empty_like = staticmethod(np.empty_like)


class _Torch:
    @staticmethod
    def as_float(x: Any) -> tuple[Any, Any]:
        import torch

        out_dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
        work = torch.float32 if out_dtype in (torch.float16, torch.bfloat16) else out_dtype
        return x.to(work), out_dtype

    all_finite = staticmethod(lambda x: bool(x.isfinite().all()))
    mean = staticmethod(lambda x: x.mean(dim=-1, keepdim=True))
    sum = staticmethod(lambda x: x.sum(dim=-1, keepdim=True))
    max = staticmethod(lambda x: x.amax(dim=-1, keepdim=True))
    min = staticmethod(lambda x: x.amin(dim=-1, keepdim=True))

    @staticmethod
    def sqrt(x: Any) -> Any:
        return x.sqrt()

    @staticmethod
    def where(c: Any, a: Any, b: Any) -> Any:
        import torch

        return torch.where(c, a, b)

    cast = staticmethod(lambda x, dtype: x.to(dtype))

    @staticmethod
    def empty_like(x: Any) -> Any:
        import torch

        return torch.empty_like(x)


def _grouped(rewards: Any, group_size: int | None, group_ids: Any) -> tuple[Any, Any, int, Any, Any, tuple[int, ...]]:
    """Validate and reshape rewards to (n_groups, G); return what is needed to undo it."""
    xp = _Torch if is_torch(rewards) else _Numpy
    x, out_dtype = xp.as_float(rewards)
    shape = tuple(x.shape)
    if not xp.all_finite(x):
        bad = [float(v) for v in x.reshape(-1).tolist() if not math.isfinite(float(v))][:1]
        raise ValueError(f"rewards must be finite, got {bad[0]!r}")
    perm = None
    if group_ids is not None:
        if len(shape) != 1:
            raise ValueError(f"with group_ids, rewards must be 1-D, got shape {shape}")
        ids = np.asarray(group_ids.cpu() if is_torch(group_ids) else group_ids).reshape(-1)
        if ids.shape[0] != shape[0]:
            raise ValueError(f"group_ids has length {ids.shape[0]} but rewards has length {shape[0]}")
        _, counts = np.unique(ids, return_counts=True)
        if counts.min() != counts.max():
            raise ValueError(f"every group must have the same size, got sizes from {counts.min()} to {counts.max()}")
        inferred = int(counts[0])
        if group_size is not None and check_group_size(group_size) != inferred:
            raise ValueError(f"group_size {group_size} does not match the group_ids' group size {inferred}")
        group_size = check_group_size(inferred)
        perm = np.argsort(ids, kind="stable")
        if xp is _Torch:
            import torch

            perm = torch.as_tensor(perm, device=x.device)
        x = x[perm]
    if group_size is None:
        if len(shape) != 2:
            raise ValueError("group_size is required unless rewards are 2-D (n_groups, G) or group_ids are given")
        group_size = shape[1]
    G = check_group_size(group_size)
    n = 1
    for d in shape:
        n *= int(d)
    if n == 0 or n % G:
        raise ValueError(f"rewards length {n} is not a positive multiple of group size {G}")
    if len(shape) == 2 and shape[1] != G:
        raise ValueError(f"2-D rewards have groups of {shape[1]}, but group_size is {G}")
    return xp, x.reshape(n // G, G), G, perm, out_dtype, shape


def _ungroup(xp: Any, a: Any, perm: Any, out_dtype: Any, shape: tuple[int, ...]) -> Any:
    flat = a.reshape(-1)
    if perm is not None:
        out = xp.empty_like(flat)
        out[perm] = flat
        flat = out
    return xp.cast(flat.reshape(shape), out_dtype)


def _divisor(xp: Any, variance: Any, dial: Dial) -> Any:
    """std + ε, or √(variance + ε), from a variance computed with the dial's ddof."""
    return xp.sqrt(variance) + dial.eps if dial.eps_where == "std" else xp.sqrt(variance + dial.eps)


def advantages(
    rewards: npt.ArrayLike | torch.Tensor,
    group_size: int | None = None,
    dial: Dial = GRPO,
    *,
    group_ids: npt.ArrayLike | torch.Tensor | None = None,
) -> npt.NDArray[np.floating[Any]] | torch.Tensor:
    """Group-relative advantages Âᵢ = (Rᵢ − centreᵢ)/(scale + eps) at one point of the dial.

    Silent groups (all rewards equal) get exactly 0 when the dial centres or scales by the
    group; groups the keep rule drops get 0 too (see :func:`keep_mask`).  GRPO: Theorem 1; the
    presets: PAPER §The three methods.  The same code runs on numpy arrays and torch tensors
    (torch is imported only when a tensor is given).

    Parameters
    ----------
    rewards : array_like or torch.Tensor
        Finite rewards: a 1-D array of n_groups × G rewards laid out group by group, a 2-D
        (n_groups, G) array, or a 1-D array in any order together with ``group_ids``.
    group_size : int, optional
        G ≥ 2; may be left out for 2-D rewards and with ``group_ids``.
    dial : Dial
        The convention (default :data:`GRPO`).
    group_ids : array_like or torch.Tensor, optional
        One id per reward of 1-D ``rewards``: the rewards with one id form a group.  Groups may
        differ in size (answers filtered out, rollouts aborted); a group of one answer has σ = 0
        and gets 0, like any silent group.

    Returns
    -------
    numpy.ndarray or torch.Tensor
        Âᵢ for each reward, in the order of ``rewards``, with their shape, array type, device and
        floating dtype (integer rewards give float64, or torch's default dtype).

    Raises
    ------
    ValueError
        Rewards that are not finite, or that do not split into equal groups of ``group_size``.

    Examples
    --------
    >>> import numpy as np
    >>> advantages(np.array([1., 1., 0., 0.]), 4, DR_GRPO)
    array([ 0.5,  0.5, -0.5, -0.5])
    >>> advantages(np.array([[1., 0., 0.], [1., 1., 1.]]), dial=GRPO).round(4)  # the second group is silent
    array([[ 1.4142, -0.7071, -0.7071],
           [ 0.    ,  0.    ,  0.    ]])
    >>> advantages(np.array([1., 0., 1., 1.]), group_ids=[7, 7, 3, 3])  # groups {0, 1} and {2, 3}
    array([ 1., -1.,  0.,  0.])
    >>> advantages(np.array([1., 0., 0., 5.]), dial=DR_GRPO, group_ids=[1, 1, 1, 2])  # sizes 3 and 1
    array([ 0.66666667, -0.33333333, -0.33333333,  0.        ])
    """
    if group_ids is not None and _ragged(group_ids):
        return _ragged_advantages(rewards, group_ids, dial)
    xp, R, G, perm, out_dtype, shape = _grouped(rewards, group_size, group_ids)
    silent = xp.max(R) == xp.min(R)  # (n, 1): exact test, immune to rounding in the mean
    mean = xp.mean(R)
    if dial.centre == "mean":
        A = R - mean
    elif dial.centre == "loo":
        A = R - (xp.sum(R) - R) / (G - 1)
    else:
        A = R
    if dial.scale == "group_std":
        denom = _divisor(xp, xp.sum((R - mean) ** 2) / (G - dial.ddof), dial)
        A = xp.where(silent, A - A, A / xp.where(denom > 0, denom, 1.0 + (denom - denom)))
    elif dial.scale == "batch_std":
        flat = R.reshape(1, -1)
        denom = _divisor(xp, xp.sum((flat - xp.mean(flat)) ** 2) / (flat.shape[-1] - dial.ddof), dial)
        A = A / denom if float(denom.reshape(-1)[0]) > 0 else A - A
    if dial.centre != "none":
        A = xp.where(silent, A - A, A)  # exactly (+)zero, whatever the rounding of the centre
    if dial.keep == "nonzero_std":
        A = xp.where(silent, A - A, A)
    return _ungroup(xp, A, perm, out_dtype, shape)


def _ids(group_ids: Any) -> np.ndarray:
    return np.asarray(group_ids.cpu() if is_torch(group_ids) else group_ids).reshape(-1)


def _ragged(group_ids: Any) -> bool:
    """Whether the groups ``group_ids`` form differ in size (or are all lone answers)."""
    _, counts = np.unique(_ids(group_ids), return_counts=True)
    return bool(counts.size) and (counts.min() != counts.max() or counts.max() == 1)


def _ragged_advantages(rewards: Any, group_ids: Any, dial: Dial) -> Any:
    """:func:`advantages` over groups of different sizes: each group on its own (a group of one
    answer is silent: 0), a batch std over every reward."""
    xp = _Torch if is_torch(rewards) else _Numpy
    x, out_dtype = xp.as_float(rewards)
    ids = _ids(group_ids)
    if x.ndim != 1 or ids.shape[0] != x.shape[0]:
        raise ValueError(f"with group_ids, rewards must be 1-D of one reward per id, got shape {tuple(x.shape)}")
    own = dial.replace(scale="none") if dial.scale == "batch_std" else dial
    out = x - x
    for u in np.unique(ids):
        idx = np.flatnonzero(ids == u)
        if idx.size > 1:  # a lone answer keeps its 0
            out[idx] = advantages(x[idx], int(idx.size), own)
    if dial.scale == "batch_std":
        flat = x.reshape(1, -1)
        denom = _divisor(xp, xp.sum((flat - xp.mean(flat)) ** 2) / (flat.shape[-1] - dial.ddof), dial)
        scale = denom.reshape(-1)[0]
        out = out / scale if float(scale) > 0 else out - out
    return xp.cast(out, out_dtype)


def keep_mask(
    rewards: Any, group_size: int | None = None, dial: Dial = DAPO, *, group_ids: Any = None
) -> npt.NDArray[np.bool_]:
    """One bool per group (in group order): True where the dial's keep rule keeps the group.

    With ``group_ids``, groups are ordered by sorted id.

    >>> import numpy as np
    >>> keep_mask(np.array([1., 1., 0., 1.]), 2, DAPO)
    array([False,  True])
    """
    xp, R, _, _, _, _ = _grouped(rewards, group_size, group_ids)
    silent = xp.max(R) == xp.min(R)
    silent_np = np.asarray(silent.cpu() if xp is _Torch else silent).reshape(-1)
    if dial.keep == "all":
        return np.ones_like(silent_np, dtype=bool)
    return ~silent_np


def coefficient(
    k: npt.ArrayLike, G: int, dial: Dial = GRPO, *, batch_std: float | None = None
) -> float | npt.NDArray[np.float64]:
    """Update coefficient c(k, G; dial) in g = c·(s̄₊ − s̄₋) for binary rewards.

    c = (k/G)·Â₊: GRPO σ; Dr. GRPO σ²; DAPO 1{0<k<G}·σ; ddof 1 √((G−1)/G)·σ; ε added to the std
    σ²/(σ+ε) (under the root: σ²/√(σ²+ε)); RLOO G/(G−1)·σ²; batch std σ²/σ_batch.  0 for
    k ∈ {0, G}.  Twin of :func:`grpo_identity.formulas.update_coefficient` (Theorem 1, T6, G2–G4).

    Parameters
    ----------
    k : int or array_like of int
        Correct answers in the group, 0 ≤ k ≤ G.
    G : int
        Group size, G ≥ 2.
    dial : Dial
        A centred dial (``centre`` ``"mean"`` or ``"loo"``); default :data:`GRPO`.
    batch_std : float, optional
        The batch's reward std, > 0: needed by a ``scale="batch_std"`` dial, read by no other.

    Returns
    -------
    float or numpy.ndarray
        c: a float for a scalar ``k``, else a float64 array of the shape of ``k``.

    Raises
    ------
    ValueError
        An uncentred dial (its g is no multiple of s̄₊ − s̄₋), a batch-std dial without
        ``batch_std > 0``, or k outside 0…G.

    Examples
    --------
    >>> coefficient(2, 4, GRPO), coefficient(2, 4, DR_GRPO)  # σ = 1/2 and σ² = 1/4 at k/G = 1/2
    (0.5, 0.25)
    >>> coefficient([0, 1, 2, 3, 4], 4, DAPO).round(4)  # 0 for the silent groups k = 0 and k = G
    array([0.   , 0.433, 0.5  , 0.433, 0.   ])
    >>> round(coefficient(1, 2, RLOO), 12)
    0.5
    """
    G = check_group_size(G)
    kk = check_num_correct(k, G)
    if dial.centre == "none":
        raise ValueError("an uncentred dial has no update coefficient: g is not a multiple of (s̄₊ − s̄₋)")
    sig = np.asarray(sigma(kk, G))
    centred = (G - kk) / G if dial.centre == "mean" else (G - kk) / (G - 1)
    if dial.scale == "group_std":
        scale = _divisor(_Numpy, G / (G - dial.ddof) * sig**2, dial)
    elif dial.scale == "batch_std":
        if batch_std is None or not batch_std > 0:
            raise ValueError(f"a batch-std dial needs batch_std > 0, got {batch_std!r}")
        scale = np.full_like(sig, _divisor(_Numpy, batch_std**2, dial))
    else:
        scale = np.ones_like(sig)
    live = (kk > 0) & (kk < G)
    c = np.where(live, (kk / G) * centred / np.where(live, scale, 1.0), 0.0)
    return float(c) if np.ndim(c) == 0 else c


def _rows(scores: Any) -> Any:
    s = scores if is_torch(scores) else np.asarray(scores, dtype=np.float64)
    return s.reshape(s.shape[0], -1)


def group_updates(advantages_: Any, scores: Any, group_size: int) -> Any:
    """Per-group update g = (1/G) Σᵢ Âᵢ sᵢ for scores of any dimension.

    ``scores`` has one row per answer (n_groups × G rows, any trailing shape); returns
    (n_groups, D) with D the flattened score dimension.
    """
    G = check_group_size(group_size)
    s = _rows(scores)
    a = (
        advantages_.reshape(-1, 1)
        if is_torch(advantages_)
        else np.asarray(advantages_, dtype=np.float64).reshape(-1, 1)
    )
    if s.shape[0] != a.shape[0]:
        raise ValueError(f"scores have {s.shape[0]} rows but there are {a.shape[0]} advantages")
    return (a * s).reshape(-1, G, s.shape[1]).sum(1) / G


def score_gap(rewards: Any, scores: Any, group_size: int) -> Any:
    """Per-group s̄₊ − s̄₋ for binary rewards (zero rows for silent groups), shape (n_groups, D)."""
    G = check_group_size(group_size)
    s = _rows(scores)
    if is_torch(s):
        r = rewards.reshape(-1, G, 1).to(s.dtype)
    else:
        r = np.asarray(rewards, dtype=np.float64).reshape(-1, G, 1)
    s3 = s.reshape(-1, G, s.shape[1])
    k = r.sum(1)
    pos = (r * s3).sum(1)
    neg = ((1 - r) * s3).sum(1)
    live = (k > 0) & (k < G)
    safe_k = k * live + (1 - live * 1)  # 1 where not live, k otherwise
    safe_m = (G - k) * live + (1 - live * 1)
    return (pos / safe_k - neg / safe_m) * live
