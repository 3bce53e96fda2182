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


def _postfix(pairs: int, nbytes: int, seconds: float) -> str:
    from dask.utils import format_bytes

    rate = pairs / seconds if seconds > 0 else 0.0
    text = f"{pairs:,} pairs, {rate / 1e6:,.1f}M pairs/s"
    return text + (f", {format_bytes(nbytes)} written" if nbytes else "")


def wait_all(client, futures, *, progress: bool = False, desc: str = "tasks", tally=None) -> list:
    """Results of ``futures`` in submission order; a failed task raises its own error.

    ``tally(result) -> (pairs, bytes)``: what a finished task adds to the bar's pairs found,
    pairs/s and bytes written.
    """
    import time

    bar = None
    pairs = nbytes = 0
    start = time.perf_counter()
    try:
        raise_if_interrupted()
        if progress and futures:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(futures), desc=desc, unit="task")
            # the in-process runner has its own (concurrent.futures); a Dask client needs its loop
            if hasattr(client, "as_completed"):
                completed = client.as_completed(futures)
            else:
                from distributed import as_completed

                completed = as_completed(futures, loop=client.loop)
            for future in completed:
                result = None
                # a failed task raises its own exception here (a Dask future's result is fetched only when needed)
                if tally is not None or getattr(future, "status", "error") == "error":
                    result = future.result()
                raise_if_interrupted()
                if tally is not None:
                    got = tally(result)
                    pairs, nbytes = pairs + got[0], nbytes + got[1]
                    bar.set_postfix_str(_postfix(pairs, nbytes, time.perf_counter() - start), refresh=False)
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
