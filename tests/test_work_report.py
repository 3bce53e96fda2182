"""The work report (``daskjoin.profile_work``, ``daskjoin plan --profile``): candidates per query point."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import daskjoin as dj
from daskjoin.kernels import get_kernel

CPU_METHODS = ["grid", "brute", "szl", "nlj", "directory"]


def _points(n=3000, d=3, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.random((20, d))
    return np.concatenate([rng.random((n // 2, d)), centres[rng.integers(0, 20, n - n // 2)] + rng.normal(0, 0.01, (n - n // 2, d))])


@pytest.mark.parametrize("method", CPU_METHODS)
@pytest.mark.parametrize("mode", ["self", "cross"])
def test_work_bounds_the_pairs(method, mode):
    """Every pair is one of its query's candidates: per query the candidates are at least its pairs, and at
    most what a nested loop decides."""
    x = _points()
    b = None if mode == "self" else _points(2000, seed=1)
    driver = get_kernel(method, "cpu")._join(x, b, 0.03)
    work = np.asarray(driver.work())
    assert work.shape == (len(x),)
    assert work.min() >= 0
    assert work.sum() >= driver.count() > 0
    most = (len(x) - 1) if b is None else len(b)
    assert work.max() <= most


def test_nested_loop_work_is_every_later_row():
    x = _points(500)
    work = np.asarray(get_kernel("nlj", "cpu")._join(x, None, 0.03).work())  # brute's products screen from 3-d
    assert work.sum() == 500 * 499 // 2


def test_grid_prunes_and_szl_reads_its_intervals():
    x = _points()
    grid = dj.profile_work(x, eps=0.03, method="grid")
    nested = dj.profile_work(x, eps=0.03, method="nlj")
    assert grid.pairs == nested.pairs
    assert grid.mean < nested.mean / 10  # the grid decides a small share of the nested loop's candidates
    driver = get_kernel("szl", "cpu")._join(x, None, 0.03)
    np.testing.assert_array_equal(driver.work(), driver.last - driver.first)


def test_profile_samples_rows_and_describes():
    x = _points(4000)
    report = dj.profile_work(x, eps=0.03, method="grid", rows=1000)
    assert report.queries == 1000 and report.rows == 1000
    text = report.describe()
    assert "median" in text and "p99" in text and "grid on cpu" in text


def test_plan_profile_on_the_command_line(tmp_path):
    subprocess.run([sys.executable, "-m", "daskjoin", "synth", "uniform", str(tmp_path / "p.zarr"), "--n", "20000",
                    "--d", "2"], check=True, capture_output=True)
    out = subprocess.run([sys.executable, "-m", "daskjoin", "plan", str(tmp_path / "p.zarr"), "--eps", "0.01",
                          "--method", "szl", "--backend", "cpu", "--profile", "5000"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("work per query point (szl on cpu, 5,000 queries") and "the first 5,000 rows" in last


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["grid", "szl", "nlj"])
def test_gpu_work_bounds_the_pairs(method):
    x = _points()
    driver = get_kernel(method, "gpu")._join(x, None, 0.03)
    work = np.asarray(driver.work())
    assert work.shape == (len(x),) and work.sum() >= driver.count() > 0


@pytest.mark.parametrize("options", [{"filter": "int8"}, {"no_such_option": 1}])
def test_profile_refuses_options_the_driver_does_not_take(options):
    """A GPU-only filter or an unknown option on the CPU driver: an InputError naming them, not a traceback."""
    from daskjoin.validation import InputError

    with pytest.raises(InputError, match="profile_work: brute on cpu"):
        dj.profile_work(_points(300, d=16), eps=0.3, method="brute", **options)
