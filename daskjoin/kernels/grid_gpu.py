"""``grid`` method, GPU driver: the ε-grid join of ``cuda/grid.cu`` run through CuPy.

Same geometry as the CPU driver (:func:`.grid_geometry.choose_grid`: at most 6
indexed dimensions, those of largest spread; the rest are checked in the exact
distance), index built on the GPU by sorting cell ids, then a count pass, a
prefix sum and a fill pass over *items* (query point, lane).  Options:

- ``threads_per_point``: k threads share a query point's neighbour rows;
- ``sort_by_workload``: items ordered by their candidate count, heaviest first;
- ``work_queue``: warps take items from an atomic counter (a persistent grid).

Outputs larger than ``max_pairs`` come out in batches of items, each of at most ``max_pairs`` pairs.
"""
from __future__ import annotations

import functools
import threading

import numpy as np

from .exact import eps_squared
from .gpu_common import (cupy, device_budget_bytes, kernel, output_args, pinned_empty, pinned_output, sort_room,
                         sorted_on_device, sorted_to_host, to_host)
from .grid_geometry import MAX_CELL_ID, DENSE_CELLS_PER_POINT, PATTERNS, boundary_slack, choose_grid
from .registry import split_batch, transfer_pairs
from .shares import point_range

BLOCK = 256
MAX_INDEXED = 6
OUTPUT_BYTES_PER_PAIR = 20
#: device bytes per pair a sort on the device adds (key and order, 8 each; the gathered copies reuse freed ones)
SORT_BYTES_PER_PAIR = 36
#: Fill passes with more pairs than twice this run in slices whose copies to the host overlap the
#: next slice's fill (a slice of 1M pairs is 20 MB, enough for the copy to run at full PCIe speed).
OVERLAP_SLICE_PAIRS = 1 << 20
MAX_SLICES = 8


_STREAMS = threading.local()


def _side_streams():
    """Two fill streams and a copy stream per device and thread, kept for the process's life.

    Kept, not made per join: CuPy's pool keeps a separate arena per stream and never frees a
    dropped stream's, and fresh arenas mean fresh cudaMalloc calls (implicit synchronisation)
    in the first launches of every join.
    """
    by_device = getattr(_STREAMS, "by_device", None)
    if by_device is None:
        by_device = _STREAMS.by_device = {}
    device = cupy().cuda.runtime.getDevice()
    if device not in by_device:
        by_device[device] = [cupy().cuda.Stream(non_blocking=True) for _ in range(3)]
    return by_device[device]


def _synchronize_all(streams) -> None:
    """Wait for every stream, even when waiting for one raises (the first error is raised after)."""
    error = None
    for stream in streams:
        try:
            stream.synchronize()
        except Exception as exc:  # noqa: BLE001 - re-raised below, once all were waited for
            error = error or exc
    if error is not None:
        raise error


def on_device(x):
    """Host or device rows on the device, in their own dtype (host rows through ``host_copy.to_device``)."""
    cp = cupy()
    if isinstance(x, cp.ndarray):
        return x
    from .host_copy import to_device

    return to_device(np.asarray(x))


def to_device64(x):
    """Host or device rows as a contiguous float64 device array (copied in their own dtype, cast there)."""
    cp = cupy()
    return cp.ascontiguousarray(on_device(x).astype(cp.float64, copy=False))


def device_bounds(*sides):
    """Per-dimension min and max over the non-empty sides (device arrays), as float64 numpy."""
    cp = cupy()
    parts = [x for x in sides if x is not None and x.shape[0]]
    if not parts:
        d = next(x.shape[1] for x in sides if x is not None)
        return np.zeros(d), np.zeros(d)
    extremes = [column_extremes(x) for x in parts]
    lo = cp.min(cp.stack([e[0] for e in extremes]), axis=0).get()
    hi = cp.max(cp.stack([e[1] for e in extremes]), axis=0).get()
    return lo.astype(np.float64), hi.astype(np.float64)


#: rows a thread of ``column_extremes`` reads down its column
_EXTREMES_ROWS = 256


@functools.lru_cache(maxsize=None)
def _extremes_kernel():
    return cupy().ElementwiseKernel(
        "raw T x, int64 n, int64 d, int64 rows", "T lo, T hi",
        """
        const long long c = i % d, r0 = (i / d) * rows, r1 = min(n, r0 + rows);
        T a = x[r0 * d + c], b = a;
        for (long long r = r0 + 1; r < r1; ++r) {
            const T v = x[r * d + c];
            a = v < a ? v : a;
            b = v > b ? v : b;
        }
        lo = a;
        hi = b;
        """, "daskjoin_column_extremes")


def column_extremes(x):
    """Per-column min and max of a non-empty C-contiguous ``(n, d)`` device array (NaN-free, as every input is).

    Threads side by side read neighbouring columns of a run of rows, then the runs' extremes are reduced:
    CuPy's ``x.min(axis=0)`` gives each column to one block and took 0.26 s on 10M x 128 float64 (H100)."""
    cp = cupy()
    x = cp.ascontiguousarray(x)
    n, d = x.shape
    runs = -(-n // _EXTREMES_ROWS)
    lo, hi = cp.empty((runs, d), x.dtype), cp.empty((runs, d), x.dtype)
    _extremes_kernel()(x, np.int64(n), np.int64(d), np.int64(_EXTREMES_ROWS), lo, hi)
    return lo.min(axis=0), hi.max(axis=0)


class _DeviceIndex:
    """Points of one side sorted by (cell id, last indexed coordinate, row), on the device."""

    def __init__(self, x, spec):
        cp = cupy()
        x = to_device64(x)
        n = x.shape[0]
        self.n = n
        if spec.k == 0 or n == 0:
            ids = cp.zeros(n, cp.int64)
            perm = cp.arange(n, dtype=cp.int64)
        else:
            dims = cp.asarray(spec.dims)
            cells = cp.floor((x[:, dims] - cp.asarray(spec.origin)) / cp.asarray(spec.widths)).astype(cp.int64)
            cells = cp.clip(cells, 0, cp.asarray(spec.ncells) - 1)
            ids = (cells * cp.asarray(spec.strides)).sum(axis=1)
            # stable sorts: by row (identity), then last indexed coordinate, then cell id
            by_last = cp.argsort(x[:, int(spec.dims[-1])], kind="stable")
            perm = by_last[cp.argsort(ids[by_last], kind="stable")]
        self.points = cp.ascontiguousarray(x[perm])
        self.perm = perm.astype(cp.int64)
        self.cell = cp.ascontiguousarray(ids[perm])
        if n:
            flag = cp.flatnonzero(self.cell[1:] != self.cell[:-1]) + 1
            starts = cp.concatenate([cp.zeros(1, cp.int64), flag.astype(cp.int64)])
        else:
            starts = cp.zeros(0, cp.int64)
        self.cell_ids = cp.ascontiguousarray(self.cell[starts]) if n else cp.zeros(0, cp.int64)
        self.cell_start = cp.concatenate([starts, cp.asarray([n], dtype=cp.int64)])
        total = spec.total_cells
        if spec.k and total <= max(DENSE_CELLS_PER_POINT * n, 1 << 16):
            # first sorted point with cell id >= c, for every c (look-ups reach at most id total)
            self.dense = cp.searchsorted(self.cell, cp.arange(total + 2, dtype=cp.int64), side="left").astype(cp.int64)
            self.ndense = int(self.dense.shape[0])
        else:
            self.dense = cp.zeros(1, cp.int64)  # unused: ndense = 0 selects binary search over cell ids
            self.ndense = 0


class GpuGridJoin:
    """A prepared GPU grid join: count, pairs or batches, pairs on the host in original row ids."""

    # Defaults from benchmarks/bench_gpu.py --variants on an H200 (2M points, 2-d and 6-d uniform):
    # one thread per point with a work queue was within 3% of the best variant on both;
    # sorting by workload cost 20-50% at 6-d (its extra pass) and gained nothing at 2-d.
    def __init__(self, a, b, eps: float, *, threads_per_point: int = 1, sort_by_workload: bool = False,
                 work_queue: bool = True, max_dims: int = MAX_INDEXED, share=None, pattern: str = "lid-unicomp"):
        """``share``: ``(k, parts)``, only the pairs of the k-th of ``parts`` query shares (:mod:`.shares`:
        runs of sorted query points of about equal work; the shares partition the pairs).
        ``pattern``: the self-join's cell access pattern (:data:`.grid_geometry.PATTERNS`)."""
        cp = cupy()
        self.selfjoin = b is None
        if pattern not in PATTERNS:
            raise ValueError(f"pattern must be one of {tuple(PATTERNS)}, got {pattern!r}")
        self._mode = PATTERNS[pattern] if self.selfjoin else 0
        a = to_device64(a)
        b = None if b is None else to_device64(b)
        lo, hi = device_bounds(a, b)
        self.spec = choose_grid(lo, hi, eps, max_dims=min(max_dims, 8))
        assert self.spec.total_cells <= MAX_CELL_ID
        self.eps2 = eps_squared(eps)
        self.tpp = int(threads_per_point)
        self.work_queue = bool(work_queue)
        self.data = _DeviceIndex(b if b is not None else a, self.spec)
        self.query = self.data if b is None else _DeviceIndex(a, self.spec)
        first, last = point_range(self.query.cell_start, share, cp, self.selfjoin) if share is not None \
            else (0, self.query.n)
        self.nitems = (last - first) * self.tpp
        self.order = cp.arange(first, last, dtype=cp.int64)  # the query points, by sorted position
        self._geometry = (
            cp.asarray(self.spec.dims, dtype=cp.int32), cp.asarray(self.spec.origin, dtype=cp.float64),
            cp.asarray(self.spec.widths, dtype=cp.float64), cp.asarray(self.spec.ncells, dtype=cp.int64),
            cp.asarray(self.spec.strides, dtype=cp.int64), cp.asarray(boundary_slack(self.spec), dtype=cp.float64),
        )
        self._counts = None
        if sort_by_workload and self.nitems:
            work = self._launch(2, 0, self.nitems)
            per_point = work.reshape(-1, self.tpp).sum(axis=1)
            self.order = self.order[cp.argsort(-per_point, kind="stable")].astype(cp.int64)

    def _launch(self, mode, lo, hi, offsets=None, out=(None, None, None)):
        cp = cupy()
        q, dd = self.query, self.data
        counts = cp.empty(max(hi - lo, 1), cp.int32) if mode != 1 else cp.empty(1, cp.int32)
        queue = cp.full(1, lo, dtype=cp.uint64)
        if self.work_queue:
            sms = cp.cuda.Device().attributes["MultiProcessorCount"]
            grid = (max(1, min(sms * 8, -(-(hi - lo) // BLOCK))),)
        else:
            grid = (max(1, -(-(hi - lo) // BLOCK)),)
        args = (
            q.points, q.perm, q.cell, np.int64(q.n),
            dd.points, dd.perm, np.int64(dd.n),
            dd.cell_ids, dd.cell_start, np.int64(dd.cell_ids.shape[0]),
            dd.dense, np.int64(dd.ndense),
            np.int32(q.points.shape[1] if q.n else dd.points.shape[1] if dd.n else 1), np.int32(self.spec.k),
            *self._geometry,
            np.float64(self.eps2), np.int32(self._mode), np.int32(self.tpp),
            self.order, queue, np.int32(self.work_queue),
            np.int32(mode), counts, *output_args(offsets, out), np.int64(lo), np.int64(hi),
        )
        if hi > lo:
            kernel("grid.cu", "grid_join")(grid, (BLOCK,), args)
        return counts[: hi - lo]

    def work(self) -> np.ndarray:
        """Candidates each query point decides (its lanes summed), on the host: the work report."""
        cp = cupy()
        if not self.nitems:
            return np.zeros(0, np.int64)
        return cp.asnumpy(self._launch(2, 0, self.nitems).astype(cp.int64).reshape(-1, self.tpp).sum(axis=1))

    def counts(self):
        """Pair count of every item (device array)."""
        if self._counts is None:
            self._counts = self._launch(0, 0, self.nitems) if self.nitems else cupy().zeros(0, cupy().int32)
        return self._counts

    def count(self) -> int:
        return int(self.counts().sum(dtype=cupy().int64))

    def _fill(self, lo: int, hi: int, with_distance: bool, device: bool = False):
        cp = cupy()
        counts = self.counts()[lo:hi]
        offsets = cp.zeros(hi - lo + 1, cp.int64)
        cp.cumsum(counts, dtype=cp.int64, out=offsets[1:])
        size = int(offsets[-1])
        out = (cp.empty(size, cp.int64), cp.empty(size, cp.int64), cp.empty(size, cp.float32))
        pinned = pinned_output(size)
        if not device and pinned and size >= 2 * OVERLAP_SLICE_PAIRS:
            return self._fill_overlapped(lo, hi, offsets, size, out, with_distance)
        if size:
            self._launch(1, lo, hi, offsets=offsets, out=out)
        oi, oj, od = out
        if device:
            return oi, oj, (od if with_distance else None)
        return to_host(oi, oj, od if with_distance else None, pinned=pinned)

    def _fill_overlapped(self, lo: int, hi: int, offsets, size: int, out, with_distance: bool):
        """Fill in slices of items and copy each slice's pairs to pinned host memory on a side
        stream while later slices fill.  Slices alternate between two streams, so one slice's
        tail of long items runs beside the next slice's start instead of idling the GPU."""
        cp = cupy()
        n_slices = int(min(MAX_SLICES, size // OVERLAP_SLICE_PAIRS))
        targets = cp.asarray(np.arange(1, n_slices, dtype=np.int64) * (size // n_slices))
        cut_items = cp.searchsorted(offsets, targets, side="left")
        cuts = cp.stack([cut_items, offsets[cut_items]]).get() if n_slices > 1 else np.zeros((2, 0), np.int64)
        items = [0, *cuts[0].tolist(), hi - lo]
        starts = [0, *cuts[1].tolist(), size]
        moved = out if with_distance else out[:2]
        # pinned at any size (pageable memory would make every copy synchronous and 20x slower)
        host = tuple(pinned_empty(size, a.dtype, any_size=True) for a in moved)
        *fills, copy = _side_streams()
        ready = cp.cuda.get_current_stream().record()  # offsets and output buffers
        for stream in fills:
            stream.wait_event(ready)
        try:
            for k, (a, b, p0, p1) in enumerate(zip(items[:-1], items[1:], starts[:-1], starts[1:])):
                if p1 <= p0:
                    continue
                stream = fills[k % 2]
                with stream:
                    self._launch(1, lo + a, lo + b, offsets=offsets[a:], out=out)
                    copy.wait_event(stream.record())
                with copy:
                    for d, h in zip(moved, host):
                        d[p0:p1].get(out=h[p0:p1], blocking=False)
        finally:  # also on errors: nothing may still read `out` or write `host` once they are freed
            _synchronize_all((*fills, copy))
        return host if with_distance else (*host, None)

    def pairs(self, with_distance: bool = True, device: bool = False):
        """All pairs; when they would not fit the device's free memory, filled and moved in batches."""
        fits = max(1, device_budget_bytes(0.4) // OUTPUT_BYTES_PER_PAIR)
        if device or self.count() <= fits:
            return self._fill(0, self.nitems, with_distance, device)
        parts = list(self.batches(fits, with_distance))
        return tuple(None if parts[0][t] is None else np.concatenate([p[t] for p in parts]) for t in range(3))

    def batches(self, max_pairs: int, with_distance: bool = True):
        """Batches of at most ``max_pairs`` pairs; sorted by (i, j) on the device where all pairs fit it.

        The task sorts every partition by (i, j); a radix sort here costs milliseconds where
        the host's costs seconds, and the task then only checks the order.  Device memory is
        bounded by the device budget; host batches by ``max_pairs``.
        """
        total = self.count()
        if 0 < total <= sort_room():
            yield from self._sorted_batches(total, max_pairs, with_distance)
            return
        cp = cupy()
        counts = self.counts()
        cum = cp.cumsum(counts, dtype=cp.int64).get() if self.nitems else np.zeros(0, np.int64)
        # a fill's device output stays within the device budget, and its pinned host copy within one row
        # group, whatever the host batches may hold
        step = max(1, min(int(max_pairs), device_budget_bytes(0.4) // OUTPUT_BYTES_PER_PAIR, transfer_pairs()))
        lo = 0
        done = 0
        while lo < self.nitems:
            hi = int(np.searchsorted(cum, done + step, side="right"))
            hi = min(max(hi, lo + 1), self.nitems)
            # one item (query point, lane) with more pairs (at most len(b)) is sliced on the host
            yield from split_batch(self._fill(lo, hi, with_distance), max_pairs)
            done = int(cum[hi - 1])
            lo = hi

    def _sorted_batches(self, total: int, max_pairs: int, with_distance: bool):
        # local row numbers of one partition stay below 2**32: one packed key, one radix sort
        yield from sorted_to_host(*sorted_on_device(list(self._fill(0, self.nitems, with_distance, device=True))),
                                  max_pairs)
