"""Slab partitions on the GPU: pairs put in original ids and sorted on the device (``kernels/gpu_ids``).

Each partition of a slab plan is read through a sorted copy; its pairs must come out in original ids, i < j in a
self-join, as one ``SortedRun`` stream (the task then writes them without a host sort), and equal the oracle's.
Where the device cannot hold them, the partition falls back to the host's way with the same pairs.
"""
from __future__ import annotations

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


@pytest.mark.parametrize("room", [0, 40, 10**12])
@pytest.mark.parametrize("mode", ["self", "cross"])
def test_a_partition_over_the_device_room_falls_back_to_the_host_with_the_same_pairs(room, mode, monkeypatch):
    """``room`` 0: every call goes the host's way; 40: some partitions hold their self-join's pairs on the device,
    then overflow with the slab-above call (what was held goes to the host as plain batches); huge: all on device."""
    from daskjoin.kernels import gpu_ids
    from daskjoin.kernels.registry import SortedRun

    monkeypatch.setattr(gpu_ids, "room", lambda: room)
    case = case_by_name("uniform_d3_f32")
    b = None if mode == "self" else case.b
    _, parts = _slab_batches(case.a, b, case.eps, "grid", max_pairs=50)
    assert_same_pairs(_joined(parts), _expected(case, mode), context=f"room={room}")
    runs = [isinstance(x, SortedRun) for _, got in parts for x in got]
    if room == 0:
        assert not any(runs)
    elif room == 10**12:
        assert all(runs)


def test_slab_pairs_without_distances():
    case = case_by_name("near_eps_d3_f32")
    _, parts = _slab_batches(case.a, None, case.eps, "grid", max_pairs=1000, with_distance=False)
    got = _joined(parts, with_distance=False)
    assert got[2] is None
    assert_same_pairs(got, _expected(case, "self"), check_dist=False)
