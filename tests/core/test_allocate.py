"""allocate() and common_group_size(): the group-size law (Corollary 2) spending a rollout budget."""

from __future__ import annotations

import itertools
import subprocess
import sys

import numpy as np
import pytest

from grpo_identity import paper
from grpo_identity.allocation import allocate, common_group_size
from grpo_identity.closed_forms import fidelity


def capped_fidelity(counts, ps, eps):
    return sum(min(float(fidelity(int(g), p)), 1 - eps) if g >= 2 else 0.0 for g, p in zip(counts, ps))


@pytest.mark.parametrize("col", range(3))
def test_with_budget_to_spare_every_prompt_gets_the_papers_exact_group_size(col):
    ps = list(paper.GROUP_SIZE_TABLE)
    eps = paper.GROUP_SIZE_EPS[col]
    want = [paper.GROUP_SIZE_TABLE[p][col][0] for p in ps]  # Corollary 2's table, exact G
    assert allocate(ps + [1 - p for p in ps], budget=10**6, eps=eps).tolist() == want + want


def test_prompts_predicted_silent_get_nothing_even_when_the_budget_is_short():
    counts = allocate([0.0, 0.5, 1.0, 0.05], budget=10, eps=0.1)
    assert counts[0] == counts[2] == 0 and counts.sum() == 10


@pytest.mark.parametrize(
    ("ps", "budget"),
    [([0.5, 0.05], 20), ([0.5, 0.3, 0.1], 20), ([0.2, 0.7, 0.05], 15), ([0.5, 0.5, 0.5], 9), ([0.59, 0.04, 0.67], 7)],
)
def test_on_these_small_cases_a_short_budget_is_spent_where_a_brute_force_search_finds_the_most_fidelity(ps, budget):
    got = allocate(ps, budget, eps=0.1)
    assert got.sum() == budget and all(g == 0 or g >= 2 for g in got)
    best = max(
        capped_fidelity(c, ps, 0.1)
        for c in itertools.product([0, *range(2, budget + 1)], repeat=len(ps))
        if sum(c) <= budget
    )
    assert capped_fidelity(got, ps, 0.1) == pytest.approx(best, abs=1e-12)


def test_a_short_budget_is_never_overspent_and_no_prompt_gets_more_than_it_needs():
    p = np.random.default_rng(0).uniform(0.02, 0.98, 500)
    need = allocate(p, 10**7, eps=0.05)
    got = allocate(p, 3000, eps=0.05)
    assert got.sum() == 3000 and np.all(got <= need) and need.sum() > 3000


def test_the_common_group_size_is_the_smallest_g_whose_mean_fidelity_reaches_one_minus_eps():
    p = np.array([0.05, 0.5, 0.3, 0.0])  # the p = 0 prompt is silent at every G and left out
    G = common_group_size(p, eps=0.1)
    mean = lambda g: float(np.mean(fidelity(g, p[:3])))
    assert mean(G) >= 0.9 > mean(G - 1)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: allocate([0.5], budget=-1), "budget must be an integer >= 0"),
        (lambda: allocate([0.5], budget=2.5), "budget must be an integer >= 0"),
        (lambda: allocate([0.5], budget=10, eps=1.0), "eps must be in"),
        (lambda: allocate([1.5], budget=10), "p must be in"),
        (lambda: common_group_size([0.0, 1.0]), "every group is silent"),
    ],
)
def test_bad_input_is_a_one_line_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_allocate_is_exported_lazily_and_import_grpo_identity_stays_light():
    code = (
        "import sys, grpo_identity; assert 'grpo_identity.allocation' not in sys.modules; "
        "grpo_identity.allocate([0.5], 7); print(sorted(m for m in ('torch', 'sympy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
