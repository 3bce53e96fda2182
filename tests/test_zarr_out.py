"""Tests of daskjoin.io.zarr_out: chunk sizing and the atomic, chunk-aligned points writer."""
import os

import numpy as np
import pytest
import zarr

from daskjoin.io.zarr_out import ZarrPointsWriter, default_chunk_rows
from daskjoin.validation import InputError


def _siblings(tmp_path):
    return sorted(p.name for p in tmp_path.iterdir())


@pytest.mark.parametrize(
    "d, itemsize, expected",
    [(2, 4, 1 << 20), (2, 8, 1 << 19), (64, 4, 1 << 15), (3, 4, 1 << 19), (100_000, 8, 1024), (1, 1, 1 << 23)],
)
def test_default_chunk_rows(d, itemsize, expected):
    rows = default_chunk_rows(d, itemsize)
    assert rows == expected
    assert rows >= 1024 and rows & (rows - 1) == 0
    assert rows == 1024 or rows * d * itemsize <= 8 * 2**20


@pytest.mark.parametrize("d, itemsize", [(0, 4), (2, 0), (-1, 4), (2.5, 4)])
def test_default_chunk_rows_rejects_bad_arguments(d, itemsize):
    with pytest.raises(InputError, match="positive integer"):
        default_chunk_rows(d, itemsize)


@pytest.mark.parametrize("sizes", [[10], [3, 4, 5, 1, 0, 7], [1] * 23, [16, 16], [50]], ids=str)
@pytest.mark.parametrize("expected_rows", [None, 20, 1000])
def test_append_blocks_of_any_size(tmp_path, sizes, expected_rows):
    rng = np.random.default_rng(0)
    blocks = [rng.random((k, 3)) for k in sizes]
    out = tmp_path / "p.zarr"
    with ZarrPointsWriter(out, d=3, dtype=np.float64, chunk_rows=8, expected_rows=expected_rows) as w:
        for b in blocks:
            w.append(b)
        assert w.rows == sum(sizes)
    arr = zarr.open_array(str(out), mode="r")
    assert arr.shape == (sum(sizes), 3)
    assert arr.chunks == (8, 3)
    assert arr.dtype == np.float64
    np.testing.assert_array_equal(arr[:], np.concatenate(blocks))
    assert _siblings(tmp_path) == ["p.zarr"]


def test_each_chunk_is_written_once_and_whole(tmp_path, monkeypatch):
    writes = []
    original = zarr.Array.__setitem__

    def spy(self, key, value):
        writes.append((key.start, key.stop))
        return original(self, key, value)

    monkeypatch.setattr(zarr.Array, "__setitem__", spy)
    with ZarrPointsWriter(tmp_path / "p.zarr", d=2, chunk_rows=4) as w:
        for k in [1, 2, 6, 3, 9, 2]:  # 23 rows
            w.append(np.ones((k, 2)))
    for start, stop in writes:
        assert start % 4 == 0
        assert (stop - start) % 4 == 0 or stop == 23
    covered = sorted(writes)
    assert covered[0][0] == 0 and covered[-1][1] == 23
    assert all(a[1] == b[0] for a, b in zip(covered, covered[1:]))  # no chunk written twice


def test_attrs_and_default_dtype(tmp_path):
    out = tmp_path / "p.zarr"
    with ZarrPointsWriter(out, d=2, attrs={"source": "test", "seed": 3, "kind": "ignored"}) as w:
        w.append(np.arange(10).reshape(5, 2))
    arr = zarr.open_array(str(out), mode="r")
    assert arr.dtype == np.float32
    assert arr.chunks[0] == default_chunk_rows(2, 4)
    assert arr.attrs["daskjoin"] == {"kind": "points", "source": "test", "seed": 3}
    assert arr.metadata.zarr_format == 3
    np.testing.assert_array_equal(arr[:], np.arange(10, dtype=np.float32).reshape(5, 2))


def test_zero_rows(tmp_path):
    out = tmp_path / "empty.zarr"
    with ZarrPointsWriter(out, d=4, chunk_rows=16):
        pass
    arr = zarr.open_array(str(out), mode="r")
    assert arr.shape == (0, 4)


def test_existing_path_refused_before_writing(tmp_path):
    out = tmp_path / "p.zarr"
    out.mkdir()
    (out / "keep.txt").write_text("old")
    with pytest.raises(InputError, match="already exists.*overwrite=True"):
        ZarrPointsWriter(out, d=2)
    assert _siblings(tmp_path) == ["p.zarr"]
    assert (out / "keep.txt").read_text() == "old"


def test_missing_parent_refused(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        ZarrPointsWriter(tmp_path / "nope" / "p.zarr", d=2)


@pytest.mark.parametrize("existing", ["dir", "file"])
def test_overwrite_replaces_only_when_complete(tmp_path, existing):
    out = tmp_path / "p.zarr"
    if existing == "dir":
        out.mkdir()
        (out / "stale").write_text("x")
    else:
        out.write_text("x")
    with ZarrPointsWriter(out, d=2, chunk_rows=4, overwrite=True) as w:
        w.append(np.ones((5, 2)))
        assert out.exists() and not (out / "zarr.json").exists()  # old data still in place
    np.testing.assert_array_equal(zarr.open_array(str(out), mode="r")[:], np.ones((5, 2)))
    assert not (out / "stale").exists()
    assert _siblings(tmp_path) == ["p.zarr"]


def test_exception_leaves_nothing(tmp_path):
    out = tmp_path / "p.zarr"
    with pytest.raises(RuntimeError, match="boom"):
        with ZarrPointsWriter(out, d=2, chunk_rows=4) as w:
            w.append(np.ones((9, 2)))
            assert os.path.isdir(w.tmp_path)
            assert os.path.basename(w.tmp_path).startswith(".p.zarr.tmp-")
            raise RuntimeError("boom")
    assert _siblings(tmp_path) == []


def test_exception_with_overwrite_keeps_old_data(tmp_path):
    out = tmp_path / "p.zarr"
    with ZarrPointsWriter(out, d=2, chunk_rows=4) as w:
        w.append(np.zeros((3, 2)))
    with pytest.raises(RuntimeError):
        with ZarrPointsWriter(out, d=2, chunk_rows=4, overwrite=True) as w:
            w.append(np.ones((9, 2)))
            raise RuntimeError("boom")
    np.testing.assert_array_equal(zarr.open_array(str(out), mode="r")[:], np.zeros((3, 2)))
    assert _siblings(tmp_path) == ["p.zarr"]


@pytest.mark.parametrize(
    "block, match",
    [(np.ones((3, 4)), "3 columns"), (np.ones(3), "2-D"), (np.array([["a", "b", "c"]]), "real numbers")],
    ids=["wrong-width", "1-D", "strings"],
)
def test_bad_block_aborts(tmp_path, block, match):
    out = tmp_path / "p.zarr"
    with pytest.raises(InputError, match=match):
        with ZarrPointsWriter(out, d=3) as w:
            w.append(np.ones((2, 3)))
            w.append(block)
    assert _siblings(tmp_path) == []


@pytest.mark.parametrize(
    "kwargs, match",
    [({"d": 0}, "d "), ({"d": 2, "dtype": np.int32}, "float32 or float64"), ({"d": 2, "chunk_rows": 0}, "chunk_rows")],
)
def test_bad_options(tmp_path, kwargs, match):
    with pytest.raises(InputError, match=match):
        ZarrPointsWriter(tmp_path / "p.zarr", **kwargs)
    assert _siblings(tmp_path) == []


def test_append_outside_with_is_refused(tmp_path):
    w = ZarrPointsWriter(tmp_path / "p.zarr", d=2)
    with pytest.raises(RuntimeError, match="inside"):
        w.append(np.ones((1, 2)))
    assert _siblings(tmp_path) == []


def test_path_appearing_meanwhile_is_not_clobbered(tmp_path):
    out = tmp_path / "p.zarr"
    with pytest.raises(InputError, match="appeared"):
        with ZarrPointsWriter(out, d=2) as w:
            w.append(np.ones((2, 2)))
            out.mkdir()
            (out / "other").write_text("someone else's")
    assert _siblings(tmp_path) == ["p.zarr"]
    assert (out / "other").read_text() == "someone else's"
