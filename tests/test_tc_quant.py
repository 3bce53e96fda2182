"""The tensor-core filter's bound (kernels/tc_quant.py), checked on the CPU with exact integer products.

The GPU kernel computes the same integer products on the tensor cores (tests/test_brute_tc_gpu.py
checks that they are exact there); here the products are int64 matmuls, so these tests check the
proof itself: every pair the float64 rule accepts passes the filter, on adversarial data.
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskjoin.kernels import tc_quant
from daskjoin.planning.cost import FP16_TO_D, TC_FROM_D, choose_filter

from cases import CASES
from oracle import _accumulate as pairwise_squared_distances, squared_distances


def _filter_keeps(a, b, eps, fmt):
    """(filter's candidate matrix, float64 rule's matrix) for rows of a against rows of b."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    d = a.shape[1]
    both = np.vstack([a, b])
    centre = (both.min(axis=0) + both.max(axis=0)) / 2 if len(both) else np.zeros(d)
    spread = max(float(np.abs(a - centre).max()) if a.size else 0.0, float(np.abs(b - centre).max()) if b.size else 0.0)
    L = tc_quant.levels(fmt, d)
    S = tc_quant.scale(spread, L)
    if S is None:
        return None, None
    qa, na, ua = tc_quant.quantise(a - centre, S, L)
    qb, nb, ub = tc_quant.quantise(b - centre, S, L)
    assert np.abs(qa).max(initial=0) <= L and np.abs(qb).max(initial=0) <= L
    G = (qa.astype(np.int64) @ qb.astype(np.int64).T).astype(np.float64)  # exact, as on the tensor cores
    r_a = tc_quant.row_reach(ua, tc_quant.reach0(eps, S, d))
    r_b = tc_quant.row_reach(ub, 0.0)
    assert (r_a >= tc_quant.reach0(eps, S, d) + ua).all() and (r_b >= ub).all()
    X, Y = _thresholds(na, r_a, nb, r_b, fmt)
    keep = tc_quant.candidates(G, X, Y)
    truth = pairwise_squared_distances(a, b) <= np.float64(eps) * np.float64(eps)
    return keep, truth


def _thresholds(na, r_a, nb, r_b, fmt):
    """The kernel's X and Y (padded to whole tiles, as the drivers pass them), cut to the rows; the padding
    checked to be out of every product's reach."""
    tiles = lambda n: -(-max(n, 1) // 128) * 128  # noqa: E731
    X, Y = tc_quant.thresholds(na, r_a, nb, r_b, fmt, tiles(len(na)), tiles(len(nb)))
    beyond = tc_quant.INT8_BEYOND if fmt == "int8" else np.inf
    assert (X[len(na):] == beyond).all() and (Y[len(nb):] == beyond).all()
    assert X.dtype == Y.dtype == (np.int32 if fmt == "int8" else np.float32)
    return X[:len(na)], Y[:len(nb)]


def _assert_no_true_pair_lost(a, b, eps, fmt):
    keep, truth = _filter_keeps(a, b, eps, fmt)
    if keep is None:
        return
    lost = np.argwhere(truth & ~keep)
    assert not len(lost), f"{fmt}: true pairs filtered out: {lost[:5].tolist()}"


@pytest.mark.parametrize("fmt", sorted(tc_quant.FORMATS))
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_no_true_pair_filtered_on_the_adversarial_cases(case, fmt):
    if len(case.a) > 1500:
        pytest.skip("the int64 product matrix of this case is large; the GPU tests run it")
    _assert_no_true_pair_lost(case.a, case.a, case.eps, fmt)
    _assert_no_true_pair_lost(case.a, case.cross_b(), case.eps, fmt)


@pytest.mark.parametrize("fmt", sorted(tc_quant.FORMATS))
@pytest.mark.parametrize("d", [1, 5, 33, 128, 960])
def test_pairs_at_exactly_eps_with_large_offsets(fmt, d):
    """Rows offset by 1e6 whose distance is eps to the last bit, and a ladder of ulps around it."""
    rng = np.random.default_rng(d)
    base = 1e6 + rng.random((40, d))
    step = rng.standard_normal((40, d))
    step /= np.sqrt((step ** 2).sum(axis=1, keepdims=True))
    other = base + 0.25 * step
    eps = float(np.sqrt(squared_distances(base[:1], other[:1])[0]))
    ladder = [np.nextafter(eps, np.inf), eps, np.nextafter(eps, 0)]
    for e in ladder:
        _assert_no_true_pair_lost(base, other, e, fmt)
        _assert_no_true_pair_lost(np.vstack([base, other]), np.vstack([base, other]), e, fmt)


@pytest.mark.parametrize("fmt", sorted(tc_quant.FORMATS))
def test_values_that_round_badly(fmt):
    """Coordinates halfway between grid levels, at the grid's ends, huge and tiny spreads."""
    d = 64
    for spread in (1e-200, 1e-3, 1.0, 1e150):
        L = tc_quant.levels(fmt, d)
        S = spread / L
        halves = (np.arange(-L, L) + 0.5)[:, None] * S * np.ones((1, d))
        x = np.vstack([halves, np.full((1, d), spread), np.full((1, d), -spread), np.zeros((1, d))])
        rng = np.random.default_rng(7)
        x = x[rng.permutation(len(x))][:300]
        for eps in (S * 0.5, S * math.sqrt(d), spread * 0.3):
            _assert_no_true_pair_lost(x, x, eps, fmt)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 40), d=st.integers(1, 70), seed=st.integers(0, 2 ** 31),
    offset=st.sampled_from([0.0, 1.0, -3e5, 1e6]), scale=st.sampled_from([1e-6, 1.0, 1e4]),
    quantile=st.floats(0.0, 1.0), fmt=st.sampled_from(sorted(tc_quant.FORMATS)),
)
def test_property_no_true_pair_filtered(n, d, seed, offset, scale, quantile, fmt):
    rng = np.random.default_rng(seed)
    a = offset + scale * rng.standard_normal((n, d))
    b = np.vstack([a[: n // 2], offset + scale * rng.standard_normal((n, d))])  # shared rows: distance 0
    dist = np.sqrt(pairwise_squared_distances(a, b)).ravel()
    eps = float(np.quantile(dist, quantile)) or scale
    _assert_no_true_pair_lost(a, b, eps, fmt)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 30), d=st.integers(1, 300), seed=st.integers(0, 2 ** 31),
       quantile=st.floats(0.0, 1.0), fmt=st.sampled_from(sorted(tc_quant.FORMATS)))
def test_separable_test_keeps_what_the_product_test_kept(n, d, seed, quantile, fmt):
    """G - Y_b >= X_a keeps every pair that |q_a|^2 + |q_b|^2 - 2G <= (r_a + r_b)^2 (the test it replaced,
    evaluated here in exact rationals) keeps: F_a + H_b >= (r_a + r_b)^2 for any c and lam > 0."""
    from fractions import Fraction

    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((n, d)), rng.standard_normal((n + 3, d))
    L = tc_quant.levels(fmt, d)
    S = tc_quant.scale(max(np.abs(a).max(), np.abs(b).max()), L)
    qa, na, ua = tc_quant.quantise(a, S, L)
    qb, nb, ub = tc_quant.quantise(b, S, L)
    G = qa.astype(np.int64) @ qb.astype(np.int64).T
    eps = float(np.quantile(np.sqrt(pairwise_squared_distances(a, b)), quantile))
    r_a, r_b = tc_quant.row_reach(ua, tc_quant.reach0(eps, S, d)), tc_quant.row_reach(ub, 0.0)
    keep = tc_quant.candidates(G, *_thresholds(na, r_a, nb, r_b, fmt))
    for i in range(n):
        for j in range(len(b)):
            reach = Fraction(float(r_a[i])) + Fraction(float(r_b[j]))
            if Fraction(int(na[i])) + Fraction(int(nb[j])) - 2 * int(G[i, j]) <= reach * reach:
                assert keep[i, j], (i, j)


@pytest.mark.parametrize("d", [128, 16_644, 133_000, tc_quant.MAX_D])
def test_int8_products_and_thresholds_fit_int32(d):
    """At the int8 grid's ends (every coordinate +-L) and with an infinite reach, G - Y_b and the thresholds
    computed in int32 equal their int64 values: nothing wraps, and padded rows never pass."""
    L = tc_quant.levels("int8", d)
    assert d * L * L <= 2 ** 28
    top = d * L * L  # |G| and |q|^2 at their largest
    na = np.array([top, top, 0.0, top])
    r = np.array([0.0, np.inf, 1e30, 3.0], np.float32)
    X, Y = tc_quant.thresholds(na, r, na, np.array([0.0, 9.0, 3.0, 3.5], np.float32), "int8", 8, 8)
    assert X.min() >= tc_quant.INT8_FLOOR and X[:4].max() <= top // 2 + 1 and (X[4:] == tc_quant.INT8_BEYOND).all()
    for g in (-top, 0, top):
        diff32 = np.int32(g) - Y  # int32 arithmetic wraps silently: the int64 comparison catches a wrap
        assert np.array_equal(diff32.astype(np.int64), np.int64(g) - Y.astype(np.int64))
        passed = (np.int64(g) - Y.astype(np.int64))[None, :] >= X.astype(np.int64)[:, None]
        assert not passed[4:].any() and not passed[:, 4:].any()  # padding: never a candidate
        assert passed[1, :4].all() and passed[2, :4].all()  # an infinite or huge reach: every real column


@pytest.mark.parametrize("fmt", sorted(tc_quant.FORMATS))
def test_the_filter_filters(fmt):
    """Not a pass-everything test: on 128-d data with ~1% of pairs within eps, few others pass."""
    rng = np.random.default_rng(1)
    x = rng.exponential(1 / 40, size=(1200, 128))
    eps = float(np.quantile(np.sqrt(pairwise_squared_distances(x[:300], x[:300])), 0.01))
    keep, truth = _filter_keeps(x, x, eps, fmt)
    assert (truth & ~keep).sum() == 0
    assert keep.sum() < 4 * truth.sum(), (fmt, int(keep.sum()), int(truth.sum()))
    assert keep.sum() < 0.1 * keep.size


@pytest.mark.parametrize("fmt", sorted(tc_quant.FORMATS))
@pytest.mark.parametrize("d", [1, 2, 31, 32, 100, 128, 384, 960, 4096, 133_000])
def test_grid_products_stay_exact(fmt, d):
    """d L^2 within the format's exact range, every level representable in the stored format."""
    width, top, exact = tc_quant.FORMATS[fmt]
    L = tc_quant.levels(fmt, d)
    assert 1 <= L <= top and d * L * L <= exact
    assert tc_quant.padded_dims(fmt, d) * width % tc_quant.ROW_ALIGN == 0 and tc_quant.padded_dims(fmt, d) >= d
    levels = np.arange(-L, L + 1, dtype=np.float64)
    stored = levels.astype(np.int8 if fmt == "int8" else np.float16)
    assert np.array_equal(stored.astype(np.float64), levels)


@pytest.mark.parametrize("fmt", sorted(tc_quant.FORMATS))
def test_eps_whose_square_overflows_keeps_every_pair(fmt):
    """eps^2 = inf: the float64 rule accepts every pair whose sum overflows too (found by review: rows
    +-1e300 apart, eps = 1e200, were dropped)."""
    x = np.zeros((4, 64))
    x[0, 0], x[1, 0], x[2, 0] = 1e300, -1e300, 1e299
    with np.errstate(over="ignore"):  # the squares overflow: that is the case
        keep, truth = _filter_keeps(x, x, 1e200, fmt)
        assert truth[0, 1] and keep[0, 1]
        _assert_no_true_pair_lost(x, x, 1e200, fmt)
    assert tc_quant.reach0(1e200, 1.0, 64) == np.inf


@settings(max_examples=150, deadline=None)
@given(
    qa=st.lists(st.integers(0, 2 ** 28), min_size=0, max_size=6), qb=st.lists(st.integers(0, 2 ** 28), min_size=1, max_size=6),
    ra=st.lists(st.one_of(st.floats(0.0, 2.0 ** 127, width=32), st.just(np.inf)), min_size=6, max_size=6),
    rb=st.lists(st.one_of(st.floats(2.0 ** -100, 2.0 ** 127, width=32), st.just(np.inf)), min_size=6, max_size=6),
    equal_b=st.booleans(), fmt=st.sampled_from(sorted(tc_quant.FORMATS)),
)
def test_thresholds_are_below_the_exact_ones(qa, qb, ra, rb, equal_b, fmt):
    """X_a <= x_a and Y_b <= y_b (or the floor), in exact rationals from the very c and lam the driver used: reaches
    from 1e-30 to 3e38, infinite ones, all of B's equal (no spread: lam at its cap), norms up to 2^28 (cancellation
    where |q|^2 is about F)."""
    from fractions import Fraction

    r_a = np.array(ra[:len(qa)], np.float32)
    r_b = np.array([rb[0]] * len(qb) if equal_b else (rb * 2)[:len(qb)], np.float32)
    na, nb = np.array(qa, np.float64), np.array(qb, np.float64)
    X, Y = tc_quant.thresholds(na, r_a, nb, r_b, fmt, len(na) + 3, len(nb) + 3)
    c, lam = tc_quant.bound_constants(r_a.astype(np.float64), r_b.astype(np.float64))
    c, lam = Fraction(c), Fraction(lam)
    assert lam > 0
    # a threshold below the floor is raised to it: that keeps every pair, whatever G (test above)
    floor = Fraction(tc_quant.INT8_FLOOR if fmt == "int8" else tc_quant.FP16_FLOOR)
    for q, r, t in zip(na, r_a, X):
        if np.isinf(r):
            assert t == (tc_quant.INT8_FLOOR if fmt == "int8" else tc_quant.FP16_FLOOR)
            continue
        r = Fraction(float(r))
        assert Fraction(float(t)) <= max(floor, (Fraction(q) - r * ((1 + lam) * r + 2 * c)) / 2)
    for q, r, t in zip(nb, r_b, Y):
        if np.isinf(r):
            assert t == (tc_quant.INT8_FLOOR if fmt == "int8" else tc_quant.FP16_FLOOR)
            continue
        r = Fraction(float(r))
        assert Fraction(float(t)) <= max(floor, (Fraction(q) - r * r - (r - c) ** 2 / lam) / 2)
    beyond = tc_quant.INT8_BEYOND if fmt == "int8" else np.inf
    assert (X[len(na):] == beyond).all() and (Y[len(nb):] == beyond).all()


@pytest.mark.parametrize("kind, eps, int8", [("uniform", 3.6825, True), ("expo", 0.296, False)])
def test_auto_samples_whether_int8_is_faster(kind, eps, int8):
    """128-d: uniform rows (eps for ~64 neighbours at 1M rows) pass about 3e-5 of all pairs more on int8's grid than on
    fp16's, so int8 (twice the rate) wins; exponential rows (lambda 40, ~1,700 neighbours) about 2e-3 to 3e-3, at
    break-even, so fp16 is kept (tc_quant.INT8_EXTRA_SHARE has the H200 figures)."""
    from daskjoin.io.synth import generate

    x = generate(kind, 20_000, 128, seed=0).astype(np.float64)
    centre = (x.min(axis=0) + x.max(axis=0)) / 2
    spread = float(np.abs(x - centre).max())
    faster, extra = tc_quant.prefer_int8(x, None, eps, centre, spread)
    assert faster == int8 and (extra < tc_quant.INT8_EXTRA_SHARE) == int8, extra
    assert 1e-5 < extra < 1e-4 if int8 else 1e-3 < extra < 1e-2
    # the counts behind it: every true pair of the sample, fp16 passing fewer than int8
    rows_a, rows_b = x[:300], x[::7]
    truth = int((pairwise_squared_distances(rows_a, rows_b) <= eps * eps).sum())
    fp16 = tc_quant.sampled_candidates(rows_a, rows_b, eps, centre, spread, "fp16")
    assert truth <= fp16 <= tc_quant.sampled_candidates(rows_a, rows_b, eps, centre, spread, "int8")


def test_no_grid_beyond_the_margins_dimensionality():
    assert tc_quant.levels("int8", tc_quant.MAX_D) >= 1
    assert tc_quant.levels("int8", tc_quant.MAX_D + 1) == 0 and tc_quant.scale(1.0, 0) is None


def test_scale_refuses_spreads_off_the_normal_range():
    assert tc_quant.scale(0.0, 127) == 1.0
    assert tc_quant.scale(1e-310, 127) is None
    assert tc_quant.scale(1e305, 127) is None
    assert tc_quant.scale(1.0, 0) is None
    assert tc_quant.scale(254.0, 127) == 2.0


def test_choose_filter_follows_dimensionality():
    assert choose_filter("auto", TC_FROM_D - 1)[0] == "fp32"
    assert choose_filter("auto", TC_FROM_D)[0] == "fp16"
    assert choose_filter("auto", FP16_TO_D)[0] == "fp16"
    assert choose_filter("auto", FP16_TO_D + 1)[0] == "int8"
    assert choose_filter("fp16", 3) == ("fp16", "requested")
    assert choose_filter("auto", 128, tile=256)[0] == "fp32" and choose_filter("auto", 128, tile=128)[0] == "fp16"
    # the driver's own rule (kernels may not import planning) makes the same choices, and explain() names its sample
    assert (tc_quant.TC_FROM_D, tc_quant.FP16_TO_D) == (TC_FROM_D, FP16_TO_D)
    why = choose_filter("auto", 128)[1]
    assert tc_quant.SAMPLE_FROM_PAIRS == 1 << 32 and "2^32 pairs" in why
    assert tc_quant.INT8_EXTRA_SHARE == 1.5e-3 and "1.5e-3" in why
    for d in (1, 63, 64, 128, 260, 261, 960, 10_000):
        for tile in (None, 128, 256):
            assert tc_quant.auto_filter(d, tile) == choose_filter("auto", d, tile)[0], (d, tile)
    # fp16's grid is at least twice as fine as int8's exactly up to FP16_TO_D
    assert tc_quant.levels("fp16", FP16_TO_D) >= 2 * tc_quant.levels("int8", FP16_TO_D)
    assert tc_quant.levels("fp16", FP16_TO_D + 1) < 2 * tc_quant.levels("int8", FP16_TO_D + 1)


def test_plan_explains_the_gpu_filter():
    import daskjoin as dj

    x = np.random.default_rng(0).random((500, 128), dtype=np.float32)
    text = dj.plan_join(x, eps=0.5, backend="auto", method="brute").explain()  # a GPU worker would use it
    assert "GPU filter:    fp16" in text, text
    assert "int8" in dj.plan_join(x, eps=0.5, method="brute", gpu_options={"filter": "int8"}).explain()
    assert "GPU filter:    fp32" in dj.plan_join(x, eps=0.5, method="brute", gpu_options={"tile": 256}).explain()
    cpu = dj.plan_join(x, eps=0.5, backend="cpu", method="brute").explain()
    assert "GPU filter" not in cpu


def test_launch_constants_match_the_cuda_source():
    """brute_gpu's shared-memory size and tile pairs per block are those cuda/brute_tc.cu is written for."""
    import re
    from pathlib import Path

    from daskjoin.kernels import brute_gpu

    source = (Path(brute_gpu.__file__).parent / "cuda" / "brute_tc.cu").read_text()
    define = {k: v for k, v in re.findall(r"^#define (\w+) (.+)$", source, re.M)}
    value = {}
    for name in ("TILE", "LDS", "STAGE_BYTES", "NSTAGES", "TC_SMEM", "THREADS", "WG_STAGES", "WG_BARRIERS",
                 "PAIRS_PER_BLOCK", "WG_THRESHOLDS", "WG_PAIRS", "WARP_LIST", "WG_SMEM"):
        value[name] = eval(define[name], {}, dict(value))  # each refers only to those before it
    assert value["TC_SMEM"] == brute_gpu.TC_SMEM_BYTES
    assert value["WG_SMEM"] == brute_gpu.TC_WG_SMEM_BYTES
    assert value["PAIRS_PER_BLOCK"] == brute_gpu.TC_PAIRS_PER_BLOCK
    assert value["THREADS"] == brute_gpu.BLOCK and value["TILE"] == 128  # tc_quant.auto_filter: tile 128
