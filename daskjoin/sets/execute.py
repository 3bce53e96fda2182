"""Set-join plans to Dask work: what one block task does, and the lazy frame / count / Parquet drivers."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..execution.progress import wait_all
from ..execution.task import _freeing_gpu_on_error, _set_threads
from ..io import parquet_out
from ..kernels import resolve_backend
from . import local
from .local import Flat
from .plan import SetBlock, SetPlan

VALUE_COLUMN = ("sim", "float64")


@dataclass(frozen=True, eq=False)
class SetSource:
    """Where a task reads its sets: a store path (read by range) or an in-memory collection.

    ``remap`` (store only): the new rank of each of the store's ranks, for an R x S join
    whose two sides were put in one token order from their vocabularies alone; each
    range read is re-ranked on the worker, so the client never loads the sets.
    """

    path: str | None = None
    collection: object = None
    remap: np.ndarray | None = None
    missing_chunks: str = "error"  # the client's daskjoin.missing-chunks, so workers follow it

    def read(self, rows: tuple):
        lo, hi = rows
        if self.path is not None:
            from ..io.sets_in import read_sets_range, rerank_tokens

            part = read_sets_range(self.path, lo, hi, missing_chunks=self.missing_chunks)
            tokens = part.tokens if self.remap is None else rerank_tokens(part.tokens, part.offsets, self.remap)
        else:
            part = self.collection.slice(lo, hi)
            tokens = part.tokens
        return Flat.of(tokens, part.offsets), part.ids


@dataclass(frozen=True, eq=False)
class SetJob:
    """What every block task of one join shares (shipped once)."""

    plan: SetPlan
    source_a: SetSource
    source_b: SetSource | None

    def _sides(self, block: SetBlock):
        _set_threads()
        r, r_ids = self.source_a.read(block.r)
        if block.is_self:
            return r, r_ids, None, r_ids
        s, s_ids = (self.source_a if self.plan.selfjoin else self.source_b).read(block.s)
        return r, r_ids, s, s_ids

    def _kernel_args(self, block: SetBlock) -> dict:
        backend = resolve_backend(self.plan.backend)
        options = dict(self.plan.gpu_options)
        if backend != "gpu":
            options = {k: v for k, v in options.items() if k == "chunk_candidates"}
        return dict(algorithm=self.plan.algorithm, backend=backend, larger_partners=block.larger_partners,
                    options=options, group_copies=self.plan.group_copies)

    def count(self, block: SetBlock) -> int:
        r, _, s, _ = self._sides(block)
        return int(local.block_count(r, s, self.plan.threshold, **self._kernel_args(block)))

    def batches(self, block: SetBlock):
        """The block's matches as (i, j, sim) batches in original ids (self-joins: i < j)."""
        r, r_ids, s, s_ids = self._sides(block)
        sizes_r = r.sizes
        sizes_s = sizes_r if s is None else s.sizes
        for probe, cand, overlap in local.block_batches(r, s, self.plan.threshold, **self._kernel_args(block)):
            sim = self.plan.threshold.similarity(overlap, sizes_r[probe], sizes_s[cand])
            i, j = r_ids[probe], s_ids[cand]
            if self.plan.selfjoin:
                i, j = np.minimum(i, j), np.maximum(i, j)
            order = np.lexsort((j, i))
            yield i[order], j[order], sim[order]


def meta_frame() -> pd.DataFrame:
    return pd.DataFrame({"i": np.zeros(0, np.int64), "j": np.zeros(0, np.int64), "sim": np.zeros(0, np.float64)})


@_freeing_gpu_on_error
def block_frame(block: SetBlock, job: SetJob) -> pd.DataFrame:
    parts = list(job.batches(block))
    if not parts:
        return meta_frame()
    i, j, sim = (np.concatenate(c) for c in zip(*parts))
    order = np.lexsort((j, i))
    return pd.DataFrame({"i": i[order], "j": j[order], "sim": sim[order]}, copy=False)


@_freeing_gpu_on_error
def block_count(block: SetBlock, job: SetJob) -> int:
    return job.count(block)


@_freeing_gpu_on_error
def block_to_parquet(block: SetBlock, job: SetJob, out_dir: str) -> dict:
    return parquet_out.write_partition(out_dir, block.index, job.batches(block), value=VALUE_COLUMN)


def to_dataframe(job: SetJob):
    import dask.dataframe as dd

    if not job.plan.blocks:
        return dd.from_pandas(meta_frame(), npartitions=1)
    return dd.from_map(block_frame, list(job.plan.blocks), args=[job], meta=meta_frame(), label="daskjoin-setpairs",
                       enforce_metadata=False)


def _submit(client, func, job: SetJob, **kwargs):
    [shared] = client.scatter([job], hash=False)
    return client.map(func, list(job.plan.blocks), job=shared, pure=False, **kwargs)


def count(job: SetJob, client, *, progress: bool = False) -> int:
    futures = _submit(client, block_count, job)
    return int(sum(wait_all(client, futures, progress=progress, desc="counting")))


def write_parquet(job: SetJob, client, run: parquet_out.OutputRun, *, progress: bool = False) -> dict:
    start = time.perf_counter()
    futures = _submit(client, block_to_parquet, job, out_dir=run.staging)
    entries = wait_all(client, futures, progress=progress, desc="joining")
    t = job.plan.threshold
    extra = {"measure": t.measure, "threshold": str(t.exact), "algorithm": job.plan.algorithm,
             "selfjoin": job.plan.selfjoin, "seconds": round(time.perf_counter() - start, 3)}
    return run.commit(entries, extra)
