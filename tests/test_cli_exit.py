"""The ``daskjoin`` command's exit: fast (no interpreter teardown) only after success in this process alone."""
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


@pytest.mark.parametrize("rc, setting, distributed, how", [
    (0, True, False, "fast"),
    (1, True, False, "normal"),  # a failure leaves the normal way (its cleanup may matter)
    (2, True, False, "normal"),
    (0, False, False, "normal"),  # daskjoin.fast-exit off
    (0, True, True, "normal"),  # a cluster or scheduler was used: its exit-time hooks must run
])
def test_leave_is_fast_only_after_success_in_this_process_alone(exits, monkeypatch, rc, setting, distributed, how):
    monkeypatch.setattr(cli, "_used_distributed", lambda: distributed)
    with dask.config.set({"daskjoin.fast-exit": setting}):
        try:
            cli.leave(rc)
        except _Left as left:
            got = (left.how, left.code)
        except SystemExit as exc:
            got = ("normal", exc.code)
    assert got == (how, rc)


def test_distributed_imported_means_a_normal_exit(monkeypatch):
    """Every cluster, scheduler client or look for a current client imports distributed; an in-process run does not."""
    monkeypatch.setitem(sys.modules, "distributed", sys.modules.get("distributed", object()))
    assert cli._used_distributed() is True
    monkeypatch.delitem(sys.modules, "distributed")
    assert cli._used_distributed() is False


def test_an_in_process_join_does_not_import_distributed(tmp_path):
    """The fast exit's premise: a join run in the command's own process never imports distributed."""
    store = tmp_path / "p.zarr"
    subprocess.run([sys.executable, "-m", "daskjoin", "synth", "uniform", "--n", "2000", "--d", "2", str(store)],
                   check=True, capture_output=True)
    code = ("import sys; from daskjoin.cli import main; "
            f"rc = main(['join', {str(store)!r}, '--eps', '0.05', '--out', {str(tmp_path / 'o.parquet')!r}, "
            "'--quiet']); print('distributed' in sys.modules, rc)")
    env = {k: v for k, v in os.environ.items() if k not in ("DASKJOIN_SCHEDULER", "DASK_SCHEDULER_ADDRESS")}
    got = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env)
    assert got.stdout.strip().splitlines()[-1] == "False 0"


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
