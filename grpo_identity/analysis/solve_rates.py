"""Per-problem solve rates p̂ = k/n (the difficulty of each prompt), loaded from files or the
shipped Big-Math histogram.

A :class:`SolveRates` is a distribution of solve rates kept as distinct values with weights
(problem counts), so a 215,608-problem data set with p̂ = k/64 costs 65 numbers.  Sources
(PAPER claim 8), named by a *spec* (:func:`resolve`):

* ``bigmath`` (the default): the exact Big-Math ``llama8b_solve_rate`` histogram shipped in
  :mod:`grpo_identity.data` (N = 215,608, p̂ = k/64, column ``n_round``; its header says how it
  was recovered);
* a per-problem table with a ``llama8b_solve_rate`` column: parquet, JSONL (one object per
  line) or CSV;
* a histogram CSV with columns ``solve_rate,count``, or ``p_hat`` with ``n_round`` as the
  shipped file has (lines starting with ``#`` are comments);
* ``hf:NAME``: the Hugging Face dataset (default ``open-r1/Big-Math-RL-Verified-Processed``),
  only when asked for and online; needs the ``datasets`` package.

Every value must be a number in [0, 1]: a missing or NaN solve rate is an error naming the file
and the line (or row), never silently dropped.  numpy only (pyarrow loads for parquet).

>>> sr = from_values([0.0, 0.5, 0.5, 1.0])
>>> sr.values.tolist(), sr.counts.tolist(), sr.total
([0.0, 0.5, 1.0], [1.0, 2.0, 1.0], 4.0)
>>> big = resolve("bigmath")
>>> int(big.total), big.values.size
(215608, 65)
"""

from __future__ import annotations

import csv
import json
import math
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence
from urllib.parse import urlparse

import numpy as np
import numpy.typing as npt

__all__ = [
    "COLUMN",
    "BIG_MATH",
    "BIG_MATH_COUNTS",
    "BIG_MATH_DATASET",
    "SolveRates",
    "from_values",
    "from_histogram",
    "big_math",
    "load_solve_rates",
    "load_hf_dataset",
    "resolve",
]

#: the per-problem column of Big-Math: Llama-3.1-8B's solve rate over 64 rollouts
COLUMN = "llama8b_solve_rate"
#: the spec of the shipped Big-Math histogram (the default source)
BIG_MATH = "bigmath"
#: the shipped histogram's count column the paper's numbers use: problems with round(64·p̂) = k
BIG_MATH_COUNTS = "n_round"
#: the Hugging Face dataset of PAPER claim 8
BIG_MATH_DATASET = "open-r1/Big-Math-RL-Verified-Processed"
#: seconds to wait for the Hugging Face host before calling the machine offline
HF_PROBE_TIMEOUT = 3.0

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class SolveRates:
    """A distribution of solve rates: distinct ``values`` in [0, 1] with positive ``counts``."""

    values: FloatArray
    """Distinct solve rates, sorted, shape (n_distinct,)."""
    counts: FloatArray
    """Weight of each value (problem counts), shape (n_distinct,)."""
    source: str
    """Where the rates come from, one line (recorded in every output)."""

    @property
    def total(self) -> float:
        """Sum of the weights: the number of problems."""
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
        i = int(np.argmax(bad))
        raise ValueError(f"solve rates must be in [0, 1], got {float(values[i])!r} at position {i + 1} of {where}")
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
    bad = ~np.isfinite(c) | (c < 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"counts must be finite and >= 0, got {float(c[i])!r} at position {i + 1} of {source}")
    if c.sum() <= 0:
        raise ValueError(f"no problems in {source}: every count is 0")
    uniq, inverse = np.unique(r, return_inverse=True)
    summed = np.asarray(np.bincount(inverse, weights=c, minlength=uniq.size), dtype=np.float64)
    keep = summed > 0
    return SolveRates(uniq[keep], summed[keep], source)


# --- files ---------------------------------------------------------------------------------------
def _is_comment(line: str) -> bool:
    s = line.lstrip()
    return s.startswith("#") or s.startswith('"#')


#: the largest text file (CSV, JSONL) read: far above any per-problem solve-rate file, far below a machine's memory
MAX_TEXT_BYTES = 512 << 20
#: the largest total of a histogram's counts (problems)
MAX_TOTAL_COUNT = 1e15


def _read_text(path: Path) -> str:
    """The file as text (a spreadsheet's byte-order mark dropped); undecodable bytes name the file."""
    size = path.stat().st_size
    if size > MAX_TEXT_BYTES:
        limit = f"{MAX_TEXT_BYTES >> 20} MiB"
        raise ValueError(f"{path.name} holds {size:,} bytes; a CSV or JSONL file of solve rates is read up to {limit}")
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path.name} is not UTF-8 text (undecodable byte at offset {exc.start}); expected CSV or JSONL"
        ) from None


def _number(v: Any, where: str, column: str) -> float:
    """One number from a cell; missing, NaN, text or booleans are errors naming ``where``."""
    if v is None or (isinstance(v, str) and v.strip() == ""):
        raise ValueError(f"{where}: {column} is missing")
    if isinstance(v, bool):  # JSON true/false is not a number here
        raise ValueError(f"{where}: {column} must be numeric, got {v!r}")
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: {column} must be numeric, got {str(v)[:40]!r}") from None
    except OverflowError:  # an integer of hundreds of digits
        raise ValueError(f"{where}: {column} is too large for a float, got {str(v)[:40]!r}…") from None
    if math.isnan(f):
        raise ValueError(f"{where}: {column} is NaN")
    return f


def _rate(v: Any, where: str, column: str = COLUMN) -> float:
    """One solve rate from a cell: a number in [0, 1]."""
    f = _number(v, where, column)
    if not 0.0 <= f <= 1.0:
        raise ValueError(f"{where}: {column} must be in [0, 1], got {f!r}")
    return f


def _column_values(raw: Iterable[tuple[str, Any]]) -> FloatArray:
    """Floats from (where, cell) pairs, every one checked by :func:`_rate`."""
    return np.asarray([_rate(v, where) for where, v in raw], dtype=np.float64)


def _csv_rows(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """(header, [(line number, cells)]) of a CSV, comments and blank lines skipped."""
    lines = [
        (n, line) for n, line in enumerate(_read_text(path).splitlines(), 1) if line.strip() and not _is_comment(line)
    ]
    if not lines:
        raise ValueError(f"{path.name} has no header line")
    try:
        cells = list(csv.reader(line for _, line in lines))
    except csv.Error as exc:
        raise ValueError(f"{path.name} is not CSV ({exc})") from None
    return [h.strip() for h in cells[0]], [(n, row) for (n, _), row in zip(lines[1:], cells[1:])]


def _histogram_columns(header: Sequence[str]) -> tuple[str, str] | None:
    for rates, counts in (("solve_rate", "count"), ("p_hat", BIG_MATH_COUNTS)):
        if rates in header and counts in header:
            return rates, counts
    return None


def _read_csv(path: Path) -> SolveRates:
    header, body = _csv_rows(path)
    hist = _histogram_columns(header)
    if hist is not None:
        i, j = header.index(hist[0]), header.index(hist[1])
        rates, counts = [], []
        for n, r in body:
            where = f"{path.name} line {n}"
            rates.append(_rate(r[i] if i < len(r) else "", where, hist[0]))
            counts.append(_number(r[j] if j < len(r) else "", where, hist[1]))
            if not (math.isfinite(counts[-1]) and counts[-1] >= 0):
                raise ValueError(f"{where}: {hist[1]} must be a finite count >= 0, got {counts[-1]!r}")
        if not sum(counts) <= MAX_TOTAL_COUNT:  # a float sum: inf past the largest float, no exception
            raise ValueError(
                f"{path.name}: the {hist[1]} column sums to {sum(counts):g}, more than {MAX_TOTAL_COUNT:g} problems"
            )
        return from_histogram(rates, counts, source=f"histogram {path.name} ({hist[1]})")
    if COLUMN in header:
        i = header.index(COLUMN)
        values = _column_values((f"{path.name} line {n}", r[i] if i < len(r) else "") for n, r in body)
        return from_values(values, source=f"{path.name} ({COLUMN})")
    raise ValueError(f"{path.name}: need a {COLUMN!r} column or 'solve_rate,count' columns, got {','.join(header)}")


def _read_jsonl(path: Path) -> SolveRates:
    raw = []
    for n, line in enumerate(_read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as exc:  # not JSON, a number of too many digits, nested too deeply
            why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).split(":")[0][:80]
            raise ValueError(f"{path.name} line {n} is not JSON that can be read ({why})") from None
        if not isinstance(obj, dict) or COLUMN not in obj:
            raise ValueError(f"{path.name} line {n} has no {COLUMN!r} field")
        raw.append((f"{path.name} line {n}", obj[COLUMN]))
    return from_values(_column_values(raw), source=f"{path.name} ({COLUMN})")


def _read_parquet(path: Path) -> SolveRates:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError("reading parquet needs pyarrow: pip install 'grpo-identity[data]'") from None
    try:
        names = pq.read_schema(path).names
        column = pq.read_table(path, columns=[COLUMN]).column(COLUMN).to_pylist() if COLUMN in names else None
    except Exception as exc:  # pyarrow's ArrowInvalid / OSError on a file that is not parquet
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{path.name} is not a readable parquet file ({why})") from None
    if column is None:
        raise ValueError(f"{path.name} has no {COLUMN!r} column")
    return from_values(
        _column_values((f"{path.name} row {i}", v) for i, v in enumerate(column, 1)), source=f"{path.name} ({COLUMN})"
    )


def load_solve_rates(path: str | Path) -> SolveRates:
    """Solve rates from a parquet, JSONL or CSV file (per-problem ``llama8b_solve_rate``), or a
    histogram CSV (``solve_rate,count`` or ``p_hat,n_round``).  The format follows the suffix."""
    if not str(path).strip():
        raise ValueError("the solve-rate file's path is empty")
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


def big_math() -> SolveRates:
    """The shipped Big-Math histogram: N = 215,608 problems, p̂ = k/64, counts ``n_round``.

    >>> s = big_math()
    >>> round(float(s.counts[s.values == 0][0]) / s.total, 3), round(float(s.counts[s.values == 1][0]) / s.total, 3)
    (0.04, 0.072)
    """
    from grpo_identity import data

    sr = _read_csv(data.path(data.BIGMATH_HISTOGRAM))
    return SolveRates(
        sr.values,
        sr.counts,
        f"Big-Math {COLUMN}, shipped histogram (N = {int(sr.total):,}, p̂ = k/64, {BIG_MATH_COUNTS})",
    )


def _offline_requested() -> bool:
    return any(
        os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
        for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def _behind_proxy() -> bool:
    return any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"))


def _check_reachable(name: str) -> None:
    """Fail fast, in one line, when the Hugging Face host cannot be reached (no network)."""
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=HF_PROBE_TIMEOUT).close()
    except OSError:
        raise ValueError(
            f"hf:{name}: cannot reach {host} (offline?); download the dataset's parquet and pass its path, "
            f"or use the shipped '{BIG_MATH}'"
        ) from None


def load_hf_dataset(name: str = BIG_MATH_DATASET, split: str = "train") -> SolveRates:
    """The ``llama8b_solve_rate`` column of a Hugging Face dataset (downloads: only on request).

    Offline, it fails in one line after one short connection attempt (``HF_PROBE_TIMEOUT``
    seconds); with ``HF_HUB_OFFLINE=1`` it reads the local cache only.
    """
    try:
        import datasets
    except ImportError:
        raise ValueError("reading a Hugging Face dataset needs the 'datasets' package: pip install datasets") from None
    if not _offline_requested() and not _behind_proxy():
        _check_reachable(name)
    try:
        ds = datasets.load_dataset(name, split=split)
    except Exception as exc:  # network, cache or hub errors: one line, naming the dataset
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ValueError(
            f"hf:{name}: could not load the dataset ({type(exc).__name__}{': ' + first if first else ''})"
        ) from None
    if COLUMN not in ds.column_names:
        raise ValueError(f"hf:{name} has no {COLUMN!r} column")
    return from_values(
        _column_values((f"hf:{name} row {i}", v) for i, v in enumerate(ds[COLUMN], 1)), source=f"{name} ({COLUMN})"
    )


def resolve(spec: str | Path | SolveRates | None) -> SolveRates:
    """A :class:`SolveRates` from a spec: None or ``bigmath`` → :func:`big_math` (shipped);
    ``hf:NAME`` → the Hugging Face dataset; anything else → :func:`load_solve_rates`."""
    if spec is None or (isinstance(spec, str) and spec == BIG_MATH):
        return big_math()
    if isinstance(spec, SolveRates):
        return spec
    if isinstance(spec, str) and spec.startswith("hf:"):
        return load_hf_dataset(spec[3:] or BIG_MATH_DATASET)
    return load_solve_rates(spec)
