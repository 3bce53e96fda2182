"""Parquet output with a commit protocol.

Each partition goes to ``part-NNNNN.parquet`` (deterministic name), written under
a temporary name in the same directory and renamed when complete, so a file
that exists is whole, and a retried task rewrites the same bytes.  The
``_SUCCESS`` manifest (JSON: files, row counts, total) is written last, the
same way; a directory without it is incomplete.
"""
from __future__ import annotations

import json
import os
import shutil
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SUCCESS = "_SUCCESS"


DISTANCE = ("dist", "float32")


def schema(value: tuple | None = DISTANCE) -> pa.Schema:
    """Columns i, j (int64) and an optional value column given as (name, numpy dtype name)."""
    fields = [pa.field("i", pa.int64(), nullable=False), pa.field("j", pa.int64(), nullable=False)]
    if value is not None:
        fields.append(pa.field(value[0], pa.from_numpy_dtype(np.dtype(value[1])), nullable=False))
    return pa.schema(fields)


def part_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


def _atomic_path(final: str) -> str:
    folder, name = os.path.split(final)
    return os.path.join(folder, f".{name}.tmp-{uuid.uuid4().hex[:8]}")


def write_partition(out_dir: str, index: int, batches, with_distance: bool = True, *,
                    value: tuple | None = DISTANCE) -> dict:
    """Write the (i, j, value) ``batches`` of partition ``index`` as one file, one row group per batch.

    ``value`` names the third column and its dtype (the ε-join's float32 ``dist`` by default);
    ``with_distance=False`` drops it.
    """
    final = os.path.join(out_dir, part_name(index))
    tmp = _atomic_path(final)
    if not with_distance:
        value = None
    sch = schema(value)
    rows = 0
    try:
        with pq.ParquetWriter(tmp, sch, compression="snappy") as writer:
            for i, j, dist in batches:
                cols = [pa.array(np.asarray(i, np.int64)), pa.array(np.asarray(j, np.int64))]
                if value is not None:
                    cols.append(pa.array(np.asarray(dist, value[1])))
                if len(i):
                    writer.write_table(pa.Table.from_arrays(cols, schema=sch))
                rows += len(i)
        os.replace(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return {"file": part_name(index), "rows": int(rows)}


def prepare_output(path: str, overwrite: bool) -> None:
    """Create the output directory (replacing an old one only when ``overwrite``); validated beforehand."""
    if os.path.exists(path):
        if not overwrite:
            raise FileExistsError(path)
        success = os.path.join(path, SUCCESS)
        if os.path.exists(success):
            os.remove(success)  # first, so a crash below never leaves the old output looking complete
        if os.path.isdir(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    os.makedirs(path)


def write_manifest(path: str, entries: list[dict], extra: dict | None = None) -> dict:
    entries = sorted(entries, key=lambda e: e["file"])
    manifest = {"files": entries, "rows": int(sum(e["rows"] for e in entries)), **(extra or {})}
    final = os.path.join(path, SUCCESS)
    tmp = _atomic_path(final)
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    os.replace(tmp, final)
    return manifest


def read_manifest(path: str) -> dict:
    with open(os.path.join(path, SUCCESS)) as f:
        return json.load(f)
