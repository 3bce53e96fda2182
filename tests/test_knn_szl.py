"""The kNN ``szl`` method (kernels/knn_szl.py): LSS's Set of Z-Lists, exact against brute force.

The Z-order comparison must keep LSS's Lemma 4.1 (componentwise <= implies Z <=), the lists must
be sorted by it, and the search must give the direct brute force's lists on data that strains the
quantisation: zero-width dimensions, extents that overflow, subnormal and huge coordinates, queries
far outside the block, duplicates and lattice ties; hypothesis draws more.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from daskjoin.kernels.knn import _brute, empty_lists
from daskjoin.kernels.knn_szl import TOP, KnnSzl, SzlIndex, _zcmp, quantise, quantiser, shifts

from test_knn_adversarial import EXTREME_CASES, assert_matches, knn, ks_for


def brute_lists(queries, data, k, exclude, start=None, first_id=0):
    best = empty_lists(len(queries), k) if start is None else (start[0].copy(), start[1].copy())
    _brute(np.ascontiguousarray(queries), np.arange(len(queries), dtype=np.int64), exclude,
           np.ascontiguousarray(data), first_id, *best)
    return best


def szl_lists(queries, data, k, exclude, start=None, first_id=0):
    best = empty_lists(len(queries), k) if start is None else (start[0].copy(), start[1].copy())
    KnnSzl(data, k, first_id).search(queries, np.arange(len(queries), dtype=np.int64), *best, exclude)
    return best


def assert_same(a, b):
    """The same neighbours at the same distances (heap layouts depend on the order rows were offered)."""
    np.testing.assert_array_equal(np.sort(a[1], axis=1), np.sort(b[1], axis=1))
    np.testing.assert_array_equal(np.sort(a[0], axis=1), np.sort(b[0], axis=1))


def zcmp(a, b):
    coords = np.asarray([b], np.uint32)
    return _zcmp(np.asarray(a, np.int64), coords, 0, np.int64(0))


def test_z_order_keeps_the_box_lemma():
    rng = np.random.default_rng(0)
    for d in (1, 2, 3, 7):
        for _ in range(300):
            a = rng.integers(0, 64, d)
            b = a + rng.integers(0, 5, d)
            assert zcmp(a, b) <= 0 and zcmp(b, a) >= 0
            assert (zcmp(a, b) == 0) == bool((a == b).all())


def test_z_order_is_the_interleaved_key_order():
    """Against explicit bit interleaving (dimension 0's bit first at each level) in 2-d and 3-d."""
    rng = np.random.default_rng(1)
    for d in (2, 3):
        pts = rng.integers(0, 256, (200, d))

        def key(p):
            return sum(((int(p[t]) >> bit) & 1) << (bit * d + (d - 1 - t)) for bit in range(8) for t in range(d))

        for u in range(0, 200, 2):
            a, b = pts[u], pts[u + 1]
            want = (key(a) > key(b)) - (key(a) < key(b))
            assert zcmp(a, b) == want


def test_lists_are_sorted_in_shifted_z_order():
    x = np.random.default_rng(2).random((500, 3))
    ix = SzlIndex(x)
    assert ix.lists.shape == (4, 500)
    for lst, shift in zip(ix.lists, ix.shift_of):
        assert sorted(lst.tolist()) == list(range(500))
        for e in range(499):
            a = ix.coords[lst[e]].astype(np.int64) + shift
            assert _zcmp(a, ix.coords, lst[e + 1], np.int64(shift)) <= 0


def test_quantiser_edges():
    lo, hi = np.array([0.0, 5.0, -1e308]), np.array([1.0, 5.0, 1e308])
    scale = quantiser(lo, hi)
    assert scale[0] == TOP and scale[1] == 0.0 and scale[2] == 0.0  # zero and overflowing extents
    q = quantise(np.array([[0.0, 5.0, 3.0], [1.0, 5.0, -3.0], [0.5, 5.0, 0.0]]), lo, scale)
    assert q[:, 0].tolist() == [0, TOP, TOP // 2 + 1] or q[:, 0].tolist() == [0, TOP, TOP // 2]
    assert (q[:, 1:] == 0).all()
    assert len(shifts(64)) == 8 and shifts(2).tolist() == [0, (1 << 30) // 3, (2 << 30) // 3]


SZL_CASES = {
    "zero_width_dim": lambda: np.column_stack([np.random.default_rng(3).random(300), np.full(300, 7.0)]),
    "huge_extent": lambda: np.random.default_rng(4).uniform(-1e307, 1e307, (200, 2)),
    "subnormal": lambda: np.random.default_rng(5).random((200, 2)) * 1e-310,
    "lattice_ties_3d": lambda: np.random.default_rng(6).integers(0, 4, (400, 3)).astype(np.float64),
    "duplicates": lambda: np.repeat(np.random.default_rng(7).random((30, 2)), 10, axis=0),
    "offset_1e9_f32": lambda: (1e9 + np.random.default_rng(8).random((300, 3)) * 100).astype(np.float32),
    "clusters_d16": lambda: np.random.default_rng(9).random((20, 16))[np.random.default_rng(10).integers(0, 20, 400)]
    + 0.01 * np.random.default_rng(11).standard_normal((400, 16)),
    "d1": lambda: np.random.default_rng(12).random((300, 1)),
}


@pytest.mark.parametrize("case", sorted(SZL_CASES))
@pytest.mark.parametrize("k", [1, 4, 29])
def test_self_search_equals_brute(case, k):
    x = SZL_CASES[case]()
    assert_same(szl_lists(x, x, k, True), brute_lists(x, x, k, True))


def test_far_queries_and_carried_lists_equal_brute():
    rng = np.random.default_rng(20)
    data = rng.random((400, 3))
    queries = np.vstack([rng.random((30, 3)) + 1e4, rng.random((30, 3)) * -1e300, rng.random((30, 3))])
    assert_same(szl_lists(queries, data, 5, False), brute_lists(queries, data, 5, False))
    start = brute_lists(queries, data[:200], 5, False)  # lists carried in from another block (rows 0..199)
    got = szl_lists(queries, data[200:], 5, False, start, first_id=200)
    want = brute_lists(queries, data[200:], 5, False, start, first_id=200)
    assert_same(got, want)
    assert_same(got, brute_lists(queries, data, 5, False))  # the one-block answer


@pytest.mark.parametrize("case", sorted(EXTREME_CASES))
def test_extreme_magnitudes(case):
    a, b = EXTREME_CASES[case]
    n_data = len(a) if b is None else len(b)
    for k in ks_for(len(a), n_data, b is None):
        assert_matches(knn(a, b, k, "szl"), a, b, k, f"szl k={k}")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_property_szl_equals_brute(data):
    d = data.draw(st.integers(1, 6), label="d")
    n = data.draw(st.integers(2, 50), label="n")
    scale = data.draw(st.sampled_from([1e-300, 1e-5, 1.0, 1e8, 1e300]), label="scale")
    ints = data.draw(hnp.arrays(np.int8, (n, d), elements=st.integers(-4, 4)), label="lattice")
    x = ints.astype(np.float64) * scale
    if data.draw(st.booleans(), label="noise"):
        x = x + np.random.default_rng(n).standard_normal((n, d)) * scale * 0.3
    k = data.draw(st.integers(1, n - 1), label="k")
    assert_same(szl_lists(x, x, k, True), brute_lists(x, x, k, True))
