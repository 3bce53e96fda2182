"""Bad input is refused before any work, with a message naming what was received and how to fix it.

Unit tests of :mod:`daskjoin.validation`, then every refusal through the public
API: an ``InputError`` (a ``ValueError``) whose message holds the key words, and
no output (nor the input's statistics cache, where no data needed reading) left behind.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import zarr

import daskjoin as dj
from daskjoin import validation as v
from joinhelpers import write_zarr

# --------------------------------------------------------------------------- unit: validation.py


@pytest.mark.parametrize("eps, expected", [(1, 1.0), (0.5, 0.5), (np.float32(0.25), 0.25), (np.int64(3), 3.0),
                                           (1e-300, 1e-300), (1e300, 1e300)])
def test_check_eps_accepts(eps, expected):
    got = v.check_eps(eps)
    assert type(got) is float and got == expected


@pytest.mark.parametrize("eps", [0, 0.0, -0.0, -1.0, float("nan"), float("inf"), -float("inf"), np.nan,
                                 np.float32("nan"), "0.1", "abc", None, True, False, [0.1], complex(1, 0)])
def test_check_eps_refuses(eps):
    with pytest.raises(v.InputError) as info:
        v.check_eps(eps)
    msg = str(info.value)
    assert "eps must be a positive finite number" in msg
    assert f"got {eps!r}" in msg
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int64", "uint16", "float16"])
def test_check_dtype_accepts(dtype):
    assert v.check_dtype(dtype, "A") == np.dtype(dtype)


@pytest.mark.parametrize("dtype", ["complex64", "complex128", "object", "<U3", "S2", "bool", "datetime64[s]",
                                   "timedelta64[s]", "V8"])
def test_check_dtype_refuses(dtype):
    with pytest.raises(v.InputError) as info:
        v.check_dtype(dtype, "A")
    msg = str(info.value)
    assert msg.startswith("A must hold real numbers") and str(np.dtype(dtype)) in msg and "astype" in msg


@pytest.mark.parametrize("shape", [(10,), (4, 5, 2), (), (3, 0), (0, 0)])
def test_check_shape_refuses(shape):
    with pytest.raises(v.InputError) as info:
        v.check_shape(shape, "B")
    msg = str(info.value)
    assert msg.startswith("B must") and str(tuple(shape)) in msg


def test_check_shape_accepts():
    assert v.check_shape((0, 3), "A") == (0, 3)
    assert v.check_shape((7, 1), "A") == (7, 1)


def test_check_same_dims():
    v.check_same_dims(3, 3)
    with pytest.raises(v.InputError, match="same dimensionality.*A with 2 columns and B with 3"):
        v.check_same_dims(2, 3)


@pytest.mark.parametrize(
    "rows, expected",
    [({}, -1), ({5: np.nan}, 5), ({7: np.inf, 3: np.nan}, 3), ({0: -np.inf}, 0), ({9: np.nan}, 9)],
)
def test_first_nonfinite_row(rows, expected):
    x = np.zeros((10, 3))
    for r, value in rows.items():
        x[r, 1] = value
    assert v.first_nonfinite_row(x) == expected
    assert v.first_nonfinite_row(x.astype(np.float32)) == expected


def test_first_nonfinite_row_ints_and_empty():
    assert v.first_nonfinite_row(np.zeros((5, 2), np.int64)) == -1
    assert v.first_nonfinite_row(np.zeros((0, 2))) == -1


def test_check_output_path(tmp_path):
    assert v.check_output_path(tmp_path / "new", False) == str(tmp_path / "new")
    (tmp_path / "old").mkdir()
    with pytest.raises(v.InputError, match="already exists.*overwrite"):
        v.check_output_path(tmp_path / "old", False)
    assert v.check_output_path(tmp_path / "old", True) == str(tmp_path / "old")
    with pytest.raises(v.InputError, match="does not exist"):
        v.check_output_path(tmp_path / "a" / "b", False)


# --------------------------------------------------------------------------- through the API


def _good(n=200, d=2, seed=0):
    return np.random.default_rng(seed).random((n, d))


def _with_bad(kind, n=500, d=3, seed=1):
    """An array whose first non-finite row is returned with it."""
    x = np.random.default_rng(seed).random((n, d))
    if kind == "nan":
        x[301, 2] = np.nan
        x[137, 0] = np.nan
        first = 137
    elif kind == "inf":
        x[450, 1] = np.inf
        first = 450
    elif kind == "-inf":
        x[499, 0] = -np.inf
        first = 499
    elif kind == "mixed":
        x[200, 0] = np.inf
        x[64, 1] = np.nan  # first row of the second chunk (chunks of 64 rows)
        first = 64
    else:
        x[0] = np.nan
        first = 0
    return x, first


def _assert_clean(tmp_path, out, inputs=()):
    assert not os.path.exists(out), f"output {out} was created by a refused join"
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".") or "tmp" in p.name]
    assert not leftovers, leftovers
    for path in inputs:
        cache = str(path).rstrip(os.sep) + ".daskjoin"
        assert not os.path.exists(cache), f"refused before reading data, yet a statistics cache appeared at {cache}"


@pytest.mark.parametrize("source", ["numpy", "zarr", "zarr_f32"])
@pytest.mark.parametrize("kind", ["nan", "inf", "-inf", "mixed", "row0"])
@pytest.mark.parametrize("side", ["A", "B"])
def test_nonfinite_rows_named(client, tmp_path, source, kind, side):
    bad, first = _with_bad(kind)
    good = _good(300, 3)
    if source.startswith("zarr"):
        dtype = np.float32 if source == "zarr_f32" else np.float64
        bad = write_zarr(tmp_path / "bad.zarr", bad.astype(dtype), 64)
        good = write_zarr(tmp_path / "good.zarr", good.astype(dtype), 64)
    a, b = (bad, good) if side == "A" else (good, bad)
    out = tmp_path / "out.parquet"
    for attempt in range(2):  # the second time the statistics come from the cache: same refusal
        with pytest.raises(dj.InputError) as info:
            dj.similarity_join(a, b, eps=0.1, out=out, client=client)
        msg = str(info.value)
        assert msg.startswith(f"{side} ")
        assert "NaN or inf" in msg and f"row {first};" in msg and "finite" in msg
        assert not out.exists()


@pytest.mark.parametrize("api", ["similarity_join", "count", "plan_join"])
def test_nonfinite_selfjoin_refused_by_every_entry_point(client, tmp_path, api):
    bad, first = _with_bad("nan")
    with pytest.raises(dj.InputError, match=f"first in row {first}"):
        if api == "plan_join":
            dj.plan_join(bad, eps=0.1, client=client)
        else:
            dj.similarity_join(bad, eps=0.1, client=client, output="count" if api == "count" else "pairs")


EPS_BAD = [0, -0.5, float("nan"), float("inf"), "0.1", None]


def _bad_cases():
    """(id, builder) where builder(tmp_path) -> (args, kwargs, key words of the message, zarr inputs)."""

    def eps(value):
        return lambda t: ((_good(),), {"eps": value}, ["eps must be a positive finite number", repr(value)], ())

    def dims_numpy(t):
        return (_good(50, 2), _good(40, 3)), {"eps": 0.1}, ["same dimensionality", "2", "3"], ()

    def dims_zarr(t):
        a = write_zarr(t / "a.zarr", _good(50, 2))
        b = write_zarr(t / "b.zarr", _good(40, 3))
        return (a, b), {"eps": 0.1}, ["same dimensionality", "2 columns", "3"], (a, b)

    def shape_numpy(shape):
        words = ["2-D", str(shape)] if len(shape) != 2 else ["at least one column", str(shape)]
        return lambda t: ((np.zeros(shape),), {"eps": 0.1}, words, ())

    def shape_zarr(shape):
        def build(t):
            p = write_zarr(t / "x.zarr", np.zeros(shape), 4)
            return (p,), {"eps": 0.1}, ["2-D", str(shape)], (p,)
        return build

    def dtype_numpy(arr):
        return lambda t: ((arr,), {"eps": 0.1}, ["real numbers", str(np.asarray(arr).dtype)], ())

    def dtype_zarr(dtype):
        def build(t):
            zarr.create_array(store=str(t / "x.zarr"), shape=(6, 2), chunks=(3, 2), dtype=dtype)
            return (str(t / "x.zarr"),), {"eps": 0.1}, ["real numbers", "dtype"], (str(t / "x.zarr"),)
        return build

    def missing(t):
        p = str(t / "nope.zarr")
        return (p,), {"eps": 0.1}, ["no Zarr store", p], ()

    def missing_b(t):
        p = str(t / "nope.zarr")
        return (_good(), p), {"eps": 0.1}, ["B", "no Zarr store", p], ()

    def group(t):
        g = zarr.open_group(str(t / "g.zarr"), mode="w")
        g.create_array("points", shape=(5, 2), dtype="f8")
        return (str(t / "g.zarr"),), {"eps": 0.1}, ["group, not an array", os.path.join(str(t / "g.zarr"), "points")], ()

    def empty_group(t):
        zarr.open_group(str(t / "g.zarr"), mode="w")
        return (str(t / "g.zarr"),), {"eps": 0.1}, ["group, not an array", "empty"], ()

    def not_zarr(t):
        (t / "plain").mkdir()
        (t / "plain" / "file.txt").write_text("hello")
        return (str(t / "plain"),), {"eps": 0.1}, ["cannot read a Zarr array", "plain"], ()

    def choice(name, value, words):
        return lambda t: ((_good(),), {"eps": 0.1, name: value}, words, ())

    def budget(value):
        return lambda t: ((_good(),), {"eps": 0.1, "memory_budget": value}, ["memory_budget", repr(value)], ())

    def wrong_type(t):
        return ({"x": 1},), {"eps": 0.1}, ["must be a Zarr path", "dict"], ()

    cases = [(f"eps={e!r}", eps(e)) for e in EPS_BAD]
    cases += [
        ("dims-numpy", dims_numpy), ("dims-zarr", dims_zarr),
        ("1d-numpy", shape_numpy((10,))), ("3d-numpy", shape_numpy((4, 5, 2))), ("0cols-numpy", shape_numpy((5, 0))),
        ("1d-zarr", shape_zarr((10,))), ("3d-zarr", shape_zarr((4, 5, 2))),
        ("complex-numpy", dtype_numpy(np.ones((5, 2), np.complex128))),
        ("strings-numpy", dtype_numpy(np.array([["a", "b"], ["c", "d"]]))),
        ("object-numpy", dtype_numpy(np.array([[1.0, "x"], [2.0, "y"]], dtype=object))),
        ("bool-numpy", dtype_numpy(np.ones((5, 2), bool))),
        ("complex-zarr", dtype_zarr("complex128")), ("strings-zarr", dtype_zarr(str)), ("bool-zarr", dtype_zarr(bool)),
        ("missing-zarr", missing), ("missing-zarr-b", missing_b),
        ("zarr-group", group), ("zarr-empty-group", empty_group), ("not-zarr", not_zarr),
        ("method", choice("method", "kdtree", ["method must be one of", "grid", "brute", "'kdtree'"])),
        ("partitioning", choice("partitioning", "rows", ["partitioning must be one of", "slabs", "'rows'"])),
        ("backend", choice("backend", "tpu", ["backend must be one of", "cpu", "'tpu'"])),
        ("backend-gpu", choice("backend", "gpu", ["gpu", "not available", "cpu"])),
        ("output", choice("output", "list", ["output must be one of", "count", "'list'"])),
        ("budget-words", budget("lots")), ("budget-negative", budget(-5)), ("budget-zero", budget(0)),
        ("input-type", wrong_type),
    ]
    return cases


BAD_CASES = _bad_cases()


# plan_join has no output option, so the bad-output case is not tried with it
REFUSAL_RUNS = [
    pytest.param(build, output, id=f"{output}-{name}")
    for output in ("pairs", "parquet", "count", "plan")
    for name, build in BAD_CASES
    if not (output == "plan" and name == "output")
]


@pytest.mark.parametrize("build, output", REFUSAL_RUNS)
def test_bad_input_refused_before_work(client, tmp_path, build, output):
    args, kwargs, words, zarr_inputs = build(tmp_path)
    out = tmp_path / "out.parquet"
    with pytest.raises(dj.InputError) as info:
        if output == "plan":
            dj.plan_join(*args, client=client, **kwargs)
        elif output == "parquet":
            dj.similarity_join(*args, client=client, out=out, **kwargs)
        elif output == "count":
            dj.similarity_join(*args, client=client, **{"output": "count", **kwargs})
        else:
            dj.similarity_join(*args, client=client, **kwargs)
    msg = str(info.value)
    for word in words:
        assert word in msg, f"{word!r} not in message {msg!r}"
    assert "\n" not in msg  # one clear line
    _assert_clean(tmp_path, out, zarr_inputs)


def test_refused_input_leaves_zarr_input_untouched(client, tmp_path):
    p = write_zarr(tmp_path / "x.zarr", _good(100, 2), 16)
    before = sorted(str(q.relative_to(tmp_path)) for q in tmp_path.rglob("*"))
    with pytest.raises(dj.InputError):
        dj.similarity_join(p, eps=-1, client=client, out=tmp_path / "out")
    assert sorted(str(q.relative_to(tmp_path)) for q in tmp_path.rglob("*")) == before


def test_group_member_path_is_accepted(client, tmp_path):
    """The path the group refusal suggests works."""
    x = _good(300, 2)
    g = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    arr = g.create_array("points", shape=x.shape, chunks=(50, 2), dtype="f8")
    arr[:] = x
    from oracle import oracle_self_count

    assert dj.similarity_join(str(tmp_path / "g.zarr" / "points"), eps=0.05, client=client, output="count") == \
        oracle_self_count(x, 0.05)


# --------------------------------------------------------------------------- before *any* work: no cluster started

_NO_CLUSTER_SCRIPT = textwrap.dedent(
    """
    import multiprocessing, sys
    import numpy as np
    import daskjoin as dj

    if __name__ == "__main__":
        case = sys.argv[1]
        x = np.random.default_rng(0).random((50, 2))
        kwargs = {"eps": 0.1}
        args = (x,)
        if case == "eps":
            kwargs["eps"] = -1.0
        elif case == "method":
            kwargs["method"] = "kdtree"
        elif case == "dims":
            args = (x, np.zeros((5, 3)))
        elif case == "dtype":
            args = (x.astype(complex),)
        elif case == "missing":
            args = ("/nonexistent/points.zarr",)
        elif case == "output":
            kwargs["output"] = "nope"
        try:
            dj.similarity_join(*args, **kwargs)
        except dj.InputError as exc:
            print("refused:", exc)
        else:
            print("accepted")
        print("children:", len(multiprocessing.active_children()))
    """
)



@pytest.mark.integration
@pytest.mark.parametrize(
    "case",
    ["eps", "method", "dims", "dtype", "missing"]
    + ["output"],
)
def test_bad_input_starts_no_cluster(tmp_path, case):
    """Without ``client=``, a refused join must not spawn a local cluster first (no worker processes)."""
    script = tmp_path / "script.py"
    script.write_text(_NO_CLUSTER_SCRIPT)
    env = {k: val for k, val in os.environ.items() if k != "DASKJOIN_SCHEDULER"}
    proc = subprocess.run([sys.executable, str(script), case], capture_output=True, text=True, timeout=120,
                          cwd=str(tmp_path), env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "refused:" in proc.stdout, proc.stdout
    assert "children: 0" in proc.stdout, proc.stdout
