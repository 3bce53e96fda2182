"""What a join to Parquet records about itself, so that an interrupted run can be resumed safely.

A resumed run reuses the part files of the interrupted one only where the two records are equal
(:meth:`daskjoin.io.parquet_out.OutputRun.start`): the same inputs (a Zarr array's fingerprint
from its chunk files' names, sizes and times; an in-memory array's content digest), the same
parameters that decide the pairs, and the same partitions (a part file holds one partition's
pairs, so equal partitions give byte-identical files whatever the method, backend or cluster).
"""
from __future__ import annotations

import hashlib

import numpy as np

from .io.zarr_in import ZarrSource
from .planning.cache import fingerprint, tree_fingerprint


def input_token(source) -> dict | None:
    """What identifies an input: a Zarr array's (or set store's) path and fingerprint, or the digest of data
    held in memory (points, or a set collection's arrays)."""
    if source is None:
        return None
    if isinstance(source, ZarrSource):
        return {"zarr": source.label, "fingerprint": fingerprint(source)}
    if getattr(source, "path", None) is not None:  # a set store
        return {"set_store": source.path, "fingerprint": tree_fingerprint(source.path)}
    if getattr(source, "collection", None) is not None:  # sets in memory
        c = source.collection
        return {"sets": len(c.offsets) - 1, "sha1": _sha1(c.tokens, c.offsets, c.ids)}
    data = source.data
    return {"array": list(data.shape), "dtype": str(data.dtype), "sha1": _sha1(data)}


def _sha1(*arrays) -> str:
    """SHA-1 of arrays' bytes (at ~2 GB/s on one core: a tenth of a second per 200 MB, paid only by runs that
    write Parquet)."""
    digest = hashlib.sha1()
    for a in arrays:
        a = np.ascontiguousarray(a)
        digest.update(memoryview(a.reshape(-1)).cast("B") if a.size else b"")
    return digest.hexdigest()


def partitions_digest(partitioning: str, parts, fields) -> str:
    """A digest of the partitions' row ranges (``fields`` of each partition, in order)."""
    digest = hashlib.sha1(partitioning.encode())
    for part in parts:
        digest.update(repr(tuple(getattr(part, f) for f in fields)).encode())
    return digest.hexdigest()[:16]


def join_record(kind: str, sources, *, partitioning: str, parts, fields, **params) -> dict:
    """A run's record: kind, inputs, the parameters given, the number and digest of the partitions."""
    return {"kind": kind, "inputs": [input_token(s) for s in sources], **params,
            "partitions": len(parts), "partitions_digest": partitions_digest(partitioning, parts, fields)}
