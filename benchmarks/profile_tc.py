#!/usr/bin/env python
"""Where a tensor-core brute count's time goes, on one GPU: setup (transfer, boxes, tile pairs, quantising),
the filter kernel alone (CUDA events, nothing listed), the float64 decisions, the whole count.

    python3 benchmarks/profile_tc.py [--n 1000000] [--d 128] [--eps 0.296] [--filter fp16]

Data: a synth kind (``--kind``, default bench_highd.py's "expo" workload), eps given or for ``--k`` neighbours.  Prints one table; a diagnostic, not a benchmark of record.
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def _generate(kind, n, d):
    """The synthetic rows, generated block by block on every core (numpy's generators release the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    from daskjoin.io.synth import block_rows, generate

    step = block_rows(d) * 8
    x = np.empty((n, d), np.float32)

    def fill(r0):
        x[r0:r0 + step] = generate(kind, n, d, seed=0, start=r0, stop=min(n, r0 + step))

    with ThreadPoolExecutor() as pool:
        list(pool.map(fill, range(0, n, step)))
    return x


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--eps", type=float, default=0.296)
    p.add_argument("--filter", default="fp16")
    p.add_argument("--kind", default="expo", help="synth kind (expo, embeddings, ...)")
    p.add_argument("--k", type=int, default=None, help="eps for about k neighbours a point (overrides --eps)")
    p.add_argument("--shares", type=int, default=4, help="also time one of this many query shares (0: no)")
    p.add_argument("--mma", default="", help="comma-separated tensor-core forms (mma, wgmma): the filter kernel alone "
                   "timed in each, the counts in the first (default: the device's own, brute_gpu.tc_mma)")
    p.add_argument("--orders", default="", help="comma-separated HxW: the filter kernel alone also timed with the tile "
                   "pairs in blocks of H rows x W columns of the pair grid (row-major within and across blocks)")
    args = p.parse_args()

    import cupy as cp

    from daskjoin.kernels import brute_gpu, tc_quant

    x = _generate(args.kind, args.n, args.d)
    if args.k:
        import os
        import sys
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from bench_highd import eps_for_k
        args.eps = eps_for_k(x, args.k)
    brute_gpu.GpuBruteJoin(x[:1000], None, args.eps, filter=args.filter).count()  # compile

    def timed(fn):
        cp.cuda.Device().synchronize()
        t = time.perf_counter()
        out = fn()
        cp.cuda.Device().synchronize()
        return time.perf_counter() - t, out

    rows = {}
    rows["setup (transfer, boxes, quantise, tile pairs)"], join = timed(
        lambda: brute_gpu.GpuBruteJoin(x, None, args.eps, filter=args.filter))
    # the setup's steps one by one, as GpuBruteJoin runs them
    from daskjoin.kernels.grid_gpu import to_device64

    rows["  to_device64 (host -> device, float64)"], xd = timed(lambda: to_device64(x))
    rows["  pivot_order (locality order)"], perm = timed(lambda: brute_gpu.pivot_order(xd, 128))
    rows["  _Side (order, gather, boxes)"], side = timed(lambda: brute_gpu._Side(xd, join.A.lo[0] * 0, 128, False))
    from daskjoin.kernels.grid_gpu import device_bounds

    rows["  device_bounds"], _ = timed(lambda: device_bounds(xd, None))
    centre = cp.zeros(args.d)
    rows["  _spread"], _ = timed(lambda: brute_gpu._spread(xd, centre))
    L = tc_quant.levels(join.filter, args.d)
    rows["  _tc_rows (quantise)"], _ = timed(lambda: brute_gpu._tc_rows(side, centre, join.S, L, join.filter, 128))
    rows["  float32 rows gathered again"], _ = timed(lambda: cp.ascontiguousarray(cp.asarray(x)[side.perm]))
    del xd, perm, side
    rows["  of which tile pairs"], _ = timed(join._tile_pairs)
    boxes = (join.A.lo, join.A.hi), (join.B.lo, join.B.hi)
    default = brute_gpu.GROUP
    for g in (4, 8, 16, 32):  # the two-level test's group size
        brute_gpu.GROUP = g
        rows[f"    tile pairs through groups of {g}"], _ = timed(
            lambda: brute_gpu.near_tile_pairs(*boxes, join.eps2, join.selfjoin))
    brute_gpu.GROUP = default
    groups = [brute_gpu._group_boxes(lo, hi, default) for lo, hi in boxes]
    rows[f"    group pairs alone ({default})"], (sp, _) = timed(
        lambda: brute_gpu._near_pairs(*groups[0], *groups[1], join.eps2, join.selfjoin))
    print(f"kept group pairs ({default}): {int(sp.shape[0]):,} of {groups[0][0].shape[0] ** 2 // 2:,}")
    npairs = int(join.pairs_p.shape[0])
    xa, rowbytes = join.A.tc[:2]
    tx, ty = tc_quant.thresholds(  # reach 0: (almost) nothing listed, the products and the test alone
        join.A.tc[2], tc_quant.row_reach(join.A.tc[3], 0.0, cp), join.A.tc[2], tc_quant.row_reach(join.A.tc[3], 0.0, cp),
        join.filter, join.A.ntiles * 128, join.A.ntiles * 128, cp)
    forms = [m for m in args.mma.split(",") if m] or [brute_gpu.tc_mma()]
    macs = 2.0 * npairs * 128 * 128 * (rowbytes // (1 if join.filter == "int8" else 2))
    tops = {}
    orders = {"": (join.pairs_p, join.pairs_q)}
    for spec in (o for o in args.orders.split(",") if o):
        h, w = (int(v) for v in spec.split("x"))
        P, Q = join.pairs_p, join.pairs_q
        cols = -(-join.B.ntiles // w)  # blocks a row; a key below (tiles + h) x (tiles + w)
        order = cp.argsort(((P // h) * cols + Q // w) * (h * w) + (P % h) * w + Q % w)
        orders[f" {spec}"] = (P[order], Q[order])
    for mma, (spec, (P, Q)) in ((m, o) for m in forms for o in orders.items()):
        launch = brute_gpu.tc_filter_launch(join.filter, join.A.tc, join.A.tc, P, Q, (tx, ty), True, mma)
        listed = cp.zeros(1, cp.uint64)
        cand = cp.empty((1 << 20, 2), cp.int32)
        for _ in range(2):  # the first loads the kernel
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            step = 1 << 22
            for lo in range(0, npairs, step):
                launch(lo, min(npairs, lo + step), listed, cand.shape[0], cand, None)
            stop.record()
            stop.synchronize()
        kernel_s = cp.cuda.get_elapsed_time(start, stop) / 1e3
        rows[f"filter kernel alone, {mma}{spec} (events)"] = kernel_s
        tops[mma + spec] = macs / kernel_s / 1e12
    brute_gpu.TC_MMA = forms[0]
    # the count's parts on the device, one launch each over every tile pair: the filter with its real lists, then
    # the float64 decisions of what it listed
    launch = brute_gpu.tc_filter_launch(join.filter, join.A.tc, join.B.tc, join.pairs_p, join.pairs_q,
                                        join.thresholds, join.selfjoin)
    listed = cp.zeros(1, cp.uint64)
    room = 1 << 26
    cand = cp.empty((room, 2), cp.int32)
    rows["filter kernel with its lists, one launch (events)"], _ = timed(lambda: launch(0, npairs, listed, room, cand, None))
    listed.fill(0)
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    launch(0, npairs, listed, room, cand, None)
    stop.record()
    stop.synchronize()
    rows["  the same (events)"] = cp.cuda.get_elapsed_time(start, stop) / 1e3
    ncand = int(listed.get()[0])
    print(f"candidates listed: {ncand:,} ({ncand / max(1, npairs):.2f} a tile pair)")
    if ncand <= room:
        decide = brute_gpu.kernel("brute_tc.cu", f"brute_tc_exact_{'f32' if join.A.points.dtype == np.float32 else 'f64'}",
                                  specific=True)
        counter = cp.zeros(1, cp.uint64)
        nothing = cp.empty(1, cp.int64)

        def decisions():
            decide((int(min(-(-ncand // brute_gpu.BLOCK), 1 << 16)),), (brute_gpu.BLOCK,), (
                cand, cand, np.int64(ncand), join.A.points, join.B.points, join.A.perm, join.B.perm, np.int32(join.d),
                np.float64(join.eps2), np.int32(join.selfjoin), counter, counter, np.int32(0), np.int64(0), nothing,
                nothing, cp.empty(1, cp.float32)))
        decisions()
        rows["float64 decisions of them, one launch"], _ = timed(decisions)
    del cand
    for batch in (1 << 20, 1 << 22):
        default_batch, join.batch = join.batch, batch
        rows[f"count (driver, prepared join), ranges of {batch:,}"], _ = timed(join.count)
        join.batch = default_batch
    rows["count (driver, prepared join)"], count = timed(join.count)
    rows["count from numpy (new join)"], _ = timed(lambda: brute_gpu.GpuBruteJoin(x, None, args.eps, filter=args.filter).count())
    if args.shares > 1:
        rows[f"  one of {args.shares} shares: setup"], share = timed(
            lambda: brute_gpu.GpuBruteJoin(x, None, args.eps, filter=args.filter, share=(0, args.shares)))
        rows[f"  one of {args.shares} shares: count"], _ = timed(share.count)
        del share
    print(f"{args.n:,} x {args.d} {args.kind}, eps {args.eps}, filter {join.filter}: {count:,} pairs, {npairs:,} tile pairs "
          f"({join.kept_fraction:.4f} of all kept)")
    for k, v in rows.items():
        print(f"{k:48s} {v:8.3f} s")
    for mma, v in tops.items():
        print(f"filter kernel alone, {mma}: {v:.0f} TOPS")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
