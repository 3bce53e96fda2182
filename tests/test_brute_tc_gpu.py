"""GPU brute force through the tensor cores (cuda/brute_tc.cu): exact products, oracle pairs (marked gpu).

Skipped where CuPy sees no CUDA device.  tests/test_tc_quant.py checks the bound on the CPU.
"""
import numpy as np
import pytest

from daskjoin.kernels import get_kernel, tc_quant
from daskjoin.kernels.gpu_common import gpu_available

from cases import CASES
from oracle import assert_same_pairs, oracle_cross_pairs, oracle_self_pairs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu_available(), reason="no CUDA device visible to CuPy"),
]

FILTERS = ["int8", "fp16"]


def _mmas():
    """The tensor-core instruction forms this device runs: mma.sync everywhere, wgmma on Hopper."""
    if not gpu_available():
        return ["mma"]
    from daskjoin.kernels.brute_gpu import wgmma_available

    return ["mma", "wgmma"] if wgmma_available() else ["mma"]


MMAS = _mmas()


@pytest.fixture(params=MMAS)
def mma(request, monkeypatch):
    """Each form of the filter in turn, as the joins' default (``brute_gpu.TC_MMA``)."""
    from daskjoin.kernels import brute_gpu

    monkeypatch.setattr(brute_gpu, "TC_MMA", request.param)
    return request.param


def _products(fmt, qa, qb, mma):
    """The kernel's tile products of one pair of 128-row tiles of integer rows qa, qb (128 x d each), formed
    by the ``mma`` instructions."""
    import cupy as cp

    from daskjoin.kernels.brute_gpu import tc_products

    d = qa.shape[1]
    dp = tc_quant.padded_dims(fmt, d)
    dtype = cp.int8 if fmt == "int8" else cp.float16
    rows = []
    for q in (qa, qb):
        r = cp.zeros((128, dp), dtype)
        r[:, :d] = cp.asarray(q)
        rows.append(r.view(cp.uint8))
    out = cp.zeros((1, 128, 128), cp.float64)
    zero = cp.zeros(1, cp.int64)
    tc_products(fmt, rows[0], rows[1], zero, zero, out, mma)
    return out[0].get()


@pytest.mark.parametrize("fmt", FILTERS)
@pytest.mark.parametrize("d", [1, 16, 33, 128, 200, 384, 960])
def test_tensor_core_products_are_exact(fmt, d, mma):
    """Every product the filter sees equals the integer dot product: large and small terms mixed,
    all at the grid's ends, alternating signs (what a truncating accumulator would get wrong)."""
    L = tc_quant.levels(fmt, d)
    rng = np.random.default_rng(d)
    patterns = [
        rng.integers(-L, L + 1, (128, d)),
        np.where(rng.random((128, d)) < 0.5, L, -L),
        np.full((128, d), L),
    ]
    mixed = rng.integers(-L, L + 1, (128, d))
    mixed[:, ::2] = L
    mixed[:, 1::2] = rng.integers(-1, 2, (128, d // 2))
    patterns.append(mixed)
    for qa in patterns:
        for qb in patterns:
            want = qa.astype(np.int64) @ qb.astype(np.int64).T
            got = _products(fmt, qa, qb, mma)
            assert np.array_equal(got, want.astype(np.float64)), (fmt, d, mma, np.argwhere(got != want)[:5])


def _b(case):
    return case.b if case.b is not None else case.a


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("fmt", FILTERS)
@pytest.mark.parametrize("mode", ["self", "cross"])
def test_tensor_core_filter_matches_oracle(case, fmt, mode, mma):
    kernel = get_kernel("brute", "gpu", filter=fmt)
    if mode == "self":
        got = kernel.self_join(case.a, case.eps)
        expected = oracle_self_pairs(case.a, case.eps)
        assert kernel.self_count(case.a, case.eps) == len(expected[0])
    else:
        got = kernel.cross_join(case.a, _b(case), case.eps)
        expected = oracle_cross_pairs(case.a, _b(case), case.eps)
        assert kernel.cross_count(case.a, _b(case), case.eps) == len(expected[0])
    assert_same_pairs(got, expected, context=f"brute/gpu filter={fmt} {mma} {case.name} {mode}")


@pytest.mark.parametrize("d", [33, 128, 960])
def test_every_filter_gives_the_same_arrays(d, mma):
    """fp32, int8 and fp16 filters: the same pairs, distances and order, on embedding-like data with
    offsets, near duplicates and pairs at exactly eps."""
    rng = np.random.default_rng(d)
    centres = rng.standard_normal((12, d))
    x = centres[rng.integers(0, 12, 3000)] + 0.3 * rng.standard_normal((3000, d)) + 1e4
    x[1500:1600] = x[:100] + 1e-9 * rng.standard_normal((100, d))
    dists = np.sort(np.sqrt(((x[:200, None, :] - x[None, :200, :]) ** 2).sum(-1)).ravel())
    eps = float(dists[len(dists) // 20])  # a pair at (about) exactly eps
    b = x[rng.permutation(3000)[:700]] + 0.01
    want = oracle_self_pairs(x, eps)
    results = {f: get_kernel("brute", "gpu", filter=f).self_join(x, eps) for f in ("fp32", "int8", "fp16")}
    assert_same_pairs(results["fp32"], want)
    for f, got in results.items():
        assert all(np.array_equal(p, q) for p, q in zip(got, results["fp32"])), f
    cross = {f: get_kernel("brute", "gpu", filter=f).cross_join(x, b, eps) for f in ("fp32", "int8", "fp16")}
    assert_same_pairs(cross["int8"], oracle_cross_pairs(x, b, eps))
    for f, got in cross.items():
        assert all(np.array_equal(p, q) for p, q in zip(got, cross["fp32"])), f


@pytest.mark.parametrize("groups, pair_block", [(None, None), (None, 3), (16, None), (3, 5), (3, 2)])
@pytest.mark.parametrize("selfjoin", [True, False])
@pytest.mark.parametrize("filt", ["fp32", "int8"])
def test_tile_pairs_kernel_matches_the_box_rule(selfjoin, filt, groups, pair_block, monkeypatch):
    """tile_box_near keeps exactly the tile pairs whose box gap, squared and summed in dimension order in
    float64, is at most eps^2 (boxes touching at exactly eps included), in the blocked order of block_key; so
    does the two-level test through groups of tiles (``groups``: tiles a group, the last group short), with
    pair blocks larger than the grid (the default here: row-major) and smaller, groups and pair blocks unaligned."""
    import cupy as cp

    from daskjoin.kernels import brute_gpu
    from daskjoin.kernels.brute_gpu import GpuBruteJoin

    if groups is not None:
        monkeypatch.setattr(brute_gpu, "DIRECT_PAIRS", 0)
        monkeypatch.setattr(brute_gpu, "GROUP", groups)
    if pair_block is not None:
        monkeypatch.setattr(brute_gpu, "PAIR_BLOCK", pair_block)

    rng = np.random.default_rng(5)

    def slabs(n, shift):  # rows sorted along a lattice in dimension 0: tiles are slabs, some exactly eps apart
        x = rng.random((n, 40))
        x[:, 0] = np.round(rng.random(n) * 64) * 1.25 + shift
        return x[np.argsort(x[:, 0], kind="stable")]

    x = slabs(5000, 0.0)
    b = None if selfjoin else slabs(3000, 1.25)
    join = GpuBruteJoin(x, b, 2.5, filter=filt)
    A, B = join.A, join.B
    gap = cp.maximum(cp.maximum(B.lo[None, :, :] - A.hi[:, None, :], A.lo[:, None, :] - B.hi[None, :, :]), 0.0)
    total = cp.zeros(gap.shape[:2])
    for k in range(gap.shape[2]):
        total += gap[:, :, k] * gap[:, :, k]
    near = total <= join.eps2
    if selfjoin:
        near &= cp.arange(B.ntiles)[None, :] >= cp.arange(A.ntiles)[:, None]
    p, q = cp.nonzero(near)
    assert 0 < int(p.shape[0]) < near.size
    order = cp.argsort(brute_gpu.block_key(p, q, B.ntiles))
    assert cp.array_equal(join.pairs_p, p[order]) and cp.array_equal(join.pairs_q, q[order])
    if pair_block is None:
        assert max(A.ntiles, B.ntiles) <= brute_gpu.PAIR_BLOCK and cp.array_equal(join.pairs_p, p)  # one block: row-major
    elif filt == "int8":  # (fp32's 256-row tiles: a band two tiles wide, which both orders list alike)
        assert not cp.array_equal(join.pairs_p, p)
    count = GpuBruteJoin(x, b, 2.5, filter=filt).count()
    monkeypatch.setattr(brute_gpu, "PAIR_BLOCK", 1 << 20)
    assert GpuBruteJoin(x, b, 2.5, filter=filt).count() == count  # the order changes no result


@pytest.mark.parametrize("budget_pairs", [None, 3000])
@pytest.mark.parametrize("fmt", FILTERS)
def test_tensor_core_batches_cut_by_tile_pair_counts(fmt, budget_pairs, monkeypatch):
    """Batches far smaller than a launch's pairs come back whole and in order: held on the device and
    sliced (the default budget), or past a device budget of ``budget_pairs`` pairs, each launch cut by
    its per-tile-pair counts into parts of one batch."""
    if budget_pairs is not None:
        from daskjoin.kernels import brute_gpu

        monkeypatch.setattr(brute_gpu, "sort_room", lambda: budget_pairs)  # what batches() may hold on the device
    rng = np.random.default_rng(11)
    x = rng.exponential(1 / 40, size=(6000, 64))
    eps = float(np.quantile(np.sqrt(((x[:300, None] - x[None, :300]) ** 2).sum(-1)), 0.02))
    want = oracle_self_pairs(x, eps)
    parts = list(get_kernel("brute", "gpu", filter=fmt).self_batches(x, eps, 997))
    assert all(len(p[0]) <= 997 for p in parts)
    from daskjoin.kernels.registry import SortedRun

    if budget_pairs is None:  # all held on the device: one sorted run, sliced
        assert len(parts) > 1 and all(isinstance(p, SortedRun) for p in parts)
    else:  # past the budget: plain batches, which the task sorts (unsorted parts of the kernel's order among them)
        assert len(parts) > 3 and not any(isinstance(p, SortedRun) for p in parts)
    got = tuple(np.concatenate([p[t] for p in parts]) for t in range(3))
    assert_same_pairs(got, want)


def test_tensor_core_filter_falls_back_where_the_grid_cannot_hold_the_spread():
    """Spreads beyond the grid's range take the fp32 filter, with the same exact result; so does "auto"
    with a tile size of the fp32 filter; this device's fp16 products pass the once-per-device check."""
    from daskjoin.kernels.brute_gpu import GpuBruteJoin, fp16_products_exact

    assert fp16_products_exact()
    assert GpuBruteJoin(np.random.default_rng(5).random((300, 128)), None, 0.1, tile=256).filter == "fp32"
    assert GpuBruteJoin(np.random.default_rng(5).random((300, 128)), None, 0.1).filter == "fp16"

    x = np.random.default_rng(3).random((500, 40)) * 1e-305
    join = GpuBruteJoin(x, None, 3e-306, filter="int8")
    assert join.filter == "fp32"
    assert_same_pairs(get_kernel("brute", "gpu", filter="int8").self_join(x, 3e-306), oracle_self_pairs(x, 3e-306))
    with pytest.raises(ValueError, match="tiles of 128 rows"):
        GpuBruteJoin(np.random.default_rng(4).random((300, 40)), None, 0.1, filter="int8", tile=256)


@pytest.mark.parametrize("kind, eps, chosen", [("uniform", 3.6825, "int8"), ("expo", 0.296, "fp16")])
def test_auto_takes_int8_where_a_sample_shows_it_faster(kind, eps, chosen, monkeypatch):
    """A large join (the threshold lowered here) with ``filter="auto"`` at 128-d samples both grids on the device:
    int8 on uniform rows, fp16 on exponential ones (tests/test_tc_quant.py has the shares); a small join keeps fp16
    without sampling.  Either way the same pairs as the fp16 filter, which the oracle tests check."""
    from daskjoin.io.synth import generate
    from daskjoin.kernels.brute_gpu import GpuBruteJoin

    x = generate(kind, 20_000, 128, seed=0)
    small = GpuBruteJoin(x, None, eps)
    assert small.filter == "fp16" and small.int8_extra is None
    monkeypatch.setattr(tc_quant, "SAMPLE_FROM_PAIRS", 1)
    join = GpuBruteJoin(x, None, eps)
    assert join.filter == chosen and (join.int8_extra < tc_quant.INT8_EXTRA_SHARE) == (chosen == "int8")
    got, want = join.pairs(), GpuBruteJoin(x, None, eps, filter="fp16").pairs()
    assert len(got[0]) > 1000 and all(np.array_equal(p, q) for p, q in zip(got, want))


@pytest.mark.parametrize("fmt", FILTERS)
def test_candidate_lists_too_small_for_a_range_are_rerun_with_room_for_all(fmt, monkeypatch):
    """A first guess of 1,000 candidates for ranges of far more: the range's launch overflows and runs again
    with room for all of them (not halved: under the cap), the guess grows and is kept; same pairs."""
    from daskjoin.kernels import brute_gpu

    launches, lists = [], []
    original = brute_gpu.listed_candidates

    def counting(launch, npairs, room, per_pair=False, first=0):
        def counted(*args):
            launches.append(args[1] - args[0])
            return launch(*args)

        for item in original(counted, npairs, room, per_pair, first):
            lists.append(item[2])
            yield item

    monkeypatch.setattr(brute_gpu, "listed_candidates", counting)
    rng = np.random.default_rng(13)
    x = rng.exponential(1 / 40, size=(5000, 48)).astype(np.float32)
    eps = float(np.quantile(np.sqrt(((x[:300, None] - x[None, :300]) ** 2).sum(-1)), 0.05))
    join = brute_gpu.GpuBruteJoin(x, None, eps, filter=fmt)
    join._candidates = 1000
    assert_same_pairs(join.pairs(), oracle_self_pairs(x, eps), context=fmt)
    assert max(lists) > 1000 and len(launches) > len(lists)  # a list overflowed and its range ran again
    assert launches[0] == launches[1]  # ... whole, with room for all its candidates
    assert join._candidates >= min(brute_gpu.CANDIDATES_MAX, 2 * max(lists))  # the largest guess is kept


@pytest.mark.parametrize("fmt", FILTERS)
@pytest.mark.parametrize("batch", [7, 1 << 18])
def test_tensor_core_count_over_ranges_with_lists_that_overflow(fmt, batch):
    """The count's ranges share one launcher and one device counter: many ranges, a first guess of 1,000
    candidates that overflows (rerun) and one that holds: the oracle's count each time, and the pairs' count."""
    from daskjoin.kernels import brute_gpu

    rng = np.random.default_rng(14)
    x = rng.exponential(1 / 40, size=(4000, 40)).astype(np.float32)
    eps = float(np.quantile(np.sqrt(((x[:300, None] - x[None, :300]) ** 2).sum(-1)), 0.05))
    want = len(oracle_self_pairs(x, eps)[0])
    b = x[::3] + 0.002
    want_cross = len(oracle_cross_pairs(x, b, eps)[0])
    for room in (1000, 1 << 22):
        join = brute_gpu.GpuBruteJoin(x, None, eps, filter=fmt)
        join.batch, join._candidates = batch, room
        assert len(join._ranges()) > 1 or batch > 7
        assert join.count() == want == len(join.pairs()[0])
        cross = brute_gpu.GpuBruteJoin(x, b, eps, filter=fmt)
        cross.batch, cross._candidates = batch, room
        assert cross.count() == want_cross


@pytest.mark.parametrize("cap", [3000, 100_000])
def test_candidate_lists_that_overflow_are_rerun_or_halved(monkeypatch, cap):
    """A cap far below a launch's candidates: ranges are halved down to single tile pairs (whose
    candidates may exceed the cap: listed whole), lists that overflow are rerun; same pairs."""
    from daskjoin.kernels import brute_gpu

    monkeypatch.setattr(brute_gpu, "CANDIDATES_MAX", cap)
    rng = np.random.default_rng(12)
    x = rng.exponential(1 / 40, size=(5000, 48)).astype(np.float32)
    eps = float(np.quantile(np.sqrt(((x[:300, None] - x[None, :300]) ** 2).sum(-1)), 0.05))
    want = oracle_self_pairs(x, eps)
    for fmt in FILTERS:
        assert_same_pairs(get_kernel("brute", "gpu", filter=fmt).self_join(x, eps), want, context=f"{fmt} cap {cap}")
        parts = list(get_kernel("brute", "gpu", filter=fmt).self_batches(x, eps, 5000))
        assert_same_pairs(tuple(np.concatenate([p[t] for p in parts]) for t in range(3)), want)


@pytest.mark.parametrize("fmt", FILTERS)
def test_tensor_core_filter_through_plan_tasks_and_parquet(tmp_path, fmt):
    """gpu_options={"filter": ...} through the shared pipeline: a Zarr input cut into many chunk-pair
    tasks on a Dask worker, the frame, the count and Parquet read back, all equal to the oracle; the
    plan says which filter runs."""
    import pandas as pd
    import zarr
    from distributed import Client

    import daskjoin as dj

    rng = np.random.default_rng(13)
    x = rng.exponential(1 / 40, size=(6000, 96)).astype(np.float32)
    x[10:20] = x[10]
    path = str(tmp_path / "x.zarr")
    z = zarr.create_array(path, shape=x.shape, chunks=(1000, 96), dtype=x.dtype)
    z[:] = x
    eps = float(np.quantile(np.sqrt(((x[:300, None] - x[None, :300]) ** 2).sum(-1)), 0.01))
    expected = oracle_self_pairs(x, eps)
    opts = dict(eps=eps, method="brute", backend="gpu", memory_budget="2MB", gpu_options={"filter": fmt})
    with Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as client:
        plan = dj.plan_join(path, client=client, **opts)
        assert plan.ntasks > 3 and f"GPU filter:    {fmt}" in plan.explain()
        frame = dj.similarity_join(path, client=client, **opts).compute()
        assert_same_pairs((frame.i.to_numpy(), frame.j.to_numpy(), frame.dist.to_numpy()), expected)
        assert dj.similarity_join(path, client=client, output="count", **opts) == len(expected[0])
        res = dj.similarity_join(path, client=client, out=str(tmp_path / "out.parquet"), **opts)
        back = pd.read_parquet(str(tmp_path / "out.parquet"))
        assert res.pairs == len(back) == len(expected[0])
        assert_same_pairs((back.i.to_numpy(), back.j.to_numpy(), back.dist.to_numpy()), expected)


@pytest.mark.parametrize("case", CASES[::3], ids=[c.name for c in CASES[::3]])
def test_two_level_tile_test_gives_the_oracle_pairs(case, monkeypatch):
    """Every filter through groups of two tiles (the test large joins take) gives the oracle's pairs."""
    from daskjoin.kernels import brute_gpu

    monkeypatch.setattr(brute_gpu, "DIRECT_PAIRS", 0)
    monkeypatch.setattr(brute_gpu, "GROUP", 2)
    want_self = oracle_self_pairs(case.a, case.eps)
    want_cross = oracle_cross_pairs(case.a, _b(case), case.eps)
    for f in ("fp32", "fp16", "int8"):
        kernel = get_kernel("brute", "gpu", filter=f, tile=8 if f == "fp32" else None)
        assert_same_pairs(kernel.self_join(case.a, case.eps), want_self, context=f"{f} {case.name} self")
        assert_same_pairs(kernel.cross_join(case.a, _b(case), case.eps), want_cross, context=f"{f} {case.name} cross")


@pytest.mark.parametrize("filt", ["fp32", "fp16"])
def test_two_level_tile_test_of_far_apart_sides(filt, monkeypatch):
    """A x B with no group of tiles near: no tile pairs, no pairs (and sides that touch at one tile)."""
    from daskjoin.kernels import brute_gpu

    monkeypatch.setattr(brute_gpu, "DIRECT_PAIRS", 0)
    monkeypatch.setattr(brute_gpu, "GROUP", 2)
    rng = np.random.default_rng(3)
    a, b = rng.random((2000, 20)), rng.random((1500, 20)) + 10.0
    kernel = get_kernel("brute", "gpu", filter=filt)
    assert kernel.cross_count(a, b, 0.5) == 0 and len(kernel.cross_join(a, b, 0.5)[0]) == 0
    b[-1] = a[7]  # one row of B on one of A: one pair, one tile pair
    assert_same_pairs(kernel.cross_join(a, b, 0.5), oracle_cross_pairs(a, b, 0.5))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1), (255, 3), (257, 128), (70_000, 5)])
def test_column_extremes_match_numpy(shape, dtype):
    import cupy as cp

    from daskjoin.kernels.grid_gpu import column_extremes, device_bounds

    rng = np.random.default_rng(shape[0])
    x = ((rng.random(shape) - 0.5) * 10.0 ** rng.integers(-3, 6, shape)).astype(dtype)
    lo, hi = column_extremes(cp.asarray(x))
    np.testing.assert_array_equal(lo.get(), x.min(axis=0))
    np.testing.assert_array_equal(hi.get(), x.max(axis=0))
    b = x[: max(1, shape[0] // 3)] * 2
    both = np.concatenate([x, b])
    got = device_bounds(cp.asarray(x), None, cp.asarray(b))
    np.testing.assert_array_equal(got[0], both.min(axis=0).astype(np.float64))
    np.testing.assert_array_equal(got[1], both.max(axis=0).astype(np.float64))


def _kept_by_the_rule(fmt, G, X, Y):
    """The candidates the kernel must list for products G (exact integers, float64) and thresholds X (rows), Y
    (columns): ``G - Y >= X`` in int32 for int8; for fp16 ``G - Y`` rounded up to float32, which reaches X exactly
    when ``G - Y > x-`` (x- the float32 below X).  Evaluated in float64, and exactly (fractions) where float64 is too
    close to the boundary to tell."""
    from fractions import Fraction

    if fmt == "int8":
        return tc_quant.candidates(G, X, Y)  # integers below 2^31: exact in float64
    below = np.nextafter(X.astype(np.float32), np.float32(-np.inf)).astype(np.float64)
    margin = G - Y.astype(np.float64)[None, :] - below[:, None]
    keep = margin > 0
    scale = np.abs(G) + np.abs(Y.astype(np.float64))[None, :] + np.abs(below)[:, None]
    finite = np.isfinite(Y)[None, :] & (np.abs(below) < np.finfo(np.float32).max)[:, None]  # padding: exact as is
    for r, c in zip(*np.nonzero(finite & (np.abs(margin) <= scale * 2.0 ** -40))):
        keep[r, c] = Fraction(float(G[r, c])) - Fraction(float(Y[c])) > Fraction(float(below[r]))
    return keep


def _listed_and_wanted(fmt, d, mode, mma, noise=0.05, room=1 << 20, rows_a=1500):
    """The filter kernel's candidates over every kept tile pair of clustered rows (``noise``: the spread about each
    of 12 centres, one or one a centre), as listed with lists of ``room`` to begin with (a launch that overflows is
    rerun with room for all), and the rule's in numpy; with the join, and the rule's 128 x 128 mask of each tile
    pair."""
    import cupy as cp

    from daskjoin.kernels.brute_gpu import GpuBruteJoin, listed_candidates, tc_filter_launch

    rng = np.random.default_rng(d)
    centres = rng.random((12, d)) * 4
    sigma = np.broadcast_to(np.asarray(noise, np.float64), (12,))

    def rows(n):
        at = rng.integers(0, 12, n)
        return centres[at] + rng.normal(0, 1, (n, d)) * sigma[at][:, None]

    a = rows(rows_a)
    b = None if mode == "self" else rows(700)
    eps = 0.1 * np.sqrt(d)
    join = GpuBruteJoin(a, b, eps, filter=fmt)
    assert join.filter == fmt
    P, Q = join.pairs_p, join.pairs_q
    launch = tc_filter_launch(fmt, join.A.tc, join.B.tc, P, Q, join.thresholds, join.selfjoin, mma)
    got, listed = set(), 0
    for cand, _, count, _ in listed_candidates(launch, int(P.shape[0]), room):
        got.update(map(tuple, cand[:count].get().tolist()))
        listed += count
    assert listed == len(got)  # no candidate listed twice

    qa, qb = (side.tc[0].view(cp.int8 if fmt == "int8" else cp.float16).get().astype(np.float64)
              for side in (join.A, join.B))
    X, Y = (t.get() for t in join.thresholds)
    want, masks = set(), []
    for p, q in zip(P.get().tolist(), Q.get().tolist()):
        ra, rb = slice(p * 128, p * 128 + 128), slice(q * 128, q * 128 + 128)
        keep = _kept_by_the_rule(fmt, qa[ra] @ qb[rb].T, X[ra], Y[rb])
        if join.selfjoin and p == q:
            keep &= np.triu(np.ones((128, 128), bool), 1)  # the diagonal tile's pairs once, none with itself
        masks.append(keep)
        r, c = np.nonzero(keep)
        want.update(zip((r + p * 128).tolist(), (c + q * 128).tolist()))
    return join, got, want, masks


@pytest.mark.parametrize("fmt, d", [("int8", 100), ("int8", 300), ("fp16", 60), ("fp16", 128)])
@pytest.mark.parametrize("mode", ["self", "cross"])
@pytest.mark.parametrize("mma", MMAS)
def test_filter_kernel_lists_exactly_the_rules_candidates(fmt, d, mode, mma):
    """The filter kernel's candidate list, pair for pair, against the separable rule evaluated in numpy from the
    exact products: over every kept tile pair of clustered rows (runs of pairs that share an A tile, of one pair and
    of several, more runs in a block than the kernel has A slots, the diagonal's half of a self-join, partial last
    tiles), with rows of one 128-byte chunk (int8 at 100-d, fp16 at 60-d: the A tile staged once a run) and of
    several (int8 at 300-d, fp16 at 128-d), for each form of the kernel (mma.sync; wgmma on Hopper)."""
    from daskjoin.kernels.brute_gpu import TC_PAIRS_PER_BLOCK

    join, got, want, _ = _listed_and_wanted(fmt, d, mode, mma)
    p_list = join.pairs_p.get()
    every = join.A.ntiles * (join.A.ntiles + 1) // 2 if join.selfjoin else join.A.ntiles * join.B.ntiles
    assert 1 < len(p_list) < every  # some tile pairs kept, not all
    starts = np.flatnonzero(np.r_[True, p_list[1:] != p_list[:-1]])  # where runs of one tile of P begin
    lengths = np.diff(np.r_[starts, len(p_list)])
    assert lengths.max() > 1 and (lengths.min() == 1 or not join.selfjoin)  # the last tile alone, self-joined
    block_runs = [len(set(p_list[k:k + TC_PAIRS_PER_BLOCK].tolist())) for k in range(0, len(p_list), TC_PAIRS_PER_BLOCK)]
    assert max(block_runs) > 3  # the kernel's 3 A slots go round within a block
    assert len(want) > 1000
    assert got == want


@pytest.mark.parametrize("fmt, d", [("int8", 100), ("fp16", 60)])
@pytest.mark.parametrize("mode", ["self", "cross"])
@pytest.mark.parametrize("room", [1 << 20, 100])
@pytest.mark.parametrize("mma", MMAS)
def test_filter_kernel_lists_dense_tiles_through_every_route(fmt, d, mode, room, mma):
    """Clusters from tight (every pair within eps) to loose (a few pairs a tile), so that a warp finds more
    candidates in one tile pair than it gathers (written to the list at once), and others fill their gathered
    lists over several pairs (appended when full and at the block's end), with lists that overflow to begin with
    (counted past their room, then rerun): the rule's candidates, exactly.  A wgmma warp's share of a tile pair is
    a band of 16 rows (warp w's rows 16 w .. 16 w + 15: 64 (w // 4) + 16 (w % 4)), so the rule's masks say which
    routes the data take (mma.sync appends at once, from 32 x 64 blocks)."""
    from daskjoin.kernels.brute_gpu import TC_PAIRS_PER_BLOCK

    # as _listed_and_wanted: a spread c eps / sqrt(2 d) puts a cluster's pairs at about c eps (within a relative
    # sqrt(2 / d) in the square): two clusters of which every pair passes, ten of which a few percent down to a few
    # per mille do, each of about two tiles
    eps = 0.1 * np.sqrt(d)
    c = np.array([0.3, 0.6, 1.15, 1.18, 1.2, 1.22, 1.25, 1.15, 1.18, 1.2, 1.22, 1.25])
    join, got, want, masks = _listed_and_wanted(fmt, d, mode, mma, noise=c * eps / np.sqrt(2 * d), room=room,
                                                rows_a=3000)
    assert got == want
    bands = np.array([m.reshape(8, 16, 128).sum(axis=(1, 2)) for m in masks])  # candidates of each 16-row band
    assert (bands > 128).any()  # written at once (more than a warp gathers)
    per_block = [bands[k:k + TC_PAIRS_PER_BLOCK] for k in range(0, len(bands), TC_PAIRS_PER_BLOCK)]
    small = [np.where(b <= 128, b, 0).sum(axis=0) for b in per_block]
    assert max(s.max() for s in small) > 128  # a gathered list fills within a block
    assert len(want) > (room if room < 1 << 20 else 0)
