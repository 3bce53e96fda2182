"""The set-similarity join as a join kind: what each of its tasks does with one size-range block.

:class:`SetJob` is what every task of one set join shares; it reads the block's sets (from a
store by range, or from memory), filters and verifies them (:mod:`daskjoin.kernels.sets.local`), and
reports pairs in original ids.  The execution layer (:mod:`daskjoin.execution.task`) calls
its ``batches`` and ``count``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..io.set_inputs import SetSource
from ..kernels import registry, resolve_backend
from ..planning.sets import SetBlock, SetPlan

if TYPE_CHECKING:
    from ..kernels.sets.local import Flat


@dataclass(frozen=True)
class SetTaskPlan:
    """What every block task needs of a :class:`SetPlan` (its blocks travel as the tasks themselves)."""

    threshold: object
    algorithm: str
    backend: str
    selfjoin: bool
    gpu_options: tuple = ()
    group_copies: bool = True
    memory_budget: int = 0  # the plan's budget per task (bounds the task's in-memory sort)


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
                               plan.group_copies, plan.budget), source_a, source_b)

    value = ("sim", "float64")

    @property
    def memory_budget(self) -> int:
        return self.plan.memory_budget

    @property
    def backend(self) -> str:
        """Where verification runs ("auto": the worker's GPU if it has one): tasks on a GPU take turns."""
        return self.plan.backend

    label = "daskjoin-setpairs"

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
        r, r_ids = _read(self.source_a, block.r)
        if block.is_self:
            return r, r_ids, None, r_ids
        s, s_ids = _read(self.source_a if self.plan.selfjoin else self.source_b, block.s)
        return r, r_ids, s, s_ids

    def _kernel_args(self, block: SetBlock) -> dict:
        backend = resolve_backend(self.plan.backend)
        options = dict(self.plan.gpu_options)
        if backend != "gpu":
            options = {k: v for k, v in options.items() if k == "chunk_candidates"}
        return dict(algorithm=self.plan.algorithm, backend=backend, larger_partners=block.larger_partners,
                    options=options, group_copies=self.plan.group_copies)

    def _driver(self, block: SetBlock, r: Flat, s: Flat | None):
        """The registry's ("sets", algorithm, backend) driver of one block's sides."""
        kw = self._kernel_args(block)
        algorithm, backend = kw.pop("algorithm"), kw.pop("backend")
        return registry.make("sets", algorithm, backend, r, s, self.plan.threshold, **kw)

    def count(self, block: SetBlock) -> int:
        r, _, s, _ = self._sides(block)
        return int(self._driver(block, r, s).count())

    def batches(self, block: SetBlock, max_pairs: int | None = None):
        """The block's matches as (i, j, sim) batches in original ids (self-joins: i < j); the task sorts them.

        Each batch holds at most ``max_pairs`` pairs (None: the kernel's default bound).
        """
        r, r_ids, s, s_ids = self._sides(block)
        sizes_r = r.sizes
        sizes_s = sizes_r if s is None else s.sizes
        from ..kernels.sets import local  # Numba: imported by the tasks, not by `import daskjoin`
        from ..kernels.sets.measures import matches

        bound = local.DEFAULT_MAX_PAIRS if max_pairs is None else max_pairs
        code = self.plan.threshold.code
        for probe, cand, overlap in self._driver(block, r, s).batches(bound):
            yield matches(probe, cand, overlap, sizes_r, sizes_s, r_ids, s_ids, code, self.plan.selfjoin)


def _read(source: SetSource, rows: tuple):
    from ..kernels.sets.local import Flat

    tokens, offsets, ids = source.read(rows)
    return Flat.of(tokens, offsets), ids
