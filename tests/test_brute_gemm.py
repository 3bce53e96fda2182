"""CPU ``brute`` in GEMM form (kernels/brute_gemm.py): the nested loop's arrays, byte for byte.

The float32 products may only rule out pairs whose float64 decision is provably "no"; every other
pair is decided by the nested loop's own test, row by row in the same column order.  So ``pairs()``
and ``batches()`` must equal :class:`~daskjoin.kernels.brute.BruteJoin`'s exactly, on the
adversarial cases (ties at eps, offsets, duplicates, n in {0, 1, 2}, d from 1 to 64), across tile
edges, and on random data (hypothesis); and the filter must filter.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daskjoin.kernels import brute_gemm, get_kernel
from daskjoin.kernels.brute import BruteJoin
from daskjoin.kernels.brute_gemm import GEMM_FROM_D, GemmBruteJoin

from cases import CASES
from oracle import assert_same_pairs, oracle_cross_pairs, oracle_self_pairs


def assert_same_arrays(got, want):
    for g, w in zip(got, want):
        assert (g is None) == (w is None)
        if g is not None:
            assert g.dtype == w.dtype and np.array_equal(g, w), (g[:10], w[:10])


def both(a, b, eps, **kwargs):
    join = GemmBruteJoin(a, b, eps, filter="fp32", **kwargs)
    return join, BruteJoin(a, b, eps)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("mode", ["self", "cross"])
def test_the_nested_loops_arrays_on_every_case(case, mode):
    b = None if mode == "self" else case.cross_b()
    gemm, nested = both(case.a, b, case.eps)
    got = gemm.pairs()
    assert_same_arrays(got, nested.pairs())
    want = oracle_self_pairs(case.a, case.eps) if b is None else oracle_cross_pairs(case.a, b, case.eps)
    assert_same_pairs(got, want, a=case.a, b=case.a if b is None else b, eps=case.eps)
    assert gemm.count() == len(want[0])


def spy(monkeypatch, method: str) -> list:
    """The first argument (a row number) of every call of ``GemmBruteJoin.<method>``, in a list that fills as
    they come."""
    calls, real = [], getattr(GemmBruteJoin, method)

    def spied(self, first, *rest):
        calls.append(first)
        return real(self, first, *rest)

    monkeypatch.setattr(GemmBruteJoin, method, spied)
    return calls


def clustered(mode, n=700, m=500, seed=5):
    rng = np.random.default_rng(seed)
    centres = rng.random((8, 12))
    a = centres[rng.integers(0, 8, n)] + rng.normal(0, 0.03, (n, 12))
    b = None if mode == "self" else centres[rng.integers(0, 8, m)] + rng.normal(0, 0.03, (m, 12))
    return a, b


@pytest.mark.parametrize("mode", ["self", "cross"])
@pytest.mark.parametrize("max_pairs", [1, 7, 1000])
@pytest.mark.parametrize("gather", [brute_gemm.GATHER_PAIRS, 5])
@pytest.mark.parametrize("threads", [1, 3])
def test_batches_across_tile_edges(mode, max_pairs, gather, threads, monkeypatch):
    """Tiles of 64 x 96 rows over 700 x 500 rows (edges inside the diagonal, short last tiles), batches cutting
    through blocks, and blocks whose pairs outgrow their buffer (``gather`` 5: filled again at counted cursors),
    blocks in the calling thread or on a pool of 3 whatever the machine: bounded batches whose pairs, in order,
    are the nested loop's arrays."""
    import numba

    monkeypatch.setattr(numba, "get_num_threads", lambda: threads)
    monkeypatch.setattr(brute_gemm, "A_TILE", 64)
    monkeypatch.setattr(brute_gemm, "B_TILE", 96)
    monkeypatch.setattr(brute_gemm, "GATHER_PAIRS", gather)
    a, b = clustered(mode)
    gemm, nested = both(a, b, 0.12)
    refills = spy(monkeypatch, "_fill")
    for with_distance in (True, False):
        refills.clear()
        got = list(gemm.batches(max_pairs, with_distance))
        assert len(got) > 3 and all(0 < len(g[0]) <= max_pairs for g in got)
        if not refills:  # every batch full but the last
            assert all(len(g[0]) == max_pairs for g in got[:-1])
        assert all((g[2] is None) != with_distance for g in got)
        joined = tuple(None if g[0] is None else np.concatenate(g) for g in zip(*got))
        assert_same_arrays(joined, nested.pairs(with_distance))
    assert gemm.count() == nested.count()


@pytest.mark.parametrize("mode", ["self", "cross"])
@pytest.mark.parametrize("gather", [brute_gemm.GATHER_PAIRS, 5])
def test_pairs_in_one_pass_over_the_products(mode, gather, monkeypatch):
    """``pairs()`` forms each block's products once (the count pass before the fill pass formed them twice), except
    where a block's pairs outgrow its buffer; the counts and the work report come from the same pass."""
    monkeypatch.setattr(brute_gemm, "A_TILE", 64)
    monkeypatch.setattr(brute_gemm, "GATHER_PAIRS", gather)
    a, b = clustered(mode)
    gemm, nested = both(a, b, 0.12)
    calls = spy(monkeypatch, "_block")
    assert_same_arrays(gemm.pairs(), nested.pairs())
    blocks = -(-len(a) // 64)
    if gather == 5:
        assert len(calls) > blocks  # blocks filled again
    else:
        assert sorted(calls) == list(range(0, len(a), 64))
    before = len(calls)
    assert np.array_equal(gemm.counts(), nested.counts()) and len(calls) == before  # no further pass
    assert gemm.work().sum() == gemm.decided >= nested.count()


def test_the_products_rule_out_almost_every_pair():
    """Clustered 32-d rows: the float64 test runs on a few percent of the pairs, not on all of them."""
    rng = np.random.default_rng(1)
    centres = rng.random((40, 32))
    x = (centres[rng.integers(0, 40, 4000)] + rng.normal(0, 0.02, (4000, 32))).astype(np.float32)
    gemm, nested = both(x, None, 0.15)
    assert gemm.count() == nested.count() > 10_000
    assert gemm.decided < 0.05 * 4000 * 3999 / 2
    assert gemm.decided >= gemm.count()
    work = gemm.work()  # the work report: what each row decided, at least its pairs
    assert work.sum() == gemm.decided and (work >= gemm.counts()).all()


@given(n=st.integers(0, 60), m=st.integers(0, 60), d=st.integers(1, 40), seed=st.integers(0, 2 ** 32 - 1),
       offset=st.sampled_from([0.0, 1e3, -1e6, 3e8]), scale=st.sampled_from([1e-3, 1.0, 1e4]),
       f32=st.booleans(), selfjoin=st.booleans())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_rows_give_the_nested_loops_arrays(n, m, d, seed, offset, scale, f32, selfjoin):
    """Rows on a coarse lattice (many exact ties and duplicates), offset and scaled; eps the distance of a
    chosen pair, so some pairs sit exactly at eps."""
    rng = np.random.default_rng(seed)
    dtype = np.float32 if f32 else np.float64
    a = (offset + scale * rng.integers(-3, 4, (n, d))).astype(dtype)
    b = None if selfjoin else (offset + scale * rng.integers(-3, 4, (m, d))).astype(dtype)
    other = a if b is None else b
    if len(a) and len(other):
        p, q = a[rng.integers(len(a))].astype(np.float64), other[rng.integers(len(other))].astype(np.float64)
        eps = float(np.sqrt(((p - q) ** 2).sum())) or scale
    else:
        eps = scale
    gemm, nested = both(a, b, eps)
    assert_same_arrays(gemm.pairs(), nested.pairs())


def test_where_the_products_do_not_apply():
    rng = np.random.default_rng(2)
    x = rng.random((300, 16))
    assert GemmBruteJoin(x, None, 0.5).filter == "fp32"  # auto from GEMM_FROM_D dimensions
    assert GemmBruteJoin(x[:, :GEMM_FROM_D - 1], None, 0.5).filter == "none"
    assert GemmBruteJoin(x, None, 0.5, filter="none").filter == "none"
    assert GemmBruteJoin(x[:0], None, 0.5, filter="fp32").filter == "none"  # nothing to screen
    wide = x * 1e19  # shifted norms past MAX_NORM (squares near float32's limit): the nested loop decides
    join = GemmBruteJoin(wide, None, 5e18, filter="fp32")
    assert join.filter == "none"
    assert_same_arrays(join.pairs(), BruteJoin(wide, None, 5e18).pairs())
    far = x + 1e20  # far from the origin but not spread: the shift by the centre keeps the products
    assert GemmBruteJoin(far, None, 1e5, filter="fp32").filter == "fp32"
    with pytest.raises(ValueError, match="filter must be one of"):
        GemmBruteJoin(x, None, 0.5, filter="int8")


def test_the_registry_runs_it_for_brute_and_the_nested_loop_for_nlj():
    rng = np.random.default_rng(3)
    x = rng.random((500, 24))
    brute, nlj = get_kernel("brute", "cpu"), get_kernel("nlj", "cpu")
    assert type(brute.driver(x, None, 0.6)) is GemmBruteJoin and type(nlj.driver(x, None, 0.6)) is BruteJoin
    assert_same_arrays(brute.self_join(x, 0.6), nlj.self_join(x, 0.6))
    assert_same_arrays(get_kernel("brute", "cpu", filter="none").self_join(x, 0.6), nlj.self_join(x, 0.6))


def test_the_error_bound_refuses_dimensions_where_it_would_not_hold():
    """gamma_{d+4} = m u / (1 - m u) needs m u < 1: the constants grow with d, and past 2^23 dimensions they are
    refused rather than computed vacuous (or negative)."""
    from daskjoin.kernels.exact import error_constants

    c1, c2 = error_constants(128)
    assert c1 == 2.0 ** -23 and 0 < c2 < error_constants(4096)[1]
    error_constants(2 ** 23 - 5)
    with pytest.raises(ValueError, match="2\\*\\*23"):
        error_constants(2 ** 23 - 4)
