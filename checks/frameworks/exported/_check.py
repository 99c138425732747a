"""The checks of every exported test pack, written once: the framework's runner (a module beside this one) gives
``first_step_rows()``, the answers of optimizer step 0 as its trainer updated them, and these tests compare them
with the reference its ``CASE`` holds.  The exporter appends what follows the marker line to the runner's source;
above it, stand-ins for the runner's two names keep this module importable on its own.
"""

from __future__ import annotations

from typing import Any

CASE: dict[str, Any] = {}  # the runner's


def first_step_rows() -> dict[int, dict[str, Any]]:  # the runner's
    raise NotImplementedError


# --- exported: the checks ---
import statistics  # noqa: E402

import pytest  # noqa: E402

for _module in CASE.get("requires", ()):  # a framework that is not installed: the tests skip
    pytest.importorskip(_module)

#: relative tolerance of a coefficient, of the step's largest (float32 log-probabilities)
RTOL = 1e-4


@pytest.fixture(scope="module")
def first_step() -> dict[int, dict[str, Any]]:
    """The answers of optimizer step 0 as the trainer updated them."""
    return first_step_rows()


def test_the_step_holds_the_probe_answers(first_step: dict[int, dict[str, Any]]) -> None:
    """The trainer put the answers into optimizer step 0 that the reference was computed for."""
    want = sorted(int(r) for r in CASE["expected"])
    if sorted(first_step) != want:
        pytest.fail(f"optimizer step 0 trained on answers {sorted(first_step)}, not {want}", pytrace=False)


def test_the_update_is_the_objective(first_step: dict[int, dict[str, Any]]) -> None:
    """Every loss token of every answer of step 0 gets the coefficient Âᵢ·wᵢ of the objective, scale included."""
    expected = {int(r): e for r, e in CASE["expected"].items()}
    largest = max(abs(e["coefficient"]) for e in expected.values()) or 1.0
    wrong, ratios = [], []
    for row, e in sorted(expected.items()):
        got = first_step.get(row)
        if got is None:
            continue
        tokens = [c for c, m in zip(got["coefficients"], got["mask"]) if m > 0]
        if len(tokens) != e["tokens"]:
            wrong.append(f"answer {row}: {len(tokens)} loss tokens, the reference has {e['tokens']}")
            continue
        off = [c for c in tokens if abs(c - e["coefficient"]) > RTOL * largest]
        if e["coefficient"]:
            ratios += [c / e["coefficient"] for c in tokens]
        if off:
            wrong.append(
                f"answer {row} (group {e['group']}, reward {e['reward']:g}, {e['tokens']} tokens): coefficient "
                f"{off[0]:.6g} where the objective gives Â·w = {e['advantage']:.6g}·{e['weight']:.6g} = "
                f"{e['coefficient']:.6g}"
            )
    objective = CASE["objective"]
    scale = statistics.median(ratios) if ratios else float("nan")
    head = (
        f"optimizer step 0 is {scale:.4g}× its objective {objective['name']} ({objective['formula']}, "
        f"{objective['setting']}: {objective['documented']}); the answers' ratios range "
        f"{min(ratios, default=float('nan')):.4g} … {max(ratios, default=float('nan')):.4g}"
    )
    if wrong:
        pytest.fail(head + "\n" + "\n".join(wrong[:8]), pytrace=False)
