"""The CPU grid's choice of how many dimensions it indexes (daskjoin.kernels.grid_dims): the index at fewer
dimensions, derived from one sort, is the index built for them; every choice gives the oracle's pairs; the
decisions' estimate follows the real count; sparse data index fewer dimensions, dense data all."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daskjoin.kernels import get_kernel
from daskjoin.kernels.grid import CAPACITY_SLACK, CELLS_PER_BLOCK, LANES, MAX_LANE_SKEW, SAMPLE_MIN_BLOCKS, GridJoin
from daskjoin.kernels.registry import SortedRun
from daskjoin.kernels.grid_dims import CELLS_A_SHARE, _sampled_candidates, indexed_dims, model_costs
from daskjoin.kernels.grid_index import build_index, choose_grid, finish_index, order_by_cells

from oracle import assert_same_pairs, oracle_cross_pairs, oracle_self_pairs


def _sparse(n=6000, d=6, seed=0):
    return np.random.default_rng(seed).random((n, d))


def _clustered(n, d, seed=0, spread=0.03):
    rng = np.random.default_rng(seed)
    centres = rng.random((20, d))
    return centres[rng.integers(0, 20, n)] + rng.normal(0, spread, (n, d))


def _lattice(n, d, seed=0):
    """Points on a lattice of step eps = 0.025 (pairs at exactly eps) with duplicates."""
    x = np.random.default_rng(seed).integers(0, 12, (n, d)).astype(np.float64) * 0.025
    x[n // 2: n // 2 + 15] = x[0]
    return x


@pytest.mark.parametrize("x, eps", [(_sparse(), 0.05), (_sparse(4000, 4, 1), 0.02), (_clustered(5000, 5), 0.01),
                                    (_lattice(3000, 4), 0.025), (_sparse(3000, 3, 2) * 1e4 + 1e6, 30.0)],
                         ids=["sparse-6d", "sparse-4d", "clustered-5d", "lattice-4d", "offset-3d"])
def test_index_at_fewer_dims_is_the_index_built_for_them(x, eps):
    spec = choose_grid(x.min(0), x.max(0), eps)
    assert spec.k >= 3
    for m in range(1, spec.k + 1):
        derived = finish_index(x, order_by_cells(x, spec), m)
        built = build_index(x, spec.prefix(m))
        for name in ("points", "perm", "cell_ids", "cell_start", "cell_coords", "dense_start"):
            assert np.array_equal(getattr(derived, name), getattr(built, name)), (m, name)


CASES = {
    "sparse-6d": (_sparse(), None, 0.05),
    "clustered-5d": (_clustered(4000, 5, 1), None, 0.02),
    "lattice-4d": (_lattice(2500, 4, 2), None, 0.025),
    "offset-4d": (_sparse(3000, 4, 3) * 1e3 + 1e8, None, 40.0),
    "cross-6d": (_sparse(3000, 6, 4), _sparse(2500, 6, 5), 0.08),
    "cross-lattice-3d": (_lattice(2000, 3, 6), _lattice(1500, 3, 7), 0.025),
}


def _concat(parts):
    return tuple(np.concatenate([p[t] for p in parts]) for t in range(3))


@pytest.mark.parametrize("case", CASES)
def test_every_number_of_dims_gives_the_oracles_pairs(case):
    """Each m through the index derived from one sort: pairs, bounded batches, the count, both self-join patterns
    and query shares."""
    a, b, eps = CASES[case]
    expected = oracle_self_pairs(a, eps) if b is None else oracle_cross_pairs(a, b, eps)
    k = choose_grid(a.min(0), a.max(0), eps).k
    assert k >= 3
    for m in range(1, k + 1):
        for pattern in ("lid-unicomp", "unicomp") if b is None else ("lid-unicomp",):
            join = GridJoin(a, b, eps, dims=m, pattern=pattern)
            assert join.spec.k == m
            context = f"{case}, {m} dims, {pattern}"
            assert_same_pairs(join.pairs(), expected, context=context, a=a, b=b, eps=eps)
            batches = list(GridJoin(a, b, eps, dims=m, pattern=pattern).batches(700))
            assert all(len(x[0]) <= 700 for x in batches) and batches
            assert_same_pairs(_concat(batches), expected, context=context + ", batches", a=a, b=b, eps=eps)
            assert GridJoin(a, b, eps, dims=m, pattern=pattern).count() == len(expected[0])
        shares = [GridJoin(a, b, eps, dims=m, share=(s, 3)).pairs() for s in range(3)]
        assert_same_pairs(_concat(shares), expected, context=f"{case}, {m} dims, 3 shares", a=a, b=b, eps=eps)


def test_the_single_pass_at_fewer_dims_gives_the_oracles_pairs():
    """Enough query cells at 4 and 5 of 6 dimensions for the sampled single pass (grid.SAMPLE_MIN_BLOCKS)."""
    x = _sparse(20000, 6, 17)
    expected = oracle_self_pairs(x, 0.05)
    for m in (4, 5, 6):
        join = GridJoin(x, None, 0.05, dims=m)
        assert join.ncell >= 8192
        assert_same_pairs(join.pairs(), expected, context=f"{m} dims", a=x, eps=0.05)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(0, 300), d=st.integers(3, 7), eps=st.sampled_from([0.01, 0.05, 0.125, 0.3]),
       seed=st.integers(0, 2**31), dup=st.integers(0, 20), cross=st.booleans(), dims=st.integers(1, 7))
def test_any_number_of_dims_gives_the_oracles_pairs(n, d, eps, seed, dup, cross, dims):
    """Random sizes and densities, points on a lattice of step eps/2 (pairs at exactly eps) and repeated points."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 9, (n, d)).astype(np.float64) * (eps / 2) if seed % 2 else rng.random((n, d))
    if n and dup:
        a[rng.integers(0, n, dup)] = a[0]
    b = rng.random((max(1, n // 2), d)) if cross else None
    expected = oracle_self_pairs(a, eps) if b is None else oracle_cross_pairs(a, b, eps)
    assert_same_pairs(GridJoin(a, b, eps, dims=dims).pairs(), expected, context=f"{dims} dims", a=a, b=b, eps=eps)


@pytest.mark.parametrize("x, eps", [(_sparse(20000, 6, 8), 0.06), (_sparse(20000, 6, 8), 0.25),
                                    (_clustered(20000, 5, 9), 0.01), (_sparse(30000, 4, 10), 0.01)],
                         ids=["sparse-6d", "dense-6d", "clustered-5d", "sparse-4d"])
def test_sampled_decisions_follow_the_real_count(x, eps):
    """The model's decisions for each number of dimensions within a factor of 2 of the join's own count."""
    spec = choose_grid(x.min(0), x.max(0), eps)
    order = order_by_cells(x, spec)
    ids, start = order.runs()
    sample = x[order.perm[(np.arange(512) * x.shape[0]) // 512]]
    estimate = _sampled_candidates(np.ascontiguousarray(sample), spec.dims, spec.origin, spec.widths, spec.ncells,
                                   spec.strides, eps * eps, ids, start).mean(axis=0)
    estimate = (estimate - 1) * x.shape[0] / 2  # each point meets itself; a self-join decides each pair once
    for m in range(1, spec.k + 1):
        real = GridJoin(x, None, eps, dims=m).decisions()
        assert 0.5 * real <= estimate[m - 1] <= 2.0 * real + 1000, (m, estimate[m - 1], real)


def test_sparse_data_index_fewer_dims_and_dense_data_all():
    sparse = _sparse(40000, 6, 11)  # ~0.04 pairs a point at eps 0.06: cells hold one point
    assert GridJoin(sparse, None, 0.06).spec.k < 6
    dense = _sparse(400_000, 3, 12)  # ~30 pairs a point, enough rows to be weighed
    spec = choose_grid(dense.min(0), dense.max(0), 0.0135)
    order = order_by_cells(dense, spec)
    costs = model_costs(dense, order, order, 0.0135 ** 2, True)
    assert np.argmin(costs) == 2  # weighed, and all three won
    assert GridJoin(dense, None, 0.0135).spec.k == 3


def test_small_inputs_and_two_dims_are_not_weighed():
    """Below WEIGH_FROM_NS the choice would cost more than it could save: every candidate indexed."""
    assert GridJoin(_sparse(3000, 6, 13), None, 0.05).spec.k == 6  # sparse, but 3,000 rows
    assert GridJoin(_sparse(5000, 2, 13), None, 1e-4).spec.k == 2  # almost no pairs, but only two dimensions
    a, b = _sparse(100, 5, 14), np.zeros((0, 5))
    assert GridJoin(a, b, 0.01).count() == 0


def test_shares_keep_enough_query_cells():
    """Shares are runs of whole query cells: a choice that would leave fewer than CELLS_A_SHARE a share is not made."""
    x = _sparse(40000, 6, 11)
    spec = choose_grid(x.min(0), x.max(0), 0.06)
    order = order_by_cells(x, spec)
    cells = [int(np.unique(order.sorted_ids // spec.strides[m - 1]).shape[0]) for m in range(1, 7)]
    for parts in (1, 50, 2000):
        m = indexed_dims(x, order, order, 0.06 ** 2, True, parts=parts)
        assert m == 6 or cells[m - 1] >= CELLS_A_SHARE * parts, (parts, m, cells)
    assert indexed_dims(x, order, order, 0.06 ** 2, True, parts=2000) > indexed_dims(x, order, order, 0.06 ** 2, True)


def test_a_cell_order_makes_one_index():
    x = _sparse(2000, 4, 18)
    order = order_by_cells(x, choose_grid(x.min(0), x.max(0), 0.05))
    finish_index(x, order, 2)
    with pytest.raises(ValueError, match="finished into an index already"):
        finish_index(x, order, 3)


@pytest.mark.parametrize("parts", [2, 5])
def test_shares_of_a_chosen_join_partition_the_pairs(parts):
    """Shares of a join large enough to be weighed (it chooses fewer dims): exactly the oracle's pairs."""
    x = np.concatenate([_sparse(12000, 6, 15), _clustered(2000, 6, 16, spread=0.01)])
    eps = 0.05
    assert GridJoin(x, None, eps).spec.k < 6
    kernel = get_kernel("grid", "cpu")
    pairs = _concat([kernel.self_join(x, eps, share=(s, parts)) for s in range(parts)])
    assert_same_pairs(pairs, oracle_self_pairs(x, eps), context=f"{parts} shares", a=x, eps=eps)


def _uniform_for(n, d, neighbours, seed):
    x = np.random.default_rng(seed).random((n, d))
    volume = np.pi ** (d / 2) / math.gamma(d / 2 + 1)
    return x, (neighbours / (n * volume)) ** (1 / d)


def test_a_choice_keeps_the_one_pass_and_its_lanes_hold_every_pair():
    """Fewer dimensions make fewer, fuller cells: the choice keeps the cells the one pass needs (at 250k points
    five dims would leave too few; at 400k they suffice), and the lanes' room follows the cells' loads, so the
    pass holds every pair and the batches are one sorted run (the task then sorts nothing)."""
    for n, dims in ((250_000, 6), (400_000, 5)):
        x, eps = _uniform_for(n, 6, 30, 5)
        join = GridJoin(x, None, eps)
        assert join.spec.k == dims and join.ncell >= SAMPLE_MIN_BLOCKS * CELLS_PER_BLOCK
        real = join.count()
        estimate = GridJoin(x, None, eps)._estimated()
        assert 0.85 * real <= estimate <= 1.15 * real  # (the plain count ratio gave 0.42 of it at 400k)
        batches = list(GridJoin(x, None, eps).batches(1 << 26))
        assert len(batches) == 1 and isinstance(batches[0], SortedRun) and len(batches[0][0]) == real


def test_one_giant_cell_bounds_the_lanes_room_and_its_overflow_is_exact():
    """A cluster of 3,000 points in one cell among 20,000 uniform ones: the lanes' room stays within
    MAX_LANE_SKEW of the mean lane's, the fullest lane overflows into the exact count and fill, and the pairs are
    the oracle's."""
    rng = np.random.default_rng(19)
    x = np.concatenate([rng.random((20000, 3)), 0.5 + rng.random((3000, 3)) * 0.005])
    eps = 0.02
    join = GridJoin(x, None, eps)
    estimate = join._estimated()
    assert estimate is not None
    assert join._lane_room(estimate) <= estimate * CAPACITY_SLACK * MAX_LANE_SKEW / LANES + 1025
    assert_same_pairs(join.pairs(), oracle_self_pairs(x, eps), context="giant cell", a=x, eps=eps)
    batches = list(GridJoin(x, None, eps).batches(1 << 20))
    assert_same_pairs(_concat(batches), oracle_self_pairs(x, eps), context="giant cell, batches", a=x, eps=eps)
