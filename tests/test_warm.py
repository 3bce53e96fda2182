"""``daskjoin warm``: the kernels compiled into their on-disk caches once, so that a new process's first join
compiles nothing (checked from Numba's own cache log, ``NUMBA_DEBUG_CACHE``)."""
from __future__ import annotations

import re

import pytest

from clihelpers import _env, _explain, run_cli
from daskjoin import warm as warm_module
from daskjoin.io.synth import eps_for_neighbours

ROWS = 300_000


def test_warm_runs_each_part_here_even_where_a_scheduler_is_configured(monkeypatch):
    # a configured scheduler (the compose notebook's DASK_SCHEDULER_ADDRESS, DASKJOIN_SCHEDULER) would take the
    # joins to its workers and fill no cache here: warm must not use it (this address has no scheduler)
    monkeypatch.setenv("DASKJOIN_SCHEDULER", "tcp://127.0.0.1:9")
    lines = []
    # (the parts' processes are spawned: they inherit the environment)
    done = warm_module.warm(gpu=False, log=lines.append, rows=(20_000, 5_000))
    assert set(done) == {"cpu"} and done["cpu"][0] > 0
    assert sorted(line.split()[3] for line in lines[:-1]) == sorted(warm_module.PARTS)
    assert lines[-1].startswith(f"daskjoin warm: cpu kernels compiled and cached: {done['cpu'][0]} joins")


def _compiled(proc) -> list[str]:
    """The functions whose compiled code a process saved to the cache (it compiled them)."""
    return sorted(set(re.findall(r"data saved to '.*?([\w.]+)-\d+\.py", proc.stdout)))


@pytest.mark.slow
def test_after_warm_the_cli_compiles_nothing(tmp_path):
    warmed, cold = _env(NUMBA_CACHE_DIR=str(tmp_path / "warmed")), _env(NUMBA_CACHE_DIR=str(tmp_path / "cold"))
    proc = run_cli(["warm", "--no-gpu"], tmp_path, env=warmed, timeout=1200)
    assert proc.returncode == 0 and "cpu kernels compiled and cached" in proc.stdout, _explain(proc)
    proc = run_cli(["synth", "uniform", "p.zarr", "--n", ROWS, "--d", 3], tmp_path)
    assert proc.returncode == 0, _explain(proc)
    eps = eps_for_neighbours(ROWS, 3, 32)
    for args in (["synth", "embeddings", "e.zarr", "--n", 20_000, "--d", 32],  # float32, brute force
                 ["synth", "uniform", "q.zarr", "--n", ROWS, "--d", 5],  # sparse: the grid indexes fewer dims
                 ["synth-sets", "kosarak", "s.zarr", "--n", 20_000]):
        proc = run_cli(args, tmp_path)
        assert proc.returncode == 0, _explain(proc)
    runs = {"pairs": ["join", "p.zarr", "--eps", eps, "--out", "pairs", "--quiet"],
            "count": ["join", "p.zarr", "--eps", eps, "--count"],
            "knn": ["knn", "p.zarr", "--k", 8, "--out", "knn", "--quiet"],
            "float32 brute": ["join", "e.zarr", "--eps", 0.5, "--out", "e-pairs", "--quiet"],
            "sparse 5-d": ["join", "q.zarr", "--eps", eps_for_neighbours(ROWS, 5, 0.1), "--count"],
            "sets": ["setjoin", "s.zarr", "--threshold", 0.5, "--out", "s-pairs", "--quiet"]}
    for name, args in runs.items():
        proc = run_cli(args + (["--overwrite"] if "--out" in args else []), tmp_path,
                       env=dict(warmed, NUMBA_DEBUG_CACHE="1"))
        assert proc.returncode == 0, _explain(proc)
        assert "data loaded from" in proc.stdout, f"{name}: no cache log ({_explain(proc)})"
        assert _compiled(proc) == [], f"{name} compiled after warm: {_compiled(proc)}"
    # the same join with a cache nobody warmed: it compiles (so the check above can fail)
    proc = run_cli(runs["pairs"] + ["--overwrite"], tmp_path, env=dict(cold, NUMBA_DEBUG_CACHE="1"))
    assert proc.returncode == 0 and "grid._visit_points" in _compiled(proc), _explain(proc)
