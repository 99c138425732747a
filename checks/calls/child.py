"""The target in a child interpreter: every load and call has a timeout, nothing outlives the audit.

:class:`ChildProcess` is one interpreter (``python -c``, never multiprocessing's spawn, which
re-runs the caller's ``__main__``) in a session and process group of its own, talking over two
pipes in the named messages of :mod:`grpo_identity.checks.calls.protocol`.  Ending it ends its whole
process group, so whatever the target forked or started goes with it, after a pass, a fail, a
timeout or Ctrl-C alike; and a child whose parent dies (``kill -9``) ends itself within a second.
What the target prints reaches this process's stderr, at most :data:`OUTPUT_LIMIT` bytes of it
per target, never stdout (which carries ``--json``).

:class:`ChildTarget` loads one target into such a process and calls it.  A framework target
(``warm=True``) is loaded into a *warm* child, one kept per interpreter (a release's environment)
across audits of this process: the framework is imported once, and each audit builds its target
afresh (new trainer objects, the global seeds reset), so an audit in a warm child computes what
it computes in a cold one.

>>> with ChildTarget("grpo") as t:
...     t(__import__("numpy").array([1., 0.]), 2).tolist()
[1.0, -1.0]
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from typing import Any, Callable, NoReturn

import numpy as np

from grpo_identity.checks.calls import protocol as M
from grpo_identity.checks.calls.processes import become_subreaper, end_descendants, end_tree
from grpo_identity.checks.calls.target import (
    FILE_MODULE_PREFIX,
    Output,
    OutputWatch,
    Target,
    TargetCrashed,
    TargetError,
    TargetImportError,
    TargetTimeout,
    call_once,
    called_as_written,
    declared_info,
    last_line,
    load_target,
    reference,
    resolve_reference,
    settle,
    target_folder,
)

__all__ = [
    "STARTUP_TIMEOUT",
    "OUTPUT_LIMIT",
    "TEMP_PREFIX",
    "ChildProcess",
    "ChildTarget",
    "warm_children",
    "close_warm_children",
]

#: seconds allowed for the child interpreter to start, before the target loads
STARTUP_TIMEOUT = 120.0
#: seconds a warm child may take to drop its target before it is ended instead
UNLOAD_TIMEOUT = 30.0
#: bytes of a target's output (stdout and stderr) shown per target; the rest is counted
OUTPUT_LIMIT = 64 * 1024
#: idle warm children kept per interpreter, and in all (each holds a framework in memory)
WARM_PER_INTERPRETER = 2
WARM_IN_ALL = 6
#: modules imported since the child last froze (a framework imports thousands) that make it freeze again
FREEZE_AFTER_IMPORTS = 100
#: a warm child's every this many unloads since its last full pass unfreeze, collect and refreeze everything (in
#: between, an unload collects what is not frozen; what died frozen, e.g. what a framework's cache held at the last
#: full pass and a later load replaced, waits for the next)
FULL_COLLECT_EVERY = 8
#: seconds between the child's checks that its parent is still alive
_PARENT_POLL = 0.5
#: one thread for torch, OpenMP and BLAS in the child (two stall on a 2-core machine)
_ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
#: what an audited framework may not reach or leave behind: the Hub, experiment trackers, telemetry (a config
#: with push_to_hub and a token must not create a repository; a logger must not phone home or write a run folder)
OFFLINE = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "WANDB_MODE": "disabled",
    "WANDB_DISABLED": "true",
    "SWANLAB_MODE": "disabled",
    "DISABLE_MLFLOW_INTEGRATION": "TRUE",
    "COMET_MODE": "disabled",
    "DO_NOT_TRACK": "1",
}
#: the variables that point a child's temporary files (and torch's compile caches) into its own folder
_TEMP_VARS = ("TMPDIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "WANDB_DIR")
#: how the name of that folder starts: the only kind of folder a child removes as it ends
TEMP_PREFIX = "grpo-identity-child-"


# --- the child's side ----------------------------------------------------------------------------
def _child_main(read_fd: int, write_fd: int) -> None:
    """Entry point of the child interpreter: serve the parent over two pipes."""
    _Channel(Connection(read_fd, writable=False), Connection(write_fd, readable=False)).serve()


class _Channel:
    """The child's loop: load, call, unload, until Close or the parent goes away."""

    def __init__(self, inbox: Connection, outbox: Connection) -> None:
        self.inbox, self.outbox = inbox, outbox
        self.base_path = list(sys.path)
        self.temp = {k: os.environ[k] for k in _TEMP_VARS if k in os.environ}  # kept through every Load
        tempfile.tempdir = self.temp.get("TMPDIR")
        self.fn: Callable[..., Any] | None = None
        self.kind = "advantage"
        self.watch = OutputWatch()
        self.target_frozen, self.unloads, self.frozen_modules = False, 0, 0

    def serve(self) -> None:
        become_subreaper()
        _own_network()  # before any thread starts: a namespace is taken by a single-threaded process only
        _give_up_tracing()
        temp = self.temp.get("TMPDIR")
        temp = os.path.abspath(temp) if temp else None  # the target may change the working folder
        _watch_parent(os.getppid(), temp)
        self.outbox.send(M.Started())
        while True:
            try:
                msg = self.inbox.recv()
            except (EOFError, OSError):  # the parent is gone
                _end_own_group(temp)
            if isinstance(msg, M.Close):  # the parent removes the folder once this process has ended
                _end_own_group(None)
            self._reply(self._handle(msg))

    def _handle(self, msg: Any) -> Any:
        if isinstance(msg, M.Load):
            return self._load(msg)
        if isinstance(msg, M.Unload):  # collected before the reply: a finalizer that hangs is this target's fault
            self.fn = None
            for name in [n for n in list(sys.modules) if n.startswith(FILE_MODULE_PREFIX)]:  # one copy, at once
                sys.modules.pop(name, None)  # a target file's module dies with it (each load imports its file anew)
            self._collect()
            return M.Unloaded()
        if isinstance(msg, M.Call) and self.fn is not None:
            return self._call(msg)
        return M.Raised(f"unexpected message {type(msg).__name__}")

    def _reply(self, reply: Any) -> None:
        try:
            self.outbox.send(reply)
        except Exception as exc:  # an output that cannot be pickled
            self.outbox.send(M.Malformed(f"returned something that cannot be sent back: {last_line(exc)}"))

    def _load(self, msg: M.Load) -> Any:
        self.fn, self.kind, self.watch, self.target_frozen = None, msg.kind, OutputWatch(), False
        sys.path[:] = list(dict.fromkeys([*msg.path, *self.base_path]))
        if msg.environ is not None:
            os.environ.clear()
            os.environ.update({**msg.environ, **self.temp})
        if msg.cwd is not None and os.path.isdir(msg.cwd):
            os.chdir(msg.cwd)
        _seed(msg.seed)
        had_torch = "torch" in sys.modules
        info: dict[str, Any] = {}
        try:
            fn = (
                resolve_reference(msg.payload) if isinstance(msg.payload, tuple) else load_target(msg.payload, msg.kind)
            )
            info = declared_info(fn)
            self.fn = called_as_written(fn, msg.calling, info, msg.payload)
        except (TargetImportError, ValueError) as exc:
            return M.LoadFailed(str(exc))
        except SystemExit as exc:
            return M.LoadFailed(f"loading the target called sys.exit({exc.code!r})")
        except KeyboardInterrupt:
            return M.LoadFailed("loading the target raised KeyboardInterrupt")
        except Exception as exc:
            return M.LoadFailed(last_line(exc))
        if not had_torch and "torch" in sys.modules:  # the calls start from one state, warm or cold
            sys.modules["torch"].manual_seed(msg.seed)
        # A load while nothing is frozen (the child's first), or once a framework was imported since the last
        # freeze, freezes everything the child holds, the imports and the target: the collector's passes during
        # the calls skip it (half a million objects made each full pass of a TRL audit cost about 0.3 s).  Any
        # other load (a warm child's next audit) leaves its target unfrozen, so that its Unload collects what is
        # not frozen, the target and its garbage, without a full pass (about 0.24 s).
        self.target_frozen = gc.get_freeze_count() == 0 or self._imported()
        if self.target_frozen:
            self._freeze()
        return M.Loaded(info)

    def _imported(self) -> bool:
        """Whether more than :data:`FREEZE_AFTER_IMPORTS` modules were imported since the last freeze (by this
        load, a load that failed, or the calls)."""
        return len(sys.modules) - self.frozen_modules > FREEZE_AFTER_IMPORTS

    def _freeze(self) -> None:
        gc.freeze()
        self.frozen_modules = len(sys.modules)

    def _collect(self) -> None:
        """After Unload: the dropped target collected.  A full pass (everything unfrozen, collected, what
        outlives it refrozen) after a frozen target, after imports of a framework since the last freeze, and at
        every :data:`FULL_COLLECT_EVERY`-th unload since the last full pass; otherwise what is not frozen."""
        self.unloads += 1
        full = self.target_frozen or self._imported() or self.unloads >= FULL_COLLECT_EVERY
        if full:
            gc.unfreeze()
        gc.collect()
        if full:
            self._freeze()
            self.unloads = 0

    def _call(self, msg: M.Call) -> Any:
        assert self.fn is not None
        return call_once(
            self.fn, msg.rewards, msg.group_size, msg.extra, self.kind, self.watch, interrupt_is_finding=True
        )


def _seed(seed: int) -> None:
    """The global generators a target may draw from, set as in a fresh process."""
    import random

    random.seed(seed)
    np.random.seed(seed)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)


def _end_own_group(temp: str | None, code: int = 0) -> NoReturn:
    """End this process and everything it started: its process group, and every descendant that left it (a
    ``setsid``, a ``start_new_session``, a daemon that double-forked: they are reparented to this process, the
    subreaper, and found by :func:`~grpo_identity.checks.calls.processes.descendants`).  Where the parent is gone
    (killed outright, ``kill -9``: it cannot remove the child's temporary folder), ``temp`` is that folder: it is
    removed once the descendants have ended (:func:`_remove_own_temp`)."""
    try:
        with contextlib.suppress(Exception):  # output nobody reads any more: a broken pipe must not stop the end
            sys.stdout.flush()
        if temp is not None:
            end_descendants()
            _remove_own_temp(temp)
        end_tree()
    finally:
        os._exit(code)


def _remove_own_temp(temp: str) -> None:
    """Remove ``temp``, the child's temporary folder, and only a folder named as the parent names them.  It is
    renamed first, so that a thread of this process still running the target (the parent-watch ends the process
    while a call runs) no longer finds it under its ``TMPDIR`` path: its writes then fail instead of refilling it."""
    if not os.path.basename(temp).startswith(TEMP_PREFIX):
        return
    gone = f"{temp}-ended"
    try:
        os.rename(temp, gone)
    except OSError:
        gone = temp
    shutil.rmtree(gone, ignore_errors=True)


def _own_network() -> None:
    """Linux: this process and whatever it starts move to a network namespace of their own that holds only the
    loopback, brought up so that torch.distributed's ranks still meet on it (gloo told to use it); no target can
    reach the network, whatever it sets.  As root the namespace is taken directly; any other user takes it
    inside a user namespace of its own, its effective user and group mapped to themselves (files read and
    written as before; a real uid other than the effective one shows as the overflow uid there, as the kernel
    maps one id only).  A forked copy tries the whole sequence first: where the kernel refuses any step (no
    user namespaces, a seccomp or AppArmor rule), this process is left on the network it had, never in a
    namespace whose loopback is down; elsewhere nothing changes either, and the offline settings still hold."""
    if not hasattr(os, "fork") or not os.path.exists("/proc/self/ns/net"):
        return
    pid = os.fork()
    if pid == 0:  # the trial: exit 0 only where every step went through
        os._exit(0 if _enter_own_network() else 1)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) == 0:
        _enter_own_network()


def _enter_own_network() -> bool:
    """The steps of :func:`_own_network` in this process; whether they all went through."""
    try:
        import ctypes
        import fcntl
        import socket
        import struct

        uid, gid = os.geteuid(), os.getegid()
        flags = 0x40000000 | (0x10000000 if uid != 0 else 0)  # CLONE_NEWNET, and CLONE_NEWUSER when not root
        if ctypes.CDLL("libc.so.6", use_errno=True).unshare(flags) != 0:
            return False
        if uid != 0:
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
                with open(f"/proc/self/{name}", "w") as f:
                    f.write(text)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            ifreq = struct.pack("16sH", b"lo", 0x1 | 0x8 | 0x40)  # IFF_UP | IFF_LOOPBACK | IFF_RUNNING
            fcntl.ioctl(s, 0x8914, ifreq + bytes(40 - len(ifreq)))  # SIOCSIFFLAGS
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        return True
    except (OSError, AttributeError):
        return False


#: Linux's capability that lets a process open another's /proc/PID/fd and memory whatever its dumpable flag
_CAP_SYS_PTRACE = 19


def _give_up_tracing() -> None:
    """Linux: this process, and whatever it runs (an exec included), loses CAP_SYS_PTRACE; with the parent made
    undumpable (:func:`_undumpable`) a target can then no longer open the parent's /proc/PID/fd to write into
    its --json output, not even as root (elsewhere, or where the calls are refused: nothing)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)

        class Header(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

        class Data(ctypes.Structure):
            _fields_ = [
                ("effective", ctypes.c_uint32),
                ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32),
            ]

        libc.prctl(24, _CAP_SYS_PTRACE, 0, 0, 0)  # PR_CAPBSET_DROP: no exec gives it back
        header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words
        if libc.capget(ctypes.byref(header), data) == 0:
            data[0].effective &= ~(1 << _CAP_SYS_PTRACE)
            data[0].permitted &= ~(1 << _CAP_SYS_PTRACE)
            data[0].inheritable &= ~(1 << _CAP_SYS_PTRACE)
            libc.capset(ctypes.byref(header), data)
    except (OSError, AttributeError):
        pass


def _undumpable() -> None:
    """Linux: the auditing process is made undumpable before it starts a child, so that the child (which has given
    up CAP_SYS_PTRACE, :func:`_give_up_tracing`) cannot open its /proc/PID/fd (elsewhere: nothing)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
    except (OSError, AttributeError):
        pass


def _watch_parent(parent: int, temp: str | None) -> None:
    """End this process group, and remove its temporary folder ``temp``, when the parent is gone (it was killed
    before it could end us)."""

    def watch() -> None:
        while True:
            time.sleep(_PARENT_POLL)
            if os.getppid() != parent:
                _end_own_group(temp, 1)

    threading.Thread(target=watch, name="grpo-identity-parent-watch", daemon=True).start()


# --- the parent's side ---------------------------------------------------------------------------
class _Output:
    """Forwards a child's output to this process's stderr, at most :data:`OUTPUT_LIMIT` bytes per
    target, and counts the rest."""

    def __init__(self, stream: Any) -> None:
        self._lock = threading.Lock()
        self._left, self.dropped = OUTPUT_LIMIT, 0
        self._thread = threading.Thread(target=self._run, args=(stream,), name="grpo-identity-output", daemon=True)
        self._thread.start()

    def _run(self, stream: Any) -> None:
        fd = stream.fileno()
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            with self._lock:
                shown = chunk[: self._left]
                self._left -= len(shown)
                self.dropped += len(chunk) - len(shown)
            if shown:
                _write_stderr(shown.decode("utf-8", "replace"))
        stream.close()

    def reset(self) -> int:
        """Bytes dropped since the last reset; the limit starts afresh."""
        with self._lock:
            dropped, self.dropped, self._left = self.dropped, 0, OUTPUT_LIMIT
        return dropped

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


def _write_stderr(text: str) -> None:
    """Write to this process's stderr as it is now; a closed or missing stream drops the text
    (the forwarder must go on draining the pipe, or the child blocks on its next print)."""
    try:
        if sys.stderr is not None:
            sys.stderr.write(text)
            sys.stderr.flush()
    except Exception:
        pass


def child_environ_for(python: str | None) -> dict[str, str]:
    """The environment of a child (under ``python``, a release's interpreter, or this one): this
    process's, not "under pytest" (frameworks branch on it: verl 0.6.0 picks the CPU when
    PYTEST_CURRENT_TEST is set, and the audit must see what the user's run sees), one thread."""
    from grpo_identity.checks.calls.releases import child_environ

    environ = child_environ() if python else dict(os.environ)
    environ.pop("PYTEST_CURRENT_TEST", None)
    environ.update(_ONE_THREAD)
    environ.update(OFFLINE)
    return environ


def _own_path() -> tuple[str, ...]:
    """This interpreter's import path for a child under the same interpreter, without the current folder (a
    ``python -m`` or a test runner puts it there): only the target's own folder may be the caller's."""
    here = os.path.abspath(os.getcwd())
    return tuple(p for p in sys.path if p and os.path.abspath(p) != here)


class ChildProcess:
    """One child interpreter (see the module docstring); ``python``: another interpreter (a
    release's environment), which then finds its own packages first."""

    def __init__(self, python: str | None = None) -> None:
        self.python = python
        self.owner = os.getpid()  # a process forked from this one must not end this child
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        # `python -c` puts the caller's folder first on sys.path: a numpy.py or grpo_identity/ there would be
        # imported instead of the real one; the target's own folder is added back by the Load message
        code = (
            "import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
            f"from grpo_identity.checks.calls.child import _child_main; _child_main({to_child_r}, {from_child_w})"
        )
        self.temp = tempfile.mkdtemp(prefix=TEMP_PREFIX)  # its temporary files, removed when it ends
        environ = {**child_environ_for(python), **dict.fromkeys(_TEMP_VARS, self.temp)}
        try:
            self._proc = self._start(python, code, environ, (to_child_r, from_child_w))
        except BaseException:
            shutil.rmtree(self.temp, ignore_errors=True)
            raise
        os.close(to_child_r)
        os.close(from_child_w)
        self._out = Connection(to_child_w, readable=False)
        self._in = Connection(from_child_r, writable=False)
        self.output = _Output(self._proc.stdout)
        try:
            self.receive(STARTUP_TIMEOUT, "starting the child interpreter")
        except BaseException:  # a timeout, or Ctrl-C while it starts: nothing is left running
            self.end()
            raise

    @staticmethod
    def _start(python: str | None, code: str, environ: dict[str, str], fds: tuple[int, int]) -> Any:
        _undumpable()
        return subprocess.Popen(
            [python or sys.executable, "-c", code],
            pass_fds=fds,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=environ,
            start_new_session=True,  # its own process group: ended as a whole
        )

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None

    def send(self, msg: Any) -> None:
        """Send ``msg``; a child that is gone raises :class:`TargetCrashed`."""
        try:
            self._out.send(msg)
        except (BrokenPipeError, OSError):
            raise TargetCrashed(f"the target's process died (exit code {self.exit_code()})") from None

    def receive(self, timeout: float, what: str) -> Any:
        """The next reply within ``timeout`` seconds; else the process is ended and
        :class:`TargetTimeout` (or :class:`TargetCrashed` when it died) says while doing ``what``
        (a phrase such as "loading the target")."""
        try:
            ready = self._in.poll(timeout)
        except (EOFError, OSError):
            ready = True
        if not ready:
            self.end()
            raise TargetTimeout(f"{what} ran past the {timeout:g} s timeout (killed)")
        try:
            return self._in.recv()
        except (EOFError, OSError):
            code = self.exit_code()
            self.end()
            raise TargetCrashed(f"the target's process died while {what} (exit code {code})") from None

    def exit_code(self, wait: float = 5.0) -> int | None:
        try:
            return self._proc.wait(wait)
        except subprocess.TimeoutExpired:
            return None

    def end(self) -> None:
        """End the child and everything in its process group; close the pipes."""
        if self._proc.poll() is None:
            try:
                self._out.send(M.Close())
                self._proc.wait(0.5)
            except Exception:  # a broken pipe, a child too slow to exit: it is killed below
                pass
        if self._proc.poll() is None:  # still running (never a pid the system may have reused)
            end_tree(self._proc.pid)
        self._proc.wait()
        shutil.rmtree(self.temp, ignore_errors=True)
        for c in (self._out, self._in):
            c.close()
        self.output.join(1.0)


# --- warm children -------------------------------------------------------------------------------
_WARM: dict[str, list[ChildProcess]] = {}
#: idle warm children, the one given back longest ago first
_ORDER: list[ChildProcess] = []
_WARM_LOCK = threading.Lock()


def _take(python: str | None) -> ChildProcess:
    """An idle warm child of ``python``, or a new one."""
    dead = []
    with _WARM_LOCK:
        idle = _WARM.get(python or sys.executable, [])
        proc = None
        while idle:
            candidate = idle.pop()
            if candidate in _ORDER:
                _ORDER.remove(candidate)
            if candidate.alive:
                proc = candidate
                break
            dead.append(candidate)
    for gone in dead:
        gone.end()
    return proc if proc is not None else ChildProcess(python)


def _give(proc: ChildProcess) -> None:
    """Keep ``proc`` for the next audit: at most :data:`WARM_PER_INTERPRETER` per interpreter and
    :data:`WARM_IN_ALL` in all (the one idle longest is ended first)."""
    ended = []
    with _WARM_LOCK:
        idle = _WARM.setdefault(proc.python or sys.executable, [])
        if len(idle) >= WARM_PER_INTERPRETER:
            ended.append(proc)
        else:
            idle.append(proc)
            _ORDER.append(proc)
            while len(_ORDER) > WARM_IN_ALL:
                oldest = _ORDER.pop(0)
                for procs in _WARM.values():
                    if oldest in procs:
                        procs.remove(oldest)
                ended.append(oldest)
    for p in ended:
        p.end()


def warm_children() -> dict[str, int]:
    """Idle warm children by interpreter."""
    with _WARM_LOCK:
        return {k: sum(p.alive for p in v) for k, v in _WARM.items() if v}


def close_warm_children() -> None:
    """End every warm child (at exit, and for tests)."""
    with _WARM_LOCK:
        procs = [p for v in _WARM.values() for p in v]
        _WARM.clear()
        _ORDER.clear()
    for proc in procs:
        if proc.owner == os.getpid():
            proc.end()


atexit.register(close_warm_children)


class ChildTarget(Target):
    """A target loaded into a child process; every call (and the load) has a timeout.

    After a crash or a timeout the child is gone: later calls raise the same error at once, so a
    property search that hits it cannot hang or slow down.  A target that cannot be loaded (it
    fails, hangs, exits or crashes while loading) raises :class:`TargetImportError`.
    """

    def __init__(
        self,
        spec: Any,
        *,
        kind: str = "advantage",
        timeout: float = 60.0,
        load_timeout: float | None = None,
        name: str | None = None,
        python: str | None = None,
        warm: bool = False,
        seed: int = 0,
        calling: Any = None,
    ) -> None:
        self.name = str(name or (spec if isinstance(spec, str) else getattr(spec, "__qualname__", repr(spec))))
        self.timeout = float(timeout)
        self.kind = kind
        self.calls = 0
        self.dead: TargetError | None = None
        self._warm, self._closed = warm, False
        payload = reference(spec) if callable(spec) else spec
        folder = target_folder(spec)
        path = ((folder,) if folder else ()) + (() if python else _own_path())
        self._proc = _take(python) if warm else ChildProcess(python)
        load = M.Load(payload, kind, path, seed, cwd=os.getcwd(), environ=child_environ_for(python), calling=calling)
        try:
            self.info = self._load(load, load_timeout)
        except TargetImportError:
            raise
        except BaseException:  # Ctrl-C while it loads: nothing is left running
            self._end()
            raise

    def _load(self, msg: M.Load, load_timeout: float | None) -> dict[str, Any]:
        what = "loading the target"
        try:
            self._proc.send(msg)
        except TargetCrashed as exc:
            self._end()
            raise TargetImportError(str(exc)) from None
        except Exception as exc:  # a callable that cannot be pickled
            self._end()
            raise TargetImportError(f"cannot send the target to a child process: {last_line(exc)}") from None
        try:
            reply = self._proc.receive(self.timeout if load_timeout is None else float(load_timeout), what)
        except TargetError as exc:
            self._closed = True
            raise TargetImportError(str(exc)) from None
        if isinstance(reply, M.LoadFailed):
            self.close()
            raise TargetImportError(reply.message)
        return dict(reply.info)

    def call(self, rewards: np.ndarray, group_size: int, *extra: Any) -> Output:
        if self.dead is not None:
            raise type(self.dead)(str(self.dead))
        self.calls += 1
        try:
            self._proc.send(M.Call(np.ascontiguousarray(rewards), int(group_size), extra))
            reply = self._proc.receive(self.timeout, "calling the target")
        except TargetError as exc:
            self.dead = exc
            raise
        return settle(self, reply)

    def close(self) -> None:
        """Drop the target: a warm child goes back for the next audit, any other child ends."""
        if self._closed:
            return
        self._closed = True
        dropped = self._proc.output.reset()
        if dropped and sys.stderr is not None:
            print(f"[{dropped:,} more bytes of the target's output not shown]", file=sys.stderr)
        if self._warm and self.dead is None and self._proc.alive:
            try:
                self._proc.send(M.Unload())
                if isinstance(self._proc.receive(UNLOAD_TIMEOUT, "dropping the target"), M.Unloaded):
                    _give(self._proc)
                    return
            except TargetError:  # a child that cannot drop its target is not reused
                pass
            except BaseException:  # Ctrl-C meanwhile: nothing is left running
                self._proc.end()
                raise
        self._proc.end()

    def _end(self) -> None:
        self._closed = True
        self._proc.end()

    def __enter__(self) -> ChildTarget:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is not None:  # Ctrl-C or an error of the audit's own: nothing is reused
            self._end()
        else:
            self.close()
