"""Partition independence: the pair set does not depend on the number of tasks, the partitioning or the cluster.

Memory budgets are searched with ``daskjoin.plan_join(...).ntasks`` so that each
partitioning runs as 1, about 7 and about 50 tasks; every run must give the
oracle's pair set.  Runs on one and on four worker processes must agree too.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

import daskjoin as dj
from joinhelpers import budget_for_tasks, check_frame, frame_triple, oracle, pair_tuples, write_zarr
from oracle import assert_same_pairs

pytestmark = pytest.mark.integration

EPS = 0.025


@functools.lru_cache(maxsize=None)
def _data():
    rng = np.random.default_rng(2024)
    a = rng.random((3000, 2))
    a[:40] = a[40:80]  # duplicates across chunks
    b = rng.random((2000, 2)).astype(np.float32)
    return a, b


@functools.lru_cache(maxsize=None)
def _expected(mode):
    a, b = _data()
    return oracle(a, None if mode == "self" else b, EPS)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    a, b = _data()
    root = tmp_path_factory.mktemp("partition")
    return write_zarr(root / "a.zarr", a, 250), write_zarr(root / "b.zarr", b, 250)


TARGETS = {1: (1, 1), 7: (4, 14), 50: (30, 110)}


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("method", ["grid", "brute"])
@pytest.mark.parametrize("partitioning", ["chunk_pairs", "slabs"])
@pytest.mark.parametrize("mode", ["self", "cross"])
def test_pairs_do_not_depend_on_task_count(client, stores, mode, partitioning, method, target):
    a, b = _data()
    pa, pb = stores
    pb = None if mode == "self" else pb
    budget, ntasks = budget_for_tasks(pa, pb, EPS, partitioning, target, client, method=method)
    lo, hi = TARGETS[target]
    assert lo <= ntasks <= hi, f"budget {budget} gives {ntasks} tasks, wanted about {target}"
    got = client.compute(dj.similarity_join(pa, pb, eps=EPS, method=method, partitioning=partitioning,
                                            memory_budget=budget, client=client)).result()
    check_frame(got, selfjoin=(mode == "self"))
    assert_same_pairs(frame_triple(got), _expected(mode), context=f"{ntasks} tasks (budget {budget})",
                      a=a, b=None if mode == "self" else b, eps=EPS)


@pytest.mark.parametrize("partitioning", ["chunk_pairs", "slabs"])
def test_count_does_not_depend_on_task_count(client, stores, partitioning):
    pa, _ = stores
    counts = {}
    for target in sorted(TARGETS):
        budget, ntasks = budget_for_tasks(pa, None, EPS, partitioning, target, client)
        counts[ntasks] = dj.similarity_join(pa, eps=EPS, partitioning=partitioning, memory_budget=budget,
                                            client=client, output="count")
    assert len(counts) == len(TARGETS)
    assert set(counts.values()) == {_expected("self")[0].size}


def _local_client(n_workers):
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                           memory_limit=0)
    return cluster, Client(cluster, set_as_default=False)


@pytest.mark.parametrize("partitioning", [pytest.param("chunk_pairs", marks=pytest.mark.slow), "slabs"])
def test_one_and_four_workers_agree(client, stores, tmp_path, partitioning):
    a, b = _data()
    pa, pb = stores
    budget, ntasks = budget_for_tasks(pa, pb, EPS, partitioning, 7, client)
    results = {}
    for n_workers in (1, 4):
        cluster, c = _local_client(n_workers)
        try:
            assert len(c.scheduler_info()["workers"]) == n_workers
            df = dj.similarity_join(pa, pb, eps=EPS, partitioning=partitioning, memory_budget=budget, client=c)
            results[n_workers] = c.compute(df).result()
            counted = dj.similarity_join(pa, pb, eps=EPS, partitioning=partitioning, memory_budget=budget, client=c,
                                         output="count")
            res = dj.similarity_join(pa, pb, eps=EPS, partitioning=partitioning, memory_budget=budget, client=c,
                                     out=tmp_path / f"out{n_workers}.parquet")
        finally:
            c.close()
            cluster.close()
        assert counted == res.pairs == _expected("cross")[0].size
    assert pair_tuples(results[1]) == pair_tuples(results[4])
    assert_same_pairs(frame_triple(results[4]), _expected("cross"), a=a, b=b, eps=EPS)
    names = sorted(p.name for p in (tmp_path / "out1.parquet").glob("part-*.parquet"))
    assert names == sorted(p.name for p in (tmp_path / "out4.parquet").glob("part-*.parquet"))
    assert {name[:10] for name in names} == {f"part-{k:05d}" for k in range(ntasks)}
    for name in names:
        assert (tmp_path / "out1.parquet" / name).read_bytes() == (tmp_path / "out4.parquet" / name).read_bytes()


# --------------------------------------------------------------------------- empty partitions and inputs


def test_empty_partitions_keep_schema(client):
    """Two far-apart clusters: many partitions hold no pairs; the frame still has one schema."""
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.random((600, 2)) * 0.1, 100 + rng.random((600, 2)) * 0.1])
    x = x[rng.permutation(len(x))]
    budget, ntasks = budget_for_tasks(x, None, 0.004, "slabs", 8, client)
    df = dj.similarity_join(x, eps=0.004, partitioning="slabs", memory_budget=budget, client=client)
    sizes = [len(client.compute(df.get_partition(k)).result()) for k in range(df.npartitions)]
    assert ntasks == df.npartitions > 1
    got = client.compute(df).result()
    check_frame(got, selfjoin=True)
    assert_same_pairs(frame_triple(got), oracle(x, None, 0.004), a=x, eps=0.004)
    assert sum(sizes) == len(got)


@pytest.mark.parametrize("with_distance", [True, False])
@pytest.mark.parametrize("partitioning", ["chunk_pairs", "slabs"])
@pytest.mark.parametrize(
    "shape_a, shape_b",
    [((0, 3), None), ((0, 3), (10, 3)), ((10, 3), (0, 3)), ((0, 1), (0, 1)), ((1, 2), None), ((400, 2), None)],
    ids=["self-n0", "cross-a0", "cross-b0", "cross-both0", "self-n1", "self-no-pairs"],
)
def test_empty_results(client, tmp_path, shape_a, shape_b, partitioning, with_distance):
    rng = np.random.default_rng(0)
    a = write_zarr(tmp_path / "a.zarr", rng.random(shape_a), 16)
    b = None if shape_b is None else write_zarr(tmp_path / "b.zarr", rng.random(shape_b), 16)
    df = dj.similarity_join(a, b, eps=1e-6, partitioning=partitioning, with_distance=with_distance, client=client)
    got = client.compute(df).result()
    assert len(got) == 0
    check_frame(got, selfjoin=shape_b is None, with_distance=with_distance)
    assert dj.similarity_join(a, b, eps=1e-6, partitioning=partitioning, client=client, output="count") == 0
