"""Waiting for futures, with an optional progress bar (tqdm: terminal and notebooks)."""
from __future__ import annotations


def wait_all(client, futures, *, progress: bool = False, desc: str = "tasks") -> list:
    """Results of ``futures`` in submission order; a failed task raises its own error."""
    from distributed import as_completed

    try:
        if progress and futures:
            from tqdm.auto import tqdm

            with tqdm(total=len(futures), desc=desc, unit="task") as bar:
                for future in as_completed(futures, loop=client.loop):
                    if future.status == "error":
                        future.result()  # raises the task's exception here
                    bar.update(1)
        return client.gather(futures)
    except BaseException:
        # a failure or an interrupt: the other tasks stop too, so none goes on writing or computing
        try:
            client.cancel(futures)
        except Exception:  # noqa: BLE001 - a closing client: nothing left to cancel
            pass
        raise
