"""The kNN-join through the shared pipeline: plan, tasks, frame, Parquet, a real cluster, the CLI.

The oracle is a float64 brute force with daskjoin's rule (squared differences summed in
dimension order, ties by the smaller j); tests/test_knn_adversarial.py holds the adversarial
and property cases.
"""
from __future__ import annotations

import json
import math
import os

import numpy as np
import pandas as pd
import pytest

import daskjoin as dj
from clihelpers import run_cli
from daskjoin.kernels import registry
from daskjoin.kernels.knn import KnnBrute, KnnGrid, empty_lists, finish
from daskjoin.planning.knn import _data_blocks


def oracle(a, b, k):
    """Rows (i, j, dist, rank) sorted by (i, j); ``b=None``: self-join without i itself."""
    base = a if b is None else b
    a64, b64 = np.asarray(a, np.float64), np.asarray(base, np.float64)
    s = np.zeros((len(a64), len(b64)))
    for t in range(a64.shape[1]):
        u = a64[:, t][:, None] - b64[:, t][None, :]
        s = s + u * u
    rows = []
    for i in range(len(a64)):
        js = np.arange(len(b64))
        if b is None:
            js = js[js != i]
        order = js[np.lexsort((js, s[i, js]))][:k]
        for r, j in enumerate(order):
            rows.append((i, int(j), np.float32(np.sqrt(s[i, j])), r + 1))
    frame = pd.DataFrame(rows, columns=["i", "j", "dist", "rank"]).astype(
        {"i": np.int64, "j": np.int64, "dist": np.float32, "rank": np.int32})
    return frame.sort_values(["i", "j"]).reset_index(drop=True)


def same(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    got = got.reset_index(drop=True)
    assert list(got.columns) == ["i", "j", "dist", "rank"]
    assert got.dtypes.to_dict() == expected.dtypes.to_dict()
    pd.testing.assert_frame_equal(got, expected)


def clumps(n=600, d=3, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.random((4, d)) * 100.0
    return (centres[rng.integers(0, 4, n)] + rng.normal(0, 0.5, (n, d))).astype(np.float32)


@pytest.mark.parametrize("method", ["grid", "brute", "szl"])
@pytest.mark.parametrize("budget", [None, "120KB"])
def test_self_and_cross_match_the_oracle(method, budget):
    a, b = clumps(500), clumps(300, seed=1)
    for left, right in ((a, None), (a, b), (b, a)):
        k = 7
        got = dj.knn_join(left, right, k=k, method=method, backend="cpu", memory_budget=budget).compute()
        same(got, oracle(left, right, k))


def test_small_budget_cuts_queries_and_data_into_blocks():
    x = clumps(2000)
    plan = dj.plan_knn(x, k=5, memory_budget="150KB")
    assert plan.ntasks > 1 and len(plan.blocks) > 1
    assert plan.blocks[0][0] == 0 and plan.blocks[-1][1] == len(x)
    assert all(s1 == e0 for (_, e0), (s1, _) in zip(plan.blocks, plan.blocks[1:]))
    assert "block(s)" in plan.explain() and "k=5" in plan.explain()


def test_queries_near_slab_boundaries_with_sorted_rows():
    """Rows sorted along x, data blocks as thin slabs (thinner than the k-th distance): queries near a
    boundary must search the neighbouring slabs; far slabs are pruned, the answer unchanged."""
    from daskjoin.execution import graph
    from daskjoin.io.zarr_in import open_points
    from daskjoin.kinds.knn import KnnJob
    from daskjoin.planning.knn import make_knn_plan

    rng = np.random.default_rng(3)
    x = rng.random((3000, 2))
    x = x[np.argsort(x[:, 0])]
    k = 40
    plan = make_knn_plan(open_points(x, "A"), None, k, method="grid", backend="cpu", memory_budget=1 << 30,
                         parallelism=3, block_rows=60)
    widths = plan.block_hi[:, 0] - plan.block_lo[:, 0]
    kth = np.sqrt(k / (len(x) * np.pi))
    assert len(plan.blocks) == 50 and plan.ntasks == 3 and np.median(widths) < kth / 2
    got = graph.to_dataframe(KnnJob.from_plan(plan), plan.partitions).compute()
    same(got, oracle(x, None, k))


def test_blocks_pruned_by_box_distance():
    """A block is searched only for queries whose k-th distance reaches its box."""
    x = np.concatenate([np.random.default_rng(0).random((300, 2)), np.random.default_rng(1).random((300, 2)) + 1e3])
    searched = []
    original = KnnGrid.search

    def spy(self, queries, *args):
        searched.append((self.first_id, len(queries)))
        return original(self, queries, *args)

    KnnGrid.search = spy
    try:
        got = dj.knn_join(x, k=3, method="grid", memory_budget="60KB").compute()
    finally:
        KnnGrid.search = original
    same(got, oracle(x, None, 3))
    # far clumps never meet: each query searched only blocks of its own clump
    assert sum(n for _, n in searched) < 2 * len(x)


def test_data_blocks_cover_rows_and_bound_them():
    stats = dj.planning.bounds._compute(dj.io.zarr_in.MemorySource(np.arange(40.0)[:, None]),
                                        dj.planning.bounds._local_mapper)
    blocks, lo, hi = _data_blocks(stats, 7)
    assert blocks[0][0] == 0 and blocks[-1][1] == 40 and all(e - s <= 7 for s, e in blocks)
    for (s, e), l, h in zip(blocks, lo, hi):
        assert l[0] <= s and h[0] >= e - 1


def test_parquet_output_and_manifest(tmp_path, zarr_writer):
    x = clumps(400)
    path = zarr_writer(x, chunk_rows=50)
    out = tmp_path / "knn.parquet"
    result = dj.knn_join(path, k=4, out=str(out))
    assert result.pairs == 400 * 4
    back = pd.read_parquet(out)
    same(back, oracle(x, None, 4))
    manifest = json.loads((out / "_SUCCESS").read_text())
    assert manifest["k"] == 4 and manifest["kind"] == "knn" and manifest["rows"] == 1600


def test_runs_on_a_local_cluster(client, zarr_writer):
    a, b = clumps(2500), clumps(200, seed=5)
    pa, pb = zarr_writer(a, chunk_rows=400), zarr_writer(b, chunk_rows=40)
    plan = dj.plan_knn(pa, pb, k=6, client=client)
    assert plan.ntasks == 2  # a task per worker thread (of at least 1024 queries)
    same(dj.knn_join(pa, pb, k=6, client=client).compute(), oracle(a, b, 6))
    same(dj.knn_join(b, k=6, client=client, memory_budget="40KB").compute(), oracle(b, None, 6))


def test_one_result_for_every_method_and_partitioning():
    x = np.random.default_rng(7).integers(0, 5, (400, 3)).astype(np.float64)  # a lattice: ties everywhere
    results = [dj.knn_join(x, k=k, method=m, memory_budget=b).compute().reset_index(drop=True)
               for k in (9,) for m in ("grid", "brute", "szl") for b in (None, "90KB")]
    for r in results[1:]:
        pd.testing.assert_frame_equal(r, results[0])
    same(results[0], oracle(x, None, 9))


def test_drivers_share_one_protocol():
    assert set(registry.registered("knn")) == {("knn", m, b) for m in ("grid", "brute", "szl") for b in ("cpu", "gpu")}
    from daskjoin.kernels.knn_szl import KnnSzl

    for x in (clumps(200), clumps(200, d=6)):  # 6-d: the brute force's float32 filter runs
        want = oracle(x, None, 5)
        for cls in (KnnGrid, KnnBrute, KnnSzl):
            # two blocks searched one after the other give the one-block answer
            best = empty_lists(len(x), 5)
            for lo, hi in ((0, 120), (120, 200)):
                cls(x[lo:hi], 5, lo).search(x, np.arange(len(x)), *best, True)
            i, j, value = finish(*best, np.arange(len(x)))
            same(pd.DataFrame({"i": i, "j": j, "dist": value["dist"], "rank": value["rank"]}), want)


def test_refusals_before_any_work():
    x = np.zeros((5, 2))
    with pytest.raises(dj.InputError, match="k=5 is larger"):
        dj.knn_join(x, k=5)
    with pytest.raises(dj.InputError, match="positive integer"):
        dj.knn_join(x, k=0)
    with pytest.raises(dj.InputError, match="output must be one of"):
        dj.knn_join(x, k=1, output="count")
    from daskjoin.kernels.gpu_common import gpu_available

    if not gpu_available():
        with pytest.raises(dj.InputError, match="no Dask worker sees a CUDA device"):
            dj.plan_knn(x, k=1, backend="gpu")


def test_cli_knn_and_plan(tmp_path, zarr_writer):
    x = clumps(300)
    path = zarr_writer(x, chunk_rows=64)
    out = tmp_path / "o.parquet"
    proc = run_cli(["knn", path, "--k", "3", "--out", out, "--quiet"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "900 pairs" in proc.stdout
    same(pd.read_parquet(out), oracle(x, None, 3))
    proc = run_cli(["plan", path, "--knn", "3"], tmp_path)
    assert proc.returncode == 0 and "kNN-self-join, k=3" in proc.stdout, proc.stderr
    for bad, words in ((["--k", "0"], "positive integer"), (["--k", "300"], "larger than"),
                       (["--k", "2.5"], "invalid int")):
        proc = run_cli(["knn", path, *bad, "--out", tmp_path / "bad"], tmp_path)
        assert proc.returncode == 2 and words in proc.stderr, proc.stderr
        assert not (tmp_path / "bad").exists()
    proc = run_cli(["plan", path, "--knn", "3", "--eps", "0.1"], tmp_path)
    assert proc.returncode == 2 and "not both" in proc.stderr


def test_cli_knn_szl_and_a_bad_method(tmp_path, zarr_writer):
    x = clumps(300, d=8)
    path = zarr_writer(x, chunk_rows=64)
    out = tmp_path / "o.parquet"
    proc = run_cli(["knn", path, "--k", "4", "--method", "szl", "--out", out, "--quiet"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    same(pd.read_parquet(out), oracle(x, None, 4))
    proc = run_cli(["plan", path, "--knn", "4", "--backend", "cpu"], tmp_path)
    assert proc.returncode == 0 and "szl" in proc.stdout, proc.stderr  # auto's choice at 8-d on CPUs
    proc = run_cli(["knn", path, "--k", "4", "--method", "lss", "--out", tmp_path / "bad"], tmp_path)
    assert proc.returncode == 2 and "szl" in proc.stderr and not (tmp_path / "bad").exists(), proc.stderr


@pytest.mark.parametrize("d", [2, 5])
def test_large_k_starts_from_an_upper_bound(d):
    """k >= SEED_MIN_K: lists start from an upper bound of the k-th distance (kernels/knn._seed); a lattice
    puts many rows exactly at it, and d = 5 leaves two dimensions the grid does not index."""
    from daskjoin.kernels.knn import SEED_MIN_K

    x = np.random.default_rng(4).integers(0, 7, (700, d)).astype(np.float32)
    k = SEED_MIN_K + 50
    same(dj.knn_join(x, k=k, method="grid").compute(), oracle(x, None, k))
    same(dj.knn_join(x, x[:50] + 0.5, k=40, method="grid").compute(), oracle(x, x[:50] + 0.5, 40))


def test_auto_method_follows_the_measured_crossovers():
    from daskjoin.planning.knn import CPU_GRID_MAX_D, choose_knn_method

    assert choose_knn_method("auto", 3)[0] == choose_knn_method("auto", 6, True)[0] == "grid"
    assert choose_knn_method("auto", 7)[0] == choose_knn_method("auto", CPU_GRID_MAX_D)[0] == "grid"  # range pass
    assert choose_knn_method("auto", 7, True)[0] == choose_knn_method("auto", 8, True)[0] == "brute"  # on GPUs
    assert choose_knn_method("auto", CPU_GRID_MAX_D + 1)[0] == "brute"
    assert "szl" not in {choose_knn_method("auto", d, gpus)[0] for d in range(1, 70) for gpus in (False, True)}
    assert choose_knn_method("szl", 2) == ("szl", "chosen by the caller")


def test_auto_method_on_cpus_follows_the_grids_sampled_share():
    """From 7-d on CPUs the planner weighs the ε-grid's sampled share at the kNN radius (the model of
    planning/knn.CPU_SHARE_FROM_D): the grid where few pairs of rows are its candidates, brute force where many."""
    from daskjoin.io.synth import generate
    from daskjoin.planning.estimate import KnnShare
    from daskjoin.planning.knn import CPU_SHARE_FROM_D, choose_knn_method, cpu_knn_grid_ratio

    def sampled(share):
        return KnnShare(share, 0.1)

    assert cpu_knn_grid_ratio(9, 0.01) < 1.0 <= cpu_knn_grid_ratio(9, 0.5)
    assert choose_knn_method("auto", 9, sampled=sampled(0.01))[0] == "grid"
    assert choose_knn_method("auto", 9, sampled=sampled(0.5))[0] == "brute"
    assert choose_knn_method("auto", 8, sampled=sampled(1.0))[0] == "brute"  # the share decides from 7-d
    assert choose_knn_method("auto", CPU_SHARE_FROM_D - 1, sampled=sampled(1.0))[0] == "grid"  # below: the grid
    assert choose_knn_method("auto", 9, True, sampled=sampled(0.01))[0] == "brute"  # on GPUs: no share
    assert choose_knn_method("auto", 33, sampled=sampled(0.0))[0] == "brute"  # beyond KNN_SHARE_MAX_D: brute force
    assert choose_knn_method("auto", 9, sampled=sampled(math.nan))[0] == "brute"  # unknown: the old rule
    assert choose_knn_method("auto", 8, sampled=sampled(math.nan))[0] == "grid"
    clustered = dj.plan_knn(generate("clusters", 30_000, 9, seed=1), k=16, backend="cpu")
    assert clustered.method == "grid" and "sampled k-th distance" in clustered.explain()
    uniform = dj.plan_knn(generate("uniform", 30_000, 10, seed=1), k=16, backend="cpu")
    assert uniform.method == "brute" and "sampled k-th distance" in uniform.explain()
    # GPU options are checked against the method the sample chose
    with_filter = dj.plan_knn(generate("uniform", 30_000, 10, seed=1), k=16, backend="cpu",
                              gpu_options={"filter": "int8"})
    assert with_filter.method == "brute" and dict(with_filter.gpu_options) == {"filter": "int8"}
    with pytest.raises(dj.InputError, match="method 'auto' chose 'grid'"):
        dj.plan_knn(generate("clusters", 30_000, 9, seed=1), k=16, backend="cpu", gpu_options={"filter": "int8"})


def test_sampled_knn_radius_is_near_the_k_th_distance():
    """The planner's k-th distance from its sample (estimate.sample_knn_radius) against cKDTree's on all rows."""
    from scipy.spatial import cKDTree

    from daskjoin.io.synth import generate
    from daskjoin.planning.estimate import KNN_SHARE_QUANTILE, sample_knn_radius

    for kind, d in (("uniform", 8), ("clusters", 10)):
        x = generate(kind, 40_000, d, seed=2).astype(np.float64)
        dist = cKDTree(x).query(x[::157], 17)[0][:, 16]
        true = float(np.quantile(dist, KNN_SHARE_QUANTILE))
        got = sample_knn_radius(x[::8], None, len(x), 16)
        assert 0.75 * true < got < 1.33 * true, (kind, got, true)
        b = x[1::2]  # A x B: B's rows are neighbours, a query's own row is not excluded
        dist = cKDTree(b).query(x[::157], 16)[0][:, 15]
        got = sample_knn_radius(x[::8], b[::4], len(b), 16)
        assert 0.75 * float(np.quantile(dist, KNN_SHARE_QUANTILE)) < got < 1.33 * float(np.quantile(dist, KNN_SHARE_QUANTILE))
    assert np.isnan(sample_knn_radius(x[:10], None, 10, 16))  # fewer rows than k: the sample cannot say


def test_planner_counts_each_methods_index():
    """The block a task holds is sized with the method's index (planning mirrors the kernels' constants)."""
    from daskjoin.kernels import knn_gemm, knn_range, knn_szl, knn_tc
    from daskjoin.planning import knn as planning

    assert planning.SZL_LISTS_MAX == knn_szl.MAX_LISTS and planning.GEMM_FROM_D == knn_gemm.GEMM_MIN_D
    assert planning.TC_FROM_D == knn_tc.TC_FROM_D and planning.RANGE_FROM_D == knn_range.MIN_D
    assert planning.RANGE_BATCH_PAIRS == knn_range.BATCH_PAIRS
    assert planning.RANGE_PAIRS_PER_K == knn_range.ROOM * knn_range.MAX_PER_QUERY
    assert planning.index_row_bytes("grid", 3) == 0 and planning.index_row_bytes("brute", 3) == 0
    assert planning.index_row_bytes("grid", 4) == 8 * 4 + 16 and planning.query_row_bytes("grid", 4, 9) == 16 * 4 + 32
    assert planning.index_row_bytes("szl", 8) == 4 * 8 + 16 * 8
    x = np.random.default_rng(0).random((4000, 8))
    blocks = {m: len(dj.plan_knn(x, k=4, method=m, backend="cpu", memory_budget="400KB").blocks)
              for m in ("grid", "brute", "szl")}
    assert blocks["szl"] > blocks["grid"] > blocks["brute"], blocks  # 8-d: the range pass's index (80 bytes a row)
    # the GPU szl kernel's per-query scratch (2 x k and 2 x d words of 8 bytes) sizes the query side too
    assert planning.query_row_bytes("szl", 8, 100) == 16 * 108 and planning.query_row_bytes("grid", 3, 100) == 0
    tasks = {m: dj.plan_knn(x, k=100, method=m, backend="cpu", memory_budget="2MB").ntasks for m in ("brute", "szl")}
    assert tasks["szl"] > tasks["brute"], tasks


def test_more_dimensions_than_the_margins_cover_refused_before_any_pass(monkeypatch):
    from daskjoin.planning import knn as planning
    from daskjoin.validation import InputError

    calls = []
    monkeypatch.setattr(planning, "_statistics", lambda *a, **k: calls.append(a))
    x = np.zeros((3, planning.MAX_D + 1), np.float32)
    with pytest.raises(InputError, match="dimensions"):
        dj.plan_knn(x, k=1, backend="cpu")
    assert not calls


def test_gpu_options_choose_the_brute_filter_and_are_checked(tmp_path, zarr_writer):
    """``gpu_options={"filter": ...}`` reaches the brute driver on GPUs (shown by ``explain()``); on the CPU it
    is not taken and the rows are the oracle's either way; an option of another method, or of the method
    ``auto`` did not choose, is refused before any data pass; the CLI spells it ``--option filter=...``."""
    x = clumps(300, d=24)
    plan = dj.plan_knn(x, k=4, method="brute", backend="cpu", gpu_options={"filter": "int8"})
    assert plan.gpu_options == (("filter", "int8"),) and "gpu options:   filter='int8'" in plan.explain()
    for options in ({"filter": "fp16"}, {"filter": "fp32"}):
        got = dj.knn_join(x, k=4, method="brute", backend="cpu", gpu_options=options).compute()
        same(got, oracle(x, None, 4))
    with pytest.raises(dj.InputError, match="filter must be one of"):
        dj.plan_knn(x, k=4, method="brute", gpu_options={"filter": "bf16"})
    with pytest.raises(dj.InputError, match="not options of method 'grid'"):
        dj.plan_knn(x, k=4, method="grid", gpu_options={"filter": "int8"})
    with pytest.raises(dj.InputError, match="method 'auto' chose 'grid'"):
        dj.plan_knn(x[:, :2], k=4, backend="cpu", gpu_options={"filter": "int8"})
    path = zarr_writer(x, chunk_rows=64)
    out = tmp_path / "o.parquet"
    proc = run_cli(["knn", path, "--k", "4", "--method", "brute", "--option", "filter=fp16", "--backend", "cpu",
                    "--out", out, "--quiet"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    same(pd.read_parquet(out), oracle(x, None, 4))
    proc = run_cli(["plan", path, "--knn", "4", "--method", "brute", "--option", "filter=int8"], tmp_path)
    assert proc.returncode == 0 and "filter='int8'" in proc.stdout, proc.stderr
    proc = run_cli(["knn", path, "--k", "4", "--method", "brute", "--option", "filter=tf32", "--out", tmp_path / "bad"],
                   tmp_path)
    assert proc.returncode == 2 and "filter" in proc.stderr and not (tmp_path / "bad").exists(), proc.stderr
