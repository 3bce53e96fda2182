"""The grid kernel's own machinery: geometry choices, single pass with overflow, batches, determinism."""
import numpy as np
import pytest

from daskjoin.kernels import get_kernel, grid
from daskjoin.kernels.grid import GridJoin
from daskjoin.kernels.grid_index import MAX_CELL_ID, build_index, choose_grid

from oracle import assert_same_pairs, oracle_cross_pairs, oracle_self_pairs


def _uniform(n, d, seed=0, scale=1.0, offset=0.0):
    return np.random.default_rng(seed).random((n, d)) * scale + offset


def test_cells_are_at_least_eps_wide_and_ids_fit():
    lo, hi = np.zeros(8), np.full(8, 1e6)
    spec = choose_grid(lo, hi, 1e-3, max_dims=8)
    assert (spec.widths >= 1e-3).all()
    assert spec.total_cells <= MAX_CELL_ID
    assert spec.k < 8  # the product of cell counts would overflow int64 with all 8 dims


def test_dims_with_too_few_cells_are_not_indexed():
    spec = choose_grid(np.zeros(3), np.array([10.0, 1.0, 0.5]), 1.0)
    assert list(spec.dims) == [0]


def test_index_orders_points_by_cell_then_last_indexed_coordinate():
    x = _uniform(5000, 2, seed=3)
    spec = choose_grid(x.min(0), x.max(0), 0.05)
    index = build_index(x, spec)
    assert sorted(index.perm.tolist()) == list(range(5000))
    last = index.points[:, spec.dims[-1]]
    for c in range(index.cell_ids.shape[0]):
        s, e = index.cell_start[c], index.cell_start[c + 1]
        assert np.all(np.diff(last[s:e]) >= 0)


@pytest.mark.parametrize("selfjoin", [True, False], ids=["self", "cross"])
def test_single_pass_overflow_is_redone_exactly(monkeypatch, selfjoin):
    """Force tiny lane regions so that every lane overflows and the exact fallback runs."""
    monkeypatch.setattr(grid, "SAMPLE_MIN_BLOCKS", 0)
    monkeypatch.setattr(grid, "CAPACITY_SLACK", 0.05)
    a = _uniform(3000, 2, seed=1)
    b = None if selfjoin else _uniform(2000, 2, seed=2)
    i, j, dist = GridJoin(a, b, 0.04).pairs()
    expected = oracle_self_pairs(a, 0.04) if selfjoin else oracle_cross_pairs(a, b, 0.04)
    assert_same_pairs((i, j, dist), expected)


def test_single_pass_and_count_fill_agree_and_are_deterministic(monkeypatch):
    x = _uniform(20000, 3, seed=5)
    first = GridJoin(x, None, 0.03).pairs()
    second = GridJoin(x, None, 0.03).pairs()
    assert all(np.array_equal(p, q) for p, q in zip(first, second))
    monkeypatch.setattr(grid, "SAMPLE_MIN_BLOCKS", 10**9)  # count then fill
    other = GridJoin(x, None, 0.03).pairs()
    key = lambda t: np.lexsort((t[1], t[0]))  # noqa: E731
    assert np.array_equal(first[0][key(first)], other[0][key(other)])
    assert np.array_equal(first[1][key(first)], other[1][key(other)])


@pytest.mark.parametrize("method", ["grid", "grid@unicomp", "brute"])
@pytest.mark.parametrize("max_pairs", [1, 97, 10**9])
def test_batches_cover_all_pairs_once(method, max_pairs):
    x = _uniform(1500, 2, seed=7)
    method, _, pattern = method.partition("@")
    kernel = get_kernel(method, **({"pattern": pattern} if pattern else {}))
    batches = list(kernel.self_batches(x, 0.05, max_pairs))
    i = np.concatenate([b[0] for b in batches])
    j = np.concatenate([b[1] for b in batches])
    d = np.concatenate([b[2] for b in batches])
    assert_same_pairs((i, j, d), oracle_self_pairs(x, 0.05))
    if max_pairs > 1:
        # a batch exceeds the bound only when a single cell/row holds more pairs
        assert all(len(b[0]) <= max_pairs for b in batches) or method == "grid"


def test_sparse_grid_with_large_offsets_and_tiny_eps():
    """Many more cells than points: the sparse (binary search) path, far from the origin."""
    x = _uniform(3000, 3, seed=11, scale=1e4, offset=1e6)
    x[1:40] = x[0] + 1e-3  # a tight cluster among sparse points
    i, j, d = GridJoin(x, None, 5e-3).pairs()
    assert GridJoin(x, None, 5e-3).query[5].shape[0] == 0  # no dense table was built
    assert_same_pairs((i, j, d), oracle_self_pairs(x, 5e-3))


def _lattice_with_duplicates(n, d, seed):
    """Points on a lattice of step eps (many pairs exactly at eps) with duplicates: the boundary and tie cases."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 40, (n, d)).astype(np.float64) * 0.025
    x[n // 2: n // 2 + 20] = x[0]  # duplicates of one point (190 pairs: one lane holds them)
    return x


@pytest.mark.parametrize("case", ["uniform-2d", "lattice-2d", "uniform-1d", "lattice-3d", "cross-2d", "no-distance"])
def test_one_pass_batches_are_one_sorted_run_from_the_lanes(monkeypatch, case):
    """Where the one pass holds every pair, ``batches`` sorts them straight from the lanes (pair_sort.sort_lanes) and
    gives one ``SortedRun``: the oracle's pairs, strictly in (i, j) order, with the distances the unsorted path gives."""
    from daskjoin.kernels.pair_sort import sort_pairs
    from daskjoin.kernels.registry import SortedRun

    monkeypatch.setattr(grid, "SAMPLE_MIN_BLOCKS", 0)  # the sampled one pass at any size
    monkeypatch.setattr(grid, "CAPACITY_SLACK", 4.0)  # lanes that hold the duplicates the sample may miss
    d = {"1d": 1, "2d": 2, "3d": 3}[case.split("-")[-1]] if "-" in case and case != "no-distance" else 2
    x = _lattice_with_duplicates(6000, d, 3) if case.startswith("lattice") else _uniform(6000, d, seed=4)
    b = _uniform(4000, d, seed=5) if case == "cross-2d" else None
    eps = 0.025 if case.startswith("lattice") else (0.0005 if d == 1 else 0.02)
    with_distance = case != "no-distance"
    join = GridJoin(x, b, eps)
    batches = list(join.batches(10**8, with_distance))
    assert len(batches) == 1 and isinstance(batches[0], SortedRun)
    i, j, dist = batches[0]
    assert np.all((i[1:] > i[:-1]) | ((i[1:] == i[:-1]) & (j[1:] > j[:-1])))
    expected = oracle_self_pairs(x, eps) if b is None else oracle_cross_pairs(x, b, eps)
    assert len(i) > 1000
    if with_distance:
        assert_same_pairs((i, j, dist), expected)
        unsorted = GridJoin(x, b, eps).pairs()
        np.testing.assert_array_equal(sort_pairs(*unsorted)[2].view(np.uint32), dist.view(np.uint32))
    else:
        assert dist is None
        assert np.array_equal(i, expected[0]) and np.array_equal(j, expected[1])


def test_one_pass_that_overflows_is_not_a_sorted_run(monkeypatch):
    """Lanes that fill up leave cells for the exact pass: plain batches then (the task sorts), the same pairs."""
    from daskjoin.kernels.registry import SortedRun

    monkeypatch.setattr(grid, "SAMPLE_MIN_BLOCKS", 0)
    monkeypatch.setattr(grid, "CAPACITY_SLACK", 0.05)  # (a lane still holds 1,024 pairs: ~250k pairs here)
    x = _uniform(20000, 2, seed=6)
    batches = list(GridJoin(x, None, 0.02).batches(10**8))
    assert len(batches) > 1 and not any(isinstance(b, SortedRun) for b in batches)
    got = tuple(np.concatenate([b[k] for b in batches]) for k in range(3))
    assert_same_pairs(got, oracle_self_pairs(x, 0.02))


_LANE_CASES = [(50, 60, 4, 40, True), (1000, 1000, 64, 300, True), (1000, 1000, 64, 300, False), (5000, 300, 64, 200, True)]


@pytest.mark.parametrize("rows, cols, lanes, cap, with_value, passes",
                         [c + (p,) for c in _LANE_CASES for p in (1, 2)] + [(7, 7, 3, 5, True, 1)])
def test_sort_lanes_equals_sort_pairs_of_the_moved_lanes(rows, cols, lanes, cap, with_value, passes, monkeypatch):
    """sort_lanes reads the lanes where they are (empty lanes, full lanes) and gives what moving them together and
    sorting gives, bit for bit, in one pass or in two (buckets of rows, then each bucket's runs); the lanes' i and
    value arrays hold the outputs."""
    from daskjoin.kernels import pair_sort
    from daskjoin.kernels.pair_sort import sort_lanes, sort_pairs

    if passes == 2:  # the two-pass sort at these sizes (both sorts below take it)
        monkeypatch.setattr(pair_sort, "ONE_PASS_CURSOR_BYTES", 0)
        monkeypatch.setattr(pair_sort, "BUCKET_MIN_PAIRS", 0)
        monkeypatch.setattr(pair_sort, "BUCKET_BITS", 2)

    rng = np.random.default_rng(rows + lanes)
    pairs = rng.choice(rows * cols, size=min(rows * cols, lanes * cap) * 3 // 4, replace=False)
    used = np.diff(np.r_[0, np.sort(rng.integers(0, len(pairs) + 1, lanes - 1)), len(pairs)])
    used = np.minimum(used, cap)
    used[0] = 0  # an empty lane
    n = int(used.sum())
    bi, bj = np.full(lanes * cap, -7, np.int64), np.full(lanes * cap, -7, np.int64)
    bv = rng.random(lanes * cap).astype(np.float32)
    at = 0
    for lane in range(lanes):
        take = pairs[at: at + used[lane]]
        bi[lane * cap: lane * cap + len(take)], bj[lane * cap: lane * cap + len(take)] = take // cols, take % cols
        at += used[lane]
    moved = [np.concatenate([a[lane * cap: lane * cap + used[lane]] for lane in range(lanes)]) for a in (bi, bj, bv)]
    want = sort_pairs(moved[0], moved[1], moved[2] if with_value else None)
    got = sort_lanes(bi, bj, bv if with_value else None, cap, used, rows, cols)
    assert got is not None and np.shares_memory(got[0], bi) and len(got[0]) == n
    assert pair_sort._two_passes(n, rows, 2) == (passes == 2)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    if with_value:
        assert np.shares_memory(got[2], bv) and np.array_equal(got[2].view(np.uint32), want[2].view(np.uint32))
    else:
        assert got[2] is None


def test_sort_lanes_declines_what_the_one_pass_sort_does_not_take(monkeypatch):
    from daskjoin.kernels import pair_sort

    used = np.array([3, 2])
    i, j = np.array([0, 1, 2, 0, 0, 1, 3, 0]), np.array([1, 2, 3, 0, 0, 2, 4, 0])
    assert pair_sort.sort_lanes(i, j, np.zeros(8, np.float64), 4, used, 4, 5) is None  # 8-byte values
    assert pair_sort.sort_lanes(i, j, None, 4, used, 4, 1 << 31) is None  # columns past the packed word
    assert pair_sort.sort_lanes(i, j, None, 4, np.array([1, 0]), 4, 5) is None  # one pair: nothing to sort
    assert pair_sort.sort_lanes(i, j, None, 4, used, 1 << 22, 5) is None  # rows far more than pairs


@pytest.mark.parametrize("case", ["uniform-8d", "duplicates", "one-dim", "cross", "one-point", "empty-b", "offset"])
def test_decisions_count_the_work_reports_candidates(case):
    """``GridJoin.decisions`` (a cell at a time: the planner's grid share) equals the work report's total, which
    is at least the pair count and at most every pair of rows."""
    rng = np.random.default_rng(7)
    a, b, eps = rng.random((900, 8)), None, 0.35
    if case == "duplicates":
        a, eps = np.repeat(rng.random((60, 3)), 5, axis=0), 0.1
    elif case == "one-dim":
        a, eps = rng.random((800, 1)), 0.01
    elif case == "cross":
        a, b, eps = rng.random((500, 4)), rng.random((300, 4)), 0.2
    elif case == "one-point":
        a = a[:1]
    elif case == "empty-b":
        b = np.zeros((0, 8))
    elif case == "offset":
        a, eps = 1e6 + rng.random((700, 5)) * 1e-3, 2e-4
    join = GridJoin(a, b, eps)
    total = join.decisions()
    assert total == int(join.work().sum()) == get_kernel("grid", "cpu").decisions(a, b, eps)
    rows = len(a) * (len(a) - 1) // 2 if b is None else len(a) * len(b)
    assert join.count() <= total <= rows
    if case in ("uniform-8d", "duplicates", "cross"):
        assert total > join.count()  # candidates beyond the pairs: a count of pairs would not pass
