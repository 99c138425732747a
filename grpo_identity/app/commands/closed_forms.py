"""``grpo-identity closed-forms``: the closed forms at one (G, p), or the paper's group-size table."""

from __future__ import annotations

import argparse

from grpo_identity.app.options import integer, number

HELP = "print the closed forms at one (G, p), or the paper's group-size table"

#: the largest --G: the closed forms are exact and fast to here (bounded memory: the σ table
#: shows a selection of k above G = 64)
MAX_G = 10**6


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--G",
        type=integer(2, MAX_G),
        default=8,
        help=f"group size, 2 to {MAX_G:,} (default 8); above G = 64 the sigma table shows 65 of the G + 1 values of k",
    )
    p.add_argument("--p", type=number(0, 1), default=0.5, help="solve rate in [0, 1] (default 0.5)")
    p.add_argument("--table", choices=["group-size"], help="print a whole table instead")
    p.add_argument("--json", action="store_true", help="print JSON")


def _group_size_table(as_json: bool) -> None:
    from grpo_identity import closed_forms as C
    from grpo_identity.app.report import emit_json, format_table

    rows = C.group_size_table()
    if as_json:
        emit_json({"rows": rows})
        return
    print("Smallest G with fidelity >= 1 - eps (exact sum); G* = 1/(8 eps p(1-p)) in parentheses")
    table = []
    for p in C.PAPER_TABLE_P:
        cells = [f"{r['G_exact']} ({r['G_law']:.0f})" for r in rows if r["p"] == p]
        table.append([f"{p:.2f} / {1 - p:.2f}" if p != 0.5 else "0.50", *cells])
    print(format_table(table, ["p", *(f"{100 * (1 - e):.0f} %" for e in C.PAPER_TABLE_EPS)]))


def run(args: argparse.Namespace) -> int:
    from grpo_identity import closed_forms as C
    from grpo_identity.app.report import emit_json, format_table

    if args.table == "group-size":
        _group_size_table(args.json)
        return 0
    import warnings

    from grpo_identity.foundation import UsageError

    try:
        with warnings.catch_warnings():  # a p near 0 overflows on the way to a refusal: said once, below
            warnings.simplefilter("ignore", RuntimeWarning)
            s = C.summary(args.G, args.p)
    except C.NoGroupSize as exc:
        raise UsageError(f"--p {args.p:g}: {exc} (a --p further from 0 and 1)") from None
    if args.json:
        emit_json(s)
        return 0
    print(f"G = {s['G']}, p = {s['p']}")
    if not s["sigma_by_k_all"]:
        print(
            f"sigma for {len(s['sigma_by_k'])} of the {s['G'] + 1:,} values of k "
            "(any other k: sigma(k) = sqrt(k(G-k))/G)"
        )
    print(format_table([[r["k"], r["sigma"]] for r in s["sigma_by_k"]], ["k", "sigma"]))
    print()
    scalars = [
        ("silent_rate", "p^G + (1-p)^G"),
        ("expected_update", "E[g]"),
        ("expected_sigma_sq", "E[sigma^2] (Dr. GRPO)"),
        ("fidelity", "E[g] / sqrt(p(1-p))"),
        ("attenuation_first_order", "1 - 1/(8Gp(1-p))"),
        ("difficulty_weight", "w(p) = 1/sqrt(p(1-p))"),
        ("arcsine_objective", "2 arcsin sqrt(p)"),
    ]
    values = {k: s[k] for k, _ in scalars}  # type: ignore[literal-required]
    print(
        format_table(
            [[k, f, "undefined" if values[k] is None else values[k]] for k, f in scalars],
            ["quantity", "formula", "value"],
        )
    )
    print()
    print(format_table([[r["eps"], r["G_exact"], r["G_law"]] for r in s["group_size"]], ["eps", "G_exact", "G_law"]))
    return 0
