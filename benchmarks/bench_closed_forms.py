"""Benchmark: E[g] and the silent rate over 215,608 values of p (the size of Big-Math).

Compares grpo_identity.closed_forms with a straightforward implementation of the same sum that
uses float(math.comb(G, k)); reports seconds and where the straightforward one fails.

    python benchmarks/bench_closed_forms.py [--json] [--n 215608] [--G 8 64 1024 1000000]
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

from grpo_identity import closed_forms as C


def naive_expected_update(G: int, p: np.ndarray) -> np.ndarray:
    """The textbook sum, vectorised over p, with float binomial coefficients."""
    out = np.zeros_like(p)
    for k in range(1, G):
        out += float(math.comb(G, k)) * p**k * (1 - p) ** (G - k) * math.sqrt(k * (G - k))
    return out / G


def scalar_expected_update(G: int, p: float) -> float:
    """The same sum for one p, as a scalar API would write it (the paper's style)."""
    return sum(float(math.comb(G, k)) * p**k * (1 - p) ** (G - k) * math.sqrt(k * (G - k)) for k in range(1, G)) / G


SCALAR_SAMPLE = 20_000


def timed(f, *a):
    t = time.perf_counter()
    v = f(*a)
    return v, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=215_608)
    ap.add_argument("--G", type=int, nargs="+", default=[8, 64, 1024, 1_000_000])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    sources = {
        "uniform p (all distinct)": rng.uniform(0, 1, args.n),
        "p = k/64 (Big-Math-like, 65 distinct)": rng.integers(0, 65, args.n) / 64,
    }
    rows = []
    for label, p in sources.items():
        for G in args.G:
            eg, t_fast = timed(C.expected_update, G, p)
            sr, t_sr = timed(C.silent_rate, G, p)
            row = {
                "p_source": label,
                "G": G,
                "n": int(p.size),
                "seconds": t_fast,
                "seconds_silent_rate": t_sr,
                "finite": bool(np.isfinite(eg).all() and np.isfinite(sr).all()),
            }
            if G <= 2000:
                try:
                    with np.errstate(all="ignore"):
                        ref, t_naive = timed(naive_expected_update, G, p)
                    ok = np.isfinite(ref)
                    row["naive_seconds"] = t_naive
                    row["naive_finite_fraction"] = float(ok.mean())
                    row["max_rel_diff_where_naive_finite"] = (
                        float(np.max(np.abs(eg[ok] - ref[ok]) / np.maximum(ref[ok], 1e-300))) if ok.any() else None
                    )
                    row["speedup"] = t_naive / t_fast
                except OverflowError as exc:
                    row["naive_error"] = f"OverflowError: {exc}"
                sample = p[:SCALAR_SAMPLE]
                try:
                    _, t_s = timed(lambda G=G, sample=sample: [scalar_expected_update(G, float(x)) for x in sample])
                    row["scalar_seconds_extrapolated"] = t_s * p.size / sample.size
                    row["speedup_vs_scalar"] = row["scalar_seconds_extrapolated"] / t_fast
                except OverflowError as exc:
                    row["scalar_error"] = f"OverflowError: {exc}"
            else:
                row["naive_error"] = "not attempted: float(comb(G, k)) overflows for G >= 1030"
            rows.append(row)
            if not args.json:
                extra = (
                    f"vectorised naive {row['naive_seconds']:.3f} s (x{row['speedup']:.1f}); "
                    if "naive_seconds" in row
                    else row.get("naive_error", "")
                )
                if "scalar_seconds_extrapolated" in row:
                    extra += (
                        f"scalar loop ~{row['scalar_seconds_extrapolated']:.1f} s (x{row['speedup_vs_scalar']:.0f})"
                    )
                elif "scalar_error" in row:
                    extra += " scalar loop: " + row["scalar_error"]
                print(
                    f"{label:40s} G={G:>8d}: {t_fast:8.3f} s  silent {t_sr:.4f} s  finite={row['finite']}  {extra}",
                    flush=True,
                )
    if args.json:
        print(json.dumps({"rows": rows}, indent=2))


if __name__ == "__main__":
    main()
