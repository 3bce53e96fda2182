"""The shape of the tree: one execution layer for every join kind (docs/architecture.md)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from daskjoin.kinds.epsilon import JoinJob
from daskjoin.kinds.sets import SetJob

PACKAGE = Path(__file__).resolve().parent.parent / "daskjoin"


def _sources(under: str = ""):
    return sorted((PACKAGE / under).rglob("*.py"))


def test_only_execution_builds_dask_graphs():
    pattern = re.compile(r"from_map|client\.map|client\.submit|client\.scatter")
    offenders = [str(p.relative_to(PACKAGE)) for p in _sources() if pattern.search(p.read_text())
                 and p.parent.name != "execution"]
    assert offenders == []


@pytest.mark.parametrize("folder", ["execution", "io", "planning", "kinds"])
def test_numba_and_cupy_stay_in_kernels(folder):
    """Only kernels/ imports Numba or CuPy (the set kernels still under sets/ move there with [pipeline])."""
    pattern = re.compile(r"^\s*(import (numba|cupy)|from (numba|cupy)[ .])", re.M)
    offenders = [str(p.relative_to(PACKAGE)) for p in _sources(folder) if pattern.search(p.read_text())]
    assert offenders == []


@pytest.mark.parametrize("job", [JoinJob, SetJob])
def test_every_kind_supplies_the_job_protocol(job):
    for name in ("batches", "count", "in_memory_bytes"):
        assert callable(getattr(job, name)), name
    for name in ("label", "sorts_rows"):
        assert hasattr(job, name), name
    assert "value" in dir(job)
