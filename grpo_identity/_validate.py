"""Eager input validation shared by every public function: one-line ``ValueError`` messages
that name the bad value."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import numpy.typing as npt


def check_group_size(G: Any, *, name: str = "group size G") -> int:
    """Return G as int; reject non-integers, booleans and G < 2."""
    if isinstance(G, bool) or not isinstance(G, (numbers.Integral, np.integer)):
        if isinstance(G, (float, np.floating)) and float(G).is_integer():
            G = int(G)
        else:
            raise ValueError(f"{name} must be an integer >= 2, got {G!r}")
    G = int(G)
    if G < 2:
        raise ValueError(f"{name} must be an integer >= 2, got {G}")
    return G


def check_probability(p: Any, *, open_interval: bool = False) -> npt.NDArray[np.float64]:
    """Return p as a float64 array; reject NaN and values outside [0, 1] (or (0, 1))."""
    try:
        arr = np.asarray(p, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"p must be a number in [0, 1], got {p!r}") from None
    bad = ~np.isfinite(arr) | (arr < 0) | (arr > 1)
    if open_interval:
        bad |= (arr == 0) | (arr == 1)
    if bad.any():
        first = arr[bad].flat[0] if arr.ndim else arr.item()
        where = "(0, 1)" if open_interval else "[0, 1]"
        raise ValueError(f"p must be in {where}, got {first!r}")
    return arr


def check_num_correct(k: Any, G: int) -> npt.NDArray[np.float64]:
    """Return k as a float64 array of integers in [0, G]."""
    arr = np.asarray(k, dtype=np.float64)
    bad = ~np.isfinite(arr) | (arr < 0) | (arr > G) | (arr != np.round(arr))
    if bad.any():
        first = arr[bad].flat[0] if arr.ndim else arr.item()
        raise ValueError(f"number correct k must be an integer in [0, G={G}], got {first!r}")
    return arr


def check_eps(eps: Any) -> npt.NDArray[np.float64]:
    """Return ε as a float64 array; reject ε <= 0 and non-finite values."""
    try:
        arr = np.asarray(eps, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"eps must be a positive number, got {eps!r}") from None
    bad = ~np.isfinite(arr) | (arr <= 0)
    if bad.any():
        first = arr[bad].flat[0] if arr.ndim else arr.item()
        raise ValueError(f"eps must be > 0, got {first!r}")
    return arr
