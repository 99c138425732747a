"""``grpo-identity audit TARGET``: infer an advantage implementation's dial and check the identity.

TARGET is ``path/to/file.py:function``, ``package.module:function`` or a built-in adapter name
(``grpo``, ``dr_grpo``, ``rloo``, ``trl``, ``trl:scale_rewards=batch``, ``verl:grpo_vectorized``,
``verl:grpo:norm_adv_by_std_in_grpo=false`` …).  The function is called as
``fn(rewards, group_size)`` in a child process with a timeout.  Exit codes: 0 pass or deviation,
1 fail, 2 usage or import error.
"""

from __future__ import annotations

import argparse

HELP = "audit an advantage function (or group filter) against the identity and the dial's presets"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="TARGET", help="FILE.py:FUNCTION, MODULE:FUNCTION, or an adapter (grpo, trl, trl:scale_rewards=batch, verl:grpo, verl:grpo_vectorized, verl:rloo …)")
    p.add_argument("--kind", choices=["advantage", "filter"], default="advantage", help="advantage: one advantage per reward; filter: one bool per group (True = keep)")
    p.add_argument("--expect", metavar="PRESET", help="expected preset: grpo, dr_grpo, dapo, rloo, trl, verl, openrlhf (default: any)")
    p.add_argument("--max-examples", type=int, default=200, metavar="N", help="hypothesis examples in total (default 200)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S", help="seconds allowed for each call into the target (default 60; importing it: at least 120)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    import sys

    from grpo_identity.dial import preset
    from grpo_identity.foundation import UsageError

    if args.max_examples < 1:
        raise UsageError(f"--max-examples must be >= 1, got {args.max_examples}")
    if not args.timeout > 0:
        raise UsageError(f"--timeout must be > 0, got {args.timeout}")
    if args.expect is not None:
        preset(args.expect)  # one-line ValueError on an unknown name
    from grpo_identity.app.report import emit_json
    from grpo_identity.checks import TargetImportError, audit

    try:
        report = audit(args.target, kind=args.kind, expect=args.expect, max_examples=args.max_examples, timeout=args.timeout, progress=not args.json and sys.stderr.isatty())
    except TargetImportError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        emit_json(report.to_dict())
    else:
        print(report.format())
    return 1 if report.verdict == "fail" else 0
