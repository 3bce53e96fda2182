"""GPU backend: the oracle cases on the GPU, and CPU-GPU identity of pair sets (marked gpu).

Skipped cleanly where CuPy sees no CUDA device; run with `make gpu-test` (pytest -m gpu).
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daskjoin.kernels import get_kernel
from daskjoin.kernels.gpu_common import gpu_available

from cases import CASES, LATTICE_EPS, lattice_points
from oracle import assert_same_pairs, oracle_cross_pairs, oracle_self_count, oracle_self_pairs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu_available(), reason="no CUDA device visible to CuPy"),
]

GRID_OPTIONS = [
    {},
    {"threads_per_point": 4},
    {"sort_by_workload": True, "work_queue": True},
    {"threads_per_point": 8, "work_queue": True},
    {"pattern": "unicomp"},
    {"pattern": "unicomp", "threads_per_point": 4},
    {"pattern": "unicomp", "threads_per_point": 4, "sort_by_workload": True},
    {"pattern": "unicomp", "max_dims": 1},
]


def _b(case):
    return case.b if case.b is not None else case.a


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("method", ["grid", "brute", "szl", "nlj", "directory"])
@pytest.mark.parametrize("mode", ["self", "cross"])
def test_gpu_matches_oracle(case, method, mode):
    kernel = get_kernel(method, "gpu")
    if mode == "self":
        got = kernel.self_join(case.a, case.eps)
        expected = oracle_self_pairs(case.a, case.eps)
        assert kernel.self_count(case.a, case.eps) == len(expected[0])
    else:
        got = kernel.cross_join(case.a, _b(case), case.eps)
        expected = oracle_cross_pairs(case.a, _b(case), case.eps)
        assert kernel.cross_count(case.a, _b(case), case.eps) == len(expected[0])
    assert_same_pairs(got, expected, context=f"{method}/gpu {case.name} {mode}")


@pytest.mark.parametrize("options", GRID_OPTIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()) or "default")
@pytest.mark.parametrize("d", [1, 2, 3, 6, 8])
def test_gpu_grid_options_match_cpu(options, d):
    rng = np.random.default_rng(d)
    x = rng.exponential(1 / 40, size=(20000, d)).astype(np.float32)
    eps = float(np.quantile(np.abs(x[:2000, None, 0] - x[None, :2000, 0]), 0.002)) * (1 + d)
    cpu = get_kernel("grid", "cpu").self_join(x, eps)  # LID-UNICOMP on the CPU: a pattern never changes the pairs
    gpu = get_kernel("grid", "gpu", **options).self_join(x, eps)
    assert_same_pairs(gpu, cpu, context=f"options {options}")
    b = rng.exponential(1 / 40, size=(5000, d)).astype(np.float32)
    assert_same_pairs(get_kernel("grid", "gpu", **options).cross_join(x, b, eps),
                      get_kernel("grid", "cpu").cross_join(x, b, eps))


#: the methods' own options (they change the work, never the pairs), on every oracle case
METHOD_OPTIONS = [("grid", {"pattern": "unicomp"}), ("szl", {"shifts": "random", "lists": 5}),
                  ("szl", {"lists": 1}), ("directory", {"pca": True}), ("directory", {"levels": 4, "fanout": 3})]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("method, options", METHOD_OPTIONS,
                         ids=lambda o: o if isinstance(o, str) else "-".join(f"{k}={v}" for k, v in o.items()))
def test_gpu_method_options_match_oracle(case, method, options):
    kernel = get_kernel(method, "gpu", **options)
    assert_same_pairs(kernel.self_join(case.a, case.eps), oracle_self_pairs(case.a, case.eps),
                      context=f"{method} {options} {case.name} self")
    assert_same_pairs(kernel.cross_join(case.a, _b(case), case.eps), oracle_cross_pairs(case.a, _b(case), case.eps),
                      context=f"{method} {options} {case.name} cross")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=lattice_points(),
    eps=st.sampled_from(LATTICE_EPS),
    max_dims=st.integers(1, 5),
    tpp=st.sampled_from([1, 3]),
)
def test_gpu_grid_unicomp_property_lattices(data, eps, max_dims, tpp):
    """UNICOMP on the GPU (its downward scan of the own row's lower cell included) on lattice points."""
    k = get_kernel("grid", "gpu", pattern="unicomp", max_dims=max_dims, threads_per_point=tpp)
    assert_same_pairs(k.self_join(data, eps), oracle_self_pairs(data, eps), context="self", a=data, eps=eps)


def test_gpu_outputs_are_deterministic():
    x = np.random.default_rng(3).random((50000, 3)).astype(np.float32)
    for method in ("grid", "brute", "szl", "nlj", "directory"):
        first = get_kernel(method, "gpu").self_join(x, 0.02)
        second = get_kernel(method, "gpu").self_join(x, 0.02)
        assert all(np.array_equal(p, q) for p, q in zip(first, second))


def test_gpu_batches_cover_everything():
    x = np.random.default_rng(4).random((30000, 2)).astype(np.float32)
    expected = oracle_self_pairs(x, 0.01)
    for method in ("grid", "brute", "szl", "nlj", "directory"):
        parts = list(get_kernel(method, "gpu").self_batches(x, 0.01, 5000))
        got = tuple(np.concatenate([p[t] for p in parts]) for t in range(3))
        assert_same_pairs(got, expected, context=method)


def test_brute_gpu_large_offsets_and_high_d():
    rng = np.random.default_rng(5)
    centres = rng.random((20, 64))
    x = (centres[rng.integers(0, 20, 4000)] + 0.05 * rng.standard_normal((4000, 64))) + 1e6
    eps = 0.47
    assert_same_pairs(get_kernel("brute", "gpu").self_join(x, eps), oracle_self_pairs(x, eps))
    x32 = (x - 1e6).astype(np.float32)
    assert_same_pairs(get_kernel("brute", "gpu").self_join(x32, eps), oracle_self_pairs(x32, eps))


@pytest.mark.parametrize("method", ["nlj", "directory"])
def test_rows_wider_than_shared_memory(method):
    """d > 6,144: a float64 row no longer fits the 48 KiB a block stages, so nlj and directory read the
    other side from global memory (their ``staged = 0`` path); duplicates and a pair within an ulp of eps included."""
    rng = np.random.default_rng(6)
    d = 6200
    centres = rng.random((6, d))
    x = centres[rng.integers(0, 6, 160)] + 0.01 * rng.standard_normal((160, d))
    x[1] = x[0]  # a duplicate
    x[3] = x[2]
    x[3, 7] += 0.5  # within an ulp of eps from x[2]
    eps = 0.5
    kernel = get_kernel(method, "gpu")
    assert getattr(kernel._join(x, None, eps), "staged", True) is False  # the path this test is for
    assert_same_pairs(kernel.self_join(x, eps), oracle_self_pairs(x, eps), context=f"{method} self")
    b = x[::3] + 0.001
    assert_same_pairs(kernel.cross_join(x, b, eps), oracle_cross_pairs(x, b, eps), context=f"{method} cross")


def test_brute_gpu_products_below_float32_range():
    """Pairs whose float32 products fall below 2^-126 (CuPy compiles with -ftz=true: they read as 0): the
    filter's norm floor (kernels/exact.NORM_FLOOR) keeps every pair at distance <= eps."""
    e, n = 2.0 ** -66, 50
    c = 2.0 ** -62 * (1 + (n - np.arange(n)) * 2.0 ** -10)
    b = np.zeros((n + 1, 4))
    b[:n, 0], b[:n, 1] = e, c
    b[n] = [-e, -c.max(), 0, 0]
    a = np.array([[2.0 ** -62, 0, 0, 0]])
    eps = float(np.sqrt(((b[47] - a[0]) ** 2).sum()))  # the pair to row 47 exactly at eps
    want = oracle_cross_pairs(a, b, eps)
    assert len(want[0]) > 0
    assert_same_pairs(get_kernel("brute", "gpu").cross_join(a, b, eps), want)
    x = np.vstack([a, b])
    assert_same_pairs(get_kernel("brute", "gpu").self_join(x, eps), oracle_self_pairs(x, eps))


def test_gpu_grid_output_larger_than_the_device_budget(monkeypatch):
    """Force the batched path that results larger than GPU memory take."""
    from daskjoin.kernels import grid_gpu

    monkeypatch.setattr(grid_gpu, "device_budget_bytes", lambda fraction=0.5: 20 * 3000)
    x = np.random.default_rng(6).random((20000, 2)).astype(np.float32)
    b = np.random.default_rng(7).random((5000, 2))
    assert_same_pairs(get_kernel("grid", "gpu").self_join(x, 0.01), oracle_self_pairs(x, 0.01))
    assert_same_pairs(get_kernel("grid", "gpu").cross_join(x, b, 0.01), oracle_cross_pairs(x, b, 0.01))


@pytest.mark.parametrize("slice_pairs, max_slices", [(97, 8), (97, 100000)], ids=["8-slices", "tiny-slices"])
@pytest.mark.parametrize("with_distance", [True, False])
def test_gpu_grid_overlapped_fill_equals_one_pass(monkeypatch, slice_pairs, max_slices, with_distance):
    """Slices filled while earlier ones are copied out give the one-pass arrays, in the same order.

    Tiny slices are smaller than the heaviest item (500 equal points), so several cuts land on one
    item and empty slices are skipped.  The sliced runs come first, so no device block can still
    hold the one-pass result; batches cover the path with a nonzero first item.
    """
    from daskjoin.kernels import grid_gpu

    rng = np.random.default_rng(8)
    x = rng.random((40000, 2)).astype(np.float32)
    x[:500] = x[0]
    b = rng.random((9000, 2))

    def run():
        k = get_kernel("grid", "gpu")
        parts = list(k.self_batches(x, 0.01, 120000, with_distance))
        return (k.self_join(x, 0.01, with_distance), k.cross_join(x, b, 0.01, with_distance),
                tuple(None if parts[0][t] is None else np.concatenate([p[t] for p in parts]) for t in range(3)))

    with monkeypatch.context() as m:
        m.setattr(grid_gpu, "OVERLAP_SLICE_PAIRS", slice_pairs)
        m.setattr(grid_gpu, "MAX_SLICES", max_slices)
        sliced = run()
    one_pass = run()
    for got, want in zip(sliced, one_pass):
        assert (got[2] is None) == (not with_distance)
        assert all(np.array_equal(p, q) for p, q in zip(got, want) if q is not None)
    assert_same_pairs(sliced[0], oracle_self_pairs(x, 0.01))
    assert_same_pairs(sliced[2], oracle_self_pairs(x, 0.01))


def test_gpu_task_frees_memory_and_raises(monkeypatch):
    """A failing GPU task raises its own error (no CPU fallback) after giving device memory back."""
    import cupy as cp

    from daskjoin.execution import task
    from daskjoin.io.zarr_in import MemorySource
    from daskjoin.kinds import epsilon
    from daskjoin.planning.plan import Partition

    def boom(*args, **kwargs):
        cp.empty(1 << 20, cp.uint8)  # something cached in the pool
        raise cp.cuda.runtime.CUDARuntimeError(2)

    monkeypatch.setattr(epsilon._Sides, "batches", boom)
    job = epsilon.JoinJob(MemorySource(np.zeros((4, 2))), None, True, 0.1, "grid", "gpu", True)
    with pytest.raises(cp.cuda.runtime.CUDARuntimeError):
        task.partition_frame(Partition(0, (0, 4), None, True, 0.0), job)
    assert cp.get_default_memory_pool().total_bytes() == 0


def test_gpu_plans_under_the_automatic_budget_count_the_device(tmp_path):
    """The automatic budget (host memory) sizes a GPU task's rows as read, the GPU their copies; a given budget
    bounds both, as before.  A finished run resumed plans the same partitions (the record keeps the GPU's size)."""
    import zarr
    from distributed import Client

    import daskjoin as dj

    x = np.random.default_rng(9).random((3000, 20)).astype(np.float32)
    path = str(tmp_path / "x.zarr")
    zarr.create_array(path, shape=x.shape, chunks=(500, 20), dtype=x.dtype)[:] = x
    with Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as client:
        auto = dj.plan_join(path, eps=0.5, backend="gpu", client=client)
        assert auto.device_memory > 0 and "device/task:" in auto.explain()
        given = dj.plan_join(path, eps=0.5, backend="gpu", memory_budget="400kB", client=client)
        assert given.device_memory == 0 and given.ntasks > 1
        out = str(tmp_path / "out.parquet")
        first = dj.similarity_join(path, eps=0.5, backend="gpu", client=client, out=out)
        again = dj.similarity_join(path, eps=0.5, backend="gpu", client=client, out=out, resume=True)
        assert again.status == "finished" and again.pairs == first.pairs == oracle_self_count(x, 0.5)
        assert again.plan.device_memory == auto.device_memory


@pytest.mark.parametrize("partitioning", ["chunk_pairs", "slabs"])
@pytest.mark.parametrize("method", ["grid", "brute", "szl", "nlj", "directory"])
def test_gpu_backend_through_the_api_matches_oracle(partitioning, method, tmp_path):
    """Plan -> Dask graph -> GPU kernels, several partitions, Zarr input and Parquet output."""
    import pandas as pd
    import zarr
    from distributed import Client

    import daskjoin as dj

    rng = np.random.default_rng(8)
    x = rng.random((6000, 3)).astype(np.float32)
    x[10:20] = x[10]  # duplicates
    path = str(tmp_path / "x.zarr")
    z = zarr.create_array(path, shape=x.shape, chunks=(1000, 3), dtype=x.dtype)
    z[:] = x
    eps = 0.03
    expected = oracle_self_pairs(x, eps)
    with Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as client:
        plan = dj.plan_join(path, eps=eps, method=method, partitioning=partitioning, backend="gpu",
                            memory_budget="400kB", client=client)
        assert plan.ntasks > 3
        frame = dj.similarity_join(path, eps=eps, method=method, partitioning=partitioning, backend="gpu",
                                   memory_budget="400kB", client=client).compute()
        got = (frame.i.to_numpy(), frame.j.to_numpy(), frame.dist.to_numpy())
        assert_same_pairs(got, expected, context=f"{method}/{partitioning}")
        count = dj.similarity_join(path, eps=eps, method=method, partitioning=partitioning, backend="gpu",
                                   memory_budget="400kB", client=client, output="count")
        assert count == len(expected[0])
        res = dj.similarity_join(path, eps=eps, method=method, partitioning=partitioning, backend="gpu",
                                 memory_budget="400kB", client=client, out=str(tmp_path / "out.parquet"))
        back = pd.read_parquet(str(tmp_path / "out.parquet"))
        assert res.pairs == len(back) == len(expected[0])
        assert_same_pairs((back.i.to_numpy(), back.j.to_numpy(), back.dist.to_numpy()), expected)


@pytest.mark.parametrize("method", ["grid", "brute", "szl", "nlj", "directory"])
def test_cpu_and_gpu_tasks_of_one_plan_write_identical_bytes(tmp_path, method):
    """A part file's bytes depend on its pair set only: a task retried on the other kind of worker writes the same file."""
    import dask
    import zarr
    from distributed import Client

    import daskjoin as dj

    rng = np.random.default_rng(11)
    x = rng.random((8000, 3))
    x[100:140] = x[100]  # duplicates: ties in distance, one pair order
    path = str(tmp_path / "x.zarr")
    z = zarr.create_array(path, shape=x.shape, chunks=(1000, 3), dtype=x.dtype)
    z[:] = x
    outs = {}
    # small row groups and in-memory sorts: many batches and spilled runs on both sides
    with dask.config.set({"daskjoin.row-group-bytes": 20 * 5000, "daskjoin.sort-bytes": 20 * 20000}), \
            Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as client:
        for backend in ("cpu", "gpu"):
            out = tmp_path / f"{backend}.parquet"
            dj.similarity_join(path, eps=0.04, method=method, partitioning="chunk_pairs", backend=backend,
                               memory_budget="300kB", client=client, out=str(out))
            outs[backend] = {p.name: p.read_bytes() for p in sorted(out.glob("part-*.parquet"))}
        sets = [list(rng.choice(60, size=int(rng.integers(1, 12)), replace=False)) for _ in range(3000)]
        for backend in ("cpu", "gpu"):
            out = tmp_path / f"sets-{backend}.parquet"
            dj.set_similarity_join(sets, threshold=0.4, backend=backend, partitions=3, client=client, out=str(out))
            outs[f"sets-{backend}"] = {p.name: p.read_bytes() for p in sorted(out.glob("part-*.parquet"))}
    assert len(outs["cpu"]) > 1 and outs["cpu"] == outs["gpu"]
    assert len(outs["sets-cpu"]) > 1 and outs["sets-cpu"] == outs["sets-gpu"]


def test_device_budget_counts_what_cupys_pool_caches():
    """Blocks CuPy's pool caches after an array is freed are free to the next buffers: a second join in a process
    must not see the first one's freed memory as taken (it then spilled its pairs to the host unsorted)."""
    import cupy as cp

    from daskjoin.kernels.gpu_common import cupy_pool_cached, device_budget_bytes

    pool = cp.get_default_memory_pool()
    pool.free_all_blocks()
    before = device_budget_bytes(0.5)
    held = cp.empty(int(cp.cuda.runtime.memGetInfo()[0] // 4), cp.uint8)
    size = held.nbytes
    del held  # back to the pool, not to the device
    assert cupy_pool_cached() >= size
    assert device_budget_bytes(0.5) >= 0.95 * before  # without the pool's blocks: about 0.875 of it
    pool.free_all_blocks()
    assert cupy_pool_cached() == 0
