"""Tasks on threads of this process: how a join runs where no Dask cluster was given or found.

Why: a local cluster costs seconds to start (a scheduler and a worker process, their
imports, the kernels' caches loaded again) and every result crosses a process boundary;
one machine's join needs neither.  The kernels run outside the GIL (Numba ``nogil``,
CuPy, pyarrow), a task's Numba kernels use every core, and two task threads let one
partition be read or written while the next one computes.  For in-memory data nothing
is shipped or copied.

:class:`InProcess` offers the part of ``distributed.Client`` that ``execution/`` uses
(``map``, ``gather``, ``scatter``, ``cancel``, ``compute``, ``run``, ``scheduler_info``,
``as_completed``), so one code path serves both.  Its threads are daemons: an interrupted
run does not wait at exit for a task it abandoned (its output is removed by the run's
abort, see :class:`~daskjoin.io.parquet_out.OutputRun`).
"""
from __future__ import annotations

import concurrent.futures as cf
import queue
import threading

#: Task threads: two, so one task reads or writes while the next computes (each task's kernel
#: uses every core itself); override with dask config ``daskjoin.local-threads``.
TASK_THREADS = 2
NAME = "in-process"
#: a task thread idle this long ends (a later task starts another)
IDLE_SECONDS = 30.0


class InProcess:
    """A client-like runner of tasks on daemon threads of this process."""

    id = NAME
    scheduler = None  # no scheduler: plans made here are cached apart from any cluster's
    cluster = None
    status = "running"

    def __init__(self, threads: int | None = None):
        from .. import config

        wanted = threads if threads is not None else config.get("local-threads")
        self.threads = max(1, int(wanted or TASK_THREADS))
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._started = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<daskjoin in-process runner: {self.threads} task threads>"

    # ------------------------------------------------------------------ tasks
    def _work(self) -> None:
        while True:
            try:
                future, func, args, kwargs = self._queue.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with self._lock:  # idle: this thread ends (a later submit starts another)
                    if self._queue.empty():
                        self._started -= 1
                        return
                continue
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = func(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
                future.set_exception(exc)
            else:
                future.set_result(result)

    def submit(self, func, *args, pure: bool = False, **kwargs) -> cf.Future:
        future: cf.Future = cf.Future()
        self._queue.put((future, func, args, kwargs))
        with self._lock:
            if self._started < self.threads:
                self._started += 1
                threading.Thread(target=self._work, name=f"daskjoin-task-{self._started}", daemon=True).start()
        return future

    def map(self, func, items, *, pure: bool = False, **kwargs) -> list[cf.Future]:
        return [self.submit(func, item, **kwargs) for item in items]

    def gather(self, futures):
        """Results in order (a single future: its result); the first failure to happen raises its own
        exception at once (not after the tasks submitted before it have finished)."""
        if isinstance(futures, cf.Future):
            return futures.result()
        cf.wait(futures, return_when=cf.FIRST_EXCEPTION)
        failed = next((f for f in futures if f.done() and not f.cancelled() and f.exception() is not None), None)
        if failed is not None:
            failed.result()
        return [f.result() for f in futures]

    @staticmethod
    def as_completed(futures):
        return cf.as_completed(futures)

    @staticmethod
    def cancel(futures) -> None:
        for future in futures:
            future.cancel()  # queued tasks never start; a running one finishes on its own

    @staticmethod
    def scatter(data, hash: bool = False):
        return data  # already where the tasks run

    def compute(self, collection) -> cf.Future:
        """A Dask collection computed with the threaded scheduler on a task thread."""
        import dask

        # as many threads as the runner has tasks: a graph of large pieces (the buckets of a sort) must not
        # run one per core at once, each with a task's memory
        return self.submit(lambda: dask.compute(collection, scheduler="threads", num_workers=self.threads)[0])

    @staticmethod
    def run(func, *args, **kwargs) -> dict:
        """``func(*args, **kwargs)`` here, keyed as a Dask client keys its workers' answers."""
        return {NAME: func(*args, **kwargs)}

    def scheduler_info(self) -> dict:
        # no memory limit: the auto budget counts this host's memory, as for a local cluster
        return {"workers": {NAME: {"nthreads": self.threads, "memory_limit": 0}}}

    def close(self) -> None:
        """Nothing to stop: idle daemon threads cost nothing and die with the process."""


_DEFAULT: dict = {}


def in_process() -> InProcess:
    """This process's runner (one, so its threads are reused by every join)."""
    runner = _DEFAULT.get("runner")
    if runner is None:
        runner = _DEFAULT["runner"] = InProcess()
    return runner
