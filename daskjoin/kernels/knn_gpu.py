"""kNN-join, GPU drivers (CuPy): ``cuda/knn.cu``, one thread per query, the CPU drivers' logic and protocol.

``KnnGridGpu`` builds the block's grid index on the device (the cells of the CPU driver's
:class:`~.knn.GridGeometry`, points sorted by cell id as in the ε-join's GPU grid) and searches there;
``KnnBruteGpu`` scans every row of the block, from 4 dimensions through the float32 GEMM filter of
:mod:`.knn_gemm`.  ``rows`` makes, searches and finishes the lists on the device (``knn_finish``) and
copies the output rows once.  ``search`` takes running lists from the host and gives them back, so a
query's lists continue across blocks and backends exactly as on the CPU: the same decisions
(float64, dimension order, no FMA contraction, ties by the smaller ``j``), the same result.
"""
from __future__ import annotations

import numpy as np

from .exact import error_constants
from .gpu_common import cupy, device_budget_bytes, kernel
from .knn import SEED_MIN_K, GridGeometry

THREADS = 128


#: shared memory for the brute kernel's tile of data rows (float64)
TILE_BYTES = 32 * 1024
#: the GEMM-form brute force: queries per product tile (threads of the filter) and the tile's bytes at most
GEMM_QUERIES = 1 << 18
GEMM_TILE_BYTES = 2 << 30
#: the brute driver's filters (``KnnBruteGpu``)
FILTERS = ("auto", "fp32", "fp16", "int8")


def _launch(name: str, m: int, args, shared: int = 0) -> None:
    kernel("knn.cu", name)(((m + THREADS - 1) // THREADS,), (THREADS,), args, shared_mem=shared)


def _rows_on_device(hd, hj, query_ids):
    """``finish`` on the device (``knn_finish``, a thread per query): rows (i, j, value) of full lists, per
    query in order of j, to the host.  The lists are consumed.

    The rows go to pageable host memory through :func:`~.host_copy.to_pageable` (reused pinned staging
    buffers, pages first touched by all cores) while ``i`` is written on the host as the device finishes.
    Into fresh pageable memory directly (``get``) the same rows took 0.22 s (H100, 2M x 3-d, k = 16:
    768 MB); pinned output arrays 0.05 s where CuPy's pool reuses them, but 0.48 s for the whole kernel
    where the caller keeps its earlier rows (fresh pinned memory each time).
    """
    from .host_copy import repeat_each, to_pageable
    from .knn import NO_ID
    from .registry import KNN_ROW_VALUE

    cp = cupy()
    m, k = hd.shape
    if m and bool((hj == NO_ID).any()):
        raise RuntimeError("a kNN query found fewer than k neighbours (a bug in daskjoin: please report it)")
    j = cp.empty(m * k, cp.int64)
    value = cp.empty(m * k, cp.uint64)  # little-endian record: dist (float32), then rank (int32)
    if m:
        _launch("knn_finish", m, (hd, hj, np.int32(m), np.int32(k), j, value))
    # the rows leave as sorted runs that nothing checks again pair by pair (execution/pair_order): j strictly
    # increasing within each query's list, checked on the device (queued now, read after the copy)
    unsorted = cp.any(j.reshape(m, k)[:, 1:] <= j.reshape(m, k)[:, :-1]) if m and k > 1 else None
    i = repeat_each(query_ids, k)  # on the host while the device finishes the lists
    out_j, out_value = to_pageable(j, value)
    if unsorted is not None and bool(unsorted):
        raise RuntimeError("a kNN query's rows are out of order (a bug in daskjoin: please report it)")
    return i, out_j, out_value.view(KNN_ROW_VALUE)


def _query_order_device(q, host):
    """Query rows ordered by their cell (on the device; the order only speeds the search up)."""
    cp = cupy()
    spec = host.spec
    if spec.k == 0:
        return cp.arange(q.shape[0], dtype=cp.int64)
    lid = cp.zeros(q.shape[0], cp.int64)
    for m in range(spec.k):
        c = cp.floor((q[:, int(spec.dims[m])] - float(spec.origin[m])) / float(spec.widths[m]))
        lid += cp.clip(c, 0, int(spec.ncells[m]) - 1).astype(cp.int64) * int(spec.strides[m])
    return cp.argsort(lid)


def _lists_to_device(best_d2, best_j):
    cp = cupy()
    return cp.asarray(best_d2), cp.asarray(best_j)


def _lists_back(dev_d2, dev_j, best_d2, best_j) -> None:
    dev_d2.get(out=best_d2)
    dev_j.get(out=best_j)


class _ScanDriver:
    """What the GPU drivers whose ``_run(queries, query_ids, hd, hj, exclude_self)`` searches device lists share."""

    backend = "gpu"

    def search(self, queries, query_ids, best_d2, best_j, exclude_self: bool) -> None:
        """Running lists from the host, searched on the device, given back (the CPU drivers' protocol)."""
        if not len(queries) or not self.n:
            return
        hd, hj = _lists_to_device(best_d2, best_j)
        self._run(queries, query_ids, hd, hj, exclude_self)
        _lists_back(hd, hj, best_d2, best_j)

    def rows(self, queries, query_ids, exclude_self: bool):
        """As :meth:`KnnGridGpu.rows`."""
        from .knn import NO_ID

        cp = cupy()
        m = len(queries)
        hd, hj = cp.full((m, self.k), cp.inf), cp.full((m, self.k), NO_ID, dtype=cp.int64)
        self._run(queries, query_ids, hd, hj, exclude_self)
        return _rows_on_device(hd, hj, query_ids)


class KnnBruteGpu(_ScanDriver):
    """``brute`` on the GPU: every row of the block against every query, one thread per query."""

    def __init__(self, data, k: int, first_id: int = 0, filter: str = "auto"):
        """``filter``: "fp16" or "int8" (the tensor cores, :mod:`.knn_tc`), "fp32" (the float32 GEMM of
        :mod:`.knn_gemm`), or "auto" (the tensor cores from ``knn_tc.TC_FROM_D`` dimensions).  Where the
        tensor cores are not asked for or the grid cannot hold the data, the GEMM runs from ``GEMM_MIN_D``
        dimensions and the direct search below.  Every filter gives the same lists."""
        import os

        from .knn_gemm import GEMM_MIN_D, Shifted, box_centre
        from .knn_tc import TC_FROM_D, TcSearch

        if filter not in FILTERS:
            raise ValueError(f"kNN brute filter must be one of {FILTERS}, got {filter!r}")
        cp = cupy()
        self.data = cp.ascontiguousarray(cp.asarray(data, dtype=cp.float64))
        self.k, self.first_id = int(k), int(first_id)
        n, d = self.data.shape if self.data.ndim == 2 else (0, 0)
        self.n = int(n)
        self.gemm = self.tc = None
        if n and (filter in ("fp16", "int8") or (filter == "auto" and TC_FROM_D is not None and d >= TC_FROM_D)):
            tc = TcSearch(self.data, "auto" if filter == "auto" else filter)
            self.tc = tc if tc.usable else None
        if self.tc is None and n and d >= GEMM_MIN_D:  # float32 products filter the rows (kernels/knn_gemm.py)
            if os.environ.get("CUPY_TF32", "0") not in ("", "0"):
                raise RuntimeError("CUPY_TF32 is set: TF32 products break the kNN filter's error bound; unset it")
            self.centre = box_centre(self.data, cp)
            self.gemm = Shifted(self.data, self.centre, cp)
            self.c1, self.c2 = error_constants(d)

    def _run(self, queries, query_ids, hd, hj, exclude_self: bool) -> None:
        cp = cupy()
        m, n = len(queries), int(self.data.shape[0])
        if not m or not n:
            return
        q = cp.ascontiguousarray(cp.asarray(queries, dtype=cp.float64))
        ids = cp.asarray(np.ascontiguousarray(query_ids, np.int64))
        d = int(q.shape[1])
        if self.tc is not None:
            self.tc.search(q, ids, hd, hj, self.first_id, exclude_self, self.k)
            return
        if self.gemm is not None:
            from .knn_gemm import Shifted

            shifted = Shifted(q, self.centre, cp)
            if shifted.fits and self.gemm.fits:
                self._run_gemm(q, shifted, ids, hd, hj, exclude_self)
                return
        tile = max(1, TILE_BYTES // (8 * d))
        _launch("knn_brute", m, (q, ids, np.int32(m), self.data, np.int64(n), np.int32(d), np.int64(self.first_id),
                                 np.int32(bool(exclude_self)), hd, hj, np.int32(self.k), np.int32(tile)),
                shared=tile * d * 8)

    def _run_gemm(self, q, shifted, ids, hd, hj, exclude_self: bool) -> None:
        """The GEMM-form search: float32 product tiles (cuBLAS), then the filter and exact decisions."""
        cp = cupy()
        m, n = int(q.shape[0]), int(self.data.shape[0])
        mq = min(m, GEMM_QUERIES)
        nt = max(256, min(n, device_budget_bytes(0.25) // (4 * mq), GEMM_TILE_BYTES // (4 * mq)))
        x = self.gemm
        for q0 in range(0, m, mq):
            q1 = min(m, q0 + mq)
            for x0 in range(0, n, nt):
                x1 = min(n, x0 + nt)
                g = cp.matmul(x.x32[x0:x1], shifted.x32[q0:q1].T)  # (rows x queries): coalesced reads per query
                _launch("knn_gemm_filter", q1 - q0,
                        (g, np.int32(q1 - q0), np.int32(x1 - x0), shifted.n2[q0:q1], shifted.norm[q0:q1],
                         x.n2[x0:x1], x.norm[x0:x1], np.float64(self.c1), np.float64(self.c2), q[q0:q1],
                         ids[q0:q1], self.data, np.int64(x0), np.int32(q.shape[1]), np.int64(self.first_id),
                         np.int32(bool(exclude_self)), hd[q0:q1], hj[q0:q1], np.int32(self.k)))


class KnnGridGpu:
    """``grid`` on the GPU: the CPU driver's index and stencil, searched on the device."""

    backend = "gpu"

    def __init__(self, data, k: int, first_id: int = 0):
        from .grid_gpu import _DeviceIndex, device_bounds, to_device64

        cp = cupy()
        x = to_device64(data)  # the index is built on the device (the same cells as the CPU driver's)
        lo, hi = device_bounds(x)
        host = GridGeometry(lo, hi, int(x.shape[0]), k)
        self.host, self.k, self.first_id = host, int(k), int(first_id)
        index = _DeviceIndex(x, host.spec)
        coords = cp.zeros((int(index.cell_ids.shape[0]), host.spec.k), cp.int64)
        rest = index.cell_ids.copy()
        for m, stride in enumerate(host.spec.strides.tolist()):  # cell coordinates from the linear ids
            coords[:, m] = rest // stride
            rest -= coords[:, m] * stride
        up = cp.asarray
        self.index = (index.points, index.perm, index.cell_ids, index.cell_start, cp.ascontiguousarray(coords),
                      index.dense, np.int32(index.ndense > 0))
        dims, origin, widths, ncells, strides, slack = host.grid
        offsets, coarse, outside = host.stencil
        self.grid = (up(dims), up(origin), up(widths), up(ncells), up(strides), up(slack), np.int32(len(dims)),
                     np.int32(x.shape[1]), np.int64(len(index.cell_ids)))
        radius = int(np.abs(offsets).max()) if offsets.size else 0
        lo, hi, indexed = host.box
        self.stencil = (up(np.ascontiguousarray(offsets)), up(coarse), np.int32(len(coarse)), np.int64(radius),
                        np.float64(outside), up(lo), up(hi), up(indexed.astype(np.int8)), np.int32(SEED_MIN_K))

    def _run(self, q, ids, order, hd, hj, exclude_self: bool) -> None:
        m = int(q.shape[0])
        _launch("knn_grid", m, (q, ids, order, np.int32(m), *self.index, *self.grid, *self.stencil,
                                np.int64(self.first_id), np.int32(bool(exclude_self)), hd, hj, np.int32(self.k)))

    def rows(self, queries, query_ids, exclude_self: bool):
        """Every query's k nearest rows of this block, as output rows: lists made, searched and finished on
        the device (one transfer of the rows), the same rows as :func:`daskjoin.kernels.knn.finish`'s."""
        from .knn import NO_ID

        cp = cupy()
        m = len(queries)
        q = cp.ascontiguousarray(cp.asarray(queries, dtype=cp.float64))
        hd, hj = cp.full((m, self.k), cp.inf), cp.full((m, self.k), NO_ID, dtype=cp.int64)
        if m and self.host.n:
            self._run(q, cp.asarray(np.ascontiguousarray(query_ids, np.int64)), _query_order_device(q, self.host),
                      hd, hj, exclude_self)
        return _rows_on_device(hd, hj, query_ids)

    def search(self, queries, query_ids, best_d2, best_j, exclude_self: bool) -> None:
        cp = cupy()
        m = len(queries)
        if not m or not self.host.n:
            return
        queries = np.ascontiguousarray(cp.asnumpy(queries) if hasattr(queries, "get") else queries)
        q = cp.ascontiguousarray(cp.asarray(queries, dtype=cp.float64))
        hd, hj = _lists_to_device(best_d2, best_j)
        self._run(q, cp.asarray(np.ascontiguousarray(query_ids, np.int64)), _query_order_device(q, self.host), hd,
                  hj, exclude_self)
        _lists_back(hd, hj, best_d2, best_j)


class KnnSzlGpu(_ScanDriver):
    """``szl`` on the GPU: the CPU driver's Set of Z-Lists (built on the host), searched on the device."""

    def __init__(self, data, k: int, first_id: int = 0):
        from .knn_szl import SzlIndex

        cp = cupy()
        host = np.ascontiguousarray(cp.asnumpy(data) if hasattr(data, "get") else data)
        ix = SzlIndex(host)
        self.k, self.first_id, self.n, self.d = int(k), int(first_id), int(host.shape[0]), int(host.shape[1])
        up = cp.asarray
        self.data = cp.ascontiguousarray(up(host, dtype=cp.float64))
        self.index = (up(ix.coords), up(ix.lists), up(ix.shift_of), np.int32(len(ix.shift_of)), np.int64(self.n),
                      np.int32(self.d), up(ix.lo), up(ix.scale))

    def _run(self, queries, query_ids, hd, hj, exclude_self: bool) -> None:
        cp = cupy()
        m = len(queries)
        if not m or not self.n:
            return
        q = cp.ascontiguousarray(cp.asarray(queries, dtype=cp.float64))
        ids = cp.asarray(np.ascontiguousarray(query_ids, np.int64))
        coords, lists, shift_of, nl, n, d, lo, scale = self.index
        scratch = (cp.empty((m, self.k)), cp.empty((m, self.k), cp.int64), cp.empty((m, self.d), cp.int64),
                   cp.empty((m, self.d), cp.int64))
        _launch("knn_szl", m, (q, ids, np.int32(m), self.data, coords, lists, shift_of, nl, n, d, lo, scale,
                               np.int64(self.first_id), np.int32(bool(exclude_self)), hd, hj, np.int32(self.k),
                               *scratch))
