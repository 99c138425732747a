"""The controlled run's seed-to-seed spread, and the tolerance it sets for comparing one run
with the paper's (PAPER claim 9).

The paper's run is one draw of the same random experiment (its own seeds), so its numbers can
only be matched up to that experiment's spread.  :func:`seed_spread` runs the controlled run
at several seeds with every other setting fixed and records, for each number the paper prints,
every seed's value, the mean and the sample standard deviation s (ddof 1).

:func:`tolerance`: one run and the paper's run differ by a random amount whose standard
deviation is √2·s (two independent runs); a run matches the paper when

    |run − paper| ≤ Z·√2·s + ½·10^(−d)

with Z = 3 and d the decimals the paper prints (its rounding).  Nothing here is tuned to the
paper: s is measured, Z and the rounding term are fixed in advance.

Store a spread with ``python -m grpo_identity.trainer.bernoulli_seeds --seeds 10 --out DIR``
(``spread.json`` and ``command.txt``); ``grpo-identity verify`` reads
``results/bernoulli_seeds/spread.json``.

>>> round(tolerance(0.001, 2), 6)
0.009243
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any, Sequence

from grpo_identity import provenance
from grpo_identity.foundation import write_text_atomic
from grpo_identity.trainer.config import BernoulliConfig

__all__ = ["Z", "QUANTITIES", "quantities", "tolerance", "seed_spread", "main"]

#: how many standard deviations of a run-to-run difference count as agreement
Z = 3.0
#: the numbers the paper prints for the controlled run: name -> (path in the result, paper.py key)
QUANTITIES: dict[str, tuple[tuple[str, ...], str]] = {
    "r2_silent": (("r2_silent",), "r2_silent"),
    "extreme_share.grpo": (("extreme_share", "grpo", "measured"), "extreme_share"),
    "extreme_share.dr_grpo": (("extreme_share", "dr_grpo", "measured"), "extreme_share"),
    "hard_final.grpo": (("hard_final", "grpo"), "hard_final"),
    "hard_final.dr_grpo": (("hard_final", "dr_grpo"), "hard_final"),
    "dapo_oversample": (("dapo_oversample",), "dapo_oversample"),
}


def quantities(result: dict[str, Any]) -> dict[str, float]:
    """The paper's controlled-run numbers of one :func:`run_bernoulli` result, by name."""
    out = {}
    for name, (keys, _) in QUANTITIES.items():
        v: Any = result
        for k in keys:
            v = v[k]
        out[name] = float(v)
    return out


def tolerance(sd: float, decimals: int, z: float = Z) -> float:
    """Z·√2·s + ½·10^(−decimals): agreement of one run with another printed to ``decimals``."""
    return z * math.sqrt(2.0) * sd + 0.5 * 10.0 ** (-decimals)


def seed_spread(config: BernoulliConfig, seeds: Sequence[int], progress: bool = False) -> dict[str, Any]:
    """Run the controlled run at every seed (``config.seed`` is replaced) and summarise.

    Returns ``{"config": {…, no seed}, "seeds": [...], "per_seed": {name: [...]},
    "mean": {name: …}, "sd": {name: …} (ddof 1), "min", "max", "seconds": [...]}``.
    """
    from grpo_identity.trainer.bernoulli import run_bernoulli

    if len(seeds) < 2 or len(set(seeds)) != len(seeds):
        raise ValueError(f"need at least 2 distinct seeds, got {list(seeds)}")
    per_seed: dict[str, list[float]] = {name: [] for name in QUANTITIES}
    seconds = []
    for i, seed in enumerate(seeds):
        r = run_bernoulli(dataclasses.replace(config, seed=seed))
        for name, v in quantities(r).items():
            per_seed[name].append(v)
        seconds.append(r["seconds"])
        if progress:
            print(
                f"seed {seed} ({i + 1}/{len(seeds)}): " + ", ".join(f"{k} {v[-1]:.6g}" for k, v in per_seed.items()),
                file=sys.stderr,
            )
    cfg = {k: v for k, v in dataclasses.asdict(config).items() if k != "seed"}
    return {
        "config": cfg,
        "seeds": list(seeds),
        "per_seed": per_seed,
        "mean": {k: statistics.fmean(v) for k, v in per_seed.items()},
        "sd": {k: statistics.stdev(v) for k, v in per_seed.items()},
        "min": {k: min(v) for k, v in per_seed.items()},
        "max": {k: max(v) for k, v in per_seed.items()},
        "seconds": seconds,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m grpo_identity.trainer.bernoulli_seeds --seeds N --out DIR`` (default settings)."""
    p = argparse.ArgumentParser(
        prog="python -m grpo_identity.trainer.bernoulli_seeds", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--seeds", type=int, default=10, help="run seeds 0 … N−1 (default 10, at least 2)")
    p.add_argument("--out", required=True, help="folder for spread.json, command.txt and provenance.json")
    args = p.parse_args(argv)
    if args.seeds < 2:
        p.error(f"--seeds must be >= 2, got {args.seeds}")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        p.error(f"--out {out} exists and is not a folder")
    spread = seed_spread(BernoulliConfig(), list(range(args.seeds)), progress=True)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "spread.json", json.dumps(spread, indent=2) + "\n")
    command = provenance.command_line(
        ["-m", "grpo_identity.trainer.bernoulli_seeds", "--seeds", str(args.seeds), "--out", args.out], prog="python"
    )
    write_text_atomic(out / "command.txt", command + "\n")
    provenance.write(out, command)
    print(f"wrote {out / 'spread.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
