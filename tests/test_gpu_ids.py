"""Slab partitions on the GPU: pairs put in original ids and sorted on the device (``kernels/gpu_ids``).

Each partition of a slab plan is read through a sorted copy; its pairs must come out in original ids, i < j in a
self-join, as one ``SortedRun`` stream (the task then writes them without a host sort), and equal the oracle's.
Where the device cannot hold them, the partition falls back to the host's way with the same pairs.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from daskjoin.kernels.gpu_common import gpu_available

from cases import case_by_name
from oracle import assert_same_pairs, oracle_cross_pairs, oracle_self_pairs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu_available(), reason="no CUDA device visible to CuPy"),
]

CASES = ["duplicates_d3_f64", "all_identical_d2_f32", "near_eps_d3_f32", "near_eps_offset1e6_d2_f64",
         "multiples_of_eps_0.1_d2_f32", "uniform_d3_f32", "lattice_d3_unit_f32", "uniform_d1_f64",
         "single_d1_f64", "empty_a_d3_f64", "two_at_eps_d2_f64"]
METHODS = ["grid", "szl", "nlj", "directory", "brute"]


def _slab_batches(a, b, eps, method, max_pairs, with_distance=True):
    """Every partition's batches of a slab plan of the in-memory inputs (sorted in memory), as the tasks see them."""
    import daskjoin as dj
    from daskjoin.kinds.epsilon import JoinJob

    plan = dj.plan_join(a, b, eps=eps, method=method, partitioning="slabs", backend="gpu", memory_budget="48kB")
    assert plan.partitioning == "slabs"
    job = JoinJob.from_plan(plan, with_distance=with_distance)
    return plan, [(part, [x for x in job.batches(part, max_pairs) if len(x[0])]) for part in plan.partitions]


def _joined(parts, with_distance=True):
    batches = [x for _, got in parts for x in got]
    if not batches:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), (np.zeros(0, np.float32) if with_distance else None)
    return tuple(None if batches[0][t] is None else np.concatenate([x[t] for x in batches]) for t in range(3))


def _expected(case, mode):
    return oracle_self_pairs(case.a, case.eps) if mode == "self" else oracle_cross_pairs(case.a, case.b, case.eps)


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("mode", ["self", "cross"])
@pytest.mark.parametrize("method", METHODS)
def test_slab_pairs_come_in_original_ids_as_one_sorted_run(name, mode, method):
    from daskjoin.kernels.registry import SortedRun

    case = case_by_name(name)
    b = None if mode == "self" else case.b
    plan, parts = _slab_batches(case.a, b, case.eps, method, max_pairs=97)
    assert_same_pairs(_joined(parts), _expected(case, mode), context=f"{name}/{mode}/{method}")
    for part, got in parts:
        if not got:
            continue
        i, j = np.concatenate([x[0] for x in got]), np.concatenate([x[1] for x in got])
        if method != "brute":  # brute force gives its pairs range by range to the host: sorted there
            assert all(isinstance(x, SortedRun) for x in got), (part, [type(x) for x in got])
            assert all(len(x[0]) <= 97 for x in got)
            key = i.astype(np.uint64) << np.uint64(32) | j.astype(np.uint64)
            assert np.all(np.diff(key.astype(np.int64)) > 0), "a partition's run is not strictly (i, j)-ordered"
        if mode == "self":
            assert np.all(i < j)


@pytest.mark.parametrize("room", [0, 10**12])
@pytest.mark.parametrize("mode", ["self", "cross"])
def test_a_partition_over_the_device_room_goes_the_hosts_way_with_the_same_pairs(room, mode, monkeypatch):
    """``room`` 0: every call goes the host's way (plain batches); huge: every partition one sorted run."""
    from daskjoin.kernels import gpu_common
    from daskjoin.kernels.registry import SortedRun

    monkeypatch.setattr(gpu_common, "sort_room", lambda: room)
    case = case_by_name("uniform_d3_f32")
    b = None if mode == "self" else case.b
    _, parts = _slab_batches(case.a, b, case.eps, "grid", max_pairs=50)
    assert_same_pairs(_joined(parts), _expected(case, mode), context=f"room={room}")
    runs = [isinstance(x, SortedRun) for _, got in parts for x in got]
    assert runs and all(runs) if room else not any(runs)


def test_pairs_held_on_the_device_go_to_the_host_when_the_next_call_overflows(monkeypatch):
    """A self-join slab is two calls (its rows; its rows against the extension): with room for the first call
    only, the first call's pairs, held as keys on the device, go to the host unsorted, then the second call's."""
    from daskjoin.kernels import gpu_common, gpu_ids
    from daskjoin.kernels.registry import SortedRun

    # every slab but the last has an extension: each partition's first call fits, its second overflows
    rooms = itertools.cycle([10**12, 0])
    monkeypatch.setattr(gpu_common, "sort_room", lambda: next(rooms))
    moved = []
    unsorted = gpu_ids.unsorted_batches

    def spy(pieces, max_pairs):
        moved.append(sum(int(key.shape[0]) for key, _ in pieces))
        yield from unsorted(pieces, max_pairs)

    monkeypatch.setattr(gpu_ids, "unsorted_batches", spy)
    case = case_by_name("uniform_d3_f32")
    _, parts = _slab_batches(case.a, None, case.eps, "grid", max_pairs=50)
    assert_same_pairs(_joined(parts), _expected(case, "self"))
    assert any(moved), "no partition held pairs on the device and then overflowed"
    for part, got in parts:  # a partition is one sorted run, or plain batches only
        kinds = {isinstance(x, SortedRun) for x in got}
        assert len(kinds) <= 1, part


@pytest.mark.parametrize("name", ["uniform_d3_f32", "duplicates_d3_f64", "near_eps_offset1e6_d2_f64"])
@pytest.mark.parametrize("mode", ["self", "cross"])
@pytest.mark.parametrize("share", [0.8, 0.4])
def test_a_slab_over_the_device_room_is_sorted_there_in_passes_over_id_ranges(name, mode, share, monkeypatch):
    """A room of ``share`` of the largest partition's pairs: that partition is sorted on the device range by
    range (``gpu_ids.key_ranges``), still one sorted run, or goes the host's way where a call or one id bin
    alone outgrows the room; the oracle's pairs either way."""
    from daskjoin.kernels import gpu_common, gpu_ids
    from daskjoin.kernels.registry import SortedRun

    case = case_by_name(name)
    b = None if mode == "self" else case.b
    _, parts = _slab_batches(case.a, b, case.eps, "grid", max_pairs=31)
    largest = max(sum(len(x[0]) for x in got) for _, got in parts)
    passes = []
    cut = gpu_ids.key_ranges
    monkeypatch.setattr(gpu_ids, "key_ranges", lambda *args: passes.append(cut(*args)) or passes[-1])
    monkeypatch.setattr(gpu_common, "sort_room", lambda: max(1, int(share * largest)))
    _, parts = _slab_batches(case.a, b, case.eps, "grid", max_pairs=31)
    assert_same_pairs(_joined(parts), _expected(case, mode), context=f"{name}/{mode}/share {share}")
    for part, got in parts:
        kinds = {isinstance(x, SortedRun) for x in got}
        assert len(kinds) <= 1, part
        if kinds == {True}:
            i, j = np.concatenate([x[0] for x in got]), np.concatenate([x[1] for x in got])
            key = i.astype(np.uint64) << np.uint64(32) | j.astype(np.uint64)
            assert np.all(np.diff(key.astype(np.int64)) > 0)
    if name == "uniform_d3_f32" and share == 0.8:  # every call of the largest partition fits 1.375 rooms
        assert any(r is not None and len(r) > 1 for r in passes), passes


@pytest.mark.parametrize("selfjoin", [False, True])
def test_original_ids_up_to_two_to_the_32_survive_the_packed_key(selfjoin):
    """ids of 2^31 and 2^32 - 1: a 31-bit mask or a signed shift would garble them."""
    import cupy as cp

    from daskjoin.kernels import gpu_ids

    ids_i = np.array([2**32 - 1, 2**31, 0, 5, 2**31 + 7], np.int64)
    ids_j = np.array([3, 2**32 - 2, 2**31 - 1, 2**32 - 1], np.int64)
    li = np.array([0, 1, 2, 3, 4, 0, 1], np.int64)
    lj = np.array([0, 1, 2, 3, 0, 2, 3], np.int64)
    d = np.arange(7, dtype=np.float32)
    key, dd = gpu_ids.original_keys([cp.asarray(li), cp.asarray(lj), cp.asarray(d)], cp.asarray(ids_i),
                                    cp.asarray(ids_j), selfjoin)
    got = [tuple(x) for x in gpu_ids.sorted_batches([(key, dd)], 3)]
    i, j, dist = (np.concatenate([g[t] for g in got]) for t in range(3))
    a, b = ids_i[li], ids_j[lj]
    if selfjoin:
        a, b = np.minimum(a, b), np.maximum(a, b)
    order = np.lexsort((b, a))
    assert np.array_equal(i, a[order]) and np.array_equal(j, b[order]) and np.array_equal(dist, d[order])


def test_cpu_and_gpu_slab_tasks_write_identical_bytes(tmp_path):
    """The device's sorted run in original ids and the host's sort write the same part files."""
    import dask
    import pandas as pd
    from distributed import Client

    import daskjoin as dj
    from joinhelpers import write_zarr

    rng = np.random.default_rng(11)
    x = rng.random((8000, 3))
    x[100:140] = x[100]  # duplicates: ties in distance, one pair order
    path = write_zarr(tmp_path / "x.zarr", x, chunk_rows=1000)
    outs, frames = {}, {}
    with dask.config.set({"daskjoin.row-group-bytes": 20 * 5000}), \
            Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as client:
        for method, backend in itertools.product(("grid", "szl"), ("cpu", "gpu")):
            out = tmp_path / f"{method}-{backend}.parquet"
            dj.similarity_join(path, eps=0.04, method=method, partitioning="slabs", backend=backend,
                               memory_budget="300kB", client=client, out=str(out))
            outs[method, backend] = {p.name: p.read_bytes() for p in sorted(out.glob("part-*.parquet"))}
            frames[method, backend] = pd.read_parquet(out).sort_values(["i", "j"], ignore_index=True)
    # one plan, one set of bytes, whichever backend ran it (the methods price pairs differently: their
    # plans, and so their part files, differ, but not their pairs)
    for method in ("grid", "szl"):
        assert len(outs[method, "cpu"]) > 1
        assert outs[method, "cpu"] == outs[method, "gpu"]
    pd.testing.assert_frame_equal(frames["grid", "cpu"], frames["szl", "gpu"])


def test_slab_pairs_without_distances():
    case = case_by_name("near_eps_d3_f32")
    _, parts = _slab_batches(case.a, None, case.eps, "grid", max_pairs=1000, with_distance=False)
    got = _joined(parts, with_distance=False)
    assert got[2] is None
    assert_same_pairs(got, _expected(case, "self"), check_dist=False)


def _chunk_batches(a, b, eps, max_pairs, shares: int = 1):
    """Every partition's batches of a chunk-pair plan (row offsets) on the GPU, as the tasks see them: blocks of a
    small budget, or (``shares`` > 1) the whole join cut into query shares for that many workers."""
    import dask

    import daskjoin as dj
    from daskjoin.kinds.epsilon import JoinJob
    from daskjoin.planning import cost

    settings = {"daskjoin.parallel-tasks": shares} if shares > 1 else {}
    with dask.config.set(settings), pytest.MonkeyPatch.context() as mp:
        if shares > 1:
            mp.setattr(cost, "SPLIT_MIN_ROWS", 1)  # small cases cut for the workers as large ones are
        plan = dj.plan_join(a, b, eps=eps, method="grid", partitioning="chunk_pairs", backend="gpu",
                            memory_budget="1GB" if shares > 1 else "48kB")
    assert plan.partitioning == "chunk_pairs"
    if shares > 1 and len(a) > 1:
        assert all(p.share is not None for p in plan.partitions), plan.explain()
    job = JoinJob.from_plan(plan, with_distance=True)
    return [(part, [x for x in job.batches(part, max_pairs) if len(x[0])]) for part in plan.partitions]


@pytest.mark.parametrize("name", ["uniform_d3_f32", "duplicates_d3_f64", "near_eps_offset1e6_d2_f64"])
@pytest.mark.parametrize("mode", ["self", "cross"])
@pytest.mark.parametrize("shares", [1, 3])
@pytest.mark.parametrize("share", [0.8, 0.4, 0.0])
def test_a_chunk_pair_partition_over_the_device_room_is_sorted_there_in_passes(name, mode, shares, share,
                                                                              monkeypatch):
    """A block, block pair or query share whose pairs outgrow the device's room (``share`` of the largest
    partition's pairs) was sent to the host unsorted by its driver; its row offsets now become id arrays and it
    is sorted on the device in passes over id ranges, one sorted run still (or goes the host's way where a call
    or one id bin alone outgrows the room: room 0).  The oracle's pairs either way, and partitions within the
    room keep their driver's own sorted run."""
    from daskjoin.kernels import gpu_common
    from daskjoin.kernels.registry import SortedRun

    case = case_by_name(name)
    b = None if mode == "self" else case.b
    parts = _chunk_batches(case.a, b, case.eps, 31, shares)
    assert_same_pairs(_joined(parts), _expected(case, mode), context=f"{name}/{mode}/{shares} shares")
    assert all(isinstance(x, SortedRun) for _, got in parts for x in got)  # within the room: the driver's run
    largest = max([sum(len(x[0]) for x in got) for _, got in parts] + [0])
    room = int(share * largest)
    monkeypatch.setattr(gpu_common, "sort_room", lambda: room)
    parts = _chunk_batches(case.a, b, case.eps, 31, shares)
    assert_same_pairs(_joined(parts), _expected(case, mode), context=f"{name}/{mode}/{shares} shares/room {room}")
    for part, got in parts:
        kinds = {isinstance(x, SortedRun) for x in got}
        assert len(kinds) <= 1, part
        assert all(len(x[0]) <= 31 for x in got)
        if kinds == {True}:
            i, j = np.concatenate([x[0] for x in got]), np.concatenate([x[1] for x in got])
            key = i.astype(np.uint64) << np.uint64(32) | j.astype(np.uint64)
            assert np.all(np.diff(key.astype(np.int64)) > 0)
            if mode == "self":
                assert np.all(i < j)
    if name == "uniform_d3_f32" and share == 0.8 and largest:  # over the room, yet sorted on the device
        heaviest = max(parts, key=lambda p: sum(len(x[0]) for x in p[1]))[1]
        assert heaviest and all(isinstance(x, SortedRun) for x in heaviest)
