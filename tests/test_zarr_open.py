"""Opening a Zarr path: plain v3 arrays of uncompressed whole-row chunks are opened from ``zarr.json``
alone (no zarr import in a new process), to the very source zarr gives; everything else through zarr."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import zarr

from daskjoin.io import zarr_in
from daskjoin.validation import InputError

LAYOUTS = [  # (rows, d, dtype, chunk rows, extra create_array arguments, opened from zarr.json alone)
    (1000, 3, "float32", 100, {}, True),
    (1001, 2, "float64", 1000, {}, True),
    (5, 1, "float32", 7, {}, True),
    (1000, 3, "float32", 100, {"chunk_key_encoding": {"name": "v2", "separator": "."}}, True),
    (0, 3, "float32", 10, {}, False),
    (100, 4, "int32", 10, {}, False),
    (100, 4, "float32", 10, {"compressors": "default"}, False),
    (100, 4, "float32", 10, {"shards": (20, 4)}, False),
    (100, 4, "float32", (10, 2), {}, False),
]


@pytest.mark.parametrize("rows,d,dtype,chunk,extra,raw", LAYOUTS)
def test_a_path_opens_to_the_source_zarr_gives(tmp_path, rows, d, dtype, chunk, extra, raw):
    path = str(tmp_path / "a.zarr")
    compressors = None if extra.pop("compressors", None) is None else "auto"
    chunks = chunk if isinstance(chunk, tuple) else (chunk, d)
    a = zarr.create_array(store=path, shape=(rows, d), chunks=chunks, dtype=dtype, compressors=compressors, **extra)
    a[:] = np.arange(rows * d).reshape(rows, d)
    assert (zarr_in._open_raw(path, "A") is not None) == raw
    expected = zarr_in._zarr_source(zarr.open(store=path, mode="r"), "A")
    opened = zarr_in._open_zarr_path(path, "A")
    assert opened == expected
    if rows:
        assert np.array_equal(opened.read(0, rows), np.asarray(a[:]).astype(np.asarray(opened.read(0, 1)).dtype))


def test_an_array_inside_a_group_opens_the_same(tmp_path):
    root = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    a = root.create_array("inner/x", shape=(50, 3), chunks=(16, 3), dtype="float32", compressors=None)
    a[:] = 1.5
    path = str(tmp_path / "g.zarr" / "inner" / "x")
    assert zarr_in._open_raw(path, "A") == zarr_in._zarr_source(zarr.open(store=path, mode="r"), "A")


def test_metadata_zarr_cannot_read_is_still_refused(tmp_path):
    path = tmp_path / "bad.zarr"
    zarr.create_array(store=str(path), shape=(10, 3), chunks=(5, 3), dtype="float32", compressors=None)
    (path / "zarr.json").write_text("{ not json")
    with pytest.raises(InputError, match="cannot read a Zarr array"):
        zarr_in._open_zarr_path(str(path), "A")


def test_bad_shapes_and_dtypes_are_refused_on_the_fast_path(tmp_path):
    path = tmp_path / "wide.zarr"
    zarr.create_array(store=str(path), shape=(10, 0), chunks=(5, 1), dtype="float32", compressors=None)
    meta = json.loads((path / "zarr.json").read_text())
    assert zarr_in._open_raw(str(path), "A") is None or meta["shape"][1] == 0
    with pytest.raises(InputError):
        zarr_in.open_points(str(path))


def test_opening_a_synth_store_imports_no_zarr(tmp_path):
    path = str(tmp_path / "p.zarr")
    subprocess.run([sys.executable, "-m", "daskjoin", "synth", "uniform", "--n", "1000", "--d", "3", path],
                   check=True, capture_output=True)
    script = ("import sys; from daskjoin.io.zarr_in import open_points; s = open_points(sys.argv[1]); "
              "x = s.read(0, s.n); print(x.shape, 'zarr' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", script, path], check=True, capture_output=True, text=True,
                         env={**os.environ}).stdout.split()
    assert out[-1] == "False" and "".join(out[:-1]) == "(1000,3)"
