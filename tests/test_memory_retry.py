"""A task that runs out of memory is run again with smaller batches, a bounded number of times, and its
output is neither corrupted nor duplicated.

Failures are injected by :func:`daskjoin.kernels.memory.fail_allocation`: the n-th pair buffer a CPU
driver allocates (and, on a GPU, the n-th CuPy allocation) fails.  Real Zarr stores, Parquet read
back byte for byte, the in-process runner and the session's multi-process cluster; the GPU cases
run on the GPU machine (``-m gpu``).
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import daskjoin as dj
from daskjoin.execution.inprocess import in_process
from daskjoin.io import commit
from daskjoin.kernels import memory
from joinhelpers import write_zarr

#: tests that hook this process's allocations run their tasks here, whatever client is current
HERE = in_process()

EPS = 0.01


@pytest.fixture(autouse=True)
def disarmed():
    memory.fail_allocation(None)
    yield
    memory.fail_allocation(None)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    x = np.random.default_rng(31).random((30_000, 2))
    return x, write_zarr(tmp_path_factory.mktemp("mem") / "x.zarr", x, 3000)


def _files(path) -> dict:
    return {n: open(os.path.join(path, n), "rb").read() for n in sorted(os.listdir(path)) if n.startswith("part-")}


def _leftovers(folder) -> list:
    return [n for n in os.listdir(folder) if commit.TEMP_MARK in n or n.endswith(".lock")]


@pytest.fixture(scope="module")
def references(store, tmp_path_factory):
    """The part files of an undisturbed CPU run of each method (the plan depends on the method: brute's rows
    carry a float32 copy, so a budget holds fewer of them), made once each."""
    x, path = store
    made = {}

    def of(method="auto"):
        if method not in made:
            out = tmp_path_factory.mktemp("ref") / "pairs.parquet"
            dj.similarity_join(path, eps=EPS, out=out, memory_budget="1MiB", backend="cpu", method=method, client=HERE)
            made[method] = _files(out)
        return made[method]
    return of


@pytest.fixture(scope="module")
def reference(references):
    """The part files of an undisturbed run."""
    return references()


@pytest.mark.parametrize("nth", [1, 2, 5])
def test_a_failed_allocation_is_retried_with_smaller_batches(store, reference, tmp_path, nth):
    x, path = store
    out = tmp_path / "pairs.parquet"
    memory.fail_allocation(nth)
    result = dj.similarity_join(path, eps=EPS, out=out, memory_budget="1MiB", backend="cpu", client=HERE)
    assert memory.failures() == 1
    assert result.tasks["memory_retries"] == 1
    assert _files(out) == reference, "a retried partition wrote other bytes (or duplicated a piece)"
    assert _leftovers(tmp_path) == []


def test_a_frame_task_is_retried_too(store):
    x, path = store
    expected = dj.similarity_join(path, eps=EPS, memory_budget="1MiB", backend="cpu", client=HERE).compute(scheduler="threads")
    memory.fail_allocation(3)
    got = dj.similarity_join(path, eps=EPS, memory_budget="1MiB", backend="cpu", client=HERE).compute(scheduler="threads")
    assert memory.failures() == 1
    assert got.reset_index(drop=True).equals(expected.reset_index(drop=True))


def test_retries_are_bounded_and_leave_nothing(store, tmp_path):
    x, path = store
    out = tmp_path / "pairs.parquet"
    memory.fail_allocation(1, every=True)
    with pytest.raises(MemoryError) as info:
        dj.similarity_join(path, eps=EPS, out=out, memory_budget="1MiB", backend="cpu", client=HERE)
    from daskjoin.execution.task import MEMORY_RETRIES

    assert memory.failures() >= MEMORY_RETRIES + 1
    assert any(f"after {MEMORY_RETRIES} retries with less memory" in note for note in info.value.__notes__)
    assert not out.exists() and _leftovers(tmp_path) == []


def test_each_retry_has_half_the_share():
    seen = []
    with memory.reduced(0.5):
        seen.append(memory.share())
        with memory.reduced(0.5):
            seen.append(memory.share())
    seen.append(memory.share())
    assert seen == [0.5, 0.25, 1.0]
    from daskjoin.execution.task import sort_rows

    plain = sort_rows()
    with memory.reduced(0.25):
        assert sort_rows() == int(plain * 0.25)  # the task's batches and in-memory sort shrink with it


def test_out_of_memory_is_told_from_other_errors():
    assert memory.out_of_memory(MemoryError())
    assert memory.out_of_memory(RuntimeError("cudaErrorMemoryAllocation: out of memory"))
    assert memory.out_of_memory(RuntimeError("CUBLAS_STATUS_ALLOC_FAILED"))
    assert not memory.out_of_memory(ValueError("bad eps"))


@pytest.mark.integration
def test_retry_in_cluster_workers(client, store, reference, tmp_path):
    """The hook armed in every worker of the session's cluster: each worker's second allocation fails."""
    x, path = store
    out = tmp_path / "pairs.parquet"
    client.run(memory.fail_allocation, 2)
    try:
        result = dj.similarity_join(path, eps=EPS, out=out, memory_budget="1MiB", backend="cpu", client=client)
        failed = sum(client.run(memory.failures).values())
    finally:
        client.run(memory.fail_allocation, None)
    assert failed >= 1 and result.tasks["memory_retries"] == failed
    assert _files(out) == reference
    manifest = json.loads((out / "_SUCCESS").read_text())
    assert manifest["tasks"]["memory_retries"] == failed


# --------------------------------------------------------------------------- on a GPU


def _planned_on_gpu(path, method="auto"):
    """Plan the GPU join once before a test arms its hook: planning counts a sample with the GPU kernel (its
    result cached for the later plans of this process), and the hook is for the task's allocations.  Without
    this the tests depended on which ran first in a process."""
    dj.plan_join(path, eps=EPS, memory_budget="1MiB", backend="gpu", method=method, client=HERE)


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["grid", "brute"])
@pytest.mark.parametrize("nth", [1, 3, 8])
def test_gpu_allocation_failure_is_retried(store, references, tmp_path, method, nth):
    cp = pytest.importorskip("cupy")
    x, path = store
    out = tmp_path / "pairs.parquet"
    want = references(method)  # the CPU's bytes for the same plan
    _planned_on_gpu(path, method)
    memory.fail_allocation(nth)
    result = dj.similarity_join(path, eps=EPS, out=out, memory_budget="1MiB", backend="gpu", method=method,
                                client=HERE)
    assert memory.failures() == 1
    assert result.tasks.get("memory_retries") == 1
    assert _files(out) == want
    assert _leftovers(tmp_path) == []
    cp.get_default_memory_pool().free_all_blocks()


@pytest.mark.gpu
def test_gpu_retries_are_bounded_and_give_the_memory_back(store, tmp_path):
    cp = pytest.importorskip("cupy")
    x, path = store
    out = tmp_path / "pairs.parquet"
    _planned_on_gpu(path)
    memory.fail_allocation(4, every=True)
    with pytest.raises(MemoryError) as info:
        dj.similarity_join(path, eps=EPS, out=out, memory_budget="1MiB", backend="gpu", client=HERE)
    assert isinstance(info.value, cp.cuda.memory.OutOfMemoryError)
    assert any("retries with less memory" in note for note in info.value.__notes__)
    del info  # its traceback's frames hold the failed attempt's small arrays
    import gc

    gc.collect()
    assert cp.get_default_memory_pool().used_bytes() <= 64 << 10
    assert not out.exists() and _leftovers(tmp_path) == []


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["grid", "brute"])
def test_gpu_buffers_are_sized_within_a_given_budget(store, references, tmp_path, monkeypatch, method):
    """A budget given explicitly bounds what GPU drivers size their device buffers from."""
    pytest.importorskip("cupy")
    from daskjoin.kernels import gpu_common

    x, path = store
    want = references(method)
    _planned_on_gpu(path, method)
    asked = []
    original = gpu_common.device_budget_bytes

    def recording(fraction=0.5):
        got = original(fraction)
        asked.append((fraction, got))
        return got

    monkeypatch.setattr(gpu_common, "device_budget_bytes", recording)
    for module in ("grid_gpu", "brute_gpu"):
        monkeypatch.setattr(f"daskjoin.kernels.{module}.device_budget_bytes", recording)
    out = tmp_path / "pairs.parquet"
    dj.similarity_join(path, eps=EPS, out=out, memory_budget="1MiB", backend="gpu", method=method, client=HERE)
    assert asked and all(got <= (1 << 20) * gpu_common.LIMITED_SHARE for fraction, got in asked)
    assert _files(out) == want
