"""A set block's matches to output rows in one Numba pass (kernels/sets/measures.matches): the same ids and the same
similarity bits as the numpy reference (``Threshold.similarity`` and gathers), for every measure."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskjoin.kernels.sets.measures import matches
from daskjoin.planning.set_threshold import MEASURES, Threshold


def reference(probe, cand, overlap, sizes_r, sizes_s, r_ids, s_ids, threshold, selfjoin):
    sim = threshold.similarity(overlap, sizes_r[probe], sizes_s[cand])
    i, j = r_ids[probe], s_ids[cand]
    if selfjoin:
        i, j = np.minimum(i, j), np.maximum(i, j)
    return i, j, sim


@pytest.mark.parametrize("measure", MEASURES)
@pytest.mark.parametrize("size_dtype", [np.int64, np.int32])  # int64: what the set stores give (np.diff of offsets)
@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 300), sets_r=st.integers(1, 50), sets_s=st.integers(1, 50), selfjoin=st.booleans(),
       big=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_matches_equal_the_numpy_reference_bit_for_bit(measure, size_dtype, n, sets_r, sets_s, selfjoin, big, seed):
    rng = np.random.default_rng(seed)
    top = (1 << 31) - 1 if big else 40  # set sizes up to the largest the kernels take
    sizes_r = rng.integers(1, top, sets_r).astype(size_dtype)
    sizes_s = sizes_r if selfjoin else rng.integers(1, top, sets_s).astype(size_dtype)
    s_count = len(sizes_s)
    probe = rng.integers(0, len(sizes_r), n)
    cand = rng.integers(0, s_count, n)
    overlap = np.minimum(sizes_r[probe], sizes_s[cand]) * rng.random(n)
    overlap = np.maximum(1, overlap).astype(size_dtype)
    r_ids = rng.permutation(10 * len(sizes_r))[: len(sizes_r)].astype(np.int64)
    s_ids = r_ids if selfjoin else rng.permutation(10 * s_count)[:s_count].astype(np.int64)
    threshold = Threshold(measure, 1, 2)
    got = matches(probe, cand, overlap, sizes_r, sizes_s, r_ids, s_ids, threshold.code, selfjoin)
    want = reference(probe, cand, overlap, sizes_r, sizes_s, r_ids, s_ids, threshold, selfjoin)
    assert [a.dtype for a in got] == [np.dtype(np.int64), np.dtype(np.int64), np.dtype(np.float64)]
    for g, w in zip(got, want):
        assert np.array_equal(np.asarray(g).view(np.uint8), np.asarray(w, g.dtype).view(np.uint8))
    if selfjoin and n:
        assert (got[0] <= got[1]).all()


@pytest.mark.parametrize("measure", MEASURES)
@pytest.mark.parametrize("p, q", [(1, 2), (9, 10), (1, 1), (3, 1)])
def test_runs_of_identical_sets_match_themselves_as_meets_says(measure, p, q):
    """``local._qualifying_runs`` (one compiled loop) gives ``meets(n, n, n)`` for every run's set size, the
    empty set and sizes below an overlap threshold included."""
    from daskjoin.kernels.sets import local
    from daskjoin.kernels.sets.measures import meets

    if measure != "overlap" and p > q:
        pytest.skip("a normalised measure's threshold is at most 1")
    threshold = Threshold(measure, p, q)
    sizes = np.array([0, 1, 2, 3, 5, 40, 1000], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    runs = local._Runs(np.arange(len(sizes) + 1), local.Flat.of(np.arange(int(offsets[-1])), offsets))
    code, pp, qq = threshold.args()
    want = [bool(meets(n, n, n, code, pp, qq)) for n in sizes]
    assert local._qualifying_runs(runs, threshold).tolist() == want
    assert want[0] is False and any(want)
