"""``daskjoin setjoin``, ``import-sets`` and ``synth-sets``: the set-similarity join on the command line."""
from __future__ import annotations

import sys
import time

EXAMPLES = {
    "setjoin": "daskjoin setjoin sets.zarr --measure jaccard --threshold 0.8 --out pairs.parquet\n"
               "  daskjoin setjoin r.zarr s.zarr --measure cosine --threshold 0.9 --count\n"
               "  daskjoin setjoin sets.zarr --threshold 0.8 --out pairs.parquet --cluster slurm --jobs 4",
    "setplan": "daskjoin setplan sets.zarr --measure jaccard --threshold 0.8 --memory-budget 2GB",
    "import-sets": "daskjoin import-sets titles.txt titles.zarr            # one set per line, whitespace-separated\n"
                   "  daskjoin import-sets baskets.parquet baskets.zarr --column items",
    "synth-sets": "daskjoin synth-sets kosarak kosarak.zarr --n 600000 --seed 0",
}


def add_commands(sub, command) -> None:
    """Register the set-join subcommands with the main parser (see :mod:`daskjoin.cli`)."""
    def set_options(p, *, clusters: bool) -> None:
        p.add_argument("a", help="set store (from `daskjoin import-sets`)")
        p.add_argument("b", nargs="?", help="second set store for an R×S join (omit for a self-join)")
        p.add_argument("--measure", default="jaccard", help="jaccard, cosine, dice or overlap (default: jaccard)")
        p.add_argument("--threshold", required=True, type=float,
                       help="similarity threshold in (0, 1]; for overlap a number of shared tokens")
        p.add_argument("--method", "--algorithm", dest="method", default="ppjoin",
                       help="ppjoin or allpairs (default: ppjoin; --algorithm is the old name)")
        p.add_argument("--backend", default="auto", help="where candidates are verified: auto, cpu or gpu")
        p.add_argument("--partitions", type=int, default=None, help="size-range partitions (default: automatic)")
        p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", dest="options",
                       help="GPU verification tuning, repeatable: verify=thread|block|intersect_path, block=N, "
                            "chunk_candidates=N")
        p.add_argument("--memory-budget", default=None, help="memory per task, e.g. 2GB (default: auto)")
        p.add_argument("--missing-chunks", choices=("error", "fill"), default=None,
                       help="a chunk file missing from a set store: error (default) or read it as the fill value")
        where = p.add_mutually_exclusive_group() if clusters else p
        where.add_argument("--scheduler", default=None,
                           help="address of a running Dask scheduler (default: threads of this process)")
        if clusters:
            from .cli import CLUSTERS

            where.add_argument("--cluster", choices=CLUSTERS, default=None,
                               help="local (a Dask cluster on this machine), or slurm / pbs: --jobs batch jobs "
                                    "configured in dask config; default: threads of this process")
            p.add_argument("--jobs", type=int, default=None,
                           help="batch jobs to submit with --cluster slurm|pbs (default: 1)")

    p = command("setjoin", "Set-similarity join of token-set stores: Parquet pairs (i, j, sim) or the exact count.",
                EXAMPLES["setjoin"], handler=_setjoin)
    set_options(p, clusters=True)
    p.add_argument("--out", help="output directory of Parquet files (required unless --count)")
    p.add_argument("--count", action="store_true", help="print the exact number of pairs; write nothing")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted run to --out (refused if the inputs or parameters differ)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")

    plan = command("setplan", "Print the plan of a set-similarity join (partitions, blocks, filters) without running it.",
                   EXAMPLES["setplan"], handler=_setplan)
    set_options(plan, clusters=False)

    imp = command("import-sets", "Import token sets (text: one set per line; Parquet: a list column) into a set store.",
                  EXAMPLES["import-sets"], handler=_import_sets)
    imp.add_argument("src", help="input file: text (one set per line) or .parquet")
    imp.add_argument("out", help="output set store (Zarr group)")
    imp.add_argument("--format", choices=("auto", "text", "parquet"), default="auto",
                     help="input format (default: from the file name: .parquet is Parquet, anything else text)")
    imp.add_argument("--sep", default=None, help="token separator for text (default: any whitespace)")
    imp.add_argument("--column", default=None, help="Parquet list column holding the sets")
    imp.add_argument("--id-column", default=None, help="Parquet column with the sets' ids (default: row numbers)")
    imp.add_argument("--overwrite", action="store_true")

    syn = command("synth-sets", "Write a seeded synthetic set collection (KOSARAK-like or DBLP-like) to a set store.",
                  EXAMPLES["synth-sets"], handler=_synth_sets)
    syn.add_argument("kind", help="kosarak (avg 8 tokens, Zipf) or dblp (character 2-grams, avg 88)")
    syn.add_argument("out", help="output set store")
    syn.add_argument("--n", type=int, required=True, help="number of sets")
    syn.add_argument("--seed", type=int, default=0)
    syn.add_argument("--overwrite", action="store_true")


def _setjoin(args) -> int:
    import daskjoin as dj
    from .cli import _missing_chunks

    _missing_chunks(args)
    common = dict(threshold=_threshold(args), measure=args.measure, method=args.method, backend=args.backend,
                  partitions=args.partitions, memory_budget=args.memory_budget, progress=not args.quiet)
    common.update(_tuning(args))
    _check_before_cluster(args, dict(common, output="count" if args.count else "pairs", out=args.out,
                                     overwrite=args.overwrite, resume=args.resume))
    if args.out:
        inputs = {f"input {name}": path for name, path in (("A", args.a), ("B", args.b)) if path is not None}
        dj.api.check_output(args.out, args.overwrite, inputs, args.resume)
    from .cli import _client

    client = _client(args)
    start = time.perf_counter()
    if args.count:
        n = dj.set_similarity_join(args.a, args.b, output="count", client=client, **common)
        print(n)
        print(f"{n:,} pairs counted in {time.perf_counter() - start:.2f} s", file=sys.stderr)
        return 0
    result = dj.set_similarity_join(args.a, args.b, out=args.out, overwrite=args.overwrite, resume=args.resume,
                                    client=client, **common)
    print(result)
    return 0


def _check_before_cluster(args, common) -> None:
    """Refuse bad options (the API's checks, spelled as flags) and paths before any cluster is started or contacted."""
    from .io.sets_in import is_set_store
    from .options import check_options
    from .validation import InputError

    check_options("sets", spelled="cli", **common)
    for path in (args.a, args.b):
        if path is not None and not is_set_store(path):
            raise InputError(f"{path!r} is not a daskjoin set store (create one with `daskjoin import-sets`)")


def _tuning(args) -> dict:
    from .cli import _method_options

    options = _method_options(args)
    return {"gpu_options": options} if options else {}


def _threshold(args):
    threshold = args.threshold
    if args.measure == "overlap" and float(threshold).is_integer():
        threshold = int(threshold)
    return threshold


def _setplan(args) -> int:
    import daskjoin as dj
    from .cli import _missing_chunks

    _missing_chunks(args)
    common = dict(threshold=_threshold(args), measure=args.measure, method=args.method, backend=args.backend,
                  partitions=args.partitions, memory_budget=args.memory_budget)
    common.update(_tuning(args))
    _check_before_cluster(args, common)
    from .execution.cluster import resolve_client

    plan = dj.plan_set_join(args.a, args.b, client=resolve_client(address=args.scheduler), **common)
    print(plan.explain())
    return 0


def _import_sets(args) -> int:
    from .io.sets_in import import_sets_parquet, import_sets_text, open_sets
    from .validation import InputError

    fmt = args.format
    if fmt == "auto":
        fmt = "parquet" if args.src.endswith((".parquet", ".pq")) else "text"
    start = time.perf_counter()
    if fmt == "parquet":
        if not args.column:
            raise InputError("--column NAME is needed for Parquet input (the list column holding the sets)")
        path = import_sets_parquet(args.src, args.out, column=args.column, id_column=args.id_column,
                                   overwrite=args.overwrite)
    else:
        path = import_sets_text(args.src, args.out, sep=args.sep, overwrite=args.overwrite)
    coll = open_sets(path)
    print(f"imported {len(coll):,} sets ({coll.n_tokens:,} tokens, {len(coll.vocab):,} distinct) into {path} "
          f"in {time.perf_counter() - start:.2f} s")
    return 0


def _synth_sets(args) -> int:
    from .io.synth_sets import write_synth_sets

    start = time.perf_counter()
    path = write_synth_sets(args.kind, args.n, args.out, seed=args.seed, overwrite=args.overwrite)
    print(f"wrote {args.n:,} {args.kind}-like sets to {path} in {time.perf_counter() - start:.2f} s")
    return 0
