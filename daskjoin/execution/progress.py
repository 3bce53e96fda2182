"""Waiting for futures, with an optional progress bar (tqdm: terminal and notebooks), and interrupts.

An interrupt (Ctrl-C) raised while Numba compiles or loads a cached kernel lands in a
callback that C code calls and is swallowed there; the CLI's handler therefore also
records it (:func:`note_interrupt`), and work checks the record before it starts tasks
and while it waits for them (:func:`raise_if_interrupted`).
"""
from __future__ import annotations

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


def wait_all(client, futures, *, progress: bool = False, desc: str = "tasks") -> list:
    """Results of ``futures`` in submission order; a failed task raises its own error."""
    from distributed import as_completed

    bar = None
    try:
        raise_if_interrupted()
        if progress and futures:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(futures), desc=desc, unit="task")
            # the in-process runner has its own (concurrent.futures); a Dask client needs its loop
            completed = client.as_completed(futures) if hasattr(client, "as_completed") else \
                as_completed(futures, loop=client.loop)
            for future in completed:
                if getattr(future, "status", None) == "error" or (
                        not hasattr(future, "status") and future.exception() is not None):
                    future.result()  # raises the task's exception here
                raise_if_interrupted()
                bar.update(1)
            bar.close()
        return client.gather(futures)
    except BaseException:
        if bar is not None:  # an unfinished bar is cleared: the error line says what happened
            bar.leave = False
            bar.close()
        # a failure or an interrupt: the other tasks stop too, so none goes on writing or computing
        try:
            client.cancel(futures)
        except Exception:  # noqa: BLE001 - a closing client: nothing left to cancel
            pass
        raise
