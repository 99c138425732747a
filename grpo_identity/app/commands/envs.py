"""``grpo-identity envs list|prune``: the release environments ``audit --release`` keeps in the cache."""

from __future__ import annotations

import argparse

HELP = (
    "list or prune the cached release environments (audit --release X): where they are, how each was "
    "resolved, their size"
)


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "action", choices=("list", "prune"), metavar="list|prune", help="list: show them; prune: remove the stale ones"
    )
    p.add_argument("--all", action="store_true", help="prune: remove every environment, not only the stale ones")
    p.add_argument("--dry-run", action="store_true", help="prune: say what would be removed, remove nothing")
    p.add_argument("--json", action="store_true", help="print JSON")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _row(r: dict) -> list[str]:
    as_of = (r.get("as_of") or "")[:10] or "-"
    return [r["name"], r["state"], as_of, r.get("method") or "-", _size(r["bytes"]), r.get("last_used") or "-"]


def run(args: argparse.Namespace) -> int:
    from grpo_identity.app.report import emit_json, format_table
    from grpo_identity.checks.calls import releases
    from grpo_identity.foundation import UsageError

    if args.action == "list" and (args.all or args.dry_run):
        raise UsageError("--all and --dry-run go with prune, not list")
    root = releases.env_root()
    rows = releases.list_envs() if args.action == "list" else releases.prune(args.all, args.dry_run)
    if args.json:
        emit_json({"root": str(root), "action": args.action, "dry_run": args.dry_run, "environments": rows})
        return 0
    if args.action == "prune":
        verb = "would remove" if args.dry_run else "removed"
        freed = _size(sum(r["bytes"] for r in rows))
        print(f"{verb} {len(rows)} environment(s) under {root}, {freed}")
        for r in rows:
            print(f"  {r['name']} ({r['state']})")
        return 0
    if not rows:
        print(f"no release environments under {root}")
        return 0
    table = [_row(r) for r in rows]
    print(format_table(table, ["environment", "state", "as of", "resolved", "size", "last used"]))
    total = _size(sum(r["bytes"] for r in rows))
    print(f"\n{len(rows)} under {root}, {total} (files shared with uv's cache counted once per environment)")
    stale = sum(r["state"] != "current" for r in rows)
    if stale:
        print(f"{stale} stale or half-made: grpo-identity envs prune")
    return 0
