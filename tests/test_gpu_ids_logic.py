"""The logic of a slab's device path (``kinds/epsilon._Sides._device_batches``, ``kernels/gpu_ids``, the device
sort helpers of ``kernels/gpu_common``) on any machine: numpy stands in for CuPy, and the CPU grid driver for a
GPU driver that gives its pairs "on the device".  The CUDA code itself is tested in ``test_gpu_ids.py``.
"""
from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cases import case_by_name
from oracle import assert_same_pairs, oracle_cross_pairs, oracle_self_pairs


class _PackKernel:
    """``gpu_ids._pack_kernel()``'s ElementwiseKernel, in numpy."""

    def __init__(self, *args):
        pass

    def __call__(self, li, lj, ids_i, ids_j, ordered, key):
        a, b = ids_i[li].astype(np.uint64), ids_j[lj].astype(np.uint64)
        if ordered:
            a, b = np.minimum(a, b), np.maximum(a, b)
        key[:] = (a << np.uint64(32)) | b


def _bincount(x, minlength=0):
    """CuPy's bincount: it takes the max of its input, so an empty one raises (numpy's gives zeros)."""
    if not x.shape[0]:
        raise ValueError("zero-size array to reduction operation maximum which has no identity")
    return np.bincount(x, minlength=minlength)


NUMPY_AS_CUPY = SimpleNamespace(ElementwiseKernel=_PackKernel, bincount=_bincount, **{
    name: getattr(np, name) for name in ("asarray", "empty", "uint64", "int64", "concatenate", "sort", "argsort",
                                         "any", "zeros")})


@pytest.fixture
def numpy_device(monkeypatch):
    """CuPy replaced by numpy in the device helpers; ``room`` settable (a list of values, cycled per call)."""
    from daskjoin.kernels import Kernel, gpu_common, gpu_ids
    from daskjoin.kinds.epsilon import JoinJob

    monkeypatch.setattr(gpu_common, "cupy", lambda: NUMPY_AS_CUPY)
    monkeypatch.setattr(gpu_ids, "cupy", lambda: NUMPY_AS_CUPY)
    monkeypatch.setattr(gpu_common, "to_host", lambda *arrays, pinned=True: tuple(
        None if a is None else np.array(a) for a in arrays))
    gpu_ids._pack_kernel.cache_clear()
    state = {"cycle": itertools.cycle([10**12])}
    monkeypatch.setattr(gpu_common, "sort_room", lambda: next(state["cycle"]))

    class OnDevice(Kernel):  # the CPU grid driver, its pairs handed over as if on the device
        @property
        def device_pairs(self):
            return True

        def driver(self, a, b, eps, share=None):
            cpu = Kernel("grid", "cpu").driver(a, b, eps, share)
            return SimpleNamespace(count=cpu.count, batches=cpu.batches,
                                   pairs=lambda wd, device=False: cpu.pairs(wd) if device else None)

    monkeypatch.setattr(JoinJob, "kernel", lambda self: OnDevice("grid", "cpu"))
    yield lambda values: state.update(cycle=itertools.cycle(values))
    gpu_ids._pack_kernel.cache_clear()


def _partitions(a, b, eps, with_distance):
    import daskjoin as dj
    from daskjoin.kinds.epsilon import JoinJob

    plan = dj.plan_join(a, b, eps=eps, partitioning="slabs", backend="cpu", memory_budget="48kB")
    job = JoinJob.from_plan(plan, with_distance=with_distance)
    return [[x for x in job.batches(part, 97) if len(x[0])] for part in plan.partitions]


@pytest.mark.parametrize("name", ["uniform_d3_f32", "duplicates_d3_f64", "near_eps_d3_f32", "empty_a_d3_f64",
                                  "single_d1_f64", "lattice_d2_unit_f64"])
@pytest.mark.parametrize("mode", ["self", "cross"])
@pytest.mark.parametrize("with_distance", [True, False])
@pytest.mark.parametrize("rooms", [[10**12], [0], [10**12, 0]], ids=["fits", "never", "first-call-only"])
def test_slab_pairs_through_the_device_path_match_the_oracle(numpy_device, name, mode, with_distance, rooms):
    from daskjoin.kernels.registry import SortedRun

    numpy_device(rooms)
    case = case_by_name(name)
    b = None if mode == "self" else case.b
    parts = _partitions(case.a, b, case.eps, with_distance)
    for batches in parts:
        kinds = {isinstance(x, SortedRun) for x in batches}
        assert len(kinds) <= 1, "a partition mixes a sorted run with plain batches"
        if rooms == [10**12] and batches:
            assert kinds == {True}
            i = np.concatenate([x[0] for x in batches])
            j = np.concatenate([x[1] for x in batches])
            assert np.all((i[1:] > i[:-1]) | ((i[1:] == i[:-1]) & (j[1:] > j[:-1])))
        if rooms == [0]:
            assert kinds <= {False}
    got = [x for batches in parts for x in batches]
    expected = oracle_self_pairs(case.a, case.eps) if b is None else oracle_cross_pairs(case.a, case.b, case.eps)
    if got:
        joined = tuple(None if got[0][t] is None else np.concatenate([x[t] for x in got]) for t in range(3))
    else:
        joined = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32) if with_distance else None)
    assert_same_pairs(joined, expected, context=f"{name}/{mode}/{rooms}", check_dist=with_distance)


def test_sorted_on_device_empties_its_list_and_sorted_to_host_checks_the_order(numpy_device):
    from daskjoin.kernels import gpu_common
    from daskjoin.kernels.registry import SortedRun

    rng = np.random.default_rng(0)
    key = np.unique(rng.integers(0, 1 << 40, 5000))
    i, j = (key >> 20).astype(np.int64), (key & ((1 << 20) - 1)).astype(np.int64)
    perm = rng.permutation(len(i))
    d = rng.random(len(i)).astype(np.float32)
    pairs = [i[perm], j[perm], d[perm]]
    si, sj, sd = gpu_common.sorted_on_device(pairs)
    assert pairs == []  # emptied: the unsorted arrays are freed as the sorted ones are made
    assert np.array_equal(si, i) and np.array_equal(sj, j) and np.array_equal(sd, d)
    batches = list(gpu_common.sorted_to_host(si, sj, sd, 300))
    assert all(isinstance(x, SortedRun) and len(x[0]) <= 300 for x in batches)
    assert np.array_equal(np.concatenate([x[0] for x in batches]), i)
    with pytest.raises(RuntimeError, match="out of order"):
        list(gpu_common.sorted_to_host(si[::-1].copy(), sj[::-1].copy(), None, 300))


def test_key_ranges_cut_the_histogram_within_the_room_in_order(numpy_device):
    from daskjoin.kernels.gpu_ids import id_bins, key_histogram, key_ranges

    assert key_ranges([3, 4, 0, 5, 1], 7, 100, 10) == [(100, 130), (130, 150)]  # greedy: 3+4+0, then 5+1
    assert key_ranges([3, 4, 0, 5, 1], 100, 0, 1) == [(0, 5)]
    assert key_ranges([3, 8, 1], 7, 0, 1) is None  # one bin alone outgrows the room
    assert key_ranges([0, 0], 1, 0, 4) == [(0, 8)]
    first, width = id_bins(10, 10 + 4097, bins=4096)
    assert (first, width) == (10, 2)
    rng = np.random.default_rng(3)
    i = rng.integers(10, 10 + 4097, 5000).astype(np.uint64)
    key = (i << np.uint64(32)) | rng.integers(0, 1 << 32, 5000).astype(np.uint64)
    counts = key_histogram(key, first, width, bins=4096)
    assert counts.sum() == 5000 and counts.shape == (4096,)
    for room in (1, 7, 60, 5000):
        ranges = key_ranges(counts.tolist(), room, first, width)
        if counts.max() > room:
            assert ranges is None
            continue
        assert ranges[0][0] == first and ranges[-1][1] >= 10 + 4097
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        assert all(((i >= lo) & (i < hi)).sum() <= room for lo, hi in ranges)


@pytest.mark.parametrize("name", ["uniform_d3_f32", "duplicates_d3_f64", "lattice_d2_unit_f64", "near_eps_d3_f32"])
@pytest.mark.parametrize("mode", ["self", "cross"])
@pytest.mark.parametrize("with_distance", [True, False])
def test_a_slab_over_the_device_room_is_sorted_there_in_passes_over_id_ranges(numpy_device, monkeypatch, name,
                                                                              mode, with_distance):
    """Rooms smaller than some partitions: those are sorted on the device range by range (one sorted run still),
    or, where a call alone or one id bin outgrows the room, go the host's way; the pairs are the oracle's."""
    from daskjoin.kernels import gpu_ids
    from daskjoin.kernels.registry import SortedRun

    passes = []
    cut = gpu_ids.key_ranges

    def spy(*args):
        ranges = cut(*args)
        passes.append(None if ranges is None else len(ranges))
        return ranges

    monkeypatch.setattr(gpu_ids, "key_ranges", spy)
    case = case_by_name(name)
    b = None if mode == "self" else case.b
    expected = oracle_self_pairs(case.a, case.eps) if b is None else oracle_cross_pairs(case.a, case.b, case.eps)
    for room in (20, 45, 90, 200):
        numpy_device([room])
        parts = _partitions(case.a, b, case.eps, with_distance)
        for batches in parts:
            kinds = {isinstance(x, SortedRun) for x in batches}
            assert len(kinds) <= 1, "a partition mixes a sorted run with plain batches"
            if kinds == {True}:
                i = np.concatenate([x[0] for x in batches])
                j = np.concatenate([x[1] for x in batches])
                assert np.all((i[1:] > i[:-1]) | ((i[1:] == i[:-1]) & (j[1:] > j[:-1])))
        got = [x for batches in parts for x in batches]
        joined = tuple(None if got[0][t] is None else np.concatenate([x[t] for x in got]) for t in range(3))
        assert_same_pairs(joined, expected, context=f"{name}/{mode}/room {room}", check_dist=with_distance)
    if name == "uniform_d3_f32":
        assert any(p is not None and p > 1 for p in passes), f"no partition was sorted in passes: {passes}"


def _sparse_with_a_cluster():
    """300 sparse 2-d rows and a cluster of 30 at one end: at eps 1 a self-join slab over the cluster holds its
    pairs in its own rows' call, its extension call none (an empty call's keys in the histogram)."""
    rng = np.random.default_rng(4)
    x = np.concatenate([rng.random((300, 2)) * 1000.0, 0.01 * rng.random((30, 2))])
    return x, 1.0


@pytest.mark.parametrize("room", [300, 400, 430])
def test_an_empty_call_beside_one_over_the_room(numpy_device, room):
    x, eps = _sparse_with_a_cluster()
    numpy_device([room])
    parts = _partitions(x, None, eps, True)
    got = [b for batches in parts for b in batches]
    joined = tuple(np.concatenate([b[t] for b in got]) for t in range(3))
    assert_same_pairs(joined, oracle_self_pairs(x, eps), context=f"room {room}")


@pytest.mark.parametrize("mode", ["self", "cross"])
def test_one_id_bin_over_the_room_goes_the_hosts_way(numpy_device, monkeypatch, mode):
    """Where the histogram cannot be cut within the room (``key_ranges`` None), every call of the partition is
    run again and goes to the host: the pairs are still the oracle's, as plain batches."""
    from daskjoin.kernels import gpu_ids
    from daskjoin.kernels.registry import SortedRun

    seen = []
    monkeypatch.setattr(gpu_ids, "key_ranges", lambda *args: seen.append(args) or None)
    numpy_device([90])
    case = case_by_name("uniform_d3_f32")
    b = None if mode == "self" else case.b
    parts = _partitions(case.a, b, case.eps, True)
    assert seen, "no partition was cut into id ranges"
    got = [x for batches in parts for x in batches]
    assert any(not isinstance(x, SortedRun) for x in got)
    joined = tuple(np.concatenate([x[t] for x in got]) for t in range(3))
    expected = oracle_self_pairs(case.a, case.eps) if b is None else oracle_cross_pairs(case.a, case.b, case.eps)
    assert_same_pairs(joined, expected, context=mode)


def _random_case(seed: int, n: int, m: int, d: int, lattice: bool, dup: float):
    """Rows on a lattice of spacing 1/8 (pairs exactly at eps, ties) or uniform, some rows repeated."""
    rng = np.random.default_rng(seed)

    def rows(count):
        x = rng.integers(0, 12, (count, d)) / 8.0 if lattice else rng.random((count, d))
        if count > 1 and dup:
            k = int(dup * count)
            x[rng.integers(0, count, k)] = x[rng.integers(0, count, k)]
        return x

    return rows(n), rows(m)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(0, 220), m=st.integers(0, 120), d=st.integers(1, 3),
       lattice=st.booleans(), dup=st.sampled_from([0.0, 0.3]), cross=st.booleans(), with_distance=st.booleans(),
       rooms=st.lists(st.integers(0, 400), min_size=1, max_size=3), max_pairs=st.integers(1, 150),
       budget=st.sampled_from(["6kB", "16kB", "48kB"]))
def test_property_the_device_path_under_any_room_gives_the_oracles_pairs(numpy_device, seed, n, m, d, lattice, dup,
                                                                         cross, with_distance, rooms, max_pairs,
                                                                         budget):
    """Any data, any rooms (cycled over the calls' questions), any batch size: each partition is one sorted run
    or plain batches, and together they hold the oracle's pairs, whichever way (fits, passes, host) each went."""
    import daskjoin as dj
    from daskjoin.kernels.registry import SortedRun
    from daskjoin.kinds.epsilon import JoinJob

    a, b = _random_case(seed, n, m, d, lattice, dup)
    b = b if cross else None
    eps = 0.25 if lattice else 0.2
    numpy_device(rooms)
    plan = dj.plan_join(a, b, eps=eps, partitioning="slabs", backend="cpu", memory_budget=budget)
    job = JoinJob.from_plan(plan, with_distance=with_distance)
    got = []
    for part in plan.partitions:
        batches = [x for x in job.batches(part, max_pairs) if len(x[0])]
        kinds = {isinstance(x, SortedRun) for x in batches}
        assert len(kinds) <= 1, "a partition mixes a sorted run with plain batches"
        assert all(len(x[0]) <= max_pairs for x in batches)
        if kinds == {True}:
            key = np.concatenate([x[0] for x in batches]) * (1 << 32) + np.concatenate([x[1] for x in batches])
            assert np.all(np.diff(key) > 0), "a sorted run out of order"
        got += batches
    expected = oracle_self_pairs(a, eps) if b is None else oracle_cross_pairs(a, b, eps)
    if got:
        joined = tuple(None if got[0][t] is None else np.concatenate([x[t] for x in got]) for t in range(3))
    else:
        joined = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32) if with_distance else None)
    assert_same_pairs(joined, expected, context=f"rooms {rooms}", check_dist=with_distance)
