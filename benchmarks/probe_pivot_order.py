"""Would a cheap sampled check tell where GPU brute force's pivot order prunes nothing?  (one GPU)

    python benchmarks/probe_pivot_order.py

For uniform and exponential 1M x 128 rows, embeddings (1M x 128, 500k x 960) and clusters (1M x 64), eps for
~64 neighbours (expo: 0.296): the time of ``pivot_order``, the share of tile pairs (128-row tiles) its boxes keep,
the share kept in the rows' own order, and the share predicted from a thinned sample ordered the same way
(every 16th row in tiles of 8, every 32nd in tiles of 4, every 8th in tiles of 16) with its time.  Session 28,
one H100 (``results/probe-pivot-order-H100-2026-12-06-session28.txt``): the order takes 0.048 s at 1M x 128 and
keeps every tile pair of the uniform and exponential rows, and the prediction says so, but costs 0.032 s
itself: skipping the order where nothing prunes would save ~0.016 s of the 0.31 s count, so it was not built.
"""
import sys, time
sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp
from profile_tc import _generate
from bench_highd import eps_for_k
from daskjoin.kernels.brute_gpu import pivot_order, near_tile_pairs
from daskjoin.kernels.exact import eps_squared

def sync(): cp.cuda.Device().synchronize()

def boxes(xd, perm, tile):
    n, d = xd.shape
    nt = n // tile
    t = xd[perm[:nt * tile]].reshape(nt, tile, d)
    return t.min(axis=1), t.max(axis=1)

def kept(lo, hi, eps2):
    p, q = near_tile_pairs((lo, hi), (lo, hi), eps2, True)
    nt = lo.shape[0]
    return p.shape[0] / (nt * (nt + 1) / 2)

for kind, n, d, eps in (("uniform", 1_000_000, 128, None), ("expo", 1_000_000, 128, 0.296),
                        ("embeddings", 1_000_000, 128, None), ("embeddings", 500_000, 960, None),
                        ("clusters", 1_000_000, 64, None)):
    x = _generate(kind, n, d)
    if eps is None:
        eps = eps_for_k(x, 64)
    eps2 = eps_squared(eps)
    xd = cp.asarray(x, cp.float64)
    pivot_order(xd[:50000], 128); sync()
    t = time.perf_counter(); perm = pivot_order(xd, 128); sync(); t_order = time.perf_counter() - t
    t = time.perf_counter(); full = kept(*boxes(xd, perm, 128), eps2); sync(); t_kept = time.perf_counter() - t
    ident = kept(*boxes(xd, cp.arange(n), 128), eps2)
    out = []
    for step, tile in ((16, 8), (32, 4), (8, 16)):
        sync(); t = time.perf_counter()
        sub = cp.ascontiguousarray(xd[::step])
        ps = pivot_order(sub, tile)
        pred = kept(*boxes(sub, ps, tile), eps2)
        sync(); out.append(f"1/{step} tiles of {tile}: {pred:.3f} ({time.perf_counter() - t:.3f} s)")
    print(f"{kind} {n}x{d} eps {eps:.4g}: pivot order {t_order:.3f} s, kept {full:.3f} ({t_kept:.3f} s); "
          f"identity order kept {ident:.3f}; predicted " + "; ".join(out), flush=True)
    del xd
    cp.get_default_memory_pool().free_all_blocks()
