"""The ``daskjoin`` command's exit: fast (no interpreter teardown) only after success with no Dask client left."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import dask
import pytest

from daskjoin import cli


class _Left(Exception):
    def __init__(self, how: str, code: int):
        super().__init__(how, code)
        self.how, self.code = how, code


@pytest.fixture
def exits(monkeypatch):
    def fast(code):
        raise _Left("fast", code)

    monkeypatch.setattr(os, "_exit", fast)
    monkeypatch.setattr(cli, "_client_left", lambda: False)


@pytest.mark.parametrize("rc, setting, client, how", [
    (0, True, False, "fast"),
    (1, True, False, "normal"),  # a failure leaves the normal way (its cleanup may matter)
    (2, True, False, "normal"),
    (0, False, False, "normal"),  # daskjoin.fast-exit off
    (0, True, True, "normal"),  # a client still open: its connection is closed by the normal exit
])
def test_leave_is_fast_only_after_success_without_a_client(exits, monkeypatch, rc, setting, client, how):
    monkeypatch.setattr(cli, "_client_left", lambda: client)
    with dask.config.set({"daskjoin.fast-exit": setting}):
        try:
            cli.leave(rc)
        except _Left as left:
            got = (left.how, left.code)
        except SystemExit as exc:
            got = ("normal", exc.code)
    assert got == (how, rc)


def test_an_open_client_counts_as_left(monkeypatch):
    distributed = pytest.importorskip("distributed")
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=":0"):
        assert cli._client_left() is True

    def none():  # what distributed says where no client is open (this test process may hold a session's)
        raise ValueError("No clients found")

    monkeypatch.setattr(distributed, "default_client", none)
    assert cli._client_left() is False


@pytest.mark.parametrize("fast", [True, False])
def test_the_command_writes_everything_before_it_leaves(tmp_path, fast):
    """Run as a user does: stdout (the summary) and the committed output are complete either way."""
    env = dict(os.environ, DASK_DASKJOIN__FAST_EXIT=str(fast))
    store, out = tmp_path / "p.zarr", tmp_path / "pairs.parquet"
    subprocess.run([sys.executable, "-m", "daskjoin", "synth", "uniform", "--n", "3000", "--d", "2", str(store)],
                   check=True, env=env, capture_output=True)
    counted = subprocess.run([sys.executable, "-m", "daskjoin", "join", str(store), "--eps", "0.03", "--count",
                              "--quiet"], check=True, env=env, capture_output=True, text=True)
    done = subprocess.run([sys.executable, "-m", "daskjoin", "join", str(store), "--eps", "0.03", "--out", str(out),
                           "--quiet"], check=True, env=env, capture_output=True, text=True)
    n = int(counted.stdout.strip().splitlines()[-1])
    assert n > 0 and f"{n:,} pairs" in done.stdout
    with open(out / "_SUCCESS") as f:
        assert json.load(f)["rows"] == n
