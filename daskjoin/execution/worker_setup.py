"""Preloaded into the worker processes of the local cluster daskjoin starts (``LocalCluster(preload=...)``).

A terminal's Ctrl-C reaches the whole process group; only the client should react (it closes
the cluster itself).  Workers the nanny starts again later (after a crash or an out-of-memory
kill) do not inherit the client's setting, so each worker sets it here when it starts.
"""
from __future__ import annotations

import signal


def dask_setup(worker=None) -> None:
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the process's main thread: the inherited setting stays
        pass
