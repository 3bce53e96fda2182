"""Deployment files: docker-compose.yml, the Dockerfiles, deploy/hpc and the wheelhouse script.

No Docker daemon and no batch system are needed: the compose file is checked against a
schema of our own and its scheduler / CPU-worker commands are run as plain processes; the
dask-jobqueue job scripts are rendered, not submitted; the sbatch script runs with a
stand-in ``srun``.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from joinhelpers import QUIET_DASK_ENV

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
COMPOSE = ROOT / "docker-compose.yml"
JOBQUEUE = ROOT / "deploy" / "hpc" / "jobqueue.yaml"
SBATCH = ROOT / "deploy" / "hpc" / "daskjoin-join.sbatch"
WHEELHOUSE = ROOT / "deploy" / "build-wheelhouse.sh"
TLS_OVERRIDE = ROOT / "deploy" / "docker" / "compose.tls.yml"
INSTALL_LINE = "python3 -m pip install --no-index --find-links WHEELHOUSE --no-build-isolation -e '.[gpu]'"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k != "DASKJOIN_SCHEDULER" and (not k.startswith("DASK_") or k in QUIET_DASK_ENV)}
    env.update(extra)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- docker-compose.yml, statically

_PORT = {"type": "string", "pattern": r"^127\.0\.0\.1:\d+:\d+$", "not": {"pattern": "8786"}}
_COMMAND = {"type": "array", "minItems": 2, "items": {"type": "string", "minLength": 1}}
_DATA = {"type": "array", "contains": {"const": "data:/data"}, "items": {"type": "string", "pattern": "^[a-z-]+:/"}}
_DEPENDS = {"type": "object", "required": ["scheduler"],
            "properties": {"scheduler": {"type": "object",
                                         "properties": {"condition": {"const": "service_healthy"}}}}}
_SERVICE = {
    "type": "object",
    "required": ["image", "build", "command", "networks"],
    "additionalProperties": False,
    "properties": {
        "image": {"type": "string", "pattern": r"^daskjoin-(cpu|gpu):"},
        "build": {
            "type": "object", "required": ["context", "dockerfile"], "additionalProperties": False,
            "properties": {"context": {"const": "."},
                           "dockerfile": {"enum": ["deploy/docker/Dockerfile.cpu", "deploy/docker/Dockerfile.gpu"]},
                           "target": {"type": "string"}},
        },
        "command": _COMMAND,
        "ports": {"type": "array", "items": _PORT},
        "expose": {"not": {}},  # nothing beyond the compose network needs declaring
        "networks": {"type": "array", "minItems": 1, "items": {"enum": ["dask", "edge"]}, "contains": {"const": "dask"}},
        "volumes": _DATA,
        "profiles": {"type": "array", "items": {"type": "string"}},
        "environment": {"type": "object", "additionalProperties": {"type": "string"}},
        "depends_on": _DEPENDS,
        "healthcheck": {"type": "object", "required": ["test"]},
        "deploy": {"type": "object"},
        "init": {"const": True},
        "restart": {"enum": ["no", "always", "on-failure", "unless-stopped"]},
    },
}
_GPU_DEVICE = {
    "type": "object", "required": ["driver", "capabilities"],
    "properties": {"driver": {"const": "nvidia"},
                   "count": {"anyOf": [{"const": "all"}, {"type": "integer", "minimum": 1}]},
                   "device_ids": {"type": "array", "items": {"type": "string"}},
                   "capabilities": {"type": "array", "contains": {"const": "gpu"}}},
    "not": {"required": ["count", "device_ids"]},  # compose allows one or the other
}
_GPU_RESERVATION = {
    "type": "object", "required": ["resources"],
    "properties": {"resources": {
        "type": "object", "required": ["reservations"],
        "properties": {"reservations": {
            "type": "object", "required": ["devices"],
            "properties": {"devices": {"type": "array", "minItems": 1, "items": _GPU_DEVICE}},
        }},
    }},
}
COMPOSE_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["services", "networks", "volumes"],
    "additionalProperties": False,
    "patternProperties": {"^x-": {}},
    "properties": {
        "services": {
            "type": "object",
            "required": ["scheduler", "gpu-worker", "cpu-worker", "notebook"],
            "additionalProperties": False,
            "properties": {
                "scheduler": {"allOf": [_SERVICE, {
                    "required": ["ports", "healthcheck"],
                    "properties": {
                        "command": {"prefixItems": [{"const": "dask"}, {"const": "scheduler"}]},
                        "ports": {"const": ["127.0.0.1:8787:8787"]},
                        "build": {"properties": {"dockerfile": {"const": "deploy/docker/Dockerfile.cpu"}}},
                    },
                    "not": {"anyOf": [{"required": ["profiles"]}, {"required": ["deploy"]}]},
                }]},
                "gpu-worker": {"allOf": [_SERVICE, {
                    "required": ["deploy", "volumes", "depends_on"],
                    "properties": {
                        "command": {"prefixItems": [{"const": "dask"}, {"const": "cuda"}, {"const": "worker"},
                                                    {"const": "tcp://scheduler:8786"}],
                                    "contains": {"const": "--resources"}},
                        "build": {"properties": {"dockerfile": {"const": "deploy/docker/Dockerfile.gpu"}}},
                        "deploy": _GPU_RESERVATION,
                        "networks": {"const": ["dask"]},
                    },
                    # scalable: nothing that names a single container or claims a host port
                    "not": {"anyOf": [{"required": ["ports"]}, {"required": ["container_name"]},
                                      {"required": ["profiles"]}]},
                }]},
                "cpu-worker": {"allOf": [_SERVICE, {
                    "required": ["profiles", "volumes", "depends_on"],
                    "properties": {
                        "command": {"prefixItems": [{"const": "dask"}, {"const": "worker"},
                                                    {"const": "tcp://scheduler:8786"}]},
                        "profiles": {"const": ["cpu"]},
                        "networks": {"const": ["dask"]},
                    },
                    "not": {"anyOf": [{"required": ["ports"]}, {"required": ["deploy"]}]},
                }]},
                "notebook": {"allOf": [_SERVICE, {
                    "required": ["environment", "ports", "volumes"],
                    "properties": {
                        "command": {"prefixItems": [{"const": "jupyter"}, {"const": "lab"}]},
                        "environment": {"required": ["DASK_SCHEDULER_ADDRESS"],
                                        "properties": {"DASK_SCHEDULER_ADDRESS": {"const": "tcp://scheduler:8786"}}},
                        "ports": {"const": ["127.0.0.1:8888:8888"]},
                    },
                }]},
            },
        },
        "networks": {
            "type": "object", "required": ["dask"],
            "properties": {"dask": {"type": "object", "required": ["internal"],
                                    "properties": {"internal": {"const": True}}}},
        },
        "volumes": {"type": "object", "required": ["data"]},
    },
}


def test_compose_matches_schema(compose):
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(COMPOSE_SCHEMA)
    errors = sorted(jsonschema.Draft202012Validator(COMPOSE_SCHEMA).iter_errors(compose), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


@pytest.mark.parametrize("mutation", ["publish-8786", "dashboard-all-interfaces", "no-gpu", "network-not-internal",
                                      "cpu-worker-no-profile", "notebook-elsewhere"])
def test_compose_schema_rejects(compose, mutation):
    """The schema is not vacuous: each of these edits of the real file is refused."""
    import copy

    import jsonschema

    bad = copy.deepcopy(compose)
    services = bad["services"]
    if mutation == "publish-8786":
        services["scheduler"]["ports"].append("127.0.0.1:8786:8786")
    elif mutation == "dashboard-all-interfaces":
        services["scheduler"]["ports"] = ["8787:8787"]
    elif mutation == "no-gpu":
        del services["gpu-worker"]["deploy"]
    elif mutation == "network-not-internal":
        bad["networks"]["dask"]["internal"] = False
    elif mutation == "cpu-worker-no-profile":
        del services["cpu-worker"]["profiles"]
    elif mutation == "notebook-elsewhere":
        services["notebook"]["environment"]["DASK_SCHEDULER_ADDRESS"] = "tcp://localhost:8786"
    assert list(jsonschema.Draft202012Validator(COMPOSE_SCHEMA).iter_errors(bad))


def test_compose_details(compose):
    """What a schema says clumsily: option pairs, the healthcheck port, one network per published port."""
    services = compose["services"]
    gpu = services["gpu-worker"]["command"]
    assert gpu[gpu.index("--resources") + 1] == "GPU=1"
    sched = services["scheduler"]["command"]
    assert sched[sched.index("--port") + 1] == "8786"
    assert sched[sched.index("--dashboard-address") + 1].endswith(":8787")
    assert "8787" in " ".join(services["scheduler"]["healthcheck"]["test"])
    for name, svc in services.items():
        if svc.get("ports"):
            assert "edge" in svc["networks"], f"{name} publishes ports but is only on the internal network"
        for port in svc.get("ports", []):
            assert not port.endswith(":8786"), f"{name} publishes the scheduler port"
    assert services["notebook"]["image"] == services["scheduler"]["image"] == services["cpu-worker"]["image"]


def test_compose_config_with_docker_compose(tmp_path):
    """``docker-compose config -q`` (Debian's binary) or ``docker compose config -q`` where present, with and
    without the TLS override."""
    if shutil.which("docker-compose"):
        cmd = ["docker-compose"]
    elif shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        cmd = ["docker", "compose"]
    else:
        pytest.skip("neither docker-compose nor the docker compose plugin is installed")
    for files in (["-f", str(COMPOSE)], ["-f", str(COMPOSE), "-f", str(TLS_OVERRIDE)]):
        proc = subprocess.run([*cmd, *files, "--profile", "cpu", "config", "-q"], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr


def _dockerignored() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.gpu"])
def test_dockerfile_copies_exist_and_are_not_ignored(name):
    import fnmatch

    text = (ROOT / "deploy" / "docker" / name).read_text()
    sources = []
    for line in text.splitlines():
        if line.startswith("COPY "):
            args = [a for a in shlex.split(line)[1:] if not a.startswith("--")]
            sources += args[:-1]
    assert sources
    ignored = _dockerignored()
    for src in sources:
        assert (ROOT / src).exists(), f"{name} copies {src}, which does not exist"
        assert not any(fnmatch.fnmatch(src, pattern) for pattern in ignored), f"{src} is in .dockerignore"
    assert ".venv" in ignored and ".git" in ignored


def test_dockerfiles_bases_and_extras():
    cpu = (ROOT / "deploy" / "docker" / "Dockerfile.cpu").read_text()
    gpu = (ROOT / "deploy" / "docker" / "Dockerfile.gpu").read_text()
    assert re.search(r"^FROM python:3\.12-slim\b", cpu, re.M)
    assert '".[notebook]"' in cpu
    assert re.search(r"^ARG CUDA_IMAGE=nvidia/cuda:13\.[\d.]+-runtime-ubuntu24\.04$", gpu, re.M)  # Python 3.12
    assert '".[gpu]"' in gpu and re.search(r"^FROM runtime AS notebook$", gpu, re.M)
    for text in (cpu, gpu):
        assert "-c constraints.txt" in text and re.search(r"^USER dask$", text, re.M)
    for text in (cpu, gpu):  # the kernels compiled into a cache the worker user owns (daskjoin warm)
        assert re.search(r"^ENV NUMBA_CACHE_DIR=/home/dask/\S+$", text, re.M)
        assert text.index("\nUSER dask\n") < text.index("\nENV NUMBA_CACHE_DIR=") < text.index("\nRUN daskjoin warm")
    pins = (ROOT / "deploy" / "docker" / "constraints.txt").read_text()
    assert re.search(r"^dask==\S+$", pins, re.M) and re.search(r"^distributed==\S+$", pins, re.M)


# --------------------------------------------------------------------------- the compose topology, without Docker


def _rewrite(command: list[str], replacements: dict[str, str]) -> list[str]:
    """``command`` with ``dask`` from this virtualenv and each option value or word in ``replacements`` swapped."""
    out = [str(BIN / command[0])]
    for i, word in enumerate(command[1:], 1):
        option = command[i - 1]
        if option.startswith("--") and option in replacements:  # the value of an option such as --port
            out.append(replacements[option])
        elif not word.startswith("--"):  # a positional word such as the scheduler address
            out.append(replacements.get(word, word))
        else:
            out.append(word)
    return out


def _stop(procs):
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 15
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _start_topology(services: dict, workers: int, cwd: Path, procs: list, env: dict, security=None) -> str:
    """Start the compose ``scheduler`` and ``workers`` × ``cpu-worker`` as local processes.

    Their commands are the compose file's, with only the addresses changed: service name
    and fixed ports become 127.0.0.1 and free ports.  Returns the scheduler address.
    """
    port, dashboard = _free_port(), _free_port()
    protocol = services["cpu-worker"]["command"][2].split("://")[0]
    address = f"{protocol}://127.0.0.1:{port}"
    scheduler = _rewrite(services["scheduler"]["command"],
                         {"--host": "127.0.0.1", "--port": str(port), "--dashboard-address": f"127.0.0.1:{dashboard}"})
    worker = _rewrite(services["cpu-worker"]["command"], {f"{protocol}://scheduler:8786": address})
    assert scheduler[1:3] == ["scheduler", "--host"] and worker[1:3] == ["worker", address]
    logs = cwd / "logs"
    logs.mkdir()
    procs.append(subprocess.Popen(scheduler, cwd=cwd, env=env, stdout=open(logs / "scheduler.log", "w"),
                                  stderr=subprocess.STDOUT))
    for k in range(workers):
        procs.append(subprocess.Popen(worker, cwd=cwd, env=env, stdout=open(logs / f"worker{k}.log", "w"),
                                      stderr=subprocess.STDOUT))
    from distributed import Client

    try:
        with Client(address, timeout="30s", set_as_default=False, security=security) as client:
            client.wait_for_workers(workers, timeout=40)
            assert all(n == 1 for n in client.nthreads().values())
    except Exception:
        print("\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(logs.iterdir())))
        raise
    return address


@pytest.fixture
def compose_topology(compose, tmp_path, request):
    """docker-compose.yml's scheduler and two CPU workers (``--scale cpu-worker=2``); yields the address."""
    procs = []
    request.addfinalizer(lambda: _stop(procs))
    return _start_topology(compose["services"], 2, tmp_path, procs, _env())


@pytest.mark.integration
def test_compose_topology_runs_a_join(compose_topology, tmp_path):
    """``daskjoin synth`` then ``daskjoin join --scheduler`` on the compose topology; pairs equal cKDTree's."""
    import pyarrow.parquet as pq
    import zarr
    from scipy.spatial import cKDTree

    env = _env()
    data, out, eps = tmp_path / "points.zarr", tmp_path / "pairs.parquet", 0.02
    synth = subprocess.run([str(BIN / "daskjoin"), "synth", "uniform", str(data), "--n", "4000", "--d", "2",
                            "--seed", "7", "--chunk-rows", "500"], env=env, capture_output=True, text=True, timeout=60)
    assert synth.returncode == 0, synth.stderr
    join = subprocess.run([str(BIN / "daskjoin"), "join", str(data), "--eps", str(eps), "--scheduler", compose_topology,
                           "--out", str(out), "--memory-budget", "64KiB", "--quiet"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert join.returncode == 0, join.stdout + join.stderr
    x = zarr.open_array(str(data), mode="r")[:].astype(np.float64)
    expected = cKDTree(x).query_pairs(eps, output_type="ndarray")
    table = pq.read_table(str(out)).to_pandas()
    assert len(table) == len(expected) > 0
    assert set(zip(table["i"], table["j"])) == set(map(tuple, expected.tolist()))
    assert f"{len(expected):,} pairs" in join.stdout


def test_compose_tls_override_only_adds_tls(compose):
    """deploy/docker/compose.tls.yml: the base commands with tls:// and the --tls-* options, nothing else."""
    tls = yaml.safe_load(TLS_OVERRIDE.read_text())["services"]
    for name in ("scheduler", "gpu-worker", "cpu-worker"):
        base = [w.replace("tcp://scheduler", "tls://scheduler") for w in compose["services"][name]["command"]]
        command = tls[name]["command"]
        assert command[:len(base)] == base, name
        extra = command[len(base):]
        role = "scheduler" if name == "scheduler" else "worker"
        assert extra == ["--tls-ca-file", "/certs/ca.pem", "--tls-cert", f"/certs/{role}.pem",
                         "--tls-key", f"/certs/{role}.key"], name
    assert tls["notebook"]["environment"]["DASK_SCHEDULER_ADDRESS"] == "tls://scheduler:8786"
    assert set(tls) == {"scheduler", "gpu-worker", "cpu-worker", "notebook"}


@pytest.mark.integration
def test_compose_tls_override_runs(compose, tls_files, tmp_path, request):
    """The TLS override's scheduler and worker commands, and the notebook's client settings, connect."""
    import copy

    certs = str(tls_files)
    services = copy.deepcopy(compose["services"])
    tls = yaml.safe_load(TLS_OVERRIDE.read_text())["services"]
    for name in ("scheduler", "cpu-worker"):
        services[name]["command"] = [w.replace("/certs", certs) for w in tls[name]["command"]]
    procs = []
    request.addfinalizer(lambda: _stop(procs))
    from distributed.security import Security

    security = Security(tls_ca_file=f"{certs}/ca.pem", tls_client_cert=f"{certs}/client.pem",
                        tls_client_key=f"{certs}/client.key", require_encryption=True)
    address = _start_topology(services, 1, tmp_path, procs, _env(), security)
    client_env = {k: v.replace("/certs", certs) for k, v in tls["notebook"]["environment"].items()}
    client_env["DASK_SCHEDULER_ADDRESS"] = address
    proc = subprocess.run([str(BIN / "daskjoin"), "info", "--scheduler", address, "--json"], env=_env(**client_env),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["scheduler"]["dask_config"] == address
    assert [w.split("://")[0] for w in report["cluster"]["workers"]] == ["tls"]
    plain = subprocess.run([str(BIN / "daskjoin"), "info", "--scheduler", address, "--timeout", "3"], env=_env(),
                           capture_output=True, text=True, timeout=120)
    assert plain.returncode == 1  # no client certificate, no connection


# --------------------------------------------------------------------------- HPC: dask-jobqueue


def _flatten(tree: dict, prefix: str = ""):
    for key, value in tree.items():
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and value:
            yield from _flatten(value, name)
        else:
            yield name, value


@pytest.fixture
def hpc_config():
    """deploy/hpc/jobqueue.yaml as the Dask config, for this test only."""
    import dask.config
    import dask_jobqueue  # noqa: F401 - loads dask-jobqueue's defaults first, as at a user's site

    with dask.config.set(dict(_flatten(yaml.safe_load(JOBQUEUE.read_text())))):
        yield


def _render(kind: str) -> str:
    from daskjoin.execution.jobqueue import make_cluster

    cluster = make_cluster(kind, scheduler_options={"dashboard_address": ":0"})  # nothing is submitted
    try:
        return cluster.job_script()
    finally:
        cluster.close()


def _worker_line(script: str) -> str:
    (line,) = [line for line in script.splitlines() if "dask_cuda" in line or "dask_worker" in line]
    return line


def _check_worker_command(script: str):
    line = _worker_line(script)
    assert f"{sys.executable} -m dask_cuda.cli tcp://" in line  # python -m dask_cuda.cli == dask cuda worker
    assert "distributed.cli.dask_worker" not in script
    assert "--nthreads 1 " in line and "--memory-limit 64.00GiB" in line
    assert line.endswith("--resources GPU=1") and "--death-timeout 120" in line


def test_slurm_job_script(hpc_config):
    script = _render("slurm")
    directives = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    for expected in ("#SBATCH --gres=gpu:1", "#SBATCH -t 02:00:00", "#SBATCH --mem=64G", "#SBATCH --cpus-per-task=8",
                     "#SBATCH -p gpu", "#SBATCH -n 1", "#SBATCH -J daskjoin-gpu"):
        assert expected in directives, f"{expected!r} not in {directives}"
    _check_worker_command(script)


def test_pbs_job_script(hpc_config):
    script = _render("pbs")
    directives = [line for line in script.splitlines() if line.startswith("#PBS")]
    for expected in ("#PBS -l select=1:ncpus=8:ngpus=1:mem=64gb", "#PBS -l walltime=02:00:00", "#PBS -q gpu",
                     "#PBS -N daskjoin-gpu"):
        assert expected in directives, f"{expected!r} not in {directives}"
    _check_worker_command(script)


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    """A CA and a certificate per role, made with openssl as docs/security.md shows (hostnames are not checked)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    d = tmp_path_factory.mktemp("tls")

    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=daskjoin-ca",
            "-keyout", "ca.key", "-out", "ca.pem")
    for role in ("scheduler", "worker", "client"):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN=daskjoin-{role}", "-keyout", f"{role}.key",
                "-out", f"{role}.csr")
        openssl("x509", "-req", "-in", f"{role}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-days", "2", "-out", f"{role}.pem")
    return d


def test_job_script_with_tls_from_config(hpc_config, tls_files):
    """``distributed.comm.require-encryption`` in dask config: a tls:// scheduler, workers given their certs."""
    import dask.config

    d = tls_files
    tls = {"distributed.comm.require-encryption": True, "distributed.comm.tls.ca-file": str(d / "ca.pem")}
    for role in ("scheduler", "worker", "client"):
        tls[f"distributed.comm.tls.{role}.cert"] = str(d / f"{role}.pem")
        tls[f"distributed.comm.tls.{role}.key"] = str(d / f"{role}.key")
    with dask.config.set(tls):
        line = _worker_line(_render("slurm"))
    assert " tls://" in line and " tcp://" not in line
    for option, name in (("--tls-ca-file", "ca.pem"), ("--tls-cert", "worker.pem"), ("--tls-key", "worker.key")):
        assert f"{option} {d / name}" in line


def test_dask_cuda_cli_module_runs_the_worker():
    """``worker-command: dask_cuda.cli`` relies on ``python -m dask_cuda.cli`` starting the worker."""
    module = pytest.importorskip("dask_cuda", reason="dask-cuda (the gpu extra) is not installed")
    source = Path(module.__file__).with_name("cli.py").read_text()
    assert re.search(r'if __name__ == "__main__":\s+worker\(\)', source)


def test_config_without_cores_is_refused():
    import dask.config
    # its defaults loaded first: imported inside the `set` below, they were added under a `jobqueue` key the set
    # had created, and dropped with it at the set's exit, failing later jobqueue tests of this process
    import dask_jobqueue  # noqa: F401

    from daskjoin.execution.jobqueue import make_cluster
    from daskjoin.validation import InputError

    with dask.config.set({"jobqueue.slurm.cores": None, "jobqueue.slurm.memory": "8GB"}):
        with pytest.raises(InputError, match=r"jobqueue\.slurm\.cores.*DASK_CONFIG"):
            make_cluster("slurm", 2)


def test_missing_dask_jobqueue_is_refused(monkeypatch):
    from daskjoin.execution.jobqueue import make_cluster
    from daskjoin.validation import InputError

    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)  # import fails as if not installed
    with pytest.raises(InputError, match=r"pip install 'daskjoin\[hpc\]'"):
        make_cluster("pbs", 1)


def test_unknown_kind_and_bad_jobs(hpc_config):
    from daskjoin.execution.jobqueue import make_cluster
    from daskjoin.validation import InputError

    with pytest.raises(InputError, match="cluster kind must be one of"):
        make_cluster("lsf", 1)
    with pytest.raises(InputError, match="jobs must be a whole number"):
        make_cluster("slurm", -1)


def test_no_sbatch_is_refused_before_submitting(hpc_config, monkeypatch, tmp_path):
    from daskjoin.execution.jobqueue import make_cluster
    from daskjoin.validation import InputError

    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch, no qsub
    with pytest.raises(InputError, match="sbatch, which is not on PATH"):
        make_cluster("slurm", 2)
    with pytest.raises(InputError, match="qsub, which is not on PATH"):
        make_cluster("pbs", 2)


@pytest.fixture(scope="module")
def small_zarr(tmp_path_factory):
    from joinhelpers import write_zarr

    d = tmp_path_factory.mktemp("deploy")
    x = np.random.default_rng(3).random((600, 2))
    return write_zarr(d / "x.zarr", x, 100), x


@pytest.mark.integration
def test_cli_cluster_slurm_without_sbatch(small_zarr, tmp_path):
    """A real ``daskjoin join --cluster slurm`` where sbatch is missing: one line, exit 2, no traceback."""
    path, _ = small_zarr
    env = _env(DASK_CONFIG=str(JOBQUEUE), PATH=str(BIN) + os.pathsep + "/usr/bin:/bin")
    proc = subprocess.run([str(BIN / "daskjoin"), "join", path, "--eps", "0.05", "--out", str(tmp_path / "o.parquet"),
                           "--cluster", "slurm", "--jobs", "2"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("daskjoin: error: --cluster slurm submits batch jobs with sbatch")
    assert not (tmp_path / "o.parquet").exists()


def _fake_batch_system(bindir: Path, *, refuse: bool = False) -> None:
    """``sbatch`` that runs the job script on this machine (its pid is the job id) and ``scancel`` that kills it."""
    bindir.mkdir(exist_ok=True)
    if refuse:
        sbatch = '#!/bin/sh\necho "sbatch: error: invalid partition specified: gpu" >&2\nexit 1\n'
    else:
        # a copy: dask-jobqueue deletes its script as soon as sbatch returns
        sbatch = ('#!/bin/sh\njob=$(mktemp "%s/job-XXXXXX")\ncp "$1" "$job"\n'
                  'setsid bash "$job" > "$job.log" 2>&1 < /dev/null &\necho "Submitted batch job $!"\n' % bindir)
    (bindir / "sbatch").write_text(sbatch)
    (bindir / "scancel").write_text('#!/bin/sh\nfor id in "$@"; do kill -TERM -- "-$id" 2>/dev/null; done\nexit 0\n')
    for name in ("sbatch", "scancel"):
        (bindir / name).chmod(0o755)


def test_cli_cluster_refused_submission_fails_cleanly(small_zarr, hpc_config, monkeypatch, tmp_path, capsys):
    """sbatch refuses the jobs: exit 1 with a one-line reason once SUBMIT_TIMEOUT has passed, not an endless wait."""
    from daskjoin import cli
    from daskjoin.execution import jobqueue

    path, _ = small_zarr
    _fake_batch_system(tmp_path / "bin", refuse=True)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(jobqueue, "SUBMIT_TIMEOUT", 2.0)
    rc = cli.main(["join", path, "--eps", "0.05", "--count", "--quiet", "--cluster", "slurm"])
    err = capsys.readouterr().err
    assert rc == 1
    last = [line for line in err.splitlines() if line.startswith("daskjoin:")][-1]
    assert last.startswith("daskjoin: failed: RuntimeError: the batch system took none of the 1 job(s) within 2 s")


@pytest.mark.integration
def test_cli_cluster_slurm_end_to_end_with_a_stand_in_sbatch(small_zarr, tmp_path):
    """``daskjoin join --cluster slurm --jobs 2`` with jobs run on this machine: right pairs, jobs cancelled after."""
    from oracle import oracle_self_count

    path, x = small_zarr
    config = yaml.safe_load(JOBQUEUE.read_text())
    slurm = config["jobqueue"]["slurm"]
    slurm.update({"worker-command": "distributed.cli.dask_worker", "worker-extra-args": [], "memory": "2GiB",
                  "scheduler-options": {"dashboard_address": ":0"}, "death-timeout": 20,
                  "local-directory": str(tmp_path / "scratch")})  # marks the workers' command lines
    config_file = tmp_path / "jobqueue.yaml"
    config_file.write_text(yaml.safe_dump(config))
    _fake_batch_system(tmp_path / "bin")
    env = _env(DASK_CONFIG=str(config_file), TMPDIR=str(tmp_path),
               PATH=os.pathsep.join([str(tmp_path / "bin"), str(BIN), "/usr/bin", "/bin"]))
    proc = subprocess.run([str(BIN / "daskjoin"), "join", path, "--eps", "0.05", "--count", "--quiet",
                           "--cluster", "slurm", "--jobs", "2"], env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == f"{oracle_self_count(x, 0.05)}\n"
    assert "submitted 2 slurm job(s)" in proc.stderr
    assert len(list((tmp_path / "bin").glob("job-*.log"))) == 2
    deadline = time.monotonic() + 30  # scancel ended the jobs' workers
    while True:
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        leftover = [line for line in ps.splitlines() if str(tmp_path / "scratch") in line]
        if not leftover or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert not leftover, leftover


class _FakeJobqueue:
    """Stands in for daskjoin.execution.jobqueue.make_cluster: records the call, returns a LocalCluster."""

    def __init__(self):
        self.calls, self.clusters = [], []

    def __call__(self, kind, jobs=None, **overrides):
        from distributed import LocalCluster

        self.calls.append((kind, jobs, overrides))
        cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None)
        self.clusters.append(cluster)
        return cluster


def test_cli_cluster_arguments_reach_the_factory(small_zarr, monkeypatch, capsys):
    from daskjoin import cli
    from daskjoin.execution import jobqueue
    from oracle import oracle_self_count

    path, x = small_zarr
    fake = _FakeJobqueue()
    monkeypatch.setattr(jobqueue, "make_cluster", fake)
    rc = cli.main(["join", path, "--eps", "0.05", "--count", "--quiet", "--cluster", "pbs", "--jobs", "3"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert fake.calls == [("pbs", 3, {})]
    assert captured.out == f"{oracle_self_count(x, 0.05)}\n"
    assert "submitted 3 pbs job(s)" in captured.err
    assert fake.clusters[0].status.name == "closed"  # the CLI cancels its jobs when done


@pytest.mark.parametrize("args, words", [
    (["--scheduler", "tcp://127.0.0.1:1", "--cluster", "slurm"], ["not allowed with argument"]),
    (["--cluster", "sge"], ["invalid choice", "sge"]),
    (["--jobs", "2"], ["--jobs 2 needs --cluster slurm or --cluster pbs"]),
    (["--cluster", "slurm", "--jobs", "0"], ["--jobs must be at least 1"]),
])
def test_cli_cluster_argument_errors(small_zarr, capsys, args, words):
    from daskjoin import cli

    path, _ = small_zarr
    try:
        rc = cli.main(["join", path, "--eps", "0.05", "--count", *args])
    except SystemExit as exc:  # argparse's own errors
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2
    for word in words:
        assert word in err


# --------------------------------------------------------------------------- the sbatch script


def test_sbatch_script_is_valid_bash_with_gpu_directives():
    assert subprocess.run(["bash", "-n", str(SBATCH)]).returncode == 0
    text = SBATCH.read_text()
    directives = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert any(line.startswith("#SBATCH --gres=gpu:") for line in directives)
    assert any(line.startswith("#SBATCH --time=") for line in directives)
    assert "dask cuda worker --resources GPU=1" in text and "daskjoin join" in text


@pytest.mark.integration
@pytest.mark.parametrize("protocol", ["tcp", pytest.param("tls", marks=pytest.mark.slow)])  # TLS joins: test_tls.py
def test_sbatch_script_runs_a_join_with_a_stand_in_srun(small_zarr, tmp_path, request, protocol):
    """The batch script end to end on this machine: ``srun`` runs its command once, CPU workers."""
    path, x = small_zarr
    tls = {"DASKJOIN_TLS_DIR": str(request.getfixturevalue("tls_files"))} if protocol == "tls" else {}
    from scipy.spatial import cKDTree

    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    srun = fakebin / "srun"
    srun.write_text('#!/bin/sh\nwhile [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done\nexec "$@"\n')
    srun.chmod(0o755)
    out = tmp_path / "pairs.parquet"
    env = _env(PATH=os.pathsep.join([str(fakebin), str(BIN), "/usr/bin", "/bin"]), SLURM_SUBMIT_DIR=str(tmp_path),
               SLURM_JOB_ID="4242", SLURM_JOB_NUM_NODES="1", DASKJOIN_WORKER="dask worker",
               DASKJOIN_JOIN_ARGS="--memory-budget 64KiB", **tls)
    proc = subprocess.run(["bash", str(SBATCH), path, "0.04", str(out)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=150)
    logs = "".join(f"\n--- {p.name}\n{p.read_text()[-1500:]}" for p in (tmp_path / "daskjoin-4242").glob("*.log"))
    assert proc.returncode == 0, proc.stdout + proc.stderr + logs
    expected = len(cKDTree(x).query_pairs(0.04))
    assert f"{expected:,} pairs" in proc.stdout, proc.stdout
    assert f"daskjoin: 1 workers at {protocol}://" in proc.stdout


# --------------------------------------------------------------------------- air-gapped wheelhouse and the docs


def test_wheelhouse_script_is_valid_and_has_help():
    assert subprocess.run(["bash", "-n", str(WHEELHOUSE)]).returncode == 0
    proc = subprocess.run(["bash", str(WHEELHOUSE), "--help"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and "--slim" in proc.stdout
    assert INSTALL_LINE.replace("WHEELHOUSE", "DIR") in proc.stdout
    bad = subprocess.run(["bash", str(WHEELHOUSE), "--nope"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "unknown option --nope" in bad.stderr


def test_deploy_readme_documents_the_wheelhouse():
    text = (ROOT / "deploy" / "README.md").read_text()
    assert "bash deploy/build-wheelhouse.sh" in text and INSTALL_LINE in text


DOCS = ["deploy/README.md", "deploy/hpc/README.md", "docs/deployment.md", "docs/security.md"]


@pytest.mark.parametrize("doc", DOCS)
def test_docs_name_files_that_exist(doc):
    text = (ROOT / doc).read_text()
    named = set(re.findall(r"(?<![\w/.~-])((?:deploy|docs|daskjoin)/[\w./-]*\w|docker-compose\.yml)", text))
    assert named
    missing = sorted(name for name in named if not (ROOT / name).exists())
    assert not missing, f"{doc} names files that do not exist: {missing}"
