"""Waiting for futures, with an optional progress bar (tqdm: terminal and notebooks)."""
from __future__ import annotations


def wait_all(client, futures, *, progress: bool = False, desc: str = "tasks") -> list:
    """Results of ``futures`` in submission order; a failed task raises its own error."""
    from distributed import as_completed

    if progress and futures:
        from tqdm.auto import tqdm

        with tqdm(total=len(futures), desc=desc, unit="task") as bar:
            for future in as_completed(futures, loop=client.loop):
                if future.status == "error":
                    future.result()  # raises the task's exception here
                bar.update(1)
    return client.gather(futures)
