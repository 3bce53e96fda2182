"""The ``daskjoin`` command line: argument parsing only; everything else is the Python API.

Exit codes: 0 success, 2 bad input (nothing written), 1 any other failure.

Other modules add subcommands with one function, ``add_commands(sub, command)``, listed in
:data:`EXTENSIONS`: ``command(name, help_text, example=..., handler=...)`` returns the new
subparser (``handler(args) -> int`` may also be set later with ``p.set_defaults(handler=f)``).
Every command needs an example: it ends the command's ``--help``.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import re
import signal
import sys
import threading
import time

from .execution.progress import Terminated

EXAMPLES = {
    "join": "daskjoin join points.zarr --eps 0.01 --out pairs.parquet\n"
            "  daskjoin join a.zarr b.zarr --eps 0.5 --count --scheduler tcp://10.0.0.5:8786\n"
            "  daskjoin join points.zarr --eps 0.01 --out pairs.parquet --cluster slurm --jobs 4",
    "plan": "daskjoin plan points.zarr --eps 0.01 --memory-budget 2GB\n  daskjoin plan points.zarr --knn 16",
    "synth": "daskjoin synth uniform --n 1000000 --d 2 --seed 0 points.zarr",
    "import": "daskjoin import points.csv points.zarr",
    "info": "daskjoin info\n  daskjoin info --scheduler tcp://10.0.0.5:8786 --json",
    "warm": "daskjoin warm\n  NUMBA_CACHE_DIR=/var/cache/daskjoin daskjoin warm --no-gpu",
}

#: Modules whose ``add_commands(sub, command)`` adds subcommands (skipped while not present).
EXTENSIONS = ("daskjoin.cli_sets", "daskjoin.cli_knn")

CLUSTERS = ("local", "local-cuda", "slurm", "pbs")


def _parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="daskjoin",
        description="Exact similarity joins at any scale: Zarr in, Dask graph of Numba kernels, Parquet out.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    examples = []

    def command(name: str, help_text: str, example: str | None = None, handler=None) -> argparse.ArgumentParser:
        example = example or EXAMPLES.get(name)
        if not example:
            raise ValueError(f"daskjoin command {name!r} needs an example for its --help")
        examples.append(example)
        p = sub.add_parser(
            name, help=help_text, description=help_text, epilog="Example:\n  " + example,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if handler is not None:
            p.set_defaults(handler=handler)
        p.add_argument("--verbose", action="store_true", help="on failure, print the full traceback too")
        return p

    def join_options(p: argparse.ArgumentParser, *, clusters: bool = False, eps_required: bool = True) -> None:
        p.add_argument("a", help="Zarr array of points (rows)")
        p.add_argument("b", nargs="?", help="second Zarr array for an A×B join (omit for a self-join)")
        p.add_argument("--eps", required=eps_required, type=float, help="join radius: pairs with distance <= EPS")
        p.add_argument("--method", default="auto", help="auto, grid, brute, szl, nlj or directory (default: auto; "
                       "docs/algorithms.md compares them)")
        p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", dest="options",
                       help="an option of the method, repeatable: grid pattern=unicomp (or lid-unicomp, the "
                            "default); szl lists=1..8 shifts=uniform|uniform-logd|random; directory levels=N "
                            "fanout=N pca=true; GPU tuning such as threads_per_point=4 (docs/algorithms.md)")
        p.add_argument("--partitioning", default="auto", help="auto, chunk_pairs or slabs (default: auto)")
        p.add_argument("--backend", default="auto",
                       help="auto (each task on its worker's GPU if CuPy sees one, else CPU), cpu or gpu (default: auto)")
        p.add_argument("--memory-budget", default=None, help="memory per task, e.g. 2GB (default: auto, a quarter of a worker's memory per thread)")
        p.add_argument("--missing-chunks", choices=("error", "fill"), default=None,
                       help="a chunk file missing from a Zarr input: error (default) or read it as the fill value")
        where = p.add_mutually_exclusive_group() if clusters else p
        where.add_argument("--scheduler", default=None,
                           help="address of a running Dask scheduler (default: threads of this process)")
        if clusters:
            where.add_argument("--cluster", choices=CLUSTERS, default=None,
                               help="local: a Dask cluster on this machine (worker processes); local-cuda: one "
                                    "dask-cuda worker per GPU of this machine; slurm or pbs: --jobs "
                                    "batch jobs configured in dask config's jobqueue.slurm / jobqueue.pbs "
                                    "(deploy/hpc/jobqueue.yaml); default: threads of this process")
            p.add_argument("--jobs", type=int, default=None, help="batch jobs to submit with --cluster slurm|pbs (default: 1)")
            p.add_argument("--rmm-pool-size", default=None, metavar="SIZE",
                           help="with --cluster local-cuda: each worker's CuPy allocates from an RMM pool of SIZE "
                                "(e.g. 40GB, or 0.8 of the device; needs the rmm-cu13 package)")

    join = command("join", "Join and write the pairs to Parquet (or print their exact count).", handler=_join)
    join_options(join, clusters=True)
    join.add_argument("--out", help="output directory of Parquet files (required unless --count)")
    join.add_argument("--count", action="store_true", help="print the exact number of pairs; write nothing")
    join.add_argument("--no-distance", action="store_true", help="omit the dist column")
    join.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    join.add_argument("--resume", action="store_true",
                      help="continue an interrupted run to --out: only the partitions it did not finish are computed "
                           "(refused if the inputs or parameters differ; a finished one is not run again)")
    join.add_argument("--quiet", action="store_true", help="no progress bar")
    join.add_argument("--timings", metavar="FILE", default=None,
                      help="write the run's phases (start, client, plan and its data passes, join, time in tasks) "
                           "as JSON to FILE")

    plan = command("plan", "Print the plan of a join (method, partitions, estimate) without running it.", handler=_plan)
    join_options(plan, eps_required=False)
    plan.add_argument("--knn", type=int, default=None, metavar="K",
                      help="plan a kNN-join with K neighbours per row instead of an ε-join (no --eps)")
    plan.add_argument("--count", action="store_true",
                      help="plan what 'join --count' runs: tasks that hold no pairs (partitions sized by rows)")
    plan.add_argument("--profile", type=int, nargs="?", const=1_000_000, default=None, metavar="ROWS",
                      help="also run the planned method here on the first ROWS rows (default 1,000,000) and print "
                           "the candidates per query point: min, median, p99, max (the work report)")

    synth = command("synth", "Write a seeded synthetic dataset to a chunked Zarr array.", handler=_synth)
    synth.add_argument("kind", help="uniform (unit cube), expo (exponential, lambda=40), clusters (Gaussian) or "
                       "embeddings (unit vectors in topics, near duplicates; see docs/algorithms.md)")
    synth.add_argument("out", help="output Zarr path")
    synth.add_argument("--n", type=int, required=True, help="number of points")
    synth.add_argument("--d", type=int, required=True, help="dimensions")
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument("--chunk-rows", type=int, default=None)
    synth.add_argument("--overwrite", action="store_true")

    imp = command("import", "Stream a .npy, .csv or .parquet file into a chunked Zarr array.", handler=_import)
    imp.add_argument("src", help="input file (.npy, .csv, .parquet)")
    imp.add_argument("out", help="output Zarr path")
    imp.add_argument("--columns", default=None, help="comma-separated columns to keep (default: all numeric)")
    imp.add_argument("--chunk-rows", type=int, default=None)
    imp.add_argument("--overwrite", action="store_true")

    info = command("info", "Print versions, visible GPUs and the scheduler in use (with --scheduler: its workers).",
                   handler=_info)
    info.add_argument("--scheduler", default=None, help="address of a Dask scheduler whose workers to describe")
    info.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for --scheduler (default: 10)")
    info.add_argument("--json", action="store_true", help="machine-readable output")

    warm = command("warm", "Compile the kernels once into their on-disk caches (after installing), so that the "
                   "first join of a new process does not pay for it.", handler=_warm)
    warm.add_argument("--no-gpu", action="store_true",
                      help="the CPU kernels only (default: also the GPU's, where CuPy sees one)")

    for name in EXTENSIONS:
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name).add_commands(sub, command)

    top.epilog = "Examples:\n  " + "\n  ".join(examples)
    return top


def _client(args):
    from .execution.cluster import resolve_client, start_jobqueue, start_local, start_local_cuda
    from .validation import InputError

    cluster = getattr(args, "cluster", None)
    jobs = getattr(args, "jobs", None)
    pool = getattr(args, "rmm_pool_size", None)
    if pool is not None and cluster != "local-cuda":
        raise InputError("--rmm-pool-size needs --cluster local-cuda (workers started elsewhere take it as "
                         "`dask cuda worker --rmm-pool-size SIZE --set-rmm-allocator-for-libs cupy`)")
    if cluster in (None, "local", "local-cuda"):
        if jobs is not None:
            raise InputError(f"--jobs {jobs} needs --cluster slurm or --cluster pbs (it counts batch jobs)")
        if cluster == "local-cuda":
            return start_local_cuda(rmm_pool_size=pool)
        return start_local() if cluster == "local" else resolve_client(address=args.scheduler)
    jobs = 1 if jobs is None else jobs
    if jobs < 1:
        raise InputError(f"--jobs must be at least 1, got {jobs}")
    from .execution.jobqueue import wait_for_first_worker

    client = start_jobqueue(cluster, jobs)
    print(f"daskjoin: submitted {jobs} {cluster} job(s); waiting for the first worker "
          f"(the queue: {'squeue --me' if cluster == 'slurm' else 'qstat -u $USER'})", file=sys.stderr, flush=True)
    wait_for_first_worker(client.cluster, client)
    return client


def _missing_chunks(args) -> None:
    """``--missing-chunks`` as dask config, read where inputs are opened."""
    if getattr(args, "missing_chunks", None):
        import dask.config

        dask.config.set({"daskjoin.missing-chunks": args.missing_chunks})


def _method_options(args) -> dict:
    """``--option KEY=VALUE`` flags as the ``gpu_options`` dict: integers, true/false and words."""
    from .validation import InputError

    options = {}
    for text in args.options:
        key, sep, value = text.partition("=")
        if not sep or not key or not value:
            raise InputError(f"--option takes KEY=VALUE: an option of the method, '=' and its value; got {text!r}")
        if key in options:
            raise InputError(f"--option {key} is given twice ({options[key]!r} and {value!r}); give it once")
        options[key] = parse_option_value(value)
    return options


def parse_option_value(value: str):
    """An option's value as typed: an integer (ASCII digits), true/false, or the word itself."""
    if re.fullmatch(r"[+-]?[0-9]+", value):
        return int(value)
    return {"true": True, "false": False}.get(value.lower(), value)


def _common(args) -> tuple[dict, dict]:
    """The options ``join`` and ``plan`` pass to the API (checked there and by :func:`check_options`)."""
    common = dict(eps=args.eps, method=args.method, partitioning=args.partitioning, backend=args.backend,
                  memory_budget=args.memory_budget)
    options = _method_options(args)
    return common, ({"gpu_options": options} if options else {})


def _join(args) -> int:
    import daskjoin as dj
    from .options import check_options

    common, tuning = _common(args)
    check_options("epsilon", spelled="cli", output="count" if args.count else "pairs", out=args.out,
                  overwrite=args.overwrite, resume=args.resume, **common, **tuning)  # the API's checks, as flags
    _missing_chunks(args)
    _, src_a, src_b, _ = dj.api.check_join_inputs(args.a, args.b, **common)  # before any cluster is reached
    common.update(tuning)
    if args.out:
        dj.api.check_output(args.out, args.overwrite, dj.api.protected_paths(src_a, src_b), args.resume)
    import dask.config

    from .execution.inprocess import InProcess

    clock = Phases()
    client = _client(args)
    clock.mark("client_s")
    # a command run in its own process lives for one join: pinning host buffers it never reuses costs more
    # (pinning, and unpinning at exit) than the faster copies save (H100, 20M x 3-d to Parquet, 6.4 s against
    # 6.8 s); an explicit DASK_DASKJOIN__PINNED_OUTPUT, or workers that outlive the command, keep the setting
    pinned = dask.config.get("daskjoin.pinned-output")
    if isinstance(client, InProcess) and "DASK_DASKJOIN__PINNED_OUTPUT" not in os.environ:
        pinned = False
    with dask.config.set({"daskjoin.pinned-output": pinned}):
        return _run_join(args, dj, common, client, clock)


def _run_join(args, dj, common, client, clock) -> int:
    # planned first (the join reuses the cached plan), so plan and join time are told apart
    plan = dj.plan_join(args.a, args.b, client=client, output="count" if args.count else "pairs", **common)
    clock.mark("plan_s")
    clock.record["plan_steps"] = [{"name": s.name, "seconds": round(s.seconds, 3), "cached": s.cached,
                                   "reads": s.reads} for s in plan.steps]
    if args.count:
        n = dj.similarity_join(args.a, args.b, output="count", client=client, progress=not args.quiet, **common)
        clock.mark("join_s")
        print(n)
        print(f"{n:,} pairs counted in {clock.since_main():.2f} s (plan {clock.record['plan_s']:.2f} s, "
              f"count {clock.record['join_s']:.2f} s)", file=sys.stderr)
        clock.record["pairs"] = int(n)
    else:
        result = dj.similarity_join(
            args.a, args.b, out=args.out, overwrite=args.overwrite, with_distance=not args.no_distance,
            client=client, progress=not args.quiet, resume=args.resume, **common,
        )
        clock.mark("join_s")
        clock.record.update(pairs=result.pairs, bytes=result.bytes, files=result.files, tasks=result.tasks)
        print(result)
    if args.timings:
        clock.write(args.timings)
    return 0


class Phases:
    """Wall-clock phases of one command, from the process's start (``--timings``)."""

    def __init__(self):
        self.record = {"startup_s": round(_since_process_start(), 3)}
        self.began = self.last = time.perf_counter()  # when the command's own work began

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.record[name] = round(now - self.last, 3)
        self.last = now

    def since_main(self) -> float:
        return time.perf_counter() - self.began

    def write(self, path: str) -> None:
        import json

        self.record["total_s"] = round(self.record["startup_s"] + self.since_main(), 3)
        with open(path, "w") as f:
            json.dump(self.record, f, indent=1)


def _since_process_start() -> float:
    """Seconds since this process started (interpreter start and imports before the command ran)."""
    try:
        import psutil

        return max(0.0, time.time() - psutil.Process().create_time())
    except Exception:  # noqa: BLE001 - no psutil or no /proc: unknown
        return 0.0


def _plan(args) -> int:
    import daskjoin as dj
    from .options import check_options
    from .validation import InputError

    if (args.eps is None) == (args.knn is None):
        raise InputError("daskjoin plan needs --eps EPS (an ε-join) or --knn K (a kNN-join), not both")
    if args.knn is not None:
        from .cli_knn import plan_knn_command

        if args.count:
            raise InputError("--count plans an ε-join's count; a kNN-join (--knn) has no count")

        return plan_knn_command(args)

    common, tuning = _common(args)
    check_options("epsilon", spelled="cli", **common, **tuning)
    _missing_chunks(args)
    dj.api.check_join_inputs(args.a, args.b, **common)
    common.update(tuning)
    plan = dj.plan_join(args.a, args.b, client=_client(args), output="count" if args.count else "pairs", **common)
    print(plan.explain())
    if args.profile is not None:
        print(_work_report(args, plan))
    return 0


def _work_report(args, plan) -> str:
    """The planned method's work per query point on the first ``--profile`` rows, run in this process."""
    from .io.zarr_in import open_zarr_path
    from .kernels import resolve_backend
    from .options import METHOD_OPTIONS
    from .profiling import profile_work

    rows = max(1, int(args.profile))
    sides = [open_zarr_path(p, name) for p, name in ((args.a, "A"), (args.b, "B")) if p is not None]
    a, *b = [s.read(0, min(s.n, rows)) for s in sides]
    backend = resolve_backend(plan.backend)
    own = METHOD_OPTIONS["epsilon"].get(plan.method, ())
    options = {k: v for k, v in plan.gpu_options if backend == "gpu" or k in own}
    report = profile_work(a, b[0] if b else None, eps=plan.eps, method=plan.method, backend=backend, **options)
    whole = all(len(x) == s.n for x, s in zip([a, *b], sides))
    return report.describe() + ("" if whole else f" (the first {len(a):,} rows: fewer neighbours a point than the whole join)")


def _synth(args) -> int:
    from .io.synth import synth

    start = time.perf_counter()
    path = synth(args.kind, args.n, args.d, args.out, seed=args.seed, chunk_rows=args.chunk_rows, overwrite=args.overwrite)
    print(f"wrote {args.n:,} × {args.d} {args.kind} points to {path} in {time.perf_counter() - start:.2f} s")
    return 0


def _import(args) -> int:
    from .io.importers import import_points

    columns = args.columns.split(",") if args.columns else None
    start = time.perf_counter()
    info = import_points(args.src, args.out, chunk_rows=args.chunk_rows, overwrite=args.overwrite, columns=columns)
    print(f"imported {info['rows']:,} × {info['d']} ({info['dtype']}) into {info['path']} in {time.perf_counter() - start:.2f} s")
    return 0


def _warm(args) -> int:
    from .warm import warm

    warm(gpu=not args.no_gpu)
    return 0


def _info(args) -> int:
    from .info import collect, render

    report = collect(scheduler=args.scheduler, timeout=args.timeout)
    if args.json:
        import json

        print(json.dumps(report, indent=2))
    else:
        print(render(report))
    return 0


def _on_sigterm(signum, frame):
    from .execution.progress import note_interrupt

    note_interrupt(Terminated)  # remembered where the exception below is swallowed (a C callback)
    raise Terminated()


def _quiet_unraisable(unraisable) -> None:
    """An interrupt raised inside a callback (gc, ctypes) cannot propagate and would be printed with a
    traceback; it is remembered instead (see :func:`_on_sigint`) and acted on where work checks."""
    if isinstance(unraisable.exc_value, (KeyboardInterrupt, Terminated)):
        return
    sys.__unraisablehook__(unraisable)


def _on_sigint(signum, frame):
    from .execution.progress import note_interrupt

    note_interrupt()  # remembered where the KeyboardInterrupt below is swallowed (a C callback)
    raise KeyboardInterrupt


def _one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` plus the notes tasks add (which partition failed)."""
    text = str(exc).strip().splitlines()
    line = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    notes = [n for n in getattr(exc, "__notes__", ()) if n]
    return line + (f" ({'; '.join(notes)})" if notes else "")


def _log_traceback(exc: BaseException) -> str | None:
    """Write the failure's traceback to a log file; its path, or None where none can be written."""
    import tempfile
    import traceback

    try:
        fd, path = tempfile.mkstemp(prefix=f"daskjoin-{time.strftime('%Y%m%d-%H%M%S')}-", suffix=".log")
        with os.fdopen(fd, "w") as f:
            f.write(f"daskjoin {' '.join(sys.argv[1:])}\n")
            traceback.print_exception(exc, file=f)
    except OSError:
        return None
    return path


_QUIETED: dict = {}  # logger name -> its level before _quiet_shutdown


def _quiet_shutdown() -> None:
    """After an interrupt or failure nothing more is news: silence the cluster's shutdown chatter (and the
    coroutines and tasks an interrupted event loop leaves behind, which Python reports as it exits: kept
    silenced, since that report comes after ``main`` returns; see ``_KEPT_QUIET``)."""
    import logging
    import warnings

    warnings.filterwarnings("ignore", message=r"coroutine .* was never awaited", category=RuntimeWarning)
    for name in ("distributed", "asyncio", "tornado"):
        logger = logging.getLogger(name)
        _QUIETED.setdefault(name, logger.level)
        logger.setLevel(logging.CRITICAL + 1)


#: stays silenced once quieted: Python reports the tasks an interrupted event loop left pending through the
#: asyncio logger as the process exits, after ``main`` returned (seen after our last line in a SIGINT test)
_KEPT_QUIET = ("asyncio",)


def _restore_logging() -> None:
    import logging

    while _QUIETED:
        name, level = _QUIETED.popitem()
        if name not in _KEPT_QUIET:
            logging.getLogger(name).setLevel(level)


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    from .execution.cluster import close_default, quiet_local_workers
    from .validation import InputError

    quiet_local_workers()  # workers of a local cluster started here log errors only (their failures reach us)
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main else None
    from .execution.progress import clear_interrupt

    clear_interrupt()
    previous_int = signal.signal(signal.SIGINT, _on_sigint) if in_main else None
    previous_hook, sys.unraisablehook = sys.unraisablehook, _quiet_unraisable
    try:
        return args.handler(args)
    except InputError as exc:
        print(f"daskjoin: error: {exc}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Terminated) as exc:
        _quiet_shutdown()
        line = "daskjoin: interrupted; nothing was committed" if args.command in ("join", "setjoin") \
            else "daskjoin: interrupted"
        resumable = getattr(exc, "resumable", None)
        if resumable is not None:
            line += (f" ({resumable[0]} of {resumable[1]} partitions finished: the same command with --resume "
                     "continues it)")
        print(line, file=sys.stderr)
        return 130 if isinstance(exc, KeyboardInterrupt) else 143
    except Exception as exc:  # noqa: BLE001 - the CLI reports every failure in one line, exit 1
        _quiet_shutdown()
        log = _log_traceback(exc)
        if getattr(args, "verbose", False):
            import traceback

            traceback.print_exception(exc, file=sys.stderr)
        where = f"; traceback in {log}" if log else ""
        print(f"daskjoin: failed: {_one_line(exc)}{where} (--verbose prints it)", file=sys.stderr)
        return 1
    finally:
        try:
            close_default()
        except (KeyboardInterrupt, Terminated):  # a second Ctrl-C while closing: leave at once
            pass
        for signum, handler in ((signal.SIGTERM, previous), (signal.SIGINT, previous_int)):
            if handler is not None:
                signal.signal(signum, handler)
        sys.unraisablehook = previous_hook
        clear_interrupt()
        _restore_logging()  # main() may run again in this process (tests, notebooks)


def entry() -> None:
    """The ``daskjoin`` command (and ``python -m daskjoin``): :func:`main`, then :func:`leave`."""
    leave(main())


def leave(rc: int) -> None:
    """Exit with ``rc``; after a command that succeeded in this process alone, without the interpreter's teardown.

    Why: by then the output is written and committed (files renamed into place, ``_SUCCESS`` last) and every
    device result synchronised; what remains is tearing down CUDA's context, page-locked host blocks and the
    interpreter, which the operating system does anyway (the CLI's 20M x 3-d join to Parquet on an H200:
    2.44 s against 2.52 s on average over three alternated pairs).  Only where the command never used Dask's
    distributed (no cluster started, no scheduler reached: ``distributed`` never imported): a cluster's
    exit-time hooks (closing batch jobs a failed close left queued, a scheduler connection) must run.
    ``daskjoin.fast-exit`` False keeps the normal exit.
    """
    from . import config

    if rc == 0 and config.get("fast-exit") and not _used_distributed():
        import logging

        logging.shutdown()  # handlers flushed and closed, as the normal exit would
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it either way
                pass
        os._exit(0)
    sys.exit(rc)


def _used_distributed() -> bool:
    """Whether this process imported Dask's distributed (a cluster, a scheduler's client or a current client
    looked for): its exit-time hooks then run, by the normal exit."""
    return "distributed" in sys.modules


if __name__ == "__main__":
    entry()
