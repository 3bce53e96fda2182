"""The ``daskjoin`` command line, run as real subprocesses (``python -m daskjoin ...``).

Successful runs are compared with the oracle on the same data (read back with
zarr and pyarrow).  Bad input must exit with code 2, print one clear line on
stderr and create no output.  Independent subprocesses of a test run
concurrently to keep the suite fast.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import zarr

import daskjoin as dj
from joinhelpers import check_frame, frame_triple, oracle, write_zarr
from oracle import assert_same_pairs, oracle_cross_count, oracle_self_count

from clihelpers import _env, _explain, run_cli, run_many

pytestmark = pytest.mark.integration

def _stderr_lines(proc):
    return [line for line in proc.stderr.splitlines() if line.strip()]


# --------------------------------------------------------------------------- data made by the CLI itself


@pytest.fixture(scope="module")
def work(tmp_path_factory, cluster, client):
    """A directory with Zarr inputs written by ``daskjoin synth`` and by zarr (for bad inputs)."""
    d = tmp_path_factory.mktemp("cli")
    jobs = {
        "x": ["synth", "uniform", "x.zarr", "--n", 2500, "--d", 2, "--seed", 3, "--chunk-rows", 300],
        "y": ["synth", "clusters", "y.zarr", "--n", 1500, "--d", 2, "--seed", 4, "--chunk-rows", 250],
        "z": ["synth", "expo", "z3.zarr", "--n", 400, "--d", 3, "--seed", 5],
    }
    results = run_many(jobs, d)
    for key, proc in results.items():
        assert proc.returncode == 0, _explain(proc)
        assert "wrote" in proc.stdout
    rng = np.random.default_rng(0)
    write_zarr(d / "one_d.zarr", rng.random(50), 10)
    write_zarr(d / "three_d.zarr", rng.random((6, 4, 2)), 2)
    zarr.create_array(store=str(d / "complex.zarr"), shape=(10, 2), chunks=(5, 2), dtype="complex128")
    zarr.create_array(store=str(d / "strings.zarr"), shape=(10, 2), chunks=(5, 2), dtype=str)
    g = zarr.open_group(str(d / "group.zarr"), mode="w")
    g.create_array("points", shape=(10, 2), dtype="f8")
    bad = rng.random((2000, 2))
    bad[1234, 0] = np.nan
    bad[1500, 1] = np.inf
    write_zarr(d / "nan.zarr", bad, 500)
    bad = rng.random((800, 2)).astype(np.float32)
    bad[799, 1] = -np.inf
    write_zarr(d / "inf.zarr", bad, 100)
    (d / "existing.parquet").mkdir()
    (d / "existing.parquet" / "keep.txt").write_text("precious")
    return d


def _load(path):
    return zarr.open_array(str(path), mode="r")[:]


def _read_parquet_dir(path):
    names = sorted(n for n in os.listdir(path) if n.startswith("part-") and n.endswith(".parquet"))
    frames = [pq.read_table(os.path.join(path, n)).to_pandas() for n in names]
    return pd.concat(frames, ignore_index=True) if frames else None, names


# --------------------------------------------------------------------------- successful runs


def test_synth_writes_the_documented_data(work):
    from daskjoin.io.synth import generate

    x = zarr.open_array(str(work / "x.zarr"), mode="r")
    assert x.shape == (2500, 2) and x.chunks == (300, 2) and x.dtype == np.float32
    assert np.array_equal(x[:], generate("uniform", 2500, 2, seed=3))
    y = zarr.open_array(str(work / "y.zarr"), mode="r")
    assert np.array_equal(y[:], generate("clusters", 1500, 2, seed=4))


def test_join_out_local_cluster_matches_oracle(work, tmp_path):
    """Default: a local cluster started by the CLI; Parquet read back equals the oracle."""
    x = _load(work / "x.zarr")
    out = tmp_path / "pairs.parquet"
    proc = run_cli(["join", work / "x.zarr", "--eps", "0.03", "--out", out, "--memory-budget", "64KiB", "--quiet"],
                   tmp_path)
    assert proc.returncode == 0, _explain(proc)
    expected = oracle(x, None, 0.03)
    n = expected[0].size
    assert f"{n:,} pairs" in proc.stdout and str(out) in proc.stdout
    got, names = _read_parquet_dir(out)
    check_frame(got, selfjoin=True)
    assert_same_pairs(frame_triple(got), expected, a=x, eps=0.03)
    manifest = json.loads((out / "_SUCCESS").read_text())
    assert manifest["rows"] == n and sorted(e["file"] for e in manifest["files"]) == names
    assert len(names) > 1  # the budget split the join


def test_join_out_cross_with_scheduler(work, tmp_path, cluster, client):
    """``--scheduler ADDRESS`` runs the join on that cluster."""
    x, y = _load(work / "x.zarr"), _load(work / "y.zarr")
    out = tmp_path / "xy.parquet"
    proc = run_cli(["join", work / "x.zarr", work / "y.zarr", "--eps", "0.02", "--out", out, "--partitioning",
                    "slabs", "--memory-budget", "48KiB", "--scheduler", cluster.scheduler_address], tmp_path)
    assert proc.returncode == 0, _explain(proc)
    got, names = _read_parquet_dir(out)
    check_frame(got, selfjoin=False)
    assert_same_pairs(frame_triple(got), oracle(x, y, 0.02), a=x, b=y, eps=0.02)
    ran_here = client.run_on_scheduler(lambda dask_scheduler: "partition_to_parquet" in dask_scheduler.task_prefixes)
    assert ran_here, "the tasks did not run on the given scheduler"


def test_join_count_prints_exact_count(work, tmp_path, cluster):
    """``--count`` prints the exact count alone on stdout (both methods, self and A×B, DASKJOIN_SCHEDULER)."""
    x, y = _load(work / "x.zarr"), _load(work / "y.zarr")
    addr = ["--scheduler", cluster.scheduler_address]
    jobs, expected = {}, {}
    for method in ("grid", "brute", "szl"):
        jobs[f"self-{method}"] = ["join", work / "x.zarr", "--eps", "0.025", "--count", "--method", method, *addr]
        expected[f"self-{method}"] = oracle_self_count(x, 0.025)
        jobs[f"cross-{method}"] = ["join", work / "x.zarr", work / "y.zarr", "--eps", "0.02", "--count", "--method",
                                   method, "--memory-budget", "32KiB", "--partitioning", "slabs", *addr]
        expected[f"cross-{method}"] = oracle_cross_count(x, y, 0.02)
    # a method's own options (--option KEY=VALUE) change the work only
    jobs["self-unicomp"] = ["join", work / "x.zarr", "--eps", "0.025", "--count", "--method", "grid",
                            "--option", "pattern=unicomp", *addr]
    expected["self-unicomp"] = oracle_self_count(x, 0.025)
    jobs["self-szl-options"] = ["join", work / "x.zarr", "--eps", "0.025", "--count", "--method", "szl",
                                "--option", "lists=2", "--option", "shifts=random", *addr]
    expected["self-szl-options"] = oracle_self_count(x, 0.025)
    results = run_many(jobs, tmp_path, workers=4)
    results["env"] = run_cli(["join", work / "y.zarr", "--eps", "0.01", "--count", "--quiet"], tmp_path,
                             env=_env(DASKJOIN_SCHEDULER=cluster.scheduler_address))
    expected["env"] = oracle_self_count(y, 0.01)
    for key, proc in results.items():
        assert proc.returncode == 0, key + "\n" + _explain(proc)
        assert proc.stdout == f"{expected[key]}\n", key + "\n" + _explain(proc)  # the count and nothing else
        assert f"{expected[key]:,} pairs counted" in proc.stderr
    assert not list(tmp_path.iterdir()), "--count must write nothing"


def test_join_no_distance_and_overwrite(work, tmp_path, cluster):
    x = _load(work / "x.zarr")
    out = tmp_path / "p.parquet"
    out.mkdir()
    (out / "part-00042.parquet").write_text("old")  # an old daskjoin output: replaced whole
    proc = run_cli(["join", work / "x.zarr", "--eps", "0.02", "--out", out, "--no-distance", "--overwrite",
                    "--scheduler", cluster.scheduler_address], tmp_path)
    assert proc.returncode == 0, _explain(proc)
    assert not (out / "part-00042.parquet").exists()
    got, names = _read_parquet_dir(out)
    assert list(got.columns) == ["i", "j"]
    assert_same_pairs((got["i"].to_numpy(), got["j"].to_numpy(), None), oracle(x, None, 0.02))


def test_plan_prints_explain(work, tmp_path, client):
    proc = run_cli(["plan", work / "x.zarr", "--eps", "0.03", "--memory-budget", "64KiB", "--partitioning", "slabs",
                    "--method", "brute"], tmp_path)
    assert proc.returncode == 0, _explain(proc)
    plan = dj.plan_join(str(work / "x.zarr"), eps=0.03, memory_budget="64KiB", partitioning="slabs", method="brute",
                        client=client)
    text = plan.explain()
    out_lines = proc.stdout.splitlines()
    assert out_lines[0] == "daskjoin plan: ε-self-join, eps=0.03"
    # everything but the notes (built / reused sorted copy) is the same as the API's explain()
    same = [line for line in text.splitlines() if "note:" not in line]
    assert [line for line in out_lines if "note:" not in line] == same
    assert f"tasks:         {plan.ntasks}" in proc.stdout
    assert not list(tmp_path.iterdir())
    # --count plans what 'join --count' runs
    proc = run_cli(["plan", work / "x.zarr", "--eps", "0.03", "--memory-budget", "64KiB", "--count"], tmp_path)
    assert proc.returncode == 0, _explain(proc)
    counted = dj.plan_join(str(work / "x.zarr"), eps=0.03, memory_budget="64KiB", output="count", client=client)
    assert "a count holds no pairs" in proc.stdout and f"tasks:         {counted.ntasks}" in proc.stdout


@pytest.mark.parametrize("fmt", ["npy", "csv"])
def test_import_then_join(work, tmp_path, cluster, fmt):
    rng = np.random.default_rng(11)
    x = (rng.integers(0, 30, (700, 2)) * 0.5).astype(np.float64)  # ties at eps = 0.5
    if fmt == "npy":
        src = tmp_path / "pts.npy"
        np.save(src, x)
    else:
        src = tmp_path / "pts.csv"
        pd.DataFrame({"x": x[:, 0], "y": x[:, 1], "label": ["p"] * len(x)}).to_csv(src, index=False)
    proc = run_cli(["import", src, tmp_path / "pts.zarr", "--chunk-rows", "100"], tmp_path)
    assert proc.returncode == 0, _explain(proc)
    assert "imported 700 × 2" in proc.stdout
    arr = zarr.open_array(str(tmp_path / "pts.zarr"), mode="r")
    assert arr.shape == (700, 2) and arr.chunks == (100, 2)
    assert np.array_equal(arr[:], x)
    proc = run_cli(["join", tmp_path / "pts.zarr", "--eps", "0.5", "--count", "--scheduler",
                    cluster.scheduler_address], tmp_path)
    assert proc.returncode == 0, _explain(proc)
    assert proc.stdout.strip() == str(oracle_self_count(x, 0.5))


# --------------------------------------------------------------------------- bad input: exit 2, one line, nothing written

#: id -> (args, key words of the error line).  ``{w}`` is the data directory; ``{w}/OUT`` must never appear.
BAD = {
    "eps-zero": (["join", "{w}/x.zarr", "--eps", "0", "--out", "{w}/OUT"], ["eps must be a positive finite number", "0.0"]),
    "eps-negative": (["join", "{w}/x.zarr", "--eps", "-1", "--count"], ["eps must be a positive finite number", "-1.0"]),
    "eps-nan": (["join", "{w}/x.zarr", "--eps", "nan", "--out", "{w}/OUT"], ["eps must be a positive finite number", "nan"]),
    "eps-inf": (["join", "{w}/x.zarr", "--eps", "inf", "--out", "{w}/OUT"], ["eps must be a positive finite number", "inf"]),
    "dims": (["join", "{w}/x.zarr", "{w}/z3.zarr", "--eps", "0.1", "--out", "{w}/OUT"], ["same dimensionality", "2", "3"]),
    "one-d": (["join", "{w}/one_d.zarr", "--eps", "0.1", "--out", "{w}/OUT"], ["2-D", "(50,)"]),
    "three-d": (["join", "{w}/three_d.zarr", "--eps", "0.1", "--out", "{w}/OUT"], ["2-D", "(6, 4, 2)"]),
    "complex": (["join", "{w}/complex.zarr", "--eps", "0.1", "--out", "{w}/OUT"], ["real numbers", "complex128"]),
    "strings": (["join", "{w}/strings.zarr", "--eps", "0.1", "--out", "{w}/OUT"], ["real numbers", "dtype"]),
    "missing": (["join", "{w}/nope.zarr", "--eps", "0.1", "--out", "{w}/OUT"], ["no Zarr store", "nope.zarr"]),
    "missing-b": (["join", "{w}/x.zarr", "{w}/nope.zarr", "--eps", "0.1", "--count"], ["B", "no Zarr store", "nope.zarr"]),
    "group": (["join", "{w}/group.zarr", "--eps", "0.1", "--out", "{w}/OUT"], ["group, not an array", "points"]),
    "nan-row": (["join", "{w}/nan.zarr", "--eps", "0.1", "--out", "{w}/OUT"], ["NaN or inf", "row 1234"]),
    "inf-row-b": (["join", "{w}/x.zarr", "{w}/inf.zarr", "--eps", "0.1", "--out", "{w}/OUT"], ["B", "NaN or inf", "row 799"]),
    "existing-out": (["join", "{w}/x.zarr", "--eps", "0.1", "--out", "{w}/existing.parquet"],
                     ["already exists", "existing.parquet", "--overwrite"]),
    "method": (["join", "{w}/x.zarr", "--eps", "0.1", "--out", "{w}/OUT", "--method", "kdtree"],
               ["method must be one of", "kdtree"]),
    "partitioning": (["join", "{w}/x.zarr", "--eps", "0.1", "--count", "--partitioning", "rows"],
                     ["partitioning must be one of", "rows"]),
    "budget": (["join", "{w}/x.zarr", "--eps", "0.1", "--out", "{w}/OUT", "--memory-budget", "lots"],
               ["--memory-budget", "lots"]),
    "count-and-out": (["join", "{w}/x.zarr", "--eps", "0.1", "--count", "--out", "{w}/OUT"], ["--count", "--out"]),
    "neither-count-nor-out": (["join", "{w}/x.zarr", "--eps", "0.1"], ["--out", "--count"]),
    "plan-eps": (["plan", "{w}/x.zarr", "--eps", "-0.5"], ["eps must be a positive finite number"]),
    "plan-missing": (["plan", "{w}/nope.zarr", "--eps", "0.5"], ["no Zarr store", "nope.zarr"]),
    "plan-group": (["plan", "{w}/group.zarr", "--eps", "0.5"], ["group, not an array"]),
    "plan-knn-count": (["plan", "{w}/x.zarr", "--knn", "3", "--count"], ["--count", "kNN-join"]),
    "synth-kind": (["synth", "gaussian", "{w}/OUT", "--n", "10", "--d", "2"], ["unknown synthetic data kind", "gaussian"]),
    "synth-n": (["synth", "uniform", "{w}/OUT", "--n", "-3", "--d", "2"], ["n (number of points)", "-3"]),
    "synth-existing": (["synth", "uniform", "{w}/x.zarr", "--n", "10", "--d", "2"], ["already exists", "x.zarr"]),
    "import-missing": (["import", "{w}/nope.npy", "{w}/OUT"], ["nope.npy", "does not exist"]),
    "import-extension": (["import", "{w}/x.zarr/zarr.json", "{w}/OUT"], ["unknown extension", ".json"]),
}

#: The cases also run as real subprocesses (the rest run in-process through ``daskjoin.cli.main``).
SUBPROCESS_BAD = ["eps-zero", "dims", "one-d", "complex", "missing", "group", "nan-row", "existing-out",
                  "method", "plan-missing", "synth-kind", "import-missing"]


def _bad_args(key, work, scheduler=None):
    args, _ = BAD[key]
    args = [a.format(w=work).replace("/OUT", f"/out-{key}") for a in args]
    if scheduler and args[0] in ("join", "plan"):
        args += ["--scheduler", scheduler]
    return args


def _check_refusal(key, work, rc, out, err):
    _, words = BAD[key]
    assert rc == 2, f"rc={rc}\nstdout: {out}\nstderr: {err}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got:\n{err}"
    assert lines[0].startswith("daskjoin: error: ")
    for word in words:
        assert word in lines[0], f"{word!r} not in {lines[0]!r}"
    assert out == ""
    assert not (work / f"out-{key}").exists()
    assert not [p.name for p in work.iterdir() if ".tmp-" in p.name or p.name.startswith("out-")]
    assert (work / "existing.parquet" / "keep.txt").read_text() == "precious"
    assert sorted(p.name for p in (work / "existing.parquet").iterdir()) == ["keep.txt"]


@pytest.mark.parametrize("key", sorted(BAD))
def test_bad_input_in_process(work, client, capsys, key):
    """``daskjoin.cli.main`` (in this process, on the session cluster): 2, one line, nothing written."""
    from daskjoin.cli import main

    capsys.readouterr()
    rc = main(_bad_args(key, work))
    captured = capsys.readouterr()
    _check_refusal(key, work, rc, captured.out, captured.err)


@pytest.fixture(scope="module")
def bad_runs(work, cluster):
    """The SUBPROCESS_BAD cases run once, concurrently, against the session cluster."""
    return run_many({key: _bad_args(key, work, cluster.scheduler_address) for key in SUBPROCESS_BAD}, work)


@pytest.mark.parametrize("key", SUBPROCESS_BAD)
def test_bad_input_subprocess(work, bad_runs, key):
    proc = bad_runs[key]
    _check_refusal(key, work, proc.returncode, proc.stdout, proc.stderr)


ARG_ERRORS = {
    "eps-not-a-number": (["join", "x.zarr", "--eps", "abc", "--count"], ["--eps", "invalid float value", "abc"]),
    "eps-missing": (["join", "x.zarr", "--count"], ["--eps", "required"]),
    "backend-unknown": (["join", "x.zarr", "--eps", "0.1", "--count", "--backend", "tpu"],
                        ["backend must be one of", "tpu"]),
    "unknown-command": (["frobnicate"], ["invalid choice", "frobnicate"]),
    "synth-n-not-int": (["synth", "uniform", "out-argerr", "--n", "ten", "--d", "2"], ["--n", "invalid int value"]),
}
HELP = {f"help-{c}": ([c, "--help"] if c else ["--help"]) for c in ("", "join", "plan", "synth", "import")}


@pytest.fixture(scope="module")
def quick_runs(work):
    """Argument errors and --help of every command, run concurrently."""
    jobs = {k: args for k, (args, _) in ARG_ERRORS.items()}
    jobs.update(HELP)
    return run_many(jobs, work)


@pytest.mark.parametrize("key", sorted(ARG_ERRORS))
def test_argument_errors_exit_2(work, quick_runs, key):
    proc = quick_runs[key]
    assert proc.returncode == 2, _explain(proc)
    last = _stderr_lines(proc)[-1]
    assert "error:" in last
    for word in ARG_ERRORS[key][1]:
        assert word in last, f"{word!r} not in {last!r}"
    assert not (work / "out-argerr").exists()


@pytest.mark.parametrize("key", sorted(HELP))
def test_help(quick_runs, key):
    proc = quick_runs[key]
    assert proc.returncode == 0, _explain(proc)
    assert "Example" in proc.stdout
    command = HELP[key][0] if len(HELP[key]) == 2 else None
    if command is not None:
        assert f"daskjoin {command} " in proc.stdout.split("Example")[-1]
    else:
        for c in ("join", "plan", "synth", "import"):
            assert f"daskjoin {c} " in proc.stdout
    assert proc.stderr == ""


# --------------------------------------------------------------------------- relative paths on a cluster


def test_relative_input_path_with_scheduler(work, cluster):
    proc = run_cli(["join", "x.zarr", "--eps", "0.02", "--count", "--scheduler", cluster.scheduler_address], work)
    assert proc.returncode == 0, _explain(proc)
    assert proc.stdout.strip() == str(oracle_self_count(_load(work / "x.zarr"), 0.02))


# --------------------------------------------------------------------------- refused before connecting to a cluster

BEFORE_CONNECT = ["eps-negative", "missing", "dims", "method", "plan-missing", "existing-out", "count-and-out"]


@pytest.fixture(scope="module")
def unreachable_runs(work):
    jobs = {key: _bad_args(key, work, "tcp://127.0.0.1:1") for key in BEFORE_CONNECT}
    return run_many(jobs, work, env=_env(DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="2s"))


@pytest.mark.parametrize(
    "key", BEFORE_CONNECT
)
def test_bad_input_refused_before_connecting(work, unreachable_runs, key):
    """Bad input must be refused before any work, including connecting to a scheduler."""
    proc = unreachable_runs[key]
    _check_refusal(key, work, proc.returncode, proc.stdout, proc.stderr)


def test_rmm_pool_needs_the_local_cuda_cluster(work):
    proc = run_cli(["join", "x.zarr", "--eps", "0.1", "--count", "--rmm-pool-size", "4GB"], work)
    assert proc.returncode == 2, _explain(proc)
    assert "--rmm-pool-size needs --cluster local-cuda" in proc.stderr and "Traceback" not in proc.stderr
