"""One validator for the API and the CLI (:mod:`daskjoin.options`).

Every shared option is refused on a bad value by ``similarity_join`` and by
``set_similarity_join`` with the same message for the same mistake, before any
input is opened and before any cluster is resolved or started; the CLI refuses
the same mistakes with the flag's spelling (exit 2), before connecting to a
scheduler; ``algorithm=`` still works on the set join, with a warning.
"""
from __future__ import annotations


import numpy as np
import pytest

import daskjoin as dj
from daskjoin import options
from daskjoin.execution import cluster as cluster_mod
from clihelpers import _env, _explain, run_many

POINTS = np.random.default_rng(0).random((20, 2))
DOCS = [["a", "b", "c"], ["a", "b", "c", "d"], ["x", "y"]]

JOINS = {
    "epsilon": lambda **kw: dj.similarity_join(POINTS, **{"eps": 0.1, **kw}),
    "sets": lambda **kw: dj.set_similarity_join(DOCS, **{"threshold": 0.5, **kw}),
}
PLANS = {
    "epsilon": lambda **kw: dj.plan_join(POINTS, **{"eps": 0.1, **kw}),
    "sets": lambda **kw: dj.plan_set_join(DOCS, **{"threshold": 0.5, **kw}),
}


@pytest.fixture
def no_cluster(monkeypatch):
    """Fails the test if a join asks for a client (so nothing was started or contacted)."""
    def refuse(*args, **kwargs):
        raise AssertionError("a client was resolved before the options were refused")

    monkeypatch.setattr(cluster_mod, "resolve_client", refuse)
    monkeypatch.setattr(cluster_mod, "start_local", refuse)
    before = dict(cluster_mod._DEFAULT)
    yield
    assert cluster_mod._DEFAULT == before


#: option -> bad value -> words of the message (the same message for both kinds)
SHARED_BAD = {
    "backend": ("tpu", ["backend must be one of ('auto', 'cpu', 'gpu'), got 'tpu'", "default 'auto'"]),
    "output": ("list", ["output must be one of ('pairs', 'count'), got 'list'"]),
    "out": (5, ["out must be the path", "got 5 of type int"]),
    "overwrite": ("yes", ["overwrite must be True or False, got 'yes'"]),
    "progress": (1, ["progress must be True or False, got 1 of type int"]),
    "memory_budget": ("lots", ["memory_budget must be a size such as '2GB'", "got 'lots'"]),
    "memory_budget-zero": (0, ["memory_budget must be positive, got 0"]),
    "memory_budget-bool": (True, ["memory_budget must be a size", "got True"]),
    "client": (42, ["client must be a distributed.Client, a scheduler address", "got 42 of type int"]),
    "gpu_options-unknown": ({"nope": 1}, ["gpu_options ['nope'] are not options of method"]),
}


def _refusal(join, **kw) -> str:
    with pytest.raises(dj.InputError) as info:  # no_cluster: refused before any cluster is asked for
        join(**kw)
    text = str(info.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize("key", sorted(SHARED_BAD))
def test_shared_option_refused_the_same_by_both_joins(no_cluster, key):
    value, words = SHARED_BAD[key]
    name = key.split("-")[0]
    messages = {kind: _refusal(join, **{"client": None, name: value}) for kind, join in JOINS.items()}
    for kind, text in messages.items():
        for word in words:
            assert word in text, (kind, word, text)
    if key != "gpu_options-unknown":  # that one names each kind's method and its keys
        assert messages["epsilon"] == messages["sets"]


def test_gpu_options_not_a_dict(no_cluster):
    for kind, join in JOINS.items():
        text = _refusal(join, gpu_options=[("tile", 64)])
        assert text.startswith("gpu_options must be a dict such as {") and "got [('tile', 64)]" in text, text


def test_out_with_count_refused_by_both(no_cluster, tmp_path):
    out = tmp_path / "out.parquet"
    texts = {_refusal(join, output="count", out=str(out)) for join in JOINS.values()}
    assert texts == {"output='count' returns a number; it cannot be combined with out=PATH"}
    assert not out.exists()


@pytest.mark.parametrize("kind", sorted(JOINS))
def test_method_refused_with_the_kinds_values(no_cluster, kind):
    text = _refusal(JOINS[kind], method="kdtree")
    allowed = "('auto', 'grid', 'brute', 'szl', 'nlj', 'directory')" if kind == "epsilon" else "('ppjoin', 'allpairs')"
    assert text.startswith(f"method must be one of {allowed}, got 'kdtree'"), text


@pytest.mark.parametrize("kind, name, value", [("epsilon", "partitioning", "rows"), ("epsilon", "with_distance", "no"),
                                               ("sets", "partitions", 0), ("sets", "measure", "tanimoto")])
def test_each_kinds_own_options(no_cluster, kind, name, value):
    text = _refusal(JOINS[kind], **{name: value})
    assert text.startswith(f"{name} must be") and repr(value) in text, text


@pytest.mark.parametrize("kind", sorted(PLANS))
@pytest.mark.parametrize("name, value", [("backend", "tpu"), ("memory_budget", "lots"), ("client", 42),
                                         ("method", "kdtree")])
def test_plans_refuse_the_same(no_cluster, kind, name, value):
    assert _refusal(PLANS[kind], **{name: value}) == _refusal(JOINS[kind], **{name: value})


def test_algorithm_alias_disagreeing_refused_before_any_cluster(no_cluster):
    with pytest.raises(dj.InputError, match="disagree"), pytest.warns(DeprecationWarning, match="use method="):
        dj.set_similarity_join(DOCS, threshold=0.5, method="allpairs", algorithm="ppjoin")


def test_algorithm_alias_warns_and_works(client):
    with pytest.warns(DeprecationWarning, match="algorithm=... is deprecated; use method="):
        old = dj.plan_set_join(DOCS, threshold=0.75, algorithm="allpairs", backend="cpu", client=client)
    new = dj.plan_set_join(DOCS, threshold=0.75, method="allpairs", backend="cpu", client=client)
    assert old.algorithm == new.algorithm == "allpairs"
    assert dj.plan_set_join(DOCS, threshold=0.75, backend="cpu", client=client).algorithm == "ppjoin"


def test_client_may_be_a_scheduler_address(cluster):
    plan = dj.plan_set_join(DOCS, threshold=0.75, backend="cpu", client=cluster.scheduler_address)
    assert plan.ntasks >= 1


# --------------------------------------------------------------------------- the table itself


def test_check_options_normalises():
    got = options.check_options("sets", threshold=0.8, method=None, backend="cpu", memory_budget="1MiB",
                                gpu_options=None, partitions=np.int64(3), out=None, overwrite=True)
    assert got["method"] == "ppjoin" and got["memory_budget"] == 2**20 and got["gpu_options"] == {}
    assert got["partitions"] == 3 and type(got["partitions"]) is int
    assert got["threshold"].exact == options.parse_threshold("jaccard", 0.8).exact
    assert got["overwrite"] is True and got["out"] is None  # overwrite without out is fine
    assert options.check_options("epsilon", eps=1, method=None)["method"] == "auto"
    with pytest.raises(TypeError, match="no option 'partitions'"):
        options.check_options("epsilon", partitions=2)


def test_gpu_option_keys_follow_the_method():
    assert options.check_options("epsilon", method="brute", gpu_options={"tile": 64})["gpu_options"] == {"tile": 64}
    with pytest.raises(dj.InputError, match=r"\['tile'\] are not options of method 'grid'"):
        options.check_options("epsilon", method="grid", gpu_options={"tile": 64})
    options.check_options("epsilon", method="auto", gpu_options={"tile": 64, "work_queue": False})
    with pytest.raises(dj.InputError, match="gpu_options verify must be one of"):
        options.check_options("sets", method="ppjoin", gpu_options={"verify": "warp"})


def test_cli_spelling_uses_the_flags():
    with pytest.raises(dj.InputError) as info:
        options.check_options("sets", spelled="cli", memory_budget="lots")
    assert str(info.value).startswith("--memory-budget must be a size")
    with pytest.raises(dj.InputError, match="^setjoin needs --out PATH"):
        options.check_options("sets", spelled="cli", output="pairs", out=None)
    options.check_options("sets", output="pairs", out=None)  # the API returns a lazy frame instead


def test_every_flag_is_a_flag_of_the_kinds_command():
    from daskjoin.cli import _parser

    sub = next(a for a in _parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    for kind, names in options.KINDS.items():
        flags = {s for action in sub.choices[names["cli"]]._actions for s in action.option_strings}
        for option in options.OPTIONS:
            if kind in option.kinds and option.flag:
                assert option.flag in flags, (kind, option.name, option.flag)


# --------------------------------------------------------------------------- the CLI: the same checks, spelled as flags

CLI_BAD = {
    "backend": (["--backend", "tpu"],
                "--backend must be one of ('auto', 'cpu', 'gpu'), got 'tpu'; omit --backend for the default 'auto'"),
    "budget": (["--memory-budget", "lots"], "--memory-budget must be a size such as '2GB' or a number of bytes"),
    "count-and-out": (["--count", "--out", "OUT"], "--count prints a number and writes nothing: drop --out, or drop --count"),
    "option": (["--option", "nokey"], "--option takes KEY=VALUE: an option of the method, '=' and its value; got 'nokey'"),
}
COMMANDS = {"join": ["join", "nope.zarr", "--eps", "0.1"], "setjoin": ["setjoin", "nope.zarr", "--threshold", "0.5"]}


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory):
    work = tmp_path_factory.mktemp("options-cli")
    jobs = {(cmd, key): COMMANDS[cmd] + extra + (["--count"] if "--count" not in extra else [])
            + ["--scheduler", "tcp://127.0.0.1:1"]
            for cmd in COMMANDS for key, (extra, _) in CLI_BAD.items()}
    return work, run_many(jobs, work, env=_env(DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="2s"))


@pytest.mark.parametrize("key", sorted(CLI_BAD))
def test_cli_refuses_with_the_flag_spelling(cli_runs, key):
    work, runs = cli_runs
    lines = {}
    for cmd in COMMANDS:
        proc = runs[cmd, key]
        assert proc.returncode == 2, _explain(proc)
        err = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(err) == 1 and err[0].startswith("daskjoin: error: " + CLI_BAD[key][1]), _explain(proc)
        assert proc.stdout == ""
        lines[cmd] = err[0]
    assert lines["join"] == lines["setjoin"]  # one validator: the same line for the same mistake
    assert not (work / "OUT").exists()


def test_gpu_options_of_the_chosen_method_refused_before_any_data_pass(tmp_path, monkeypatch):
    """method='auto' picks grid at d=2 from the dimensionality alone: a brute-only option is refused
    before the statistics pass reads anything."""
    import numpy as np
    from distributed import Client

    from daskjoin.planning import planner

    def no_pass(*args, **kwargs):
        raise AssertionError("a data pass ran before gpu_options were checked")

    monkeypatch.setattr(planner, "block_stats", no_pass)
    x = np.random.default_rng(0).random((100, 2))
    with Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as c:
        with pytest.raises(dj.InputError, match=r"\['tile'\] are not options of method 'grid'"):
            dj.similarity_join(x, eps=0.1, gpu_options={"tile": 128}, backend="cpu", client=c)


@pytest.mark.parametrize("text, value", [("4", 4), ("-3", -3), ("+2", 2), ("true", True), ("False", False),
                                         ("unicomp", "unicomp"), ("--5", "--5"), ("\u00b2", "\u00b2"),
                                         ("\u0663", "\u0663"), ("a=b", "a=b")])
def test_option_values_are_read_as_typed(text, value):
    from daskjoin.cli import parse_option_value

    assert parse_option_value(text) == value and type(parse_option_value(text)) is type(value)


def test_option_given_twice_or_with_knn_is_refused():
    from daskjoin.cli import _parser

    args = _parser().parse_args(["join", "p.zarr", "--eps", "1", "--count", "--option", "lists=2", "--option", "lists=3"])
    from daskjoin.cli import _method_options

    with pytest.raises(dj.InputError, match="--option lists is given twice"):
        _method_options(args)
    # a kNN-join takes the brute driver's filter only: szl's lists are refused, before the store is opened
    args = _parser().parse_args(["plan", "p.zarr", "--knn", "3", "--option", "lists=2"])
    with pytest.raises(dj.InputError, match="--option \\['lists'\\] are not options of method 'auto'"):
        args.handler(args)
