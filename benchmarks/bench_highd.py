"""High-dimensional ε-joins on the GPU ([highd]): daskjoin's brute filters against torch and FaSTED.

Run on a GPU machine:

    python benchmarks/bench_highd.py [--workloads expo,uniform,emb960,emb512] [--filters fp32,int8,fp16]
                                     [--scale 1.0] [--fasted PATH/main] [--repeat 2]

Workloads (``--scale`` multiplies every n):
- ``expo``: 1M x 128 exponential (rate 40, FaSTED's generator's law), eps = 0.296 (~1,700 neighbours);
- ``uniform``: 1M x 128 uniform, eps for ~64 neighbours (no structure to prune: GEMM throughput);
- ``emb128`` 10M x 128, ``emb384`` 5M x 384, ``emb960`` 1M x 960, ``emb512`` 60k x 512:
  ``daskjoin synth embeddings`` data (SIFT10M-, Tiny5M-, GIST1M-, Cifar60K-like sizes), eps for ~64
  neighbours per point on average (from 2,000 sampled rows: ``eps_for_k``).

For each: daskjoin's exact count with every filter (best of ``--repeat``; all counts must agree), the
pairs streamed to the host in row-group batches with the default filter, the share of pairs the filter
passes to the float64 decision (2,000 rows against 200,000, with the kernel's integer test), the
multiply-add rate the tile products reached; torch's GEMM-form distances in fp32 and fp16 (count time
on the whole set where n <= 2M, pairs missed and spurious on 2,000 query rows against daskjoin's exact
answer); FaSTED's kernel (``--fasted``, exponential workload only: its ``-e`` mode draws the same law).
Results: benchmarks/results/highd-<device>-<date>.json; a table is printed last.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import time

import numpy as np

from daskjoin.io.synth import generate

from bench_gpu import timed as synced  # best of `repeat`, the device synchronised around each run

WORKLOADS = {  # name: (generator, n, d, eps or None for ~64 neighbours)
    "expo": ("expo", 1_000_000, 128, 0.296),
    "uniform": ("uniform", 1_000_000, 128, None),
    "emb128": ("embeddings", 10_000_000, 128, None),
    "emb384": ("embeddings", 5_000_000, 384, None),
    "emb960": ("embeddings", 1_000_000, 960, None),
    "emb512": ("embeddings", 60_000, 512, None),
}
#: dense tensor-core peaks of one H100/H200 SXM (NVIDIA's data sheet), multiply-adds counted as 2 ops
PEAK_TOPS = {"int8": 1979.0, "fp16": 989.0, "fp32": 67.0}
SAMPLE = 2000


#: nearest distances kept per sampled row when calibrating eps: rows in dense clusters have many more than k
#: neighbours within the eps that gives k on average, and are counted up to this many
KEEP_PER_ROW = 8


def eps_for_k(x, k=64, sample=SAMPLE, seed=0):
    """eps giving about k neighbours per point on average: the (k m)-th smallest of the m sampled rows'
    nearest distances pooled (each row's ``KEEP_PER_ROW * k`` nearest, itself dropped).

    Pooled over k nearest a row only, that quantile was the largest k-th neighbour distance of any sampled
    row: on clustered embeddings (10M x 128) about 2,800 neighbours a point instead of 64."""
    import cupy as cp

    rng = np.random.default_rng(seed)
    rows = cp.asarray(x[rng.choice(len(x), min(sample, len(x)), replace=False)], cp.float32)
    norms = (rows * rows).sum(1)
    keep = min(len(x), KEEP_PER_ROW * k + 1)
    kept = []
    for r0 in range(0, len(x), 1 << 18):
        blk = cp.asarray(x[r0:r0 + (1 << 18)], cp.float32)
        d2 = cp.maximum(norms[:, None] + (blk * blk).sum(1)[None, :] - 2 * rows @ blk.T, 0)
        kept.append(cp.sort(d2, axis=1)[:, :keep].copy())  # a copy: a view would hold every sorted block
    d2 = cp.sort(cp.concatenate(kept, axis=1), axis=1)[:, 1:keep]  # drop the row itself
    return float(cp.sqrt(cp.sort(d2.ravel())[len(rows) * k - 1]).get())


def candidate_share(x, eps, fmt, rows=SAMPLE, against=200_000):
    """Pairs passed to float64 by the ``fmt`` filter per true pair, on ``rows`` x ``against`` rows."""
    import cupy as cp

    from daskjoin.kernels import tc_quant

    a = cp.asarray(x[:rows], cp.float64)
    b = cp.asarray(x[:against], cp.float64)
    both = cp.concatenate([a, b])
    centre = (both.min(0) + both.max(0)) / 2
    L = tc_quant.levels(fmt, x.shape[1])
    S = tc_quant.scale(float(cp.abs(b - centre).max()), L)
    qa, na, ua = tc_quant.quantise(a - centre, S, L, cp)
    qb, nb, ub = tc_quant.quantise(b - centre, S, L, cp)
    G = qa @ qb.T  # integers: exact in float64
    r_a = tc_quant.row_reach(ua, tc_quant.reach0(eps, S, x.shape[1]), cp)
    r_b = tc_quant.row_reach(ub, 0.0, cp)
    X, Y = tc_quant.thresholds(na, r_a, nb, r_b, fmt, len(na), len(nb), cp)
    keep = int(((G - Y.astype(cp.float64)[None, :]) >= X.astype(cp.float64)[:, None]).sum())  # the kernel's test
    true = int((((a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T) <= eps * eps * (1 + 1e-6)).sum())
    return keep, true


def torch_pairs(x, eps, dtype, queries=None):
    """GEMM-form distances in torch (fp32 or fp16 inputs): the count over the whole self-join (i < j),
    or, with ``queries``, the set of (i, j) for the first ``queries`` rows against all rows."""
    import torch

    dev = torch.device("cuda")
    t = torch.as_tensor(x, device=dev).to(dtype)
    sq = (t.float() ** 2).sum(1)
    e2 = eps * eps
    total, found = 0, []
    stop = queries if queries else t.shape[0]
    tile = max(128, (1 << 31) // (4 * len(x)))  # 2 GiB of float32 distances per step
    for r0 in range(0, stop, tile):
        r1 = min(stop, r0 + tile)
        lo = 0 if queries else r0
        d2 = sq[r0:r1, None] + sq[None, lo:] - 2 * (t[r0:r1] @ t[lo:].T).float()
        hit = d2 <= e2
        if queries:
            i, j = torch.nonzero(hit, as_tuple=True)
            keep = (i + r0) != j
            found.append(((i[keep] + r0) * len(x) + j[keep]).cpu().numpy())
        else:
            rows = torch.arange(r0, r1, device=dev)[:, None]
            cols = torch.arange(lo, t.shape[0], device=dev)[None, :]
            total += int((hit & (cols > rows)).sum())
    torch.cuda.synchronize()
    return set(np.concatenate(found).tolist()) if queries else total


def products_only(kern, x, eps, repeat):
    """Seconds of a count whose filter passes (almost) nothing: the tile products and the filter's test
    alone, without the float64 decisions (a diagnostic; the count it gives is not the join's)."""
    from daskjoin.kernels import tc_quant

    original = tc_quant.reach0
    tc_quant.reach0 = lambda eps, S, d: 0.0
    try:
        return synced(lambda: kern.self_count(x, eps), repeat)[0]
    finally:
        tc_quant.reach0 = original


def exact_query_pairs(x, eps, queries):
    from daskjoin.kernels import get_kernel

    i, j, _ = get_kernel("brute", "gpu").cross_join(x[:queries], x, eps)
    keep = i != j
    return set((i[keep] * len(x) + j[keep]).tolist())


def run_fasted(binary, n, d, eps):
    binary = os.path.abspath(binary)
    try:
        proc = subprocess.run([binary, "-e", str(n), str(d), str(eps)], capture_output=True, text=True, timeout=900,
                              cwd=os.path.dirname(binary))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": repr(exc)}
    out = proc.stdout + proc.stderr

    def grab(pattern, cast=float):
        m = re.search(pattern, out)
        return cast(m.group(1)) if m else None

    return {"rc": proc.returncode, "kernel_s": grab(r"Total Kernel Elapsed time: ([\d.]+)"),
            "find_pairs_s": grab(r"FindPairs Kernel Elapsed time: ([\d.]+)"),
            "sort_s": grab(r"Pairs sort Elapsed time: ([\d.]+)"), "total_s": grab(r"Total Elapsed time: ([\d.]+)"),
            "pairs_found": grab(r"Pairs found: (\d+)", int), "tflops": grab(r"Estimated TFLOPS ([\d.]+)"),
            "tail": out[-1500:] if proc.returncode else ""}


def picked(x, eps):
    """The filter ``filter="auto"`` runs on ``x`` (its choice may sample the data on the device)."""
    from daskjoin.kernels.brute_gpu import GpuBruteJoin

    return GpuBruteJoin(x, None, eps, filter="auto").filter


def bench(name, args):
    import cupy as cp

    from daskjoin.kernels import get_kernel
    from daskjoin.kernels.brute_gpu import GpuBruteJoin

    kind, n, d, eps = WORKLOADS[name]
    n = max(1000, int(n * args.scale))
    t0 = time.perf_counter()
    x = generate(kind, n, d, seed=0)
    row = {"workload": name, "n": n, "d": d, "generate_s": time.perf_counter() - t0}
    eps = eps if eps is not None else eps_for_k(x)
    row["eps"] = eps
    counts = {}
    for fmt in args.filters:
        if fmt == "fp32" and n > args.fp32_max_n:
            continue
        kern = get_kernel("brute", "gpu", filter=fmt)
        s, c = synced(lambda: kern.self_count(x, eps), args.repeat)
        counts[fmt] = c
        row[f"count_{fmt}_s"] = s
        join = GpuBruteJoin(x, None, eps, filter=fmt)
        ntp = int(join.pairs_p.shape[0])
        depth = (join.A.tc[1] // (1 if fmt == "int8" else 2)) if fmt != "fp32" else d
        row[f"tile_pairs_{fmt}"] = ntp
        row[f"tops_{fmt}"] = 2.0 * ntp * join.tile * join.tile * depth / s / 1e12
        row[f"peak_share_{fmt}"] = row[f"tops_{fmt}"] / PEAK_TOPS[fmt]
        del join
        cp.get_default_memory_pool().free_all_blocks()
        print(f"  {fmt}: {s:.3f} s, {c:,} pairs, {row[f'tops_{fmt}']:.0f} TOPS", flush=True)
        if args.diagnose and fmt != "fp32":
            row[f"products_only_{fmt}_s"] = products_only(kern, x, eps, args.repeat)
            print(f"  {fmt} products and filter alone: {row[f'products_only_{fmt}_s']:.3f} s", flush=True)
    assert len(set(counts.values())) == 1, f"filters disagree: {counts}"
    row["pairs"] = next(iter(counts.values()))
    if args.skip_host:
        return row
    # every pair to the host with each of --host-filters ("auto": the filter a user gets, recorded as picked);
    # best of --repeat, as the counts: a single run measured a first call (1M x 960 on an H200: 6.26 s once,
    # 2.49-2.61 s in every later call, results/e2e-H200-2026-11-26-session14-ab.txt)
    for fmt in args.host_filters:
        kern = get_kernel("brute", "gpu", filter=fmt)
        s, got = synced(lambda: sum(len(b[0]) for b in kern.self_batches(x, eps, 1 << 22)), args.repeat)
        assert got == row["pairs"], (got, row["pairs"])
        key = "pairs_to_host" if fmt == args.host_filters[0] else f"pairs_to_host_{fmt}"
        row[f"{key}_s"] = s
        row[f"{key}_filter"] = picked(x, eps) if fmt == "auto" else fmt
        print(f"  every pair to the host ({fmt}, ran {row[f'{key}_filter']}): {s:.3f} s", flush=True)
    for fmt in ("int8", "fp16"):
        if fmt in args.filters:
            keep, true = candidate_share(x, eps, fmt)
            row[f"candidates_per_pair_{fmt}"] = keep / max(1, true)
    if not args.skip_torch:
        import torch

        exact = exact_query_pairs(x, eps, SAMPLE)
        for label, dtype in (("fp32", torch.float32), ("fp16", torch.float16)):
            if n <= args.torch_max_n:
                s, c = synced(lambda: torch_pairs(x, eps, dtype), 1)
                row[f"torch_{label}_s"], row[f"torch_{label}_pairs"] = s, c
            got = torch_pairs(x, eps, dtype, queries=SAMPLE)
            row[f"torch_{label}_missed_of_{SAMPLE}_rows"] = len(exact - got)
            row[f"torch_{label}_spurious_of_{SAMPLE}_rows"] = len(got - exact)
            torch.cuda.empty_cache()
    if args.fasted and kind == "expo":
        row["fasted"] = run_fasted(args.fasted, n, d, eps)
    del x
    cp.get_default_memory_pool().free_all_blocks()
    return row


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workloads", default="expo,uniform,emb960,emb512")
    parser.add_argument("--filters", default="fp32,int8,fp16")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--fp32-max-n", type=int, default=1_000_000, help="skip the fp32 filter above this n")
    parser.add_argument("--torch-max-n", type=int, default=2_000_000, help="torch counts the whole set up to this n")
    parser.add_argument("--skip-torch", action="store_true")
    parser.add_argument("--skip-host", action="store_true", help="no pairs-to-host run (counts only)")
    parser.add_argument("--host-filters", default="auto",
                        help="filters of the pairs-to-host runs; the first is the table's 'to host' column")
    parser.add_argument("--diagnose", action="store_true", help="also time the tensor-core products alone")
    parser.add_argument("--fasted", default=None, help="FaSTED's main binary (built for sm_90)")
    parser.add_argument("--out-json", default=None)
    args = parser.parse_args()
    args.filters = args.filters.split(",")
    args.host_filters = args.host_filters.split(",")
    import cupy as cp

    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    rows = []
    for name in args.workloads.split(","):
        print(f"--- {name}", flush=True)
        rows.append(bench(name, args))
        print(json.dumps(rows[-1], indent=1), flush=True)
        out = args.out_json or os.path.join(os.path.dirname(__file__), "results",
                                            f"highd-{device.replace(' ', '_')}-{dt.date.today()}.json")
        with open(out, "w") as f:
            json.dump({"device": device, "date": str(dt.date.today()), "args": vars(args), "rows": rows}, f, indent=1)
    print(f"\n{'workload':9} {'n':>10} {'d':>4} {'pairs':>13} " + " ".join(f"{f + ' s':>9}" for f in args.filters)
          + f" {'to host':>8} {'TOPS':>6} {'torch32':>8} {'torch16':>8} {'FaSTED':>8}")
    for r in rows:
        tc = [f for f in args.filters if f != "fp32" and f"tops_{f}" in r]
        print(f"{r['workload']:9} {r['n']:>10,} {r['d']:>4} {r['pairs']:>13,} "
              + " ".join(f"{r.get(f'count_{f}_s', float('nan')):>9.3f}" for f in args.filters)
              + f" {r.get('pairs_to_host_s', float('nan')):>8.3f} {max([r[f'tops_{f}'] for f in tc] or [0]):>6.0f}"
              + f" {r.get('torch_fp32_s', float('nan')):>8.3f} {r.get('torch_fp16_s', float('nan')):>8.3f}"
              + f" {(r.get('fasted') or {}).get('kernel_s') or float('nan'):>8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
