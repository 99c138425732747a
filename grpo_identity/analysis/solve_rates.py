"""Per-problem solve rates p̂ = k/n (the difficulty of each prompt), loaded from files or a default.

A :class:`SolveRates` is a distribution of solve rates kept as distinct values with weights
(problem counts, or probabilities for the synthetic default), so a 215,608-problem data set
with p̂ = k/64 costs 65 numbers.  Sources (PAPER claim 8):

* a per-problem table with a ``llama8b_solve_rate`` column: parquet, JSONL (one object per
  line) or CSV;
* a histogram CSV with columns ``solve_rate,count`` (lines starting with ``#`` are comments);
* the Hugging Face dataset ``open-r1/Big-Math-RL-Verified-Processed`` (spec ``hf:NAME``), only
  when asked for explicitly and online; needs the ``datasets`` package;
* :func:`synthetic_default`, used when no source is given: p̂ = k/64 with
  k ~ Beta-Binomial(64, α = 0.50, β = 0.45).  α and β were chosen by least squares so that its
  summaries land near the paper's published Big-Math summaries (claim 8: 4.0 % at p̂ = 0,
  7.2 % at p̂ = 1, silent fractions 59/44/32/23/17 % at G = 4…64); it gives 6.5 %, 8.9 % and
  57/42/31/24/19 %.  It is a stand-in with a U shape like Big-Math's, not Big-Math.

numpy only (pandas/pyarrow load inside :func:`load_solve_rates` for parquet).

>>> sr = from_values([0.0, 0.5, 0.5, 1.0])
>>> sr.values.tolist(), sr.counts.tolist(), sr.total
([0.0, 0.5, 1.0], [1.0, 2.0, 1.0], 4.0)
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import numpy.typing as npt

__all__ = [
    "COLUMN",
    "BIG_MATH_DATASET",
    "SYNTHETIC_ROLLOUTS",
    "SYNTHETIC_ALPHA",
    "SYNTHETIC_BETA",
    "SolveRates",
    "from_values",
    "from_histogram",
    "synthetic_default",
    "load_solve_rates",
    "load_hf_dataset",
    "resolve",
]

#: the per-problem column of Big-Math: Llama-3.1-8B's solve rate over 64 rollouts
COLUMN = "llama8b_solve_rate"
#: the Hugging Face dataset of PAPER claim 8
BIG_MATH_DATASET = "open-r1/Big-Math-RL-Verified-Processed"
#: the synthetic default: k/64 with k ~ Beta-Binomial(64, α, β) (see the module docstring)
SYNTHETIC_ROLLOUTS = 64
SYNTHETIC_ALPHA = 0.50
SYNTHETIC_BETA = 0.45

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class SolveRates:
    """A distribution of solve rates: distinct ``values`` in [0, 1] with positive ``counts``."""

    values: FloatArray
    """Distinct solve rates, sorted, shape (n_distinct,)."""
    counts: FloatArray
    """Weight of each value (problem counts, or probabilities), shape (n_distinct,)."""
    source: str
    """Where the rates come from, one line (recorded in every output)."""

    @property
    def total(self) -> float:
        """Sum of the weights: the number of problems for real data, 1 for the synthetic default."""
        return float(self.counts.sum())

    @property
    def weights(self) -> FloatArray:
        """Normalised weights (summing to 1)."""
        return self.counts / self.counts.sum()

    def interior(self) -> SolveRates:
        """Only the problems with 0 < p̂ < 1 (PAPER claim 9 draws its prompts from these)."""
        keep = (self.values > 0) & (self.values < 1)
        if not keep.any():
            raise ValueError(f"no solve rate strictly between 0 and 1 in {self.source}")
        return SolveRates(self.values[keep], self.counts[keep], self.source + " (interior)")

    def sample(self, size: int, rng: np.random.Generator) -> FloatArray:
        """``size`` solve rates drawn with replacement in proportion to the weights."""
        return rng.choice(self.values, size=size, replace=True, p=self.weights)


def _check_rates(values: FloatArray, where: str) -> FloatArray:
    bad = ~np.isfinite(values) | (values < 0) | (values > 1)
    if bad.any():
        raise ValueError(f"solve rates must be in [0, 1], got {float(values[bad][0])!r} in {where}")
    return values


def from_values(values: Iterable[float] | npt.ArrayLike, source: str = "array") -> SolveRates:
    """A :class:`SolveRates` from per-problem solve rates (NaN/None entries are not allowed)."""
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    if arr.size == 0:
        raise ValueError(f"no solve rates in {source}")
    uniq, counts = np.unique(_check_rates(arr, source), return_counts=True)
    return SolveRates(uniq, counts.astype(np.float64), source)


def from_histogram(rates: npt.ArrayLike, counts: npt.ArrayLike, source: str = "histogram") -> SolveRates:
    """A :class:`SolveRates` from a histogram: solve rates and their problem counts."""
    r = _check_rates(np.asarray(rates, dtype=np.float64).reshape(-1), source)
    c = np.asarray(counts, dtype=np.float64).reshape(-1)
    if r.shape != c.shape:
        raise ValueError(f"{source}: {r.size} solve rates but {c.size} counts")
    if (~np.isfinite(c) | (c < 0)).any():
        raise ValueError(f"counts must be finite and >= 0, got {float(c[~np.isfinite(c) | (c < 0)][0])!r} in {source}")
    if c.sum() <= 0:
        raise ValueError(f"no problems in {source}: every count is 0")
    uniq, inverse = np.unique(r, return_inverse=True)
    summed = np.bincount(inverse, weights=c, minlength=uniq.size)
    keep = summed > 0
    return SolveRates(uniq[keep], summed[keep], source)


def synthetic_default() -> SolveRates:
    """The documented stand-in for Big-Math: p̂ = k/64, k ~ Beta-Binomial(64, 0.50, 0.45).

    Exact probabilities (no sampling), computed in log space.

    >>> sd = synthetic_default()
    >>> round(sd.total, 12), sd.values.size
    (1.0, 65)
    """
    n, a, b = SYNTHETIC_ROLLOUTS, SYNTHETIC_ALPHA, SYNTHETIC_BETA
    lbeta_ab = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    log_pmf = [
        math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
        + math.lgamma(k + a) + math.lgamma(n - k + b) - math.lgamma(n + a + b) - lbeta_ab
        for k in range(n + 1)
    ]
    pmf = np.exp(np.array(log_pmf))
    source = f"synthetic default: k/{n}, k ~ Beta-Binomial({n}, {a}, {b}) (a stand-in shaped like Big-Math, not Big-Math)"
    return SolveRates(np.arange(n + 1) / n, pmf / pmf.sum(), source)


# --- files ---------------------------------------------------------------------------------------
def _is_comment(line: str) -> bool:
    s = line.lstrip()
    return s.startswith("#") or s.startswith('"#')


def _read_csv(path: Path) -> SolveRates:
    with path.open(newline="", encoding="utf-8-sig") as fh:  # a spreadsheet's byte-order mark is not part of the header
        rows = list(csv.reader(line for line in fh if line.strip() and not _is_comment(line)))
    if not rows:
        raise ValueError(f"{path.name} has no header line")
    header = [h.strip() for h in rows[0]]
    body = rows[1:]
    if "solve_rate" in header and "count" in header:
        i, j = header.index("solve_rate"), header.index("count")
        try:
            rates = [float(r[i]) for r in body]
            counts = [float(r[j]) for r in body]
        except (ValueError, IndexError):
            raise ValueError(f"{path.name}: every row needs a numeric solve_rate and count") from None
        return from_histogram(rates, counts, source=f"histogram {path.name}")
    if COLUMN in header:
        i = header.index(COLUMN)
        return from_values(_column_values([r[i] if i < len(r) else "" for r in body], path.name), source=f"{path.name} ({COLUMN})")
    raise ValueError(f"{path.name}: need a {COLUMN!r} column or 'solve_rate,count' columns, got {','.join(header)}")


def _column_values(raw: Iterable[Any], where: str) -> FloatArray:
    """Floats from a column; empty cells, None and NaN are missing and dropped."""
    out = []
    for v in raw:
        if v is None or (isinstance(v, str) and v.strip() == ""):
            continue
        if isinstance(v, bool):  # JSON true/false is not a solve rate
            raise ValueError(f"{where}: {COLUMN} must be numeric, got {v!r}")
        try:
            f = float(v)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: {COLUMN} must be numeric, got {v!r}") from None
        if not math.isnan(f):
            out.append(f)
    return np.asarray(out, dtype=np.float64)


def _read_jsonl(path: Path) -> SolveRates:
    raw = []
    with path.open(encoding="utf-8-sig") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                raise ValueError(f"{path.name} line {n} is not JSON") from None
            if not isinstance(obj, dict) or COLUMN not in obj:
                raise ValueError(f"{path.name} line {n} has no {COLUMN!r} field")
            raw.append(obj[COLUMN])
    return from_values(_column_values(raw, path.name), source=f"{path.name} ({COLUMN})")


def _read_parquet(path: Path) -> SolveRates:
    try:
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - pyarrow is in the 'data' extra
        raise ValueError("reading parquet needs pyarrow (pip install 'grpo-identity[data]')") from None
    table = pq.read_table(path)
    if COLUMN not in table.column_names:
        raise ValueError(f"{path.name} has no {COLUMN!r} column")
    return from_values(_column_values(table.column(COLUMN).to_pylist(), path.name), source=f"{path.name} ({COLUMN})")


def load_solve_rates(path: str | Path) -> SolveRates:
    """Solve rates from a parquet, JSONL or CSV file (per-problem ``llama8b_solve_rate``), or a
    histogram CSV ``solve_rate,count``.  The format follows the file's suffix."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no such file: {path}")
    if not p.is_file():
        raise ValueError(f"{path} is not a file")
    suffix = p.suffix.lower()
    if suffix in (".parquet", ".pq"):
        return _read_parquet(p)
    if suffix in (".jsonl", ".json", ".ndjson"):
        return _read_jsonl(p)
    if suffix in (".csv", ".txt"):
        return _read_csv(p)
    raise ValueError(f"unknown solve-rate file type {suffix!r}: use .parquet, .jsonl or .csv")


def load_hf_dataset(name: str = BIG_MATH_DATASET, split: str = "train") -> SolveRates:
    """The ``llama8b_solve_rate`` column of a Hugging Face dataset (downloads: only on request)."""
    try:
        import datasets
    except ImportError:
        raise ValueError("reading a Hugging Face dataset needs the 'datasets' package") from None
    ds = datasets.load_dataset(name, split=split)
    if COLUMN not in ds.column_names:
        raise ValueError(f"{name} has no {COLUMN!r} column")
    return from_values(_column_values(ds[COLUMN], name), source=f"{name} ({COLUMN})")


def resolve(spec: str | Path | SolveRates | None) -> SolveRates:
    """A :class:`SolveRates` from a spec: None → :func:`synthetic_default`; ``hf:NAME`` → the
    Hugging Face dataset; anything else → :func:`load_solve_rates`."""
    if spec is None:
        return synthetic_default()
    if isinstance(spec, SolveRates):
        return spec
    if isinstance(spec, str) and spec.startswith("hf:"):
        return load_hf_dataset(spec[3:] or BIG_MATH_DATASET)
    return load_solve_rates(spec)
