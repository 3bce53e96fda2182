"""The kNN ``brute`` method's GEMM filter (kernels/knn_gemm.py): the same lists as the direct search.

The filter may only rule out rows that could never enter a query's list; everything else is decided
exactly.  So the lists after a GEMM-form search must equal the direct driver's, bit for bit, on
random and adversarial data (ties, duplicates, offsets, scales near float32's limits, queries far
outside), from fresh lists and from lists carried in from another block.  The filter must also
filter: on clustered data almost every row is ruled out by the products alone.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from daskjoin.kernels.knn import KnnBrute, _brute, empty_lists
from daskjoin.kernels.knn_gemm import GEMM_MIN_D, GemmBrute, Shifted, box_centre

from test_knn_adversarial import assert_matches


def direct(queries, ids, data, first_id, k, exclude, start=None):
    best = empty_lists(len(queries), k) if start is None else (start[0].copy(), start[1].copy())
    _brute(np.ascontiguousarray(queries), ids, exclude, np.ascontiguousarray(data), first_id, *best)
    return best


def gemm(queries, ids, data, first_id, k, exclude, start=None):
    best = empty_lists(len(queries), k) if start is None else (start[0].copy(), start[1].copy())
    driver = KnnBrute(data, k, first_id)
    assert driver.gemm is not None, "the GEMM path must run for these tests"
    shifted = driver.gemm.prepare(queries)
    assert shifted is not None, "the float32 filter must apply to these rows"
    driver.gemm.search(queries, shifted, ids, *best, exclude)
    return best


def assert_same_lists(a, b):
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def _clusters(n, d, seed, spread=0.05, centres=20, dtype=np.float32):
    rng = np.random.default_rng(seed)
    c = rng.random((centres, d))
    return (c[rng.integers(0, centres, n)] + spread * rng.standard_normal((n, d))).astype(dtype)


CASES = {
    "clusters_d64_f32": lambda: _clusters(700, 64, 1),
    "clusters_d8_f64": lambda: _clusters(600, 8, 2, dtype=np.float64),
    "binary_d16_ties": lambda: np.random.default_rng(3).integers(0, 2, (400, 16)).astype(np.float64),
    "binary_d64_offset_1e6": lambda: 1e6 + np.random.default_rng(4).integers(0, 2, (300, 64)).astype(np.float64),
    "offset_1e12_f64": lambda: 1e12 + _clusters(300, 8, 5, dtype=np.float64),
    "duplicates_d32": lambda: np.repeat(_clusters(40, 32, 6), 9, axis=0),
    "lattice_d8": lambda: np.random.default_rng(7).integers(0, 3, (500, 8)).astype(np.float32),
    "tiny_1e-30": lambda: _clusters(300, 8, 8, dtype=np.float64) * 1e-30,
    "subnormal_f32_scale": lambda: _clusters(300, 8, 9, dtype=np.float64) * 1e-42,
    "f64_below_f32_range": lambda: _clusters(200, 10, 10, dtype=np.float64) * 1e-300,
    "large_1e15": lambda: _clusters(300, 8, 11, dtype=np.float64) * 1e15,
    "mixed_scales_per_dim": lambda: _clusters(300, 9, 12, dtype=np.float64) * np.logspace(-20, 10, 9),
    "one_row_far": lambda: np.vstack([_clusters(200, 12, 13, dtype=np.float64), np.full((1, 12), 1e9)]),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("k", [1, 5, 37])
def test_self_search_equals_direct(case, k):
    x = CASES[case]()
    ids = np.arange(len(x), dtype=np.int64)
    assert_same_lists(gemm(x, ids, x, 0, k, True), direct(x, ids, x, 0, k, True))


@pytest.mark.parametrize("case", sorted(CASES))
def test_lists_carried_from_another_block_equal_direct(case):
    """Lists already holding neighbours from a first block (tight roots from the start) and a block offset."""
    x = CASES[case]()
    ids = np.arange(len(x), dtype=np.int64)
    half = len(x) // 2
    start = direct(x, ids, x[:half], 0, 6, True)
    got = gemm(x, ids, x[half:], half, 6, True, start)
    want = direct(x, ids, x[half:], half, 6, True, start)
    assert_same_lists(got, want)


def test_cross_join_far_queries_equal_direct_and_oracle():
    rng = np.random.default_rng(20)
    data = _clusters(500, 16, 21, dtype=np.float64)
    queries = np.vstack([rng.random((60, 16)) + 300.0, rng.random((60, 16)) - 1e4, data[:30] + 1e-7])
    ids = np.arange(len(queries), dtype=np.int64)
    got = gemm(queries, ids, data, 0, 9, False)
    assert_same_lists(got, direct(queries, ids, data, 0, 9, False))


def test_through_the_api_against_the_oracle():
    import daskjoin as dj

    x = _clusters(400, 64, 30)
    x[50:60] = x[7]  # duplicates at distance 0
    for k in (1, 16, 399):
        got = dj.knn_join(x, k=k, method="brute", backend="cpu").compute()
        assert_matches(got, x, None, k, f"gemm k={k}")


def test_rows_too_large_for_float32_fall_back_to_the_direct_search():
    x = _clusters(200, 8, 40, dtype=np.float64) * 1e25
    x[0, 0] = 1e40  # beyond float32's range altogether
    driver = KnnBrute(x, 4)
    assert driver.gemm.prepare(x) is None  # squares would overflow float32
    ids = np.arange(len(x), dtype=np.int64)
    best = empty_lists(len(x), 4)
    driver.search(x, ids, *best, True)
    assert_same_lists(best, direct(x, ids, x, 0, 4, True))


def test_below_the_crossover_the_direct_search_runs():
    assert KnnBrute(np.random.default_rng(0).random((50, GEMM_MIN_D - 1)), 3).gemm is None
    assert KnnBrute(np.random.default_rng(0).random((50, GEMM_MIN_D)), 3).gemm is not None


def test_the_filter_rules_out_almost_every_row_on_clusters():
    x = _clusters(3000, 64, 50, centres=60)
    driver = GemmBrute(x, 0)
    ids = np.arange(len(x), dtype=np.int64)
    best = empty_lists(len(x), 8)
    driver.search(x, driver.prepare(x), ids, *best, True)
    share = driver.decided / len(x) ** 2
    assert 8 * len(x) <= driver.decided and share < 0.1, share  # ~k ln(n/k) per query, not n


def test_shifted_rows_and_norms():
    x = np.array([[1e6, 2.0], [1e6 + 2, 4.0]])
    c = box_centre(x)
    np.testing.assert_array_equal(c, [1e6 + 1, 3.0])
    s = Shifted(x, c)
    np.testing.assert_array_equal(s.x32, np.float32([[-1, -1], [1, 1]]))
    np.testing.assert_array_equal(s.n2, np.float32([2, 2]))
    assert s.fits and np.all(s.norm >= np.sqrt(2))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_property_gemm_equals_direct(data):
    d = data.draw(st.integers(GEMM_MIN_D, 40), label="d")
    n = data.draw(st.integers(2, 60), label="n")
    scale = data.draw(st.sampled_from([1e-20, 1e-3, 1.0, 1e3, 1e12]), label="scale")
    offset = data.draw(st.sampled_from([0.0, 1.0, -1e6, 1e9]), label="offset")
    dtype = data.draw(st.sampled_from([np.float32, np.float64]), label="dtype")
    ints = data.draw(hnp.arrays(np.int8, (n, d), elements=st.integers(-3, 3)), label="lattice")
    noise = data.draw(st.booleans(), label="noise")
    x = ints.astype(np.float64) * scale + offset
    if noise:
        x = x + np.random.default_rng(n * d).standard_normal((n, d)) * scale * 0.1
    x = x.astype(dtype)
    k = data.draw(st.integers(1, n - 1), label="k")
    ids = np.arange(n, dtype=np.int64)
    driver = KnnBrute(x, k)
    best = empty_lists(n, k)
    driver.search(x, ids, *best, True)  # falls back to the direct search where the filter does not apply
    assert_same_lists(best, direct(x, ids, x, 0, k, True))


def test_product_tiles_smaller_than_the_data(monkeypatch):
    """Queries and rows cut into many product tiles (tile edges inside clusters and runs of ties)."""
    from daskjoin.kernels import knn_gemm

    monkeypatch.setattr(knn_gemm, "Q_TILE", 37)
    monkeypatch.setattr(knn_gemm, "X_TILE", 53)
    for case in ("clusters_d64_f32", "binary_d16_ties", "duplicates_d32"):
        x = CASES[case]()
        ids = np.arange(len(x), dtype=np.int64)
        for k in (1, 9, 120):
            assert_same_lists(gemm(x, ids, x, 0, k, True), direct(x, ids, x, 0, k, True))


def flush_case():
    """Rows whose float32 products fall below 2^-126 (flushed to zero by some hardware and libraries): with a
    norm floor of 2^-60 the GPU filter ruled out the true neighbours j = 45..49 here (found in review)."""
    e, n = 2.0 ** -66, 50
    c = 2.0 ** -62 * (1 + (n - np.arange(n)) * 2.0 ** -10)
    b = np.zeros((n + 1, 4))
    b[:n, 0], b[:n, 1] = e, c
    b[n] = [-e, -c.max(), 0, 0]  # the box centre at 0
    return np.array([[2.0 ** -62, 0, 0, 0]]), b


def test_products_below_float32_range_against_the_oracle():
    import daskjoin as dj

    a, b = flush_case()
    got = dj.knn_join(a, b, k=5, method="brute", backend="cpu").compute()
    assert_matches(got, a, b, 5, "flush case")
    assert sorted(got["j"]) == [45, 46, 47, 48, 49]


def test_shifted_rows_a_block_at_a_time_are_the_whole_computation():
    """The host builds the float32 rows, squares and norms block by block (float64 temporaries of one block): the
    same bits as in one piece, across block edges and for rows past float32's range."""
    rng = np.random.default_rng(11)
    x = rng.random((1001, 13)) * 1e3 - 3
    x[500] = 1e39  # beyond float32: the block holding it does not fit, and neither does the whole
    centre = box_centre(x[:400])
    whole, blocks = Shifted(x, centre, step=1 << 30), Shifted(x, centre, step=64)
    fortran = Shifted(np.asfortranarray(x), centre, step=64)  # column-major input: the same bits too
    for name in ("x32", "n2", "norm"):
        np.testing.assert_array_equal(getattr(whole, name), getattr(blocks, name))
        np.testing.assert_array_equal(getattr(whole, name), getattr(fortran, name))
    assert not whole.fits and not blocks.fits and Shifted(x[:400], centre, step=7).fits
