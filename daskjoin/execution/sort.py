"""Out-of-core sort of a Zarr input along one dimension, through Dask (a sample sort).

1. Bucket boundaries: quantiles of (key, row) over the planning sample.
2. Per input chunk (parallel): rows ordered by (bucket, key, row), written to a
   scratch array at the chunk's own rows (chunk-aligned: no write conflicts);
   the task returns its count per bucket.
3. Per bucket (parallel): its pieces gathered from every chunk, sorted by
   (key, row); the buckets are concatenated, rechunked and stored by dask.array.
The group is written under a temporary name and renamed when complete (see :mod:`daskjoin.io.commit`);
the caller holds the copy's lock (:func:`daskjoin.io.commit.build_once`).
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass

import numpy as np

from ..io import commit
from ..io.zarr_in import ZarrSource
from ..planning.bounds import BlockStats
from ..planning.sorted_copy import KEY_STRIDE, LAYOUT, SortedCopy, open_sorted


def lexi_buckets(keys, rows, bkeys, brows) -> np.ndarray:
    """Bucket of each (key, row): the number of boundaries (bkey, brow) <= it, lexicographically."""
    lo = np.searchsorted(bkeys, keys, side="left")
    hi = np.searchsorted(bkeys, keys, side="right")
    out = lo.astype(np.int64)
    ties = np.flatnonzero(hi > lo)
    for t in ties:
        out[t] = lo[t] + np.searchsorted(brows[lo[t]:hi[t]], rows[t], side="right")
    return out


@dataclass(frozen=True)
class _Scatter:
    source: ZarrSource
    scratch: str
    dim: int
    start: int
    stop: int
    bkeys: tuple
    brows: tuple


def _scatter_block(job: _Scatter) -> np.ndarray:
    block = job.source.read(job.start, job.stop)
    keys = block[:, job.dim].astype(np.float64)
    rows = np.arange(job.start, job.stop, dtype=np.int64)
    bucket = lexi_buckets(keys, rows, np.asarray(job.bkeys), np.asarray(job.brows, dtype=np.int64))
    order = np.lexsort((rows, keys, bucket))
    import zarr

    group = zarr.open_group(job.scratch, mode="r+")
    group["points"][job.start:job.stop] = block[order]
    group["ids"][job.start:job.stop] = rows[order]
    group["keys"][job.start:job.stop] = keys[order]
    return np.bincount(bucket, minlength=len(job.bkeys) + 1).astype(np.int64)


def _gather_bucket(scratch: str, pieces: list, d: int, dtype: str):
    import zarr

    group = zarr.open_group(scratch, mode="r")
    pts = [np.asarray(group["points"][a:b]) for a, b in pieces]
    ids = [np.asarray(group["ids"][a:b]) for a, b in pieces]
    keys = [np.asarray(group["keys"][a:b]) for a, b in pieces]
    pts = np.concatenate(pts) if pts else np.zeros((0, d), dtype)
    ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
    keys = np.concatenate(keys) if keys else np.zeros(0)
    order = np.lexsort((ids, keys))
    return pts[order], ids[order], keys[order]


def _boundaries(stats: BlockStats, dim: int, nbuckets: int):
    keys = stats.sample[:, dim]
    rows = stats.sample_rows
    order = np.lexsort((rows, keys))
    keys, rows = keys[order], rows[order]
    if nbuckets <= 1 or keys.shape[0] == 0:
        return (), ()
    picks = (np.arange(1, nbuckets) * keys.shape[0]) // nbuckets
    return tuple(float(k) for k in keys[picks]), tuple(int(r) for r in rows[picks])


def sort_zarr_here(source: ZarrSource, dim: int, path: str) -> SortedCopy:
    """Write the sorted copy of ``source`` to ``path`` from memory, in this process: one read, one radix
    argsort (:mod:`daskjoin.kernels.key_sort`), one write; for inputs that fit a task's memory budget
    when the join runs in this process (no cluster to spread a sample sort over)."""
    import zarr

    from ..kernels.key_sort import argsort_keys, take

    n, d, chunk = source.n, source.d, source.chunk_rows
    points = np.asarray(source.read(0, n))
    keys = points[:, dim].astype(np.float64)
    order = argsort_keys(keys)
    tmp = commit.temp_path(path)
    try:
        out = zarr.open_group(tmp, mode="w")
        out.attrs["daskjoin"] = {"kind": "sorted-copy", "dim": int(dim), "source": source.label, "n": int(n),
                                 "layout": LAYOUT}
        full = {"write_empty_chunks": True}  # every chunk on disk: a missing one is damage, never zeros
        sorted_keys = take(keys, order)
        key_index = sorted_keys[::KEY_STRIDE]
        for name, data, chunks in (("points", take(points, order), (chunk, d)), ("ids", order, (chunk,)),
                                   ("keys", sorted_keys, (chunk,)), ("key_index", key_index, (max(1, len(key_index)),))):
            # uncompressed: written and read at memory speed (ids of shuffled rows hardly compress anyway)
            target = out.create_array(name, shape=data.shape, chunks=chunks, dtype=data.dtype, compressors=None,
                                      config=full)
            if data.shape[0]:
                target[...] = data
        commit.replace_dir(tmp, path, replace=True)
    finally:
        commit.remove_path(tmp)
    return open_sorted(path, dim)


def sort_zarr(source: ZarrSource, dim: int, stats: BlockStats, path: str, client, *, bucket_bytes: int) -> SortedCopy:
    """Write the sorted copy of ``source`` to ``path`` (a Zarr group) with ``client``; return it."""
    import dask
    import dask.array as da
    import zarr

    n, d = source.n, source.d
    row_bytes = d * np.dtype(source.dtype).itemsize + 16
    nbuckets = max(1, int(np.ceil(n * row_bytes / max(1, bucket_bytes))))
    bkeys, brows = _boundaries(stats, dim, nbuckets)
    nbuckets = len(bkeys) + 1
    chunk = source.chunk_rows
    tag = uuid.uuid4().hex[:8]
    scratch = commit.temp_path(path, f"scratch-{tag}")
    tmp = commit.temp_path(path, tag)
    try:
        group = zarr.open_group(scratch, mode="w")
        full = {"write_empty_chunks": True}  # every chunk on disk: a missing one is damage, never zeros
        group.create_array("points", shape=(n, d), chunks=(chunk, d), dtype=source.dtype, config=full)
        group.create_array("ids", shape=(n,), chunks=(chunk,), dtype="int64", config=full)
        group.create_array("keys", shape=(n,), chunks=(chunk,), dtype="float64", config=full)
        jobs = [
            _Scatter(source, scratch, dim, int(a), int(b), bkeys, brows)
            for a, b in zip(stats.starts[:-1], stats.starts[1:])
        ]
        counts = np.array(client.gather(client.map(_scatter_block, jobs, pure=False))).reshape(len(jobs), nbuckets)
        within = np.zeros_like(counts)
        np.cumsum(counts[:, :-1], axis=1, out=within[:, 1:])
        parts_p, parts_i, parts_k = [], [], []
        for b in range(nbuckets):
            pieces = [
                (int(stats.starts[k] + within[k, b]), int(stats.starts[k] + within[k, b] + counts[k, b]))
                for k in range(len(jobs)) if counts[k, b]
            ]
            size = int(counts[:, b].sum())
            if not size:
                continue
            part = dask.delayed(_gather_bucket, nout=3, pure=True)(scratch, pieces, d, source.dtype)
            parts_p.append(da.from_delayed(part[0], shape=(size, d), dtype=source.dtype))
            parts_i.append(da.from_delayed(part[1], shape=(size,), dtype="int64"))
            parts_k.append(da.from_delayed(part[2], shape=(size,), dtype="float64"))
        out = zarr.open_group(tmp, mode="w")
        out.attrs["daskjoin"] = {"kind": "sorted-copy", "dim": int(dim), "source": source.label, "n": int(n),
                                 "layout": LAYOUT}
        targets = [
            out.create_array("points", shape=(n, d), chunks=(chunk, d), dtype=source.dtype, compressors=None,
                             config=full),
            out.create_array("ids", shape=(n,), chunks=(chunk,), dtype="int64", config=full),
            out.create_array("keys", shape=(n,), chunks=(chunk,), dtype="float64", config=full),
        ]
        nindex = (n + KEY_STRIDE - 1) // KEY_STRIDE
        targets.append(out.create_array("key_index", shape=(nindex,), chunks=(max(1, nindex),), dtype="float64",
                                        config=full))
        if n:
            points = da.concatenate(parts_p).rechunk((chunk, d))
            ids = da.concatenate(parts_i).rechunk((chunk,))
            keys = da.concatenate(parts_k).rechunk((chunk,))
            key_index = keys[::KEY_STRIDE].rechunk((max(1, nindex),))
            stored = da.store([points, ids, keys, key_index], targets, lock=False, compute=False)
            client.gather(client.compute(stored))
        commit.replace_dir(tmp, path, replace=True)  # an incomplete copy at ``path`` is replaced whole
    finally:
        commit.remove_path(scratch)
        commit.remove_path(tmp)
    return open_sorted(path, dim)
