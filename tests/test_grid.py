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
