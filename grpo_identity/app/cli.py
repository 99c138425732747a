"""The ``grpo-identity`` command line: a thin layer over the library.

Each subcommand lives in :mod:`grpo_identity.app.commands` as a light module with ``HELP``,
``configure(parser)`` and ``run(args) -> int``; heavy imports happen inside ``run``.
Bad input prints one line on stderr and exits 2, never a traceback; a failed check exits 1.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path
from typing import Any, NoReturn, Sequence

from grpo_identity import __version__
from grpo_identity.foundation import EXIT_CODES_HELP, EXIT_OK, EXIT_USAGE, UsageError, missing_extra

#: the exit code of a command stopped by Ctrl-C (128 + SIGINT, as shells report it)
EXIT_INTERRUPTED = 130
#: subcommand name -> module under grpo_identity.app.commands
COMMANDS: dict[str, str] = {
    "closed-forms": "closed_forms",
    "train": "train",
    "audit": "audit",
    "prove": "prove",
    "realdata": "realdata",
    "dapo-fit": "dapo_fit",
    "verify": "verify",
    "render": "render",
    "diagnose": "diagnose",
    "envs": "envs",
    "export-tests": "export_tests",
    "matrix": "matrix",
}

__all__ = ["COMMANDS", "build_parser", "main"]


class _Parser(argparse.ArgumentParser):
    """A parser whose ``--help`` ends with the exit codes and whose errors are one line, exit 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("epilog", EXIT_CODES_HELP)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="grpo-identity",
        description="Proofs, CI checks and evidence for the group-standard-deviation identity of GRPO, Dr. GRPO and "
        "DAPO (arXiv 2607.00152).",
    )
    parser.add_argument("--version", action="version", version=f"grpo-identity {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, module in COMMANDS.items():
        mod = importlib.import_module(f"grpo_identity.app.commands.{module}")
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP, epilog=getattr(mod, "EPILOG", EXIT_CODES_HELP))
        mod.configure(p)
        p.set_defaults(_run=mod.run, _prog=p.prog)  # a nested command (train lm) sets its own _prog
    return parser


def _one_line(exc: BaseException) -> str:
    """The first line of an error's message, file errors as 'reason: path', numpy reprs as plain
    numbers (``np.float64(0.5)`` -> ``0.5``)."""
    if isinstance(exc, MemoryError):
        return "ran out of memory: lower the sizes"
    if isinstance(exc, OSError) and exc.strerror:
        msg = f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    else:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return re.sub(r"\bnp\.\w+\(([^()]*)\)", r"\1", msg)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit code (see :data:`~grpo_identity.foundation.EXIT_CODES_HELP`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a parse error already printed in one line
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if not getattr(args, "command", None):
        parser.print_help()
        return EXIT_USAGE
    args._argv = argv  # so that messages can name the option the user typed
    missing = _missing_folders(getattr(args, "out", None))
    code = _run(args)
    if code in (EXIT_USAGE, EXIT_INTERRUPTED):  # bad input writes nothing: not even the empty --out folder
        _remove_empty(missing)
    return code


def _run(args: argparse.Namespace) -> int:
    prog = getattr(args, "_prog", f"grpo-identity {args.command}")
    try:
        return int(args._run(args) or 0)
    except BrokenPipeError:  # the reader of stdout went away (| head): not an error
        return EXIT_OK
    except (UsageError, ValueError, OSError, MemoryError) as exc:
        print(f"{prog}: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except ImportError as exc:  # an optional dependency that is not installed: name the extra
        hint = missing_extra(exc)
        if hint is None:
            raise
        print(f"{prog}: error: {hint}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _missing_folders(out: Any) -> list[Path]:
    """The folders of ``out`` that do not exist yet, deepest first (a command may create them)."""
    if not isinstance(out, (str, Path)) or not str(out):
        return []
    missing, folder = [], Path(out).absolute()
    while not folder.exists() and folder.parent != folder:
        missing.append(folder)
        folder = folder.parent
    return missing


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:
        try:
            folder.rmdir()  # only if empty
        except OSError:
            return


if __name__ == "__main__":
    sys.exit(main())
