"""Per-block statistics of an input: bounding boxes, the first non-finite row, a spread-out sample.

Blocks are the input's row chunks.  One pass computes everything planning needs
from the data itself; for Zarr inputs the result is cached (see :mod:`.cache`),
so later joins of the same array at any eps read no data to plan.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import config
from ..caches import CACHE
from ..io import commit
from ..io.zarr_in import MemorySource, Source, ZarrSource
from . import cache

Mapper = Callable[[Callable, list], list]


@dataclass(frozen=True, eq=False)
class BlockStats:
    """Statistics of each row block ``[starts[b], starts[b + 1])``."""

    starts: np.ndarray  # int64 (nb + 1,)
    lo: np.ndarray  # float64 (nb, d); +inf rows for empty blocks
    hi: np.ndarray  # float64 (nb, d)
    first_bad: int  # first row holding NaN/inf, or -1
    sample: np.ndarray  # float64 (m, d), rows spread evenly over the whole input
    sample_rows: np.ndarray  # int64 (m,)

    @property
    def nblocks(self) -> int:
        return int(self.starts.shape[0] - 1)

    @property
    def lo_all(self) -> np.ndarray:
        return self.lo.min(axis=0) if self.nblocks else np.zeros(self.lo.shape[1])

    @property
    def hi_all(self) -> np.ndarray:
        return self.hi.max(axis=0) if self.nblocks else np.zeros(self.hi.shape[1])


@dataclass(frozen=True)
class _BlockJob:
    source: Source
    start: int
    stop: int
    sample_step: int


def _one_block(job: _BlockJob) -> dict:
    from ..kernels.summary import block_summary

    block = job.source.read(job.start, job.stop)
    lo, hi, bad = block_summary(block)  # one pass at memory speed (the GIL released: blocks run on threads)
    picks = np.arange(0, block.shape[0], job.sample_step)
    return {
        "lo": lo,
        "hi": hi,
        "bad": -1 if bad < 0 else job.start + bad,
        "sample": block[picks].astype(np.float64),
        "rows": picks.astype(np.int64) + job.start,
    }


def block_starts(n: int, block_rows: int) -> np.ndarray:
    return np.unique(np.r_[np.arange(0, n, max(1, block_rows)), n]).astype(np.int64)


def _compute(source: Source, mapper: Mapper) -> BlockStats:
    starts = block_starts(source.n, source.chunk_rows)
    wanted = max(1, int(config.get("sample-rows")))
    step = max(1, source.n // wanted)
    jobs = [_BlockJob(source, int(a), int(b), step) for a, b in zip(starts[:-1], starts[1:])]
    results = mapper(_one_block, jobs) if jobs else []
    d = source.d
    bad = [r["bad"] for r in results if r["bad"] >= 0]
    return BlockStats(
        starts=starts,
        lo=np.array([r["lo"] for r in results]).reshape(-1, d),
        hi=np.array([r["hi"] for r in results]).reshape(-1, d),
        first_bad=min(bad) if bad else -1,
        sample=np.concatenate([r["sample"] for r in results]) if results else np.zeros((0, d)),
        sample_rows=np.concatenate([r["rows"] for r in results]) if results else np.zeros(0, np.int64),
    )


def _local_mapper(func, items):
    return [func(item) for item in items]


def stats_path(source: Source, fingerprint: str | None = None) -> str:
    """Where a Zarr input's statistics are cached (the name holds the input's fingerprint)."""
    return os.path.join(cache.cache_dir(source), f"stats-{fingerprint or cache.fingerprint(source)}.npz")


def stats_cached(source: Source, fingerprint: str | None = None) -> bool:
    """Whether :func:`block_stats` of a Zarr input will read nothing of its data (cached on disk)."""
    return isinstance(source, ZarrSource) and os.path.exists(stats_path(source, fingerprint))


def block_stats(source: Source, mapper: Mapper | None = None, fingerprint: str | None = None) -> BlockStats:
    """Statistics of ``source``: computed with ``mapper`` (e.g. on a cluster), cached for Zarr inputs.

    Zarr statistics are cached on disk beside the input (keyed by its ``fingerprint``, computed
    here when not given) and kept in this process, so a repeated join neither reads nor loads them.
    """
    if isinstance(source, MemorySource) or mapper is None:
        return _compute(source, _local_mapper)
    path = stats_path(source, fingerprint)
    stats = CACHE.get("stats", path)  # stats file -> BlockStats (the file name holds the input's fingerprint)
    if stats is not None and os.path.exists(path):
        return stats
    built = {}

    def build(final: str) -> None:
        stats = built["stats"] = _compute(source, mapper)
        with commit.atomic_file(final) as tmp, open(tmp, "wb") as f:
            np.savez(f, starts=stats.starts, lo=stats.lo, hi=stats.hi, first_bad=stats.first_bad,
                     sample=stats.sample, sample_rows=stats.sample_rows)

    # concurrent joins of a fresh input (threads or processes) compute it once; readers see it whole
    commit.build_once(path, os.path.exists, build)
    stats = built.get("stats")
    if stats is None:
        with np.load(path) as f:
            stats = BlockStats(
                starts=f["starts"], lo=f["lo"], hi=f["hi"], first_bad=int(f["first_bad"]),
                sample=f["sample"], sample_rows=f["sample_rows"],
            )
    return CACHE.put("stats", path, stats)


def box_d2(lo_a: np.ndarray, hi_a: np.ndarray, lo_b: np.ndarray, hi_b: np.ndarray) -> np.ndarray:
    """Squared distances between boxes (broadcasting), summed in dimension order.

    Rounding is monotone, so a box distance never exceeds the exact distance of
    any pair inside the boxes: pruning on ``box_d2 > eps**2`` is exact.
    """
    gap = np.maximum(np.maximum(lo_b - hi_a, lo_a - hi_b), 0.0)
    total = np.zeros(gap.shape[:-1])
    for k in range(gap.shape[-1]):
        total = total + gap[..., k] * gap[..., k]
    return total
