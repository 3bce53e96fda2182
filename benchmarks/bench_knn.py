#!/usr/bin/env python
"""kNN-join benchmark: daskjoin against cKDTree and torch brute force, on the same data, in one process.

Workloads (``--workloads``, comma-separated):

- ``3d``: ``--n`` uniform float32 points in the unit cube, 3-d, k = 16 (self-join);
- ``64d``: ``--n64`` clustered 64-d points (``generate("clusters")``), k = 16;
- ``bigk``: 200k × 3-d uniform, k = 1000, under a 2 GB memory budget;
- ``methods``: every method's kernel on uniform 3-d and 6-d and clustered 8-, 16- and 64-d data (``--methods-n``
  rows, k = 16): where ``method="auto"``'s choice comes from;
- ``gemm-crossover``: ``brute`` searching directly and through the GEMM filter, d = 4 .. 64
  (``--crossover-n`` clustered rows, k = 16): where ``kernels.knn_gemm.GEMM_MIN_D`` comes from;
- ``range``: the CPU grid's kernel with its range pass (``kernels/knn_range.py``) and without (rings alone), and
  cKDTree, on uniform 4-, 5- and 6-d, clustered 6-d and embedding 5-d rows (``--range-n`` rows, k = 16).

Per workload, each timed with ``time.perf_counter`` (best of ``--repeat``):

1. daskjoin kernel: the driver of ``method`` on ``backend`` built on the data and its ``rows`` for every
   row (lists searched and turned into output rows): numpy in, rows in host memory.
2. daskjoin end to end: ``dj.knn_join(x, k=k).compute()`` in this process (no cluster) - the
   notebook path, planning and the frame included.
3. ``scipy.spatial.cKDTree(x).query(x, k + 1, workers=-1)`` (tree build included, every core).
4. torch brute force on the GPU where there is one: ``cdist`` + ``topk`` in fp32, tiled; on the
   first ``--torch-rows`` queries when that is fewer than all (its time then scaled to all rows,
   marked "extrapolated"), after a warm-up call (runs before 2026-11-25's last included torch's
   start-up in the scaled time, 5-6 s at 64-d, so their torch figures are too high).  Rows whose neighbour set differs from daskjoin's are counted.

daskjoin's rows are checked against cKDTree's neighbour sets (a row may differ only where
distances tie at the k-th; those rows are counted and checked against the exact rule).

Usage::

    .venv/bin/python benchmarks/bench_knn.py --workloads 3d --n 1000000                  # this VM
    python3 benchmarks/bench_knn.py --workloads 3d,64d,bigk --n 2000000 --backend gpu    # a GPU machine
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def _best(fn, repeat):
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), [round(t, 4) for t in times], out


def kernel_rows(x, k, method, backend, budget=None):
    """The driver alone: built on ``x``, every row searched, the rows made (``rows``), numpy in and out."""
    from daskjoin.kernels.registry import make

    ids = np.arange(len(x), dtype=np.int64)
    return make("knn", method, backend, x, k, 0).rows(x, ids, True)


def exact_kth_sets(x, rows, k, i_rows):
    """For rows ``i_rows``: daskjoin's neighbour set equals the exact (float64, ties by j) one."""
    bad = 0
    x64 = x.astype(np.float64)
    for i in i_rows:
        s = np.zeros(len(x))
        for t in range(x.shape[1]):
            u = x64[i, t] - x64[:, t]
            s += u * u
        s[i] = np.inf
        want = np.lexsort((np.arange(len(x)), s))[:k]
        got = rows[1][i * k:(i + 1) * k]
        bad += set(want.tolist()) != set(got.tolist())
    return bad


def ckdtree(x, k):
    from scipy.spatial import cKDTree

    tree = cKDTree(x)
    return tree.query(x, k + 1, workers=-1)


def torch_brute(x, k, rows):
    import torch

    dev = torch.device("cuda")
    data = torch.as_tensor(x, dtype=torch.float32, device=dev)
    out = []
    tile = max(1, int(2e9 // (4 * len(x))))  # a tile of query rows: ~2 GB of distances
    torch.cuda.synchronize()
    for at in range(0, rows, tile):
        q = data[at:min(rows, at + tile)]
        d = torch.cdist(q, data)
        d[torch.arange(len(q), device=dev), torch.arange(at, at + len(q), device=dev)] = float("inf")
        out.append(torch.topk(d, k, largest=False).indices.cpu())
    torch.cuda.synchronize()
    return torch.cat(out).numpy()


def gemm_crossover(args):
    """Brute force direct against the GEMM filter (kernels/knn_gemm.py) by dimensionality: the data for GEMM_MIN_D.

    Clustered rows (the 64d workload's recipe at each d), k = 16, self-join, the driver's ``search`` alone.
    """
    from daskjoin.io.synth import generate
    from daskjoin.kernels import knn, knn_gemm

    rows = []
    for d in (2, 3, 4, 6, 8, 16, 64):
        x = generate("clusters", args.crossover_n, d, seed=0)
        ids = np.arange(len(x), dtype=np.int64)
        times = {}
        for name, threshold in (("direct", 10 ** 9), ("gemm", 1)):
            knn_gemm.GEMM_MIN_D = threshold
            driver = _brute_driver(x, args.backend)
            driver.search(x[:500], ids[:500], *knn.empty_lists(500, 16), True)  # compile / warm
            t, _, _ = _best(lambda: driver.search(x, ids, *knn.empty_lists(len(x), 16), True), args.repeat)
            times[name] = t
        rows.append({"d": d, "n": len(x), "direct_s": times["direct"], "gemm_s": times["gemm"],
                     "gemm_speedup": times["direct"] / times["gemm"]})
        print(f"d={d:<3} direct {times['direct']:7.3f} s  gemm {times['gemm']:7.3f} s  "
              f"x{times['direct'] / times['gemm']:.2f}", flush=True)
    return {"workload": "gemm-crossover", "backend": args.backend, "rows": rows}


def methods(args):
    """Every method's kernel (``kernel_rows``) on the same data, k = 16: the crossovers behind ``method="auto"``.

    Uniform 3-d and 6-d, clustered 8-d, 16-d and 64-d, ``--methods-n`` rows each (grid only up to 6-d: it
    indexes at most 3 dimensions).
    """
    from daskjoin.io.synth import generate

    rows = []
    for kind, d in (("uniform", 3), ("uniform", 6), ("clusters", 8), ("clusters", 16), ("clusters", 64)):
        x = generate(kind, args.methods_n, d, seed=0)
        times = {}
        for method in ("grid", "brute", "szl"):
            if method == "grid" and d > 6:
                continue
            kernel_rows(x[:2000], 16, method, args.backend)  # compile / warm
            t, _, _ = _best(lambda: kernel_rows(x, 16, method, args.backend), args.repeat)
            times[method] = t
        best = min(times, key=times.get)
        rows.append({"data": kind, "d": d, "n": len(x), "seconds": times, "fastest": best})
        print(f"{kind:<8} d={d:<3} " + "  ".join(f"{m} {t:7.3f} s" for m, t in times.items()) + f"  -> {best}",
              flush=True)
    return {"workload": "methods", "backend": args.backend, "rows": rows}


def range_pass(args):
    """The CPU grid with its range pass and with the rings alone (the same rows: checked), and cKDTree."""
    from daskjoin.io.synth import generate
    from daskjoin.kernels import knn_range
    from daskjoin.kernels.registry import make

    rows_out = []
    default = knn_range.MIN_D
    for kind, d in (("uniform", 4), ("uniform", 5), ("uniform", 6), ("clusters", 6), ("embeddings", 5)):
        x = generate(kind, args.range_n, d, seed=0)
        times, outs = {}, {}
        for name, min_d in (("range pass", default), ("rings alone", 10 ** 9)):
            knn_range.MIN_D = min_d
            kernel_rows(x[:6000], 16, "grid", "cpu")  # compile / warm (6,000 rows: the range pass runs)
            times[name], _, outs[name] = _best(lambda: kernel_rows(x, 16, "grid", "cpu"), args.repeat)
        knn_range.MIN_D = default
        same = all(np.array_equal(a, b) for a, b in zip(outs["range pass"], outs["rings alone"]))
        times["cKDTree.query(workers=-1)"], _, _ = _best(lambda: ckdtree(x, 16), 1)
        ids = np.arange(len(x), dtype=np.int64)
        ran = knn_range.sampled_bound(make("knn", "grid", "cpu", x, 16, 0), x, ids, True) is not None
        row = {"data": kind, "d": d, "n": len(x), "seconds": times, "same_rows": same, "range_pass_ran": ran,
               "speedup": times["rings alone"] / times["range pass"],
               "vs_ckdtree": times["cKDTree.query(workers=-1)"] / times["range pass"]}
        rows_out.append(row)
        print(f"{kind:<10} d={d}  " + "  ".join(f"{m} {t:7.3f} s" for m, t in times.items())
              + f"  x{row['speedup']:.2f} over the rings, x{row['vs_ckdtree']:.2f} over cKDTree, same rows: {same}"
              + ("" if ran else " (the pass declined: too many rows within the sampled radius)"),
              flush=True)
        if not same:
            print("!!!!!!!! MISMATCH: the range pass and the rings gave different rows", flush=True)
    return {"workload": "range", "backend": "cpu", "rows": rows_out}


def _brute_driver(x, backend):
    from daskjoin.kernels.registry import make

    return make("knn", "brute", backend, x, 16, 0)


def run(name, x, k, args, budget=None):
    import daskjoin as dj

    result = {"workload": name, "n": len(x), "d": x.shape[1], "k": k, "methods": []}
    method = "grid" if x.shape[1] <= 6 else "brute"
    backend = args.backend
    print(f"--- {name}: {len(x):,} x {x.shape[1]}, k={k}, {method} on {backend}", flush=True)
    kernel_rows(x[:2000], min(k, 1999), method, backend)  # compile / warm
    t, times, rows = _best(lambda: kernel_rows(x, k, method, backend), args.repeat)
    result["methods"].append({"method": f"daskjoin kernel ({method}, {backend})", "seconds": t, "times": times})
    kernel_t = t
    t, times, frame = _best(lambda: dj.knn_join(x, k=k, backend=backend, memory_budget=budget).compute(), args.repeat)
    result["methods"].append({"method": "daskjoin end to end (knn_join(x).compute(), in process)", "seconds": t,
                              "times": times, "vs_kernel": t / kernel_t})
    assert len(frame) == len(x) * k
    if len(x) <= args.ckdtree_max and x.shape[1] <= 16:
        t, times, (dist, idx) = _best(lambda: ckdtree(x, k), 1)
        result["methods"].append({"method": "cKDTree.query(workers=-1)", "seconds": t, "times": times,
                                  "daskjoin_kernel_speedup": t / kernel_t})
        ours = rows[1].reshape(len(x), k)
        theirs = idx[:, 1:]
        differ = np.flatnonzero((np.sort(ours, axis=1) != np.sort(theirs, axis=1)).any(axis=1))
        # cKDTree may keep the row itself out of a tie or order ties otherwise: check those rows exactly
        bad = exact_kth_sets(x, rows, k, differ[:200])
        result["ckdtree_rows_differing"] = int(len(differ))
        result["daskjoin_rows_wrong_of_checked"] = [int(bad), int(min(len(differ), 200))]
        if bad:
            print(f"!!!!!!!! MISMATCH: {bad} rows of daskjoin differ from the exact neighbour set", flush=True)
    else:  # no tree in high d: a sample of rows checked against the exact rule
        sample = np.random.default_rng(0).choice(len(x), min(len(x), 20), replace=False)
        bad = exact_kth_sets(x, rows, k, sample)
        result["daskjoin_rows_wrong_of_checked"] = [int(bad), len(sample)]
        if bad:
            print(f"!!!!!!!! MISMATCH: {bad} sampled rows of daskjoin differ from the exact neighbour set", flush=True)
    if args.backend == "gpu" and not args.skip_torch:
        rows_t = min(len(x), args.torch_rows)
        torch_brute(x, k, min(rows_t, 1000))  # warm: CUDA context, cuBLAS handle, kernels (not scaled up below)
        t, times, idx = _best(lambda: torch_brute(x, k, rows_t), 1)
        scaled = t * len(x) / rows_t
        ours = rows[1].reshape(len(x), k)[:rows_t]
        differ = int((np.sort(ours, axis=1) != np.sort(idx, axis=1)).any(axis=1).sum())
        result["methods"].append({"method": "torch cdist+topk fp32 (tiled)", "seconds": scaled, "times": times,
                                  "extrapolated_from_rows": rows_t if rows_t < len(x) else None,
                                  "daskjoin_kernel_speedup": scaled / kernel_t,
                                  "rows_differing_from_exact": differ, "rows_compared": rows_t})
    for m in result["methods"]:
        extra = {k2: v for k2, v in m.items() if k2 not in ("method", "seconds", "times")}
        print(f"{m['method']:<60} {m['seconds']:8.3f} s  {extra}", flush=True)
    return result


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default="3d")
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--n64", type=int, default=1_000_000)
    p.add_argument("--backend", default="cpu")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--ckdtree-max", type=int, default=5_000_000)
    p.add_argument("--torch-rows", type=int, default=1_000_000)
    p.add_argument("--skip-torch", action="store_true")
    p.add_argument("--crossover-n", type=int, default=20_000, help="rows of the gemm-crossover workload")
    p.add_argument("--methods-n", type=int, default=50_000, help="rows of the methods workload")
    p.add_argument("--range-n", type=int, default=300_000, help="rows of the range workload")
    p.add_argument("--out-json", default=None)
    args = p.parse_args(argv)
    from daskjoin.io.synth import generate

    results = []
    for name in args.workloads.split(","):
        if name == "3d":
            results.append(run(name, generate("uniform", args.n, 3, seed=0), 16, args))
        elif name == "64d":
            results.append(run(name, generate("clusters", args.n64, 64, seed=0), 16, args))
        elif name == "methods":
            results.append(methods(args))
        elif name == "gemm-crossover":
            results.append(gemm_crossover(args))
        elif name == "range":
            results.append(range_pass(args))
        elif name == "bigk":
            results.append(run(name, generate("uniform", 200_000, 3, seed=0), 1000, args, budget="2GB"))
        else:
            raise SystemExit(f"unknown workload {name!r}")
    machine = "vm" if args.backend == "cpu" else _gpu_name()
    out = args.out_json or os.path.join(HERE, "results", f"knn-{args.backend}-{machine}-{dt.date.today()}.json")
    with open(out, "w") as f:
        json.dump({"machine": platform.node(), "cpus": os.cpu_count(), "gpu": machine, "argv": sys.argv[1:],
                   "results": results}, f, indent=1)
    print(f"results -> {out}")


def _gpu_name():
    try:
        import cupy as cp

        return cp.cuda.runtime.getDeviceProperties(0)["name"].decode().replace(" ", "_")
    except Exception:  # noqa: BLE001
        return "gpu"


if __name__ == "__main__":
    main()
