"""Frozen descriptions of a join: its partitions and the plan that holds them."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..io.zarr_in import Source
from .estimate import Estimate
from .sorted_copy import SortedCopy

#: Bytes one result pair costs a task against its budget, on either backend.  On the host: i, j, dist in the
#: kernel's buffers, the compacted arrays and the DataFrame (60).  On a GPU: its output and the device sort's
#: buffers (56: ``kernels.grid_gpu``'s ``OUTPUT_BYTES_PER_PAIR + SORT_BYTES_PER_PAIR``) within the 80% of the
#: budget the largest buffer may take (``kernels.gpu_common.LIMITED_SHARE``): 70.  One price for both, so that
#: a plan does not depend on where its tasks run (a CPU and a GPU task of one partition write the same file),
#: and a slab planned to its budget sorts its pairs on the device (at 60 one could hold 15% more and leave the
#: device: a 7.3 s task among 1.5 s ones, 20M x 3-d exponential at 256 MB on an H100, 2026-11-26).
PAIR_BYTES = 70


#: the szl method's lists at most (its ``lists`` option can ask for them all at any d), and what a list costs
#: an index row while it is built: order, key twice, rank, own position and walked-list byte (41 bytes), and
#: the row again in the list's order (8 d) (kernels/szl.py; a test ties the count)
SZL_MAX_LISTS = 8


def row_bytes(d: int, itemsize: int, method: str = "grid") -> int:
    """Bytes one input row costs a task: the rows read, the float64 sorted copy, ids and cell ids (and the
    szl method's lists, the directory's ordered rows, brute's float32 copy and norms)."""
    base = d * (itemsize + 8) + 48
    if method == "brute":  # the GEMM filter's shifted float32 rows and their norms (kernels/brute_gemm.py)
        base += 4 * d + 12
    elif method == "szl":
        base += SZL_MAX_LISTS * (41 + 8 * d)
    elif method == "directory":  # the rows and their bounds in directory order, rotated ones too with pca
        base += 24 * d + 24
    return base


def host_row_bytes(d: int, itemsize: int = 8) -> int:
    """Host bytes one input row costs a GPU task: the row as read and its id (its float64 copies and index are
    on the device, :func:`row_bytes`)."""
    return d * itemsize + 16


#: the share of a GPU's memory one task's rows may take on it (:func:`row_bytes` of them): the rest is for
#: its output batches, the filter's candidates and whatever else the device holds
DEVICE_SHARE = 0.4


@dataclass(frozen=True)
class Partition:
    """One task: a self-join of rows ``a`` (if ``self_part``) plus the cross join of rows ``a`` × rows ``b``
(of one query share of them where ``share`` says so).

    Rows index the plan's readers: the inputs themselves (chunk pairs) or their
    sorted copies (slabs); pairs are reported in the inputs' original row ids.
    """

    index: int
    a: tuple[int, int]
    b: tuple[int, int] | None
    self_part: bool
    est_pairs: float
    #: ``(k, parts, backend)``: only the pairs of the k-th of ``parts`` query shares of these rows
    #: (:mod:`daskjoin.kernels.shares`), as that backend's driver cuts them; None: all
    share: tuple | None = None

    @property
    def rows(self) -> int:
        return (self.a[1] - self.a[0]) + ((self.b[1] - self.b[0]) if self.b else 0)


@dataclass(frozen=True)
class PlanStep:
    """A pass over the input data that planning needs (statistics, a sorted copy), named so ``explain()`` shows it.

    ``reads`` is the bytes of input data the step reads when it runs; a step whose result
    was cached (on disk beside the input, or in this process) reads nothing and ``cached``
    says so.  ``seconds`` is what it took in this plan (0 when cached).
    """

    name: str
    what: str
    reads: int
    cached: bool
    seconds: float = 0.0

    def describe(self) -> str:
        cost = ("cached: read nothing" if self.cached
                else f"read {fmt_bytes(self.reads)} in {self.seconds:.2f} s when this plan was made")
        return f"{self.name}: {self.what}; {cost}"


@dataclass(frozen=True, eq=False)
class Plan:
    """Everything needed to run a join; ``explain()`` says what will happen and why."""

    eps: float
    selfjoin: bool
    method: str
    method_reason: str
    partitioning: str
    partitioning_reason: str
    backend: str
    a: Source
    b: Source | None
    reader_a: Source | SortedCopy = field(repr=False)
    reader_b: Source | SortedCopy | None = field(repr=False)
    partitions: tuple[Partition, ...] = field(repr=False)
    estimate: Estimate
    memory_budget: int
    notes: tuple[str, ...] = ()
    gpu_options: tuple = ()  # (name, value) pairs for the GPU driver of the method
    inputs_token: str = field(default="", repr=False)  # fingerprint of Zarr inputs, part of the tasks' keys
    steps: tuple[PlanStep, ...] = ()  # the passes over the data planning ran (or found cached)
    count_only: bool = False  # planned for output="count": tasks hold no pairs, so partitions size for rows only
    parallelism: int = 1  # the tasks its cluster runs at once, planned for (a large join is cut for them)
    device_memory: int = 0  # bytes of the smallest GPU its tasks run on (0: CPU tasks, or not known)

    @property
    def ntasks(self) -> int:
        return len(self.partitions)

    @property
    def d(self) -> int:
        return self.a.d

    def task_memory(self, part: Partition) -> int:
        """Host bytes of a task (a GPU task's rows take :func:`host_row_bytes`; their copies are on the device)."""
        pairs = 0 if self.count_only else int(part.est_pairs * PAIR_BYTES)
        itemsize = max(np.dtype(s.dtype).itemsize for s in (self.a, self.b) if s is not None)
        per_row = host_row_bytes(self.d, itemsize) if self.device_memory else row_bytes(self.d, 8, self.method)
        return part.rows * per_row + pairs

    def explain(self) -> str:
        """A human-readable account of the plan."""
        kind = "self-join" if self.selfjoin else "A×B join"
        shape_b = "" if self.selfjoin else f" × B {self.b.label} ({self.b.n:,} × {self.b.d})"
        worst = max((self.task_memory(p) for p in self.partitions), default=0)
        lines = [
            f"daskjoin plan: ε-{kind}, eps={self.eps!r}",
            f"  input:         A {self.a.label} ({self.a.n:,} × {self.a.d}){shape_b}",
            f"  method:        {self.method} on {self._backend_text()} - {self.method_reason}",
            f"  partitioning:  {self.partitioning} - {self.partitioning_reason}",
            f"  tasks:         {self.ntasks}" + (f" (for {self.parallelism} workers at once)" if self.parallelism > 1 else ""),
            f"  estimate:      {self.estimate.describe()}",
            f"  memory/task:   up to ~{fmt_bytes(worst)} (budget {fmt_bytes(self.memory_budget)})"
            + (": a count holds no pairs" if self.count_only else ""),
        ]
        if self.device_memory:
            rows = max((p.rows for p in self.partitions), default=0)
            lines.append(f"  device/task:   up to ~{fmt_bytes(rows * row_bytes(self.d, 8, self.method))} of the rows' copies "
                         f"and index (GPU of {fmt_bytes(self.device_memory)})")
        if self.gpu_options:
            from ..options import METHOD_OPTIONS

            own = METHOD_OPTIONS["epsilon"].get(self.method, ())
            lines.append("  options:       " + ", ".join(
                f"{k}={v}" + ("" if k in own or self.backend != "cpu" else " (GPU only: unused on the CPU)")
                for k, v in self.gpu_options))
        if self.method == "brute" and self.backend != "cpu":
            from .cost import choose_filter

            options = dict(self.gpu_options)
            chosen, why = choose_filter(options.get("filter", "auto"), self.a.d, options.get("tile"))
            lines.append(f"  GPU filter:    {chosen} - {why}")
        lines += [f"  data pass:     {step.describe()}" for step in self.steps]
        lines += [f"  note:          {note}" for note in self.notes]
        return "\n".join(lines)

    def _backend_text(self) -> str:
        return "auto (each task on its worker's GPU if CuPy sees one, else the CPU)" if self.backend == "auto" else self.backend

    def __str__(self) -> str:
        return self.explain()


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
