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
