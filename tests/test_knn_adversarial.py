"""The kNN-join against a float64 brute-force oracle on random and adversarial inputs.

The oracle is written here from the documented rule alone: for rows ``i`` of A and ``j`` of B,
``s = 0; for t in range(d): u = float64(a[i, t]) - float64(b[j, t]); s += u * u``; each row's k
nearest by ``(s, j)`` (ties to the smaller j), a row never its own neighbour in a self-join (its
duplicates are, at distance 0); ``dist = float32(sqrt(s))``; rows ordered by ``(i, j)``.

Every case runs every CPU method ("grid", "brute", "szl"), with the default budget (one task, one data
block) and with a small budget (several query tasks and several data blocks; Zarr inputs with small
chunks give the blocks their own bounding boxes, so per-query block pruning is exercised too), and
must give the oracle's rows exactly: i, j, rank and dist bit for bit.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import daskjoin as dj
from daskjoin.planning.knn import LIST_BYTES, ROW_OUT_BYTES
from daskjoin.planning.plan import row_bytes

METHODS = ("grid", "brute", "szl")


# ------------------------------------------------------------------ the oracle


def oracle(a, b, k):
    """``(i, j, dist, rank)`` numpy arrays, rows ordered by (i, j); ``b=None``: a self-join."""
    a64 = np.asarray(a).astype(np.float64)
    b64 = a64 if b is None else np.asarray(b).astype(np.float64)
    n, m = a64.shape[0], b64.shape[0]
    s = np.zeros((n, m), np.float64)
    for t in range(a64.shape[1]):  # dimension order, one rounding per subtraction, product and sum
        u = a64[:, t][:, None] - b64[:, t][None, :]
        s = s + u * u
    assert np.isfinite(s).all(), "oracle inputs must keep squared distances finite"
    ranked = s.copy()
    if b is None:
        np.fill_diagonal(ranked, np.inf)  # a row is never its own neighbour (every other s is finite)
    # a stable sort by s keeps equal distances in column order: ties go to the smaller j
    order = np.argsort(ranked, axis=1, kind="stable")[:, :k]
    rank = np.broadcast_to(np.arange(1, k + 1, dtype=np.int32), order.shape)
    by_j = np.argsort(order, axis=1, kind="stable")
    j = np.take_along_axis(order, by_j, axis=1)
    rank = np.take_along_axis(rank, by_j, axis=1)
    d2 = np.take_along_axis(s, j, axis=1)
    i = np.repeat(np.arange(n, dtype=np.int64), k)
    with np.errstate(over="ignore"):  # distances beyond float32's range are inf, as float32(sqrt(s)) says
        dist = np.sqrt(d2).astype(np.float32).reshape(-1)
    return i, j.reshape(-1).astype(np.int64), dist, rank.reshape(-1)


def test_oracle_by_hand():
    """The oracle itself on a case worked by hand: ties to the smaller j, duplicates at 0, no self."""
    x = np.array([[0.0], [1.0], [-1.0], [1.0], [3.0]])
    i, j, dist, rank = oracle(x, None, 2)
    assert i.tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    # row 0: rows 1, 2, 3 all at distance 1 -> j 1 and 2; row 1: its duplicate 3 (0), then 0 (1)
    assert j.tolist() == [1, 2, 0, 3, 0, 1, 0, 1, 1, 3]
    assert rank.tolist() == [1, 2, 2, 1, 1, 2, 2, 1, 1, 2]
    assert dist.tolist() == [1, 1, 1, 0, 1, 2, 1, 0, 2, 2]
    # the summation order is the documented one: in dimension order 1 + 1 + 1e16 = 1e16 + 2 (exact), while
    # summed the other way round 1e16 + 1 + 1 rounds to 1e16, a tie with row 1's 1e16 (and j=0 would win)
    q = np.array([[1.0, 1.0, 1e8]])
    b = np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    _, jj, _, rr = oracle(q, b, 2)
    assert jj.tolist() == [0, 1] and rr.tolist() == [2, 1]


# ------------------------------------------------------------------ running daskjoin and comparing


def knn(a, b, k, method, budget=None):
    # in this thread (``scheduler="sync"``): the cases are tiny and their partitions many, so two task threads
    # spend their time taking the GIL from each other (a 60-row join of 61 tasks: 0.06 s here, 0.12 s on
    # threads); the threaded path is the same code, run by test_knn.py, test_api.py and test_threading_layer.py
    return dj.knn_join(a, b, k=k, method=method, backend="cpu", memory_budget=budget).compute(scheduler="sync")


def assert_matches(got, a, b, k, what=""):
    want_i, want_j, want_dist, want_rank = oracle(a, b, k)
    assert list(got.columns) == ["i", "j", "dist", "rank"], what
    assert [str(t) for t in got.dtypes] == ["int64", "int64", "float32", "int32"], what
    assert len(got) == len(want_i), what
    i, j = got["i"].to_numpy(), got["j"].to_numpy()
    dist, rank = got["dist"].to_numpy(), got["rank"].to_numpy()
    bad = np.flatnonzero((i != want_i) | (j != want_j) | (rank != want_rank) | (dist != want_dist))
    if len(bad):
        row = int(want_i[bad[0]]) if bad[0] < len(want_i) else -1
        sel_w, sel_g = want_i == row, i == row
        raise AssertionError(
            f"{what}: {len(bad)} rows differ from the oracle; first at query row {row}:\n"
            f"  want j={want_j[sel_w].tolist()} rank={want_rank[sel_w].tolist()} dist={want_dist[sel_w].tolist()}\n"
            f"  got  j={j[sel_g].tolist()} rank={rank[sel_g].tolist()} dist={dist[sel_g].tolist()}")


def small_budget(n_a: int, n_data: int, d: int, k: int) -> int:
    """A budget that cuts the data into about 3 blocks and the queries into several tasks (the planner's
    own per-row costs; :func:`check_split` confirms the cut)."""
    per_row = row_bytes(d, 8)
    per_query = per_row + k * (LIST_BYTES + ROW_OUT_BYTES)
    budget = 2 * per_row * max(1, n_data // 3)
    if n_a >= 2:
        budget = min(budget, 2 * per_query * max(1, n_a // 3))
    return max(budget, 1)


def check_split(a, b, k, method, budget):
    """The small budget really gives several tasks and several data blocks (where the rows allow)."""
    plan = dj.plan_knn(a, b, k=k, method=method, backend="cpu", memory_budget=budget)
    n_data = len(a) if b is None else len(b)
    if len(a) >= 2:
        assert plan.ntasks >= 2, plan.explain()
    if n_data >= 2:
        assert len(plan.blocks) >= 2, plan.explain()
    return plan


def ks_for(n_a: int, n_data: int, selfjoin: bool):
    cands = n_data - 1 if selfjoin else n_data
    return sorted({k for k in (1, 2, 16, cands) if 1 <= k <= cands})


def run_all_ks(a, b, method):
    """k in {1, 2, 16, candidates}, each with the default budget and with a small one."""
    n_data = len(a) if b is None else len(b)
    for k in ks_for(len(a), n_data, b is None):
        assert_matches(knn(a, b, k, method), a, b, k, f"{method} k={k} default budget")
        budget = small_budget(len(a), n_data, a.shape[1], k)
        check_split(a, b, k, method, budget)
        assert_matches(knn(a, b, k, method, budget), a, b, k, f"{method} k={k} budget={budget}")


# ------------------------------------------------------------------ the cases


def _rng(seed):
    return np.random.default_rng(seed)


def _lattice(shape, dups, seed, scale=1.0, shift=0.0):
    axes = np.meshgrid(*[np.arange(s, dtype=np.float64) for s in shape], indexing="ij")
    pts = np.stack([ax.ravel() for ax in axes], axis=1)
    rng = _rng(seed)
    pts = np.concatenate([pts, pts[rng.integers(0, len(pts), dups)]])
    return pts[rng.permutation(len(pts))] * scale + shift


def _blobs(n, d, seed, dtype=np.float64):
    rng = _rng(seed)
    x = rng.normal(0.0, 1.0, (n, d))
    x[n // 2:] += 1e3
    return x[rng.permutation(n)].astype(dtype)


SELF_CASES = {
    # integer lattices: many ties at equal distance, points on every cell boundary
    "lattice_1d": lambda: _rng(1).integers(0, 8, (60, 1)).astype(np.float64),
    "lattice_2d": lambda: _lattice((6, 6), 24, 2),
    "lattice_3d": lambda: _lattice((4, 4, 4), 16, 3),
    "lattice_2d_f32_negative": lambda: _lattice((5, 7), 10, 4, scale=0.5, shift=-4.0).astype(np.float32),
    "lattice_3d_offset_1e6": lambda: _lattice((3, 3, 3), 9, 5, shift=1e6),
    # exact duplicates, all points identical
    "duplicates_2d": lambda: np.repeat(_rng(6).random((5, 2)), 12, axis=0)[_rng(7).permutation(60)],
    "identical_3d": lambda: np.full((30, 3), 7.25),
    "identical_1d_f32": lambda: np.full((10, 1), -3.5, np.float32),
    "two_points": lambda: np.array([[0.0, 1.0], [0.0, 1.0 + 2 ** -40]]),
    # clumps 1e3 apart, large offsets, negative values
    "blobs_2d": lambda: _blobs(200, 2, 8),
    "blobs_3d_f32": lambda: _blobs(150, 3, 9, np.float32),
    "offset_1e6_f64": lambda: 1e6 + _rng(10).random((120, 3)),
    "offset_1e6_f32": lambda: (1e6 + _rng(11).random((120, 2)) * 8).astype(np.float32),  # ulp 1/16: ties
    "negative_2d": lambda: _rng(12).uniform(-50.0, -10.0, (100, 2)),
    # random data in every dimensionality
    "random_d1": lambda: _rng(13).normal(size=(100, 1)),
    "random_d2": lambda: _rng(14).normal(size=(100, 2)),
    "random_d3": lambda: _rng(15).normal(size=(100, 3)).astype(np.float32),
    "random_d8": lambda: _rng(16).normal(size=(100, 8)),
    "random_d64": lambda: _rng(17).normal(size=(80, 64)).astype(np.float32),
    # high-dimensional ties: binary coordinates (Hamming-like distances), with an offset
    "binary_d8": lambda: _rng(18).integers(0, 2, (100, 8)).astype(np.float64),
    "binary_d64_offset": lambda: 1e6 + _rng(19).integers(0, 2, (70, 64)).astype(np.float64),
    # mixed scales: summation order and rounding decide near-ties
    "scales_1e8_1_1e-8": lambda: _rng(20).normal(size=(80, 3)) * np.array([1e8, 1.0, 1e-8]),
    "collinear_3d": lambda: np.outer(_rng(21).integers(0, 20, 60), [1.0, 2.0, -3.0]),
    "multiscale_2d": lambda: np.concatenate([_rng(22).random((40, 2)) * 1e-9, _rng(23).random((40, 2)) * 1e6]),
}


def _far_outside(seed, d, n_a=40, n_b=100, dist=1e5):
    rng = _rng(seed)
    b = rng.random((n_b, d))
    direction = rng.choice([-1.0, 0.0, 1.0], size=(n_a, d))
    direction[np.all(direction == 0.0, axis=1), 0] = 1.0
    a = rng.random((n_a, d)) + direction * dist
    return a, b


CROSS_CASES = {
    "random_2d": lambda: (_rng(30).normal(size=(80, 2)), _rng(31).normal(size=(120, 2))),
    "random_d8_f32": lambda: (_rng(32).normal(size=(50, 8)).astype(np.float32),
                              _rng(33).normal(size=(70, 8)).astype(np.float32)),
    "far_outside_1d": lambda: _far_outside(34, 1),
    "far_outside_2d": lambda: _far_outside(35, 2),
    "far_outside_3d_all_directions": lambda: _far_outside(36, 3, n_a=60),
    "far_outside_d64": lambda: (_rng(37).normal(size=(30, 64)) + 500.0, _rng(38).normal(size=(60, 64))),
    "single_candidate_d2": lambda: (_rng(39).normal(size=(30, 2)), np.array([[0.5, -0.5]])),
    "single_candidate_d64": lambda: (_rng(40).normal(size=(20, 64)), _rng(41).normal(size=(1, 64))),
    "len_b_equals_5": lambda: (_rng(42).normal(size=(40, 3)), _rng(43).normal(size=(5, 3))),
    # half-integer queries: equidistant from 2, 4 or 8 lattice points
    "lattice_2d_half_integer_queries": lambda: (_lattice((6, 6), 0, 44) - 0.5, _lattice((5, 5), 10, 45)),
    "lattice_3d_half_integer_queries": lambda: (_lattice((4, 4, 4), 0, 46) - 0.5, _lattice((3, 3, 3), 5, 47)),
    "identical_b": lambda: (_rng(48).normal(size=(30, 2)), np.full((20, 2), 1.0)),
    "blobs_queries_in_one": lambda: (_rng(50).normal(size=(30, 2)), _blobs(120, 2, 51)),
    # the summation order decides: 1 + 1 + 1e16 (dimension order) > 1e16, equal if summed the other way
    "summation_order": lambda: (np.array([[1.0, 1.0, 1e8], [1.0, 1.0, -1e8]]),
                                np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])),
    "offset_1e6_mixed_dtypes": lambda: ((1e6 + _rng(52).random((50, 2)) * 4).astype(np.float32),
                                        1e6 + _rng(53).random((70, 2)) * 4),
    "negative_f32": lambda: (_rng(54).uniform(-9, -1, (40, 2)).astype(np.float32),
                             _rng(55).uniform(-9, -1, (60, 2)).astype(np.float32)),
}


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("case", sorted(SELF_CASES))
def test_self_join_matches_oracle(case, method):
    x = SELF_CASES[case]()
    run_all_ks(x, None, method)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("case", sorted(CROSS_CASES))
def test_cross_join_matches_oracle(case, method):
    a, b = CROSS_CASES[case]()
    run_all_ks(a, b, method)


def test_cases_really_are_adversarial():
    """Guards against the adversarial cases quietly losing their point: ties, duplicates, offsets."""
    x = SELF_CASES["lattice_2d"]()
    _, j, dist, _ = oracle(x, None, 4)
    # many queries hold equal distances among their 4 nearest (ties decided by j)
    assert (np.diff(dist.reshape(-1, 4), axis=1) == 0).any()
    assert len(np.unique(SELF_CASES["duplicates_2d"](), axis=0)) == 5
    assert len(np.unique(SELF_CASES["identical_3d"](), axis=0)) == 1
    a, b = CROSS_CASES["far_outside_2d"]()
    assert (np.abs(a - 0.5) > 1e4).any(axis=1).all() and (b >= 0).all() and (b <= 1).all()
    f32 = SELF_CASES["offset_1e6_f32"]()
    assert f32.dtype == np.float32 and len(np.unique(f32, axis=0)) < len(f32)
    # the half-integer queries are equidistant from several lattice points
    qa, qb = CROSS_CASES["lattice_2d_half_integer_queries"]()
    _, _, dd, _ = oracle(qa, qb, 4)
    assert (dd.reshape(-1, 4) == dd.reshape(-1, 4)[:, :1]).all(axis=1).any()


def test_method_auto_matches_oracle():
    """``method="auto"`` (grid for d <= 6, szl or brute beyond: planning/knn.py) on a lattice and in 64 dimensions."""
    for x in (SELF_CASES["lattice_3d"](), SELF_CASES["binary_d64_offset"]()):
        for k in (1, 7):
            got = dj.knn_join(x, k=k, backend="cpu").compute()
            assert_matches(got, x, None, k, f"auto d={x.shape[1]} k={k}")


# ------------------------------------------------------------------ extreme magnitudes (finite squared distances)

# The grid's cell width comes from the product of the block's (up to 3 widest) extents, which underflows to 0
# for extents like 1e-200 in 2 dimensions and overflows to inf for 1e103+ in 3 dimensions (cell_width once
# divided by it: ZeroDivisionError); it is now computed in logarithms.
EXTREME_CASES = {
    "extent_product_underflows_2d": (np.array([[0.0, 0.0], [1e-200, 1e-200], [0.0, 1e-200]]), None),
    "extent_product_overflows_3d": (np.array([[0.0, 0.0, 0.0], [1e120, 1e120, 1e120], [1e120, 0.0, 0.0]]), None),
    "b_extent_product_underflows_cross": (np.array([[5.0, -5.0], [0.0, 0.0]]),
                                          np.array([[0.0, 0.0], [1e-200, 1e-200], [0.0, 1e-200], [3e-201, 0.0]])),
}
@pytest.mark.parametrize("case", sorted(EXTREME_CASES))
def test_extreme_magnitudes_brute(case):
    a, b = EXTREME_CASES[case]
    n_data = len(a) if b is None else len(b)
    for k in ks_for(len(a), n_data, b is None):
        assert_matches(knn(a, b, k, "brute"), a, b, k, f"brute k={k}")


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize("case", sorted(EXTREME_CASES))
def test_extreme_magnitudes_grid(case):
    a, b = EXTREME_CASES[case]
    n_data = len(a) if b is None else len(b)
    for k in ks_for(len(a), n_data, b is None):
        assert_matches(knn(a, b, k, "grid"), a, b, k, f"grid k={k}")


def test_moderately_extreme_magnitudes_grid():
    """Extents that do not under/overflow the product: subnormal-sized 1-d, 1e153 in 2-d, mixed scales."""
    cases = [(np.array([[0.0], [1e-320], [5e-324], [1e-300]]), None),
             (np.array([[0.0, 0.0], [1e153, 1e153], [1e153, 0.0]]), None),
             (np.array([[0.0, 0.0], [1e-170, 1e150], [0.0, 1e150], [1e-170, 0.0]]), None),
             (_rng(70).random((10, 2)) * 1e100, _rng(71).random((50, 2)) * 1e-6)]  # far queries, tiny cells
    for a, b in cases:
        n_data = len(a) if b is None else len(b)
        for k in ks_for(len(a), n_data, b is None):
            for method in METHODS:
                assert_matches(knn(a, b, k, method), a, b, k, f"{method} k={k} {a.tolist()[:2]}")


# ------------------------------------------------------------------ Zarr inputs: blocks with their own boxes


def _sorted_rows(x):
    """Rows in lexicographic order (by the first column, then the next...): blocks become slabs."""
    return x[np.lexsort(x.T[::-1])]


ZARR_CASES = {
    "blobs_2d_sorted": lambda: (_sorted_rows(_blobs(80, 2, 60)), None),
    "lattice_2d_sorted": lambda: (_sorted_rows(_lattice((6, 6), 8, 61)), None),
    "offset_1e6_f32_sorted": lambda: (_sorted_rows(SELF_CASES["offset_1e6_f32"]()[:60]), None),
    "far_outside_2d_sorted_b": lambda: (lambda a, b: (a, _sorted_rows(b)))(*_far_outside(62, 2, n_a=30, n_b=60)),
    "lattice_3d_half_integer_sorted_b": lambda: (_lattice((4, 4, 4), 0, 63) - 0.5,
                                                 _sorted_rows(_lattice((4, 4, 4), 8, 64))),
    "binary_d8_sorted": lambda: (_sorted_rows(SELF_CASES["binary_d8"]()[:60]), None),
}


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("case", sorted(ZARR_CASES))
def test_zarr_blocks_pruned_by_box_match_oracle(case, method, zarr_writer):
    a, b = ZARR_CASES[case]()
    path_a = zarr_writer(a, chunk_rows=8)
    path_b = None if b is None else zarr_writer(b, chunk_rows=8)
    n_data = len(a) if b is None else len(b)
    # small k: the k-th distances are short, so most blocks are pruned for most queries (k = n - 1 with
    # several blocks is covered on in-memory inputs above)
    for k in (1, 3, 8):
        budget = small_budget(len(a), n_data, a.shape[1], k)
        plan = check_split(path_a, path_b, k, method, budget)
        # rows sorted along x: the blocks' boxes differ, so pruning by box distance has work to do
        assert len({(tuple(lo), tuple(hi)) for lo, hi in zip(plan.block_lo, plan.block_hi)}) >= 2
        got = dj.knn_join(path_a, path_b, k=k, method=method, backend="cpu", memory_budget=budget).compute(
            scheduler="sync")
        assert_matches(got, a, b, k, f"zarr {method} k={k} budget={budget}")


# ------------------------------------------------------------------ property tests


TIE_VALUES = [-2.0, -1.0, 0.0, 0.5, 1.0, 3.0]


@st.composite
def knn_inputs(draw):
    d = draw(st.integers(1, 5))
    selfjoin = draw(st.booleans())
    dtypes = (draw(st.sampled_from([np.float32, np.float64])), draw(st.sampled_from([np.float32, np.float64])))
    n_a = draw(st.integers(2 if selfjoin else 1, 60))
    n_b = None if selfjoin else draw(st.integers(1, 60))
    if draw(st.booleans()):
        elements = st.sampled_from(TIE_VALUES)  # a small set: ties and duplicates everywhere
    else:
        elements = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, width=32)
    offset = draw(st.sampled_from([0.0, 0.0, -7.0, 1e6]))
    a = (draw(hnp.arrays(np.float64, (n_a, d), elements=elements)) + offset).astype(dtypes[0])
    b = None if selfjoin else (draw(hnp.arrays(np.float64, (n_b, d), elements=elements)) + offset).astype(dtypes[1])
    cands = n_a - 1 if selfjoin else n_b
    k = draw(st.one_of(st.integers(1, cands), st.just(cands)))
    return a, b, k


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(knn_inputs())
def test_property_default_budget(inputs):
    a, b, k = inputs
    for method in METHODS:
        assert_matches(knn(a, b, k, method), a, b, k, f"{method} k={k}")


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(knn_inputs())
def test_property_small_budget(inputs):
    a, b, k = inputs
    n_data = len(a) if b is None else len(b)
    budget = small_budget(len(a), n_data, a.shape[1], k)
    for method in METHODS:
        assert_matches(knn(a, b, k, method, budget), a, b, k, f"{method} k={k} budget={budget}")


# ------------------------------------------------------------------ refusals


X = np.arange(20.0).reshape(10, 2)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("k, words", [
    (0, "positive integer"), (-1, "positive integer"), (2.5, "positive integer"), (True, "positive integer"),
    (np.True_, "positive integer"), ("3", "positive integer"), (None, "positive integer"),
])
def test_bad_k_refused(k, words, method):
    with pytest.raises(dj.InputError, match=words):
        dj.knn_join(X, k=k, method=method, backend="cpu")
    with pytest.raises(dj.InputError, match=words):
        dj.knn_join(X, X[:4], k=k, method=method, backend="cpu")


@pytest.mark.parametrize("method", METHODS)
def test_k_above_candidates_refused(method):
    with pytest.raises(dj.InputError, match=r"k=10 is larger than the candidates.*9 other rows"):
        dj.knn_join(X, k=10, method=method, backend="cpu")
    with pytest.raises(dj.InputError, match=r"k=5 is larger than the candidates.*B has 4 rows"):
        dj.knn_join(X, X[:4], k=5, method=method, backend="cpu")
    with pytest.raises(dj.InputError, match="larger than the candidates"):
        dj.knn_join(X[:1], k=1, method=method, backend="cpu")  # one row: no other rows at all
    with pytest.raises(dj.InputError, match="larger than the candidates"):
        dj.knn_join(X, X[:1], k=2, method=method, backend="cpu", memory_budget="1KB")
    # the edges are accepted: k = candidates, and numpy integers
    assert len(dj.knn_join(X, k=9, method=method, backend="cpu").compute()) == 90
    assert len(dj.knn_join(X, X[:4], k=np.int64(4), method=method, backend="cpu").compute()) == 40


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_refused(bad, method):
    for dtype in (np.float64, np.float32):
        x = X.astype(dtype)
        x[7, 1] = bad
        with pytest.raises(dj.InputError, match=r"A .*NaN or inf.*row 7"):
            dj.knn_join(x, k=2, method=method, backend="cpu")
        with pytest.raises(dj.InputError, match=r"A .*NaN or inf.*row 7"):
            dj.knn_join(x, X, k=2, method=method, backend="cpu")
        with pytest.raises(dj.InputError, match=r"B .*NaN or inf.*row 7"):
            dj.knn_join(X, x, k=2, method=method, backend="cpu")


@pytest.mark.parametrize("method", METHODS)
def test_mismatched_dimensionality_refused(method):
    with pytest.raises(dj.InputError, match=r"same dimensionality.*2 columns.*3"):
        dj.knn_join(X, np.zeros((5, 3)), k=1, method=method, backend="cpu")
    with pytest.raises(dj.InputError, match=r"same dimensionality"):
        dj.knn_join(np.zeros((5, 1)), X, k=1, method=method, backend="cpu")
