"""Where per-input statistics and sorted copies are cached, and how a cached item is keyed.

A Zarr input at ``/data/x.zarr`` caches beside itself in ``/data/x.zarr.daskjoin/``
(or under ``daskjoin.cache-dir``).  Keys include a fingerprint of the array's
shape, chunking and chunk files (names, sizes, modification times), so a
changed array is never served stale statistics or a stale sorted copy.

Within a process, :func:`state_token` tells cheaply whether an array is still
what it was: its metadata file and one ``stat`` of each chunk file at its known
path (no directory listing, no data).  A chunk rewritten in place or replaced,
or the array re-created, changes it.  The walk behind :func:`fingerprint` runs
only for a state not seen before.
"""
from __future__ import annotations

import hashlib
import os

import numpy as np

from .. import config
from ..caches import CACHE
from ..io.zarr_in import ZarrSource, chunk_files, metadata_token, missing_file_error, raw_layout, wrong_size_error


def state_token(source: ZarrSource) -> tuple | None:
    """What identifies the array's current contents, from ``stat`` calls only; None where its chunk files are unknown.

    A missing chunk file is a :class:`~daskjoin.validation.DamagedStoreError` unless the source
    reads missing chunks as the fill value (``daskjoin.missing-chunks``), and so is an
    uncompressed chunk of the wrong size: cached statistics or plans never stand in for a
    read that would fail, and the client says so before any task runs.
    """
    files = chunk_files(source)
    meta = metadata_token(source.label)
    if files is None or meta is None:
        return None
    stats = np.full((len(files), 4), -1, np.int64)
    layout = raw_layout(source)
    chunk_bytes = None if layout is None else layout.chunk_rows * layout.row_bytes
    stat = os.stat
    for k, path in enumerate(files):
        try:
            st = stat(path)
        except FileNotFoundError:  # a chunk never written (fill value) or lost (a damaged store)
            if source.missing_chunks != "fill":  # before any statistics, cached or not, are used
                raise missing_file_error(source, k) from None
            continue
        if chunk_bytes is not None and st.st_size != chunk_bytes:
            raise wrong_size_error(source, k, st.st_size, chunk_bytes)
        stats[k] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    chunks = hashlib.sha1(stats.tobytes()).hexdigest()
    return (source.store_path, source.array_path, source.shape, source.dtype, source.chunk_rows, meta, chunks)


def fingerprint(source: ZarrSource) -> str:
    """The array's cache key (see :func:`full_fingerprint`), looked up by its :func:`state_token` when seen before."""
    token = state_token(source)
    value = None if token is None else CACHE.get("fingerprints", token)  # state token -> fingerprint
    if value is not None:
        return value
    value = full_fingerprint(source)
    return value if token is None else CACHE.put("fingerprints", token, value)


def full_fingerprint(source: ZarrSource) -> str:
    """A digest of the array's shape, dtype, chunking and chunk files (names, sizes, modification times).

    Only metadata is read (one ``stat`` per chunk file, no data); a chunk rewritten in place,
    an array re-created at the same path, or a file added or removed gives a new digest.
    """
    digest = hashlib.sha1()
    digest.update(repr((source.store_path, source.array_path, source.shape, source.dtype, source.chunk_rows)).encode())
    _digest_files(digest, os.path.join(source.store_path, source.array_path), "")
    return digest.hexdigest()[:16]


def tree_fingerprint(folder: str) -> str:
    """A digest of a directory's files (names, sizes, modification times), as :func:`full_fingerprint` takes
    of an array's chunks: for stores that are not one Zarr array (a set store)."""
    digest = hashlib.sha1(os.path.abspath(folder).encode())
    _digest_files(digest, folder, "")
    return digest.hexdigest()[:16]


def _digest_files(digest, folder: str, prefix: str) -> None:
    """Files of ``folder`` (sorted), then its sub-folders (sorted, recursively): the order of ``os.walk``."""
    try:
        with os.scandir(folder) as it:
            entries = list(it)
    except OSError:
        return
    files, dirs = [], []
    for entry in entries:
        try:
            is_dir = entry.is_dir()
        except OSError:
            is_dir = False
        (dirs if is_dir else files).append(entry)
    parts = []
    for entry in sorted(files, key=lambda e: e.name):
        if entry.name == "zarr.json" or entry.name.startswith("."):
            continue
        stat = entry.stat()
        parts.append(f"{prefix}{entry.name}:{stat.st_size}:{stat.st_mtime_ns};")
    digest.update("".join(parts).encode())
    for entry in sorted(dirs, key=lambda e: e.name):
        if not entry.is_symlink():
            _digest_files(digest, entry.path, f"{prefix}{entry.name}{os.sep}")


def cache_locations(label: str) -> list[str]:
    """Where the cached items of the array at ``label`` may live, first choice first (nothing is created)."""
    label = os.path.abspath(label)
    digest = hashlib.sha1(label.encode()).hexdigest()[:16]
    configured = config.get("cache-dir")
    if configured:
        return [os.path.join(configured, digest)]
    return [label.rstrip(os.sep) + ".daskjoin", os.path.join(os.path.expanduser("~"), ".cache", "daskjoin", digest)]


def cache_dir(source: ZarrSource) -> str:
    """A writable directory for this input's cached items (created on demand)."""
    label = os.path.abspath(source.label)
    for path in cache_locations(label):
        try:
            os.makedirs(path, exist_ok=True)
            if os.access(path, os.W_OK):
                return path
        except OSError:
            continue
    raise OSError(f"no writable cache directory for {label!r}; set dask.config 'daskjoin.cache-dir'")
