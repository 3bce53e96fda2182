"""``daskjoin warm``: the kernels compiled into their on-disk caches once, so that a new process's first join
compiles nothing (checked from Numba's own cache log, ``NUMBA_DEBUG_CACHE``)."""
from __future__ import annotations

import re

import pytest

from clihelpers import _env, _explain, run_cli
from daskjoin import warm as warm_module
from daskjoin.io.synth import eps_for_neighbours

ROWS = 300_000


def test_warm_runs_every_join_kind_on_the_cpu(monkeypatch):
    monkeypatch.setattr(warm_module, "LOW_ROWS", 20_000)
    monkeypatch.setattr(warm_module, "HIGH_ROWS", 5_000)
    lines = []
    done = warm_module.warm(gpu=False, log=lines.append, parallel=False)  # (the sizes patched here: this process)
    eps_joins, knn_joins, set_joins = 3 * 2 * 3, 3 * 2, 2  # (sizes x self/AxB x outputs, dims x self/AxB) a dtype
    assert set(done) == {"cpu"} and done["cpu"][0] == 2 * (eps_joins + knn_joins) + set_joins
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
    runs = {"pairs": ["join", "p.zarr", "--eps", eps, "--out", "pairs", "--quiet"],
            "count": ["join", "p.zarr", "--eps", eps, "--count"],
            "knn": ["knn", "p.zarr", "--k", 8, "--out", "knn", "--quiet"]}
    for name, args in runs.items():
        proc = run_cli(args + (["--overwrite"] if "--out" in args else []), tmp_path,
                       env=dict(warmed, NUMBA_DEBUG_CACHE="1"))
        assert proc.returncode == 0, _explain(proc)
        assert "data loaded from" in proc.stdout, f"{name}: no cache log ({_explain(proc)})"
        assert _compiled(proc) == [], f"{name} compiled after warm: {_compiled(proc)}"
    # the same join with a cache nobody warmed: it compiles (so the check above can fail)
    proc = run_cli(runs["pairs"] + ["--overwrite"], tmp_path, env=dict(cold, NUMBA_DEBUG_CACHE="1"))
    assert proc.returncode == 0 and "grid._visit_points" in _compiled(proc), _explain(proc)
