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
