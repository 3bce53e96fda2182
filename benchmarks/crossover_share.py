"""The data behind ``method="auto"`` on the CPU from 7 dimensions: the grid's share and its time against brute force.

    python benchmarks/crossover_share.py --n 60000 --kinds clusters,embeddings --dims 8,16,32,64
    python benchmarks/crossover_share.py --score benchmarks/results/methods-cpu-vm-2026-12-06-session28-60k.json

For each cell: the grid's *share* (its candidates, the distances it computes, among brute force's pairs of rows;
on the whole input and on the planner's sample), both kernels' times for the whole self-join (pairs returned, one
warm run each) and kappa = (grid / brute) / (d x share), the constant of ``planning/cost.py``'s model.
``--score`` instead re-reads a ``bench_methods.py`` results file and says what ``method="auto"`` now takes in each
cell (the share from the planner's sample of the same data) and how far that is from the faster method.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))


def _data(kind: str, n: int, d: int) -> np.ndarray:
    from bench_methods import generate as methods_data

    if kind in ("uniform", "exponential", "expo"):
        return methods_data(kind, n, d, seed=d).astype(np.float64)
    from daskjoin.io.synth import generate

    return generate(kind, n, d, seed=d).astype(np.float64)


def measure(args) -> list[dict]:
    from bench_methods import eps_for, planned_share
    from daskjoin.kernels import get_kernel
    from daskjoin.planning.cost import cpu_grid_kappa

    warm = np.random.default_rng(0).random((3000, 8))
    for m in ("grid", "brute"):
        get_kernel(m, "cpu").self_count(warm, 0.3)
    rows = []
    for kind in args.kinds.split(","):
        for d in (int(v) for v in args.dims.split(",")):
            x = _data(kind, args.n, d)
            eps = eps_for(x, args.neighbours, "cpu")
            share = get_kernel("grid", "cpu").decisions(x, None, eps) / (args.n * (args.n - 1) / 2)
            row = {"kind": kind, "d": d, "n": args.n, "neighbours": args.neighbours, "eps": eps, "share": share,
                   "sample_share": planned_share(x, eps, d, False)}
            for m in ("grid", "brute"):
                start = time.perf_counter()
                row["pairs"] = len(get_kernel(m, "cpu").self_join(x, eps)[0])
                row[m] = time.perf_counter() - start
            ratio = row["grid"] / row["brute"]
            row["kappa"] = ratio / (d * share) if share else None
            predicted = cpu_grid_kappa(d) * d * (row["sample_share"] or share)
            print(f"{kind:11s} d={d:3d} pairs={row['pairs']:>11,} share={share:.4f} (sample {row['sample_share']})  "
                  f"grid {row['grid']:7.3f}  brute {row['brute']:7.3f}  grid/brute {ratio:5.2f}  predicted "
                  f"{predicted:5.2f}  kappa {row['kappa'] if row['kappa'] is None else round(row['kappa'], 3)}",
                  flush=True)
            rows.append(row)
    return rows


def score(path: str) -> list[dict]:
    from bench_methods import eps_for, planned_share  # noqa: F401  (eps kept from the file)
    from daskjoin.planning.cost import choose_method

    report = json.load(open(path))
    rows = []
    for cell in report["cells"]:
        times = {m: s for m, s in cell["seconds"].items() if s is not None and "@" not in m}
        if not {"grid", "brute"} <= set(times):
            continue
        x = _data(cell["dist"], cell["n"], cell["d"])
        share = planned_share(x, cell["eps"], cell["d"], False)
        auto = choose_method("auto", cell["d"], row_pairs=float(cell["n"]) ** 2, grid_share=share)[0]
        best = min(times, key=times.get)
        row = {"dist": cell["dist"], "d": cell["d"], "n": cell["n"], "neighbours": cell["neighbours"],
               "sample_share": share, "auto": auto, "best": best, "auto_over_best": times[auto] / times[best]}
        print(f"{cell['dist']:11s} d={cell['d']:3d} n={cell['n']:>7,} k={cell['neighbours']:3d} sample share "
              f"{share if share is None else round(share, 4)}  auto {auto:5s} best {best:5s} "
              f"x{row['auto_over_best']:.2f}", flush=True)
        rows.append(row)
    worst = max((r["auto_over_best"] for r in rows), default=1.0)
    print(f"auto is the faster method in {sum(r['auto'] == r['best'] for r in rows)}/{len(rows)} cells; "
          f"at most x{worst:.2f} the faster one's time")
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=60000)
    p.add_argument("--kinds", default="clusters,embeddings", help="uniform, exponential, or daskjoin synth kinds")
    p.add_argument("--dims", default="8,16,32,64")
    p.add_argument("--neighbours", type=int, default=32)
    p.add_argument("--score", metavar="METHODS_JSON", help="re-score a bench_methods.py results file instead")
    p.add_argument("--out-json", default=None)
    args = p.parse_args()
    rows = score(args.score) if args.score else measure(args)
    if args.out_json:
        with open(args.out_json, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
