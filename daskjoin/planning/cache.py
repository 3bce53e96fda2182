"""Where per-input statistics and sorted copies are cached, and how a cached item is keyed.

A Zarr input at ``/data/x.zarr`` caches beside itself in ``/data/x.zarr.daskjoin/``
(or under ``daskjoin.cache-dir``).  Keys include a fingerprint of the array's
shape, chunking and chunk files (names, sizes, modification times), so a
changed array is never served stale statistics or a stale sorted copy.
"""
from __future__ import annotations

import hashlib
import os

from .. import config
from ..io.zarr_in import ZarrSource


def fingerprint(source: ZarrSource) -> str:
    digest = hashlib.sha1()
    digest.update(repr((source.store_path, source.array_path, source.shape, source.dtype, source.chunk_rows)).encode())
    root = os.path.join(source.store_path, source.array_path)
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            if name == "zarr.json" or name.startswith("."):
                continue
            stat = os.stat(os.path.join(folder, name))
            digest.update(f"{os.path.relpath(os.path.join(folder, name), root)}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()[:16]


def cache_dir(source: ZarrSource) -> str:
    """A writable directory for this input's cached items (created on demand)."""
    label = os.path.abspath(source.label)
    configured = config.get("cache-dir")
    candidates = []
    if configured:
        candidates.append(os.path.join(configured, hashlib.sha1(label.encode()).hexdigest()[:16]))
    else:
        candidates.append(label.rstrip(os.sep) + ".daskjoin")
        candidates.append(
            os.path.join(os.path.expanduser("~"), ".cache", "daskjoin", hashlib.sha1(label.encode()).hexdigest()[:16])
        )
    for path in candidates:
        try:
            os.makedirs(path, exist_ok=True)
            if os.access(path, os.W_OK):
                return path
        except OSError:
            continue
    raise OSError(f"no writable cache directory for {label!r}; set dask.config 'daskjoin.cache-dir'")
