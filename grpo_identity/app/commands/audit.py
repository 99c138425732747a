"""``grpo-identity audit TARGET``: infer an advantage implementation's dial and check the identity.

TARGET is ``path/to/file.py:function``, ``package.module:function``, a preset (``grpo``,
``dr_grpo`` …) or a framework configured as its users configure it::

    grpo-identity audit trl --set loss_type=dr_grpo --set scale_rewards=none   # the gradient, then the advantages
    grpo-identity audit verl --set algorithm.adv_estimator=grpo --set algorithm.norm_adv_by_std_in_grpo=false --expect dr_grpo
    grpo-identity audit verl:estimator=grpo_vectorized      # the estimator function alone (bypasses the trainer)

The target runs in a child process with a timeout (loading it too).  Exit codes: 0 pass or
deviation, 1 fail, 2 usage error (a bad option, a target that cannot be loaded, a configuration
the framework rejects).
"""

from __future__ import annotations

import argparse
import os

HELP = "audit an advantage function (or group filter) against the identity and the dial's presets"
#: default seconds per call into the target, and for loading one (a framework's import and
#: trainer build take minutes on a busy machine); an explicit --timeout sets both
CALL_TIMEOUT = 60.0
FRAMEWORK_LOAD_TIMEOUT = 600.0


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "target",
        metavar="TARGET",
        help="FILE.py:FUNCTION, MODULE:FUNCTION, a preset (grpo, dr_grpo …; preset:NAME), or a framework: trl, verl, areal, openrlhf (with --set), verl:estimator=NAME (the estimator function alone)",
    )
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a framework config key as the framework names it (TRL GRPOConfig: loss_type=dr_grpo; verl: algorithm.adv_estimator=grpo); repeatable, later ones win",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="a framework config file (YAML), read as the framework reads it; --set overrides it",
    )
    from grpo_identity.checks.frameworks import LEVELS  # standard library only at import

    p.add_argument(
        "--level",
        choices=list(LEVELS),
        help="gradient (the default for framework targets): the gradient of the framework's own loss on completions of different lengths, then the advantage audit of the same run; advantage: the advantages alone (faster; the default for functions and presets)",
    )
    p.add_argument(
        "--release",
        metavar="VERSION",
        help="audit this release of the framework in a cached environment of its own ($GRPO_IDENTITY_ENVS, else ~/.cache/grpo-identity/envs); a framework not installed here gets its tested release that way by default",
    )
    p.add_argument("--releases", metavar="A,B,C", help="audit several releases: one line per release")
    p.add_argument(
        "--kind",
        choices=["advantage", "filter"],
        default="advantage",
        help="advantage: one advantage per reward; filter: one bool per group (True = keep)",
    )
    p.add_argument(
        "--expect",
        metavar="PRESET",
        help="expected preset: grpo, dr_grpo, dapo, rloo, trl, verl, openrlhf (default: any)",
    )
    p.add_argument(
        "--max-examples", type=int, default=200, metavar="N", help="hypothesis examples in total (default 200)"
    )
    p.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help=f"seconds allowed for loading the target and for each call into it (default {CALL_TIMEOUT:g}; loading a framework: {FRAMEWORK_LOAD_TIMEOUT:g})",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")


def target_of(args: argparse.Namespace) -> object:
    """The audit's target from TARGET, --set, --config and --level (a framework spec for trl/verl)."""
    from grpo_identity.checks.frameworks import FRAMEWORKS, AdapterError, parse_set, parse_spec
    from grpo_identity.foundation import UsageError

    head = args.target.split(":")[0].strip().lower()
    if head not in FRAMEWORKS:
        for flag, given in (
            ("--set", args.sets),
            ("--config", args.config),
            ("--level", args.level == "gradient"),
            ("--release", args.release),
            ("--releases", args.releases),
        ):
            if given:
                raise UsageError(
                    f"{flag} applies to the framework targets ({', '.join(FRAMEWORKS)}), not to {args.target!r}"
                )
        return args.target
    if args.config and not os.path.isfile(args.config):
        raise UsageError(f"--config: no such file: {args.config}")
    if args.kind == "filter":
        raise UsageError(
            f"--kind filter: {args.target!r} computes advantages; only presets and functions can be audited as filters"
        )
    try:
        spec = parse_spec(args.target)
        sets = [parse_set(s) for s in args.sets]
    except AdapterError as exc:
        raise UsageError(str(exc)) from None
    if spec.estimator is not None and (sets or args.config):
        raise UsageError(
            f"--set and --config configure the trainer path; {args.target!r} is the estimator function alone (write verl --set algorithm.adv_estimator=NAME)"
        )
    if spec.estimator is not None and args.level == "gradient":
        raise UsageError(
            f"--level gradient: {args.target!r} is the estimator function alone, it has no loss (write verl --set algorithm.adv_estimator=NAME for the trainer path)"
        )
    return spec.with_sets(sets, config=args.config, level=args.level)


def level_of(args: argparse.Namespace, target: object) -> str:
    """The audit's level: --level, else a framework spec's default (the gradient), else 'advantage'."""
    default = getattr(target, "default_level", None)
    return str(args.level or (default() if callable(default) else "advantage"))


def run(args: argparse.Namespace) -> int:
    import sys

    from grpo_identity.dial import preset
    from grpo_identity.foundation import UsageError

    if args.max_examples < 1:
        raise UsageError(f"--max-examples must be >= 1, got {args.max_examples}")
    if args.timeout is not None and not args.timeout > 0:
        raise UsageError(f"--timeout must be > 0, got {args.timeout:g}")
    if args.expect is not None:
        try:
            preset(args.expect)
        except (ValueError, KeyError) as exc:
            raise UsageError(f"--expect: {exc}") from None
    target = target_of(args)
    args.load_timeout = (
        args.timeout
        if args.timeout is not None
        else (CALL_TIMEOUT if isinstance(target, str) else FRAMEWORK_LOAD_TIMEOUT)
    )
    args.timeout = args.timeout if args.timeout is not None else CALL_TIMEOUT
    if args.release and args.releases:
        raise UsageError("give --release VERSION or --releases A,B,C, not both")
    from grpo_identity.app.report import emit_json
    from grpo_identity.checks import TargetImportError, audit

    if args.releases:
        return _releases(args, target)
    args.release_auto = not args.release
    args.release = args.release or _fallback_release(target)
    python = _release_python(args, target) if args.release else None
    try:
        report = audit(
            target,
            kind=args.kind,
            expect=args.expect,
            max_examples=args.max_examples,
            timeout=args.timeout,
            load_timeout=args.load_timeout,
            level=level_of(args, target),
            progress=not args.json and sys.stderr.isatty(),
            python=python,
        )
    except TargetImportError as exc:
        where = f"{target.framework} {args.release}" if args.release else ""  # type: ignore[attr-defined]
        raise UsageError(
            f"{where}: {exc}" if where and not str(exc).lower().startswith(where.lower()) else str(exc)
        ) from None
    if args.json:
        out = report.to_dict()
        out.setdefault("level", "advantage")
        emit_json(out)
    else:
        print(report.format())
    return 1 if report.verdict == "fail" else 0


def _fallback_release(target: object) -> str | None:
    """The tested release of a framework that is not installed here (OpenRLHF and AReaL never
    are: their requirements clash with this environment's), audited in its own environment."""
    import importlib.util
    import sys

    from grpo_identity.checks.adapters import TESTED_VERSIONS
    from grpo_identity.checks.frameworks import FrameworkSpec

    if not isinstance(target, FrameworkSpec) or importlib.util.find_spec(target.framework) is not None:
        return None
    release = TESTED_VERSIONS.get(target.framework)
    if release is not None:
        print(
            f"{target.framework} is not installed here: auditing its release {release} in an environment of its own (--release VERSION for another)",
            file=sys.stderr,
        )
    return release


def _release_python(args: argparse.Namespace, target: object) -> str:
    from grpo_identity.checks.frameworks import AdapterError
    from grpo_identity.checks.releases import ensure
    from grpo_identity.foundation import UsageError

    try:
        return ensure(target.framework, args.release).python  # type: ignore[attr-defined]
    except AdapterError as exc:
        message = str(exc)
        where = (
            f"{target.framework} {args.release} (its tested release; it is not installed here)"
            if getattr(args, "release_auto", False)
            else f"--release {args.release}"
        )  # type: ignore[attr-defined]
        raise UsageError(message if message.startswith("--release") else f"{where}: {message}") from None


def summary_line(report: object) -> str:
    """One line of a report: the verdict, what it matches, the inferred dial or weight."""
    r: object = report
    d = r.to_dict()  # type: ignore[attr-defined]
    info = d.get("target_info", {})
    head = f"{info.get('framework', '?')} {info.get('version', '?')}: {d['verdict'].upper()}"
    inf = d["inferred"]
    dial = (
        "no dial fits"
        if inf.get("centre") is None
        else f"centre {inf['centre']}, scale {inf['scale']}"
        + ("" if inf["scale"] == "none" else f", ddof {inf['ddof']}, eps {inf['eps']:.3g}")
    )
    first = next((f for f in d["findings"] if f["severity"] == "fail"), None)
    weight = (
        f"; per-sample weight {inf.get('per_sample_weight')}, silent groups {'zero' if inf.get('silent_groups_zero_gradient') else 'NOT zero'}"
        if d.get("level") == "gradient"
        else ""
    )
    return f"{head}  matches {d.get('matches') or '-'} ({dial}){weight}" + (
        f"; {first['property']}: {first['message']}" if first else ""
    )


def _releases(args: argparse.Namespace, target: object) -> int:
    """``--releases A,B,C``: one audit per release, one line each; exit 2 if a driver could not
    run some release, else 1 if some release fails, else 0."""

    from grpo_identity.checks import TargetImportError, audit
    from grpo_identity.checks.frameworks import AdapterError
    from grpo_identity.checks.releases import ensure
    from grpo_identity.foundation import UsageError

    releases = [v.strip() for v in args.releases.split(",") if v.strip()]
    if not releases:
        raise UsageError(f"--releases takes A,B,C, got {args.releases!r}")
    code, rows = 0, []
    for release in releases:
        try:
            env = ensure(target.framework, release)  # type: ignore[attr-defined]
            report = audit(
                target,
                kind=args.kind,
                expect=args.expect,
                max_examples=args.max_examples,
                timeout=args.timeout,
                load_timeout=args.load_timeout,
                level=level_of(args, target),
                python=env.python,
            )
        except (AdapterError, TargetImportError) as exc:
            line, row = (
                f"{target.framework} {release}: ADAPTER ERROR  {exc}",
                {"release": release, "verdict": "adapter_error", "message": str(exc)},
            )  # type: ignore[attr-defined]
            code = 2
        else:
            line, row = summary_line(report), {"release": release, **report.to_dict()}
            row.setdefault("level", "advantage")
            code = max(code, 1 if report.verdict == "fail" else 0)
        rows.append(row)
        if not args.json:
            print(line, flush=True)
    if args.json:
        from grpo_identity.foundation import emit_json

        emit_json({"target": target.describe(), "releases": rows})  # type: ignore[attr-defined]
    return code
