"""How the processes of an audit end: the one path for a child, its ranks and what either started.

An audit's child (:mod:`grpo_identity.checks.calls.child`) and the data-parallel ranks it forks
(:mod:`grpo_identity.checks.frameworks._ranks`) are each a subreaper (:func:`become_subreaper`), so
whatever they start stays below them, however it detaches; each is ended by :func:`end_tree` (itself,
every descendant, its process group), and what came to the ender is reaped (:func:`reap`; the ranks all at
once: :func:`end_trees`).  A rank also
ends with its parent (:func:`die_with_parent`) and ends what it started before it exits
(:func:`end_descendants`).  Linux reads /proc; elsewhere the process group is all there is.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable

__all__ = [
    "become_subreaper",
    "die_with_parent",
    "descendants",
    "kill_tree",
    "reap",
    "end_tree",
    "end_trees",
    "end_descendants",
]

#: seconds :func:`reap` waits for what was killed to end where this process is its reaper
REAP_SECONDS = 2.0


def become_subreaper() -> None:
    """Linux: orphaned descendants of this process are reparented to it, not to init, so that none escapes
    :func:`kill_tree` by detaching (elsewhere: nothing; the process group is still ended)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def die_with_parent(parent: int | None = None) -> None:
    """Linux: this process gets SIGKILL when its parent exits, so no rank outlives an audit that was stopped;
    where the parent (``parent``, its pid before the fork) is already gone, this process ends at once
    (elsewhere: nothing; the audit's process group is still ended as a whole)."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def descendants(pid: int, dead: bool = False) -> list[int]:
    """Every living descendant of ``pid`` (read from /proc; [] where there is none), deepest last; with ``dead``, also
    the ended ones not yet reaped (zombies)."""
    parents: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        stat = _stat(int(entry)) if entry.isdigit() else None
        if stat is None or (stat[0] in ("Z", "X") and not dead):  # dead already, waiting to be reaped: nothing to end
            continue
        parents.setdefault(stat[1], []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_tree(pid: int, deadline: float = 5.0) -> set[int]:
    """SIGKILL every living descendant of ``pid`` (each stopped first, so that none forks meanwhile), not ``pid``
    itself; again until none is left (one may fork between the reading of /proc and the kill), for at most
    ``deadline`` seconds.  The pids it killed."""
    killed: set[int] = set()
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        found = descendants(pid)
        if not found:
            break
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for p in found:
                try:
                    os.kill(p, sig)
                except OSError:
                    pass
        killed.update(found)
        time.sleep(0.01)
    return killed


def reap(pids: Iterable[int], deadline: float = REAP_SECONDS) -> None:
    """Reap those of ``pids`` that have ended as this process's children (killed processes that came to it, a
    subreaper, when their parent died), waiting for them at most ``deadline`` seconds; a pid is waited for only
    once it is this process's zombie, whose number no other process can take meanwhile."""
    left, end = set(pids), time.monotonic() + deadline
    while left and time.monotonic() < end:
        for p in list(left):
            state = _stat(p)
            if state is None:  # gone: reaped by another
                left.discard(p)
            elif state == ("Z", os.getpid()):
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(p, os.WNOHANG)
                left.discard(p)
        if left:
            time.sleep(0.01)


def _stat(pid: int) -> tuple[str, int] | None:
    """The state and parent of process ``pid`` (/proc), None where there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().decode(errors="replace").rsplit(")", 1)[1].split()  # the name may hold spaces, ")"
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1])


def end_descendants(deadline: float = REAP_SECONDS) -> None:
    """End whatever this process started (:func:`kill_tree`) and reap every child it has, ended before or now, for
    at most ``deadline`` seconds: called by a process about to exit (a rank), whose workers then end with it and
    leave no zombie to its parent (a rank is a subreaper: what its workers started stays below it)."""
    kill_tree(os.getpid())
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                time.sleep(0.01)
        except ChildProcessError:  # no child left
            return


def end_tree(pid: int | None = None) -> set[int]:
    """The one way a process of an audit is ended (a child, a rank, the child itself once its parent is gone): SIGKILL
    for ``pid`` (this process where None), every descendant of it, also one that left its process group (a
    subreaper keeps them below it), and its process group, whose id is its pid (each is a group's leader).  ``pid``
    is stopped first, so that it starts nothing more meanwhile.  ``pid`` must not have been reaped yet (its number
    could be another process's); the caller reaps it, and the descendants it returns (killed, or ended before and
    not yet reaped) where they came to it (:func:`reap`).  Called for this process, it does not return."""
    me = pid is None or pid == os.getpid()
    pid = os.getpid() if pid is None else pid
    if not me:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGSTOP)
    killed = kill_tree(pid) | set(descendants(pid, dead=True))  # what ended before, yet unreaped, is reaped too
    with contextlib.suppress(OSError):
        os.killpg(os.getpgid(0) if me else pid, signal.SIGKILL)  # what it forked, and itself
    if not me:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)  # where it is no group's leader
    return killed


def end_trees(pids: list[int]) -> None:
    """End each of ``pids``, this process's children (:func:`end_tree`), then reap them, the descendants of theirs
    that came to this process, and the members of their process groups that did (a subreaper, as the audit's child
    is; each for at most :data:`REAP_SECONDS`)."""
    killed: set[int] = set()
    for pid in pids:
        killed |= end_tree(pid)
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    reap(killed)
    for pid in pids:
        _reap_group(pid)


def _reap_group(pgid: int) -> None:
    """Reap the members of process group ``pgid`` that are this process's children, once ended, for at most
    :data:`REAP_SECONDS`."""
    if not hasattr(os, "waitid"):
        return
    deadline = time.monotonic() + REAP_SECONDS
    while time.monotonic() < deadline:
        try:
            if os.waitid(os.P_PGID, pgid, os.WEXITED | os.WNOHANG) is None:
                time.sleep(0.01)  # members left, none ended yet: they were sent SIGKILL
        except (ChildProcessError, OSError):
            return  # none of this group is this process's child
