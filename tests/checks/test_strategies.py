"""The hypothesis strategies (``checks.measure.strategies``): options checked when a strategy is built,
batches of whole groups whose layout undoes, score matrices of one row per answer."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_identity.checks.measure.strategies import reward_batches, score_matrices


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"kinds": ("bernoulli",)}, "kinds"),
        ({"min_groups": 0}, "min_groups"),
        ({"max_groups": 1, "min_groups": 2}, "max_groups"),
        ({"layouts": ()}, "layouts"),
        ({"dtypes": ("float8",)}, "dtypes"),
    ],
)
def test_bad_strategy_options_fail_when_the_strategy_is_built(kwargs, word):
    with pytest.raises(ValueError, match=word):
        reward_batches(**kwargs)


@settings(max_examples=40)
@given(
    batch=reward_batches(
        layouts=("contiguous", "shuffled"), dtypes=("float64", "float32", "torch.float32", "torch.bfloat16")
    )
)
def test_drawn_batches_have_whole_groups_and_their_layout_undoes(batch):
    r = batch.contiguous()
    assert r.shape == (batch.n_groups * batch.group_size,) and 2 <= batch.group_size <= 256
    R = r.reshape(-1, batch.group_size)
    if batch.group_ids is not None:  # shuffled rows: the ids name each row's group
        ids = np.asarray(batch.group_ids)
        for g in range(batch.n_groups):
            got = (
                np.sort(np.asarray(batch.rewards, dtype=np.float64)[ids == g])
                if not hasattr(batch.rewards, "float")
                else np.sort(batch.rewards.float().numpy()[ids == g])
            )
            assert np.allclose(got, np.sort(R[g]), rtol=1e-2)
    if batch.kind == "binary":
        assert set(np.unique(r)) <= {0.0, 1.0}
        assert [int(row.sum()) for row in R] == list(batch.num_correct)


@settings(max_examples=20)
@given(data=st.data())
def test_score_matrices_have_one_row_per_answer(data):
    s = data.draw(score_matrices(12, max_dims=3))
    assert s.shape[0] == 12 and s.ndim <= 4
