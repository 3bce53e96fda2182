"""Phase timings of the GPU kernels (CUDA events), to see where the time goes.

    python benchmarks/profile_gpu.py
"""
from __future__ import annotations

import time

import numpy as np

from daskjoin.io.synth import design_clusters_64d, eps_for_neighbours, generate


def index_steps(x, eps):
    """The steps of grid_gpu._DeviceIndex, each timed."""
    import cupy as cp

    from daskjoin.kernels.grid_index import choose_grid

    marks = []

    def mark(label):
        cp.cuda.Device().synchronize()
        marks.append((label, time.perf_counter()))

    mark("start")
    lo, hi = x.min(axis=0).astype(np.float64), x.max(axis=0).astype(np.float64)
    spec = choose_grid(lo, hi, eps)
    mark("host bounds+spec")
    xd = cp.ascontiguousarray(cp.asarray(x, dtype=cp.float64))
    mark("H2D+cast")
    dims = cp.asarray(spec.dims)
    cells = cp.floor((xd[:, dims] - cp.asarray(spec.origin)) / cp.asarray(spec.widths)).astype(cp.int64)
    cells = cp.clip(cells, 0, cp.asarray(spec.ncells) - 1)
    ids = (cells * cp.asarray(spec.strides)).sum(axis=1)
    mark("cell ids")
    by_last = cp.argsort(xd[:, int(spec.dims[-1])], kind="stable")
    mark("argsort last")
    perm = by_last[cp.argsort(ids[by_last], kind="stable")]
    mark("argsort ids")
    pts = cp.ascontiguousarray(xd[perm])
    cell = cp.ascontiguousarray(ids[perm])
    mark("gather")
    flag = cp.flatnonzero(cell[1:] != cell[:-1]) + 1
    mark("boundaries")
    dense = cp.searchsorted(cell, cp.arange(spec.total_cells + 2, dtype=cp.int64), side="left")
    mark("dense table")
    del pts, dense, flag
    return " ".join(f"{b[0]} {b[1] - a[1]:.4f}" for a, b in zip(marks[:-1], marks[1:]))


def main() -> int:
    import cupy as cp
    import cupyx

    from daskjoin.kernels import grid_gpu
    from daskjoin.kernels.brute_gpu import GpuBruteJoin
    from daskjoin.kernels.grid_gpu import GpuGridJoin

    def clock():
        cp.cuda.Device().synchronize()
        return time.perf_counter()

    for d in (2, 6):
        n = 2_000_000
        x = generate("uniform", n, d, seed=0)
        eps = eps_for_neighbours(n, d, 32)
        for _ in range(2):
            print(f"index {d}-d:", index_steps(x, eps))
        for _ in range(3):
            t0 = clock()
            g = GpuGridJoin(x, None, eps)
            t1 = clock()
            g.counts()
            t2 = clock()
            oi, oj, od = g.pairs(True, device=True)
            t3 = clock()
            hi = oi.get()
            hj = oj.get()
            hd = od.get()
            t4 = clock()
            pi = cupyx.empty_pinned(oi.shape, np.int64)
            pj = cupyx.empty_pinned(oj.shape, np.int64)
            pd = cupyx.empty_pinned(od.shape, np.float32)
            t5 = clock()
            oi.get(out=pi)
            oj.get(out=pj)
            od.get(out=pd)
            t6 = clock()
            n_pairs = len(hi)
            del hi, hj, hd, pi, pj, pd, oi, oj, od
            host_pairs = {}
            saved = grid_gpu.OVERLAP_SLICE_PAIRS, grid_gpu.MAX_SLICES
            for slices in (1, 4, 8, 16):
                grid_gpu.OVERLAP_SLICE_PAIRS = saved[0] if slices > 1 else 1 << 62
                grid_gpu.MAX_SLICES = slices
                s0 = clock()
                got = g.pairs(True)
                host_pairs[f"{slices} slice(s)"] = clock() - s0
                del got
            grid_gpu.OVERLAP_SLICE_PAIRS, grid_gpu.MAX_SLICES = saved
            print(f"grid {d}-d: index {t1-t0:.3f} count {t2-t1:.3f} fill {t3-t2:.3f} "
                  f"D2H pageable {t4-t3:.3f} pinned alloc {t5-t4:.3f} D2H pinned {t6-t5:.3f} pairs {n_pairs}; "
                  + "; ".join(f"fill+D2H {k} {v:.4f}" for k, v in host_pairs.items()))
            del g
    x = design_clusters_64d()
    for _ in range(2):
        t0 = clock()
        b = GpuBruteJoin(x, None, 0.470697)
        t1 = clock()
        gemm = filt = 0.0
        total = 0
        ranges = b._ranges()
        for lo, hi in ranges:
            s0 = clock()
            G = cp.matmul(b.A.x32[b.pairs_p[lo:hi]], b.B.x32[b.pairs_q[lo:hi]].transpose(0, 2, 1))
            s1 = clock()
            del G
            gemm += s1 - s0
            s2 = clock()
            found, got = b._batch(lo, hi, False)
            s3 = clock()
            filt += s3 - s2
            total += found
        print(f"brute 64-d: prepare {t1-t0:.3f}; {len(ranges)} batches, {b.pairs_p.shape[0]} tile pairs "
              f"({b.kept_fraction:.2%} kept); GEMM alone {gemm:.3f}; batch (GEMM+filter+sort) {filt:.3f}; pairs {total}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
