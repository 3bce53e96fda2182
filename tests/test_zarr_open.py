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
    (100, 4, "float16", 10, {}, False),
    (100, 4, "float32", 10, {"compressors": "default"}, False),
    (100, 4, "float32", 10, {"shards": (20, 4)}, False),
    (100, 4, "float32", (10, 2), {}, False),
]


@pytest.mark.parametrize("rows,d,dtype,chunk,extra,raw", LAYOUTS)
def test_a_path_opens_to_the_source_zarr_gives(tmp_path, rows, d, dtype, chunk, extra, raw):
    path = str(tmp_path / "a.zarr")
    extra = dict(extra)  # LAYOUTS is shared by every run of the test
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


def test_an_empty_second_axis_is_refused(tmp_path):
    path = tmp_path / "wide.zarr"
    zarr.create_array(store=str(path), shape=(10, 1), chunks=(5, 1), dtype="float32", compressors=None)
    meta = json.loads((path / "zarr.json").read_text())
    meta["shape"], meta["chunk_grid"]["configuration"]["chunk_shape"] = [10, 0], [5, 0]
    (path / "zarr.json").write_text(json.dumps(meta))
    assert zarr_in._open_raw(str(path), "A") is None
    with pytest.raises(InputError):
        zarr_in.open_points(str(path))


MUTATIONS = {  # zarr.json edits the fast path must leave to zarr
    "extra field": lambda m: m.update(surprise=1),
    "no fill value": lambda m: m.pop("fill_value"),
    "fill value a word": lambda m: m.update(fill_value="abc"),
    "fill value a boolean": lambda m: m.update(fill_value=True),
    "three dimension names": lambda m: m.update(dimension_names=["a", "b", "c"]),
    "chunk grid a string": lambda m: m.update(chunk_grid="regular"),
    "key encoding a string": lambda m: m.update(chunk_key_encoding="default"),
    "chunk shape of strings": lambda m: m["chunk_grid"]["configuration"].update(chunk_shape=["5", "3"]),
    "attributes a list": lambda m: m.update(attributes=[1]),
    "a group": lambda m: m.update(node_type="group"),
}


@pytest.mark.parametrize("edit", list(MUTATIONS))
def test_metadata_the_fast_path_does_not_know_is_left_to_zarr(tmp_path, edit):
    """Opened by zarr exactly as before the fast path: zarr's source where zarr opens it, else zarr's refusal."""
    path = tmp_path / "a.zarr"
    a = zarr.create_array(store=str(path), shape=(10, 3), chunks=(5, 3), dtype="float32", compressors=None)
    a[:] = 1.0
    meta = json.loads((path / "zarr.json").read_text())
    MUTATIONS[edit](meta)
    (path / "zarr.json").write_text(json.dumps(meta))
    assert zarr_in._open_raw(str(path), "A") is None
    try:
        node = zarr.open(store=str(path), mode="r")
        expected = zarr_in._zarr_source(node, "A") if isinstance(node, zarr.Array) else None
    except Exception:  # noqa: BLE001 - zarr refuses it: so must we
        expected = None
    if expected is None:
        with pytest.raises(InputError):
            zarr_in._open_zarr_path(str(path), "A")
    else:
        assert zarr_in._open_zarr_path(str(path), "A") == expected


def test_a_missing_chunk_of_a_fast_opened_array_reads_as_zarr_fills_it(tmp_path):
    """With ``daskjoin.missing-chunks: fill`` a missing chunk is read through zarr (its fill value); by default
    it is refused."""
    import dask

    from daskjoin.validation import DamagedStoreError

    path = tmp_path / "a.zarr"
    a = zarr.create_array(store=str(path), shape=(10, 3), chunks=(5, 3), dtype="float32", compressors=None,
                          fill_value=7.0)
    a[:] = 1.0
    (path / "c" / "1" / "0").unlink()
    with dask.config.set({"daskjoin.missing-chunks": "fill"}):
        source = zarr_in._open_zarr_path(str(path), "A")
        assert zarr_in._open_raw(str(path), "A") == source
        rows = source.read(0, 10)
    assert np.array_equal(rows, np.r_[np.ones((5, 3)), np.full((5, 3), 7.0)].astype(np.float32))
    with pytest.raises(DamagedStoreError):
        zarr_in._open_zarr_path(str(path), "A").read(0, 10)


def test_opening_a_synth_store_imports_no_zarr(tmp_path):
    path = str(tmp_path / "p.zarr")
    subprocess.run([sys.executable, "-m", "daskjoin", "synth", "uniform", "--n", "1000", "--d", "3", path],
                   check=True, capture_output=True)
    script = ("import sys; from daskjoin.io.zarr_in import open_points; s = open_points(sys.argv[1]); "
              "x = s.read(0, s.n); print(x.shape, 'zarr' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", script, path], check=True, capture_output=True, text=True,
                         env={**os.environ}).stdout.split()
    assert out[-1] == "False" and "".join(out[:-1]) == "(1000,3)"
