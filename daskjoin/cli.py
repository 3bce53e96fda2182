"""The ``daskjoin`` command line: argument parsing only; everything else is the Python API.

Exit codes: 0 success, 2 bad input (nothing written), 1 any other failure.
"""
from __future__ import annotations

import argparse
import sys
import time

EXAMPLES = {
    "join": "daskjoin join points.zarr --eps 0.01 --out pairs.parquet\n"
            "  daskjoin join a.zarr b.zarr --eps 0.5 --count --scheduler tcp://10.0.0.5:8786",
    "plan": "daskjoin plan points.zarr --eps 0.01 --memory-budget 2GB",
    "synth": "daskjoin synth uniform --n 1000000 --d 2 --seed 0 points.zarr",
    "import": "daskjoin import points.csv points.zarr",
}


def _parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="daskjoin",
        description="Exact similarity joins at any scale: Zarr in, Dask graph of Numba kernels, Parquet out.",
        epilog="Examples:\n  " + "\n  ".join(EXAMPLES.values()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name, help=help_text, description=help_text, epilog="Example:\n  " + EXAMPLES[name],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    def join_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("a", help="Zarr array of points (rows)")
        p.add_argument("b", nargs="?", help="second Zarr array for an A×B join (omit for a self-join)")
        p.add_argument("--eps", required=True, type=float, help="join radius: pairs with distance <= EPS")
        p.add_argument("--method", default="auto", help="auto, grid or brute (default: auto)")
        p.add_argument("--partitioning", default="auto", help="auto, chunk_pairs or slabs (default: auto)")
        p.add_argument("--backend", default="auto",
                       help="auto (each task on its worker's GPU if CuPy sees one, else CPU), cpu or gpu (default: auto)")
        p.add_argument("--memory-budget", default=None, help="memory per task, e.g. 2GB (default: auto, a quarter of a worker's memory per thread)")
        p.add_argument("--scheduler", default=None, help="address of a running Dask scheduler (default: a local cluster)")

    join = command("join", "Join and write the pairs to Parquet (or print their exact count).")
    join_options(join)
    join.add_argument("--out", help="output directory of Parquet files (required unless --count)")
    join.add_argument("--count", action="store_true", help="print the exact number of pairs; write nothing")
    join.add_argument("--no-distance", action="store_true", help="omit the dist column")
    join.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    join.add_argument("--quiet", action="store_true", help="no progress bar")

    plan = command("plan", "Print the plan of a join (method, partitions, estimate) without running it.")
    join_options(plan)

    synth = command("synth", "Write a seeded synthetic dataset to a chunked Zarr array.")
    synth.add_argument("kind", help="uniform (unit cube), expo (exponential, lambda=40) or clusters (Gaussian)")
    synth.add_argument("out", help="output Zarr path")
    synth.add_argument("--n", type=int, required=True, help="number of points")
    synth.add_argument("--d", type=int, required=True, help="dimensions")
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument("--chunk-rows", type=int, default=None)
    synth.add_argument("--overwrite", action="store_true")

    imp = command("import", "Stream a .npy, .csv or .parquet file into a chunked Zarr array.")
    imp.add_argument("src", help="input file (.npy, .csv, .parquet)")
    imp.add_argument("out", help="output Zarr path")
    imp.add_argument("--columns", default=None, help="comma-separated columns to keep (default: all numeric)")
    imp.add_argument("--chunk-rows", type=int, default=None)
    imp.add_argument("--overwrite", action="store_true")
    return top


def _client(args):
    from .execution.cluster import resolve_client

    return resolve_client(address=args.scheduler)


def _join(args) -> int:
    import daskjoin as dj
    from .validation import InputError, check_output_path

    if not args.count and not args.out:
        raise InputError("join needs --out PATH for the Parquet output, or --count to print the number of pairs")
    if args.count and args.out:
        raise InputError("--count prints a number and writes nothing: drop --out, or drop --count")
    common = dict(eps=args.eps, method=args.method, partitioning=args.partitioning, backend=args.backend,
                  memory_budget=args.memory_budget)
    if args.out:
        check_output_path(args.out, args.overwrite)
    dj.api.check_join_inputs(args.a, args.b, **common)  # before any cluster is reached or started
    client = _client(args)
    start = time.perf_counter()
    if args.count:
        n = dj.similarity_join(args.a, args.b, output="count", client=client, progress=not args.quiet, **common)
        seconds = time.perf_counter() - start
        print(n)
        print(f"{n:,} pairs counted in {seconds:.2f} s", file=sys.stderr)
        return 0
    result = dj.similarity_join(
        args.a, args.b, out=args.out, overwrite=args.overwrite, with_distance=not args.no_distance,
        client=client, progress=not args.quiet, **common,
    )
    print(result)
    return 0


def _plan(args) -> int:
    import daskjoin as dj

    common = dict(eps=args.eps, method=args.method, partitioning=args.partitioning, backend=args.backend,
                  memory_budget=args.memory_budget)
    dj.api.check_join_inputs(args.a, args.b, **common)
    plan = dj.plan_join(args.a, args.b, client=_client(args), **common)
    print(plan.explain())
    return 0


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


COMMANDS = {"join": _join, "plan": _plan, "synth": _synth, "import": _import}


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    from .validation import InputError

    try:
        return COMMANDS[args.command](args)
    except InputError as exc:
        print(f"daskjoin: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("daskjoin: interrupted", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - the CLI reports every failure in one line, exit 1
        print(f"daskjoin: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        from .execution.cluster import close_default

        close_default()


if __name__ == "__main__":
    sys.exit(main())
