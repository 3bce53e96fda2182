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
