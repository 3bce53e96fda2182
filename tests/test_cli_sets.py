"""``daskjoin import-sets`` and ``daskjoin setjoin`` run as real subprocesses (``python -m daskjoin ...``).

Successful runs are compared with the exact set oracle on the files the test
wrote (parsed here, without daskjoin).  Bad input must exit with code 2, print
one line on stderr (no traceback) and write nothing.  Independent subprocesses
of a test run concurrently to keep the suite fast.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from set_cases import zipf_sets
from set_oracle import assert_same_set_pairs, oracle_join

from clihelpers import _env, _explain, run_cli
from clihelpers import run_many as _run_many

pytestmark = pytest.mark.integration


def run_many(jobs, cwd, *, env=None, workers=4):
    return _run_many(jobs, cwd, env=env, workers=workers)

def _parse_text(path, sep=None):
    lines = Path(path).read_text(encoding="utf-8").split("\n")[:-1]
    if sep is None:
        return [line.split() for line in lines]
    return [[t.strip() for t in line.split(sep) if t.strip()] for line in lines]


def _read_parts(path):
    names = sorted(n for n in os.listdir(path) if n.startswith("part-") and n.endswith(".parquet"))
    if not names:
        return pd.DataFrame({"i": np.empty(0, np.int64), "j": np.empty(0, np.int64), "sim": np.empty(0)}), names
    return pd.concat([pq.read_table(os.path.join(path, n)).to_pandas() for n in names], ignore_index=True), names


# --------------------------------------------------------------------------- data imported by the CLI itself


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """Text and Parquet inputs, and the stores ``daskjoin import-sets`` made from them."""
    d = tmp_path_factory.mktemp("cli_sets")
    words = [[f"t{t}" for t in s] for s in zipf_sets(900, seed=91, vocab=700, max_size=25, exponent=1.2)]
    words[3] = []
    words[10] = words[11] + words[11][:1]  # a duplicate set with a repeated token
    (d / "docs.txt").write_text("".join(" ".join(ws) + "\n" for ws in words), encoding="utf-8")
    other = [[f"t{t}" for t in s] for s in zipf_sets(300, seed=92, vocab=700, max_size=25, exponent=1.2)]
    (d / "other.csv").write_text("".join(" , ".join(ws) + "\n" for ws in other), encoding="utf-8")
    ints = zipf_sets(400, seed=93, vocab=300, max_size=20)
    pq.write_table(pa.table({"items": pa.array(ints, type=pa.list_(pa.int64()))}), d / "baskets.parquet")
    (d / "existing.parquet").mkdir()
    (d / "existing.parquet" / "keep.txt").write_text("precious")
    from joinhelpers import write_zarr

    write_zarr(d / "points.zarr", np.zeros((6, 2)), 3)  # an ε-join array, not a set store
    jobs = {
        "docs": ["import-sets", "docs.txt", "docs.zarr"],
        "other": ["import-sets", "other.csv", "other.zarr", "--format", "text", "--sep", ","],
        "baskets": ["import-sets", "baskets.parquet", "baskets.zarr", "--format", "parquet", "--column", "items"],
    }
    runs = run_many(jobs, d)
    return {"dir": d, "imports": runs, "docs": _parse_text(d / "docs.txt"), "other": _parse_text(d / "other.csv", ","),
            "baskets": ints}


@pytest.mark.parametrize("key, n", [("docs", 900), ("other", 300), ("baskets", 400)])
def test_import_sets(work, key, n):
    from daskjoin.io.sets_in import open_sets

    proc = work["imports"][key]
    assert proc.returncode == 0, _explain(proc)
    assert f"imported {n:,} sets" in proc.stdout, proc.stdout
    coll = open_sets(str(work["dir"] / f"{key}.zarr"))
    assert len(coll) == n
    stored = {int(i): set(coll.original_tokens(k).tolist()) for k, i in enumerate(coll.ids.tolist())}
    assert stored == {k: set(s) for k, s in enumerate(work[key])}


# --------------------------------------------------------------------------- setjoin


def test_setjoin_out_matches_oracle(work, tmp_path, cluster):
    expected = oracle_join(work["docs"], threshold=0.6, measure="jaccard")
    assert len(expected) > 50
    out = tmp_path / "pairs.parquet"
    proc = run_cli(["setjoin", work["dir"] / "docs.zarr", "--measure", "jaccard", "--threshold", "0.6", "--out", out,
                    "--partitions", "3", "--scheduler", cluster.scheduler_address, "--quiet"], tmp_path)
    assert proc.returncode == 0, _explain(proc)
    assert f"{len(expected):,} pairs" in proc.stdout and str(out) in proc.stdout, proc.stdout
    got, names = _read_parts(out)
    assert_same_set_pairs(got, expected, selfjoin=True)
    manifest = json.loads((out / "_SUCCESS").read_text())
    assert manifest["rows"] == len(expected) and sorted(e["file"] for e in manifest["files"]) == names


def test_setjoin_cross_out_local_cluster(work, tmp_path):
    """No --scheduler: the CLI starts (and stops) its own local cluster."""
    expected = oracle_join(work["docs"], work["other"], threshold=0.5, measure="cosine")
    assert len(expected) > 20
    out = tmp_path / "cross.parquet"
    proc = run_cli(["setjoin", work["dir"] / "docs.zarr", work["dir"] / "other.zarr", "--measure", "cosine",
                    "--threshold", "0.5", "--out", out, "--algorithm", "allpairs", "--backend", "cpu", "--quiet"],
                   tmp_path)
    assert proc.returncode == 0, _explain(proc)
    assert f"{len(expected):,} pairs" in proc.stdout
    assert_same_set_pairs(_read_parts(out)[0], expected)


COUNTS = {
    "jaccard-self": (["docs"], "jaccard", "0.8", []),
    "dice-self-allpairs": (["docs"], "dice", "0.5", ["--algorithm", "allpairs", "--partitions", "7"]),
    "overlap-self": (["baskets"], "overlap", "4", []),
    "cosine-cross": (["docs", "other"], "cosine", "0.4", ["--backend", "cpu", "--partitions", "2"]),
    "jaccard-cross-tie": (["baskets", "baskets"], "jaccard", "1.0", []),
    "dice-long-decimal": (["docs"], "dice", "0.6666666666666666", []),  # read as that decimal, < 2/3
}


@pytest.fixture(scope="module")
def count_runs(work, cluster):
    jobs = {}
    for key, (inputs, measure, t, extra) in COUNTS.items():
        jobs[key] = ["setjoin", *[work["dir"] / f"{x}.zarr" for x in inputs], "--measure", measure, "--threshold", t,
                     "--count", "--scheduler", cluster.scheduler_address, *extra]
    return run_many(jobs, work["dir"])


@pytest.mark.parametrize("key", sorted(COUNTS))
def test_setjoin_count(work, count_runs, key):
    inputs, measure, t, _ = COUNTS[key]
    sets = [work[x] for x in inputs]
    threshold = int(t) if measure == "overlap" else float(t)
    n = len(oracle_join(sets[0], sets[1] if len(sets) > 1 else None, threshold=threshold, measure=measure))
    proc = count_runs[key]
    assert proc.returncode == 0, _explain(proc)
    assert proc.stdout == f"{n}\n", _explain(proc)  # the count and nothing else
    assert f"{n:,} pairs" in proc.stderr
    assert "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- bad input: exit 2, one line, nothing written

#: id -> (args, key words of the error line).  ``{w}`` is the data directory; ``{w}/OUT`` must never appear.
BAD = {
    "threshold-zero": (["setjoin", "{w}/docs.zarr", "--threshold", "0", "--out", "{w}/OUT"], ["threshold", "0"]),
    "threshold-negative": (["setjoin", "{w}/docs.zarr", "--threshold", "-0.5", "--count"], ["threshold", "-0.5"]),
    "threshold-above-1": (["setjoin", "{w}/docs.zarr", "--threshold", "1.5", "--out", "{w}/OUT"], ["threshold", "1.5"]),
    "threshold-nan": (["setjoin", "{w}/docs.zarr", "--threshold", "nan", "--count"], ["threshold", "nan"]),
    "threshold-not-a-number": (["setjoin", "{w}/docs.zarr", "--threshold", "high", "--count"], ["threshold", "high"]),
    "overlap-fraction": (["setjoin", "{w}/docs.zarr", "--measure", "overlap", "--threshold", "2.5", "--count"],
                         ["overlap", "2.5"]),
    "overlap-nan": (["setjoin", "{w}/docs.zarr", "--measure", "overlap", "--threshold", "nan", "--count"],
                    ["overlap", "nan"]),
    "overlap-zero": (["setjoin", "{w}/docs.zarr", "--measure", "overlap", "--threshold", "0", "--count"],
                     ["overlap", "0"]),
    "measure": (["setjoin", "{w}/docs.zarr", "--measure", "tanimoto", "--threshold", "0.5", "--count"],
                ["measure", "tanimoto"]),
    "algorithm": (["setjoin", "{w}/docs.zarr", "--method", "mpjoin", "--threshold", "0.5", "--out", "{w}/OUT"],
                  ["method", "mpjoin"]),
    "backend": (["setjoin", "{w}/docs.zarr", "--backend", "tpu", "--threshold", "0.5", "--count"], ["backend", "tpu"]),
    "partitions": (["setjoin", "{w}/docs.zarr", "--partitions", "0", "--threshold", "0.5", "--count"],
                   ["partitions", "0"]),
    "missing-store": (["setjoin", "{w}/nope.zarr", "--threshold", "0.5", "--out", "{w}/OUT"], ["nope.zarr"]),
    "missing-b": (["setjoin", "{w}/docs.zarr", "{w}/nope.zarr", "--threshold", "0.5", "--count"], ["nope.zarr"]),
    "not-a-set-store": (["setjoin", "{w}/points.zarr", "--threshold", "0.5", "--out", "{w}/OUT"], ["points.zarr"]),
    "text-file-as-store": (["setjoin", "{w}/docs.txt", "--threshold", "0.5", "--count"], ["docs.txt"]),
    "existing-out": (["setjoin", "{w}/docs.zarr", "--threshold", "0.5", "--out", "{w}/existing.parquet"],
                     ["already exists", "existing.parquet"]),
    "count-and-out": (["setjoin", "{w}/docs.zarr", "--threshold", "0.5", "--count", "--out", "{w}/OUT"],
                      ["--count", "--out"]),
    "neither-count-nor-out": (["setjoin", "{w}/docs.zarr", "--threshold", "0.5"], ["--out", "--count"]),
    "threshold-missing": (["setjoin", "{w}/docs.zarr", "--count"], ["--threshold"]),
    "import-missing": (["import-sets", "{w}/nope.txt", "{w}/OUT"], ["nope.txt"]),
    "import-existing": (["import-sets", "{w}/docs.txt", "{w}/docs.zarr"], ["docs.zarr"]),
    "import-parquet-no-column": (["import-sets", "{w}/baskets.parquet", "{w}/OUT", "--format", "parquet"],
                                 ["--column"]),
    "import-parquet-bad-column": (["import-sets", "{w}/baskets.parquet", "{w}/OUT", "--column", "nope"], ["nope"]),
    "import-format": (["import-sets", "{w}/docs.txt", "{w}/OUT", "--format", "json"], ["json"]),
}


def _bad_args(key, work, scheduler=None):
    args, _ = BAD[key]
    args = [a.format(w=work["dir"]).replace("/OUT", f"/out-{key}") for a in args]
    if scheduler and args[0] == "setjoin":
        args += ["--scheduler", scheduler]
    return args


#: The cases also run as real subprocesses (all of them run in-process through ``daskjoin.cli.main``).
SUBPROCESS_BAD = ["threshold-zero", "threshold-not-a-number", "overlap-fraction", "not-a-set-store", "existing-out",
                  "import-parquet-no-column"]


def _check_refusal(work, key, rc, out, err):
    d = work["dir"]
    explain = f"rc={rc}\n--- stdout:\n{out}\n--- stderr:\n{err}"
    assert rc == 2, explain
    assert "Traceback" not in err, explain
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines, explain
    last = lines[-1]  # argparse prints its usage first; our own errors are one line
    assert "error:" in last, explain
    if last.startswith("daskjoin: error: "):
        assert len(lines) == 1, explain
    for word in BAD[key][1]:
        assert word in last, f"{word!r} not in {last!r}"
    assert out == ""
    assert not (d / f"out-{key}").exists()
    assert not [p.name for p in d.iterdir() if ".tmp" in p.name or p.name.startswith("out-")]
    assert sorted(p.name for p in (d / "existing.parquet").iterdir()) == ["keep.txt"]


@pytest.mark.parametrize("key", sorted(BAD))
def test_bad_input_in_process(work, client, capsys, key):
    from daskjoin.cli import main

    capsys.readouterr()
    try:
        rc = main(_bad_args(key, work))
    except SystemExit as exc:  # argparse's own errors
        rc = exc.code
    captured = capsys.readouterr()
    _check_refusal(work, key, rc, captured.out, captured.err)


@pytest.fixture(scope="module")
def bad_runs(work, cluster):
    jobs = {key: _bad_args(key, work, cluster.scheduler_address) for key in SUBPROCESS_BAD}
    return run_many(jobs, work["dir"], workers=5)


@pytest.mark.parametrize("key", SUBPROCESS_BAD)
def test_bad_input_subprocess(work, bad_runs, key):
    proc = bad_runs[key]
    _check_refusal(work, key, proc.returncode, proc.stdout, proc.stderr)


#: refused before any cluster is contacted (the scheduler address is unreachable)
BEFORE_CONNECT = ["threshold-nan", "algorithm", "not-a-set-store", "existing-out"]


@pytest.fixture(scope="module")
def unreachable_runs(work):
    jobs = {key: _bad_args(key, work, "tcp://127.0.0.1:1") for key in BEFORE_CONNECT}
    return run_many(jobs, work["dir"], env=_env(DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="2s"))


@pytest.mark.parametrize("key", BEFORE_CONNECT)
def test_bad_input_refused_before_connecting(unreachable_runs, key):
    proc = unreachable_runs[key]
    assert proc.returncode == 2, _explain(proc)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("daskjoin: error: "), _explain(proc)
    assert "Traceback" not in proc.stderr


def test_help_has_examples(work):
    runs = run_many({c: [c, "--help"] for c in ("setjoin", "import-sets")}, work["dir"])
    for c, proc in runs.items():
        assert proc.returncode == 0, _explain(proc)
        assert "Example" in proc.stdout and f"daskjoin {c} " in proc.stdout.split("Example")[-1]


def test_setplan_prints_the_plan_and_old_option_name_still_works(work, tmp_path, cluster, client):
    import daskjoin as dj

    addr = ["--scheduler", cluster.scheduler_address]
    store = work["dir"] / "docs.zarr"
    proc = run_cli(["setplan", store, "--threshold", "0.6", "--method", "allpairs", "--partitions", "3", *addr],
                   tmp_path)
    assert proc.returncode == 0, _explain(proc)
    plan = dj.plan_set_join(str(store), threshold=0.6, method="allpairs", partitions=3, client=client)
    assert proc.stdout.strip() == plan.explain()
    old = run_cli(["setjoin", store, "--threshold", "0.6", "--algorithm", "allpairs", "--count", "--quiet", *addr],
                  tmp_path)
    new = run_cli(["setjoin", store, "--threshold", "0.6", "--method", "allpairs", "--count", "--quiet", *addr],
                  tmp_path)
    assert old.returncode == new.returncode == 0 and old.stdout == new.stdout
    jobs = run_cli(["setjoin", store, "--threshold", "0.6", "--count", "--jobs", "2"], tmp_path)
    assert jobs.returncode == 2 and "--jobs 2 needs --cluster slurm or --cluster pbs" in jobs.stderr
    both = run_cli(["setjoin", store, "--threshold", "0.6", "--count", "--cluster", "slurm", *addr], tmp_path)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
