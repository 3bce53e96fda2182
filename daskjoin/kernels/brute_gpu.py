"""``brute`` method, GPU driver: tiled float32 GEMM as a filter, exact float64 decision (``cuda/brute.cu``).

Rows are shifted to the centre of their common box (which keeps norms small even
for coordinates offset by 1e6) and rounded to float32 x~.  For a true pair
(float64 squared distance <= eps^2, so D = |x - y| <= eps (1 + 1e-9)):

- rounding to float32 moves each coordinate by at most u|x_k| (u = 2^-24), so
  |x~ - y~| <= D + u (|x| + |y|), and |x| <= |x~| / (1 - u);
- the float32 value s = |x~|^2 + |y~|^2 - 2 x~.y~ (norms and dot product by any
  summation order, FMA or not) is within gamma_{d+4} (|x~| + |y~|)^2 of |x~ - y~|^2,
  gamma_m = m u / (1 - m u).

So s <= (eps (1 + 1e-9) + c1 (|x~| + |y~|))^2 + c2 (|x~| + |y~|)^2 with
c1 = 2u and c2 = 2 gamma_{d+4} (both twice the bound) keeps every true pair;
each candidate is then decided exactly in float64.  TF32 would break the bound,
so it is refused (CuPy uses it only when CUPY_TF32=1).

Work is cut as in Böhm's GPU nested-loop join: rows are ordered for locality,
cut into tiles of ``tile`` rows with float64 bounding boxes, and only tile pairs
whose boxes are within eps are multiplied (batched GEMM).  The order groups rows
by their nearest *pivot* (one pivot per tile, taken evenly from the rows; pivots
chained greedily nearest-to-nearest), which keeps a tile inside one region of
space in any dimensionality - a grid on a few dimensions does not at 64-d.  Box pruning is exact (monotone
rounding, see ``planning.bounds.box_d2``); on clustered data it skips most of
the n^2 products, on structureless data it costs one cheap pass.
"""
from __future__ import annotations

import functools
import os
from typing import NamedTuple

import numpy as np

from . import tc_quant, tensor_map
from .exact import NORM_FLOOR, eps_squared, error_constants
from .gpu_common import (cupy, device_budget_bytes, feature_arch, kernel, sort_room, sorted_on_device, sorted_to_host,
                         specific_ready, to_host)
from .grid_gpu import device_bounds, on_device, to_device64
from .registry import bounded_ranges, split_batch, transfer_pairs
from .shares import check_share

BLOCK = 256
CHAIN_THREADS = 1024  # cuda/chain.cu: one block walks the pivot chain
#: the filters: "fp32" (SGEMM on the CUDA cores) or the tensor cores on rows quantised to integers
FILTERS = ("auto", "fp32") + tuple(tc_quant.FORMATS)
TC_TILE = 128  # rows per tile of cuda/brute_tc.cu (one block per tile pair)
CANDIDATES_MAX = 1 << 26  # candidates listed at once by the tensor-core filter (12 bytes each)


def pivot_order(x, tile: int):
    """A locality order of the rows of device array ``x``: grouped by nearest pivot, pivots chained.

    Only the order depends on this (float32 arithmetic is fine here); exactness never does.  Rows and
    pivots are taken about the first row (offsets far from 0 would leave float32 little to compare).
    """
    cp = cupy()
    n = x.shape[0]
    m = int(min(4096, max(1, n // max(1, tile))))
    if n == 0 or m == 1:
        return cp.arange(n, dtype=cp.int64)
    origin = x[0]
    pivots = (x[:: max(1, n // m)][:m] - origin).astype(cp.float32)
    # chain the pivots greedily (each next pivot is the nearest unvisited one), on the device
    pnorm = (pivots * pivots).sum(axis=1)
    dist = cp.ascontiguousarray(pnorm[:, None] + pnorm[None, :] - 2.0 * (pivots @ pivots.T))
    _, rank = device_chain(dist)  # a pivot the chain never reached (all-inf rows revisit one) sorts last
    # the nearest pivot maximises x.p - |p|^2 / 2: one product of rows widened by a column of ones against
    # pivots widened by -|p|^2 / 2, then argmax (no temporaries the size of the product)
    d = x.shape[1]
    widened = cp.concatenate([pivots, (-0.5 * pnorm)[:, None]], axis=1)
    nearest = cp.empty(n, cp.int64)
    step = 1 << 16
    rows = cp.ones((min(step, n), d + 1), cp.float32)
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        rows[:r1 - r0, :d] = x[r0:r1] - origin
        row_argmax(rows[:r1 - r0] @ widened.T, nearest[r0:r1])
    return cp.argsort(rank[nearest], kind="stable").astype(cp.int64)


def device_chain(dist):
    """``pivot_chain.greedy_chain`` of the device float32 matrix ``dist`` (m x m, C-contiguous), computed on the
    device (``cuda/chain.cu``: one block; the same choices, tie for tie), and each pivot's place in it (``m`` for
    one never reached; the last place for one revisited, as numpy's ``rank[chain] = arange(m)`` gives): device
    int64 arrays ``(chain, rank)``."""
    cp = cupy()
    if dist.dtype != cp.float32 or dist.ndim != 2 or dist.shape[0] != dist.shape[1] or not dist.flags.c_contiguous:
        raise ValueError("device_chain: dist must be a C-contiguous square float32 matrix")
    m = int(dist.shape[0])
    chain, rank = cp.empty(m, cp.int64), cp.full(m, m, cp.int64)
    if m:
        kernel("chain.cu", "greedy_chain")((1,), (CHAIN_THREADS,), (dist, np.int32(m), chain, rank), shared_mem=m)
    return chain, rank


def row_argmax(a, out=None):
    """numpy's ``argmax(a, axis=1)`` of the device float32 matrix ``a`` (n x m, C-contiguous, m > 0), computed by
    ``cuda/chain.cu: row_argmax`` (the first NaN of a row, else its first largest value, floats compared exactly):
    a device int64 array, ``out`` where given."""
    cp = cupy()
    if a.dtype != cp.float32 or a.ndim != 2 or not a.flags.c_contiguous or a.shape[1] == 0:
        raise ValueError("row_argmax: a must be a C-contiguous float32 matrix with at least one column")
    n, m = (int(v) for v in a.shape)
    out = cp.empty(n, cp.int64) if out is None else out
    if out.shape != (n,) or out.dtype != cp.int64 or not out.flags.c_contiguous:
        raise ValueError("row_argmax: out must be a contiguous int64 vector of one entry a row")
    if n:
        kernel("chain.cu", "row_argmax")((-(-n * 32 // BLOCK),), (BLOCK,), (a, np.int64(n), np.int32(m), out))
    return out


class _Side:
    """One join side on the device: rows in locality order, padded to whole tiles; the float32 copy and
    norms only for the fp32 filter (``tc`` holds the tensor-core filters' rows, see :func:`_tc_rows`)."""

    def __init__(self, x, centre, tile: int, fp32: bool = True):
        cp = cupy()
        x = to_device64(x)
        self.n = int(x.shape[0])
        self.perm = pivot_order(x, tile)
        self.points = cp.ascontiguousarray(x[self.perm])  # float64, in locality order
        ntiles = max(1, -(-self.n // tile))
        pad = ntiles * tile - self.n
        d = int(self.points.shape[1]) if self.points.ndim == 2 else 0
        boxed = cp.concatenate([self.points, cp.repeat(self.points[-1:], pad, axis=0)]) if pad and self.n else self.points
        tiles = boxed.reshape(ntiles, tile, d) if self.n else cp.zeros((0, tile, d))
        self.lo = tiles.min(axis=1) if self.n else cp.zeros((0, d))
        self.hi = tiles.max(axis=1) if self.n else cp.zeros((0, d))
        self.ntiles = ntiles if self.n else 0
        self.tc = None
        if not fp32:
            return
        shifted = (self.points - centre).astype(cp.float32)
        if pad and self.n:
            shifted = cp.concatenate([shifted, cp.repeat(shifted[-1:], pad, axis=0)])
        self.x32 = cp.ascontiguousarray(shifted).reshape(ntiles, tile, d) if self.n else cp.zeros((0, tile, d), cp.float32)
        self.norm2 = (shifted * shifted).sum(axis=1) if self.n else cp.zeros(0, cp.float32)
        # + NORM_FLOOR: the bound then covers float32 underflow flushed to zero (CuPy compiles with -ftz=true)
        self.norm = cp.sqrt((shifted.astype(cp.float64) ** 2).sum(axis=1)) + NORM_FLOOR if self.n else cp.zeros(0)


@functools.lru_cache(maxsize=None)
def _fp16_exact_on(device: int, mma: str) -> bool:
    """Whether this device's fp16 ``mma`` gives exact integer products on the fp16 grid (checked once per
    device against int64: the grid's ends, alternating signs, large terms beside +-1, at the largest
    level count, at 128-d and at 2048-d), with the instructions ``mma`` the filter uses.  The fp16 filter's proof
    assumes a 24-bit fp32 accumulator; int8 needs no such assumption."""
    cp = cupy()
    rng = np.random.default_rng(0)
    ok = True
    for d in (4, 128, 2048):
        L = tc_quant.levels("fp16", d)
        q = np.where(rng.random((128, d)) < 0.5, L, -L)
        q[::3, 1::2] = rng.integers(-1, 2, (len(q[::3]), d // 2))
        r = rng.integers(-L, L + 1, (128, d))
        dp = tc_quant.padded_dims("fp16", d)
        rows = []
        for m in (q, r):
            host = np.zeros((128, dp), np.float16)
            host[:, :d] = m
            rows.append(cp.asarray(host).view(cp.uint8))
        out = cp.zeros((1, 128, 128), cp.float64)
        zero = cp.zeros(1, cp.int64)
        tc_products("fp16", rows[0], rows[1], zero, zero, out, mma)
        ok &= bool(np.array_equal(out[0].get(), (q.astype(np.int64) @ r.astype(np.int64).T).astype(np.float64)))
    return ok


#: dynamic shared memory of a tensor-core tile kernel: three stages of two 128-row tiles of 144-byte rows
#: (cuda/brute_tc.cu: TC_SMEM = NSTAGES * 2 * TILE * LDS; a test ties them)
TC_SMEM_BYTES = 3 * 2 * 128 * 144
#: the same for the wgmma kernels: three A slots and three B stages of 128 rows of 128 bytes, 1 KiB for alignment,
#: 64 bytes of stage barriers and state, the thresholds staged with the tiles (128 of 4 bytes for each stage and
#: A slot), the block's 64 tile pairs (8 bytes each), and each of the 8 warps' 128 gathered candidates of 12 bytes
#: (cuda/brute_tc.cu: WG_SMEM)
TC_WG_SMEM_BYTES = 2 * 3 * 128 * 128 + 1024 + 64 + 2 * 3 * 128 * 4 + 64 * 8 + 8 * 128 * 12
#: tile pairs filtered one after another by one block (cuda/brute_tc.cu: PAIRS_PER_BLOCK)
TC_PAIRS_PER_BLOCK = 64


#: the tensor-core instructions of the filter: ``wgmma`` (Hopper's warpgroup products straight from shared
#: memory, sm_90a) where the device has them, else ``mma`` (mma.sync, any GPU from sm_80).  ``TC_MMA``, when
#: set, overrides the choice (for A/B benchmarks; the tests name each where they run it).
TC_MMAS = ("mma", "wgmma")
TC_MMA: str | None = None


def tc_mma() -> str:
    """The tensor-core instructions the filter uses on the current device (see ``TC_MMAS``)."""
    if TC_MMA is not None:
        return TC_MMA
    return "wgmma" if wgmma_available() else "mma"


def wgmma_available() -> bool:
    """Whether the filter's wgmma kernels exist here: a Hopper device (sm_90a) whose compile of them succeeded."""
    return feature_arch(cupy().cuda.runtime.getDevice()) == "sm_90a" and specific_ready("brute_tc.cu")


#: the kernels that have a wgmma form, and its name
_WGMMA_NAMES = {f"{kind}_{fmt}": f"{kind}_wg_{fmt}" for kind in ("brute_tc", "tc_products") for fmt in ("i8", "f16")}


def tc_smem_bytes(mma: str | None = None) -> int:
    """The dynamic shared memory a tile-product kernel in the ``mma`` form is launched with."""
    return TC_WG_SMEM_BYTES if (mma or tc_mma()) == "wgmma" else TC_SMEM_BYTES


def tc_kernel(function: str, mma: str | None = None):
    """A kernel of cuda/brute_tc.cu (``brute_tc_i8``, ``tc_products_f16``, ...) in the ``mma`` instructions'
    form (default :func:`tc_mma`), allowed the :func:`tc_smem_bytes` of dynamic shared memory it is launched
    with (past the 48 KiB a kernel gets without asking)."""
    mma = mma or tc_mma()
    if mma not in TC_MMAS:
        raise ValueError(f"mma must be one of {TC_MMAS}, got {mma!r}")
    if mma == "wgmma":
        if function not in _WGMMA_NAMES:
            raise ValueError(f"{function} has no wgmma form")
        if not wgmma_available():
            raise ValueError("the wgmma form runs only on a Hopper GPU (compute capability 9.0) where NVRTC "
                             "compiled it for sm_90a")
        function = _WGMMA_NAMES[function]
    k = kernel("brute_tc.cu", function, specific=True)
    if k.max_dynamic_shared_size_bytes < tc_smem_bytes(mma):
        k.max_dynamic_shared_size_bytes = tc_smem_bytes(mma)
    return k


class TcRows(NamedTuple):
    """A side's rows quantised for the tensor-core filter (:func:`_tc_rows`)."""
    rows: object  # the integers as bytes, zero padded to whole tiles and k-steps
    rowbytes: int
    qn2: object   # exact squared norms
    u: object     # residual bounds
    maps: dict    # mma form -> the rows' kernel operand, made once (tc_operand)


def tc_operand(rows, mma: str | None = None):
    """What a tile kernel in the ``mma`` form takes for quantised rows (:class:`TcRows`, or their bytes as a 2-d
    uint8 array): the rows themselves (``mma``: every thread copies its share), or a tensor map of them
    (``wgmma``: the tensor memory accelerator copies whole tiles; :mod:`.tensor_map`)."""
    mma = mma or tc_mma()
    if isinstance(rows, TcRows):
        if mma not in rows.maps:
            rows.maps[mma] = tc_operand(rows.rows, mma)
        return rows.maps[mma]
    return tensor_map.tile_map(rows) if mma == "wgmma" else rows


def tc_products(fmt: str, a_rows, b_rows, P, Q, out, mma: str | None = None) -> None:
    """out[k] = the raw tile products of tile pairs (P[k], Q[k]) of the quantised rows, float64 (one block a pair,
    through the filter's staging): what the filter tests, for the tests and the fp16 check."""
    mma = mma or tc_mma()
    rowbytes = a_rows.rowbytes if isinstance(a_rows, TcRows) else a_rows.shape[1]
    tc_kernel(f"tc_products_{'i8' if fmt == 'int8' else 'f16'}", mma)(
        (len(P),), (BLOCK,), (tc_operand(a_rows, mma), tc_operand(b_rows, mma), np.int32(rowbytes), P, Q, out),
        shared_mem=tc_smem_bytes(mma))


def tc_filter_launch(fmt: str, a_rows, b_rows, P, Q, thresholds, selfjoin: bool, mma: str | None = None):
    """``launch(lo, hi, listed, room, cand, cand_pair)`` for :func:`listed_candidates`: the ``fmt`` tensor-core
    filter (``brute_tc_i8`` / ``_f16``, in the ``mma`` instructions' form) over tile pairs ``(P[k], Q[k])``,
    ``lo <= k < hi``, of the quantised rows ``a_rows`` and ``b_rows`` (:class:`TcRows`).
    ``thresholds``: the ``(X, Y)`` of :func:`tc_quant.thresholds`, or a callable giving them at each launch (the
    kNN filter's tighten as it runs)."""
    mma = mma or tc_mma()
    product = tc_kernel(f"brute_tc_{'i8' if fmt == 'int8' else 'f16'}", mma)
    smem = tc_smem_bytes(mma)
    rowbytes = a_rows.rowbytes

    def launch(lo, hi, listed, room, cand, cand_pair):
        # the rows' operands made at the first launch (kept in the TcRows): none for a launcher never run
        xa, yb = tc_operand(a_rows, mma), tc_operand(b_rows, mma)
        tx, ty = thresholds() if callable(thresholds) else thresholds
        # the kernel reads a thread's two adjacent column thresholds as one 8-byte load, and the wgmma form copies a
        # tile's 128 thresholds in bulk (16-byte aligned sources)
        assert tx.data.ptr % 16 == 0 and ty.data.ptr % 16 == 0, "thresholds must be 16-byte aligned"
        product((-(-(hi - lo) // TC_PAIRS_PER_BLOCK),), (BLOCK,), (
            xa, yb, np.int32(rowbytes), P[lo:hi], Q[lo:hi], np.int64(hi - lo), tx, ty, np.int32(selfjoin),
            # the base of the listed tile-pair numbers, used only where they are listed (cand_pair): ranges of a
            # count start anywhere in the list, which may pass 2**31 tile pairs
            np.int32(0 if cand_pair is None else lo), listed, np.int64(room), cand,
            np.uint64(0) if cand_pair is None else cand_pair,
        ), shared_mem=smem)
    return launch


def fp16_products_exact() -> bool:
    return _fp16_exact_on(cupy().cuda.runtime.getDevice(), tc_mma())


def _tc_rows(side: _Side, centre, S: float, L: int, fmt: str, tile: int, step: int = 1 << 16):
    """The side's rows on the integer grid, zero padded to whole tiles and k-steps, as bytes; with
    their exact squared norms and residual bounds (``tc_quant.quantise``), ``step`` rows at a time (the
    quantiser's float64 temporaries stay a few row blocks, not copies of the side)."""
    cp = cupy()
    d = side.points.shape[1]
    dp = tc_quant.padded_dims(fmt, d)
    rows = cp.zeros((side.ntiles * tile, dp), cp.int8 if fmt == "int8" else cp.float16)
    qn2, u = cp.empty(side.n), cp.empty(side.n)
    for r0 in range(0, side.n, step):
        r1 = min(side.n, r0 + step)
        q, qn2[r0:r1], u[r0:r1] = tc_quant.quantise(side.points[r0:r1] - centre, S, L, cp)
        rows[r0:r1, :d] = q  # integers of at most 12 bits: exact in either format
    return TcRows(rows.view(cp.uint8), int(dp * rows.itemsize), qn2, u, {})


def _spread(x, centre, step: int = 1 << 16) -> float:
    """max |x_k - c_k| over the rows of x, each difference as the quantiser computes it."""
    cp = cupy()
    return max((float(cp.abs(x[r0:r0 + step] - centre).max()) for r0 in range(0, x.shape[0], step)), default=0.0)


def listed_candidates(launch, npairs: int, room: int, per_pair: bool = False, first: int = 0):
    """The tensor-core filter's candidates of tile pairs ``[first, npairs)``, a range at a time.

    ``launch(lo, hi, listed, room, cand, cand_pair)`` runs the filter over tile pairs ``[lo, hi)`` into
    lists of ``room`` entries.  Yields ``(cand, cand_pair, count, room)`` for each range whose candidates
    all fit, with the room to try next: at most ``CANDIDATES_MAX`` candidates at a time (a range with
    more is halved; a launch that overflowed its lists is rerun with room for all).
    """
    cp = cupy()
    ranges = [(int(first), int(npairs), 0)]  # (first, end, room needed: 0 when not yet known)
    while ranges:
        lo, hi, need = ranges.pop()
        size = max(1, need or min(room, CANDIDATES_MAX))
        listed = cp.zeros(1, cp.uint64)
        cand = cp.empty((size, 2), cp.int32)
        cand_pair = cp.empty(size, cp.int32) if per_pair else None
        launch(lo, hi, listed, size, cand, cand_pair)
        count = int(listed.get()[0])
        if count > size:  # rerun with room for all, or in halves past the cap
            del cand, cand_pair
            if count > CANDIDATES_MAX and hi - lo > 1:
                mid = (lo + hi) // 2
                ranges += [(mid, hi, 0), (lo, mid, 0)]
            else:  # one tile pair has at most TC_TILE^2 candidates: listed whole, past the cap
                ranges.append((lo, hi, count))
            continue
        # the room never shrinks: ranges' candidates vary several-fold, and a guess from the last range alone
        # made one launch in ten run again (1M x 128 exponential, H200: 130 launches for 117 ranges)
        room = max(room, min(CANDIDATES_MAX, 2 * count))
        yield cand, cand_pair, count, room
        del cand, cand_pair  # not held while the next lists are made (the caller drops its references too)


def _compact(oi, oj, od, found: int):
    """The first ``found`` pairs as arrays of their own, in the kernel's order (the room they were written to
    is often far larger, and would stay held by views of it)."""
    return oi[:found].copy(), oj[:found].copy(), od[:found].copy()


#: tiles per group of the two-level box test (``near_tile_pairs``).  H100, 10M x 128 embeddings (78,125 tiles,
#: 4.2% of tile pairs kept): groups of 8 tiles 0.46 s, 16 0.82 s, 32 1.01 s, 64 1.10 s (benchmarks/profile_tc.py)
GROUP = 8
#: tile pairs tested directly, without groups, up to this many (a test of a few ms)
DIRECT_PAIRS = 1 << 24
#: the tile pairs are listed in blocks of PAIR_BLOCK x PAIR_BLOCK of the (p, q) grid, the blocks and the pairs within
#: each in row-major order: the filter's blocks running at once then read a few MiB of tiles again and again from L2,
#: where row-major rows of pairs swept all the tiles of B (1M x 128 int8, 128 MB: not in a 50 MB L2).  The kernel
#: alone, uniform 1M x 128 int8, one H200 (session 27): row-major 762-768 TOPS; blocks of 64 x 64 865-867, 128 x 128
#: 866, 32 x 128 824, 16 x 512 852; 300k rows (in L2 either way) 857-858.  A block of the filter's 64 pairs then
#: mostly shares one tile of A (a row of a full pair block; not where pruning or the diagonal leave rows short).
PAIR_BLOCK = 64


def near_tile_pairs(a_boxes, b_boxes, eps2: float, selfjoin: bool):
    """Pairs (p, q) of tiles whose boxes ``(lo, hi)`` (device, one row a tile) are within ``eps2`` (squared gap
    summed in float64, ``cuda/brute.cu: box_gap2``; self-join: q >= p), in blocks of the pair grid
    (:data:`PAIR_BLOCK`, :func:`block_key`).

    Past ``DIRECT_PAIRS`` tile pairs, groups of ``GROUP`` consecutive tiles are tested first and only the tile
    pairs of the group pairs kept are tested: a group's box holds its tiles' boxes, so the kept tile pairs are
    the same (10M x 128-d embeddings on an H100: 3.0e9 tile pairs tested one by one took 2.4 s)."""
    cp = cupy()
    (alo, ahi), (blo, bhi) = [[cp.ascontiguousarray(v, cp.float64) for v in box] for box in (a_boxes, b_boxes)]
    na, nb, d = int(alo.shape[0]), int(blo.shape[0]), int(alo.shape[1])
    if not na or not nb:
        return cp.zeros(0, cp.int64), cp.zeros(0, cp.int64)
    if na * nb <= DIRECT_PAIRS:
        return from_block_key(cp.sort(block_key(*_near_pairs(alo, ahi, blo, bhi, eps2, selfjoin), nb)), nb)
    groups = [_group_boxes(lo, hi, GROUP) for lo, hi in ((alo, ahi), (blo, bhi))]
    sp, sq = _near_pairs(*groups[0], *groups[1], eps2, selfjoin)
    if not sp.size:  # no group pair near (A x B far apart)
        return cp.zeros(0, cp.int64), cp.zeros(0, cp.int64)
    alo, ahi, blo, bhi = _by_dimension(alo, ahi, blo, bhi)
    per_launch = max(1, (256 << 20) // (GROUP * GROUP))  # at most 256 MiB of flags at a time
    keys = []
    for s0 in range(0, int(sp.shape[0]), per_launch):
        gp, gq = sp[s0:s0 + per_launch], sq[s0:s0 + per_launch]
        near = cp.empty((gp.shape[0], GROUP, GROUP), cp.uint8)
        kernel("brute.cu", "tile_box_near_in")((-(-near.size // BLOCK),), (BLOCK,), (
            alo, ahi, blo, bhi, gp, gq, np.int64(gp.shape[0]), np.int32(GROUP), np.int64(na), np.int64(nb),
            np.int32(d), np.float64(eps2), np.int32(selfjoin), near))
        s, r, c = cp.nonzero(near)
        keys.append(block_key(gp[s] * GROUP + r, gq[s] * GROUP + c, nb))
    return from_block_key(cp.sort(cp.concatenate(keys)), nb)


def block_key(p, q, nb: int):
    """The place of tile pair (p, q) of a grid of ``nb`` columns in the blocked order of :func:`near_tile_pairs`
    (row-major blocks of PAIR_BLOCK x PAIR_BLOCK pairs, row-major within each): a key that sorts pairs into it."""
    w = PAIR_BLOCK
    return ((p // w) * -(-nb // w) + q // w) * (w * w) + (p % w) * w + q % w


def from_block_key(key, nb: int):
    """The (p, q) of :func:`block_key`'s keys."""
    w = PAIR_BLOCK
    block, within = key // (w * w), key % (w * w)
    cols = -(-nb // w)
    return (block // cols) * w + within // w, (block % cols) * w + within % w


def _near_pairs(alo, ahi, blo, bhi, eps2: float, selfjoin: bool):
    """Every box of A against every box of B (``tile_box_near``), in row-major order."""
    cp = cupy()
    na, nb, d = int(alo.shape[0]), int(blo.shape[0]), int(alo.shape[1])
    alo, ahi, blo, bhi = _by_dimension(alo, ahi, blo, bhi)
    keep_p, keep_q = [], []
    step = max(1, (256 << 20) // nb)  # at most 256 MiB of flags at a time
    for p0 in range(0, na, step):
        rows = min(na, p0 + step) - p0
        near = cp.empty((rows, nb), cp.uint8)
        kernel("brute.cu", "tile_box_near")((-(-near.size // BLOCK),), (BLOCK,), (
            alo, ahi, blo, bhi, np.int64(p0), np.int64(rows), np.int64(na), np.int64(nb), np.int32(d),
            np.float64(eps2), np.int32(selfjoin), near))
        p, q = cp.nonzero(near)
        keep_p.append(p + p0)
        keep_q.append(q)
    return cp.concatenate(keep_p).astype(cp.int64), cp.concatenate(keep_q).astype(cp.int64)


def _by_dimension(*boxes):
    """Box bounds (tiles x dims, float64) one dimension a row, as ``tile_box_near`` and ``tile_box_near_in`` read them."""
    cp = cupy()
    return tuple(cp.ascontiguousarray(cp.asarray(b, cp.float64).T) for b in boxes)


def _group_boxes(lo, hi, group: int):
    """The boxes of runs of ``group`` consecutive tiles (the last run may be short)."""
    cp = cupy()
    n, d = lo.shape
    pad = -n % group
    if pad:  # the last tile again: the run's box is unchanged
        lo, hi = (cp.concatenate([v, cp.repeat(v[-1:], pad, axis=0)]) for v in (lo, hi))
    return (cp.ascontiguousarray(lo.reshape(-1, group, d).min(axis=1)),
            cp.ascontiguousarray(hi.reshape(-1, group, d).max(axis=1)))


class GpuBruteJoin:
    """A prepared GPU brute-force join; pairs on the host, in original row ids.

    ``filter``: "fp32" (SGEMM on the CUDA cores, tiles of ``tile`` rows), "int8" or "fp16" (the
    tensor cores on rows quantised to integers, ``tc_quant``; tiles of 128 rows), or "auto"
    (``tc_quant.auto_filter``; ``planning.cost.choose_filter`` says why).  Every filter gives the same pairs: each is only a proven filter
    before the float64 decision.
    """

    # tile=256 from benchmarks/bench_gpu.py on an H200 (200k x 64-d clusters): small tiles rarely
    # straddle two clusters, so their boxes stay tight and most tile pairs are pruned.
    def __init__(self, a, b, eps: float, *, tile: int | None = None, batch_bytes: int | None = None,
                 filter: str = "auto", share=None):
        """``share``: ``(k, parts)``, only the k-th of ``parts`` equal runs of the kept tile pairs (tile pairs
        cost alike). Each share computes the rows' locality order itself, with cuBLAS products: the shares
        partition the pairs only among devices that give the same bits (``gpu_common.device_signature``)."""
        if os.environ.get("CUPY_TF32", "0") not in ("", "0"):
            raise RuntimeError("CUPY_TF32 is set: TF32 products break the brute kernel's error bound; unset it")
        if filter not in FILTERS:
            raise ValueError(f"brute filter must be one of {FILTERS}, got {filter!r}")
        cp = cupy()
        self.selfjoin = b is None
        self.eps = float(eps)
        self.eps2 = eps_squared(eps)
        # float32 inputs are decided from their float32 rows (the same float64 values, half the bytes)
        stored32 = all(getattr(x, "dtype", None) == np.float32 for x in (a, b) if x is not None)
        if stored32:  # moved once, as float32: cast to float64 on the device, kept for the decisions below
            a, b = (None if x is None else on_device(x) for x in (a, b))
        originals = (a, b)
        a = to_device64(a)
        b = None if b is None else to_device64(b)
        self.d = int(a.shape[1])
        lo, hi = device_bounds(a, b)
        centre = cp.asarray((lo + hi) / 2)
        self.filter = tc_quant.auto_filter(self.d, tile) if filter == "auto" else filter
        if self.filter == "fp16" and not fp16_products_exact():
            self.filter = "int8"  # this device's fp16 accumulation drops integer bits: int8 is exact by definition
        self.S = None
        self.int8_extra = None  # the sampled share of pairs int8 passes beyond fp16, where auto sampled it
        if self.filter != "fp32":
            # the grid's step from the spread about the centre: R bounds every |x_k - c_k| as computed
            spread = max(_spread(a, centre), 0.0 if b is None else _spread(b, centre))
            if (filter == "auto" and self.filter == "fp16"
                    and a.shape[0] * float(a.shape[0] if b is None else b.shape[0]) >= tc_quant.SAMPLE_FROM_PAIRS):
                faster, self.int8_extra = tc_quant.prefer_int8(a, b, self.eps, centre, spread, cp)
                self.filter = "int8" if faster else "fp16"
            L = tc_quant.levels(self.filter, self.d)
            self.S = tc_quant.scale(spread, L)
            if self.S is None:  # spread outside the grid's range: the fp32 filter holds there
                self.filter = "fp32"
        if self.filter != "fp32" and max(a.shape[0], 0 if b is None else b.shape[0]) >= 1 << 31:
            self.filter = "fp32"  # candidates are listed by int32 row numbers
        if self.filter != "fp32" and tile not in (None, TC_TILE):
            raise ValueError(f"the {self.filter} filter works on tiles of {TC_TILE} rows, got tile={tile}")
        self.tile = int(tile or (256 if self.filter == "fp32" else TC_TILE))
        fp32 = self.filter == "fp32"
        if fp32:
            originals = (None, None)  # the fp32 filter decides from the float64 rows: free the float32 ones now
        self.A = _Side(a, centre, self.tile, fp32)
        self.B = self.A if b is None else _Side(b, centre, self.tile, fp32)
        if self.filter != "fp32":
            self.A.tc = _tc_rows(self.A, centre, self.S, L, self.filter, self.tile)
            self.B.tc = self.A.tc if b is None else _tc_rows(self.B, centre, self.S, L, self.filter, self.tile)
            r0 = tc_quant.reach0(self.eps, self.S, self.d)
            self.thresholds = tc_quant.thresholds(  # the kernel's X (rows of A) and Y (rows of B)
                self.A.tc[2], tc_quant.row_reach(self.A.tc[3], r0, cp), self.B.tc[2],
                tc_quant.row_reach(self.B.tc[3], 0.0, cp), self.filter, self.A.ntiles * self.tile,
                self.B.ntiles * self.tile, cp)
            self.batch = 1 << 18  # tile pairs per launch: no products are stored
            self._candidates = 1 << 22
            if stored32:  # the float64 copies are no longer needed
                for side, original in ((self.A, originals[0]),) + (() if b is None else ((self.B, originals[1]),)):
                    side.points = cp.ascontiguousarray(original[side.perm])
        else:
            budget = batch_bytes if batch_bytes is not None else min(4 << 30, device_budget_bytes(0.25))
            self.batch = max(1, min(65535, budget // (4 * self.tile * self.tile)))
        self.pairs_p, self.pairs_q = self._tile_pairs()
        if share is not None:
            k, parts = check_share(share)
            total = int(self.pairs_p.shape[0])
            lo, hi = total * k // parts, total * (k + 1) // parts
            self.pairs_p, self.pairs_q = self.pairs_p[lo:hi], self.pairs_q[lo:hi]
        self._capacity = 1 << 16

    def _tile_pairs(self):
        """Tile pairs whose boxes are within eps (self-join: p <= q), in blocks of the pair grid (``near_tile_pairs``)."""
        A, B = self.A, self.B
        return near_tile_pairs((A.lo, A.hi), (B.lo, B.hi), self.eps2, self.selfjoin)

    @property
    def kept_fraction(self) -> float:
        total = self.A.ntiles * (self.A.ntiles + 1) / 2 if self.selfjoin else self.A.ntiles * self.B.ntiles
        return float(self.pairs_p.shape[0]) / total if total else 0.0

    def _products(self, lo: int, hi: int):
        """Tile pairs [lo, hi) and their float32 products G[k] = X[P[k]] . Y[Q[k]]^T (one batched GEMM);
        G is None for the tensor-core filters, whose kernel forms its products itself."""
        cp = cupy()
        P, Q = self.pairs_p[lo:hi], self.pairs_q[lo:hi]
        if self.filter != "fp32":
            return P, Q, None
        return P, Q, cp.matmul(self.A.x32[P], self.B.x32[Q].transpose(0, 2, 1))

    def _filter(self, G, P, Q, capacity: int, pair_counts=None):
        """One launch of ``brute_filter`` over the tile pairs (P[k], Q[k]) whose products are G[k].

        Writes at most ``capacity`` pairs, in no particular order, and returns
        ``(found, oi, oj, od)``: ``found`` counts every accepted pair, written or not.
        ``pair_counts`` (zeroed uint64, one per tile pair) also gets each tile pair's count.
        """
        cp = cupy()
        counter = cp.zeros(1, cp.uint64)
        size = max(int(capacity), 1)
        oi, oj, od = cp.empty(size, cp.int64), cp.empty(size, cp.int64), cp.empty(size, cp.float32)
        per_pair = pair_counts is not None
        if self.filter != "fp32":
            return self._filter_tc(P, Q, pair_counts, counter, capacity, oi, oj, od), oi, oj, od
        conv, gamma2 = error_constants(self.d)
        grid = (max(1, -(-self.tile // BLOCK)), min(self.tile, 1024), int(P.shape[0]))
        kernel("brute.cu", "brute_filter")(grid, (BLOCK,), (
            G, P, Q, np.int32(self.tile), np.int64(self.A.n), np.int64(self.B.n),
            self.A.norm2, self.B.norm2, self.A.norm, self.B.norm, self.A.points, self.B.points,
            self.A.perm, self.B.perm, np.int32(self.d),
            np.float64(self.eps * (1.0 + 1e-9)), np.float64(self.eps2), np.float64(conv), np.float64(gamma2),
            np.int32(self.selfjoin), counter, pair_counts if per_pair else counter, np.int32(per_pair),
            np.int64(capacity), oi, oj, od,
        ))
        return int(counter.get()[0]), oi, oj, od

    def _filter_tc(self, P, Q, pair_counts, counter, capacity, oi, oj, od) -> int:
        """The tensor-core filter over tile pairs (P[k], Q[k]), then the float64 decision of its candidates.

        Candidates of a range are listed on the device (:func:`listed_candidates`) and decided by
        ``brute_tc_exact_*``, which appends accepted pairs as ``brute_filter`` does.
        """
        launch = tc_filter_launch(self.filter, self.A.tc, self.B.tc, P, Q, self.thresholds, self.selfjoin)
        self._decide_tc(launch, 0, int(P.shape[0]), pair_counts, counter, capacity, oi, oj, od)
        return int(counter.get()[0])

    def _decide_tc(self, launch, lo: int, hi: int, pair_counts, counter, capacity, oi, oj, od) -> None:
        """The candidates of tile pairs [lo, hi) of ``launch`` listed, then decided in float64 into ``counter``
        (and the first ``capacity`` pairs into oi, oj, od): queued on the device, the counter not read."""
        per_pair = pair_counts is not None
        decide = kernel("brute_tc.cu", f"brute_tc_exact_{'f32' if self.A.points.dtype == np.float32 else 'f64'}",
                        specific=True)  # the module the filter's kernels come from: compiled once
        for cand, cand_pair, count, self._candidates in listed_candidates(launch, hi, self._candidates, per_pair, lo):
            if count:
                blocks = int(min(-(-count // BLOCK), 1 << 16))
                decide((blocks,), (BLOCK,), (
                    cand, cand_pair if per_pair else cand, np.int64(count), self.A.points, self.B.points,
                    self.A.perm, self.B.perm, np.int32(self.d), np.float64(self.eps2), np.int32(self.selfjoin),
                    counter, pair_counts if per_pair else counter, np.int32(per_pair), np.int64(capacity), oi, oj, od,
                ))
            del cand, cand_pair  # freed before the next lists are made

    def _sorted(self, oi, oj, od, found: int):
        """The first ``found`` pairs, sorted by (i, j): deterministic whatever order the atomics gave."""
        cp = cupy()
        oi, oj, od = oi[:found], oj[:found], od[:found]
        if max(self.A.n, self.B.n) >= 1 << 32:
            order = cp.lexsort(cp.stack([oj, oi]))
        else:  # ids below 2**32: one packed key, one radix sort (lexsort is far slower)
            order = cp.argsort((oi.astype(cp.uint64) << cp.uint64(32)) | oj.astype(cp.uint64))
        return oi[order], oj[order], od[order]

    def _range_parts(self, lo: int, hi: int, max_pairs: int | None, sort: bool = True):
        """Sorted device (i, j, dist) parts of tile pairs [lo, hi), each of at most ``max_pairs`` pairs
        (``sort=False``: in the kernel's order, for a caller that sorts them all together).

        One launch with room for ``min(max_pairs, a running guess)`` pairs; when its pairs all
        fit, they are the range's one part.  Otherwise, where they fit ``max_pairs``, the range is
        filled again into room for all of them; where not, a count of every tile pair's pairs
        cuts the range into runs of tile pairs of at most ``max_pairs`` pairs, each filled again
        (from the same products, so the same decisions) into room for exactly its pairs; a
        single tile pair with more pairs (at most tile^2) is filled alone and its pairs
        are sliced.  Per-tile-pair counts cost an atomic per pair: the first launch takes them
        only where ``max_pairs`` is below the running guess (a cut is then likely), else a
        separate count-only launch takes them where a cut turns out to be needed.  So the device holds at most
        ``max(max_pairs, tile^2)`` output pairs at a time, besides the products of the range.
        ``max_pairs=None``: one part of the whole range (a launch that overflowed is redone
        with room for all its pairs).
        """
        cp = cupy()
        P, Q, G = self._products(lo, hi)
        room = self._capacity if max_pairs is None else min(self._capacity, max_pairs)
        # a bound below the running guess will likely cut this range: count its tile pairs in this pass
        pair_counts = cp.zeros(hi - lo, cp.uint64) if max_pairs is not None and max_pairs < self._capacity else None
        found, oi, oj, od = self._filter(G, P, Q, room, pair_counts)
        # The guess never shrinks: device memory is cheap beside a second pass of the filter (one range in nine ran
        # twice when the guess followed the last range alone: 2.45 s to fill 865M pairs where the count takes 2.0 s;
        # 1M x 128 exponential, H200). Bounded parts cap it at an eighth of the device's room for pairs; a whole
        # range at once (max_pairs None) does not, since its refill takes room for all its pairs anyway.
        self._capacity = max(self._capacity, 2 * found if max_pairs is None else min(2 * found, sort_room() // 8))
        ordered = self._sorted if sort else _compact
        if found <= room:
            if found:
                yield ordered(oi, oj, od, found)
            return
        del oi, oj, od
        if max_pairs is None or found <= max_pairs:
            cuts = [(0, hi - lo, found)]
        else:
            if pair_counts is None:
                pair_counts = cp.zeros(hi - lo, cp.uint64)
                self._filter(G, P, Q, 0, pair_counts)
            counts = pair_counts.get().astype(np.int64)
            if int(counts.sum()) != found:
                raise RuntimeError(f"brute GPU kernel: tile pairs {lo}..{hi} counted {int(counts.sum())} pairs "
                                   f"one by one but {found} in all")
            cuts = [(s0, s1, int(counts[s0:s1].sum())) for s0, s1 in bounded_ranges(counts, max_pairs)]
        for s0, s1, want in cuts:
            if not want:
                continue
            got, oi, oj, od = self._filter(None if G is None else G[s0:s1], P[s0:s1], Q[s0:s1], want)
            if got != want:  # the same products give the same decisions: never expected
                raise RuntimeError(f"brute GPU kernel: tile pairs {lo + s0}..{lo + s1} gave {got} pairs, "
                                   f"{want} when counted")
            part = ordered(oi, oj, od, want)
            del oi, oj, od
            if max_pairs is None:
                yield part
            else:
                yield from split_batch(part, max_pairs)

    def _batch(self, lo: int, hi: int, count_only: bool):
        """Tile pairs [lo, hi) at once: (found, sorted device (i, j, dist)), or (found, None) for counts."""
        if count_only:
            P, Q, G = self._products(lo, hi)
            return self._filter(G, P, Q, 0)[0], None
        parts = list(self._range_parts(lo, hi, None))
        if not parts:
            empty = cupy().zeros(0, cupy().int64)
            return 0, (empty, empty.copy(), cupy().zeros(0, cupy().float32))
        return int(parts[0][0].shape[0]), parts[0]

    def _ranges(self):
        """Ranges of at most ``self.batch`` tile pairs (one batched GEMM each, bounded by ``batch_bytes``)."""
        total = int(self.pairs_p.shape[0])
        return [(lo, min(lo + self.batch, total)) for lo in range(0, total, self.batch)]

    def count(self) -> int:
        if self.filter == "fp32":
            return sum(self._batch(lo, hi, True)[0] for lo, hi in self._ranges())
        # the tensor-core filters: one launcher and one device counter for every range, read once at the end (a
        # count read after each range's decisions had the host wait on the device twice a range: 117 ranges on
        # 1M rows)
        ranges = self._ranges()
        if not ranges:  # no tile pair (an empty side): nothing to launch or read
            return 0
        cp = cupy()
        counter = cp.zeros(1, cp.uint64)
        nothing = cp.empty(1, cp.int64)
        launch = tc_filter_launch(self.filter, self.A.tc, self.B.tc, self.pairs_p, self.pairs_q, self.thresholds,
                                  self.selfjoin)
        for lo, hi in ranges:
            self._decide_tc(launch, lo, hi, None, counter, 0, nothing, nothing, cp.empty(1, cp.float32))
        return int(counter.get()[0])

    def _device_parts(self, max_pairs: int | None = None):
        for lo, hi in self._ranges():
            yield from self._range_parts(lo, hi, max_pairs)

    def pairs(self, with_distance: bool = True):
        """All pairs; each range's pairs go to the host as soon as they exist (bounded device memory)."""
        parts = [to_host(i, j, d if with_distance else None) for i, j, d in self._device_parts(None)]
        if not parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), (np.zeros(0, np.float32) if with_distance else None)
        if len(parts) == 1:
            return parts[0]
        return tuple(None if parts[0][t] is None else np.concatenate([p[t] for p in parts]) for t in range(3))

    def batches(self, max_pairs: int, with_distance: bool = True):
        """Batches of at most ``max_pairs`` pairs each, sorted by (i, j) on the device while they fit it.

        Ranges' pairs are held on the device (up to the device budget), each range filtered once
        into room for what is left there, and sorted there as one (a radix sort costs
        milliseconds; the task then only checks the order); past the budget they go to the host
        as they come, in parts of one row group (the task sorts).  Device output memory bounded
        by the device budget plus one part of at most an eighth of it, or ``max(max_pairs,
        tile^2)`` pairs past it (see :meth:`_range_parts`); the products by ``batch_bytes``.
        """
        step = max(1, min(int(max_pairs), transfer_pairs()))  # pinned host copies of one row group at most
        fits = sort_room()  # the pairs and their sort
        held, count, spilled = [], 0, False
        for lo, hi in self._ranges():
            # While pairs are held on the device, a range may give all of what is left there as one part:
            # one pass of the filter, where parts of one row group made it count every tile pair's pairs
            # and fill each run again (twice the filter's work: 8.4 s to the host at 1M x 128 where the
            # count takes 2.7 s).  Past the budget, parts of one row group.
            # at most an eighth of the budget a part: a range crossing the budget keeps one more part
            # beside what is held, not a second budget's worth
            bound = min(fits - count, max(step, fits // 8)) if not spilled and fits - count >= step else step
            # unsorted parts: what is held is sorted as one below, and the task sorts what goes past the budget
            for i, j, d in self._range_parts(lo, hi, bound, sort=False):
                d = d if with_distance else None
                if not spilled and count + len(i) <= fits:
                    held.append((i, j, d))
                    count += len(i)
                    continue
                if held:  # past the budget: what is held goes first, in its own order
                    yield from (tuple(b) for b in self._sorted_to_host(held, step))  # not a run: more follow
                    held = []
                spilled = True
                for piece in split_batch((i, j, d), step):  # a part cut for the room left on the device
                    yield to_host(*piece)
        if held:
            yield from self._sorted_to_host(held, step)  # every pair of the call, sorted: one run

    def _sorted_to_host(self, held, step: int):
        cp = cupy()
        pairs = [cp.concatenate([h[t] for h in held]) if len(held) > 1 else held[0][t] for t in (0, 1)]
        pairs.append(None if held[0][2] is None else (cp.concatenate([h[2] for h in held]) if len(held) > 1
                                                      else held[0][2]))
        held.clear()
        # local row numbers of one partition stay below 2**32: one packed key, one radix sort
        yield from sorted_to_host(*sorted_on_device(pairs), step)
