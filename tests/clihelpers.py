"""Running the real ``daskjoin`` CLI as subprocesses, for the CLI tests."""
from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
from pathlib import Path

from joinhelpers import QUIET_DASK_ENV

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 240


def _env(**extra):
    """This environment without any scheduler settings, with the checkout importable."""
    env = {k: v for k, v in os.environ.items()
           if k != "DASKJOIN_SCHEDULER" and (not k.startswith("DASK_") or k in QUIET_DASK_ENV)}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def run_cli(args, cwd, *, env=None, timeout=TIMEOUT):
    """``python -m daskjoin ARGS`` in ``cwd``; returns the CompletedProcess (text)."""
    return subprocess.run([sys.executable, "-m", "daskjoin", *map(str, args)], cwd=str(cwd), env=env or _env(),
                          capture_output=True, text=True, timeout=timeout)


def run_many(jobs, cwd, *, env=None, workers=6):
    """Run several CLI invocations concurrently: {key: args} -> {key: CompletedProcess}."""
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futures = {key: pool.submit(run_cli, args, cwd, env=env) for key, args in jobs.items()}
        return {key: f.result() for key, f in futures.items()}


def _explain(proc) -> str:
    return f"rc={proc.returncode}\n--- stdout:\n{proc.stdout[-3000:]}\n--- stderr:\n{proc.stderr[-3000:]}"
