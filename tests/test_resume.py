"""Resume: an interrupted join to Parquet continues where it stopped, only when it is the same join.

Real Zarr stores, the in-process runner and the session's multi-process cluster, Parquet read back
and checked against the float64 rule; the CLI as a subprocess, interrupted by SIGINT and SIGKILL.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import daskjoin as dj
from daskjoin.execution.inprocess import in_process
from clihelpers import _env, _explain, run_cli
from daskjoin.execution import task as task_module
from daskjoin.io import commit, parquet_out
from daskjoin.validation import InputError
from joinhelpers import exact_pairs, unique_sorted_pairs, write_zarr

#: tests that count or hook this process's tasks run them here, whatever client is current
HERE = in_process()

pytestmark = pytest.mark.integration

EPS = 0.01
BUDGET = "256KiB"


def _read_pairs(path) -> np.ndarray:
    names = sorted(n for n in os.listdir(path) if n.startswith("part-"))
    return unique_sorted_pairs(pd.concat([pq.read_table(os.path.join(path, n)).to_pandas() for n in names],
                                         ignore_index=True))


def _check(path, x, eps=EPS) -> dict:
    manifest = json.loads(open(os.path.join(path, "_SUCCESS")).read())
    parts = sorted(n for n in os.listdir(path) if n != "_SUCCESS")
    assert parts == [e["file"] for e in manifest["files"]]
    got, expected = _read_pairs(path), exact_pairs(x, eps)
    assert got.shape == expected.shape and (got == expected).all()
    assert manifest["rows"] == len(expected)
    return manifest


def _leftovers(folder) -> list[str]:
    return sorted(n for n in os.listdir(folder) if commit.TEMP_MARK in n or n.endswith(".lock"))


@pytest.fixture
def points(tmp_path):
    x = np.random.default_rng(11).random((20_000, 2))
    return x, write_zarr(tmp_path / "x.zarr", x, 2000)


def _interrupt_after(monkeypatch, n: int):
    """Ctrl-C once ``n`` partitions are recorded as finished (as the user's key would land, between tasks)."""
    record_done = parquet_out.OutputRun.record_done

    def interrupting(self, index, entries):
        record_done(self, index, entries)
        if len(self.done) >= n:
            raise KeyboardInterrupt

    monkeypatch.setattr(parquet_out.OutputRun, "record_done", interrupting)


def _interrupt_eps_join(monkeypatch, path, out, n: int, **kwargs) -> str:
    """An ε-join to ``out`` interrupted once ``n`` partitions are finished; returns its kept staging directory."""
    with monkeypatch.context() as m:
        _interrupt_after(m, n)
        with pytest.raises(KeyboardInterrupt):
            dj.similarity_join(path, eps=EPS, out=out, memory_budget=BUDGET, client=HERE, **kwargs)
    [staging] = [n for n in _leftovers(os.path.dirname(out)) if ".tmp-run-" in n]
    return staging


def _count_tasks(monkeypatch) -> list:
    """Partition indices the tasks of this process compute from now on (the in-process runner)."""
    seen = []
    original = task_module.partition_to_parquet

    def counting(part, job, **kwargs):
        seen.append(part.index)
        return original(part, job, **kwargs)

    from daskjoin.execution import graph
    monkeypatch.setattr(graph, "partition_to_parquet", counting)
    return seen


def test_resume_computes_only_the_unfinished_partitions(points, tmp_path, monkeypatch):
    x, path = points
    out = tmp_path / "pairs.parquet"
    plan = dj.plan_join(path, eps=EPS, memory_budget=BUDGET, client=HERE)
    assert plan.ntasks >= 8
    with monkeypatch.context() as m:
        _interrupt_after(m, 3)
        with pytest.raises(KeyboardInterrupt) as info:
            dj.similarity_join(path, eps=EPS, out=out, memory_budget=BUDGET, client=HERE)
    finished, total = info.value.resumable
    assert finished >= 3 and total == plan.ntasks
    assert not out.exists()
    [staging] = _leftovers(tmp_path)  # kept for the resumed run; no lock left behind
    recorded = {json.loads(line)["partition"] for line in open(tmp_path / staging / parquet_out.DONE_LOG)}
    assert len(recorded) == finished
    with monkeypatch.context() as m:
        seen = _count_tasks(m)
        result = dj.similarity_join(path, eps=EPS, out=out, resume=True, client=HERE)  # the recorded budget
    assert result.status == "resumed" and result.tasks["resumed_partitions"] == finished
    assert sorted(seen) == sorted(set(range(plan.ntasks)) - recorded), "a finished partition was computed again"
    _check(out, x)
    assert _leftovers(tmp_path) == []
    names = set(os.listdir(out))
    assert parquet_out.RUN_RECORD not in names and parquet_out.DONE_LOG not in names

    mtimes = {n: os.stat(out / n).st_mtime_ns for n in os.listdir(out)}
    with monkeypatch.context() as m:
        seen = _count_tasks(m)
        again = dj.similarity_join(path, eps=EPS, out=out, memory_budget=BUDGET, resume=True, client=HERE)
    assert again.status == "finished" and seen == [] and again.pairs == result.pairs
    assert "nothing to do" in str(again)
    assert {n: os.stat(out / n).st_mtime_ns for n in os.listdir(out)} == mtimes


def test_a_damaged_finished_partition_is_computed_again(points, tmp_path, monkeypatch):
    x, path = points
    out = tmp_path / "pairs.parquet"
    staging = _interrupt_eps_join(monkeypatch, path, out, 4)
    lines = [json.loads(line) for line in open(tmp_path / staging / parquet_out.DONE_LOG)]
    damaged = lines[0]["files"][0]["file"]
    with open(tmp_path / staging / damaged, "r+b") as f:
        f.truncate(10)  # a file cut short (a disk that lost its tail)
    os.remove(tmp_path / staging / lines[1]["files"][0]["file"])  # and one gone
    with open(tmp_path / staging / parquet_out.DONE_LOG, "a") as f:
        f.write('{"partition": 7, "fil')  # a line cut short by a kill
    with monkeypatch.context() as m:
        seen = _count_tasks(m)
        result = dj.similarity_join(path, eps=EPS, out=out, memory_budget=BUDGET, resume=True, client=HERE)
    assert lines[0]["partition"] in seen and lines[1]["partition"] in seen
    assert result.tasks["resumed_partitions"] == len(lines) - 2
    _check(out, x)
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("change", ["eps", "input", "with_distance", "budget"])
def test_resume_refuses_a_different_join(points, tmp_path, monkeypatch, change):
    x, path = points
    out = tmp_path / "pairs.parquet"
    staging = _interrupt_eps_join(monkeypatch, path, out, 2)
    kwargs = dict(eps=EPS, out=out, memory_budget=BUDGET, resume=True)
    source = path
    if change == "eps":
        kwargs["eps"] = EPS * 1.5
    elif change == "with_distance":
        kwargs["with_distance"] = False
    elif change == "budget":
        kwargs["memory_budget"] = "128KiB"
    else:
        y = x.copy()
        y[5] += 0.25
        import zarr

        zarr.open_array(path, mode="r+")[5] = y[5]  # one chunk of the input rewritten in place
    with pytest.raises(InputError, match="cannot resume") as info:
        dj.similarity_join(source, **kwargs, client=HERE)
    expected = {"eps": "eps:", "input": "inputs:", "with_distance": "with_distance:", "budget": "memory_budget:"}
    assert expected[change] in str(info.value)
    assert _leftovers(tmp_path) == [staging]  # the interrupted run is kept, untouched
    # overwrite: the other join starts afresh and replaces the interrupted run
    result = dj.similarity_join(source, **{**kwargs, "overwrite": True}, client=HERE)
    assert result.status == "new"
    if change in ("budget", "with_distance"):
        _check(out, x)
    assert _leftovers(tmp_path) == []


def test_resume_of_a_committed_different_join_is_refused(points, tmp_path):
    x, path = points
    out = tmp_path / "pairs.parquet"
    dj.similarity_join(path, eps=EPS, out=out, memory_budget=BUDGET, client=HERE)
    with pytest.raises(InputError, match="differs from the committed output.*eps: 0.01 there, 0.02 now"):
        dj.similarity_join(path, eps=0.02, out=out, resume=True, client=HERE)
    _check(out, x)  # untouched


def test_resume_without_an_interrupted_run_starts_afresh_and_needs_out(points, tmp_path):
    x, path = points
    out = tmp_path / "pairs.parquet"
    assert dj.similarity_join(path, eps=EPS, out=out, resume=True, client=HERE).status == "new"
    _check(out, x)
    with pytest.raises(InputError, match="resume=True continues an interrupted run"):
        dj.similarity_join(path, eps=EPS, resume=True, client=HERE)


def test_resume_on_a_dask_cluster_with_an_in_memory_input(client, tmp_path, monkeypatch):
    """Workers of the session's cluster write the remaining partitions; the array is recognised by content."""
    x = np.random.default_rng(12).random((20_000, 2))
    out = tmp_path / "pairs.parquet"
    with monkeypatch.context() as m:
        _interrupt_after(m, 3)
        with pytest.raises(KeyboardInterrupt):
            dj.similarity_join(x, eps=EPS, out=out, memory_budget=BUDGET, client=client)
    with pytest.raises(InputError, match="inputs:"):
        dj.similarity_join(x + 1e-9, eps=EPS, out=out, client=client, resume=True)
    result = dj.similarity_join(x.copy(), eps=EPS, out=out, client=client, resume=True)
    assert result.status == "resumed" and result.tasks["resumed_partitions"] >= 3
    _check(out, x)
    assert _leftovers(tmp_path) == []


# --------------------------------------------------------------------------- the CLI, interrupted for real

@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A store whose join takes some seconds on this machine, in many partitions."""
    folder = tmp_path_factory.mktemp("big")
    x = np.random.default_rng(5).random((600_000, 3), dtype=np.float32)
    return x, write_zarr(folder / "p.zarr", x, 50_000)


def _wait_for_finished_partitions(folder, proc, n: int, timeout=180) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        for name in os.listdir(folder):
            log = os.path.join(folder, name, parquet_out.DONE_LOG)
            if ".tmp-run-" in name and os.path.exists(log):
                with open(log) as f:
                    if sum(1 for _ in f) >= n:
                        return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    raise AssertionError(f"the run never finished {n} partitions")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_cli_resume_after_sigint_or_sigkill(big, tmp_path, sig):
    x, path = big
    out = tmp_path / "pairs.parquet"
    args = ["join", path, "--eps", "0.012", "--out", out, "--memory-budget", "4MiB"]
    proc = subprocess.Popen([sys.executable, "-m", "daskjoin", *map(str, args)], cwd=str(tmp_path), env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    _wait_for_finished_partitions(tmp_path, proc, 2)
    os.killpg(proc.pid, sig)
    _, stderr = proc.communicate(timeout=120)
    assert not out.exists()
    if sig == signal.SIGINT:
        assert proc.returncode == 130
        assert "partitions finished: the same command with --resume continues it" in stderr.splitlines()[-1]
    # the staging directory kept (and, after SIGKILL, the lock file, whose flock died with the process)
    assert len([n for n in _leftovers(tmp_path) if ".tmp-run-" in n]) == 1
    done = run_cli([*args, "--resume", "--quiet"], tmp_path)
    assert done.returncode == 0, _explain(done)
    assert "resumed:" in done.stdout and "partitions of the interrupted run reused" in done.stdout
    manifest = json.loads((out / "_SUCCESS").read_text())
    assert manifest["tasks"]["resumed_partitions"] >= 2
    assert _leftovers(tmp_path) == []
    got, expected = _read_pairs(out), exact_pairs(x.astype(np.float64), 0.012)
    assert got.shape == expected.shape and (got == expected).all() and manifest["rows"] == len(expected)
    again = run_cli([*args, "--resume", "--quiet"], tmp_path)
    assert again.returncode == 0 and "nothing to do" in again.stdout, _explain(again)


def test_knn_join_resumes_too(tmp_path, monkeypatch):
    """The kNN-join writes through the same run: interrupted, resumed, equal to one uninterrupted run."""
    x = np.random.default_rng(13).random((6000, 3))
    path = write_zarr(tmp_path / "k.zarr", x, 500)
    whole = dj.knn_join(path, k=5, out=tmp_path / "whole.parquet", memory_budget="1MiB", client=HERE)
    assert whole.files >= 4
    out = tmp_path / "knn.parquet"
    with monkeypatch.context() as m:
        _interrupt_after(m, 2)
        with pytest.raises(KeyboardInterrupt):
            dj.knn_join(path, k=5, out=out, memory_budget="1MiB", client=HERE)
    with pytest.raises(InputError, match="k: 5 there, 6 now"):
        dj.knn_join(path, k=6, out=out, resume=True, client=HERE)
    result = dj.knn_join(path, k=5, out=out, resume=True, client=HERE)
    assert result.status == "resumed" and result.tasks["resumed_partitions"] >= 2
    read = lambda p: pd.concat([pq.read_table(p / n).to_pandas() for n in sorted(os.listdir(p))  # noqa: E731
                                if n.startswith("part-")], ignore_index=True)
    pd.testing.assert_frame_equal(read(out), read(tmp_path / "whole.parquet"))
    assert _leftovers(tmp_path) == []


def test_an_interrupted_overwrite_of_a_committed_output_is_resumed(points, tmp_path, monkeypatch):
    """A committed join, then an interrupted run replacing it with another eps: resume continues that run
    (the committed output is neither taken for it nor lost meanwhile) and replaces the output."""
    x, path = points
    out = tmp_path / "pairs.parquet"
    dj.similarity_join(path, eps=EPS, out=out, memory_budget=BUDGET, client=HERE)
    with monkeypatch.context() as m:
        _interrupt_after(m, 3)
        with pytest.raises(KeyboardInterrupt):
            dj.similarity_join(path, eps=0.02, out=out, memory_budget=BUDGET, overwrite=True, client=HERE)
    _check(out, x)  # the old output, untouched
    with pytest.raises(InputError, match="cannot resume"):
        dj.similarity_join(path, eps=0.015, out=out, resume=True, client=HERE)
    assert len([n for n in _leftovers(tmp_path) if ".tmp-run-" in n]) == 1  # a refusal keeps the interrupted run
    result = dj.similarity_join(path, eps=0.02, out=out, resume=True, client=HERE)
    assert result.status == "resumed" and result.tasks["resumed_partitions"] >= 3
    _check(out, x, 0.02)
    assert _leftovers(tmp_path) == []
    assert dj.similarity_join(path, eps=EPS, out=out, resume=True, client=HERE, overwrite=True).status == "new"
    _check(out, x)


def test_set_join_resumes_too(tmp_path, monkeypatch):
    """The set join writes through the same run: interrupted, resumed, byte-identical to an uninterrupted run;
    another threshold is refused."""
    rng = np.random.default_rng(14)
    records = [sorted(set(rng.integers(0, 300, rng.integers(2, 25)).tolist())) for _ in range(5000)]
    files = lambda p: {n: (p / n).read_bytes() for n in os.listdir(p) if n.startswith("part-")}  # noqa: E731
    whole = dj.set_similarity_join(records, threshold=0.5, out=tmp_path / "whole.parquet", partitions=12,
                                   client=HERE)
    assert whole.files >= 6
    out = tmp_path / "sets.parquet"
    with monkeypatch.context() as m:
        _interrupt_after(m, 3)
        with pytest.raises(KeyboardInterrupt):
            dj.set_similarity_join(records, threshold=0.5, out=out, partitions=12, client=HERE)
    with pytest.raises(InputError, match='threshold: "1/2" there, "3/5" now'):
        dj.set_similarity_join(records, threshold=0.6, out=out, partitions=12, resume=True, client=HERE)
    changed = [list(r) for r in records]
    changed[7] = changed[7] + [299] if 299 not in changed[7] else changed[7][:-1]
    with pytest.raises(InputError, match="inputs:"):
        dj.set_similarity_join(changed, threshold=0.5, out=out, partitions=12, resume=True, client=HERE)
    result = dj.set_similarity_join(records, threshold=0.5, out=out, partitions=12, resume=True, client=HERE)
    assert result.status == "resumed" and result.tasks["resumed_partitions"] >= 3
    assert files(out) == files(tmp_path / "whole.parquet")
    assert _leftovers(tmp_path) == []
    again = dj.set_similarity_join(records, threshold=0.5, out=out, partitions=12, resume=True, client=HERE)
    assert again.status == "finished"
