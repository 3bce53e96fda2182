"""The kNN-join as a join kind: what each of its tasks does with one range of query rows.

:class:`KnnJob` reads the task's queries, searches the plan's data blocks nearest first (a block
only for the queries whose k-th distance so far reaches its box), and reports each query's k
neighbours as rows ``(i, j, dist, rank)`` sorted by ``(i, j)``: a ``SortedRun`` the task streams.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels import resolve_backend
from ..kernels.registry import KNN_ROW_VALUE, SortedRun, make
from ..kernels.summary import column_bounds
from ..planning.bounds import box_d2
from ..planning.knn import KnnPartition, KnnPlan

#: the value columns of a kNN row beside i and j: one 8-byte record per row (sorts and spills as one value)
KNN_VALUE = ("knn", KNN_ROW_VALUE)


@dataclass(frozen=True, eq=False)
class KnnJob:
    """What every task of one kNN-join shares (shipped once with the graph)."""

    reader_a: object
    reader_b: object  # None: a self-join
    k: int
    method: str
    backend: str
    blocks: tuple
    block_lo: np.ndarray
    block_hi: np.ndarray
    inputs_token: str = ""
    memory_budget: int = 0
    device_limit: int = 0  # as the ε-join's (JoinJob.device_limit)
    gpu_options: tuple = ()  # (name, value) pairs for the method's GPU driver (none is taken on the CPU)

    label = "daskjoin-knn"
    value = KNN_VALUE

    @classmethod
    def from_plan(cls, plan: KnnPlan, device_limit: int = 0) -> "KnnJob":
        return cls(plan.a, plan.b, plan.k, plan.method, plan.backend, plan.blocks, plan.block_lo, plan.block_hi,
                   plan.inputs_token, plan.memory_budget, int(device_limit), plan.gpu_options)

    @property
    def selfjoin(self) -> bool:
        return self.reader_b is None

    def in_memory_bytes(self) -> int:
        return int(sum(getattr(getattr(r, "data", None), "nbytes", 0) for r in (self.reader_a, self.reader_b)))

    def count(self, part: KnnPartition) -> int:
        return part.rows * self.k

    def batches(self, part: KnnPartition, max_pairs: int | None):
        """The rows ``(i, j, value)`` of the partition's queries, sorted by ``(i, j)``, in ``SortedRun`` batches."""
        i, j, value = self.neighbours(part)
        step = len(i) if max_pairs is None else max(1, int(max_pairs))
        for at in range(0, len(i), max(step, 1)):
            yield SortedRun((i[at:at + step], j[at:at + step], value[at:at + step]))

    def neighbours(self, part: KnnPartition):
        """``(i, j, value)`` of the partition's queries (see :func:`daskjoin.kernels.knn.finish`)."""
        from ..kernels.knn import empty_lists, finish

        backend = resolve_backend(self.backend)
        options = dict(self.gpu_options) if backend == "gpu" else {}
        queries = self.reader_a.read(*part.a)
        ids = np.arange(*part.a, dtype=np.int64)
        best_d2, best_j = empty_lists(len(ids), self.k)
        data = self.reader_a if self.reader_b is None else self.reader_b
        if len(self.blocks) == 1:  # the usual case: one search of the whole data, finished by the driver
            lo, hi = self.blocks[0]
            return make("knn", self.method, backend, data.read(lo, hi), self.k, lo, **options).rows(
                queries, ids, self.selfjoin)
        if len(ids):
            q64 = queries.astype(np.float64, copy=False)
            qlo, qhi = column_bounds(q64)
            near = box_d2(qlo, qhi, self.block_lo, self.block_hi)
            for blk in np.lexsort((np.arange(len(self.blocks)), near)):  # nearest blocks first
                lo, hi = self.blocks[blk]
                # queries whose k-th distance so far reaches the box (box_d2 never exceeds a distance)
                reach = box_d2(q64, q64, self.block_lo[blk], self.block_hi[blk]) <= best_d2[:, 0]
                if not reach.any():
                    continue
                driver = make("knn", self.method, backend, data.read(lo, hi), self.k, lo, **options)
                if reach.all():
                    driver.search(queries, ids, best_d2, best_j, self.selfjoin)
                    continue
                sub = np.flatnonzero(reach)
                d2, jj = best_d2[sub], best_j[sub]
                driver.search(queries[sub], ids[sub], d2, jj, self.selfjoin)
                best_d2[sub], best_j[sub] = d2, jj
        return finish(best_d2, best_j, ids)
