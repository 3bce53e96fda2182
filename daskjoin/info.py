"""``daskjoin info``: what is installed, which GPUs are visible, which scheduler is in use.

The first thing to run (and paste into an issue) when a deployment misbehaves: version
mismatches between client and workers, a worker that sees no GPU, or a notebook that is
not connected where it should be show up here.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import shutil
import subprocess
import sys

#: module -> distribution, in the order they are printed
PACKAGES = {
    "numpy": "numpy", "dask": "dask", "distributed": "distributed", "zarr": "zarr", "numba": "numba",
    "pyarrow": "pyarrow", "cupy": None, "dask_cuda": "dask-cuda", "dask_jobqueue": "dask-jobqueue",
}
NOT_INSTALLED = "not installed"


def package_version(module: str, dist: str | None = None) -> str:
    """The installed version of ``module`` without importing it, or "not installed"."""
    if importlib.util.find_spec(module) is None:
        return NOT_INSTALLED
    names = [dist] if dist else importlib.metadata.packages_distributions().get(module, [])
    for name in names:  # cupy comes as cupy-cuda13x, cupy-cuda12x, ...
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return getattr(importlib.import_module(module), "__version__", "unknown")


def versions() -> dict:
    """daskjoin, python and the packages of :data:`PACKAGES`, by distribution name."""
    import daskjoin

    out = {"daskjoin": daskjoin.__version__, "python": platform.python_version()}
    for module, dist in PACKAGES.items():
        out[dist or module] = package_version(module, dist)
    return out


def visible_gpus() -> dict:
    """The CUDA devices this process sees: through CuPy when it works, else ``nvidia-smi -L``."""
    notes = []
    if importlib.util.find_spec("cupy") is not None:
        try:
            import cupy

            devices = []
            for i in range(cupy.cuda.runtime.getDeviceCount()):
                props = cupy.cuda.runtime.getDeviceProperties(i)
                name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
                devices.append({"id": i, "name": name, "memory_bytes": int(props["totalGlobalMem"])})
            return {"source": "cupy", "devices": devices}
        except Exception as exc:  # noqa: BLE001 - no driver, no device: say why and fall back
            notes.append(f"cupy: {type(exc).__name__}: {exc}")
    else:
        notes.append("cupy: not installed")
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            proc = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
            lines = [line.strip() for line in proc.stdout.splitlines() if line.startswith("GPU ")]
            return {"source": "nvidia-smi", "devices": [{"id": i, "name": line} for i, line in enumerate(lines)],
                    "notes": notes}
        except (OSError, subprocess.SubprocessError) as exc:
            notes.append(f"nvidia-smi: {exc}")
    else:
        notes.append("nvidia-smi: not on PATH")
    return {"source": "none", "devices": [], "notes": notes}


def kernel_cache() -> dict:
    """Where Numba keeps daskjoin's compiled CPU kernels here and how many files of compiled code are there
    (``daskjoin warm`` fills it; empty, each new process compiles what its first join uses; files of earlier
    versions of a kernel stay and count): ``{"files": count, "paths": [...]}``."""
    from .kernels import grid
    from .kernels.sets import measures

    # (the cache folders of the two packages of Numba kernels, found as Numba finds them: beside the modules, or
    # under NUMBA_CACHE_DIR, or in its per-user folder where the package's is read-only)
    paths = sorted({fn._cache.cache_path for fn in (grid._visit_points, measures.meets)})
    files = sum(1 for path in paths if os.path.isdir(path) for name in os.listdir(path) if name.endswith(".nbc"))
    return {"files": files, "paths": paths}


def worker_facts(dask_worker=None) -> dict:
    """Run on each worker by ``client.run``: its threads, memory, resources, GPUs and versions."""
    from .kernels.gpu_common import gpu_available

    gpus = visible_gpus()
    return {
        "name": str(dask_worker.name) if dask_worker is not None else None,
        "nthreads": dask_worker.state.nthreads if dask_worker is not None else None,
        "memory_limit": dask_worker.memory_manager.memory_limit if dask_worker is not None else None,
        "resources": dict(dask_worker.state.total_resources) if dask_worker is not None else {},
        "gpu": gpu_available(),
        "gpus": [d["name"] for d in gpus["devices"]],
        "kernel_cache_files": kernel_cache()["files"],
        "versions": {k: v for k, v in versions().items() if k in ("daskjoin", "python", "dask", "distributed")},
    }


def cluster_facts(address: str, timeout: float = 10.0) -> dict:
    """The workers of the scheduler at ``address``, as :func:`worker_facts` reports them."""
    from distributed import Client

    try:
        client = Client(address, timeout=timeout, set_as_default=False)
    except OSError as exc:
        raise OSError(f"no Dask scheduler answered at {address} within {timeout:g} s ({exc})") from None
    try:
        workers = client.run(worker_facts)
    finally:
        client.close()
    return {"address": address, "workers": dict(sorted(workers.items()))}


def collect(scheduler: str | None = None, timeout: float = 10.0) -> dict:
    """Everything ``daskjoin info`` reports, as a JSON-ready dict."""
    from .execution.cluster import configured_address

    report = {
        "versions": versions(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "gpus": visible_gpus(),
        "kernel_cache": kernel_cache(),
        "scheduler": {
            "dask_config": configured_address(),
            "DASKJOIN_SCHEDULER": os.environ.get("DASKJOIN_SCHEDULER") or None,
        },
    }
    if scheduler:
        report["cluster"] = cluster_facts(scheduler, timeout)
    return report


def _bytes(n) -> str:
    from dask.utils import format_bytes

    return format_bytes(n) if n else "no limit"


def render(report: dict) -> str:
    """The human-readable form of :func:`collect`'s report."""
    v = report["versions"]
    width = max(map(len, v))
    lines = [f"{name:<{width}}  {version}" for name, version in v.items()]
    lines[1] += f"  ({report['executable']})"
    gpus = report["gpus"]
    if gpus["devices"]:
        lines.append(f"GPUs ({gpus['source']}):")
        lines += [f"  {d['id']}: {d['name']}" + (f", {_bytes(d['memory_bytes'])}" if "memory_bytes" in d else "")
                  for d in gpus["devices"]]
    else:
        lines.append("GPUs: none visible (" + "; ".join(gpus.get("notes", [])) + ")")
    cache = report.get("kernel_cache")
    if cache is not None:
        lines.append(f"CPU kernel cache (Numba): {cache['files']} files in {', '.join(cache['paths'])}"
                     + ("" if cache["files"] else "; empty: run `daskjoin warm`, or each new process compiles "
                        "the kernels its first join uses"))
    sched = report["scheduler"]
    lines.append(f"scheduler (dask config scheduler-address): {sched['dask_config'] or 'not set'}")
    if sched["DASKJOIN_SCHEDULER"]:
        lines.append(f"scheduler (DASKJOIN_SCHEDULER): {sched['DASKJOIN_SCHEDULER']}")
    cluster = report.get("cluster")
    if cluster is not None:
        workers = cluster["workers"]
        threads = sum(w["nthreads"] or 0 for w in workers.values())
        lines.append(f"cluster {cluster['address']}: {len(workers)} worker(s), {threads} thread(s), "
                     f"{sum(1 for w in workers.values() if w['gpu'])} with a GPU")
        for addr, w in workers.items():
            gpu = ("GPU: " + ", ".join(w["gpus"])) if w["gpu"] else "GPU: none"
            res = " ".join(f"{k}={v:g}" for k, v in w["resources"].items())
            lines.append(f"  {addr}  name={w['name']}  threads={w['nthreads']}  memory={_bytes(w['memory_limit'])}"
                         f"  {gpu}" + (f"  resources: {res}" if res else "")
                         + (f"  kernel cache: {w['kernel_cache_files']} files" if "kernel_cache_files" in w else "")
                         + f"  daskjoin {w['versions']['daskjoin']}, dask {w['versions']['dask']}")
    return "\n".join(lines)
