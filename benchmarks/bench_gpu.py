"""GPU benchmark: daskjoin's GPU kernels and end-to-end runs against peers, DESIGN.md §7 workloads.

Run on a GPU machine (CuPy, and for the end-to-end rows dask-cuda):

    python benchmarks/bench_gpu.py [--workloads 2d,6d,64d] [--variants] [--skip-e2e] [--cpu-reference]

For each workload: the kernel alone (points on the host in, pairs on the host out),
the GPU grid variants (threads per point, work queue, sort by workload) when
--variants is given, end to end (Zarr -> pairs persisted on a one-GPU
LocalCUDACluster), scipy cKDTree (2-d only, 1 core) and torch tiled cdist (64-d)
in the same process, pair counts, and the GPU memory high-water mark.  Results go
to benchmarks/results/gpu-<device>-<date>.json and a table is printed last.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import tempfile
import time

import numpy as np

from daskjoin.io.synth import design_clusters_64d, eps_for_neighbours, generate

PUBLISHED = {  # DESIGN.md §7 (H200, exact pairs on their data and the peers' times)
    "2d": {"pairs": 31_933_127, "gds_join_s": 0.63, "ckdtree_s": 2.38},
    "6d": {"pairs": 25_790_580, "gds_join_s": 1.14, "ckdtree_s": 46.4},
    "64d": {"pairs": 2_897_403, "gds_join_s": 0.60, "torch_fp32_s": 0.49, "torch_fp64_s": 0.76},
}
TARGETS = {"2d": 0.30, "6d": 0.55}


def workload(name: str, n_uniform: int):
    if name == "64d":
        return design_clusters_64d(), 0.470697, "brute"
    d = int(name[:-1])
    return generate("uniform", n_uniform, d, seed=0), eps_for_neighbours(n_uniform, d, 32), "grid"


def timed(func, repeat=3):
    import cupy as cp

    best, out = np.inf, None
    for _ in range(repeat):
        cp.cuda.Device().synchronize()
        start = time.perf_counter()
        out = func()
        cp.cuda.Device().synchronize()
        best = min(best, time.perf_counter() - start)
    return best, out


def time_variants(method, option_sets, x, eps, pairs):
    """Seconds of each GPU option set (best of 2); every variant must find the same pairs."""
    from daskjoin.kernels import get_kernel

    seconds = {}
    for opts in option_sets:
        kern = get_kernel(method, "gpu", **opts)
        s, out = timed(lambda: kern.self_join(x, eps), 2)
        assert len(out[0]) == pairs, (opts, len(out[0]), pairs)
        seconds[",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in opts.items())] = s
        del out
    return seconds


def task_breakdown(path, eps, method):
    """On a worker: seconds to read the Zarr input, join on the GPU, and build the pandas frame."""
    import zarr

    from daskjoin.execution.task import to_frame
    from daskjoin.kernels import get_kernel

    t0 = time.perf_counter()
    x = zarr.open_array(path, mode="r")[:]
    t1 = time.perf_counter()
    got = get_kernel(method, "gpu").self_join(x, eps)
    t2 = time.perf_counter()
    frame = to_frame(*got)
    t3 = time.perf_counter()
    return {"read_s": t1 - t0, "join_s": t2 - t1, "frame_s": t3 - t2, "rows": len(frame)}


def torch_cdist_count(x, eps, dtype, tile=8192):
    import torch

    dev = torch.device("cuda")
    t = torch.as_tensor(x, device=dev, dtype=dtype)
    total = 0
    for r0 in range(0, t.shape[0], tile):
        block = torch.cdist(t[r0:r0 + tile], t[r0:])
        rows = torch.arange(block.shape[0], device=dev)[:, None]
        cols = torch.arange(block.shape[1], device=dev)[None, :]
        total += int(((block <= eps) & (cols > rows)).sum())
    torch.cuda.synchronize()
    return total


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workloads", default="2d,6d,64d")
    parser.add_argument("--n", type=int, default=2_000_000)
    parser.add_argument("--variants", action="store_true", help="time the GPU grid options")
    parser.add_argument("--skip-e2e", action="store_true")
    parser.add_argument("--cpu-reference", action="store_true", help="exact count with the CPU kernel too")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out-json", default=None)
    args = parser.parse_args()

    import cupy as cp

    from daskjoin.kernels import get_kernel

    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    rows, results = [], {"device": device, "date": dt.date.today().isoformat(), "host": platform.node(),
                         "cpus": os.cpu_count(), "cupy": cp.__version__, "workloads": {}}
    warm = np.random.default_rng(0).random((5000, 3)).astype(np.float32)
    for method in ("grid", "brute"):
        get_kernel(method, "gpu").self_join(warm, 0.05)

    client = cluster = None
    if not args.skip_e2e:
        from dask_cuda import LocalCUDACluster
        from distributed import Client

        cluster = LocalCUDACluster(n_workers=1)
        client = Client(cluster)
    tmp = tempfile.mkdtemp(prefix="daskjoin-bench-")
    for name in args.workloads.split(","):
        x, eps, method = workload(name, args.n)
        info = {"n": int(x.shape[0]), "d": int(x.shape[1]), "eps": eps, "method": method}
        cp.get_default_memory_pool().free_all_blocks()
        kern = get_kernel(method, "gpu")
        seconds, got = timed(lambda: kern.self_join(x, eps), args.repeat)
        pairs = len(got[0])
        peak = cp.get_default_memory_pool().total_bytes()
        info.update(kernel_s=seconds, pairs=pairs, gpu_pool_bytes=int(peak))
        rows.append((name, f"daskjoin {method} kernel (host->host)", seconds, pairs))
        del got
        if method == "grid":
            s_dev, got = timed(lambda: kern._join(x, None, eps).pairs(True, device=True), args.repeat)
            info["kernel_device_out_s"] = s_dev
            rows.append((name, "  of which on the GPU (host in, pairs left on the device)", s_dev, len(got[0])))
            del got
        if args.variants:
            if method == "grid":
                option_sets = [{"threads_per_point": tpp, "work_queue": queue, "sort_by_workload": wsort}
                               for tpp in (1, 2, 4, 8) for queue in (False, True) for wsort in (False, True)]
            else:
                option_sets = [{"tile": tile} for tile in (128, 256, 512, 1024)]
            info["variants"] = time_variants(method, option_sets, x, eps, pairs)
            best = min(info["variants"], key=info["variants"].get)
            rows.append((name, f"  best variant {best}", info["variants"][best], pairs))
        if args.cpu_reference:
            start = time.perf_counter()
            ref = get_kernel(method if method == "grid" else "grid", "cpu").self_count(x, eps)
            info.update(cpu_count=ref, cpu_s=time.perf_counter() - start)
            rows.append((name, "daskjoin grid CPU (count only, all cores)", info["cpu_s"], ref))
            if ref != pairs:
                print(f"MISMATCH {name}: GPU {pairs} CPU {ref}")
        if client is not None:
            import dask
            from distributed import wait

            import daskjoin as dj

            path = os.path.join(tmp, f"{name}.zarr")
            from daskjoin.io.zarr_out import ZarrPointsWriter

            with ZarrPointsWriter(path, d=x.shape[1], dtype=x.dtype) as writer:  # default chunking, as `daskjoin import`
                writer.append(x)
            with dask.config.set({"daskjoin.memory-budget": "16GiB"}):
                for label in ("first", "warm"):
                    start = time.perf_counter()
                    plan = dj.plan_join(path, eps=eps, backend="gpu", client=client)
                    info[f"e2e_{label}_plan_s"] = time.perf_counter() - start
                    rows.append((name, f"  plan ({label}; {plan.ntasks} task(s), {plan.partitioning})",
                                 info[f"e2e_{label}_plan_s"], 0))
                    start = time.perf_counter()
                    frame = dj.similarity_join(path, eps=eps, backend="gpu", client=client).persist()
                    wait(frame)
                    s = time.perf_counter() - start
                    n_e2e = int(frame.map_partitions(len).compute().sum())
                    info[f"e2e_{label}_s"] = s
                    rows.append((name, f"daskjoin end to end ({label}; Zarr -> persisted)", s, n_e2e))
                    del frame
                parts = client.submit(task_breakdown, path, eps, method, pure=False).result()
                info["task_breakdown"] = parts
                for key in ("read_s", "join_s", "frame_s"):
                    rows.append((name, f"  worker: {key[:-2]}", parts[key], parts["rows"]))
        if name == "2d":
            from scipy.spatial import cKDTree

            start = time.perf_counter()
            ref = cKDTree(x).query_pairs(eps, output_type="ndarray")
            info["ckdtree_s"] = time.perf_counter() - start
            rows.append((name, "scipy cKDTree.query_pairs (1 core)", info["ckdtree_s"], len(ref)))
            del ref
        if name == "64d":
            try:
                for dtype_name in ("float32", "float64"):
                    import torch

                    dt_ = getattr(torch, dtype_name)
                    torch_cdist_count(x[:20000], eps, dt_)
                    start = time.perf_counter()
                    count = torch_cdist_count(x, eps, dt_)
                    info[f"torch_{dtype_name}_s"] = time.perf_counter() - start
                    rows.append((name, f"torch tiled cdist {dtype_name}", info[f"torch_{dtype_name}_s"], count))
            except ImportError:
                pass
        results["workloads"][name] = info

    if client is not None:
        client.close()
        cluster.close()
    out = args.out_json or os.path.join(
        os.path.dirname(__file__), "results", f"gpu-{device.replace(' ', '_')}-{results['date']}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"\nGPU benchmark on {device} ({results['date']}); published exact pairs: "
          + ", ".join(f"{k} {v['pairs']:,}" for k, v in PUBLISHED.items()))
    print(f"{'workload':8} {'method':52} {'seconds':>9} {'pairs':>12}")
    for name, label, seconds, pairs in rows:
        print(f"{name:8} {label:52} {seconds:9.3f} {pairs:12,}")
    for name, target in TARGETS.items():
        if name in results["workloads"]:
            k = results["workloads"][name]["kernel_s"]
            print(f"target {name}: kernel {k:.3f} s vs <= {target} s (GDS-Join {PUBLISHED[name]['gds_join_s']} s): "
                  f"{'MET' if k <= target else 'MISSED'}")
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
