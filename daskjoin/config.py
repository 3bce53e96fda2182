"""Defaults under dask.config's ``daskjoin.`` namespace (override with dask.config.set or DASK_DASKJOIN__*)."""
from __future__ import annotations

import dask.config

DEFAULTS = {
    "daskjoin": {
        # memory one task may use for its points, index and pairs; "auto": a quarter of the
        # smallest worker's memory per thread, clamped to [256 MiB, 16 GiB]
        "memory-budget": "auto",
        # rows sampled (spread over all blocks) to estimate the result size and sort boundaries
        "sample-rows": 20000,
        # where statistics and sorted copies of Zarr inputs are cached; None: beside the input
        "cache-dir": None,
        # Numba threads per task; None: the worker's cores divided by its task threads
        "numba-threads": None,
        # tasks of one join its cluster runs at once, for which the planner cuts a large join that one task
        # could hold; "auto": the GPU workers for GPU tasks, the hosts for CPU tasks (a CPU task's Numba
        # kernels use every core of its host already)
        "parallel-tasks": "auto",
        # bytes of pairs one Parquet row group (and file) holds before a task writes it out: small enough that a
        # partition's pieces spread over the writer threads and the last ones leave no long tail (32 MiB: 1.68M
        # pairs, ~11 MB files; docs/algorithms.md says what larger and smaller sizes measured)
        "row-group-bytes": "32MiB",
        # bytes of pairs a task sorts by (i, j) in memory; a larger partition is sorted in runs
        # spilled to the temporary directory and merged (output identical, memory bounded)
        # "auto": what the plan's memory budget allows (the planner sizes partitions for it), else 1 GiB
        "sort-bytes": "auto",
        # threads of a process that encode and write Parquet pieces at once; "auto": its cores
        "writer-threads": "auto",
        # GPU drivers move sorted pairs to the host in pinned memory (fast copies, buffers reused by later
        # tasks of the process; pinning costs ~0.5 s per GiB once) or, with False, in pageable memory
        "pinned-output": True,
        # page-locked host blocks a process keeps and reuses for pair batches leaving its GPU (one row group
        # each; kernels/host_pool.py): the copies land in them at PCIe speed, with no pinning or first touch
        # per batch; "auto": a sixteenth of the host's memory, at most 4 GiB; 0: none (pinned-output decides)
        "host-pool-bytes": "auto",
        # free host memory a process keeps for its next large arrays (a CPU task's pair buffers, grid index and
        # sort; kernels/array_pool.py): reused, its pages are not faulted in again each task (Dask's workers give
        # freed memory back to the system at once); "auto": in a Dask worker a sixteenth of its memory limit,
        # elsewhere a thirty-second of the host's memory, at most 1 GiB; 0: none (and what was kept is freed)
        "array-pool-bytes": "auto",
        # whether the client fetches a lazy frame's computed partitions from the workers directly instead of
        # through the scheduler (Client(direct_to_workers=...)); "auto": where every worker is on this host's
        # loopback (a LocalCluster): 1M x 2-d pairs came 10x faster so on the 2-core VM; the client's own
        # setting, where given, wins
        "direct-gather": "auto",
        # task threads of a join run in this process (no Dask cluster given or found)
        "local-threads": 2,
        # what a missing chunk file of a Zarr input (points or set store) means: "error" (a damaged
        # store: DamagedStoreError naming the chunk) or "fill" (zarr's rule: the array's fill value,
        # e.g. for stores written with write_empty_chunks=False); read when an input is opened
        "missing-chunks": "error",
        # the ``daskjoin`` command leaves without the interpreter's teardown after a command that succeeded in its
        # own process alone (no cluster, no scheduler: distributed never imported; its output is committed by
        # then): 0.08 s off a GPU join to Parquet on average (H200, three alternated pairs); False: a normal exit
        "fast-exit": True,
    }
}

dask.config.update_defaults(DEFAULTS)


def get(key: str):
    return dask.config.get(f"daskjoin.{key}")


def parse_bytes(value) -> int:
    """'2GB', '512MiB' or an int, as bytes."""
    from dask.utils import parse_bytes as _parse

    return int(_parse(value)) if isinstance(value, str) else int(value)
