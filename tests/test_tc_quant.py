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
    q_a, r_a = tc_quant.kernel_bounds(na, ua, tc_quant.reach0(eps, S, d))
    q_b, r_b = tc_quant.kernel_bounds(nb, ub, 0.0)
    assert (q_a <= na).all() and (r_a >= tc_quant.reach0(eps, S, d) + ua).all() and (r_b >= ub).all()
    keep = tc_quant.candidates(q_a, q_b, G, r_a, r_b)
    truth = pairwise_squared_distances(a, b) <= np.float64(eps) * np.float64(eps)
    return keep, truth


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
    # the driver's own rule (kernels may not import planning) makes the same choices
    assert (tc_quant.TC_FROM_D, tc_quant.FP16_TO_D) == (TC_FROM_D, FP16_TO_D)
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
    for name in ("TILE", "LDS", "STAGE_BYTES", "NSTAGES", "TC_SMEM", "PAIRS_PER_BLOCK", "THREADS"):
        value[name] = eval(define[name], {}, dict(value))  # each refers only to those before it
    assert value["TC_SMEM"] == brute_gpu.TC_SMEM_BYTES
    assert value["PAIRS_PER_BLOCK"] == brute_gpu.TC_PAIRS_PER_BLOCK
    assert value["THREADS"] == brute_gpu.BLOCK and value["TILE"] == 128  # tc_quant.auto_filter: tile 128
