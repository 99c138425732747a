"""``grpo-identity audit TARGET``: infer an advantage implementation's dial and check the identity.

TARGET is ``path/to/file.py:function``, ``package.module:function``, a preset (``grpo``,
``dr_grpo`` …) or a framework configured as its users configure it::

    grpo-identity audit trl --set loss_type=dr_grpo --set scale_rewards=none   # the gradient, then the advantages
    grpo-identity audit verl --set algorithm.adv_estimator=grpo --expect dr_grpo
    grpo-identity audit verl:estimator=grpo_vectorized      # the estimator function alone (bypasses the trainer)

The command parses its arguments and hands them to the library: the target is resolved once
(:func:`grpo_identity.checks.calls.spec.resolve`), the options are checked once
(:class:`grpo_identity.checks.options.AuditOptions`), and :func:`grpo_identity.checks.run` audits.
Exit codes: 0 pass or deviation, 1 fail, 2 usage error (a bad option, a target that cannot be
loaded, a configuration the framework rejects).
"""

from __future__ import annotations

import argparse
from typing import Any

from grpo_identity.app import progress
from grpo_identity.foundation import EXIT_CODES_HELP

HELP = "audit an advantage function (or group filter) against the identity and the dial's presets"
#: the exit codes of this command, by verdict (the end of its --help)
EPILOG = (
    f"{EXIT_CODES_HELP}. By verdict: 0 pass, or deviation (a bounded factor off the expected preset); 1 fail "
    "(a property of the identity broken, or a target that misbehaves when called), and a deviation from "
    "--expect with --strict; 2 also for a target that cannot be loaded (missing, or it fails, hangs, exits or "
    "crashes while loading) or called (it takes none of numpy, torch or lists), and a configuration the "
    "framework rejects"
)

#: the option each field of the spec and the options record is typed as on this command line
OPTION_NAMES = {
    "target": "TARGET",
    "sets": "--set",
    "config": "--config",
    "level": "--level",
    "kind": "--kind",
    "release": "--release",
    "expect": "--expect",
    "max_examples": "--max-examples",
    "timeout": "--timeout",
    "load_timeout": "--timeout",
    "input": "--input",
    "reward_dtype": "--reward-dtype",
    "call": "--call",
}

_TARGET_HELP = (
    "FILE.py:FUNCTION, MODULE:FUNCTION (FUNCTION may be a dotted path: Class.method), a preset (grpo, dr_grpo …; "
    "preset:NAME), or a framework: {frameworks} "
    "(with --set), verl:estimator=NAME (the estimator function alone)"
)
_LEVEL_HELP = (
    "gradient (the default for framework targets): the gradient of the framework's own loss on completions of "
    "different lengths, then the advantage audit of the same run; advantage: the advantages alone (faster; the "
    "default for functions and presets). A FILE.py:FUNCTION at the gradient level is fn(rewards, G, lengths) "
    "returning its advantages and the token coefficients of its loss"
)
_RELEASE_HELP = (
    "audit this release of the framework in a cached environment of its own ($GRPO_IDENTITY_ENVS, else "
    "~/.cache/grpo-identity/envs); a framework not installed here gets its tested release that way by default"
)


#: the most releases one ``--releases`` list may name
MAX_RELEASES = 50


def configure(p: argparse.ArgumentParser) -> None:
    from grpo_identity.checks import KINDS, LEVELS  # standard library only at import
    from grpo_identity.checks.frameworks.registry import FRAMEWORK_TABLE  # standard library only
    from grpo_identity.checks.options import (
        CALL_TIMEOUT,
        DEFAULT_MAX_EXAMPLES,
        FRAMEWORK_LOAD_TIMEOUT,
        MAX_EXAMPLES,
        MAX_TIMEOUT,
    )

    p.add_argument("target", metavar="TARGET", help=_TARGET_HELP.format(frameworks=", ".join(FRAMEWORK_TABLE)))
    add_config_options(p)
    p.add_argument("--level", choices=list(LEVELS), help=_LEVEL_HELP)
    p.add_argument("--release", metavar="VERSION", help=_RELEASE_HELP)
    p.add_argument(
        "--releases", metavar="A,B,C", help=f"audit several releases (at most {MAX_RELEASES}): one line per release"
    )
    p.add_argument(
        "--kind",
        choices=list(KINDS),
        default="advantage",
        help="advantage: one advantage per reward; filter: one bool per group (True = keep); row-filter: one bool "
        "per answer (a group must be kept or dropped whole)",
    )
    p.add_argument(
        "--expect",
        metavar="PRESET|VARIANT|c=FORMULA",
        help="expected preset: grpo, dr_grpo, dapo, rloo, trl, verl, openrlhf (default: any); a variant by name: "
        "maxrl, opo, gpg, grpo_passk, pkpo, reinforce_plus_plus_baseline, gdpo, lite_ppo, token_grpo; or the update "
        "coefficient c(k, G) the target should have, a formula in k, G, sigma (σ), mu (μ), e.g. 'c=sigma**2/G' "
        "(numbers, + - * / **, sqrt, Abs, Min, Max, log, exp)",
    )
    p.add_argument(
        "--max-examples",
        type=int,
        default=DEFAULT_MAX_EXAMPLES,
        metavar="N",
        help=f"hypothesis examples in total, 1 to {MAX_EXAMPLES:,} (default {DEFAULT_MAX_EXAMPLES})",
    )
    p.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help=f"seconds allowed for loading the target and for each call into it, at most {MAX_TIMEOUT:g} (default "
        f"{CALL_TIMEOUT:g}; loading a framework: {FRAMEWORK_LOAD_TIMEOUT:g})",
    )
    from grpo_identity.checks.calls.calling import INPUTS, REWARD_DTYPES

    p.add_argument(
        "--input",
        choices=list(INPUTS),
        help="how a function takes its rewards (default: its annotation, else a first call decides)",
    )
    p.add_argument(
        "--reward-dtype",
        choices=list(REWARD_DTYPES),
        help="the dtype the rewards are handed over in, as your reward function emits them (default float64)",
    )
    p.add_argument(
        "--call",
        metavar="TEMPLATE",
        help="how to call a function the audit cannot call by its signature, e.g. "
        "'fn(rewards=R, num_generations=G, eps=1e-6)': R rewards (1-D), R2 rewards as n×G, RC as a column (one "
        "reward function), TR and MASK verl's token rewards and response mask, ONES one reward weight, G group "
        "size, N groups, IDS integer and UIDS string group ids, ROWS a distinct id per answer, and literals; a "
        "trailing [0] or ['advantages'] picks the output",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 on a deviation from --expect too (as the pytest plugin fails it), not only on a fail",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")


def add_config_options(p: argparse.ArgumentParser) -> None:
    """``--set KEY=VALUE`` (repeatable) and ``--config FILE``: a framework's configuration as its users write it
    (this command's and ``export-tests``')."""
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a framework config key as the framework names it (TRL GRPOConfig: loss_type=dr_grpo; verl: "
        "algorithm.adv_estimator=grpo); repeatable, later ones win",
    )
    p.add_argument("--config", metavar="FILE", help="a framework config file (YAML); --set overrides it")


def _releases_of(args: argparse.Namespace) -> list[str | None]:
    """[--release] or the --releases list (one audit each)."""
    from grpo_identity.foundation import UsageError

    if args.release is not None and args.releases is not None:
        raise UsageError("give --release VERSION or --releases A,B,C, not both")
    if args.release is not None and not args.release.strip():
        raise UsageError(
            "--release is empty: give a version (e.g. --release 1.16.0), or leave it out for the installed one"
        )
    if args.releases is None:
        return [args.release]
    releases = [v.strip() for v in args.releases.split(",") if v.strip()]
    if not releases:
        raise UsageError(f"--releases takes A,B,C, got {args.releases!r}")
    releases = list(dict.fromkeys(releases))
    if len(releases) > MAX_RELEASES:
        raise UsageError(
            f"--releases names {len(releases):,} releases, at most {MAX_RELEASES} (each builds an environment); "
            "a grid of more: grpo-identity matrix"
        )
    return list(releases)


def run(args: argparse.Namespace) -> int:

    from grpo_identity.checks import TargetImportError
    from grpo_identity.checks.calls.spec import resolve
    from grpo_identity.checks.options import CALL_TIMEOUT, AuditOptions, OptionError
    from grpo_identity.foundation import UsageError

    names = {**OPTION_NAMES, "release": "--releases" if args.releases else "--release"}
    releases = _releases_of(args)
    try:
        options = AuditOptions(
            expect=args.expect,
            max_examples=args.max_examples,
            timeout=CALL_TIMEOUT if args.timeout is None else args.timeout,
            load_timeout=args.timeout,
            progress=progress.wanted(args),
        )
        specs = [
            resolve(
                args.target,
                sets=args.sets,
                config=args.config,
                level=args.level,
                kind=args.kind,
                release=r,
                input=args.input,
                reward_dtype=args.reward_dtype,
                call=args.call,
            )
            for r in releases
        ]
    except OptionError as exc:
        raise UsageError(exc.worded(names)) from None
    except TargetImportError as exc:
        raise UsageError(str(exc)) from None
    if args.releases:
        return _several(specs, options, args.json, names, args.strict)
    report = _audit(specs[0], options, names)
    from grpo_identity.foundation import emit_json

    if args.json:
        emit_json(report.to_dict())
    else:
        print(report.format())
    return exit_code(report, strict=args.strict)


def exit_code(report: Any, *, strict: bool = False) -> int:
    """1 for a fail, and with ``strict`` for a deviation from an expected preset; else 0."""
    if report.verdict == "fail":
        return 1
    return 1 if strict and report.verdict == "deviation" and report.expected else 0


def _audit(spec: Any, options: Any, names: dict[str, str]) -> Any:
    """One audit; what keeps it from running is a usage error in the options' words."""
    from grpo_identity.checks import TargetImportError, run
    from grpo_identity.checks.options import OptionError
    from grpo_identity.foundation import UsageError

    try:
        return run(spec, options)
    except OptionError as exc:
        raise UsageError(exc.worded(names)) from None
    except TargetImportError as exc:
        release = getattr(spec, "release", None)
        raise UsageError(_with_release(str(exc), getattr(spec, "framework", ""), release)) from None


def _with_release(message: str, framework: str, release: str | None) -> str:
    """A driver's message headed by the framework and release once: a message that names the framework alone
    (``TRL: …``) gets the release there, one that names both is left as it is."""
    if not release:
        return message
    where, lower = f"{framework} {release}", message.lower()
    if lower.startswith(where.lower()):
        return message
    if lower.startswith(f"{framework.lower()}:"):
        return f"{where}:{message[len(framework) + 1 :]}"
    return f"{where}: {message}"


def summary_line(report: Any) -> str:
    """One line of a report: the verdict, what it matches, the inferred dial or weight."""
    d = report.to_dict()
    info = d.get("target_info", {})
    head = f"{info.get('framework', '?')} {info.get('version', '?')}: {d['verdict'].upper()}"
    inf = d["inferred"]
    dial = report.inferred.describe()
    first = next((f for f in d["findings"] if f["severity"] == "fail"), None)
    weight = ""
    if d.get("level") == "gradient":
        silent = "zero" if inf.get("silent_groups_zero_gradient") else "NOT zero"
        weight = f"; per-sample weight {inf.get('per_sample_weight')}, silent groups {silent}"
    failing = f"; {first['property']}: {first['message']}" if first else ""
    return f"{head}  matches {d.get('matches') or '-'} ({dial}){weight}{failing}"


def _several(specs: list[Any], options: Any, as_json: bool, names: dict[str, str], strict: bool = False) -> int:
    """``--releases A,B,C``: one audit per release, one line each; exit 2 if a driver could not
    run some release, else 1 if some release fails, else 0."""
    from grpo_identity.checks.frameworks import AdapterError
    from grpo_identity.foundation import UsageError, emit_json

    code, rows = 0, []
    for spec in specs:
        try:
            report = _audit(spec, options, names)
        except (AdapterError, UsageError) as exc:
            line = f"{spec.framework} {spec.release}: ADAPTER ERROR  {exc}"
            row = {"release": spec.release, "verdict": "adapter_error", "message": str(exc)}
            code = 2
        else:
            line, row = summary_line(report), {"release": spec.release, **report.to_dict()}
            code = max(code, exit_code(report, strict=strict))
        rows.append(row)
        if not as_json:
            print(line, flush=True)
    if as_json:
        emit_json({"target": specs[0].describe(), "releases": rows})
    return code
