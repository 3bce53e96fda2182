"""Damaged Zarr stores and inexact integers are refused, on a real multi-process cluster and through the real CLI.

A chunk file that is missing, truncated or undecodable is a ``DamagedStoreError`` (an
``InputError``: the CLI exits with code 2) naming the store and the chunk key, whether rows
are read straight from the chunk files (uncompressed v3) or through zarr (compressed v3,
v2); ``daskjoin.missing-chunks = "fill"`` opts into zarr's fill-value rule.  int64/uint64
values beyond 2**53 are refused: float64 would round them.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import dask
import numpy as np
import pytest
import zarr
from scipy.spatial import cKDTree

sys.path.insert(0, str(Path(__file__).resolve().parent))

import daskjoin  # noqa: E402
from clihelpers import _env, _explain, run_cli, run_many  # noqa: E402
from daskjoin.io.sets_in import open_sets, prepare_sets, read_sets_range, read_vocab, write_sets  # noqa: E402
from daskjoin.io.synth import synth  # noqa: E402
from daskjoin.io.zarr_in import chunk_files, open_points  # noqa: E402
from daskjoin.planning import cache  # noqa: E402
from daskjoin.validation import DamagedStoreError, InputError  # noqa: E402

N, D, CHUNK, EPS = 20000, 3, 1000, 0.05
LOST = 5  # the row chunk the tests damage: rows 5000..5999


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0",
                           memory_limit=0)
    c = Client(cluster)
    yield c
    c.close()
    cluster.close()


@pytest.fixture(scope="module")
def points(tmp_path_factory):
    """The tester's store: 20 chunks of uniform float32 points (uncompressed v3: the direct path) and its rows."""
    path = synth("uniform", N, D, tmp_path_factory.mktemp("pts") / "X.zarr", chunk_rows=CHUNK)
    return path, np.asarray(zarr.open_array(path, mode="r")[:])


def pair_count(x: np.ndarray, eps: float = EPS) -> int:
    """The oracle: scipy's cKDTree on float64 (pairs at distance <= eps, i < j)."""
    return len(cKDTree(np.asarray(x, np.float64)).query_pairs(eps))


def copy_store(src: str, dst: Path) -> str:
    shutil.copytree(src, dst)
    return str(dst)


def write_array(path: Path, data: np.ndarray, layout: str) -> str:
    """``data`` as a Zarr array of 1000-row chunks: "raw" (uncompressed v3), "zstd" (compressed v3) or "v2"."""
    kwargs = {"raw": dict(compressors=None), "zstd": {}, "v2": dict(zarr_format=2)}[layout]
    arr = zarr.create_array(store=str(path), shape=data.shape, chunks=(CHUNK, data.shape[1]), dtype=data.dtype,
                            config={"write_empty_chunks": True}, **kwargs)
    arr[:] = data
    return str(path)


def chunk_key(layout: str, row_chunk: int = LOST) -> str:
    return f"{row_chunk}.0" if layout == "v2" else f"c/{row_chunk}/0"


def chunk_path(store: str, layout: str, row_chunk: int = LOST) -> str:
    return os.path.join(store, *chunk_key(layout, row_chunk).split("/"))


def truncate(path: str, keep: int = 1500) -> None:
    with open(path, "r+b") as f:
        f.truncate(keep)


def one_error_line(proc, key: str) -> str:
    """The CLI failed with code 2, printing one line that names ``key`` and no traceback."""
    assert proc.returncode == 2, _explain(proc)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("daskjoin: error: damaged Zarr store"), _explain(proc)
    assert f"chunk '{key}'" in lines[0] and "Traceback" not in proc.stderr, _explain(proc)
    return lines[0]


# --------------------------------------------------------------------------- missing and unreadable chunks


@pytest.mark.parametrize("layout", ["raw", "zstd", "v2"])
def test_missing_chunk_is_an_error_naming_store_and_key(client, points, tmp_path, layout):
    path = write_array(tmp_path / "x.zarr", points[1], layout)
    os.remove(chunk_path(path, layout))
    for call in (lambda: daskjoin.similarity_join(path, eps=EPS, output="count", client=client),
                 lambda: daskjoin.plan_join(path, eps=EPS, client=client),
                 lambda: open_points(path, "A").read(4500, 6500)):  # what a worker's read does
        with pytest.raises(DamagedStoreError) as info:
            call()
        err = info.value
        assert isinstance(err, InputError)
        assert err.store == path and err.key == chunk_key(layout)
        message = str(err)
        assert repr(path) in message and f"chunk '{chunk_key(layout)}'" in message and "missing" in message
        assert "rows 5000..5999" in message and "daskjoin.missing-chunks" in message and "re-create" in message


@pytest.mark.parametrize("layout", ["raw", "zstd", "v2"])
def test_truncated_chunk_is_an_error_naming_store_and_key(client, points, tmp_path, layout):
    path = write_array(tmp_path / "x.zarr", points[1], layout)
    truncate(chunk_path(path, layout), os.path.getsize(chunk_path(path, layout)) // 2)
    for mode in ("error", "fill"):  # fill-value semantics are for missing chunks only
        with dask.config.set({"daskjoin.missing-chunks": mode}):
            with pytest.raises(DamagedStoreError) as info:
                daskjoin.similarity_join(path, eps=EPS, output="count", client=client)
        assert info.value.store == path and info.value.key == chunk_key(layout)
        assert "restore that file" in str(info.value)
        if layout == "raw":
            assert "expected 12000 (truncated)" in str(info.value)
        else:
            assert "cannot be read or decoded" in str(info.value)


def test_undecodable_and_oversized_chunks(points, tmp_path):
    path = write_array(tmp_path / "z.zarr", points[1], "zstd")
    with open(chunk_path(path, "zstd", 3), "wb") as f:
        f.write(b"not zstd at all" * 10)
    with pytest.raises(DamagedStoreError, match=r"chunk 'c/3/0' \(rows 3000..3999\) cannot be read or decoded"):
        open_points(path, "A").read(0, N)
    raw = write_array(tmp_path / "r.zarr", points[1], "raw")
    with open(chunk_path(raw, "raw", 19), "ab") as f:
        f.write(b"\0" * 8)
    with pytest.raises(DamagedStoreError, match=r"chunk 'c/19/0' .* is 12008 bytes, expected 12000"):
        open_points(raw, "A").read(18500, 20000)
    np.testing.assert_array_equal(open_points(raw, "A").read(0, 1000), points[1][:1000])  # other chunks still read


def test_missing_shard_names_the_shard_file(points, tmp_path):
    path = str(tmp_path / "s.zarr")
    arr = zarr.create_array(store=path, shape=points[1].shape, chunks=(500, D), shards=(2000, D),
                            dtype=points[1].dtype, compressors=None)
    arr[:] = points[1]
    os.remove(os.path.join(path, "c", "2", "0"))
    with pytest.raises(DamagedStoreError, match=r"chunk 'c/2/0' \(rows 4000..5999\) is missing"):
        open_points(path, "A").read(0, N)


def test_array_inside_a_group_keys_by_array_path(points, tmp_path):
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    group.create_array("points", shape=points[1].shape, chunks=(CHUNK, D), dtype=points[1].dtype,
                       compressors=None)[:] = points[1]
    os.remove(tmp_path / "g.zarr" / "points" / "c" / "5" / "0")
    with pytest.raises(DamagedStoreError) as info:  # the group's array: the key is inside the group's store
        open_points(zarr.open_group(str(tmp_path / "g.zarr"), mode="r")["points"], "A").read(0, N)
    assert info.value.store == str(tmp_path / "g.zarr") and info.value.key == "points/c/5/0"
    with pytest.raises(DamagedStoreError) as info:  # the array's own path: that is the store
        open_points(str(tmp_path / "g.zarr" / "points"), "A").read(0, N)
    assert info.value.store == str(tmp_path / "g.zarr" / "points") and info.value.key == "c/5/0"


def test_v2_chunk_keys_are_known(points, tmp_path):
    path = write_array(tmp_path / "x.zarr", points[1], "v2")
    files = chunk_files(open_points(path, "A"))
    assert [os.path.relpath(f, path) for f in files[:2]] == ["0.0", "1.0"] and len(files) == N // CHUNK


# --------------------------------------------------------------------------- fill-value semantics, only on request


@pytest.mark.parametrize("layout", ["raw", "zstd", "v2"])
def test_fill_mode_reads_a_missing_chunk_as_the_fill_value(client, points, tmp_path, layout):
    path = write_array(tmp_path / "x.zarr", points[1], layout)
    os.remove(chunk_path(path, layout))
    zeroed = points[1].copy()
    zeroed[LOST * CHUNK:(LOST + 1) * CHUNK] = 0
    with dask.config.set({"daskjoin.missing-chunks": "fill"}):  # the workers' own config says "error"
        n = daskjoin.similarity_join(path, eps=EPS, output="count", client=client)
        source = open_points(path, "A")
    assert n == pair_count(zeroed) and n > pair_count(points[1]) + 400_000
    assert source.missing_chunks == "fill"
    with pytest.raises(DamagedStoreError):  # the default again: the cached plan and statistics do not hide it
        daskjoin.similarity_join(path, eps=EPS, output="count", client=client)


def test_invalid_missing_chunks_value_is_an_input_error(points):
    with dask.config.set({"daskjoin.missing-chunks": "zeros"}):
        with pytest.raises(InputError, match="daskjoin.missing-chunks must be 'error' or 'fill', got 'zeros'"):
            open_points(points[0], "A")


# --------------------------------------------------------------------------- the statistics cache


def test_cached_statistics_do_not_hide_later_damage(client, points, tmp_path):
    path = copy_store(points[0], tmp_path / "x.zarr")
    expected = pair_count(points[1])
    assert daskjoin.similarity_join(path, eps=EPS, output="count", client=client) == expected
    assert any(name.startswith("stats-") for name in os.listdir(path + ".daskjoin"))  # statistics cached
    lost = chunk_path(path, "raw")
    saved = open(lost, "rb").read()
    with dask.config.set({"daskjoin.missing-chunks": "fill"}):
        before = cache.fingerprint(open_points(path, "A"))
        os.remove(lost)
        assert cache.fingerprint(open_points(path, "A")) != before  # the key of the cached statistics moved
    with pytest.raises(DamagedStoreError, match="c/5/0"):
        daskjoin.similarity_join(path, eps=EPS, output="count", client=client)
    with open(lost, "wb") as f:
        f.write(saved[:1500])
    with pytest.raises(DamagedStoreError, match="c/5/0"):
        daskjoin.similarity_join(path, eps=EPS, output="count", client=client)
    with open(lost, "wb") as f:
        f.write(saved)
    assert daskjoin.similarity_join(path, eps=EPS, output="count", client=client) == expected


def test_truncated_compressed_chunk_after_a_cached_join(client, points, tmp_path):
    path = write_array(tmp_path / "z.zarr", points[1], "zstd")
    expected = pair_count(points[1])
    assert daskjoin.similarity_join(path, eps=EPS, output="count", client=client) == expected
    truncate(chunk_path(path, "zstd"), 100)
    with pytest.raises(DamagedStoreError, match="c/5/0"):
        daskjoin.similarity_join(path, eps=EPS, output="count", client=client)


# --------------------------------------------------------------------------- integers


BIG = 2**53


@pytest.mark.parametrize("dtype,value", [("uint64", BIG + 1), ("int64", BIG + 1), ("int64", -BIG - 3),
                                         ("uint64", 2**64 - 1)])
def test_integers_beyond_2_53_are_refused(client, tmp_path, dtype, value):
    x = np.zeros((3000, 2), dtype)
    x[:, 0] = np.arange(3000)
    x[2345, 1] = value
    with pytest.raises(InputError, match=rf"A holds the {dtype} value {value} in row 2345, beyond ±2\*\*53") as info:
        daskjoin.similarity_join(x, eps=1.5, output="count", client=client)
    assert "astype(np.float64)" in str(info.value)
    path = write_array(tmp_path / "x.zarr", x, "raw")
    with pytest.raises(InputError, match=rf"holds the {dtype} value {value} in row 2345") as info:
        daskjoin.similarity_join(path, eps=1.5, output="count", client=client)
    assert path in str(info.value) and not isinstance(info.value, DamagedStoreError)


def test_int64_within_2_53_is_accepted_and_exact(client, tmp_path):
    rng = np.random.default_rng(3)
    base = np.array([BIG - 50, -BIG + 50], np.int64)
    x = base + rng.integers(-40, 41, size=(4000, 2))  # as close to ±2**53 as it gets; float64 holds all
    assert np.abs(x).max() <= BIG and np.abs(x).max() > BIG - 100
    exact = 0  # pairs at distance <= 2, in integer arithmetic
    for i in range(len(x) - 1):
        exact += int((((x[i + 1:] - x[i]) ** 2).sum(axis=1) <= 4).sum())
    assert exact > 100
    assert daskjoin.similarity_join(x, eps=2.0, output="count", client=client) == exact
    path = write_array(tmp_path / "x.zarr", x, "zstd")
    assert daskjoin.similarity_join(path, eps=2.0, output="count", client=client) == exact
    u = (x + np.array([0, 2 * BIG - 100])).astype(np.uint64)  # both columns just below 2**53
    assert u.max() <= BIG and u.min() > BIG - 100
    assert daskjoin.similarity_join(u, eps=2.0, output="count", client=client) == exact
    assert daskjoin.similarity_join(write_array(tmp_path / "u.zarr", u, "v2"), eps=2.0, output="count",
                                    client=client) == exact


# --------------------------------------------------------------------------- set stores


def test_set_store_with_a_missing_chunk(tmp_path):
    rng = np.random.default_rng(5)
    sets = [list(rng.choice(60, rng.integers(1, 9), replace=False)) for _ in range(400)]
    path = write_sets(prepare_sets(sets), tmp_path / "s.zarr")
    whole = open_sets(path)
    for name in ("tokens", "offsets", "ids"):
        damaged = copy_store(path, tmp_path / f"{name}.zarr")
        os.remove(os.path.join(damaged, name, "c", "0"))
        for call in (lambda: open_sets(damaged), lambda: read_sets_range(damaged, 10, 20)):
            with pytest.raises(DamagedStoreError) as info:
                call()
            assert info.value.store == damaged and info.value.key == f"{name}/c/0"
            assert "missing" in str(info.value)
    damaged = copy_store(path, tmp_path / "freq.zarr")
    os.remove(os.path.join(damaged, "freq", "c", "0"))
    with pytest.raises(DamagedStoreError, match="'freq/c/0'"):
        read_vocab(damaged)
    part = read_sets_range(str(tmp_path / "ids.zarr"), 10, 20, missing_chunks="fill")  # zarr's rule, on request
    assert part.ids.tolist() == [0] * 10 and part.tokens.tolist() == whole.slice(10, 20).tokens.tolist()
    with dask.config.set({"daskjoin.missing-chunks": "fill"}):
        assert read_sets_range(str(tmp_path / "ids.zarr"), 10, 20).ids.tolist() == [0] * 10


def test_set_store_with_a_truncated_or_overlong_chunk(tmp_path):
    """The chunk files read straight from disk are checked for their size: a short or long one is damage."""
    rng = np.random.default_rng(8)
    sets = [list(rng.choice(60, rng.integers(1, 9), replace=False)) for _ in range(400)]
    path = write_sets(prepare_sets(sets), tmp_path / "s.zarr")
    for name, change in (("tokens", "truncated"), ("ids", "longer")):
        damaged = copy_store(path, tmp_path / f"{name}.zarr")
        chunk = os.path.join(damaged, name, "c", "0")
        if change == "truncated":
            truncate(chunk, os.path.getsize(chunk) - 4)
        else:
            with open(chunk, "ab") as f:
                f.write(b"\0" * 8)
        for call in (lambda: open_sets(damaged), lambda: read_sets_range(damaged, 10, 20)):
            with pytest.raises(DamagedStoreError) as info:
                call()
            assert info.value.key == f"{name}/c/0" and change in str(info.value)


@pytest.mark.parametrize("compressed", [False, True])
def test_set_store_ranges_across_chunks_read_as_zarr_reads_them(tmp_path, monkeypatch, compressed):
    """Ranges of a store of many small chunks, read straight from the files (plain chunks) or through zarr
    (compressed ones, which the direct read leaves to zarr), give zarr's entries."""
    from daskjoin.io import sets_store
    from daskjoin.io.zarr_in import read_raw_entries

    monkeypatch.setattr(sets_store, "TOKENS_CHUNK", 7)
    monkeypatch.setattr(sets_store, "ROWS_CHUNK", 5)
    rng = np.random.default_rng(9)
    sets = [list(rng.choice(30, rng.integers(1, 6), replace=False)) for _ in range(60)]
    path = write_sets(prepare_sets(sets), tmp_path / "s.zarr")
    if compressed:
        for name in ("tokens", "offsets", "ids"):
            data = zarr.open_array(os.path.join(path, name), mode="r")[:]
            shutil.rmtree(os.path.join(path, name))
            zarr.create_array(store=os.path.join(path, name), data=data, chunks=(3,),
                              compressors=[zarr.codecs.ZstdCodec()])
    for name in ("tokens", "offsets", "ids"):
        arr = zarr.open_array(os.path.join(path, name), mode="r")
        raw = read_raw_entries(path, name, 0, arr.shape[0])
        assert (raw is None) == compressed
        if raw is not None:
            assert raw.dtype == arr.dtype and np.array_equal(raw, arr[:])
    whole = open_sets(path)
    for lo, hi in ((0, 60), (3, 4), (4, 11), (10, 10), (59, 60), (17, 43)):
        part = read_sets_range(path, lo, hi)
        want = whole.slice(lo, hi)
        assert part.tokens.tolist() == want.tokens.tolist() and part.ids.tolist() == want.ids.tolist()
        assert part.offsets.tolist() == (want.offsets - want.offsets[0]).tolist()


def test_set_store_chunks_zarr_never_wrote_are_not_damage(tmp_path):
    """Stores written before write_sets wrote every chunk lack their all-zero chunks: those still read.

    (zarr's default write_empty_chunks=False left them out; simulated by removing the chunk.)
    """
    path = write_sets(prepare_sets([[0]]), tmp_path / "one.zarr")  # ids [0], tokens [0], vocab [0]
    assert os.path.exists(os.path.join(path, "ids", "c", "0"))  # written now, zeros and all
    os.remove(os.path.join(path, "ids", "c", "0"))
    c = open_sets(path)
    assert c.ids.tolist() == [0] and c.tokens.tolist() == [0] and c.vocab.tolist() == [0]
    assert read_sets_range(path, 0, 1).tokens.tolist() == [0]
    path = write_sets(prepare_sets([[7], [7], [7]]), tmp_path / "same.zarr")  # tokens [0, 0, 0]
    os.remove(os.path.join(path, "tokens", "c", "0"))
    assert open_sets(path).tokens.tolist() == [0, 0, 0]


def test_set_join_on_a_store_with_a_missing_tokens_chunk(client, tmp_path):
    from daskjoin import set_similarity_join

    rng = np.random.default_rng(6)
    sets = [list(rng.choice(40, rng.integers(2, 7), replace=False)) for _ in range(300)]
    path = write_sets(prepare_sets(sets), tmp_path / "s.zarr")
    os.remove(os.path.join(path, "tokens", "c", "0"))
    with pytest.raises(DamagedStoreError, match="'tokens/c/0'"):
        set_similarity_join(path, threshold=0.5, output="count", client=client)


# --------------------------------------------------------------------------- the CLI


def test_cli_damaged_stores_exit_2_with_one_line(points, tmp_path):
    missing = copy_store(points[0], tmp_path / "M.zarr")
    os.remove(chunk_path(missing, "raw"))
    truncated = copy_store(points[0], tmp_path / "T.zarr")
    truncate(chunk_path(truncated, "raw"))
    join = ["join", None, "--eps", "0.05", "--count"]
    procs = run_many({name: [p if a is None else a for a in join] for name, p in
                      (("missing", missing), ("truncated", truncated))}, tmp_path, workers=2)
    line = one_error_line(procs["missing"], "c/5/0")
    assert "is missing" in line and "DASK_DASKJOIN__MISSING_CHUNKS=fill" in line
    assert "1500 bytes, expected 12000 (truncated)" in one_error_line(procs["truncated"], "c/5/0")


def test_cli_fill_mode_and_integers(client, points, tmp_path):
    """On the module's cluster (--scheduler): its workers follow the CLI's choice, not their own config."""
    missing = copy_store(points[0], tmp_path / "M.zarr")
    os.remove(chunk_path(missing, "raw"))
    zeroed = points[1].copy()
    zeroed[LOST * CHUNK:(LOST + 1) * CHUNK] = 0
    x = np.zeros((3000, 2), np.int64)
    x[:, 0] = np.arange(3000)
    x[17, 1] = BIG + 1
    ints = write_array(tmp_path / "I.zarr", x, "raw")
    address = client.scheduler.address
    fill = run_cli(["join", missing, "--eps", "0.05", "--count", "--scheduler", address], tmp_path,
                   env=_env(DASK_DASKJOIN__MISSING_CHUNKS="fill"))
    assert fill.returncode == 0, _explain(fill)
    assert int(fill.stdout.split()[0]) == pair_count(zeroed)
    refused = run_cli(["join", ints, "--eps", "1.5", "--count", "--scheduler", address], tmp_path)
    assert refused.returncode == 2, _explain(refused)
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("daskjoin: error:") and "int64 value 9007199254740993 in row 17" in last, _explain(refused)


@pytest.mark.parametrize("fmt", ["npy", "parquet", "parquet_vectors", "csv"])
def test_import_refuses_integers_beyond_2_53(tmp_path, fmt):
    """``daskjoin import`` never rounds int64 values silently on their way to float64."""
    import pandas as pd

    from daskjoin.io.importers import import_points

    values = np.array([[1, 2], [2**53 + 1, 3]], dtype=np.int64)
    src = tmp_path / f"x.{fmt if fmt in ('npy', 'csv') else 'parquet'}"
    if fmt == "npy":
        np.save(src, values)
    elif fmt == "csv":
        src.write_text("a,b\n1,2\n9007199254740993,3\n")
    elif fmt == "parquet":
        pd.DataFrame({"a": values[:, 0], "b": values[:, 1]}).to_parquet(src)
    else:
        pd.DataFrame({"v": list(values)}).to_parquet(src)
    with pytest.raises(InputError, match=r"9007199254740993 in row \d, beyond ±2\*\*53"):
        import_points(src, tmp_path / "x.zarr")
    assert not (tmp_path / "x.zarr").exists()
    ok = values.copy()
    ok[1, 0] = 2**53
    np.save(tmp_path / "ok.npy", ok)
    import_points(tmp_path / "ok.npy", tmp_path / "ok.zarr")
