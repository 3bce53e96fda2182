"""Clusters as users build them, on the GPU machine: several GPU workers on one device, a cluster mixing
GPU and CPU workers, and daskjoin's ``LocalCUDACluster`` helper; each gives the pairs one worker gives.

Real worker processes (Nanny), a real Zarr store, Parquet compared byte for byte with an in-process run.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import daskjoin as dj
from daskjoin.execution.inprocess import in_process
from joinhelpers import write_zarr

pytestmark = [pytest.mark.gpu, pytest.mark.integration]

EPS = 0.01


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    pytest.importorskip("cupy")
    x = np.random.default_rng(51).random((60_000, 3))
    return x, write_zarr(tmp_path_factory.mktemp("gpuc") / "x.zarr", x, 5000)


@pytest.fixture(scope="module")
def reference(store, tmp_path_factory):
    x, path = store
    out = tmp_path_factory.mktemp("ref") / "pairs.parquet"
    dj.similarity_join(path, eps=EPS, out=out, memory_budget="2MiB", backend="gpu", client=in_process())
    return _files(out)


def _files(path) -> dict:
    return {n: open(os.path.join(path, n), "rb").read() for n in sorted(os.listdir(path)) if n.startswith("part-")}


def _spec_cluster(workers: dict):
    from distributed import Nanny, Scheduler, SpecCluster

    spec = {name: {"cls": Nanny, "options": {"nthreads": 1, "memory_limit": 0, **options}}
            for name, options in workers.items()}
    return SpecCluster(workers=spec, scheduler={"cls": Scheduler, "options": {"dashboard_address": ":0"}})


def _run(client, path, out, backend):
    from distributed import get_task_stream

    with get_task_stream(client) as stream:
        result = dj.similarity_join(path, eps=EPS, out=out, memory_budget="2MiB", backend=backend, client=client)
    ran_on = {t["worker"] for t in stream.data if "partition_to_parquet" in str(t.get("key", ""))}
    return result, ran_on


def test_two_gpu_workers_sharing_one_device(store, reference, tmp_path):
    from distributed import Client

    with _spec_cluster({"g0": {"resources": {"GPU": 1}}, "g1": {"resources": {"GPU": 1}}}) as cluster, \
            Client(cluster) as client:
        client.wait_for_workers(2, timeout=120)
        result, ran_on = _run(client, store[1], tmp_path / "pairs.parquet", "gpu")
    assert result.files >= 4 and len(ran_on) == 2, "both workers should have taken tasks"
    assert _files(tmp_path / "pairs.parquet") == reference


def test_a_mixed_cluster_places_gpu_tasks_on_gpu_workers(store, reference, tmp_path):
    from distributed import Client

    workers = {"gpu": {"resources": {"GPU": 1}}, "cpu": {"env": {"CUDA_VISIBLE_DEVICES": ""}}}
    with _spec_cluster(workers) as cluster, Client(cluster) as client:
        client.wait_for_workers(2, timeout=120)
        seen = client.run(lambda: __import__("daskjoin.kernels.gpu_common", fromlist=["x"]).gpu_available())
        assert sorted(seen.values()) == [False, True]
        gpu_worker = next(addr for addr, has in seen.items() if has)
        result, ran_on = _run(client, store[1], tmp_path / "gpu.parquet", "gpu")
        assert ran_on == {gpu_worker}, "a backend='gpu' task ran on the CPU worker"
        assert _files(tmp_path / "gpu.parquet") == reference
        # auto: each task on whichever worker is free, a GPU kernel or a CPU one: the same bytes
        result, ran_on = _run(client, store[1], tmp_path / "auto.parquet", "auto")
        assert _files(tmp_path / "auto.parquet") == reference
        # a lazy frame of GPU tasks cannot carry the resource: it warns, and submitted under the annotation
        # it runs on the GPU worker alone
        import dask
        from distributed import get_task_stream

        from daskjoin.execution.graph import FramePlacementWarning

        with pytest.warns(FramePlacementWarning):
            frame = dj.similarity_join(store[1], eps=EPS, memory_budget="2MiB", backend="gpu", client=client)
        with get_task_stream(client) as stream, dask.annotate(resources={"GPU": 1}):
            got = client.compute(frame).result()
        ran = {t["worker"] for t in stream.data if "daskjoin-pairs" in str(t.get("key", ""))}
        assert ran == {gpu_worker}, ran
        assert len(got) == result.pairs


def test_local_cuda_cluster_helper(store, reference, tmp_path):
    pytest.importorskip("dask_cuda")
    from daskjoin.execution.cluster import close_default, start_local_cuda

    client = start_local_cuda()
    try:
        info = client.scheduler_info()["workers"]
        assert info and all(w.get("resources", {}).get("GPU") == 1 for w in info.values())
        result, ran_on = _run(client, store[1], tmp_path / "pairs.parquet", "gpu")
        assert _files(tmp_path / "pairs.parquet") == reference
    finally:
        close_default()


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    """Just over the rows from which a join is cut for several workers (planning.cost.SPLIT_MIN_ROWS)."""
    pytest.importorskip("cupy")
    from daskjoin.planning.cost import SPLIT_MIN_ROWS

    x = np.random.default_rng(52).random((SPLIT_MIN_ROWS + 20_000, 3))
    eps = 0.01
    path = write_zarr(tmp_path_factory.mktemp("gpub") / "x.zarr", x, 1 << 16)
    frame = dj.similarity_join(path, eps=eps, backend="gpu", client=in_process()).compute()
    want = np.stack([frame["i"].to_numpy(), frame["j"].to_numpy()], axis=1)
    return path, eps, want[np.lexsort((want[:, 1], want[:, 0]))]


def _cut_join(client, big_store, out, workers: int):
    """A large join on ``workers`` GPU workers: cut for them, run by all of them, the pairs of one task."""
    import pyarrow.parquet as pq
    from distributed import get_task_stream

    path, eps, want = big_store
    plan = dj.plan_join(path, eps=eps, backend="gpu", client=client, memory_budget="16GB")
    assert plan.parallelism == workers and plan.ntasks == workers, plan.explain()  # one query share a worker
    assert [p.share for p in plan.partitions] == [(k, workers, "gpu") for k in range(workers)]
    assert dj.similarity_join(path, eps=eps, backend="gpu", client=client, output="count",
                              memory_budget="16GB") == len(want)
    with get_task_stream(client) as stream:
        result = dj.similarity_join(path, eps=eps, out=out, backend="gpu", client=client, memory_budget="16GB")
    ran_on = {t["worker"] for t in stream.data if "partition_to_parquet" in str(t.get("key", ""))}
    assert len(ran_on) == workers, "every GPU worker should have taken tasks"
    table = pq.read_table(out, columns=["i", "j"])
    got = np.stack([table["i"].to_numpy(), table["j"].to_numpy()], axis=1)
    assert result.pairs == len(want)
    assert np.array_equal(got[np.lexsort((got[:, 1], got[:, 0]))], want)


def test_a_large_join_is_cut_for_two_gpu_workers_of_one_device(big_store, tmp_path):
    from distributed import Client

    with _spec_cluster({"g0": {"resources": {"GPU": 1}}, "g1": {"resources": {"GPU": 1}}}) as cluster, \
            Client(cluster) as client:
        client.wait_for_workers(2, timeout=120)
        _cut_join(client, big_store, tmp_path / "pairs.parquet", 2)


def test_a_large_brute_join_is_cut_into_shares_of_one_device_signature(tmp_path):
    """Brute force (128-d) past SPLIT_MIN_PRODUCTS on two GPU workers of one device: cut into two shares of
    its tile pairs, tagged with the device's signature; the count and the pairs are the uncut join's."""
    from distributed import Client

    from daskjoin.kernels.gpu_common import device_signature
    from daskjoin.planning import cost

    n = int((cost.SPLIT_MIN_PRODUCTS / 128) ** 0.5) + 2000
    x = np.random.default_rng(9).random((n, 128)).astype(np.float32)
    eps = 3.56  # about one pair a point among uniform 128-d points
    path = write_zarr(tmp_path / "hd.zarr", x, 1 << 14)
    frame = dj.similarity_join(path, eps=eps, backend="gpu", client=in_process()).compute()
    want = np.stack([frame["i"].to_numpy(), frame["j"].to_numpy()], axis=1)
    with _spec_cluster({"g0": {"resources": {"GPU": 1}}, "g1": {"resources": {"GPU": 1}}}) as cluster, \
            Client(cluster) as client:
        client.wait_for_workers(2, timeout=120)
        plan = dj.plan_join(path, eps=eps, backend="gpu", client=client, memory_budget="16GB")
        assert plan.method == "brute" and plan.ntasks == 2, plan.explain()
        assert [p.share for p in plan.partitions] == [(k, 2, f"gpu:{device_signature()}") for k in range(2)]
        assert dj.similarity_join(path, eps=eps, backend="gpu", client=client, output="count",
                                  memory_budget="16GB") == len(want)
        got = dj.similarity_join(path, eps=eps, backend="gpu", client=client, memory_budget="16GB").compute()
    pairs = np.stack([got["i"].to_numpy(), got["j"].to_numpy()], axis=1)
    assert len(want) > 100 and np.array_equal(pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))],
                                              want[np.lexsort((want[:, 1], want[:, 0]))])


def test_a_large_join_spreads_over_every_gpu(big_store, tmp_path):
    """One dask-cuda worker per GPU of the machine (needs two or more GPUs): each on its own device."""
    pytest.importorskip("dask_cuda")
    import cupy as cp

    gpus = cp.cuda.runtime.getDeviceCount()
    if gpus < 2:
        pytest.skip("one GPU here: the multi-GPU path is covered by two workers sharing it")
    from daskjoin.execution.cluster import close_default, start_local_cuda

    client = start_local_cuda(memory_limit=0)
    try:
        client.wait_for_workers(gpus, timeout=180)
        buses = client.run(lambda: __import__("cupy").cuda.Device().pci_bus_id)
        assert len(set(buses.values())) == gpus, f"workers share devices: {buses}"
        _cut_join(client, big_store, tmp_path / "pairs.parquet", gpus)
    finally:
        close_default()


def _allocator_state():
    """In a worker: CuPy's allocator, the RMM pool's reserve, the device's size and the batch budget."""
    import cupy as cp

    from daskjoin.kernels.gpu_common import device_budget_bytes, rmm_pool_reserve

    return {"allocator": str(getattr(cp.cuda.get_allocator(), "__module__", "")), "reserve": rmm_pool_reserve(),
            "total": cp.cuda.runtime.memGetInfo()[1], "budget": device_budget_bytes(0.5)}


def test_local_cuda_cluster_with_an_rmm_pool(store, reference, tmp_path):
    """CuPy allocating from an RMM pool of 90% of the device: the pool counts as free to a task's buffers
    (without it the budget would see 10% free), and the pairs are the same bytes."""
    pytest.importorskip("dask_cuda")
    pytest.importorskip("rmm")
    from daskjoin.execution.cluster import close_default, start_local_cuda

    client = start_local_cuda(rmm_pool_size=0.9, memory_limit=0)
    try:
        for state in client.run(_allocator_state).values():
            assert state["allocator"].startswith("rmm"), state
            assert state["reserve"] >= 0.8 * state["total"], state
            assert state["budget"] >= 0.3 * state["total"], state
        _run(client, store[1], tmp_path / "pairs.parquet", "gpu")
        assert _files(tmp_path / "pairs.parquet") == reference
    finally:
        close_default()
