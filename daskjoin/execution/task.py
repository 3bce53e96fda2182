"""What one task does: read its rows, run the kernel, report pairs in original row ids."""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import config
from ..kernels import get_kernel, host_allocator, resolve_backend
from ..planning.plan import Partition, Plan
from ..planning.sorted_copy import SortedCopy

PAIR_ROW_BYTES = 20


@dataclass(frozen=True, eq=False)
class JoinJob:
    """What every task of one join shares (shipped once with the graph)."""

    reader_a: object
    reader_b: object
    selfjoin: bool
    eps: float
    method: str
    backend: str
    with_distance: bool
    gpu_options: tuple = ()
    inputs_token: str = ""  # fingerprint of Zarr inputs: changed data, new task keys

    @classmethod
    def from_plan(cls, plan: Plan, with_distance: bool = True) -> "JoinJob":
        return cls(plan.reader_a, plan.reader_b, plan.selfjoin, plan.eps, plan.method, plan.backend, with_distance,
                   plan.gpu_options, plan.inputs_token)

    def in_memory_bytes(self) -> int:
        """Bytes of array data the job carries (in-memory inputs, sorted-copy ids and key index)."""
        total = 0
        for reader in (self.reader_a, self.reader_b):
            for obj in (reader, getattr(reader, "points", None)):
                for name in ("data", "ids", "key_index"):
                    arr = getattr(obj, name, None)
                    total += getattr(arr, "nbytes", 0) if arr is not None else 0
        return int(total)

    def kernel(self):
        """This worker's kernel: 'auto' resolved here; GPU tuning options only where it runs on a GPU."""
        backend = resolve_backend(self.backend)
        return get_kernel(self.method, backend, **(dict(self.gpu_options) if backend == "gpu" else {}))


def meta_frame(with_distance: bool = True) -> pd.DataFrame:
    cols = {"i": np.zeros(0, np.int64), "j": np.zeros(0, np.int64)}
    if with_distance:
        cols["dist"] = np.zeros(0, np.float32)
    return pd.DataFrame(cols)


def _read(reader, rows: tuple[int, int], empty=None):
    """The rows' points and their original ids: an id array (sorted copies) or the first row's id.

    ``empty(shape, dtype)`` allocates the points read from Zarr (pinned memory for a GPU kernel).
    """
    start, stop = rows
    if isinstance(reader, SortedCopy):
        return reader.read(start, stop, empty)
    return reader.read(start, stop, empty), start


def _to_original(local: np.ndarray, ids) -> np.ndarray:
    """Local row numbers to original ids: an offset added in place, or a look-up in an id array."""
    if isinstance(ids, (int, np.integer)):
        if ids:
            local += ids
        return local
    return ids[local]


def _set_threads() -> None:
    """Give Numba the cores of this worker divided among its task threads (no oversubscription)."""
    import numba

    wanted = config.get("numba-threads")
    if wanted is None:
        try:
            from distributed import get_worker

            worker_threads = get_worker().state.nthreads
        except (ImportError, ValueError, AttributeError):
            return
        wanted = max(1, (os.cpu_count() or 1) // max(1, worker_threads))
    numba.set_num_threads(max(1, min(int(wanted), numba.config.NUMBA_NUM_THREADS)))


class _Sides:
    """The rows of one partition, read once."""

    def __init__(self, job: JoinJob, part: Partition):
        self.job, self.part = job, part
        self.kernel = job.kernel()
        empty = host_allocator(self.kernel.backend)
        self.pa, self.ia = _read(job.reader_a, part.a, empty)
        if part.b is not None:
            self.pb, self.ib = _read(job.reader_b if job.reader_b is not None else job.reader_a, part.b, empty)

    def _globalize(self, li, lj, dist, cross: bool):
        ids_b = self.ib if cross else self.ia
        i, j = _to_original(li, self.ia), _to_original(lj, ids_b)
        if self.job.selfjoin and not (isinstance(self.ia, int) and isinstance(ids_b, int)):
            # sorted copies reorder rows: restore i < j (row offsets keep the kernels' order:
            # a chunk-pair task's first block always precedes its second)
            i, j = np.minimum(i, j), np.maximum(i, j)
        return i, j, dist

    def batches(self, max_pairs: int | None):
        """(i, j, dist) arrays in global ids; bounded batches when ``max_pairs`` is given."""
        kernel = self.kernel
        eps, wd = self.job.eps, self.job.with_distance
        if self.part.self_part:
            if max_pairs is None:
                yield self._globalize(*kernel.self_join(self.pa, eps, wd), cross=False)
            else:
                for got in kernel.self_batches(self.pa, eps, max_pairs, wd):
                    yield self._globalize(*got, cross=False)
        if self.part.b is not None:
            if max_pairs is None:
                yield self._globalize(*kernel.cross_join(self.pa, self.pb, eps, wd), cross=True)
            else:
                for got in kernel.cross_batches(self.pa, self.pb, eps, max_pairs, wd):
                    yield self._globalize(*got, cross=True)

    def count(self) -> int:
        kernel = self.kernel
        total = kernel.self_count(self.pa, self.job.eps) if self.part.self_part else 0
        if self.part.b is not None:
            total += kernel.cross_count(self.pa, self.pb, self.job.eps)
        return int(total)


def to_frame(i, j, dist) -> pd.DataFrame:
    cols = {"i": i, "j": j}
    if dist is not None:
        cols["dist"] = dist
    return pd.DataFrame(cols, copy=False)


def describe_part(part) -> str:
    """Which partition a task ran, in the words of its plan: ``partition 3 (A rows [0, 1000) x rows [1000, 2000))``."""
    first, second = (getattr(part, "a", None), getattr(part, "b", None)) if hasattr(part, "a") else \
        (getattr(part, "r", None), getattr(part, "s", None))
    rows = "" if first is None else f" (rows [{first[0]}, {first[1]})" + (
        f" x [{second[0]}, {second[1]})" if second is not None else "") + ")"
    return f"partition {getattr(part, 'index', '?')}{rows}"


def _freeing_gpu_on_error(func):
    """A failed task gives its cached GPU memory back and says which partition failed, then raises its own error.

    The partition is added as a note on the exception (kept when it travels back to the
    client), so one line can say what failed without a worker traceback.
    """
    import functools

    @functools.wraps(func)
    def run(part, *args, **kwargs):
        try:
            return func(part, *args, **kwargs)
        except Exception as exc:
            import sys

            if "cupy" in sys.modules:
                from ..kernels.gpu_common import free_device_memory

                free_device_memory()
            if hasattr(exc, "add_note"):
                exc.add_note(f"in {describe_part(part)}")
            raise

    return run


@_freeing_gpu_on_error
def partition_frame(part: Partition, job: JoinJob) -> pd.DataFrame:
    """The pairs of one partition as a DataFrame (the body of each ``dd.from_map`` task)."""
    _set_threads()
    frames = [to_frame(*got) for got in _Sides(job, part).batches(None)]
    if not frames:
        return meta_frame(job.with_distance)
    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


@_freeing_gpu_on_error
def partition_count(part: Partition, job: JoinJob) -> int:
    """The exact pair count of one partition, without materialising pairs."""
    _set_threads()
    return _Sides(job, part).count()


@_freeing_gpu_on_error
def partition_to_parquet(part: Partition, job: JoinJob, out_dir: str) -> dict:
    """Write one partition's pairs to ``out_dir/part-NNNNN.parquet`` atomically; return its manifest entry."""
    from ..io.parquet_out import write_partition

    _set_threads()
    max_pairs = max(1, config.parse_bytes(config.get("row-group-bytes")) // PAIR_ROW_BYTES)
    bounded = part.est_pairs > max_pairs
    batches = _Sides(job, part).batches(max_pairs if bounded else None)
    return write_partition(out_dir, part.index, batches, job.with_distance)
