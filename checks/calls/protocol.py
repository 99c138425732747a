"""The messages between the audit and its child process, and between the child and the ranks it
forks: small frozen records, one per kind.

The parent sends :class:`Load` (a target), then any number of :class:`Call`, then :class:`Unload`
(the child stays up for the next target: a warm child) or :class:`Close`.  The child answers
:class:`Started` once, :class:`Loaded` or :class:`LoadFailed` to a load, :class:`Returned`,
:class:`Raised` or :class:`Malformed` to a call, and :class:`Unloaded` to an unload.  They travel
pickled over a pipe, so both ends must run this same module (a release's environment imports the
project from the running one).  A rank (:mod:`grpo_identity.checks.frameworks._ranks`) answers once,
:class:`RankDone` and its value in one :func:`frame`, read without blocking however the pipe splits it.

>>> Call(__import__("numpy").zeros(2), 2).group_size
2
"""

from __future__ import annotations

import pickle
import struct
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Load",
    "Call",
    "Unload",
    "Close",
    "Started",
    "Loaded",
    "LoadFailed",
    "Returned",
    "Raised",
    "Malformed",
    "Rejected",
    "Unloaded",
    "RankDone",
    "frame",
    "complete",
    "unframe",
]


# --- parent to child -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Load:
    """Load a target: a spec string, a framework spec, or a reference to a callable
    (:func:`grpo_identity.checks.calls.target.reference`), called as ``kind`` says."""

    payload: Any
    kind: str
    path: tuple[str, ...] = ()
    """Folders put first on the child's ``sys.path`` (the target's own folder first)."""
    seed: int = 0
    """Seed of ``random``, numpy's and torch's global generators, set before the target loads
    (torch's again after, if loading imported it)."""
    cwd: str | None = None
    """The caller's working directory (a warm child follows it)."""
    environ: dict[str, str] | None = None
    """The environment the target sees (a warm child takes the caller's current one)."""
    calling: Any = None
    """How to call a user's function (:class:`grpo_identity.checks.calls.calling.CallOptions`), or None:
    ``fn(rewards, G, ...)`` as it is (presets and frameworks are written that way)."""


@dataclass(frozen=True)
class Call:
    """Call the loaded target on ``rewards`` (1-D float64) at ``group_size``, with ``extra`` arguments."""

    rewards: Any
    group_size: int
    extra: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Unload:
    """Drop the loaded target and keep running (the next :class:`Load` starts afresh)."""


@dataclass(frozen=True)
class Close:
    """Exit."""


# --- child to parent -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Started:
    """The interpreter is up: from here on the clock is the target's."""


@dataclass(frozen=True)
class Loaded:
    """The target loaded; ``info`` is its ``grpo_identity_info`` (framework, version, options …)."""

    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LoadFailed:
    """The target could not be loaded (one line)."""

    message: str


@dataclass(frozen=True)
class Returned:
    """A call's output (a numpy array, or a dict of arrays at the gradient level), what was wrong
    with it besides its values (``issue``), and whether it overwrote the previous output."""

    out: Any
    issue: str | None = None
    overwrite: str | None = None
    call: dict[str, Any] | None = None
    """The call plan, when this call settled it (the first call decides how the rewards go in)."""


@dataclass(frozen=True)
class Raised:
    """The target raised (its last traceback line)."""

    message: str


@dataclass(frozen=True)
class Rejected:
    """The function cannot be called as the audit calls it (it takes none of the inputs tried): a
    usage error, as a load that fails."""

    message: str


@dataclass(frozen=True)
class Malformed:
    """The target returned something that is no array of numbers."""

    message: str


@dataclass(frozen=True)
class Unloaded:
    """The target is dropped; the child waits for the next :class:`Load`."""


# --- a rank to the child that forked it (grpo_identity.checks.frameworks._ranks) ------------------
@dataclass(frozen=True)
class RankDone:
    """A rank's answer: whether its work returned (``ok``), when its error happened (``stamp``,
    ``time.monotonic()``; 0 where none) and the modules it imported.  Its value (the result or the
    error) follows it in the same :func:`frame`, pickled on its own: a value that does not pickle, or
    does not unpickle, leaves this answer readable."""

    ok: bool
    stamp: float = 0.0
    modules: tuple[str, ...] = ()


_LENGTHS = struct.Struct("!QQ")


def frame(head: Any, body: bytes) -> bytes:
    """``head`` pickled and ``body`` (pickled already) behind their two lengths: what a rank writes once,
    read back by :func:`unframe` from as many reads as the pipe takes.

    >>> head, body = unframe(frame(RankDone(True), b"x"))
    >>> head, bytes(body)
    (RankDone(ok=True, stamp=0.0, modules=()), b'x')
    >>> complete(frame(RankDone(True), b"x")[:-1])
    False
    """
    pickled = pickle.dumps(head)
    return _LENGTHS.pack(len(pickled), len(body)) + pickled + body


def complete(data: bytes | bytearray) -> bool:
    """Whether every byte of a :func:`frame` has arrived in ``data`` (its two lengths read, nothing unpickled)."""
    if len(data) < _LENGTHS.size:
        return False
    head, body = _LENGTHS.unpack_from(data)
    return len(data) >= _LENGTHS.size + head + body


def unframe(data: bytes | bytearray) -> tuple[Any, memoryview] | None:
    """The head (unpickled) and the body (a view, not a copy) of a :func:`frame` whose bytes have all arrived, else
    None."""
    if not complete(data):
        return None
    head, body = _LENGTHS.unpack_from(data)
    view = memoryview(data)[_LENGTHS.size :]
    return pickle.loads(view[:head]), view[head : head + body]
