"""Data files shipped with the package (see README.md here for their provenance).

>>> path("dapo_fig3b_accuracy1_fraction.csv").name
'dapo_fig3b_accuracy1_fraction.csv'
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["BIGMATH_HISTOGRAM", "DAPO_CURVE", "path"]

#: the exact Big-Math solve-rate histogram (215,608 problems; column n_round, p̂ = k/64)
BIGMATH_HISTOGRAM = "bigmath_solve_rate_hist.csv"
#: DAPO's Fig. 3b all-correct fraction, digitised (60 points)
DAPO_CURVE = "dapo_fig3b_accuracy1_fraction.csv"


def path(name: str) -> Path:
    """The file ``name`` shipped in this package, as a filesystem path."""
    p = Path(str(resources.files(__name__).joinpath(name)))
    if not p.is_file():
        raise FileNotFoundError(f"no shipped data file {name!r} (installed package is incomplete?)")
    return p
