"""The cores this process may run on."""
from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores of this process's CPU affinity where the OS tells it (dask-cuda pins each GPU worker to its
    GPU's cores), else the machine's."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def writer_threads() -> int:
    """Threads that encode and write Parquet pieces in one process (``daskjoin.writer-threads``; auto: the cores
    it may run on): also the bound on pieces in flight, which sizes the GPU tasks' pool of host blocks."""
    from . import config

    wanted = config.get("writer-threads")
    return max(1, usable_cores() if wanted in (None, "auto") else int(wanted))
