"""``daskjoin knn``: the kNN-join on the command line (and ``daskjoin plan --knn K``)."""
from __future__ import annotations

EXAMPLES = {
    "knn": "daskjoin knn points.zarr --k 16 --out knn.parquet\n"
           "  daskjoin knn queries.zarr points.zarr --k 100 --out knn.parquet --method brute\n"
           "  daskjoin knn emb.zarr --k 10 --out knn.parquet --method brute --option filter=int8",
}


def add_commands(sub, command) -> None:
    """Register ``knn`` with the main parser (see :mod:`daskjoin.cli`)."""
    p = command("knn", "Exact k-nearest-neighbour join of Zarr point arrays: Parquet rows (i, j, dist, rank).",
                EXAMPLES["knn"], handler=_knn)
    p.add_argument("a", help="Zarr array of points (rows): the queries")
    p.add_argument("b", nargs="?", help="Zarr array of the candidates (omit for a self-join: a's other rows)")
    p.add_argument("--k", required=True, type=int, help="neighbours per row (1 up to the candidate rows)")
    p.add_argument("--method", default="auto", help="auto, grid, brute or szl (default: auto)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", dest="options",
                   help="an option of the method, repeatable: brute filter=auto|fp32|int8|fp16 (on GPUs: the "
                        "products that filter the candidates; docs/knn.md)")
    p.add_argument("--backend", default="auto", help="auto, cpu or gpu (default: auto)")
    p.add_argument("--memory-budget", default=None, help="memory per task, e.g. 2GB (default: auto)")
    p.add_argument("--missing-chunks", choices=("error", "fill"), default=None,
                   help="a chunk file missing from the store: error (default) or read it as the fill value")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--scheduler", default=None,
                       help="address of a running Dask scheduler (default: threads of this process)")
    from .cli import CLUSTERS

    where.add_argument("--cluster", choices=CLUSTERS, default=None,
                       help="local (a Dask cluster on this machine), or slurm / pbs: --jobs batch jobs")
    p.add_argument("--jobs", type=int, default=None, help="batch jobs to submit with --cluster slurm|pbs (default: 1)")
    p.add_argument("--out", required=True, help="output directory of Parquet files")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted run to --out (refused if the inputs or parameters differ)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _common(args) -> dict:
    from .cli import _method_options

    options = _method_options(args)
    return dict(k=args.k, method=args.method, backend=args.backend, memory_budget=args.memory_budget,
                **({"gpu_options": options} if options else {}))


def _checked(args, **extra):
    """The API's checks, spelled as flags, and the inputs opened, before any cluster is reached:
    (the options, source A, source B)."""
    import daskjoin as dj
    from .cli import _missing_chunks
    from .options import check_options

    common = _common(args)
    check_options("knn", spelled="cli", **common, **extra)
    _missing_chunks(args)
    _, src_a, src_b, _ = dj.api_knn._checked(args.a, args.b, check_options("knn", **common))
    return common, src_a, src_b


def _knn(args) -> int:
    import daskjoin as dj
    from .cli import _client
    from .planning.knn import check_k

    common, src_a, src_b = _checked(args, out=args.out, overwrite=args.overwrite, resume=args.resume)
    check_k(args.k, (src_a if src_b is None else src_b).n, src_b is None)  # before a cluster starts
    dj.api.check_output(args.out, args.overwrite, dj.api.protected_paths(src_a, src_b), args.resume)
    result = dj.knn_join(args.a, args.b, out=args.out, overwrite=args.overwrite, resume=args.resume,
                         client=_client(args),
                         progress=not args.quiet, **common)
    print(result)
    return 0


def plan_knn_command(args) -> int:
    import daskjoin as dj
    from .cli import _client

    args.k = args.knn
    common, _, _ = _checked(args)
    print(dj.plan_knn(args.a, args.b, client=_client(args), **common).explain())
    return 0
