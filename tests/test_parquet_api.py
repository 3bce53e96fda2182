"""``similarity_join(..., out=PATH)``: Parquet files, the ``_SUCCESS`` manifest, idempotence, refusals."""
from __future__ import annotations

import json
import os
import re

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import daskjoin as dj
from joinhelpers import budget_for_tasks, check_frame, frame_triple, oracle, write_zarr
from oracle import assert_same_pairs

pytestmark = pytest.mark.integration

PART_RE = re.compile(r"^part-\d{5}-\d{5}\.parquet$")


def _data(seed=0, n=1500, d=2):
    return np.random.default_rng(seed).random((n, d))


def _snapshot(path) -> dict:
    """Every file under ``path``: relative name -> (bytes, mtime_ns)."""
    out = {}
    for folder, _, files in os.walk(path):
        for name in files:
            full = os.path.join(folder, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, path)] = (f.read(), os.stat(full).st_mtime_ns)
    return out


def _read_parts(path, with_distance=True) -> pd.DataFrame:
    names = sorted(n for n in os.listdir(path) if PART_RE.match(n))
    frames = [pq.read_table(os.path.join(path, n)).to_pandas() for n in names]
    cols = ["i", "j", "dist"] if with_distance else ["i", "j"]
    if not frames:
        return pd.DataFrame({c: [] for c in cols})
    return pd.concat(frames, ignore_index=True)


def _check_output_dir(path, result, expected_rows):
    """Files, manifest and JoinResult agree with each other and with the expected row count."""
    names = sorted(os.listdir(path))
    parts = [n for n in names if PART_RE.match(n)]
    assert set(names) == set(parts) | {"_SUCCESS"}, f"unexpected files in output: {names}"
    with open(os.path.join(path, "_SUCCESS")) as f:
        manifest = json.load(f)
    listed = [e["file"] for e in manifest["files"]]
    assert sorted(listed) == parts
    for entry in manifest["files"]:
        assert pq.read_metadata(os.path.join(path, entry["file"])).num_rows == entry["rows"], entry
    assert manifest["rows"] == sum(e["rows"] for e in manifest["files"]) == expected_rows
    assert isinstance(result, dj.JoinResult)
    assert result.pairs == expected_rows and result.files == len(parts)
    # every partition has its pieces 0..k-1 (one file at least, also where it has no pairs)
    pieces = {}
    for name in parts:
        pieces.setdefault(int(name[5:10]), []).append(int(name[11:16]))
    assert sorted(pieces) == list(range(result.plan.ntasks))
    assert all(sorted(k) == list(range(len(k))) for k in pieces.values())
    assert os.path.samefile(result.path, path)
    return manifest


@pytest.mark.parametrize("partitioning", ["chunk_pairs", "slabs"])
@pytest.mark.parametrize("mode", ["self", "cross"])
def test_parquet_matches_oracle(client, tmp_path, mode, partitioning):
    a = _data(1)
    b = None if mode == "self" else _data(2, 1200)
    pa = write_zarr(tmp_path / "a.zarr", a, 200)
    pb = None if b is None else write_zarr(tmp_path / "b.zarr", b, 200)
    budget, ntasks = budget_for_tasks(pa, pb, 0.03, partitioning, 6, client)
    assert ntasks > 1
    out = tmp_path / "pairs.parquet"
    result = dj.similarity_join(pa, pb, eps=0.03, partitioning=partitioning, memory_budget=budget, out=out,
                                client=client)
    expected = oracle(a, b, 0.03)
    _check_output_dir(out, result, expected[0].size)
    got = _read_parts(out)
    check_frame(got, selfjoin=(mode == "self"))
    assert_same_pairs(frame_triple(got), expected, a=a, b=b, eps=0.03)
    # the documented way to read it back
    back = client.compute(result.read()).result()
    check_frame(back, selfjoin=(mode == "self"))
    assert_same_pairs(frame_triple(back), expected, a=a, b=b, eps=0.03)
    # pandas / pyarrow read the directory as a dataset (the manifest is ignored by its leading underscore)
    whole = pd.read_parquet(out)
    assert len(whole) == expected[0].size
    assert str(result).startswith(f"{expected[0].size:,} pairs")


def test_rerun_with_overwrite_is_byte_identical(client, tmp_path):
    x = _data(3)
    px = write_zarr(tmp_path / "x.zarr", x, 150)
    budget, ntasks = budget_for_tasks(px, None, 0.03, "slabs", 6, client)
    out = tmp_path / "out.parquet"
    kw = dict(eps=0.03, partitioning="slabs", memory_budget=budget, client=client)
    first = dj.similarity_join(px, out=out, **kw)
    parts1 = {n: b for n, (b, _) in _snapshot(out).items() if n != "_SUCCESS"}
    manifest1 = json.load(open(out / "_SUCCESS"))
    second = dj.similarity_join(px, out=out, overwrite=True, **kw)
    parts2 = {n: b for n, (b, _) in _snapshot(out).items() if n != "_SUCCESS"}
    manifest2 = json.load(open(out / "_SUCCESS"))
    assert parts1.keys() == parts2.keys() and len(parts1) == ntasks
    for name in parts1:
        assert parts1[name] == parts2[name], f"{name} differs between two runs"
    assert manifest1["files"] == manifest2["files"] and manifest1["rows"] == manifest2["rows"]
    assert first.pairs == second.pairs == oracle(x, None, 0.03)[0].size


def test_overwrite_replaces_old_contents(client, tmp_path):
    """An old daskjoin output (stale parts, a killed task's temporary) is replaced whole."""
    x = _data(4, 500)
    out = tmp_path / "out.parquet"
    out.mkdir()
    (out / "part-00999.parquet").write_bytes(b"stale")
    (out / ".part-00001.parquet.tmp-0123abcd").write_bytes(b"half")
    result = dj.similarity_join(x, eps=0.05, out=out, overwrite=True, client=client)
    _check_output_dir(out, result, oracle(x, None, 0.05)[0].size)
    assert not [p for p in tmp_path.iterdir() if p.name != "out.parquet"], "leftovers beside the output"


def test_overwrite_refuses_a_directory_daskjoin_did_not_write(client, tmp_path):
    """overwrite never deletes data: a directory holding other files is refused and left as it was."""
    x = _data(4, 500)
    out = tmp_path / "out.parquet"
    out.mkdir()
    (out / "part-00999.parquet").write_bytes(b"stale")
    (out / "notes.txt").write_text("old")
    before = _snapshot(out)
    with pytest.raises(dj.InputError, match="not a daskjoin output.*notes.txt"):
        dj.similarity_join(x, eps=0.05, out=out, overwrite=True, client=client)
    assert _snapshot(out) == before


@pytest.mark.parametrize("existing", ["dir", "file", "empty_dir"])
def test_existing_output_refused_and_untouched(client, tmp_path, existing):
    x = _data(5, 300)
    out = tmp_path / "out.parquet"
    if existing == "dir":
        dj.similarity_join(x, eps=0.05, out=out, client=client)
    elif existing == "file":
        out.write_text("precious")
    else:
        out.mkdir()
    before = _snapshot(out) if out.is_dir() else {"": (out.read_bytes(), os.stat(out).st_mtime_ns)}
    with pytest.raises(dj.InputError) as info:
        dj.similarity_join(x, eps=0.05, out=out, client=client)
    msg = str(info.value)
    assert "exists" in msg and "overwrite" in msg and str(out) in msg
    after = _snapshot(out) if out.is_dir() else {"": (out.read_bytes(), os.stat(out).st_mtime_ns)}
    assert after == before


def test_bad_input_with_overwrite_keeps_old_output(client, tmp_path):
    """A refused join never destroys the output it would have replaced."""
    x = _data(6, 300)
    out = tmp_path / "out.parquet"
    dj.similarity_join(x, eps=0.05, out=out, client=client)
    before = _snapshot(out)
    bad = x.copy()
    bad[17, 1] = np.nan
    for kwargs in (dict(a=x, eps=-1.0), dict(a=bad, eps=0.05), dict(a=x, eps=0.05, method="nope")):
        a = kwargs.pop("a")
        with pytest.raises(dj.InputError):
            dj.similarity_join(a, out=out, overwrite=True, client=client, **kwargs)
        assert _snapshot(out) == before


def test_without_distance_has_no_dist_column(client, tmp_path):
    x = _data(7, 800, 3)
    out = tmp_path / "out.parquet"
    result = dj.similarity_join(x, eps=0.1, out=out, with_distance=False, client=client, memory_budget="32KiB")
    expected = oracle(x, None, 0.1)
    _check_output_dir(out, result, expected[0].size)
    for name in os.listdir(out):
        if PART_RE.match(name):
            assert pq.read_schema(out / name).names == ["i", "j"]
    got = _read_parts(out, with_distance=False)
    check_frame(got, selfjoin=True, with_distance=False)
    assert_same_pairs((got["i"].to_numpy(), got["j"].to_numpy(), None), expected)


def test_schema_types(client, tmp_path):
    x = _data(8, 400)
    out = tmp_path / "out.parquet"
    dj.similarity_join(x, eps=0.05, out=out, client=client)
    import pyarrow as pa

    for name in os.listdir(out):
        if PART_RE.match(name):
            schema = pq.read_schema(out / name)
            assert schema.field("i").type == pa.int64() and schema.field("j").type == pa.int64()
            assert schema.field("dist").type == pa.float32()


def _set_row_group_bytes(value):
    import dask

    old = dask.config.get("daskjoin.row-group-bytes", None)
    dask.config.set({"daskjoin.row-group-bytes": value})
    return old


def test_batched_row_groups_match_oracle(client, tmp_path):
    """Partitions with more pairs than one row group holds are written in bounded batches."""
    x = _data(9, 1500)
    old = client.run(_set_row_group_bytes, "2KiB")
    try:
        out = tmp_path / "out.parquet"
        result = dj.similarity_join(x, eps=0.05, out=out, client=client, memory_budget="256KiB")
        again = tmp_path / "again.parquet"
        dj.similarity_join(x, eps=0.05, out=again, client=client, memory_budget="256KiB")
    finally:
        for addr, value in old.items():
            client.run(_set_row_group_bytes, value, workers=[addr])
    expected = oracle(x, None, 0.05)
    _check_output_dir(out, result, expected[0].size)
    names = [n for n in os.listdir(out) if PART_RE.match(n)]
    assert all(pq.ParquetFile(out / n).num_row_groups == 1 for n in names)
    assert result.files == len(names) > len(result.plan.partitions)  # several pieces per partition: the batched path ran
    got = _read_parts(out)
    check_frame(got, selfjoin=True)
    assert_same_pairs(frame_triple(got), expected, a=x, eps=0.05)
    for name in os.listdir(out):
        if PART_RE.match(name):
            assert (out / name).read_bytes() == (again / name).read_bytes()


@pytest.mark.parametrize("what", ["no_pairs", "empty_input"])
def test_empty_results_written_completely(client, tmp_path, what):
    x = _data(10, 300) if what == "no_pairs" else np.zeros((0, 3))
    out = tmp_path / "out.parquet"
    result = dj.similarity_join(x, eps=1e-9, out=out, client=client)
    _check_output_dir(out, result, 0)
    got = _read_parts(out)
    assert len(got) == 0
    for name in os.listdir(out):
        if PART_RE.match(name):
            assert pq.read_schema(out / name).names == ["i", "j", "dist"]


def test_count_with_out_refused(client, tmp_path):
    out = tmp_path / "out.parquet"
    with pytest.raises(dj.InputError, match="count"):
        dj.similarity_join(_data(11, 50), eps=0.1, output="count", out=out, client=client)
    assert not out.exists()


def test_missing_parent_directory_refused(client, tmp_path):
    out = tmp_path / "no" / "such" / "out.parquet"
    with pytest.raises(dj.InputError, match="does not exist"):
        dj.similarity_join(_data(12, 50), eps=0.1, out=out, client=client)
    assert not (tmp_path / "no").exists()
