"""A Parquet task's GPU turn (execution.task._timed): given back as soon as its last piece is produced, before
that piece waits for a writer, and on every way out; the pieces pass on whole and in order."""
from __future__ import annotations

import pytest

from daskjoin.execution import task


class _Turn:
    def __init__(self, log: list):
        self.log, self.held = log, True

    def release(self) -> None:
        if self.held:
            self.held = False
            self.log.append("released")


def _pieces(n: int, log: list):
    for k in range(n):
        log.append(f"made {k}")
        yield k


@pytest.mark.parametrize("n", [0, 1, 2, 5])
def test_the_turn_goes_back_once_the_last_piece_is_made_before_it_is_handed_on(n):
    log, clock = [], [0.0]
    turn = _Turn(log)
    got = []
    for piece in task._timed(_pieces(n, log), clock, turn):
        log.append(f"handed {piece}")
        got.append(piece)
    assert got == list(range(n))
    assert log.count("released") == 1 and not turn.held
    at = log.index("released")
    if n:
        assert log.index(f"made {n - 1}") < at < log.index(f"handed {n - 1}")
        assert log[at + 1] == f"handed {n - 1}"
    assert clock[0] >= 0.0


def test_the_turn_goes_back_when_the_writing_stops_early_or_the_producer_fails():
    log = []
    turn = _Turn(log)
    gen = task._timed(_pieces(5, log), [0.0], turn)
    assert next(gen) == 0 and turn.held
    gen.close()  # the writer failed: write_partition stops pulling
    assert not turn.held

    def broken():
        yield 0
        raise RuntimeError("kernel failed")

    turn = _Turn([])
    with pytest.raises(RuntimeError, match="kernel failed"):
        list(task._timed(broken(), [0.0], turn))
    assert not turn.held


def test_without_a_turn_the_pieces_pass_unchanged_and_none_is_made_ahead():
    log = []
    for piece in task._timed(_pieces(3, log), [0.0], None):
        log.append(f"handed {piece}")
    assert log == ["made 0", "handed 0", "made 1", "handed 1", "made 2", "handed 2"]
