"""A large join is cut for the workers that run it at once (GPU workers, CPU worker processes), whatever its
budget allows; small joins and one-worker clusters keep their plans; a resumed run keeps the cut it recorded."""
from __future__ import annotations

import os

import dask
import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial import cKDTree

import daskjoin as dj
from daskjoin.execution.inprocess import in_process
from daskjoin.execution.resources import task_slots
from daskjoin.planning import cost
from daskjoin.planning.planner import _split_rows
from daskjoin.validation import InputError
from joinhelpers import write_zarr

N_BIG = cost.SPLIT_MIN_ROWS + 50_000


def test_parallel_split_only_for_several_workers_and_large_joins():
    big = dict(rows=cost.SPLIT_MIN_ROWS, pairs=0.0, products=0.0)
    assert cost.parallel_split(1, **big) == 1
    assert cost.parallel_split(2, **big) == 2
    assert cost.parallel_split(4, **big) == 4
    assert cost.parallel_split(4, rows=1000, pairs=0.0, products=0.0) == 1
    assert cost.parallel_split(3, rows=1000, pairs=cost.SPLIT_MIN_PAIRS, products=0.0) == 3
    assert cost.parallel_split(2, rows=1000, pairs=0.0, products=cost.SPLIT_MIN_PRODUCTS) == 2
    assert cost.parallel_split(2, rows=cost.SPLIT_MIN_ROWS - 1, pairs=cost.SPLIT_MIN_PAIRS - 1,
                               products=cost.SPLIT_MIN_PRODUCTS / 2) == 1


@pytest.mark.parametrize("n,blocks,chunk,expected", [
    (20_000_000, 2, 1_000_000, 10_000_000),  # whole chunks
    (20_000_000, 3, 1_000_000, 7_000_000),  # 6,666,667 -> 7M: within an eighth
    (2_500_000, 2, 1_000_000, 1_250_000),  # 2M would leave blocks of 2M and 0.5M: not aligned
    (10, 3, 100, 4),
    (1_000_001, 2, 64, 500_032),
])
def test_split_rows_equal_blocks_of_whole_chunks_where_close(n, blocks, chunk, expected):
    rows = _split_rows(n, blocks, chunk)
    assert rows == expected
    assert -(-n // rows) == blocks


def test_task_slots_in_process_one_cpu_tasks_per_host_or_configured(client):
    assert task_slots(in_process(), on_gpu=False) == 1
    assert len(client.scheduler_info()["workers"]) == 2
    assert task_slots(client, on_gpu=False) == 1  # two workers of one host: its cores, used by either
    with dask.config.set({"daskjoin.parallel-tasks": 3}):
        assert task_slots(client, on_gpu=False) == 3
        assert task_slots(in_process(), on_gpu=False) == 3
    for bad in (0, -1, "two", 1.5, True):
        with dask.config.set({"daskjoin.parallel-tasks": bad}), pytest.raises(InputError, match="parallel-tasks"):
            task_slots(client, on_gpu=False)


@pytest.fixture
def two_slots():
    """The session cluster's two workers (one host) counted as two task slots, as two GPU workers would be."""
    with dask.config.set({"daskjoin.parallel-tasks": 2}):
        yield


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    """Slightly over SPLIT_MIN_ROWS 2-d points with a few thousand pairs at eps (cheap to join and to check)."""
    rng = np.random.default_rng(7)
    x = rng.random((N_BIG, 2))
    path = write_zarr(str(tmp_path_factory.mktemp("split") / "x.zarr"), x, chunk_rows=1 << 16)
    eps = 4e-4
    return path, x, eps, len(cKDTree(x).query_pairs(eps, output_type="ndarray"))


def test_large_join_on_two_workers_is_cut_into_query_shares_and_exact(client, big_store, two_slots):
    """One task could hold it: two grid tasks that each index every row and search half the queries (a block
    cut would cost three block pairs); count, frame and Parquet are the oracle's."""
    path, x, eps, expected = big_store
    plan = dj.plan_join(path, eps=eps, client=client, memory_budget="8GB", output="count")
    assert plan.parallelism == 2 and plan.ntasks == 2
    assert [p.share for p in plan.partitions] == [(0, 2, "cpu"), (1, 2, "cpu")]
    assert all(p.a == (0, N_BIG) and p.b is None and p.self_part for p in plan.partitions)
    assert plan.partitioning == "chunk_pairs"
    assert "its queries cut into 2 shares so that 2 workers share it" in plan.explain()
    assert "(for 2 workers at once)" in plan.explain()
    assert dj.similarity_join(path, eps=eps, client=client, memory_budget="8GB", output="count") == expected
    frame = dj.similarity_join(path, eps=eps, client=client, memory_budget="8GB").compute()
    want = np.unique(np.sort(cKDTree(x).query_pairs(eps, output_type="ndarray"), axis=1), axis=0)
    got = np.stack([frame.i.to_numpy(), frame.j.to_numpy()], axis=1)
    assert len(got) == expected and np.array_equal(np.unique(got, axis=0), want)
    with dask.config.set({"daskjoin.parallel-tasks": "auto"}):
        one = dj.plan_join(path, eps=eps, client=client, memory_budget="8GB", output="count")
    assert one.parallelism == 1 and one.ntasks == 1 and one.partitions[0].share is None


def test_a_join_whose_tasks_backend_is_open_is_cut_into_blocks(client, big_store, two_slots, monkeypatch):
    """Where a task's worker picks the backend (a mixed cluster under 'auto'), shares (each driver's own) are
    not used: the join is cut into blocks, which every backend joins alike."""
    import daskjoin.api

    monkeypatch.setattr(daskjoin.api, "_one_backend", lambda *a: None)
    path, _, eps, expected = big_store
    plan = dj.plan_join(path, eps=eps, client=client, memory_budget="8GB", output="count")
    assert plan.ntasks == 3 and all(p.share is None for p in plan.partitions)  # blocks (0,0), (0,1), (1,1)
    assert "cut into 2 blocks (3 block pairs) so that 2 workers share it" in plan.explain()
    assert dj.similarity_join(path, eps=eps, client=client, memory_budget="8GB", output="count") == expected


def test_small_join_is_not_cut(client, tmp_path, two_slots):
    x = np.random.default_rng(1).random((5000, 3))
    plan = dj.plan_join(write_zarr(str(tmp_path / "s.zarr"), x), eps=0.05, client=client, memory_budget="1GB")
    assert plan.ntasks == 1 and plan.parallelism == 2


def test_slabs_are_at_least_twice_the_workers(client, big_store, two_slots):
    path, _, eps, expected = big_store
    plan = dj.plan_join(path, eps=eps, client=client, memory_budget="8GB", partitioning="slabs", output="count")
    assert plan.ntasks >= 4
    assert "at least 4 slabs" in plan.explain()
    assert dj.similarity_join(path, eps=eps, client=client, memory_budget="8GB", partitioning="slabs",
                              output="count") == expected


def test_finished_run_is_recognised_on_another_cluster_size(client, big_store, tmp_path):
    """The record keeps the cut: re-running a finished two-slot output in this process (one slot) is a
    no-op, not a refusal over different partitions; the pairs are the oracle's."""
    path, x, eps, expected = big_store
    out = str(tmp_path / "pairs.parquet")
    with dask.config.set({"daskjoin.parallel-tasks": 2}):
        first = dj.similarity_join(path, eps=eps, client=client, out=out, memory_budget="8GB")
    assert first.status == "new" and first.pairs == expected and first.plan.ntasks == 2
    assert first.plan.partitions[1].share == (1, 2, "cpu")
    again = dj.similarity_join(path, eps=eps, client=in_process(), out=out, memory_budget="8GB", resume=True)
    assert again.status == "finished" and again.pairs == expected
    table = pq.read_table(out, columns=["i", "j"])
    got = np.stack([table["i"].to_numpy(), table["j"].to_numpy()], axis=1)
    want = cKDTree(x).query_pairs(eps, output_type="ndarray")
    assert len(got) == len(want)
    assert np.array_equal(np.unique(got, axis=0), np.unique(np.sort(want, axis=1), axis=0))
    assert os.path.exists(os.path.join(out, "_SUCCESS"))


def test_a_share_run_resumes_into_its_shares_and_older_records_into_blocks(client, big_store, tmp_path, monkeypatch):
    """The record names the backend whose shares the run was cut into: a resume gets those shares; a record
    without the key (runs before shares existed) gets blocks again; a cluster whose tasks would run on
    another backend is refused before anything runs."""
    import daskjoin.api

    path, x, eps, expected = big_store
    out = str(tmp_path / "pairs.parquet")
    with dask.config.set({"daskjoin.parallel-tasks": 2}):
        first = dj.similarity_join(path, eps=eps, client=client, out=out, memory_budget="8GB")
    assert first.plan.ntasks == 2 and [p.share for p in first.plan.partitions] == [(0, 2, "cpu"), (1, 2, "cpu")]
    again = dj.similarity_join(path, eps=eps, client=client, out=out, memory_budget="8GB", resume=True)
    assert again.status == "finished" and again.plan.ntasks == 2 and again.pairs == expected
    monkeypatch.setattr(daskjoin.api, "_one_backend", lambda *a: "gpu")
    with pytest.raises(InputError, match="query shares of the cpu driver"):
        dj.similarity_join(path, eps=eps, client=client, out=out, memory_budget="8GB", resume=True)
    assert daskjoin.api._share_backend(None, "auto", False, client, None, 2) is None  # no key: blocks


def _slow_square(x):
    import time

    time.sleep(0.05)
    return x * x


@pytest.mark.parametrize("window", [1, 2, 3, None])
def test_wait_all_keeps_at_most_window_tasks_out(client, window):
    """With a window, a task is submitted only when fewer than ``window`` are out; results keep their order."""
    from daskjoin.execution.progress import wait_all

    futures, most = [], [0]

    def submit(items):
        out = sum(f.status == "pending" for f in futures)
        most[0] = max(most[0], out + len(items))
        new = client.map(_slow_square, items, pure=False)
        futures.extend(new)
        return new

    items = list(range(9))
    assert wait_all(client, submit, items, window=window) == [x * x for x in items]
    assert most[0] == (len(items) if window is None else window)
    assert len(futures) == len(items)


def test_a_join_the_budget_cuts_finer_is_not_cut_again(client, big_store, two_slots):
    """Where the budget already gives more blocks than workers, the plan is the one-worker plan, and
    explain() does not claim a cut for the workers."""
    path, _, eps, _ = big_store
    plan = dj.plan_join(path, eps=eps, client=client, memory_budget="24MB", partitioning="chunk_pairs")
    with dask.config.set({"daskjoin.parallel-tasks": 1}):
        one = dj.plan_join(path, eps=eps, client=client, memory_budget="24MB", partitioning="chunk_pairs")
    assert plan.ntasks == one.ntasks > 3
    assert [(p.a, p.b) for p in plan.partitions] == [(p.a, p.b) for p in one.partitions]
    assert "workers share" not in plan.explain()


@pytest.fixture
def cpu_point_shares(monkeypatch):
    """The CPU grid's shares weighed share by share against the budget, as the GPU grid's are (the CPU grid cuts
    whole cells, so by default its shares are used only where the whole join fits): the planning and the
    running of such shares, exercised on this machine.  Plans are not cached across the change."""
    from daskjoin.planning import planner

    monkeypatch.setattr(planner, "POINT_SHARES", ("gpu", "cpu"))
    dj.clear_cache()
    yield planner
    dj.clear_cache()


def test_the_cut_for_workers_keeps_the_budgets_partitioning(client, big_store):
    """Two blocks by the budget keep chunk pairs (every block pair kept: 1.0 <= 2/2); the cut into four for
    four workers must not turn that into slabs (1.0 > 2/4) and a sorted copy.  (The CPU grid's shares are
    not weighed against the budget share by share: the cut is into blocks.)"""
    dj.clear_cache()
    path, _, eps, _ = big_store
    with dask.config.set({"daskjoin.parallel-tasks": 1}):
        one = dj.plan_join(path, eps=eps, client=client, memory_budget="112MB")
    with dask.config.set({"daskjoin.parallel-tasks": 4}):
        four = dj.plan_join(path, eps=eps, client=client, memory_budget="112MB")
    assert one.partitioning == four.partitioning == "chunk_pairs", (one.explain(), four.explain())
    assert one.ntasks == 3 and four.ntasks == 10 and "so that 4 workers share it" in four.explain()
    assert all(p.share is None for p in four.partitions)


def test_shares_that_fit_the_budget_where_the_whole_join_does_not(client, big_store, tmp_path, cpu_point_shares,
                                                                   monkeypatch):
    """The budget cuts the join into two blocks for one worker, but a query share holds only its part of the
    pairs: four workers get four shares (not ten block pairs, of which each worker would run two or three),
    and the pairs are the oracle's.  Priced far above their part, the shares do not fit: blocks again."""
    path, x, eps, expected = big_store
    with dask.config.set({"daskjoin.parallel-tasks": 1}):
        one = dj.plan_join(path, eps=eps, client=client, memory_budget="112MB")
    assert one.ntasks == 3 and all(p.share is None for p in one.partitions)  # the whole does not fit one task
    with dask.config.set({"daskjoin.parallel-tasks": 4}):
        four = dj.plan_join(path, eps=eps, client=client, memory_budget="112MB")
        assert [p.share for p in four.partitions] == [(k, 4, "cpu") for k in range(4)]
        assert four.partitioning == "chunk_pairs"
        text = four.explain()
        assert "a query share of the join fits one task's memory budget (the whole join does not)" in text
        assert "holds the pairs of its share only" in text and "the whole join fits" not in text
        result = dj.similarity_join(path, eps=eps, client=client, memory_budget="112MB",
                                    out=str(tmp_path / "pairs.parquet"))
    got = pq.read_table(str(tmp_path / "pairs.parquet")).to_pandas()
    want = np.unique(np.sort(cKDTree(x).query_pairs(eps, output_type="ndarray"), axis=1), axis=0)
    assert result.pairs == expected == len(got)
    pairs = got[["i", "j"]].to_numpy()
    assert np.array_equal(np.unique(pairs, axis=0), want)  # each part sorted; the shares' rows interleave
    monkeypatch.setattr(cpu_point_shares, "SHARE_SLACK", 1000.0)
    dj.clear_cache()
    with dask.config.set({"daskjoin.parallel-tasks": 4}):
        priced_out = dj.plan_join(path, eps=eps, client=client, memory_budget="112MB")
    assert priced_out.ntasks == 10 and all(p.share is None for p in priced_out.partitions)


def test_a_lazy_frame_of_gpu_tasks_on_a_mixed_cluster_warns(client, monkeypatch):
    """Where GPU tasks are placed by the GPU resource (a cluster mixing GPU and CPU workers), a lazy frame
    cannot carry it: the user is told how to submit it.  (The placement itself is covered on the GPU machine.)"""
    from daskjoin.execution import graph
    from daskjoin.kinds.epsilon import JoinJob

    x = np.random.default_rng(2).random((300, 2))
    plan = dj.plan_join(x, eps=0.1, client=in_process())
    job = JoinJob.from_plan(plan)
    monkeypatch.setattr(graph, "gpu_placement", lambda client, job: {"resources": {"GPU": 1}})
    with pytest.warns(graph.FramePlacementWarning, match="dask.annotate"):
        graph.to_dataframe(job, plan.partitions, client=client)
    monkeypatch.setattr(graph, "gpu_placement", lambda client, job: {})
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", graph.FramePlacementWarning)
        graph.to_dataframe(job, plan.partitions, client=client)


@settings(max_examples=300, deadline=None)
@given(n=st.integers(2, 5_000_000), blocks=st.integers(2, 16), chunk=st.sampled_from([1, 7, 4096, 65536, 1 << 20]))
def test_split_rows_gives_exactly_the_blocks_asked(n, blocks, chunk):
    """Aligning blocks to whole chunks never changes how many there are; from blocks^2 rows (far below the
    million rows from which a join is cut) that is the number asked for."""
    rows = _split_rows(n, blocks, chunk)
    equal = -(-n // blocks)
    assert -(-n // rows) == -(-n // equal)
    if n >= blocks * blocks:
        assert -(-n // rows) == blocks
    assert rows % chunk == 0 or rows == equal


def test_pool_size_refuses_nothing_and_less():
    from daskjoin.execution.cluster import _pool_size

    assert _pool_size(0.8) == 0.8 and _pool_size("40GB") == "40GB" and _pool_size(2 ** 30) == 2 ** 30
    for bad in (0, -1, "0", "-0.5"):
        with pytest.raises(InputError, match="must be positive"):
            _pool_size(bad)


def _slow_cube(x):
    import time

    time.sleep(0.2)
    return x ** 3


def test_a_lost_task_is_sent_again_inside_the_window(client):
    """A task cancelled under it (its worker's input lost) is submitted again without moving the window:
    every result comes back once, in order, and no more than the window is ever out."""
    from daskjoin.execution.progress import wait_all

    futures, most, cancelled = [], [0], []

    def submit(items):
        out = sum(f.status == "pending" for f in futures)
        most[0] = max(most[0], out + len(items))
        new = client.map(_slow_cube, items, pure=False)
        futures.extend(new)
        if 4 in items and not cancelled:  # the first time item 4 goes out, it is lost
            cancelled.append(new[items.index(4)])
            client.cancel([cancelled[0]])
        return new

    items = list(range(8))
    assert wait_all(client, submit, items, window=2) == [x ** 3 for x in items]
    assert cancelled and cancelled[0].status == "cancelled"
    assert len(futures) == len(items) + 1 and most[0] <= 2


def test_only_point_cut_shares_are_weighed_against_the_budget(tmp_path, monkeypatch):
    """Planning alone (no GPU needed): where the whole join does not fit one task, four workers get four query
    shares of the GPU grid (cut by query point), but blocks where the shares would be the CPU grid's (cut by
    whole cells) or the shares themselves would not fit."""
    import types

    from daskjoin.io.zarr_in import open_points
    from daskjoin.planning import planner

    monkeypatch.setattr(cost, "SPLIT_MIN_ROWS", 1)
    x = np.random.default_rng(3).random((200_000, 2))
    src = open_points(write_zarr(str(tmp_path / "x.zarr"), x, chunk_rows=1 << 15), "A")
    runner = types.SimpleNamespace(map=lambda f, items: [f(i) for i in items])

    def plan(tag, parallelism=4, budget=48 << 20):
        return planner.make_plan(src, None, 0.004, method="grid", partitioning="chunk_pairs",
                                 backend="cpu" if tag == "cpu" else "gpu", memory_budget=budget, runner=runner,
                                 gpu=tag != "cpu", parallelism=parallelism, share_backend=tag, device_memory=80 << 30)

    assert plan(None, parallelism=1).ntasks > 1  # the whole join does not fit one task
    gpu = plan("gpu")
    assert [p.share for p in gpu.partitions] == [(k, 4, "gpu") for k in range(4)]
    assert "holds the pairs of its share only" in gpu.explain()
    assert all(p.share is None for p in plan("cpu").partitions)
    assert all(p.share is None for p in plan("gpu", budget=24 << 20).partitions)  # a share would not fit either
