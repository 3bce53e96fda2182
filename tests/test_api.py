"""The public API ``daskjoin.similarity_join`` / ``plan_join`` against the float64 brute-force oracle.

Every method × partitioning × (self, A×B) × (Zarr on disk, numpy) on a
representative subset of ``tests/cases.py``, run on the session's real
multi-process LocalCluster with a memory budget that splits each join into
several tasks.  The pair set, the dtypes, ``i < j`` for self-joins and the exact
count (``output="count"``) must equal the oracle's; self-joins of random data
are also compared with scipy's ``cKDTree.query_pairs``.
"""
from __future__ import annotations

import functools

import dask.array as da
import numpy as np
import pandas as pd
import pytest
import zarr

import daskjoin as dj
from cases import case_by_name
from joinhelpers import budget_for_tasks, check_frame, frame_triple, oracle, write_zarr
from oracle import assert_same_pairs

pytestmark = pytest.mark.integration

METHODS = ["grid", "brute"]
PARTITIONINGS = ["chunk_pairs", "slabs"]

#: Cases with exact ties at eps (lattices), duplicates, 1e6 offsets, d = 1 and d = 64, n = 0 and n = 1.
CASE_NAMES = [
    "lattice_d1_unit_f64",
    "lattice_d2_unit_f32",
    "lattice_d2_diag_sqrt2f32_f32",
    "lattice_d3_half_f64",
    "lattice_d2_offset1e6_f64",
    "uniform_d2_offset1e6_f32",
    "duplicates_d3_f64",
    "all_identical_d2_f32",
    "duplicates_offset1e6_d2_f32",
    "duplicates_d64_f64",
    "binary_d64_eps5_f32",
    "clustered_d64_f64",
    "uniform_d1_f64",
    "multiples_of_eps_0.1_d1_f64",
    "near_eps_d3_f32",
    "uniform_d2_f64",
    "eps_huge_all_pairs_d3_f64",
    "summation_order_d8_f64",
    "mixed_dtype_f32_f64_d3",
    "two_at_eps_d2_f64",
    "single_d1_f64",
    "empty_a_d3_f64",
    "empty_b_d2_f32",
    "empty_both_d1_f64",
]

#: Tasks aimed at for the oracle matrix (a budget that splits every non-trivial join).
TARGET_TASKS = 6


@functools.lru_cache(maxsize=None)
def _expected(name: str, mode: str):
    case = case_by_name(name)
    return oracle(case.a, None if mode == "self" else case.cross_b(), case.eps)


@pytest.fixture(scope="module")
def zarr_inputs(tmp_path_factory):
    """Zarr stores of each case's A and B (about 7 chunks each), written once per module."""
    root = tmp_path_factory.mktemp("cases")
    made = {}

    def get(name: str):
        if name not in made:
            case = case_by_name(name)
            paths = []
            for side, arr in (("a", case.a), ("b", case.cross_b())):
                rows = max(8, -(-arr.shape[0] // 7))
                # every chunk written, all-zero ones too: a missing chunk is a damaged store by default
                with zarr.config.set({"array.write_empty_chunks": True}):
                    paths.append(write_zarr(root / f"{name}-{side}.zarr", arr, rows))
            made[name] = tuple(paths)
        return made[name]

    return get


def _inputs(source, name, mode, zarr_inputs):
    case = case_by_name(name)
    if source == "zarr":
        pa, pb = zarr_inputs(name)
        return pa, (None if mode == "self" else pb)
    return case.a, (None if mode == "self" else case.cross_b())


#: numpy inputs run on these cases by default (every case with ``-m slow``); Zarr inputs run on all.
NUMPY_DEFAULT = {
    "lattice_d2_unit_f32", "duplicates_d3_f64", "clustered_d64_f64", "uniform_d1_f64",
    "uniform_d2_offset1e6_f32", "mixed_dtype_f32_f64_d3", "single_d1_f64", "empty_a_d3_f64",
}


def _matrix():
    for name in CASE_NAMES:
        for mode in ("self", "cross"):
            for method in METHODS:
                for part in PARTITIONINGS:
                    for source in ("zarr", "numpy"):
                        slow = source == "numpy" and name not in NUMPY_DEFAULT
                        yield pytest.param(name, mode, method, part, source, id=f"{name}-{mode}-{method}-{part}-{source}",
                                           marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize("name, mode, method, partitioning, source", list(_matrix()))
def test_similarity_join_matches_oracle(client, zarr_inputs, name, mode, method, partitioning, source):
    case = case_by_name(name)
    a, b = _inputs(source, name, mode, zarr_inputs)
    budget, ntasks = budget_for_tasks(a, b, case.eps, partitioning, TARGET_TASKS, client, method=method)
    df = dj.similarity_join(a, b, eps=case.eps, method=method, partitioning=partitioning, memory_budget=budget,
                            client=client)
    assert df.npartitions == ntasks
    got = client.compute(df).result()
    check_frame(got, selfjoin=(mode == "self"))
    expected = _expected(name, mode)
    assert_same_pairs(frame_triple(got), expected, context=f"{name} {mode} {method} {partitioning} {source} "
                      f"budget={budget} tasks={ntasks}", a=case.a, b=None if mode == "self" else case.cross_b(),
                      eps=case.eps)
    count = dj.similarity_join(a, b, eps=case.eps, method=method, partitioning=partitioning, memory_budget=budget,
                               client=client, output="count")
    assert type(count) is int
    assert count == expected[0].size


@pytest.mark.parametrize("partitioning", PARTITIONINGS)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("d, eps", [(2, 0.03), (3, 0.08), (8, 0.4)])
def test_self_join_matches_scipy_ckdtree(client, method, partitioning, d, eps):
    from scipy.spatial import cKDTree

    x = np.random.default_rng(100 + d).random((2500, d))
    expected = cKDTree(x).query_pairs(eps, output_type="ndarray")
    assert len(expected) > 1000  # a meaningful number of pairs
    budget, _ = budget_for_tasks(x, None, eps, partitioning, TARGET_TASKS, client, method=method)
    got = client.compute(dj.similarity_join(x, eps=eps, method=method, partitioning=partitioning,
                                            memory_budget=budget, client=client)).result()
    check_frame(got, selfjoin=True)
    got_pairs = got[["i", "j"]].to_numpy()
    assert len(got_pairs) == len(expected)
    assert set(map(tuple, got_pairs.tolist())) == set(map(tuple, np.sort(expected, axis=1).tolist()))


# --------------------------------------------------------------------------- other input kinds


@pytest.mark.parametrize("kind", ["zarr_array", "dask_array", "float32_numpy", "int_numpy", "pathlib"])
def test_input_kinds(client, tmp_path, kind):
    rng = np.random.default_rng(7)
    x = rng.integers(0, 40, (600, 2)).astype(np.int64)  # integer lattice points: many ties at eps = 1
    eps = 1.0
    if kind == "zarr_array":
        path = write_zarr(tmp_path / "x.zarr", x.astype(np.float64), 50)
        obj = zarr.open_array(path, mode="r")
    elif kind == "dask_array":
        obj = da.from_array(x.astype(np.float64), chunks=(100, 2))
    elif kind == "float32_numpy":
        obj = x.astype(np.float32)
    elif kind == "int_numpy":
        obj = x
    else:
        from pathlib import Path

        obj = Path(write_zarr(tmp_path / "x.zarr", x.astype(np.float32), 50))
    got = client.compute(dj.similarity_join(obj, eps=eps, client=client, memory_budget="32KiB")).result()
    check_frame(got, selfjoin=True)
    assert_same_pairs(frame_triple(got), oracle(x, None, eps), context=kind, a=x, eps=eps)


def test_int_zarr_input(client, tmp_path):
    x = np.random.default_rng(8).integers(-5, 5, (300, 3)).astype(np.int32)
    b = np.random.default_rng(9).integers(-5, 5, (200, 3)).astype(np.int16)
    pa = write_zarr(tmp_path / "a.zarr", x, 40)
    pb = write_zarr(tmp_path / "b.zarr", b, 40)
    got = client.compute(dj.similarity_join(pa, pb, eps=1.5, client=client)).result()
    check_frame(got, selfjoin=False)
    assert_same_pairs(frame_triple(got), oracle(x, b, 1.5), a=x, b=b, eps=1.5)


def test_eps_numpy_scalar_and_int_accepted(client):
    x = np.arange(10, dtype=np.float64)[:, None]
    n32 = dj.similarity_join(x, eps=np.float32(1.0), client=client, output="count")
    n_int = dj.similarity_join(x, eps=1, client=client, output="count")
    assert n32 == n_int == 9


def test_docstring_example(client):
    x = np.array([[0.0, 0.0], [0.5, 0.0], [3.0, 0.0]])
    assert client.compute(dj.similarity_join(x, eps=0.5, client=client)).result().values.tolist() == [[0.0, 1.0, 0.5]]
    assert dj.similarity_join(x, eps=3.0, output="count", client=client) == 3


# --------------------------------------------------------------------------- the lazy DataFrame


def test_dataframe_meta_and_partitions(client):
    x = np.random.default_rng(3).random((2000, 2))
    budget, ntasks = budget_for_tasks(x, None, 0.03, "chunk_pairs", 5, client)
    df = dj.similarity_join(x, eps=0.03, partitioning="chunk_pairs", memory_budget=budget, client=client)
    assert df.npartitions == ntasks > 1
    assert list(df.columns) == ["i", "j", "dist"]
    assert dict(df.dtypes) == {"i": np.dtype("int64"), "j": np.dtype("int64"), "dist": np.dtype("float32")}
    # every partition computes to a frame with the same schema, whatever it holds
    for k in range(df.npartitions):
        part = client.compute(df.get_partition(k)).result()
        check_frame(part, selfjoin=True)
    # lazy operations work on the result
    n = client.compute(df.shape[0]).result()
    assert n == oracle(x, None, 0.03)[0].size


def test_without_distance(client):
    x = np.random.default_rng(4).random((800, 3))
    df = dj.similarity_join(x, eps=0.1, with_distance=False, client=client, memory_budget="16KiB")
    assert list(df.columns) == ["i", "j"]
    got = client.compute(df).result()
    check_frame(got, selfjoin=True, with_distance=False)
    i, j, _ = frame_triple(got)
    assert_same_pairs((i, j, None), oracle(x, None, 0.1), a=x, eps=0.1)


def test_default_client_is_used(client):
    """Without ``client=``, the current (default) client runs the join."""
    x = np.random.default_rng(5).random((500, 2))
    assert dj.similarity_join(x, eps=0.05, output="count") == oracle(x, None, 0.05)[0].size


@pytest.mark.parametrize("method", ["auto", "grid", "brute"])
@pytest.mark.parametrize("partitioning", ["auto", "chunk_pairs", "slabs"])
def test_plan_records_choices(client, method, partitioning):
    x = np.random.default_rng(6).random((400, 2))
    plan = dj.plan_join(x, eps=0.05, method=method, partitioning=partitioning, client=client)
    assert isinstance(plan, dj.Plan)
    assert plan.method == ("grid" if method == "auto" else method)
    assert plan.partitioning in PARTITIONINGS
    if partitioning != "auto":
        assert plan.partitioning == partitioning
    assert plan.backend in ("cpu", "auto") and plan.selfjoin and plan.eps == 0.05
    assert all(isinstance(p, dj.Partition) for p in plan.partitions)
    with pytest.raises(Exception):
        plan.eps = 1.0  # frozen


def test_auto_method_high_d_is_brute(client):
    x = np.random.default_rng(7).random((100, 32))
    assert dj.plan_join(x, eps=0.5, client=client).method == "brute"
    assert dj.plan_join(x[:, :4], eps=0.5, client=client).method == "grid"


def test_backend_cpu_and_auto_agree(client):
    x = np.random.default_rng(8).random((700, 2))
    assert dj.plan_join(x, eps=0.04, backend="cpu", client=client).backend == "cpu"
    counts = {b: dj.similarity_join(x, eps=0.04, backend=b, client=client, output="count") for b in ("cpu", "auto")}
    assert counts["cpu"] == counts["auto"] == oracle(x, None, 0.04)[0].size


def test_memory_budget_forms(client):
    x = np.random.default_rng(9).random((1500, 2))
    plans = [dj.plan_join(x, eps=0.03, memory_budget=v, partitioning="chunk_pairs", client=client)
             for v in ("64KiB", 65536, "65536B")]
    assert len({p.ntasks for p in plans}) == 1
    assert all(p.memory_budget == 65536 for p in plans)
    import dask

    with dask.config.set({"daskjoin.memory-budget": "64KiB"}):
        assert dj.plan_join(x, eps=0.03, partitioning="chunk_pairs", client=client).memory_budget == 65536


def test_result_is_frame_of_pandas(client):
    x = np.random.default_rng(10).random((300, 2))
    got = client.compute(dj.similarity_join(x, eps=0.1, client=client)).result()
    assert isinstance(got, pd.DataFrame)


# --------------------------------------------------------------------------- eps extremes


@pytest.mark.parametrize("partitioning", PARTITIONINGS)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("eps", [1e300, 1e-200, 5e-324])  # eps*eps overflows to inf / underflows to 0
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the oracle squares eps=1e300
def test_eps_extremes(client, method, partitioning, eps):
    x = np.random.default_rng(11).random((300, 2))
    x[:4] = x[4:8]  # exact duplicates: the only pairs when eps*eps underflows to 0
    expected = oracle(x, None, eps)
    got = client.compute(dj.similarity_join(x, eps=eps, method=method, partitioning=partitioning,
                                            memory_budget="16KiB", client=client)).result()
    check_frame(got, selfjoin=True)
    assert_same_pairs(frame_triple(got), expected, a=x, eps=eps)


# --------------------------------------------------------------------------- relative paths on a cluster



def test_relative_input_path(client, tmp_path, monkeypatch):
    """The session cluster's workers run in pytest's working directory, not in tmp_path."""
    x = np.random.default_rng(12).random((400, 2))
    write_zarr(tmp_path / "x.zarr", x, 100)
    monkeypatch.chdir(tmp_path)
    assert dj.similarity_join("x.zarr", eps=0.05, client=client, output="count") == oracle(x, None, 0.05)[0].size


def test_relative_output_path(client, tmp_path, monkeypatch):
    x = np.random.default_rng(13).random((400, 2))
    monkeypatch.chdir(tmp_path)
    result = dj.similarity_join(x, eps=0.05, client=client, out="rel.parquet")
    assert result.pairs == oracle(x, None, 0.05)[0].size
    assert (tmp_path / "rel.parquet" / "_SUCCESS").exists()


def test_gpu_options_are_checked_before_any_work_and_ignored_on_cpu(client):
    x = np.random.default_rng(0).random((500, 2))
    with pytest.raises(dj.InputError, match="not options of method 'grid'"):
        dj.similarity_join(x, eps=0.05, method="grid", gpu_options={"tile": 64}, client=client)
    with pytest.raises(dj.InputError, match="gpu_options must be a dict"):
        dj.similarity_join(x, eps=0.05, gpu_options=[("tile", 64)], client=client)
    expected = len(oracle(x, None, 0.05)[0])
    got = dj.similarity_join(x, eps=0.05, method="grid", backend="cpu", output="count",
                             gpu_options={"threads_per_point": 4}, client=client)
    assert got == expected


#: the methods beside grid and brute, with options of their own passed through (directory on a third of the
#: cases: its kernels are checked on every case in test_kernels_oracle.py; nlj's CPU driver is brute's)
MORE_METHODS = {"szl": ({"shifts": "random", "lists": 3}, CASE_NAMES),
                "directory": ({"levels": 2, "fanout": 8, "pca": True}, CASE_NAMES[::3])}


def _more_methods():
    for method, (options, names) in MORE_METHODS.items():
        for name in names:
            for mode in ("self", "cross"):
                for part in PARTITIONINGS:
                    yield pytest.param(method, options, name, mode, part, id=f"{method}-{name}-{mode}-{part}")


@pytest.mark.parametrize("method, options, name, mode, partitioning", list(_more_methods()))
def test_more_methods_match_oracle(client, zarr_inputs, method, options, name, mode, partitioning):
    """szl and directory on a real cluster, Zarr inputs cut into several tasks, their own options passed."""
    case = case_by_name(name)
    a, b = _inputs("zarr", name, mode, zarr_inputs)
    budget, ntasks = budget_for_tasks(a, b, case.eps, partitioning, TARGET_TASKS, client, method=method)
    df = dj.similarity_join(a, b, eps=case.eps, method=method, partitioning=partitioning, memory_budget=budget,
                            client=client, gpu_options=options)
    assert df.npartitions == ntasks
    got = client.compute(df).result()
    check_frame(got, selfjoin=(mode == "self"))
    assert_same_pairs(frame_triple(got), _expected(name, mode), context=f"{method} {name} {mode} {partitioning}",
                      a=case.a, b=None if mode == "self" else case.cross_b(), eps=case.eps)
