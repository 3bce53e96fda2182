"""The set-similarity join as a join kind: what each of its tasks does with one size-range block.

:class:`SetJob` is what every task of one set join shares; it reads the block's sets (from a
store by range, or from memory), filters and verifies them (:mod:`daskjoin.sets.local`), and
reports pairs in original ids.  The execution layer (:mod:`daskjoin.execution.task`) calls
its ``batches`` and ``count``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels import resolve_backend
from ..sets import local
from ..sets.local import Flat
from ..sets.plan import SetBlock, SetPlan


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


@dataclass(frozen=True)
class SetTaskPlan:
    """What every block task needs of a :class:`SetPlan` (its blocks travel as the tasks themselves)."""

    threshold: object
    algorithm: str
    backend: str
    selfjoin: bool
    gpu_options: tuple = ()
    group_copies: bool = True


@dataclass(frozen=True, eq=False)
class SetJob:
    """What every block task of one join shares (shipped once)."""

    plan: "SetTaskPlan"
    source_a: SetSource
    source_b: SetSource | None

    @classmethod
    def from_plan(cls, plan: SetPlan, source_a: SetSource, source_b: SetSource | None) -> "SetJob":
        """The job of ``plan``: it carries what tasks need of the plan, not its (many) blocks."""
        return cls(SetTaskPlan(plan.threshold, plan.algorithm, plan.backend, plan.selfjoin, plan.gpu_options,
                               plan.group_copies), source_a, source_b)

    value = ("sim", "float64")
    label = "daskjoin-setpairs"
    sorts_rows = True  # each batch leaves sorted by (i, j); a frame of several batches is sorted whole

    def in_memory_bytes(self) -> int:
        """Bytes of array data the job carries (in-memory collections, token remaps)."""
        total = 0
        for source in (self.source_a, self.source_b):
            if source is None:
                continue
            total += getattr(source.remap, "nbytes", 0) if source.remap is not None else 0
            coll = source.collection
            for name in ("tokens", "offsets", "ids", "vocab", "freq"):
                total += getattr(getattr(coll, name, None), "nbytes", 0) if coll is not None else 0
        return int(total)

    def _sides(self, block: SetBlock):
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

    def batches(self, block: SetBlock, max_pairs: int | None = None):
        """The block's matches as (i, j, sim) batches in original ids (self-joins: i < j), each sorted.

        Batches are bounded by the verifier's chunks (``chunk_candidates``), whatever ``max_pairs`` says.
        """
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
