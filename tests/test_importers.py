"""Tests of daskjoin.io.importers: streaming .npy, .csv and .parquet files into Zarr."""
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr

from daskjoin.io import importers
from daskjoin.io.importers import import_points
from daskjoin.validation import InputError


def _read(path):
    arr = zarr.open_array(path, mode="r")
    return arr, arr[:]


def _names(tmp_path):
    return sorted(p.name for p in tmp_path.iterdir())


# -- .npy ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "dtype, stored",
    [(np.float32, np.float32), (np.float64, np.float64), (np.int64, np.float64), (np.uint8, np.float64)],
)
def test_npy_dtypes(tmp_path, dtype, stored):
    x = (np.random.default_rng(0).random((100, 3)) * 100).astype(dtype)
    np.save(tmp_path / "x.npy", x)
    info = import_points(tmp_path / "x.npy", tmp_path / "x.zarr", chunk_rows=16)
    arr, data = _read(info["path"])
    expected = {"path": str(tmp_path / "x.zarr"), "rows": 100, "d": 3, "dtype": np.dtype(stored).name}
    assert info == {**expected, "columns": [0, 1, 2]}
    assert arr.dtype == stored and arr.chunks == (16, 3)
    np.testing.assert_array_equal(data, x.astype(stored))
    assert arr.attrs["daskjoin"]["kind"] == "points" and arr.attrs["daskjoin"]["format"] == "npy"


def test_npy_large_integers_exact(tmp_path):
    x = np.array([[2**53, -(2**53)], [2**52 + 1, 7]], dtype=np.int64)
    np.save(tmp_path / "x.npy", x)
    _, data = _read(import_points(tmp_path / "x.npy", tmp_path / "x.zarr")["path"])
    assert data.dtype == np.float64
    assert data.astype(np.int64).tolist() == x.tolist()


def test_npy_larger_than_a_chunk_is_streamed(tmp_path, monkeypatch):
    x = np.random.default_rng(1).random((5000, 2)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    seen = []
    original = importers.ZarrPointsWriter.append
    monkeypatch.setattr(importers.ZarrPointsWriter, "append", lambda self, b: (seen.append(len(b)), original(self, b)))
    info = import_points(tmp_path / "x.npy", tmp_path / "x.zarr", chunk_rows=1024)
    assert max(seen) <= 1024 and sum(seen) == 5000
    arr, data = _read(info["path"])
    assert arr.shape == (5000, 2) and arr.nchunks == 5
    np.testing.assert_array_equal(data, x)


def test_npy_fortran_order_and_columns(tmp_path):
    x = np.asfortranarray(np.arange(30, dtype=np.float64).reshape(10, 3))
    np.save(tmp_path / "x.npy", x)
    info = import_points(tmp_path / "x.npy", tmp_path / "x.zarr", columns=[2, 0], chunk_rows=4)
    assert info["columns"] == [2, 0] and info["d"] == 2
    np.testing.assert_array_equal(_read(info["path"])[1], x[:, [2, 0]])


@pytest.mark.parametrize(
    "array, match",
    [
        (np.arange(5.0), "2-D"),
        (np.ones((3, 2), dtype=bool), "real numbers"),
        (np.ones((3, 2), dtype=np.complex64), "real numbers"),
        (np.array([[{"a": 1}]], dtype=object), "cannot read"),
    ],
    ids=["1-D", "bool", "complex", "object"],
)
def test_npy_errors(tmp_path, array, match):
    np.save(tmp_path / "x.npy", array, allow_pickle=True)
    with pytest.raises(InputError, match=match):
        import_points(tmp_path / "x.npy", tmp_path / "x.zarr")
    assert _names(tmp_path) == ["x.npy"]


# -- .csv ----------------------------------------------------------------------
def test_csv_with_header_keeps_numeric_columns(tmp_path):
    src = tmp_path / "p.csv"
    src.write_text("id,x,label,y\n1,0.5,a,2\n2,1.5,b,-3.25\n3,1e-3,c,4\n")
    info = import_points(src, tmp_path / "p.zarr")
    assert info["columns"] == ["id", "x", "y"] and info["dtype"] == "float64"
    np.testing.assert_array_equal(_read(info["path"])[1], [[1, 0.5, 2], [2, 1.5, -3.25], [3, 1e-3, 4]])


def test_csv_without_header(tmp_path):
    src = tmp_path / "p.csv"
    src.write_text("0.5, 1\n-2,3.25\n1e5,7\n")
    info = import_points(src, tmp_path / "p.zarr")
    assert info["rows"] == 3 and info["d"] == 2 and info["columns"] == [0, 1]
    np.testing.assert_array_equal(_read(info["path"])[1], [[0.5, 1], [-2, 3.25], [1e5, 7]])


@pytest.mark.parametrize("columns, expected", [(["y", "x"], [[2, 0.5], [3, 1.5]]), ([3, "x"], [[2, 0.5], [3, 1.5]])])
def test_csv_columns_option(tmp_path, columns, expected):
    src = tmp_path / "p.csv"
    src.write_text("id,x,label,y\n1,0.5,a,2\n2,1.5,b,3\n")
    info = import_points(src, tmp_path / "p.zarr", columns=columns)
    np.testing.assert_array_equal(_read(info["path"])[1], expected)


def test_csv_larger_than_a_chunk(tmp_path):
    x = np.random.default_rng(2).random((3000, 3))
    pd.DataFrame(x, columns=["a", "b", "c"]).to_csv(tmp_path / "p.csv", index=False, float_format="%.17g")
    info = import_points(tmp_path / "p.csv", tmp_path / "p.zarr", chunk_rows=1024)
    arr, data = _read(info["path"])
    assert arr.shape == (3000, 3) and arr.chunks == (1024, 3)
    np.testing.assert_array_equal(data, x)


def test_csv_non_numeric_value_in_a_later_chunk(tmp_path):
    rows = [f"{i},{i * 0.5}" for i in range(50)]
    rows[37] = "37,oops"
    (tmp_path / "p.csv").write_text("a,b\n" + "\n".join(rows) + "\n")
    with pytest.raises(InputError, match="line 39, column 'b': value 'oops' is not a number"):
        import_points(tmp_path / "p.csv", tmp_path / "p.zarr", chunk_rows=10)
    assert _names(tmp_path) == ["p.csv"]


def test_csv_requested_text_column(tmp_path):
    (tmp_path / "p.csv").write_text("x,label\n1,a\n2,b\n")
    with pytest.raises(InputError, match="value 'a' is not a number"):
        import_points(tmp_path / "p.csv", tmp_path / "p.zarr", columns=["x", "label"])
    assert _names(tmp_path) == ["p.csv"]


@pytest.mark.parametrize(
    "text, kwargs, match",
    [
        ("name,city\nann,paris\nbob,rome\n", {}, "no numeric columns"),
        ("", {}, "is empty"),
        ("x,y\n", {}, "no data rows"),
        ("x,y\n1,2\n", {"columns": ["z"]}, "column 'z' is not in CSV"),
        ("x,y\n1,2\n", {"columns": [5]}, "column 5 does not exist"),
        ("1,2\n3,4\n5,6,7\n", {}, "cannot parse CSV"),
    ],
    ids=["text-only", "empty", "header-only", "unknown-name", "bad-position", "extra-field"],
)
def test_csv_errors(tmp_path, text, kwargs, match):
    (tmp_path / "p.csv").write_text(text)
    with pytest.raises(InputError, match=match):
        import_points(tmp_path / "p.csv", tmp_path / "p.zarr", **kwargs)
    assert _names(tmp_path) == ["p.csv"]


# -- .parquet --------------------------------------------------------------------
def test_parquet_scalar_columns(tmp_path):
    table = pa.table(
        {
            "x": pa.array(np.arange(2500, dtype=np.float32)),
            "name": pa.array([f"p{i}" for i in range(2500)]),
            "y": pa.array(np.arange(2500, dtype=np.float32) * -1),
        }
    )
    pq.write_table(table, tmp_path / "p.parquet", row_group_size=700)
    info = import_points(tmp_path / "p.parquet", tmp_path / "p.zarr", chunk_rows=1024)
    arr, data = _read(info["path"])
    assert info["columns"] == ["x", "y"] and info["dtype"] == "float32" and arr.dtype == np.float32
    assert arr.shape == (2500, 2)
    np.testing.assert_array_equal(data[:, 0], np.arange(2500))
    np.testing.assert_array_equal(data[:, 1], -np.arange(2500))


def test_parquet_mixed_int_float_is_float64(tmp_path):
    table = pa.table({"i": pa.array([1, 2**53], pa.int64()), "f": pa.array([0.5, 1.5], pa.float32())})
    pq.write_table(table, tmp_path / "p.parquet")
    info = import_points(tmp_path / "p.parquet", tmp_path / "p.zarr")
    assert info["dtype"] == "float64"
    np.testing.assert_array_equal(_read(info["path"])[1], [[1, 0.5], [2**53, 1.5]])


@pytest.mark.parametrize("list_type", ["list", "large_list", "fixed_size_list"])
def test_parquet_vector_column(tmp_path, list_type):
    x = np.random.default_rng(3).random((2100, 4)).astype(np.float32)
    value_type = pa.float32()
    type_ = {
        "list": pa.list_(value_type),
        "large_list": pa.large_list(value_type),
        "fixed_size_list": pa.list_(value_type, 4),
    }[list_type]
    table = pa.table({"id": pa.array(np.arange(2100)), "emb": pa.array(list(x), type=type_)})
    pq.write_table(table, tmp_path / "v.parquet", row_group_size=500)
    info = import_points(tmp_path / "v.parquet", tmp_path / "v.zarr", chunk_rows=1024)
    arr, data = _read(info["path"])
    assert info["columns"] == ["emb"] and info["d"] == 4 and arr.dtype == np.float32
    np.testing.assert_array_equal(data, x)


def test_parquet_explicit_scalar_columns_next_to_vectors(tmp_path):
    table = pa.table({"id": pa.array([5, 6]), "emb": pa.array([[1.0, 2.0], [3.0, 4.0]])})
    pq.write_table(table, tmp_path / "v.parquet")
    info = import_points(tmp_path / "v.parquet", tmp_path / "v.zarr", columns=["id"])
    np.testing.assert_array_equal(_read(info["path"])[1], [[5], [6]])


@pytest.mark.parametrize(
    "table, kwargs, match",
    [
        (pa.table({"emb": pa.array([[1.0, 2.0], [3.0], [4.0, 5.0]])}), {}, "ragged vectors: row 1 has 1 values"),
        (pa.table({"emb": pa.array([[1.0, 2.0], None])}), {}, "row 1 has no vector"),
        (pa.table({"s": pa.array(["a", "b"])}), {}, "no numeric columns"),
        (pa.table({"s": pa.array(["a", "b"]), "x": pa.array([1.0, 2.0])}), {"columns": ["s"]}, "not numeric"),
        (pa.table({"x": pa.array([1.0])}), {"columns": ["nope"]}, "'nope' is not in Parquet"),
        (pa.table({"a": pa.array([[1.0]]), "b": pa.array([[2.0]])}), {}, "several vector columns"),
        (pa.table({"a": pa.array([[1.0]]), "x": pa.array([2.0])}), {"columns": ["a", "x"]}, "imported alone"),
    ],
    ids=["ragged", "null-vector", "text-only", "text-requested", "unknown", "two-vectors", "vector-and-scalar"],
)
def test_parquet_errors(tmp_path, table, kwargs, match):
    pq.write_table(table, tmp_path / "p.parquet")
    with pytest.raises(InputError, match=match):
        import_points(tmp_path / "p.parquet", tmp_path / "p.zarr", **kwargs)
    assert _names(tmp_path) == ["p.parquet"]


def test_parquet_ragged_in_a_later_batch_leaves_nothing(tmp_path):
    vectors = [[float(i), float(i)] for i in range(3000)]
    vectors[2500] = [1.0, 2.0, 3.0]
    pq.write_table(pa.table({"emb": pa.array(vectors)}), tmp_path / "p.parquet", row_group_size=1000)
    with pytest.raises(InputError, match="row 2500 has 3 values"):
        import_points(tmp_path / "p.parquet", tmp_path / "p.zarr", chunk_rows=1024)
    assert _names(tmp_path) == ["p.parquet"]


# -- common ----------------------------------------------------------------------
def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        import_points(tmp_path / "nope.csv", tmp_path / "p.zarr")
    assert _names(tmp_path) == []


def test_unknown_extension(tmp_path):
    (tmp_path / "p.xlsx").write_text("x")
    with pytest.raises(InputError, match="unknown extension '.xlsx'.*'.csv'"):
        import_points(tmp_path / "p.xlsx", tmp_path / "p.zarr")
    assert _names(tmp_path) == ["p.xlsx"]


def test_corrupt_parquet(tmp_path):
    (tmp_path / "p.parquet").write_text("not parquet")
    with pytest.raises(InputError, match="cannot read .* as a Parquet file"):
        import_points(tmp_path / "p.parquet", tmp_path / "p.zarr")
    assert _names(tmp_path) == ["p.parquet"]


def test_existing_output_refused_before_reading(tmp_path):
    np.save(tmp_path / "x.npy", np.ones((3, 2)))
    (tmp_path / "x.zarr").mkdir()
    with pytest.raises(InputError, match="already exists"):
        import_points(tmp_path / "x.npy", tmp_path / "x.zarr")
    assert list((tmp_path / "x.zarr").iterdir()) == []
    info = import_points(tmp_path / "x.npy", tmp_path / "x.zarr", overwrite=True)
    assert info["rows"] == 3
    assert _names(tmp_path) == ["x.npy", "x.zarr"]


def test_csv_pandas_index_column_is_skipped(tmp_path):
    x = np.array([[0.5, 1.0], [2.0, 3.0], [4.0, 5.5]])
    pd.DataFrame(x, columns=["a", "b"]).to_csv(tmp_path / "p.csv")  # writes the index as an unnamed column
    info = import_points(tmp_path / "p.csv", tmp_path / "p.zarr")
    assert info["columns"] == ["a", "b"]
    np.testing.assert_array_equal(_read(info["path"])[1], x)


def test_csv_empty_fields_become_nan(tmp_path):
    (tmp_path / "p.csv").write_text("x,y\n1,\n2,3\n")
    info = import_points(tmp_path / "p.csv", tmp_path / "p.zarr")
    data = _read(info["path"])[1]
    assert np.isnan(data[0, 1]) and data[1].tolist() == [2.0, 3.0]


def test_npy_zero_rows(tmp_path):
    np.save(tmp_path / "x.npy", np.empty((0, 3), np.float32))
    info = import_points(tmp_path / "x.npy", tmp_path / "x.zarr")
    assert info["rows"] == 0 and zarr.open_array(info["path"], mode="r").shape == (0, 3)


@pytest.mark.parametrize("chunk_rows", [0, -4, 2.5])
def test_bad_chunk_rows(tmp_path, chunk_rows):
    np.save(tmp_path / "x.npy", np.ones((3, 2)))
    with pytest.raises(InputError, match="chunk_rows must be a positive integer"):
        import_points(tmp_path / "x.npy", tmp_path / "x.zarr", chunk_rows=chunk_rows)
    assert _names(tmp_path) == ["x.npy"]
