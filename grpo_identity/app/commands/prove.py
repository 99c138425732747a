"""``grpo-identity prove``: run the SymPy proofs and print a table (or JSON)."""

from __future__ import annotations

import argparse
import sys

HELP = (
    "prove every claim of the paper (and what it leaves out) in SymPy; "
    "each theorem says its method (symbolic, certified numeric, numeric evidence)"
)


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-k", dest="select", metavar="SUBSTRING", help="only theorems whose name or title contains SUBSTRING"
    )
    p.add_argument("--json", action="store_true", help="print JSON")


#: the progress bar names the theorem being proved and at most this many characters of its title
TITLE_WIDTH = 40


def run(args: argparse.Namespace) -> int:
    import time

    from tqdm import tqdm

    from grpo_identity.app import progress
    from grpo_identity.app.report import emit_json, format_table
    from grpo_identity.foundation import UsageError

    show = progress.wanted(args)
    with progress.loading("prove: loading SymPy", show):  # seconds before the first theorem
        from grpo_identity.proofs import select
        from grpo_identity.proofs.core import METHODS

        theorems = select(args.select)
    if not theorems:
        raise UsageError(f"no theorem matches -k {args.select!r}")
    t0 = time.perf_counter()
    results = []
    with tqdm(total=len(theorems), unit="theorem", file=sys.stderr, disable=not show, leave=False) as bar:
        for t in theorems:
            title = t.title if len(t.title) <= TITLE_WIDTH else t.title[: TITLE_WIDTH - 1] + "…"
            bar.set_description_str(f"proving {t.name}", refresh=False)
            bar.set_postfix_str(title)  # and draw: the theorem shows while it is proved
            results.append(t.prove())
            bar.update(1)
    seconds = time.perf_counter() - t0
    all_proved = all(r.status == "proved" for r in results)
    if args.json:
        emit_json(
            {
                "all_proved": all_proved,
                "seconds": seconds,
                "theorems": [
                    {
                        "name": t.name,
                        "paper_ref": t.paper_ref,
                        "statement": t.statement,
                        "status": r.status,
                        "method": r.method,
                        "seconds": r.seconds,
                    }
                    for t, r in zip(theorems, results)
                ],
            }
        )
    else:
        rows = [
            [t.name, t.title, t.paper_ref, r.status, r.method, f"{r.seconds:.2f}"] for t, r in zip(theorems, results)
        ]
        print(format_table(rows, ["theorem", "title", "paper reference", "status", "method", "seconds"]))
        methods = ", ".join(
            f"{sum(r.method == m for r in results)} {m}" for m in METHODS if any(r.method == m for r in results)
        )
        print(f"\n{sum(r.status == 'proved' for r in results)}/{len(results)} proved in {seconds:.1f} s ({methods})")
        for t, r in zip(theorems, results):
            table = r.details.get("group_size_table")
            if table:  # T11 reports how the second-order law predicts the paper's exact table
                n = len(table["rows"])
                verdict = "better than" if table["second_order_better"] else "not better than"
                print(
                    f"{t.name}: on the paper's exact group-size table the second-order law is {verdict} G*: "
                    f"{table['exact_matches_second_order']}/{n} exact vs {table['exact_matches_first_order']}/{n}, "
                    f"mean |error| {table['mean_abs_error_second_order']:.2f} "
                    f"vs {table['mean_abs_error_first_order']:.2f}"
                )
        for t, r in zip(theorems, results):
            if r.status != "proved":
                failed = [c["claim"] for c in r.details.get("claims", []) if not c["holds"]]
                print(f"{t.name} failed: {'; '.join(failed)}; residual: {r.residual}")
    return 0 if all_proved else 1
