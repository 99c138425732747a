"""``grpo-identity export-tests FRAMEWORK --set … --out test_x.py``: one optimizer step of a configuration against
its loss type's objective, as a pytest file that needs only pytest and the framework's own environment
(:mod:`grpo_identity.checks.export`)."""

from __future__ import annotations

import argparse
import shlex

from grpo_identity.app import progress

HELP = (
    "write a self-contained pytest file that checks one optimizer step of a framework configuration against the "
    "update its loss type's objective defines (for the framework's own test suite)"
)
EPILOG = (
    "Exit codes: 0 written (whether or not the step meets its objective on this release: the message says), "
    "2 usage error (a framework without a test pack, a configuration the framework rejects, advantages no dial "
    "point reproduces, a --out that is not a new or regular .py file)"
)


def configure(p: argparse.ArgumentParser) -> None:
    from grpo_identity.app.commands.audit import add_config_options
    from grpo_identity.checks.export import HARNESSES
    from grpo_identity.checks.options import MAX_TIMEOUT

    p.add_argument("framework", metavar="FRAMEWORK", choices=list(HARNESSES), help=", ".join(HARNESSES))
    add_config_options(p)
    p.add_argument("--release", metavar="VERSION", help="the release to run (an environment of its own, as audit)")
    p.add_argument("--out", required=True, metavar="FILE.py", help="the test file to write (pytest collects test_*.py)")
    p.add_argument(
        "--timeout", type=float, metavar="S", help=f"seconds for loading the framework, at most {MAX_TIMEOUT:g}"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from grpo_identity.app.commands.audit import OPTION_NAMES
    from grpo_identity.app.report import check_out_dir
    from grpo_identity.checks import TargetError, TargetImportError
    from grpo_identity.checks.calls.spec import resolve
    from grpo_identity.checks.export import export_tests
    from grpo_identity.checks.options import AuditOptions, OptionError
    from grpo_identity.foundation import UsageError, emit_json

    if not str(args.out).endswith(".py"):
        raise UsageError(f"--out {args.out}: a test file ends in .py (pytest collects test_*.py)")
    folder = Path(args.out).parent
    if not folder.is_dir():
        raise UsageError(
            f"--out {args.out}: the folder {folder} does not exist (the test file goes into a folder you have)"
        )
    check_out_dir(folder, flag="--out")  # before the audit's work: the file's folder must take a file
    if args.release is not None and not args.release.strip():
        raise UsageError("--release is empty: give a version (e.g. --release 1.16.0), or leave it out")
    try:
        options = AuditOptions(load_timeout=args.timeout, progress=progress.wanted(args))
        spec = resolve(args.framework, sets=args.sets, config=args.config, level="gradient", release=args.release)
        command = "grpo-identity export-tests " + shlex.join(_shown_argv(args))
        exported = export_tests(spec, options, args.out, command)
    except OptionError as exc:
        raise UsageError(exc.worded(OPTION_NAMES)) from None
    except TargetImportError as exc:
        raise UsageError(str(exc)) from None
    except TargetError as exc:  # the framework's step raised, died, hung or answered malformed: no pack to write
        raise UsageError(f"the {args.framework} step could not be run for a test pack: {exc}") from None
    if args.json:
        emit_json(exported.to_dict())
    else:
        print(exported.format())
    return 0


def _shown_argv(args: argparse.Namespace) -> list[str]:
    """The command as typed, secrets' values as ***."""
    from grpo_identity.checks.frameworks import redacted

    out = [args.framework]
    for item in args.sets:
        key, _, value = item.partition("=")
        out += ["--set", f"{key}={redacted(key, value)}"]
    for flag, value in (("--config", args.config), ("--release", args.release), ("--out", args.out)):
        if value is not None:
            out += [flag, str(value)]
    return out
