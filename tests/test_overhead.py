"""The caches that take fixed costs off a repeated join, and the direct Zarr read: behaviour only, never wall-clock.

A repeated join of an unchanged Zarr input reuses its plan, estimate, statistics and
GPU probe; anything that changes the input (re-created at the same path, a chunk
rewritten in place, a chunk file touched by another tool) or the options gives a
fresh plan and the right pairs.  Rows read straight from chunk files equal zarr's.
"""
from __future__ import annotations

import hashlib
import os
import types

import numpy as np
import pytest
import zarr

import daskjoin as dj
from daskjoin.caches import CACHE
from daskjoin import api
from daskjoin.execution import graph, resources
from daskjoin.kinds.epsilon import JoinJob
from daskjoin.io.zarr_in import chunk_files, open_points, raw_layout, read_raw
from daskjoin.io.zarr_out import ZarrPointsWriter
from daskjoin.kernels import host_allocator
from daskjoin.kernels.gpu_common import _pinned_size
from daskjoin.planning import cache, planner
from joinhelpers import write_zarr
from oracle import oracle_self_count

EPS = 0.05


def _write_points(path, x, chunk_rows=300, overwrite=False) -> str:
    """An uncompressed store as ``daskjoin import`` writes it (read straight from its chunk files)."""
    with ZarrPointsWriter(path, d=x.shape[1], dtype=x.dtype, chunk_rows=chunk_rows, overwrite=overwrite) as w:
        w.append(x)
    return str(path)


def _count(path, client, **kw) -> int:
    return dj.similarity_join(path, eps=kw.pop("eps", EPS), client=client, output="count", **kw)


def _pairs(path, client, **kw) -> int:
    return len(dj.similarity_join(path, eps=kw.pop("eps", EPS), client=client, **kw).compute())


# --------------------------------------------------------------------------- plan cache


def test_repeat_reuses_plan(client, tmp_path):
    x = np.random.default_rng(1).random((2000, 2)).astype(np.float32)
    path = _write_points(tmp_path / "x.zarr", x)
    first = dj.plan_join(path, eps=EPS, client=client)
    again = dj.plan_join(path, eps=EPS, client=client)
    assert again is first
    assert _pairs(path, client) == oracle_self_count(x, EPS)
    assert dj.plan_join(path, eps=EPS, client=client) is first  # similarity_join shares the cache


def test_overwritten_store_gives_fresh_plan_and_right_result(client, tmp_path):
    rng = np.random.default_rng(2)
    x = rng.random((2000, 2)).astype(np.float32)
    path = _write_points(tmp_path / "x.zarr", x)
    first = dj.plan_join(path, eps=EPS, client=client)
    assert _count(path, client) == oracle_self_count(x, EPS)
    y = (rng.random((2000, 2)) * 0.3).astype(np.float32)  # same shape and chunks, many more pairs
    _write_points(tmp_path / "x.zarr", y, overwrite=True)
    second = dj.plan_join(path, eps=EPS, client=client)
    assert second is not first
    assert second.estimate.pairs > first.estimate.pairs
    assert _count(path, client) == oracle_self_count(y, EPS)
    assert _pairs(path, client) == oracle_self_count(y, EPS)


def test_chunk_rewritten_in_place_gives_fresh_plan(client, tmp_path):
    rng = np.random.default_rng(3)
    x = rng.random((1200, 2))
    path = write_zarr(tmp_path / "x.zarr", x, 100)  # compressed: read through zarr
    first = dj.plan_join(path, eps=EPS, client=client)
    assert _count(path, client) == oracle_self_count(x, EPS)
    x[300:400] = rng.random((100, 2)) * 0.05
    zarr.open_array(path, mode="r+")[300:400] = x[300:400]
    assert dj.plan_join(path, eps=EPS, client=client) is not first
    assert _count(path, client) == oracle_self_count(x, EPS)
    zarr.open_array(path, mode="r+")[1111, 0] = np.inf
    with pytest.raises(dj.InputError, match="row 1111"):
        _count(path, client)


def test_chunk_file_changed_by_another_tool_gives_fresh_plan(client, tmp_path):
    """Same size, written in place (no rename): the chunk file's stat still tells."""
    x = np.random.default_rng(4).random((900, 2)).astype(np.float32)
    path = _write_points(tmp_path / "x.zarr", x)
    first = dj.plan_join(path, eps=EPS, client=client)
    y = x.copy()
    y[300:600] = np.float32(0.5) + y[300:600] * np.float32(0.01)  # chunk 1 (rows 300..599) made dense
    chunk = chunk_files(open_points(path, "A"))[1]
    with open(chunk, "r+b") as f:
        f.write(y[300:600].tobytes())
    st = os.stat(chunk)
    os.utime(chunk, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # coarse clocks: make the change visible
    second = dj.plan_join(path, eps=EPS, client=client)
    assert second is not first
    assert _count(path, client) == oracle_self_count(y, EPS)


@pytest.mark.parametrize("change", [
    {"eps": 0.07}, {"partitioning": "slabs"}, {"method": "brute"}, {"memory_budget": "64KiB"},
])
def test_other_options_give_other_plans(client, tmp_path, change):
    x = np.random.default_rng(5).random((1500, 2)).astype(np.float32)
    path = _write_points(tmp_path / "x.zarr", x)
    base = dj.plan_join(path, eps=EPS, client=client)
    kw = {"eps": EPS, **change}
    other = dj.plan_join(path, client=client, **kw)
    assert other is not base
    assert dj.plan_join(path, client=client, **kw).partitions is other.partitions  # notes may say "reused" now
    if "eps" in change:
        assert other.eps == change["eps"] and other.estimate.pairs > base.estimate.pairs
    else:
        assert other.estimate == base.estimate  # the same sample and eps: the estimate is shared
    assert _count(path, client, **kw) == oracle_self_count(x, kw["eps"])


def test_other_cluster_gives_other_plan(client, tmp_path):
    x = np.random.default_rng(6).random((500, 2)).astype(np.float32)
    src = open_points(_write_points(tmp_path / "x.zarr", x), "A")
    runner = types.SimpleNamespace(map=lambda f, items: [f(i) for i in items])
    kw = dict(method="auto", partitioning="auto", backend="cpu", memory_budget=1 << 30, runner=runner)
    p1 = planner.make_plan(src, None, EPS, cluster="tcp://a:1", **kw)
    assert planner.make_plan(src, None, EPS, cluster="tcp://a:1", **kw) is p1
    assert planner.make_plan(src, None, EPS, cluster="tcp://b:2", **kw) is not p1


def test_in_memory_inputs_are_never_cached(client):
    x = np.random.default_rng(7).random((800, 2))
    first = dj.plan_join(x, eps=EPS, client=client)
    assert dj.plan_join(x, eps=EPS, client=client) is not first
    x[:100] = 0.5  # mutated in place: must be seen
    assert _count(x, client) == oracle_self_count(x, EPS)


def test_deleted_sorted_copy_is_rebuilt(client, tmp_path):
    import shutil

    x = np.random.default_rng(8).random((1500, 2)).astype(np.float32)
    path = _write_points(tmp_path / "x.zarr", x)
    first = dj.plan_join(path, eps=EPS, partitioning="slabs", memory_budget="64KiB", client=client)
    assert any("sorted copy built at" in note for note in first.notes)
    again = dj.plan_join(path, eps=EPS, partitioning="slabs", memory_budget="64KiB", client=client)
    assert any("sorted copy reused from" in note for note in again.notes)
    shutil.rmtree(tmp_path / "x.zarr.daskjoin")
    third = dj.plan_join(path, eps=EPS, partitioning="slabs", memory_budget="64KiB", client=client)
    assert any("sorted copy built at" in note for note in third.notes)
    assert _count(path, client, partitioning="slabs", memory_budget="64KiB") == oracle_self_count(x, EPS)


def test_changed_data_changes_task_keys(client, tmp_path):
    rng = np.random.default_rng(9)
    x = rng.random((600, 2)).astype(np.float32)
    path = _write_points(tmp_path / "x.zarr", x)
    name1 = dj.similarity_join(path, eps=EPS, client=client)._name
    assert dj.similarity_join(path, eps=EPS, client=client)._name == name1
    _write_points(tmp_path / "x.zarr", rng.random((600, 2)).astype(np.float32), overwrite=True)
    assert dj.similarity_join(path, eps=EPS, client=client)._name != name1


def test_clear_caches(client, tmp_path):
    x = np.random.default_rng(10).random((300, 2)).astype(np.float32)
    path = _write_points(tmp_path / "x.zarr", x)
    first = dj.plan_join(path, eps=EPS, client=client)
    planner.clear_caches()
    assert dj.plan_join(path, eps=EPS, client=client) is not first


# --------------------------------------------------------------------------- fingerprints


def _walk_fingerprint(source) -> str:
    """The fingerprint as earlier versions computed it (on-disk cache names must not change)."""
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


@pytest.mark.parametrize("rows, chunk", [(1000, 100), (5, 100), (0, 10), (3000, 7)])
def test_fingerprint_unchanged_from_earlier_versions(tmp_path, rows, chunk):
    src = open_points(write_zarr(tmp_path / "x.zarr", np.random.default_rng(0).random((rows, 3)), chunk), "A")
    assert cache.full_fingerprint(src) == _walk_fingerprint(src) == cache.fingerprint(src)


def test_state_token_sees_every_chunk(tmp_path):
    x = np.random.default_rng(11).random((1000, 2))
    path = write_zarr(tmp_path / "x.zarr", x, 100)
    src = open_points(path, "A")
    files = chunk_files(src)
    assert len(files) == 10 and all(os.path.exists(f) for f in files)
    before = cache.state_token(src)
    assert cache.state_token(src) == before
    zarr.open_array(path, mode="r+")[950] = 0.5
    assert cache.state_token(src) != before


# --------------------------------------------------------------------------- GPU probe cache


class _FakeClient:
    def __init__(self, ident, workers, gpu):
        self.id, self.workers, self.gpu, self.runs = ident, workers, gpu, 0

    def scheduler_info(self):
        return {"workers": {w: {"nthreads": 1, "memory_limit": 0} for w in self.workers}}

    def run(self, func):
        self.runs += 1
        return {w: self.gpu for w in self.workers}


def test_gpu_probe_cached_per_client_and_workers():
    one = _FakeClient("client-1", ["tcp://w:1"], True)
    assert resources.choose_backend("auto", one) == ("auto", True)
    assert resources.choose_backend("gpu", one) == ("gpu", True)
    assert one.runs == 1
    other = _FakeClient("client-2", ["tcp://w:1"], False)  # another client: asked again
    assert resources.choose_backend("auto", other) == ("auto", False)
    with pytest.raises(dj.InputError, match="backend='gpu' is not available"):
        resources.choose_backend("gpu", other)
    assert other.runs == 1
    one.workers = ["tcp://w:1", "tcp://w:2"]  # a worker joined: asked again
    resources.choose_backend("auto", one)
    assert one.runs == 2
    resources.choose_backend("auto", one)
    assert one.runs == 2
    assert resources.choose_backend("cpu", one) == ("cpu", False) and one.runs == 2


def test_gpu_probe_of_a_real_client(client):
    workers = client.scheduler_info()["workers"]
    seen = resources.gpu_seen(client)
    assert set(seen) == set(workers)
    assert CACHE.get("gpu-seen", (client.id, frozenset(workers))) is seen
    assert resources.gpu_seen(client) is seen


# --------------------------------------------------------------------------- direct chunk reads


LAYOUTS = {
    "uncompressed": ({"compressors": None}, True),
    "dot-separator": ({"compressors": None, "chunk_key_encoding": {"name": "default", "separator": "."}}, True),
    "v2-keys": ({"compressors": None, "chunk_key_encoding": {"name": "v2", "separator": "."}}, True),
    "zstd": ({}, False),
    "column-chunks": ({"compressors": None, "chunks": (100, 2)}, False),
    "zarr-v2": ({"compressors": None, "zarr_format": 2}, False),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_direct_read_equals_zarr(tmp_path, layout, dtype):
    kwargs, direct = dict(LAYOUTS[layout][0]), LAYOUTS[layout][1]
    x = np.random.default_rng(12).random((1037, 3)).astype(dtype)
    path = str(tmp_path / "x.zarr")
    arr = zarr.create_array(store=path, shape=x.shape, chunks=kwargs.pop("chunks", (100, 3)), dtype=dtype, **kwargs)
    arr[:] = x
    src = open_points(path, "A")
    assert (raw_layout(src) is not None) is direct
    for start, stop in [(0, 1037), (0, 100), (50, 250), (999, 1037), (300, 300), (1000, 1037), (0, 1)]:
        got = src.read(start, stop)
        assert got.dtype == np.dtype(dtype) and got.flags.c_contiguous
        np.testing.assert_array_equal(got, x[start:stop])
        assert (read_raw(src, start, stop) is not None) is direct


def test_direct_read_into_given_memory(tmp_path):
    x = np.random.default_rng(13).random((700, 4)).astype(np.float32)
    src = open_points(_write_points(tmp_path / "x.zarr", x, 128), "A")
    given = []

    def empty(shape, dtype):
        given.append(np.full(shape, -1, dtype))
        return given[-1]

    got = src.read(100, 650, empty)
    assert got is given[0]
    np.testing.assert_array_equal(got, x[100:650])


def test_missing_chunk_reads_fill_value(tmp_path):
    path = str(tmp_path / "x.zarr")
    x = np.random.default_rng(14).random((500, 2)).astype(np.float32)
    arr = zarr.create_array(store=path, shape=(1000, 2), chunks=(100, 2), dtype="float32", compressors=None,
                            fill_value=7.0)
    arr[:500] = x
    import dask.config

    with dask.config.set({"daskjoin.missing-chunks": "fill"}):  # asked for: missing chunks read as fill value
        src = open_points(path, "A")
    assert read_raw(src, 0, 1000) is None  # a chunk is missing: zarr fills it
    got = src.read(0, 1000)
    np.testing.assert_array_equal(got[:500], x)
    assert (got[500:] == 7.0).all()
    np.testing.assert_array_equal(src.read(0, 500), x)


def test_store_recreated_with_other_layout_is_read_right(tmp_path):
    """Workers keep parsed metadata per version of zarr.json: a re-created array is never read with the old layout."""
    path = str(tmp_path / "x.zarr")
    x = np.random.default_rng(15).random((400, 2)).astype(np.float32)
    _write_points(path, x, 100)
    src = open_points(path, "A")
    np.testing.assert_array_equal(src.read(0, 400), x)
    y = np.random.default_rng(16).random((400, 2)).astype(np.float32)
    zarr.create_array(store=path, shape=y.shape, chunks=(100, 2), dtype="float32", overwrite=True)[:] = y  # zstd
    again = open_points(path, "A")
    assert raw_layout(again) is None
    np.testing.assert_array_equal(src.read(0, 400), y)
    np.testing.assert_array_equal(again.read(0, 400), y)


def test_open_cache_sees_a_recreated_array(tmp_path):
    path = str(tmp_path / "x.zarr")
    _write_points(path, np.zeros((300, 2), np.float32))
    assert open_points(path, "A").shape == (300, 2)
    assert open_points(path, "A") is open_points(path, "A")
    _write_points(path, np.zeros((500, 3), np.float64), overwrite=True)
    src = open_points(path, "A")
    assert src.shape == (500, 3) and src.dtype == "float64"


# --------------------------------------------------------------------------- tasks


def test_cpu_tasks_read_into_numpy():
    assert host_allocator("cpu") is None


@pytest.mark.parametrize("nbytes", [1, 511, 512, 513, 4096, 10_000, 1 << 20, (1 << 20) + 1, 123_456_789])
def test_pinned_sizes_round_up_a_little(nbytes):
    size = _pinned_size(nbytes)
    assert nbytes <= size <= max(nbytes + 511, nbytes * 1.125) and size % 512 == 0


def test_zarr_jobs_ride_with_tasks_and_memory_jobs_are_scattered(client, tmp_path, monkeypatch):
    x = np.random.default_rng(17).random((3000, 2))
    path = _write_points(tmp_path / "x.zarr", x.astype(np.float32))
    assert JoinJob.from_plan(dj.plan_join(path, eps=EPS, client=client)).in_memory_bytes() == 0
    assert JoinJob.from_plan(dj.plan_join(x, eps=EPS, client=client)).in_memory_bytes() == x.nbytes
    scattered = []
    real = type(client).scatter
    monkeypatch.setattr(type(client), "scatter", lambda self, *a, **k: scattered.append(1) or real(self, *a, **k))
    monkeypatch.setattr(graph, "SCATTER_BYTES", 1000)
    assert _count(path, client) == oracle_self_count(x.astype(np.float32), EPS)
    assert scattered == []
    assert _count(x, client) == oracle_self_count(x, EPS)
    assert scattered == [1]


# --------------------------------------------------------------------------- GPU (marked gpu; skipped without CuPy)


def _gpu() -> bool:
    try:
        from daskjoin.kernels.gpu_common import gpu_available

        return bool(gpu_available())
    except Exception:  # noqa: BLE001
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu(), reason="no CUDA device visible to CuPy")
def test_gpu_tasks_read_into_pinned_memory_and_match_the_oracle(tmp_path):
    import cupy as cp
    from distributed import Client

    from oracle import assert_same_pairs, oracle_self_pairs

    rows = host_allocator("gpu")((1000, 3), np.float32)
    attrs = cp.cuda.runtime.pointerGetAttributes(rows.ctypes.data)
    assert attrs.type == getattr(cp.cuda.runtime, "memoryTypeHost", 1)
    x = np.random.default_rng(18).random((5000, 3)).astype(np.float32)
    path = _write_points(tmp_path / "x.zarr", x, 700)
    src = open_points(path, "A")
    got = src.read(100, 4900, host_allocator("gpu"))
    np.testing.assert_array_equal(got, x[100:4900])
    expected = oracle_self_pairs(x, 0.03)
    with Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as client:
        for budget in ("16GiB", "16GiB", "200kB"):  # the second run reuses the plan
            frame = dj.similarity_join(path, eps=0.03, backend="gpu", memory_budget=budget, client=client).compute()
            assert_same_pairs((frame.i.to_numpy(), frame.j.to_numpy(), frame.dist.to_numpy()), expected)
            assert dj.similarity_join(path, eps=0.03, backend="gpu", memory_budget=budget, client=client,
                                      output="count") == len(expected[0])
