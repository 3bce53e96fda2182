"""The shape of the tree: one execution layer for every join kind (docs/architecture.md)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from daskjoin.kinds.epsilon import JoinJob
from daskjoin.kinds.knn import KnnJob
from daskjoin.kinds.sets import SetJob

PACKAGE = Path(__file__).resolve().parent.parent / "daskjoin"


def _sources(under: str = ""):
    return sorted((PACKAGE / under).rglob("*.py"))


def test_only_execution_builds_dask_graphs():
    pattern = re.compile(r"from_map|client\.map|client\.submit|client\.scatter")
    offenders = [str(p.relative_to(PACKAGE)) for p in _sources() if pattern.search(p.read_text())
                 and p.parent.name != "execution"]
    assert offenders == []


def test_numba_and_cupy_stay_in_kernels():
    """Only kernels/ imports Numba or CuPy (info.py, the diagnostics, excepted)."""
    pattern = re.compile(r"^\s*(import (numba|cupy)|from (numba|cupy)[ .])", re.M)
    offenders = [str(p.relative_to(PACKAGE)) for p in _sources() if pattern.search(p.read_text())
                 and "kernels" not in p.relative_to(PACKAGE).parts and p.name != "info.py"]
    assert offenders == []


def test_import_and_the_statistics_pass_load_no_numba(tmp_path):
    """``import daskjoin`` (and so ``daskjoin --help`` and the CLI's fast failures), the modules a GPU grid
    task runs (its driver, the task body, the ordered pieces of sorted runs, Parquet) and the statistics
    pass over finite rows load no Numba: a GPU join calls no other Numba function, and Numba's import
    and first call cost ~1 s in a new process.  A block holding NaN still takes the compiled loop."""
    import subprocess
    import sys

    script = (
        "import sys, numpy as np, daskjoin, daskjoin.cli\n"
        "from daskjoin.kernels.summary import block_summary\n"
        "x = np.random.default_rng(0).random((100000, 3)).astype(np.float32)\n"
        "lo, hi, bad = block_summary(x)\n"
        "assert bad == -1 and (lo == x.min(0)).all() and (hi == x.max(0)).all()\n"
        "import daskjoin.kernels.grid_gpu, daskjoin.execution.task\n"
        "import daskjoin.kinds.epsilon, daskjoin.io.parquet_out, daskjoin.planning.planner\n"
        "from daskjoin.execution.pair_order import sorted_pieces, sorted_whole\n"
        "from daskjoin.kernels.registry import SortedRun\n"
        "runs = [SortedRun((np.arange(5), np.arange(5) + 9, None)), SortedRun((np.arange(5, 9), np.arange(4), None))]\n"
        "assert len(sorted_whole(runs)[0]) == 9 and sum(len(p[0]) for p in sorted_pieces(iter(runs), 4, 100)) == 9\n"
        "print('numba' in sys.modules)\n"
        "x[70000, 1] = np.nan\n"
        "print(block_summary(x)[2], 'numba' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "70000", "True"]


def test_no_second_stack_for_sets():
    """The set join runs through the shared layers: no ``daskjoin/sets/`` package of its own."""
    assert not (PACKAGE / "sets").exists()


@pytest.mark.parametrize("job", [JoinJob, SetJob, KnnJob])
def test_every_kind_supplies_the_job_protocol(job):
    for name in ("batches", "count", "in_memory_bytes"):
        assert callable(getattr(job, name)), name
    for name in ("label",):
        assert hasattr(job, name), name
    assert "value" in dir(job)
