"""What the GPU drivers share: lazy CuPy import, device detection, module loading, host transfer.

Only GPU drivers import this module, and it imports CuPy only when called.
"""
from __future__ import annotations

import functools
import os
import sys

import numpy as np

CUDA_DIR = os.path.join(os.path.dirname(__file__), "cuda")


def cupy():
    import cupy as cp

    return cp



@functools.lru_cache(maxsize=1)
def gpu_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    try:
        cp = cupy()
        return cp.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - any import or driver failure means "no GPU here"
        return False


def device_signature() -> str:
    """What decides the bits of this device's floating-point products (cuBLAS gives the same bits run to run on
    one architecture with one SM count and one library version): device name, SMs, CUDA runtime, CuPy."""
    cp = cupy()
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return f"{name}/{props['multiProcessorCount']}sm/cuda{cp.cuda.runtime.runtimeGetVersion()}/cupy{cp.__version__}"


def device_memory_bytes() -> int:
    """Total memory of this process's current device."""
    return int(cupy().cuda.runtime.memGetInfo()[1])


def cuda_source(name: str) -> str:
    """The source of ``cuda/<name>``, with its ``#include "X"`` lines of files in ``cuda/`` spliced in
    (NVRTC gets one string and no include path; nvcc reads the same includes itself)."""
    with open(os.path.join(CUDA_DIR, name)) as f:
        lines = f.read().splitlines(keepends=True)
    out = []
    for line in lines:
        parts = line.split('"')
        if line.startswith("#include \"") and len(parts) == 3 and os.path.exists(os.path.join(CUDA_DIR, parts[1])):
            out.append(cuda_source(parts[1]).replace("#pragma once\n", ""))
        else:
            out.append(line)
    return "".join(out)


@functools.lru_cache(maxsize=None)
def _module(name: str, device: int, specific: bool = False):
    """``specific``: compiled for the device's architecture-specific target (only asked where it has one); where
    that compile fails, a warning and the plain module, whose kernels leave out that target's code."""
    cp = cupy()
    if specific:
        try:
            return cp.RawModule(path=_specific_cubin(name, feature_arch(device)))
        except Exception as exc:  # noqa: BLE001 - any compiler or loader failure: the portable module serves
            import warnings

            warnings.warn(f"cuda/{name} for {feature_arch(device)} failed ({exc}); using its portable kernels",
                          RuntimeWarning, stacklevel=3)
            _SPECIFIC_FAILED.add((name, device))
    return cp.RawModule(code=cuda_source(name), options=("-std=c++17",))


_SPECIFIC_FAILED: set = set()


def kernel(name: str, function: str, specific: bool = False):
    """A compiled kernel from ``cuda/<name>`` (compiled once per process and device, by NVRTC); with
    ``specific``, compiled for the device's architecture-specific target where it has one (:func:`feature_arch`)."""
    device = cupy().cuda.runtime.getDevice()
    return _module(name, device, specific and feature_arch(device) is not None).get_function(function)


def specific_ready(name: str) -> bool:
    """Whether ``cuda/<name>`` runs compiled for the current device's architecture-specific target (compiled
    here if it was not yet): False where the device has none or its compile failed."""
    device = cupy().cuda.runtime.getDevice()
    if feature_arch(device) is None:
        return False
    _module(name, device, True)
    return (name, device) not in _SPECIFIC_FAILED


@functools.lru_cache(maxsize=None)
def feature_arch(device: int) -> str | None:
    """``sm_90a`` on a device of compute capability 9.0 (Hopper: the target whose code may use ``wgmma``), else
    None.  CuPy compiles for ``sm_90``, where those instructions do not exist."""
    return "sm_90a" if cupy().cuda.Device(device).compute_capability == "90" else None


def _specific_cubin(name: str, arch: str) -> str:
    """``cuda/<name>`` compiled by NVRTC for ``arch`` with the options CuPy gives a ``RawModule`` (so float
    arithmetic is the same: ``-ftz=true``), cached on disk beside CuPy's kernels under a key of the source,
    options and NVRTC version.  Written to a temporary file of its own and renamed, so that processes (or hosts
    sharing the folder) compiling at once never leave a partial file under the final name (a cache, like CuPy's,
    not an output: not through io/commit.py, which kernels/ does not import)."""
    import hashlib
    import tempfile

    from cupy.cuda import nvrtc

    source = cuda_source(name)
    options = ("-std=c++17", "-ftz=true", f"-arch={arch}")
    key = hashlib.sha256(repr((source, options, nvrtc.getVersion())).encode()).hexdigest()[:32]
    folder = os.environ.get("CUPY_CACHE_DIR") or os.path.expanduser("~/.cupy/kernel_cache")
    path = os.path.join(folder, f"daskjoin-{name.replace('.', '-')}-{arch}-{key}.cubin")
    if os.path.exists(path):
        return path
    prog = nvrtc.createProgram(source, name, (), ())
    try:
        try:
            nvrtc.compileProgram(prog, options)
        except nvrtc.NVRTCError as exc:
            raise RuntimeError(f"NVRTC could not compile cuda/{name} for {arch}:\n{nvrtc.getProgramLog(prog)}") from exc
        cubin = nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(cubin)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def output_args(offsets=None, out=(None, None, None)):
    """A pair kernel's ``(offsets, oi, oj, od)`` arguments; one-element placeholders where a count pass
    writes no pairs (``None``)."""
    cp = cupy()
    dummy_i, dummy_f = cp.empty(1, cp.int64), cp.empty(1, cp.float32)
    oi, oj, od = (x if x is not None else dummy for x, dummy in zip(out, (dummy_i, dummy_i, dummy_f)))
    return (offsets if offsets is not None else dummy_i), oi, oj, od


def output_by_counts(counts):
    """Room for pairs counted per slot: ``(offsets, (oi, oj, od))``, offsets the prefix sum of ``counts``
    (len + 1, from 0), the arrays as long as the total."""
    cp = cupy()
    offsets = cp.zeros(counts.shape[0] + 1, cp.int64)
    cp.cumsum(counts, dtype=cp.int64, out=offsets[1:])
    size = int(offsets[-1])
    return offsets, (cp.empty(size, cp.int64), cp.empty(size, cp.int64), cp.empty(size, cp.float32))


def to_host(*arrays, pinned: bool = True):
    """Device arrays to numpy arrays in pinned host memory (None passes through); ``pinned=False``:
    pageable memory.

    Pinned buffers come from CuPy's pinned pool, so a worker reuses them from task to
    task; copies into them run at full PCIe speed (about 20x faster than into
    pageable memory on an H200 host: 12 ms instead of 0.22 s for 32M pairs).
    """
    if not pinned:  # through reused pinned staging buffers (host_copy.to_pageable)
        from .host_copy import to_pageable

        moved = iter(to_pageable(*(cupy().ascontiguousarray(a) for a in arrays if a is not None)))
        return tuple(None if a is None else next(moved) for a in arrays)
    cp = cupy()
    out = []
    for a in arrays:
        if a is None:
            out.append(None)
            continue
        host = pinned_empty(a.shape, a.dtype, any_size=True)
        a.get(out=host, blocking=False)
        out.append(host)
    cp.cuda.get_current_stream().synchronize()
    return tuple(out)


def sorted_on_device(pairs: list):
    """Device pairs ``[i, j, d]`` (the list is emptied, so the unsorted arrays are freed as their sorted
    copies are made) sorted by (i, j): one radix sort of a packed key (a partition's local rows, below 2**32)."""
    cp = cupy()
    i, j, d = pairs
    pairs.clear()
    order = cp.argsort((i.astype(cp.uint64) << cp.uint64(32)) | j.astype(cp.uint64))
    i, j = i[order], j[order]
    d = None if d is None else d[order]
    return i, j, d


def sort_room() -> int:
    """The pairs a driver may hold on the device and sort there: their outputs and the sort's buffers."""
    from .grid_gpu import OUTPUT_BYTES_PER_PAIR, SORT_BYTES_PER_PAIR

    return max(1, device_budget_bytes(0.4) // (OUTPUT_BYTES_PER_PAIR + SORT_BYTES_PER_PAIR))


def host_batches(i, j, d, max_pairs: int):
    """Device pairs to the host in batches of at most ``max_pairs`` pairs and one row group each
    (:func:`~.registry.transfer_pairs`): into the process's reused page-locked blocks (:mod:`.host_pool`), else
    into pinned memory where ``daskjoin.pinned-output`` says so."""
    from .. import config
    from .host_pool import pooled_to_host
    from .registry import transfer_pairs

    step = max(1, min(int(max_pairs), transfer_pairs()))
    pinned = bool(config.get("pinned-output"))
    for at in range(0, int(i.shape[0]), step):
        batch = (i[at:at + step], j[at:at + step], None if d is None else d[at:at + step])
        # a reused page-locked block where the pool has one free (host_pool: no pinning, no first touches)
        yield pooled_to_host(*batch) or to_host(*batch, pinned=pinned)


def sorted_to_host(i, j, d, max_pairs: int):
    """Device arrays already sorted by (i, j), checked on the device, to the host as ``SortedRun`` batches
    (:func:`host_batches`)."""
    from .registry import SortedRun

    cp = cupy()
    # the promise checked where it is cheap (one pass on the device): strictly increasing (i, j)
    if i.shape[0] > 1 and bool(cp.any((i[1:] < i[:-1]) | ((i[1:] == i[:-1]) & (j[1:] <= j[:-1])))):
        raise RuntimeError("pairs sorted on the device are out of order (a bug in daskjoin: please report it)")
    for batch in host_batches(i, j, d, max_pairs):
        yield SortedRun(batch)


#: one output copy larger than this goes to pageable memory through the staging buffers (host_copy), whatever
#: ``pinned-output`` says: pinning fresh memory costs ~0.5 s per GiB, staged copies ~0.1 s, and a whole join's
#: pairs (``pairs()``) are too large for CuPy's pinned pool to have a block ready (bounded batches are smaller)
PINNED_OUTPUT_LIMIT = 1 << 30


def pinned_output(pairs: int) -> bool:
    """Whether ``pairs`` pairs (20 bytes each with their distance) go to pinned memory: ``pinned-output`` and at
    most ``PINNED_OUTPUT_LIMIT`` bytes."""
    from .. import config

    return bool(config.get("pinned-output")) and 20 * int(pairs) <= PINNED_OUTPUT_LIMIT


#: Reads larger than this go to pageable memory (pinning very large buffers costs more than it saves).
#: Stream for stream, copies out of the device stay pinned at any size (``any_size``).
PINNED_READ_LIMIT = 4 << 30


def _pinned_size(nbytes: int) -> int:
    """``nbytes`` rounded up to one of 8 sizes per power of two, so CuPy's pinned pool reuses blocks across tasks."""
    step = max(512, 1 << max(0, nbytes.bit_length() - 4))
    return -(-nbytes // step) * step


def pinned_empty(shape, dtype, *, any_size: bool = False) -> np.ndarray:
    """An uninitialised numpy array in pinned host memory from CuPy's pool (numpy.empty where that fails).

    Sizes are rounded (:func:`_pinned_size`) so that the pool's blocks are reused across tasks of
    different output sizes instead of piling up.  Beyond ``PINNED_READ_LIMIT`` the array is
    pageable unless ``any_size`` (device-to-host outputs, where pageable memory is 20x slower).
    The memory goes back to the pool as soon as the array is garbage: a caller that starts an
    asynchronous copy into or out of it (``set``, ``get(out=..., blocking=False)``) must keep the
    array alive until that copy is done (CuPy tracks only its own staging copies).
    """
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = count * dtype.itemsize
    if nbytes == 0 or (nbytes > PINNED_READ_LIMIT and not any_size):
        return np.empty(shape, dtype)
    try:
        mem = cupy().cuda.alloc_pinned_memory(_pinned_size(nbytes))
        out = np.frombuffer(mem, dtype, count).reshape(shape)
    except Exception:  # noqa: BLE001 - no CUDA, or pinned memory exhausted: pageable memory works too
        return np.empty(shape, dtype)
    return out if out.flags.writeable and out.flags.c_contiguous else np.empty(shape, dtype)


def free_device_memory() -> None:
    """Give cached device blocks back (after an error, or between large tasks)."""
    try:
        cp = cupy()
        cp.get_default_memory_pool().free_all_blocks()
        cp.get_default_pinned_memory_pool().free_all_blocks()
    except Exception:  # noqa: BLE001
        pass


def device_budget_bytes(fraction: float = 0.5) -> int:
    """A share of the device's free memory (at most of the task's memory budget), for sizing output batches
    (smaller in a task retried after running out of memory: :func:`daskjoin.kernels.memory.share`)."""
    from .memory import device_limit, share

    cp = cupy()
    free, _total = cp.cuda.runtime.memGetInfo()
    free += rmm_pool_reserve() or cupy_pool_cached()
    limit = device_limit()  # the task's memory budget: a task planned small stays small on the device too
    # fractions of the free memory leave room for whatever else the device holds; within a budget the
    # largest buffer (output pairs and their sort) may take 80% of it, the rest is for points and index
    wanted = free * fraction if not limit else min(free * fraction, LIMITED_SHARE * limit)
    return int(wanted * share())


def rmm_pool_reserve() -> int:
    """Device memory an RMM pool holds for this process where CuPy allocates through RMM (dask-cuda's
    ``rmm_pool_size``): reserved up front, so not free to cudaMemGetInfo, yet free to this task's buffers.
    The whole pool is counted: free at a task's start (the last task's buffers went back to it), high by
    what this task already holds when asked later; a batch sized too large then runs out of memory, and
    the task is run again with half the memory (:mod:`.memory`).  0 without RMM."""
    rmm = sys.modules.get("rmm")
    if rmm is None:
        return 0
    cp = cupy()
    allocator = getattr(cp.cuda, "get_allocator", lambda: None)()
    if not str(getattr(allocator, "__module__", "")).startswith("rmm"):
        return 0
    try:
        resource = rmm.mr.get_current_device_resource()
        for _ in range(8):  # through adaptors (logging, statistics) to the pool
            if isinstance(resource, rmm.mr.PoolMemoryResource):
                return int(resource.pool_size())
            resource = getattr(resource, "upstream_mr", None) or resource.get_upstream()
    except Exception:  # noqa: BLE001 - another resource kind, or an rmm without these calls: no reserve known
        return 0
    return 0


def cupy_pool_cached() -> int:
    """Device memory CuPy's default pool holds free for this process (the blocks of arrays already freed) where
    CuPy allocates through it: not free to cudaMemGetInfo, yet free to this task's buffers (the pool gives its
    cached blocks back and retries when a new block does not fit).  Without it a second join in one process
    saw the first one's freed buffers as taken: every pair of 1M x 128 exponential data (865M pairs) went to the
    host unsorted in row groups, 3.4 s where a first join held and sorted them on the device in 2.5 s (H200).
    Free parts of blocks that a live array split are counted too: they serve allocations that fit them, but CuPy
    cannot give them back, so a buffer sized past what really fits runs out of memory and the task is retried
    with half the memory (:mod:`.memory`), as with RMM's pool (:func:`rmm_pool_reserve`)."""
    cp = cupy()
    pool = cp.get_default_memory_pool()
    allocator = getattr(cp.cuda, "get_allocator", lambda: None)()
    if getattr(allocator, "__self__", None) is not pool:
        return 0
    return int(pool.free_bytes())


#: the share of a task's memory budget its largest device buffer may take (the rest: points and index)
LIMITED_SHARE = 0.8


def as_float64_contiguous(x) -> "object":
    cp = cupy()
    return cp.ascontiguousarray(cp.asarray(x, dtype=cp.float64))


def empty_pairs(with_distance: bool):
    return np.zeros(0, np.int64), np.zeros(0, np.int64), (np.zeros(0, np.float32) if with_distance else None)
