"""The ``grpo-identity`` command line: a thin layer over the library.

Each subcommand lives in :mod:`grpo_identity.app.commands` as a light module with ``HELP``,
``configure(parser)`` and ``run(args) -> int``; heavy imports happen inside ``run``.
Bad input prints one line on stderr and exits 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from grpo_identity import __version__
from grpo_identity.foundation import EXIT_OK, EXIT_USAGE, UsageError, missing_extra

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
}

__all__ = ["COMMANDS", "build_parser", "main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="grpo-identity", description="Proofs, CI checks and evidence for the group-standard-deviation identity of GRPO, Dr. GRPO and DAPO (arXiv 2607.00152).")
    parser.add_argument("--version", action="version", version=f"grpo-identity {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, module in COMMANDS.items():
        mod = importlib.import_module(f"grpo_identity.app.commands.{module}")
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.configure(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args._run(args) or 0)
    except (UsageError, ValueError, FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"grpo-identity {args.command}: error: {msg}", file=sys.stderr)
        return EXIT_USAGE
    except ImportError as exc:  # an optional dependency that is not installed: name the extra
        hint = missing_extra(exc)
        if hint is None:
            raise
        print(f"grpo-identity {args.command}: error: {hint}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"grpo-identity {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
