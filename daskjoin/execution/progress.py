"""Waiting for futures, with an optional progress bar (tqdm: terminal and notebooks), and interrupts.

An interrupt (Ctrl-C) raised while Numba compiles or loads a cached kernel lands in a
callback that C code calls and is swallowed there; the CLI's handler therefore also
records it (:func:`note_interrupt`), and work checks the record before it starts tasks
and while it waits for them (:func:`raise_if_interrupted`).
"""
from __future__ import annotations

import itertools


class Terminated(BaseException):
    """SIGTERM arrived: unwinds like Ctrl-C, so a run's staging files and cluster are cleaned up."""


_INTERRUPTED: dict = {}  # "kind" -> KeyboardInterrupt or Terminated, once one was recorded


def note_interrupt(kind: type = KeyboardInterrupt) -> None:
    _INTERRUPTED.setdefault("kind", kind)


def clear_interrupt() -> None:
    """Forget a recorded interrupt (a new command starts clean in a long-lived process)."""
    _INTERRUPTED.clear()


def raise_if_interrupted() -> None:
    kind = _INTERRUPTED.get("kind")
    if kind is not None:
        raise kind()


def _postfix(pairs: int, nbytes: int, seconds: float) -> str:
    from dask.utils import format_bytes

    rate = pairs / seconds if seconds > 0 else 0.0
    text = f"{pairs:,} pairs, {rate / 1e6:,.1f}M pairs/s"
    return text + (f", {format_bytes(nbytes)} written" if nbytes else "")


#: times one partition's task is sent again after a lost worker took its input with it
MAX_RESUBMITS = 4


def _lost(future) -> bool:
    """A Dask task cancelled by the scheduler, not by us: the worker holding its (scattered) input died."""
    return getattr(future, "status", None) == "cancelled"


def _as_completed(client, futures):
    if hasattr(client, "as_completed"):  # the in-process runner (concurrent.futures): nothing is ever lost
        return client.as_completed(futures)
    from distributed import as_completed

    return as_completed(futures, loop=client.loop)


def wait_all(client, submit, items, *, progress: bool = False, desc: str = "tasks", tally=None,
             on_result=None, window: int | None = None) -> list:
    """Run ``submit(items) -> futures`` and return the results in the order of ``items``; a failed task
    raises its own error, and every other task is cancelled.

    A task the scheduler cancelled because the worker holding its input died (the scattered job of an
    in-memory join; the scheduler itself reruns tasks whose worker died) is submitted again, at most
    :data:`MAX_RESUBMITS` times each (``submit`` sends the input again).  Results are fetched as
    tasks finish, so a result held by a worker that dies later is not lost.  ``tally(result) ->
    (pairs, bytes)``: what a finished task adds to the bar; ``on_result(k, result)``: called as
    item ``k`` finishes (a resumable run records it).  ``window``: at most that many tasks submitted
    at once, the next item as one finishes (items in the order given), so that a scheduler that hands
    a worker two tasks ahead cannot leave another worker idle while a few large tasks run.
    """
    import time
    from concurrent.futures import CancelledError  # distributed's FutureCancelledError derives from it

    bar = None
    pairs = nbytes = 0
    start = time.perf_counter()
    waiting: dict = {}  # future -> index of its item
    results: list = [None] * len(items)
    tries = [0] * len(items)
    try:
        raise_if_interrupted()
        if not items:
            return []
        first = len(items) if window is None else max(1, min(window, len(items)))
        for k, future in enumerate(submit(list(items[:first]))):
            waiting[future] = k
        following = iter(range(first, len(items)))
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(items), desc=desc, unit="task")
        completed = _as_completed(client, list(waiting))
        for future in completed:
            k = waiting.pop(future)
            try:
                lost = _lost(future)
                if not lost:
                    result = results[k] = future.result()  # a failed task raises its own exception here
            except CancelledError:
                lost = True  # finished, but its result died with its worker before it was fetched
            del future
            if lost:
                tries[k] += 1
                if tries[k] > MAX_RESUBMITS:
                    raise RuntimeError(f"task {k} of {desc} was lost with its worker {tries[k]} times; giving up")
                [again] = submit([items[k]])
                waiting[again] = k
                completed.add(again)
                continue
            for k_next in itertools.islice(following, 1):  # the window moves on: the next item
                [future] = submit([items[k_next]])
                waiting[future] = k_next
                completed.add(future)
            raise_if_interrupted()
            if on_result is not None:
                on_result(k, result)
            if tally is not None and bar is not None:
                got = tally(result)
                pairs, nbytes = pairs + got[0], nbytes + got[1]
                bar.set_postfix_str(_postfix(pairs, nbytes, time.perf_counter() - start), refresh=False)
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        return results
    except BaseException:
        if bar is not None:  # an unfinished bar is cleared: the error line says what happened
            bar.leave = False
            bar.close()
        # a failure or an interrupt: the other tasks stop too, so none goes on writing or computing
        try:
            client.cancel(list(waiting))
        except Exception:  # noqa: BLE001 - a closing client: nothing left to cancel
            pass
        raise
