"""The CLI as a careless or unlucky user meets it: inputs kept, signals, two writers, one-line errors.

Every case runs the real ``daskjoin`` command as a subprocess on real Zarr stores.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from clihelpers import _env, _explain, run_cli, run_many
from daskjoin.io import commit
from joinhelpers import tree_bytes, write_zarr

pytestmark = pytest.mark.integration


def _leftovers(folder) -> list[str]:
    return sorted(name for name in os.listdir(folder) if commit.TEMP_MARK in name or name.endswith(".lock"))


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A store whose join takes some seconds on this machine (for signals mid-run)."""
    folder = tmp_path_factory.mktemp("big")
    x = np.random.default_rng(3).random((1_500_000, 3), dtype=np.float32)
    return write_zarr(folder / "p.zarr", x, 100_000)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    folder = tmp_path_factory.mktemp("small")
    x = np.random.default_rng(4).random((4000, 2))
    return x, write_zarr(folder / "s.zarr", x, 500)


@pytest.mark.parametrize("where", ["same", "inside", "parent"])
def test_output_over_the_input_exits_2_untouched(small, tmp_path, where):
    _, path = small
    out = {"same": path, "inside": os.path.join(path, "out"), "parent": os.path.dirname(path)}[where]
    before = tree_bytes(os.path.dirname(path))
    proc = run_cli(["join", path, "--eps", "0.01", "--out", out, "--overwrite"], tmp_path)
    assert proc.returncode == 2, _explain(proc)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "a join never writes into or replaces what it reads" in lines[0], _explain(proc)
    assert tree_bytes(os.path.dirname(path)) == before


def _start(args, cwd, **env):
    return subprocess.Popen([sys.executable, "-m", "daskjoin", *map(str, args)], cwd=str(cwd), env=_env(**env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _wait_for_staging(folder, proc, timeout=120) -> None:
    """Until the run holds its output (its staging directory exists): then it is mid-run."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if any(".tmp-run-" in name for name in os.listdir(folder)):
            time.sleep(0.5)  # well inside planning or the tasks
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("the run never started writing")


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_prints_one_line_and_leaves_nothing(big, tmp_path, sig, code):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) and SIGTERM mid-run."""
    out = tmp_path / "pairs.parquet"
    proc = _start(["join", big, "--eps", "0.02", "--out", out], tmp_path)
    _wait_for_staging(tmp_path, proc)
    os.killpg(proc.pid, sig)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, (stdout, stderr)
    # the progress bar redraws its line with carriage returns (and clears it when interrupted); text
    # mode turns those into line ends, so its lines are told by their form ("joining:  33%|...")
    bar = re.compile(r"^\s*(joining|counting):\s+\d+%\|")
    lines = [line for line in stderr.splitlines() if line.strip() and not bar.match(line)]
    assert len(lines) == 1 and lines[0].startswith("daskjoin: interrupted; nothing was committed"), stderr
    assert "Traceback" not in stderr
    assert not out.exists()
    # interrupted once its tasks began, the run keeps its staging directory for --resume, and says so
    resumable = re.fullmatch(r".* \(\d+ of \d+ partitions finished: the same command with --resume continues it\)",
                             lines[0])
    kept = [name for name in _leftovers(tmp_path) if ".tmp-run-" in name]
    assert _leftovers(tmp_path) == kept and len(kept) == (1 if resumable else 0), (lines, _leftovers(tmp_path))


def test_sigkill_leftovers_are_removed_by_the_next_run(small, big, tmp_path):
    out = tmp_path / "pairs.parquet"
    proc = _start(["join", big, "--eps", "0.02", "--out", out, "--quiet"], tmp_path)
    _wait_for_staging(tmp_path, proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert not out.exists()  # nothing half-written at the output path
    x, path = small
    done = run_cli(["join", path, "--eps", "0.01", "--out", out, "--quiet"], tmp_path)
    assert done.returncode == 0, _explain(done)
    assert (out / "_SUCCESS").exists() and _leftovers(tmp_path) == []


def test_two_cli_writers_never_leave_a_mixed_output(small, tmp_path):
    x, path = small
    out = tmp_path / "pairs.parquet"
    from scipy.spatial import cKDTree

    tree = cKDTree(x)
    for trial in range(2):
        jobs = {eps: ["join", path, "--eps", eps, "--out", out, "--overwrite", "--quiet", "--memory-budget", "64KiB"]
                for eps in ("0.02", "0.03")}
        results = run_many(jobs, tmp_path, workers=2)
        ok = [eps for eps, p in results.items() if p.returncode == 0]
        assert ok, {k: _explain(p) for k, p in results.items()}
        for eps, p in results.items():
            if p.returncode:
                assert p.returncode == 2 and "being written by another daskjoin run" in p.stderr, _explain(p)
        manifest = json.loads((out / "_SUCCESS").read_text())
        import pandas as pd

        got = pd.read_parquet(out)
        assert len(got) == manifest["rows"] == len(tree.query_pairs(manifest["eps"]))
        assert not got.duplicated(["i", "j"]).any()
        assert _leftovers(tmp_path) == []


@pytest.fixture
def read_only_dir(tmp_path):
    """A directory this process cannot write: a read-only mount as root, else a chmod."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() == 0:
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "none", str(folder)], capture_output=True)
        if proc.returncode != 0:
            pytest.skip(f"running as root and cannot mount a read-only tmpfs: {proc.stderr.decode().strip()}")
        yield folder
        subprocess.run(["umount", str(folder)], check=False)
    else:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)


def test_read_only_output_directory_exits_2_before_any_work(small, tmp_path, read_only_dir):
    _, path = small
    proc = run_cli(["join", path, "--eps", "0.01", "--out", read_only_dir / "pairs.parquet"], tmp_path)
    assert proc.returncode == 2, _explain(proc)
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "not writable" in proc.stderr and "Traceback" not in proc.stderr


def test_busy_dashboard_port_prints_no_warning(small, tmp_path):
    x, path = small
    sock = socket.socket()
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", 8787))
        except OSError:
            pass  # already busy: the case under test anyway
        sock.listen()
        proc = run_cli(["join", path, "--eps", "0.01", "--count", "--quiet"], tmp_path)
    finally:
        sock.close()
    assert proc.returncode == 0, _explain(proc)
    assert "8787" not in proc.stderr and "Warning" not in proc.stderr, proc.stderr


def test_task_failure_is_one_line_naming_the_partition(small, tmp_path):
    """A failure inside a task: one line with the partition and the log file; --verbose adds the traceback."""
    _, path = small
    bad = dict(DASK_DASKJOIN__ROW_GROUP_BYTES="not-a-size")  # read by each task as it writes its part
    proc = run_cli(["join", path, "--eps", "0.01", "--out", tmp_path / "o.parquet", "--quiet"], tmp_path,
                   env=_env(**bad))
    assert proc.returncode == 1, _explain(proc)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("daskjoin: failed: ValueError") and "in partition 0 (rows [0, " in lines[0]
    log = lines[0].split("traceback in ")[1].split(" ")[0].rstrip(";")
    assert "Traceback" in open(log).read()
    os.remove(log)
    assert not (tmp_path / "o.parquet").exists() and _leftovers(tmp_path) == []
    verbose = run_cli(["join", path, "--eps", "0.01", "--out", tmp_path / "o.parquet", "--quiet", "--verbose"],
                      tmp_path, env=_env(**bad))
    assert verbose.returncode == 1 and "Traceback" in verbose.stderr
    os.remove(verbose.stderr.strip().splitlines()[-1].split("traceback in ")[1].split(" ")[0].rstrip(";"))


def test_concurrent_cli_joins_of_a_fresh_input_build_its_caches_once(tmp_path):
    """Two processes join a store nobody joined before: statistics and sorted copy built once, both exact."""
    from scipy.spatial import cKDTree

    x = np.random.default_rng(9).random((6000, 3))
    path = write_zarr(tmp_path / "fresh.zarr", x, 400)
    jobs = {k: ["join", path, "--eps", "0.05", "--count", "--quiet", "--partitioning", "slabs",
                "--memory-budget", "128KiB"] for k in ("first", "second")}
    results = run_many(jobs, tmp_path, workers=2)
    expected = len(cKDTree(x).query_pairs(0.05))
    for key, proc in results.items():
        assert proc.returncode == 0, key + _explain(proc)
        assert int(proc.stdout.split()[0]) == expected
    cache = path + ".daskjoin"
    names = sorted(os.listdir(cache))
    assert len([n for n in names if n.startswith("stats-")]) == 1
    assert len([n for n in names if n.startswith("sorted-")]) == 1
    assert _leftovers(cache) == [] and _leftovers(tmp_path) == []
