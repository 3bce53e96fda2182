"""The linear-time helpers of the statistics pass and the sorted copy agree with numpy on adversarial keys."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from daskjoin.kernels.key_sort import argsort_keys, take
from daskjoin.kernels.summary import block_summary
from daskjoin.validation import first_nonfinite_row

finite = st.floats(allow_nan=False, allow_infinity=True, width=64)


@settings(max_examples=200, deadline=None)
@given(arrays(np.float64, st.integers(0, 300), elements=st.one_of(finite, st.sampled_from([0.0, -0.0, 1.0, -1.0]))))
def test_argsort_keys_is_lexsort_by_key_then_row(keys):
    """Ties (duplicates, +0.0 and -0.0) keep row order: the sorted copy's (key, row) total order."""
    assert np.array_equal(argsort_keys(keys), np.lexsort((np.arange(len(keys)), keys)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_argsort_keys_many_passes(dtype):
    rng = np.random.default_rng(0)
    keys = np.concatenate([rng.normal(size=200_000), rng.integers(-3, 3, 50_000), [1e308, -1e308, 5e-324]])
    with np.errstate(over="ignore"):  # +-1e308 become +-inf in float32, on purpose
        keys = keys.astype(dtype).astype(np.float64)
    assert np.array_equal(argsort_keys(keys), np.lexsort((np.arange(len(keys)), keys)))


def test_take_rows():
    rng = np.random.default_rng(1)
    x = rng.random((1000, 3)).astype(np.float32)
    order = rng.permutation(1000)[:700]
    assert np.array_equal(take(x, order), x[order]) and np.array_equal(take(x[:, 0], order), x[order, 0])


def _assert_summary_of(block):
    """block_summary against numpy: the first bad row, and the extremes over the finite rows."""
    lo, hi, bad = block_summary(block)
    assert bad == first_nonfinite_row(block)
    good = block[np.isfinite(block).all(axis=1)]
    if len(good):
        assert np.array_equal(lo, good.min(axis=0).astype(np.float64))
        assert np.array_equal(hi, good.max(axis=0).astype(np.float64))
    else:
        assert np.isposinf(lo).all() and np.isneginf(hi).all()


@settings(max_examples=200, deadline=None)
@given(arrays(st.sampled_from([np.float32, np.float64]), st.tuples(st.integers(0, 40), st.integers(1, 4)),
              elements=st.floats(width=32)))
def test_block_summary_matches_numpy(block):
    _assert_summary_of(block)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([np.float32, np.float64]), st.integers(0, 3000), st.sampled_from([1, 2, 3, 5, 85, 255, 256, 300]),
       st.integers(0, 2**32 - 1), st.sampled_from([None, 0, -1, "middle"]))
def test_block_summary_of_blocks_wider_than_the_wide_rows(dtype, n, d, seed, bad_at):
    """Blocks long enough for the wide-row extremes (k = 256 // d rows a wide row, rows left over), with
    the extremes at random places (large offsets, a negative-zero row: compared by value, the sign of a zero
    extreme is not kept) and, where asked, one NaN or infinite value; float16, integer and strided blocks too."""
    rng = np.random.default_rng(seed)
    block = (rng.standard_normal((n, d)) * 10.0 ** rng.integers(-3, 6) + rng.integers(-10**6, 10**6)).astype(dtype)
    if n:
        block[rng.integers(0, n)] = -0.0
    if bad_at is not None and n:
        row = n // 2 if bad_at == "middle" else bad_at % n
        block[row, rng.integers(0, d)] = [np.nan, np.inf, -np.inf][seed % 3]
    if seed % 5 == 1:
        block = block.astype(np.float16)
    elif seed % 5 == 2 and bad_at is None:
        block = block.astype(np.int64)
    elif seed % 5 == 3:
        block = np.repeat(block, 2, axis=0)[::2]  # strided rows
    _assert_summary_of(block)
