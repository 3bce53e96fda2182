"""``daskjoin info`` (run as the installed console script) and the CLI's extension hook."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from joinhelpers import QUIET_DASK_ENV

BIN = Path(sys.executable).parent
DASKJOIN = str(BIN / "daskjoin")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k != "DASKJOIN_SCHEDULER" and (not k.startswith("DASK_") or k in QUIET_DASK_ENV)}
    env.update(extra)
    return env


def run_info(*args, env=None, timeout=120):
    return subprocess.run([DASKJOIN, "info", *args], env=env or _env(), capture_output=True, text=True,
                          timeout=timeout)


def _explain(proc) -> str:
    return f"rc={proc.returncode}\n--- stdout:\n{proc.stdout[-3000:]}\n--- stderr:\n{proc.stderr[-3000:]}"


def _installed(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


@pytest.fixture(scope="module")
def plain():
    proc = run_info()
    assert proc.returncode == 0, _explain(proc)
    return proc


@pytest.fixture(scope="module")
def as_json():
    proc = run_info("--json", env=_env(DASK_SCHEDULER_ADDRESS="tcp://10.1.2.3:8786", DASKJOIN_SCHEDULER="tcp://h:1"))
    assert proc.returncode == 0, _explain(proc)
    return json.loads(proc.stdout)


def test_text_names_every_package(plain):
    import daskjoin

    lines = plain.stdout.splitlines()
    assert lines[0].split() == ["daskjoin", daskjoin.__version__]
    assert lines[1].split()[:2] == ["python", ".".join(map(str, sys.version_info[:3]))]
    for dist in ("numpy", "dask", "distributed", "zarr", "numba", "dask-cuda", "dask-jobqueue"):
        (line,) = [line for line in lines if line.split()[0] == dist]
        assert line.split(maxsplit=1)[1] == _installed(dist)
    assert any(line.startswith("cupy ") for line in lines)
    assert any(line.startswith("GPUs") for line in lines)
    assert "scheduler (dask config scheduler-address): not set" in plain.stdout
    assert plain.stderr == ""


def test_json_is_complete(as_json):
    versions = as_json["versions"]
    for dist in ("numpy", "dask", "distributed", "zarr", "numba", "dask-cuda", "dask-jobqueue"):
        assert versions[dist] == _installed(dist)
    if importlib.util.find_spec("cupy") is None:
        assert versions["cupy"] == "not installed"
    assert as_json["gpus"]["source"] in ("cupy", "nvidia-smi", "none")
    assert isinstance(as_json["gpus"]["devices"], list)
    assert as_json["scheduler"] == {"dask_config": "tcp://10.1.2.3:8786", "DASKJOIN_SCHEDULER": "tcp://h:1"}
    assert "cluster" not in as_json


def test_kernel_cache_empty_then_filled(tmp_path):
    """The CPU kernels' Numba cache: empty in a new NUMBA_CACHE_DIR (and the text says what to run), holding files
    once a join compiled into it."""
    env = _env(NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    proc = run_info("--json", env=env)
    assert proc.returncode == 0, _explain(proc)
    cache = json.loads(proc.stdout)["kernel_cache"]
    assert cache["files"] == 0 and cache["paths"] and all(p.startswith(str(tmp_path)) for p in cache["paths"])
    assert "files in" in run_info(env=env).stdout and "empty: run `daskjoin warm`" in run_info(env=env).stdout
    join = ("import numpy as np, daskjoin as dj; "
            "dj.similarity_join(np.random.default_rng(0).random((500, 2)), eps=0.1, output='count')")
    done = subprocess.run([sys.executable, "-c", join], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, _explain(done)
    assert json.loads(run_info("--json", env=env).stdout)["kernel_cache"]["files"] > 0


@pytest.mark.integration
def test_scheduler_workers(cluster, client):
    """``--scheduler``: the session cluster's two one-thread workers, and whether each sees a GPU."""
    import daskjoin
    from daskjoin.kernels.gpu_common import gpu_available

    proc = run_info("--scheduler", cluster.scheduler_address, "--json")
    assert proc.returncode == 0, _explain(proc)
    report = json.loads(proc.stdout)["cluster"]
    assert report["address"] == cluster.scheduler_address
    workers = report["workers"]
    assert sorted(workers) == sorted(client.nthreads())
    for w in workers.values():
        assert w["nthreads"] == 1 and w["gpu"] is gpu_available() and w["kernel_cache_files"] >= 0
        assert w["versions"]["daskjoin"] == daskjoin.__version__
    text = run_info("--scheduler", cluster.scheduler_address)
    assert text.returncode == 0, _explain(text)
    assert f"cluster {cluster.scheduler_address}: 2 worker(s), 2 thread(s)" in text.stdout
    assert sum("threads=1" in line for line in text.stdout.splitlines()) == 2


def test_unreachable_scheduler_is_one_line():
    proc = run_info("--scheduler", "tcp://127.0.0.1:1", "--timeout", "2")
    assert proc.returncode == 1, _explain(proc)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "no Dask scheduler answered at tcp://127.0.0.1:1 within 2 s" in lines[0]


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy answers before nvidia-smi is asked")
def test_gpus_from_nvidia_smi(tmp_path):
    """Without CuPy, ``nvidia-smi -L`` names the GPUs."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-0000)'\necho 'GPU 1: NVIDIA H200 (UUID: GPU-0001)'\n")
    smi.chmod(0o755)
    proc = run_info("--json", env=_env(PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}"))
    assert proc.returncode == 0, _explain(proc)
    gpus = json.loads(proc.stdout)["gpus"]
    assert gpus["source"] == "nvidia-smi"
    assert [d["name"] for d in gpus["devices"]] == ["GPU 0: NVIDIA H200 (UUID: GPU-0000)",
                                                    "GPU 1: NVIDIA H200 (UUID: GPU-0001)"]


def test_render_with_gpus_and_workers():
    """The text form of a report from a GPU cluster (no GPU needed to check the wording)."""
    from daskjoin.info import render

    report = {
        "versions": {"daskjoin": "0.1.0", "python": "3.12.3", "cupy": "14.2.0"},
        "executable": "/opt/venv/bin/python",
        "gpus": {"source": "cupy", "devices": [{"id": 0, "name": "NVIDIA H200", "memory_bytes": 150 * 2**30}]},
        "scheduler": {"dask_config": "tcp://scheduler:8786", "DASKJOIN_SCHEDULER": None},
        "cluster": {"address": "tcp://scheduler:8786", "workers": {
            "tcp://10.0.0.7:40000": {"name": "w0", "nthreads": 1, "memory_limit": 64 * 2**30, "resources": {"GPU": 1.0},
                                     "gpu": True, "gpus": ["NVIDIA H200"], "kernel_cache_files": 0,
                                     "versions": {"daskjoin": "0.1.0", "dask": "2026.7.1"}},
        }},
    }
    text = render(report)
    assert "GPUs (cupy):\n  0: NVIDIA H200, 150.00 GiB" in text
    assert "scheduler (dask config scheduler-address): tcp://scheduler:8786" in text
    assert "cluster tcp://scheduler:8786: 1 worker(s), 1 thread(s), 1 with a GPU" in text
    assert ("tcp://10.0.0.7:40000  name=w0  threads=1  memory=64.00 GiB  GPU: NVIDIA H200  resources: GPU=1"
            "  kernel cache: 0 files") in text


def test_help_has_example():
    proc = subprocess.run([DASKJOIN, "info", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert "Example:\n  daskjoin info" in proc.stdout and "--json" in proc.stdout


# --------------------------------------------------------------------------- other modules add commands


def test_extension_module_adds_a_command(tmp_path, monkeypatch, capsys):
    """A module in ``cli.EXTENSIONS`` registers a subcommand with one call, ``add_commands(sub, command)``."""
    from daskjoin import cli

    (tmp_path / "daskjoin_test_ext.py").write_text(textwrap.dedent("""
        def _hello(args):
            print(f"hello {args.who}")
            return 0

        def add_commands(sub, command):
            p = command("hello", "Say hello.", example="daskjoin hello --who world", handler=_hello)
            p.add_argument("--who", default="you")
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(cli, "EXTENSIONS", ("daskjoin_test_ext", "daskjoin_no_such_module"))
    assert cli.main(["hello", "--who", "sets"]) == 0
    assert capsys.readouterr().out == "hello sets\n"
    with pytest.raises(SystemExit) as exc:
        cli.main(["hello", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "Example:\n  daskjoin hello --who world" in out
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "daskjoin hello --who world" in capsys.readouterr().out


def test_a_command_without_an_example_is_refused(tmp_path, monkeypatch):
    from daskjoin import cli

    (tmp_path / "daskjoin_test_bad_ext.py").write_text(
        "def add_commands(sub, command):\n    command('mute', 'No example.')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(cli, "EXTENSIONS", ("daskjoin_test_bad_ext",))
    with pytest.raises(ValueError, match="needs an example"):
        cli.main(["--help"])
