"""Statistics shared by the analyses and the trainer: R² of a prediction, a log-log fit.

numpy only.

>>> r_squared([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
1.0
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["r_squared"]


def r_squared(measured: npt.ArrayLike, predicted: npt.ArrayLike) -> float:
    """Coefficient of determination 1 − Σ(m − f)² / Σ(m − m̄)² of a prediction f (no refitting)."""
    m = np.asarray(measured, dtype=np.float64)
    f = np.asarray(predicted, dtype=np.float64)
    ss_tot = float(((m - m.mean()) ** 2).sum())
    return 1.0 - float(((m - f) ** 2).sum()) / ss_tot if ss_tot > 0 else float("nan")
