"""Dask clusters made of batch jobs (SLURM, PBS) through dask-jobqueue.

The job shape (cores, memory, GPUs, walltime, the worker command) lives in Dask's
configuration under ``jobqueue.slurm`` / ``jobqueue.pbs`` (``~/.config/dask/jobqueue.yaml``
or a file named by ``DASK_CONFIG``; ``deploy/hpc/jobqueue.yaml`` is an example for GPU
jobs), so the command line only says how many jobs.  What is missing is reported as an
:class:`~daskjoin.validation.InputError` before anything is submitted.
"""
from __future__ import annotations

import shutil
import time

from ..validation import InputError

#: seconds after which a cluster none of whose jobs has a job id counts as refused by the batch system
SUBMIT_TIMEOUT = 60.0

#: --cluster name -> dask_jobqueue class
KINDS = {"slurm": "SLURMCluster", "pbs": "PBSCluster"}

_CONFIG_HELP = ("set it in ~/.config/dask/jobqueue.yaml or in a file named by the DASK_CONFIG environment "
                "variable (deploy/hpc/jobqueue.yaml is an example for GPU jobs)")


def cluster_class(kind: str):
    """The dask_jobqueue class for ``kind``; InputError if the kind is unknown or dask-jobqueue is missing."""
    if kind not in KINDS:
        raise InputError(f"cluster kind must be one of {sorted(KINDS)}, got {kind!r}")
    try:
        import dask_jobqueue
    except ImportError as exc:
        raise InputError(
            f"--cluster {kind} needs dask-jobqueue, which is not installed ({exc}); "
            "install it with: pip install 'daskjoin[hpc]'"
        ) from None
    return getattr(dask_jobqueue, KINDS[kind])


def job_config(kind: str, overrides: dict | None = None) -> dict:
    """The ``jobqueue.<kind>`` section of the Dask config, updated with ``overrides``.

    Raises InputError when it lacks ``cores`` or ``memory``: dask-jobqueue cannot size a
    job without them, and its own error points at Python arguments, not at the config file.
    """
    import dask.config

    cluster_class(kind)  # also loads dask-jobqueue's defaults into the config
    config = dict(dask.config.get(f"jobqueue.{kind}", default={}) or {})
    config.update({k.replace("_", "-"): v for k, v in (overrides or {}).items()})
    missing = [key for key in ("cores", "memory") if config.get(key) is None]
    if missing:
        raise InputError(
            f"the Dask config has no jobqueue.{kind}.{' or jobqueue.{kind}.'.join(missing)} "
            f"(got cores={config.get('cores')!r}, memory={config.get('memory')!r}); {_CONFIG_HELP}"
        )
    return config


def make_cluster(kind: str, jobs: int | None = None, **overrides):
    """A dask-jobqueue cluster of ``kind`` ('slurm' or 'pbs'), scaled to ``jobs`` batch jobs.

    ``overrides`` are keyword arguments of the dask_jobqueue class (``cores=``, ``walltime=``,
    ``job_extra_directives=``, ...) and win over the config.  With ``jobs`` 0 or None nothing
    is submitted, which renders job scripts anywhere: ``make_cluster("slurm").job_script()``.
    Close the cluster to cancel its jobs.  When dask config sets
    ``distributed.comm.require-encryption``, scheduler and workers talk TLS with the
    certificates named under ``distributed.comm.tls``.
    """
    import dask.config

    cls = cluster_class(kind)
    job_config(kind, overrides)
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0):
        raise InputError(f"jobs must be a whole number >= 0, got {jobs!r}")
    if jobs:
        submit = cls.job_cls.submit_command
        if shutil.which(submit) is None:
            raise InputError(
                f"--cluster {kind} submits batch jobs with {submit}, which is not on PATH: run daskjoin on a "
                f"{kind.upper()} login node, or start the workers yourself and pass --scheduler ADDRESS"
            )
    if "security" not in overrides and dask.config.get("distributed.comm.require-encryption", None):
        from distributed.security import Security

        # TLS from distributed.comm.tls.* (docs/security.md); the job scripts get the worker's
        # --tls-* options and the scheduler listens on tls:// only.
        overrides["security"] = Security()
    cluster = cls(**overrides)
    if jobs:
        cluster.scale(jobs=jobs)
    return cluster


def wait_for_first_worker(cluster, client, *, poll: float = 0.5) -> None:
    """Block until a worker has joined, however long the queue; raise if no job was submitted.

    dask-jobqueue submits in the background and only logs a refused submission (a bad
    partition, an account without GPU hours), so without this check a refusal would
    look like a long queue.
    """
    start = time.monotonic()
    while not client.nthreads():
        jobs = list(cluster.workers.values())
        if time.monotonic() - start > SUBMIT_TIMEOUT and not any(getattr(job, "job_id", None) for job in jobs):
            submit = type(cluster).job_cls.submit_command
            raise RuntimeError(f"the batch system took none of the {len(jobs)} job(s) within {SUBMIT_TIMEOUT:g} s; "
                               f"{submit}'s own message is in the log above")
        time.sleep(poll)
