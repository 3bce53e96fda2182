#!/usr/bin/env python
"""Set-similarity join benchmark: daskjoin (CPU, CPU+GPU) against SetSimilaritySearch, same data, one process.

Workloads (issue [sets] item 7): synthetic Zipf-distributed collections shaped like
KOSARAK (``daskjoin.io.synth_sets.kosarak_like``: about 600k sets, average size 8)
and like DBLP (``dblp_like``: 100k sets of character 2-grams, average size 88),
Jaccard thresholds 0.5-0.9, self-join.  Each collection is prepared once
(``prepare_flat``) and written to a Zarr set store for the end-to-end rows.

For each dataset x threshold:

1. daskjoin kernel alone, in this process, on the whole prepared collection:
   a candidates pass (``local.candidate_chunks`` over the sets the kernel filters,
   i.e. one representative per run of identical sets; filter-only seconds and the
   number of candidates), then ``local.block_count`` (count only) and
   ``local.block_batches`` (pairs materialised as arrays) for backend ``cpu`` and,
   where CuPy sees a device, ``gpu`` with each verification alternative
   (``thread``, ``block``, ``intersect_path``).
2. daskjoin end to end from the set store on a one-worker cluster
   (``LocalCUDACluster`` where dask-cuda imports and a GPU is visible, else
   ``LocalCluster(**local_cluster_options())``):
   ``set_similarity_join(store, threshold=t, client=client, output="count")`` and
   with ``out=`` Parquet, per backend.
3. SetSimilaritySearch ``all_pairs(sets, similarity_func_name="jaccard",
   similarity_threshold=t)`` over lists of ints, the full iteration timed, with a
   per-run limit (``--peer-timeout``).  It is pure Python: where the whole
   collection would take longer than the limit, it and daskjoin (prepare_flat +
   kernel, CPU and GPU) run on the same prefix of the collection (the generators
   shuffle their sets, so a prefix is a random sample), sized from small pilot
   runs to take about ``--peer-target`` seconds.  Pair sets are compared.

Then, separately, GPU against CPU verification on a workload with more than 1e8
candidates (default: DBLP-like 30k sets at Jaccard 0.5): the candidate chunks are
generated once, then fed to ``CpuVerifier`` and ``GpuVerifier`` (each alternative),
timing only verification (GPU synchronised before the clock stops), in count mode
for growing prefixes of the chunks (crossover) and in pairs mode for all of them.

Results: ``benchmarks/results/sets-<GPU name or cpu-vm>-<date>.json`` and a table printed last.

Usage::

    .venv/bin/python benchmarks/bench_sets.py --quick            # small sizes, about 2 min on 2 cores
    .venv/bin/python benchmarks/bench_sets.py                    # full size (hours on 2 cores)
    python3 benchmarks/bench_sets.py                             # on a GPU machine: adds the GPU rows
    .venv/bin/python benchmarks/bench_sets.py --datasets kosarak --thresholds 0.9 --skip-e2e
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import platform
import shutil
import signal
import socket
import sys
import tempfile
import time
from array import array

import numpy as np

from bench_cpu import _cores, _load, _pretouch  # noqa: E402  (this folder is on sys.path when run as a script)

TARGET_VS_PEER = 20.0  # daskjoin at least this many times faster than SetSimilaritySearch
GPU_VERIFY_FROM = 1e8  # GPU verification faster than CPU verification from this many candidates
VARIANTS = ("thread", "block", "intersect_path")
WARMUP_SETS = 3000
FAST_S = 1.0  # measurements shorter than this are repeated (best of FAST_REPEAT at least): single short runs are noisy
FAST_REPEAT = 3

_mismatches: list[str] = []
_pretouch_bytes = 256 << 20
_gpu = None  # cupy module once a GPU is in use


# --------------------------------------------------------------------------- helpers


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _mismatch(msg: str) -> None:
    _mismatches.append(msg)
    print(f"!!!!!!!! MISMATCH: {msg}", flush=True)
    print(f"!!!!!!!! MISMATCH: {msg}", file=sys.stderr, flush=True)


def _sync() -> None:
    if _gpu is not None:
        _gpu.cuda.Device().synchronize()


def _free_gpu() -> None:
    if _gpu is not None:
        _sync()
        _gpu.get_default_memory_pool().free_all_blocks()
        _gpu.get_default_pinned_memory_pool().free_all_blocks()


def _timed(func, repeat: int, label: str = ""):
    """Best of ``repeat`` runs (of at least FAST_REPEAT when the first is shorter than FAST_S seconds).

    Returns (best seconds, all seconds, result of the best run).
    """
    times, best, best_result = [], math.inf, None
    k = 0
    while k < repeat or (times and times[0] < FAST_S and k < FAST_REPEAT):
        k += 1
        gc.collect()
        _free_gpu()
        _pretouch(_pretouch_bytes)
        _sync()
        start = time.perf_counter()
        result = func()
        _sync()
        seconds = time.perf_counter() - start
        times.append(round(seconds, 4))
        if seconds < best:
            best, best_result = seconds, result
        _log(f"    {label}{seconds:.3f} s")
    return best, times, best_result


def _fmt_s(seconds) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.3f}" if seconds < 100 else f"{seconds:.1f}"


def _git_state() -> dict | None:
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        status = subprocess.run(["git", "status", "--porcelain", "--", "daskjoin"], cwd=root, capture_output=True,
                                text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if commit.returncode:
        return None
    return {"commit": commit.stdout.strip(), "modified": [line[3:] for line in status.stdout.splitlines()]}


def gpu_info() -> dict | None:
    """The first CUDA device as CuPy sees it, or None."""
    try:
        import cupy as cp

        if cp.cuda.runtime.getDeviceCount() < 1:
            return None
        props = cp.cuda.runtime.getDeviceProperties(0)
        name = props["name"]
        return {"name": name.decode() if isinstance(name, bytes) else str(name),
                "memory_bytes": int(props["totalGlobalMem"]),
                "multiprocessors": int(props["multiProcessorCount"]),
                "cupy": cp.__version__,
                "cuda_runtime": int(cp.cuda.runtime.runtimeGetVersion())}
    except Exception:  # noqa: BLE001 - no CuPy, no driver, no device: a CPU-only run
        return None


def _version(dist: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:  # noqa: BLE001
        return None


def machine_info(gpu: dict | None) -> dict:
    import numba

    try:
        import psutil

        memory = psutil.virtual_memory().total
    except ImportError:
        memory = None
    versions = {"python": platform.python_version()}
    for dist in ("numpy", "numba", "dask", "distributed", "zarr", "pandas", "pyarrow", "daskjoin",
                 "SetSimilaritySearch", "dask-cuda"):
        versions[dist] = _version(dist)
    return {
        "hostname": socket.gethostname(),
        "git": _git_state(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "usable_cores": _cores(),
        "numba_threads": numba.get_num_threads(),
        "memory_bytes": memory,
        "gpu": gpu,
        "versions": versions,
    }


# --------------------------------------------------------------------------- data


class Dataset:
    """One synthetic collection: the generator's sets (original order) and the prepared collection."""

    def __init__(self, name: str, n: int, seed: int, data_dir: str, write_store: bool = True):
        from daskjoin.io.sets_in import prepare_flat, write_sets
        from daskjoin.io.synth_sets import GENERATORS
        from daskjoin.kernels.sets import local

        self.name, self.n = name, n
        _log(f"dataset {name}: generating {n:,} sets ({name}_like, seed {seed})")
        start = time.perf_counter()
        self.tokens, self.offsets = GENERATORS[name](n, seed=seed)
        gen_s = time.perf_counter() - start
        start = time.perf_counter()
        self.coll = prepare_flat(self.tokens, self.offsets)
        prep_s = time.perf_counter() - start
        self.flat = local.Flat.of(self.coll.tokens, self.coll.offsets)
        runs = local._Runs.of(self.flat)  # what block_count / block_batches filter: one set per run of copies
        self.reps = runs.reps
        self.store = None
        write_s = None
        if write_store:
            self.store = os.path.join(data_dir, f"{name}-{n}.zarr")
            start = time.perf_counter()
            write_sets(self.coll, self.store, overwrite=True, attrs={"source": "bench_sets", "generator": name,
                                                                     "n": n, "seed": seed})
            write_s = time.perf_counter() - start
        sizes = np.diff(self.offsets)
        self.stats = {
            "name": name, "generator": f"daskjoin.io.synth_sets.{name}_like", "n": int(n), "seed": seed,
            "avg_size": round(float(sizes.mean()), 3) if n else 0.0,
            "median_size": float(np.median(sizes)) if n else 0.0,
            "max_size": int(sizes.max()) if n else 0,
            "tokens": int(self.offsets[-1]),
            "distinct_tokens": int(len(self.coll.vocab)),
            "distinct_sets": int(len(self.reps)),
            "generate_s": round(gen_s, 3), "prepare_flat_s": round(prep_s, 3),
            "write_store_s": None if write_s is None else round(write_s, 3),
        }
        _log(f"  {n:,} sets, average size {self.stats['avg_size']:.2f}, {self.stats['tokens']:,} tokens, "
             f"{self.stats['distinct_tokens']:,} distinct tokens, {self.stats['distinct_sets']:,} distinct sets; "
             f"generate {gen_s:.1f} s, prepare_flat {prep_s:.1f} s"
             + ("" if write_s is None else f", store written in {write_s:.1f} s"))

    def prefix(self, m: int):
        """The first ``m`` sets in the generator's (shuffled) order, flat."""
        return self.tokens[: self.offsets[m]], self.offsets[: m + 1]

    def peer_sets(self, m: int) -> list:
        """The first ``m`` sets as lists of Python ints (SetSimilaritySearch's input)."""
        tl = self.tokens[: self.offsets[m]].tolist()
        ol = self.offsets[: m + 1].tolist()
        return [tl[ol[k]:ol[k + 1]] for k in range(m)]


# --------------------------------------------------------------------------- daskjoin kernel


def _kernel_configs(backends: list[str], variants: list[str]) -> list[tuple[str, str, dict]]:
    """(label, backend, options) of every kernel configuration to time."""
    configs = []
    if "cpu" in backends:
        configs.append(("cpu", "cpu", {}))
    if "gpu" in backends:
        configs += [(f"gpu/{v}", "gpu", {"verify": v}) for v in variants]
    return configs


def _with_chunk(options: dict, chunk: int | None) -> dict:
    return dict(options) if chunk is None else {**options, "chunk_candidates": chunk}


def kernel_count(flat, th, algorithm, backend, options):
    from daskjoin.kernels.sets import local

    return int(local.block_count(flat, None, th, algorithm=algorithm, backend=backend, options=options))


def kernel_pairs(flat, th, algorithm, backend, options):
    from daskjoin.kernels.sets import local

    return int(sum(len(b[0]) for b in local.block_batches(flat, None, th, algorithm=algorithm, backend=backend,
                                                          options=options)))


def candidates_pass(flat, th, algorithm, chunk):
    from daskjoin.kernels.sets import local

    total = chunks = 0
    for _probes, _offsets, cands in local.candidate_chunks(flat, None, th, algorithm, chunk=chunk):
        total += len(cands)
        chunks += 1
    return total, chunks


def warm_up(data: Dataset, configs, algorithm: str, chunk) -> None:
    """JIT / module loading and the CUDA kernels' compilation on a small prefix (not timed)."""
    from daskjoin.io.sets_in import prepare_flat
    from daskjoin.kernels.sets import local
    from daskjoin.planning.set_threshold import parse_threshold

    m = min(data.n, WARMUP_SETS)
    coll = prepare_flat(*data.prefix(m))
    flat = local.Flat.of(coll.tokens, coll.offsets)
    th = parse_threshold("jaccard", 0.5)
    candidates_pass(flat, th, algorithm, chunk or local.DEFAULT_CHUNK)
    for _label, backend, options in configs:
        opts = _with_chunk(options, chunk)
        kernel_count(flat, th, algorithm, backend, opts)
        kernel_pairs(flat, th, algorithm, backend, opts)
    _free_gpu()


def heavy_plan(configs, backends: list[str], args):
    """What a heavy workload (more than --heavy-candidates candidates) still runs: one count-only kernel
    configuration (GPU with the default verification where there is a GPU, else CPU) and the end-to-end count
    on the same backend."""
    if "gpu" in backends:
        variant = "block" if "block" in args.gpu_variants else args.gpu_variants[0]
        keep = [c for c in configs if c[0] == f"gpu/{variant}"]
        return keep, ["gpu"]
    return [c for c in configs if c[0] == "cpu"], ["cpu"]


def kernel_rows(data: Dataset, t: float, configs, args, backends) -> dict:
    from daskjoin.kernels.sets import local
    from daskjoin.planning.set_threshold import parse_threshold

    th = parse_threshold("jaccard", t)
    chunk = args.chunk_candidates or local.DEFAULT_CHUNK
    _log(f"  candidates pass: candidate_chunks over the {len(data.reps):,} distinct sets ({args.algorithm})")
    f_s, f_times, (cands, chunks) = _timed(lambda: candidates_pass(data.reps, th, args.algorithm, chunk), args.repeat)
    _log(f"    {cands:,} candidates in {chunks} chunks")
    out = {"candidates": int(cands), "candidate_chunks": int(chunks), "filter_s": f_s, "filter_times": f_times,
           "rows": [], "heavy": bool(cands > args.heavy_candidates), "skipped": []}
    modes = (("count", kernel_count), ("pairs", kernel_pairs))
    if out["heavy"]:
        keep, _ = heavy_plan(configs, backends, args)
        out["skipped"] = [f"kernel {c[0]} {m}" for c in configs for m, _f in modes
                          if not (c in keep and m == "count")]
        _log(f"  heavy workload ({cands:,} candidates > --heavy-candidates {args.heavy_candidates:.3g}): "
             f"skipping {', '.join(out['skipped'])}")
        configs, modes = keep, modes[:1]
    counts = {}
    for label, backend, options in configs:
        opts = _with_chunk(options, args.chunk_candidates)
        for mode, func in modes:
            _log(f"  kernel {label}, {mode}: local.block_{'count' if mode == 'count' else 'batches'}")
            s, times, pairs = _timed(lambda: func(data.flat, th, args.algorithm, backend, opts), args.repeat)
            out["rows"].append({"method": f"kernel {label} {mode}", "config": label, "backend": backend,
                                "options": options, "mode": mode, "seconds": s, "times": times, "pairs": pairs,
                                "filter_share": f_s / s if s else None,
                                "candidates_per_s": cands / s if s else None})
            counts[f"{label} {mode}"] = pairs
    values = set(counts.values())
    if len(values) > 1:
        _mismatch(f"{data.name} t={t}: kernel configurations disagree: {counts}")
    out["pairs"] = next(iter(values)) if values else None
    return out


# --------------------------------------------------------------------------- end to end


def start_cluster(want_gpu: bool, runner: str = "in-process"):
    """(client, cluster, description): daskjoin's own runner without a cluster (threads of this process,
    the default a user meets), or with ``runner="cluster"`` a one-worker LocalCUDACluster on a GPU
    machine, else a LocalCluster."""
    if runner == "in-process":
        from daskjoin.execution.inprocess import InProcess

        client = InProcess()
        return client, None, f"in-process ({client.threads} task threads: daskjoin's default without a cluster)"
    from distributed import Client, LocalCluster

    from daskjoin.execution.cluster import local_cluster_options

    if want_gpu:
        try:
            from dask_cuda import LocalCUDACluster

            _log("starting LocalCUDACluster(n_workers=1) (not timed)")
            cluster = LocalCUDACluster(n_workers=1, threads_per_worker=1)
            return Client(cluster), cluster, "dask_cuda.LocalCUDACluster(n_workers=1, threads_per_worker=1)"
        except ImportError:
            _log("dask_cuda is not importable: a LocalCluster instead")
    opts = local_cluster_options()
    _log("starting LocalCluster(**local_cluster_options()) (not timed)")
    cluster = LocalCluster(**opts)
    shown = {k: v for k, v in opts.items() if isinstance(v, (int, str, bool, type(None)))}
    return Client(cluster), cluster, f"distributed.LocalCluster({shown})"


def e2e_backends(backends: list[str]) -> list[str]:
    return [b for b in ("cpu", "gpu") if b in backends]


def warm_cluster(client, data: Dataset, backends, algorithm, tmp) -> None:
    """Worker imports, JIT and CUDA compilation with a tiny join per backend (not timed)."""
    import daskjoin as dj
    from daskjoin.io.sets_in import prepare_flat, write_sets

    m = min(data.n, WARMUP_SETS)
    path = os.path.join(tmp, f"warmup-{data.name}.zarr")
    write_sets(prepare_flat(*data.prefix(m)), path, overwrite=True)
    for backend in backends:
        dj.set_similarity_join(path, threshold=0.5, client=client, backend=backend, method=algorithm,
                               output="count")
        dj.set_similarity_join(path, threshold=0.5, client=client, backend=backend, method=algorithm,
                               out=os.path.join(tmp, "warmup-out"), overwrite=True)
    shutil.rmtree(path, ignore_errors=True)
    shutil.rmtree(os.path.join(tmp, "warmup-out"), ignore_errors=True)


def e2e_rows(client, data: Dataset, t: float, backends, args, tmp, expected, heavy=False) -> tuple[list, list]:
    import daskjoin as dj

    rows, skipped = [], []
    out_dir = os.path.join(tmp, "pairs-out.parquet")
    modes = ("count", "parquet")
    if heavy:
        _, keep = heavy_plan([], backends, args)
        skipped = [f"e2e {b} {m}" for b in backends for m in modes if not (b in keep and m == "count")]
        backends, modes = [b for b in backends if b in keep], ("count",)

    def release():
        gc.collect()
        client.run(gc.collect)
        client.run(_pretouch, _pretouch_bytes)

    for backend in backends:
        for mode in modes:
            _log(f"  e2e {backend}, {mode}: set_similarity_join(store, threshold={t}, "
                 + ("output='count')" if mode == "count" else "out=PATH)"))
            times, best, pairs, extra = [], math.inf, None, {}
            while len(times) < args.repeat or (times[0] < FAST_S and len(times) < FAST_REPEAT):
                release()
                start = time.perf_counter()
                if mode == "count":
                    got = dj.set_similarity_join(data.store, threshold=t, client=client, backend=backend,
                                                 method=args.algorithm, output="count")
                    n_pairs = int(got)
                else:
                    got = dj.set_similarity_join(data.store, threshold=t, client=client, backend=backend,
                                                 method=args.algorithm, out=out_dir, overwrite=True)
                    n_pairs = int(got.pairs)
                seconds = time.perf_counter() - start
                times.append(round(seconds, 4))
                _log(f"    {seconds:.3f} s, {n_pairs:,} pairs")
                if seconds < best:
                    best, pairs = seconds, n_pairs
                    if mode == "parquet":
                        extra = {"files": got.files, "plan_s": got.plan_seconds, "run_s": got.run_seconds,
                                 "tasks": got.plan.ntasks, "partitions": len(got.plan.parts_a)}
                if expected is not None and n_pairs != expected:
                    _mismatch(f"{data.name} t={t}: end to end ({backend}, {mode}) {n_pairs:,} pairs, "
                              f"kernel {expected:,}")
            shutil.rmtree(out_dir, ignore_errors=True)
            rows.append({"method": f"e2e {backend} {mode}", "backend": backend, "mode": mode, "seconds": best,
                         "times": times, "pairs": pairs, **extra})
    return rows, skipped


# --------------------------------------------------------------------------- SetSimilaritySearch


class _PeerTimeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise _PeerTimeout()


def run_peer(sets: list, t: float, timeout: float):
    """SetSimilaritySearch all_pairs, fully iterated: (seconds, sorted i*m+j keys, or None when it ran out of time).

    The time limit is a SIGALRM raised inside the pure-Python loop (this process's main thread).
    """
    from SetSimilaritySearch import all_pairs

    m = len(sets)
    keys = array("q")
    gc.collect()
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, max(timeout, 0.001))
    start = time.perf_counter()
    try:
        for x, y, _sim in all_pairs(sets, similarity_func_name="jaccard", similarity_threshold=t):
            keys.append(int(y) * m + int(x))  # the peer yields (larger index, smaller index, sim)
        seconds = time.perf_counter() - start
    except _PeerTimeout:
        return time.perf_counter() - start, None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    out = np.frombuffer(keys, dtype=np.int64).copy()
    out.sort()
    return seconds, out


def _round_down(m: int) -> int:
    """Two significant digits, so that sample sizes read well."""
    if m < 100:
        return max(1, m)
    scale = 10 ** (len(str(m)) - 2)
    return (m // scale) * scale


def choose_sample(data: Dataset, t: float, args) -> tuple[int, list, float]:
    """Pilot the peer on growing prefixes; return (sample size, pilot runs, fitted exponent)."""
    pilots = []
    m = min(data.n, args.peer_pilot_start)
    while True:
        sets = data.peer_sets(m)
        seconds, keys = run_peer(sets, t, args.peer_timeout)
        pilots.append({"sets": m, "seconds": round(seconds, 4), "pairs": None if keys is None else int(len(keys))})
        _log(f"    pilot: {m:,} sets, {seconds:.2f} s" + ("" if keys is not None else " (timed out)"))
        if keys is None or seconds >= args.peer_pilot_seconds or m >= data.n:
            break
        m = min(data.n, 2 * m)
    last = pilots[-1]
    if last["pairs"] is not None and last["sets"] >= data.n:
        return data.n, pilots, 2.0
    # All-pairs work grows at least quadratically with the sets (candidates per probe grow with the index);
    # small pilots understate it (measured 2.5 on KOSARAK-like 20k -> 40k), so the fitted exponent only raises 2.
    alpha = 2.0
    if len(pilots) >= 2 and pilots[-2]["seconds"] >= 0.2 and last["pairs"] is not None:
        ratio = last["seconds"] / pilots[-2]["seconds"]
        alpha = min(3.0, max(2.0, math.log(ratio, last["sets"] / pilots[-2]["sets"])))
    base_m, base_s = last["sets"], max(last["seconds"], 1e-3)
    if last["pairs"] is None:  # the pilot itself ran out of time: shrink
        return max(10, _round_down(int(base_m * 0.5 ** (1 / alpha)))), pilots, alpha
    predicted_full = base_s * (data.n / base_m) ** alpha
    target = min(args.peer_target, 0.5 * args.peer_timeout)
    if predicted_full <= min(0.8 * args.peer_timeout, 2 * target):
        return data.n, pilots, alpha
    m = int(base_m * (target / base_s) ** (1 / alpha))
    return min(data.n, max(base_m, _round_down(m))), pilots, alpha


def _pair_keys_daskjoin(coll, batches, m: int) -> np.ndarray:
    if not batches:
        return np.zeros(0, np.int64)
    probe = np.concatenate([b[0] for b in batches])
    cand = np.concatenate([b[1] for b in batches])
    i, j = coll.ids[probe].astype(np.int64), coll.ids[cand].astype(np.int64)
    keys = np.minimum(i, j) * m + np.maximum(i, j)
    keys.sort()
    return keys


def _explain_difference(data: Dataset, m: int, t: float, only_peer: np.ndarray, only_dj: np.ndarray) -> list:
    """Up to 10 differing pairs with their exact overlap and float Jaccard (ties show up here)."""
    from fractions import Fraction

    out = []
    for side, keys in (("SetSimilaritySearch only", only_peer), ("daskjoin only", only_dj)):
        for key in keys[:5].tolist():
            i, j = divmod(key, m)
            a = data.tokens[data.offsets[i]:data.offsets[i + 1]]
            b = data.tokens[data.offsets[j]:data.offsets[j + 1]]
            o = len(np.intersect1d(a, b))
            u = len(a) + len(b) - o
            out.append({"side": side, "i": int(i), "j": int(j), "sizes": [len(a), len(b)], "overlap": o,
                        "jaccard_float": o / u, "exact_tie": Fraction(o, u) == Fraction(str(t))})
    return out


def peer_compare(data: Dataset, t: float, args, kernel_backends: list[str]) -> dict:
    from daskjoin.io.sets_in import prepare_flat
    from daskjoin.kernels.sets import local
    from daskjoin.planning.set_threshold import parse_threshold

    th = parse_threshold("jaccard", t)
    _log(f"  SetSimilaritySearch all_pairs: piloting on prefixes (limit {args.peer_timeout:g} s per run)")
    m, pilots, alpha = choose_sample(data, t, args)
    result = {"pilots": pilots, "exponent": round(alpha, 3), "timeout_s": args.peer_timeout}
    keys = None
    for attempt in range(2):
        result["sample"] = m
        _log(f"  SetSimilaritySearch all_pairs on {m:,} of {data.n:,} sets"
             + (" (the whole collection)" if m == data.n else " (prefix sample)"))
        sets = data.peer_sets(m)
        seconds, keys = run_peer(sets, t, args.peer_timeout)
        del sets
        gc.collect()
        if keys is not None:
            _log(f"    {seconds:.3f} s, {len(keys):,} pairs")
            break
        _log(f"    timed out after {seconds:.1f} s")
        result.setdefault("timeouts", []).append({"sets": m, "seconds": round(seconds, 3)})
        m = max(10, _round_down(int(m * 0.4 ** (1 / alpha))))
    if keys is None:
        result["note"] = "SetSimilaritySearch ran out of time twice; no ratio"
        return result
    result.update(peer_s=seconds, peer_pairs=int(len(keys)))

    # daskjoin on the same m sets: prepare_flat + kernel (pairs materialised), and the kernel alone
    tok_m, off_m = data.prefix(m)
    coll = prepare_flat(tok_m, off_m)
    flat = local.Flat.of(coll.tokens, coll.offsets)
    repeat = max(3, args.repeat)
    rows = []
    for backend in kernel_backends:
        opts = _with_chunk({}, args.chunk_candidates)

        def full(backend=backend, opts=opts):
            c = prepare_flat(tok_m, off_m)
            f = local.Flat.of(c.tokens, c.offsets)
            return c, list(local.block_batches(f, None, th, algorithm=args.algorithm, backend=backend, options=opts))

        _log(f"  daskjoin {backend} on the same {m:,} sets: prepare_flat + block_batches")
        s_full, t_full, (c_best, batches) = _timed(full, repeat)
        _log(f"  daskjoin {backend} kernel alone (prepared): block_batches")
        s_kern, t_kern, _ = _timed(lambda b=backend, o=opts: kernel_pairs(flat, th, args.algorithm, b, o), repeat)
        dj_keys = _pair_keys_daskjoin(c_best, batches, m)
        del batches
        row = {"backend": backend, "prepare_and_kernel_s": s_full, "prepare_and_kernel_times": t_full,
               "kernel_s": s_kern, "kernel_times": t_kern, "pairs": int(len(dj_keys)),
               "ratio": seconds / s_full, "ratio_kernel": seconds / s_kern,
               "target": f">= {TARGET_VS_PEER:g}x: {'MET' if seconds / s_full >= TARGET_VS_PEER else 'MISSED'}"}
        if len(dj_keys) != len(keys) or not np.array_equal(dj_keys, keys):
            only_peer = np.setdiff1d(keys, dj_keys)
            only_dj = np.setdiff1d(dj_keys, keys)
            row.update(same_pairs=False, only_peer=int(len(only_peer)), only_daskjoin=int(len(only_dj)),
                       examples=_explain_difference(data, m, t, only_peer, only_dj))
            _log(f"    pair sets differ: {len(only_peer):,} only in SetSimilaritySearch, "
                 f"{len(only_dj):,} only in daskjoin (see 'examples' in the JSON)")
        else:
            row["same_pairs"] = True
            _log(f"    same {len(keys):,} pairs as SetSimilaritySearch")
        rows.append(row)
    result["daskjoin"] = rows
    _free_gpu()
    return result


# --------------------------------------------------------------------------- GPU vs CPU verification


def _chunk_prefix(chunks, limit: int):
    """The chunks holding the first ``limit`` candidates, cut at a probe-group boundary."""
    out, total = [], 0
    for probes, offsets, cands in chunks:
        if total + len(cands) <= limit:
            out.append((probes, offsets, cands))
            total += len(cands)
            continue
        groups = int(np.searchsorted(offsets, limit - total, side="right")) - 1
        if groups > 0:
            end = int(offsets[groups])
            out.append((probes[:groups], offsets[: groups + 1], cands[:end]))
            total += end
        break
    return out, total


def _verify(kind: str, flat, th, chunks, count_only: bool, options: dict):
    """Verify ``chunks`` with a fresh verifier; count mode: the total, pairs mode: the number of pairs collected."""
    from daskjoin.kernels.sets.local import make_verifier

    verifier = make_verifier(kind, flat, flat, th, count_only, options)
    try:
        if count_only:
            for piece in chunks:
                verifier.submit(*piece)
            return int(verifier.total())
        total, pending = 0, None
        for piece in chunks:  # as local._verified: queue the next chunk before collecting the last one
            handle = verifier.submit(*piece)
            if pending is not None:
                total += len(verifier.collect(pending)[0])
            pending = handle
        if pending is not None:
            total += len(verifier.collect(pending)[0])
        return total
    finally:
        verifier.close()


def verify_benchmark(args, backends: list[str], variants: list[str]) -> dict:
    from daskjoin.io.sets_in import prepare_flat
    from daskjoin.io.synth_sets import GENERATORS
    from daskjoin.kernels.sets import local
    from daskjoin.planning.set_threshold import parse_threshold

    name, n, t = args.verify_dataset, args.verify_n, args.verify_threshold
    th = parse_threshold("jaccard", t)
    chunk = args.chunk_candidates or local.DEFAULT_CHUNK
    for attempt in range(2):
        _log(f"verification workload: {name}_like({n:,}), jaccard {t}, {args.algorithm}, chunks of {chunk:,}")
        tokens, offsets = GENERATORS[name](n, seed=args.seed)
        coll = prepare_flat(tokens, offsets)
        flat = local.Flat.of(coll.tokens, coll.offsets)
        del tokens, offsets
        start = time.perf_counter()
        chunks = list(local.candidate_chunks(flat, None, th, args.algorithm, chunk=chunk))
        filter_s = time.perf_counter() - start
        total = int(sum(len(c[2]) for c in chunks))
        _log(f"  {total:,} candidates in {len(chunks)} chunks, generated in {filter_s:.1f} s (not counted below)")
        if total >= args.verify_min_candidates or attempt == 1:
            break
        n = int(n * math.sqrt(1.15 * args.verify_min_candidates / max(total, 1))) + 1
        _log(f"  fewer than {args.verify_min_candidates:.3g} candidates: regenerating with {n:,} sets")
        chunks = None
        gc.collect()
    out = {"dataset": name, "n": n, "threshold": t, "algorithm": args.algorithm, "group_copies": False,
           "candidates": total, "chunks": len(chunks), "chunk_candidates": chunk, "filter_s": filter_s, "rows": []}
    if total < GPU_VERIFY_FROM:
        out["note"] = f"fewer than {GPU_VERIFY_FROM:.0e} candidates: the GPU target does not apply"
    configs = []
    if "cpu" in backends:
        configs.append(("cpu", "cpu", {}))
    if "gpu" in backends:
        configs += [(f"gpu/{v}", "gpu", {"verify": v}) for v in variants]
    # warm-up (JIT, CUDA module compilation), not timed
    small, _ = _chunk_prefix(chunks, 100_000)
    for _label, kind, options in configs:
        _verify(kind, flat, th, small, True, options)
        _verify(kind, flat, th, small, False, options)
    _free_gpu()
    ladder = sorted({int(v) for v in (1e6, 1e7, 1e8) if v < total} | {total})
    counts = {}
    for limit in ladder:
        part, got = _chunk_prefix(chunks, limit)
        for label, kind, options in configs:
            _log(f"  verify {label}, count, {got:,} candidates")
            s, times, matches = _timed(lambda: _verify(kind, flat, th, part, True, options), args.repeat)
            out["rows"].append({"verifier": label, "mode": "count", "candidates": got, "seconds": s, "times": times,
                                "matches": matches, "candidates_per_s": got / s if s else None})
            counts.setdefault(got, {})[label] = matches
    for label, kind, options in configs:
        _log(f"  verify {label}, pairs, {total:,} candidates")
        s, times, matches = _timed(lambda: _verify(kind, flat, th, chunks, False, options), args.repeat)
        out["rows"].append({"verifier": label, "mode": "pairs", "candidates": total, "seconds": s, "times": times,
                            "matches": matches, "candidates_per_s": total / s if s else None})
        counts.setdefault(f"{total} pairs", {})[label] = matches
    for key, by_label in counts.items():
        if len(set(by_label.values())) > 1:
            _mismatch(f"verification ({key} candidates): verifiers disagree: {by_label}")
    cpu = {(r["mode"], r["candidates"]): r["seconds"] for r in out["rows"] if r["verifier"] == "cpu"}
    for r in out["rows"]:
        base = cpu.get((r["mode"], r["candidates"]))
        r["speedup_vs_cpu"] = base / r["seconds"] if base and r["seconds"] else None
    gpu_rows = [r for r in out["rows"] if r["verifier"].startswith("gpu") and r["candidates"] >= GPU_VERIFY_FROM]
    if gpu_rows and "cpu" in backends:
        best = max(gpu_rows, key=lambda r: r["speedup_vs_cpu"] or 0)
        met = all(max((g["speedup_vs_cpu"] or 0) for g in gpu_rows if g["mode"] == r["mode"]
                      and g["candidates"] == r["candidates"]) > 1 for r in gpu_rows)
        out["target"] = (f"GPU verification faster than CPU from {GPU_VERIFY_FROM:.0e} candidates: "
                         f"{'MET' if met else 'MISSED'} (best {best['verifier']} {best['speedup_vs_cpu']:.1f}x)")
    else:
        out["target"] = "GPU verification not measured (no GPU)"
    chunks = None
    gc.collect()
    _free_gpu()
    return out


# --------------------------------------------------------------------------- report


def _table(header, rows, right) -> str:
    widths = [max(len(h), *(len(r[k]) for r in rows)) if rows else len(h) for k, h in enumerate(header)]

    def fmt(row):
        return "  ".join(c.rjust(w) if k in right else c.ljust(w) for k, (c, w) in enumerate(zip(row, widths))).rstrip()

    return "\n".join([fmt(header), fmt(tuple("-" * w for w in widths))] + [fmt(r) for r in rows])


def main_rows(results):
    """(dataset, t, method, seconds, pairs or candidates, note) of the kernel and end-to-end measurements."""
    rows = []
    for r in results:
        k = r.get("kernel")
        if k:
            rows.append((r["label"], f"{r['threshold']:g}", "filter only (candidate_chunks)", _fmt_s(k["filter_s"]),
                         f"{k['candidates']:,} cands", f"{k['candidate_chunks']} chunks"))
            for row in k["rows"]:
                rows.append((r["label"], f"{r['threshold']:g}", row["method"], _fmt_s(row["seconds"]),
                             f"{row['pairs']:,}", f"filter {100 * row['filter_share']:.0f}%"))
        for row in r.get("e2e", []):
            note = f"{row['tasks']} task(s)" if "tasks" in row else ""
            rows.append((r["label"], f"{r['threshold']:g}", row["method"], _fmt_s(row["seconds"]),
                         f"{row['pairs']:,}", note))
        if k and k.get("skipped"):
            rows.append((r["label"], f"{r['threshold']:g}", f"({len(k['skipped'])} rows skipped: heavy)", "-", "-",
                         f"> {r.get('heavy_candidates', 0):.0e} cands: " + _abbrev(k["skipped"])))
    return rows


def _abbrev(skipped: list[str]) -> str:
    """'kernel cpu pairs, kernel gpu/thread count, ...' -> a short summary."""
    kernel = sorted({s.split()[1] + ("" if s.endswith("count") else " pairs") for s in skipped
                     if s.startswith("kernel")})
    e2e = sorted({" ".join(s.split()[1:]) for s in skipped if s.startswith("e2e")})
    parts = []
    if kernel:
        parts.append("kernel " + ", ".join(kernel))
    if e2e:
        parts.append("e2e " + ", ".join(e2e))
    return "; ".join(parts)


def peer_rows(results):
    rows = []
    for r in results:
        p = r.get("peer")
        if not p:
            continue
        if "peer_s" not in p:
            rows.append((r["label"], f"{r['threshold']:g}", "-", "-", "-", "-", "-", "-", "-",
                         p.get("note", p.get("skipped", ""))))
            continue
        for d in p["daskjoin"]:
            diff = "same pairs" if d["same_pairs"] else f"-{d['only_peer']}/+{d['only_daskjoin']}"
            rows.append((r["label"], f"{r['threshold']:g}", f"{p['sample']:,}", _fmt_s(p["peer_s"]),
                         f"daskjoin {d['backend']}", _fmt_s(d["prepare_and_kernel_s"]), f"{d['ratio']:.0f}x",
                         f"{d['ratio_kernel']:.0f}x", f"{d['pairs']:,} ({diff})", d["target"]))
    return rows


def verify_rows(v):
    rows = []
    for r in v.get("rows", []):
        rows.append((r["verifier"], r["mode"], f"{r['candidates']:,}", _fmt_s(r["seconds"]),
                     f"{r['candidates_per_s'] / 1e6:,.1f}M", f"{r['matches']:,}",
                     "-" if r.get("speedup_vs_cpu") is None else f"{r['speedup_vs_cpu']:.2f}x"))
    return rows


MAIN_HEADER = ("dataset", "t", "method", "seconds", "pairs", "note")
PEER_HEADER = ("dataset", "t", "sample sets", "SSS s", "daskjoin", "prep+kernel s", "ratio", "kernel ratio",
               "pairs", "target")
VERIFY_HEADER = ("verifier", "mode", "candidates", "seconds", "cands/s", "matches", "vs cpu")


def report_text(results, verify) -> str:
    parts = ["daskjoin kernel (in process) and end to end (set store -> cluster):",
             _table(MAIN_HEADER, main_rows(results), {3, 4})]
    prows = peer_rows(results)
    if prows:
        parts += ["", f"against SetSimilaritySearch all_pairs on the same sets (ratio = SSS s / daskjoin "
                      f"prepare_flat + kernel s; kernel ratio: kernel alone; target >= {TARGET_VS_PEER:g}x):",
                  _table(PEER_HEADER, prows, {2, 3, 5, 6, 7})]
    if verify:
        parts += ["", f"verification only, {verify['dataset']}_like({verify['n']:,}) jaccard {verify['threshold']} "
                      f"({verify['candidates']:,} candidates): {verify.get('target', '')}",
                  _table(VERIFY_HEADER, verify_rows(verify), {2, 3, 4, 5, 6})]
    return "\n".join(parts)


def _md(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def report_markdown(results, verify) -> str:
    parts = [_md(MAIN_HEADER, main_rows(results))]
    prows = peer_rows(results)
    if prows:
        parts += ["", _md(PEER_HEADER, prows)]
    if verify:
        parts += ["", _md(VERIFY_HEADER, verify_rows(verify))]
    return "\n".join(parts)


# --------------------------------------------------------------------------- main


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="small sizes (KOSARAK-like 20k, DBLP-like 3k, verification 5k, peer target 5 s)")
    parser.add_argument("--datasets", nargs="+", default=["kosarak", "dblp"], choices=["kosarak", "dblp"])
    parser.add_argument("--kosarak-n", type=int, default=None, help="KOSARAK-like sets (default 600,000)")
    parser.add_argument("--dblp-n", type=int, default=None, help="DBLP-like sets (default 100,000)")
    parser.add_argument("--thresholds", nargs="+", type=float, default=[0.5, 0.7, 0.9])
    parser.add_argument("--backends", nargs="+", default=["cpu", "gpu"], choices=["cpu", "gpu"],
                        help="gpu only where CuPy sees a device (default: cpu gpu)")
    parser.add_argument("--gpu-variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS),
                        help="GPU verification alternatives timed in the kernel and verification rows")
    parser.add_argument("--algorithm", default="ppjoin", choices=["ppjoin", "allpairs"])
    parser.add_argument("--repeat", type=int, default=1, help="best of R for every daskjoin measurement (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chunk-candidates", type=int, default=None,
                        help="candidates per verified chunk (default daskjoin's, 4,194,304)")
    parser.add_argument("--skip-kernel", action="store_true", help="no in-process kernel rows")
    parser.add_argument("--heavy-candidates", type=float, default=3e8,
                        help="above this many candidates (from the candidates pass), run only one kernel "
                             "configuration (gpu/block where there is a GPU, else cpu), count only, and the "
                             "end-to-end count on the same backend (default 3e8; inf: every row)")
    parser.add_argument("--skip-e2e", action="store_true", help="no end-to-end rows (no cluster is started)")
    parser.add_argument("--runner", choices=("in-process", "cluster"), default="in-process",
                        help="end-to-end rows on daskjoin's default runner (threads of this process) or on a "
                             "one-worker local (CUDA) cluster")
    parser.add_argument("--skip-peer", action="store_true", help="do not run SetSimilaritySearch")
    parser.add_argument("--skip-verify", action="store_true", help="no GPU-vs-CPU verification measurement")
    parser.add_argument("--peer-timeout", type=float, default=None,
                        help="limit for one SetSimilaritySearch run, seconds (default 600; 60 with a GPU or --quick)")
    parser.add_argument("--peer-target", type=float, default=None,
                        help="when the whole collection would exceed --peer-timeout, size the sample for about this "
                             "many seconds of SetSimilaritySearch (default 120 without a GPU, 10 with one, 5 quick)")
    parser.add_argument("--peer-pilot-start", type=int, default=500, help="first pilot prefix (sets)")
    parser.add_argument("--peer-pilot-seconds", type=float, default=1.0,
                        help="pilots double the prefix until one takes this long (default 1 s)")
    parser.add_argument("--verify-dataset", default="dblp", choices=["kosarak", "dblp"])
    parser.add_argument("--verify-n", type=int, default=None, help="sets of the verification workload (default 30,000)")
    parser.add_argument("--verify-threshold", type=float, default=0.5)
    parser.add_argument("--verify-min-candidates", type=float, default=None,
                        help="regenerate the verification workload larger (once) below this many candidates "
                             "(default 1.2e8; 0 in --quick)")
    parser.add_argument("--data-dir", default=None, help="where the set stores go (default: a temporary folder)")
    parser.add_argument("--pretouch-mib", type=int, default=256,
                        help="write and free this much memory before each timed run (VM first-touch cost; 0: off)")
    parser.add_argument("--out-json", default=None,
                        help="default benchmarks/results/sets-<GPU name or cpu-vm>-<date>[-quick].json")
    args = parser.parse_args(argv)
    if args.kosarak_n is None:
        args.kosarak_n = 20_000 if args.quick else 600_000
    if args.dblp_n is None:
        args.dblp_n = 3_000 if args.quick else 100_000
    if args.verify_n is None:
        args.verify_n = 5_000 if args.quick else 30_000
    if args.verify_min_candidates is None:
        args.verify_min_candidates = 0.0 if args.quick else 1.2e8
    if args.repeat < 1 or args.kosarak_n < 2 or args.dblp_n < 2 or args.verify_n < 2:
        parser.error("need --repeat >= 1 and at least 2 sets per workload")
    if any(not 0 < t <= 1 for t in args.thresholds):
        parser.error("thresholds must be in (0, 1]")
    return args


def main(args) -> int:
    global _gpu, _pretouch_bytes
    _pretouch_bytes = max(0, args.pretouch_mib) << 20
    gpu = gpu_info() if "gpu" in args.backends else None
    backends = [b for b in args.backends if b == "cpu" or (b == "gpu" and gpu is not None)]
    if "gpu" in args.backends and gpu is None:
        _log("no CUDA device visible through CuPy: GPU rows skipped")
    if gpu is not None:
        import cupy

        _gpu = cupy
    if args.peer_target is None:
        args.peer_target = 5.0 if args.quick else (10.0 if gpu is not None else 120.0)
    if args.peer_timeout is None:
        args.peer_timeout = 60.0 if args.quick or gpu is not None else 600.0
    info = machine_info(gpu)
    _log(f"machine: {info['platform']}, {info['usable_cores']} usable cores (cpu_count {info['cpu_count']}), "
         f"numba threads {info['numba_threads']}, GPU {gpu['name'] if gpu else 'none'}, load average {_load()}")
    _log("versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()))
    if info["git"]:
        _log(f"daskjoin checkout: commit {info['git']['commit'][:12]}, modified: {info['git']['modified'] or 'none'}")
    load = _load()
    if load and load[0] > 0.5 * info["usable_cores"]:
        _log(f"WARNING: the machine is busy (load average {load}); timings will be noisy")
    peer_ok = not args.skip_peer and _version("SetSimilaritySearch") is not None
    if not args.skip_peer and not peer_ok:
        _log("SetSimilaritySearch is not installed: peer rows skipped (pip install SetSimilaritySearch)")
    configs = _kernel_configs(backends, args.gpu_variants)
    device = gpu["name"].replace(" ", "_") if gpu else "cpu-vm"
    stamp = datetime.date.today().isoformat()
    if args.out_json is None:
        args.out_json = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                     f"sets-{device}-{stamp}{'-quick' if args.quick else ''}.json")
    started = datetime.datetime.now().astimezone()
    tmp_owned = args.data_dir is None
    tmp = tempfile.mkdtemp(prefix="daskjoin-bench-sets-") if tmp_owned else args.data_dir
    os.makedirs(tmp, exist_ok=True)
    client = cluster = None
    cluster_desc = None
    datasets, results, verify = [], [], None

    def write_report():
        report = {
            "benchmark": "daskjoin benchmarks/bench_sets.py",
            "issue": "[sets] item 7",
            "started": started.isoformat(timespec="seconds"),
            "finished": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "args": {k: v for k, v in vars(args).items()},
            "machine": info,
            "backends": backends,
            "cluster": cluster_desc,
            "targets": {"vs_SetSimilaritySearch": TARGET_VS_PEER, "gpu_verify_faster_from_candidates": GPU_VERIFY_FROM},
            "datasets": [d.stats for d in datasets],
            "results": results,
            "verification": verify,
            "mismatches": list(_mismatches),
        }
        os.makedirs(os.path.dirname(os.path.abspath(args.out_json)), exist_ok=True)
        with open(args.out_json, "w") as f:
            json.dump(report, f, indent=1, default=float)

    try:
        if not args.skip_e2e:
            client, cluster, cluster_desc = start_cluster("gpu" in backends, args.runner)
        for name in args.datasets:
            n = args.kosarak_n if name == "kosarak" else args.dblp_n
            data = Dataset(name, n, args.seed, tmp, write_store=not args.skip_e2e)
            datasets.append(data)
            label = f"{name} {n // 1000}k" if n % 1000 == 0 else f"{name} {n:,}"
            _log(f"  warming up (JIT, CUDA compilation) on {min(n, WARMUP_SETS):,} sets, not timed")
            warm_up(data, configs, args.algorithm, args.chunk_candidates)
            if client is not None:
                warm_cluster(client, data, e2e_backends(backends), args.algorithm, tmp)
            for t in args.thresholds:
                _log(f"{label}, jaccard >= {t:g}: load average {_load()}")
                res = {"dataset": name, "label": label, "n": n, "threshold": t, "load_before": _load(),
                       "heavy_candidates": args.heavy_candidates}
                expected = None
                heavy = False
                if not args.skip_kernel:
                    res["kernel"] = kernel_rows(data, t, configs, args, backends)
                    expected = res["kernel"]["pairs"]
                    heavy = res["kernel"]["heavy"]
                if client is not None:
                    res["e2e"], skipped = e2e_rows(client, data, t, e2e_backends(backends), args, tmp, expected, heavy)
                    if skipped:
                        res["kernel"]["skipped"] += skipped
                        _log(f"  heavy workload: skipping {', '.join(skipped)}")
                    if expected is None and res["e2e"]:
                        expected = res["e2e"][0]["pairs"]
                if peer_ok:
                    res["peer"] = peer_compare(data, t, args, [b for b in ("cpu", "gpu") if b in backends])
                    p = res["peer"]
                    if p.get("sample") == n and "peer_s" in p and expected is not None and p["peer_pairs"] != expected:
                        _log(f"  note: SetSimilaritySearch found {p['peer_pairs']:,} pairs on the whole collection, "
                             f"daskjoin {expected:,}")
                elif not args.skip_peer:
                    res["peer"] = {"skipped": "SetSimilaritySearch not installed"}
                res["load_after"] = _load()
                results.append(res)
                write_report()
                print()
                print(report_text(results, None), flush=True)
                print()
            if data.store:
                shutil.rmtree(data.store, ignore_errors=True)
            del data.coll, data.flat, data.reps, data.tokens, data.offsets
            gc.collect()
        if not args.skip_verify:
            verify = verify_benchmark(args, backends, args.gpu_variants)
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
        if tmp_owned:
            shutil.rmtree(tmp, ignore_errors=True)
    write_report()
    print("=" * 110)
    gpu_name = gpu["name"] if gpu else "no GPU"
    print(f"daskjoin set-similarity join benchmark, {info['usable_cores']} cores, {gpu_name}, {started:%Y-%m-%d}, "
          f"repeat {args.repeat}, {args.algorithm}")
    for d in datasets:
        s = d.stats
        print(f"  {s['name']}: {s['n']:,} sets, avg size {s['avg_size']:.2f}, {s['tokens']:,} tokens, "
              f"{s['distinct_tokens']:,} distinct tokens, {s['distinct_sets']:,} distinct sets")
    print()
    print(report_text(results, verify))
    print()
    print(report_markdown(results, verify))
    print()
    print(f"results written to {args.out_json}")
    if _mismatches:
        print(f"!!!!!!!! {len(_mismatches)} MISMATCH(ES): " + "; ".join(_mismatches))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(parse_args()))
