"""What cutting a self-join into two row blocks costs the kernel: the whole self-join against its three block
pairs (two diagonal self-joins and the cross pair), counted in this process on one device.

    python benchmarks/profile_split.py [--n 20000000] [--d 3] [--dists uniform,expo,clusters] [--backend gpu]

For each distribution (``daskjoin synth`` data, eps for ~32 neighbours a point) it prints the kernel time of
the whole count and of each block pair (best of ``--repeat``, the device synchronised), their pairs, and the
ratio of the three parts' sum to the whole: 1.0 means the cut costs nothing but its share.  JSON to
``--out-json``.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time

sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
from bench_scale import calibrated_eps  # noqa: E402

from daskjoin.io.synth import eps_for_neighbours, generate  # noqa: E402
from daskjoin.kernels import get_kernel  # noqa: E402


def best(fn, repeat: int, sync) -> tuple[float, int]:
    out, t = None, math.inf
    for _ in range(repeat):
        sync()
        start = time.perf_counter()
        out = fn()
        sync()
        t = min(t, time.perf_counter() - start)
    return t, int(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000_000)
    ap.add_argument("--d", type=int, default=3)
    ap.add_argument("--dists", default="uniform,expo,clusters")
    ap.add_argument("--backend", default="gpu")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out-json", default=None)
    args = ap.parse_args()
    sync = (lambda: None)
    if args.backend == "gpu":
        import cupy as cp

        sync = cp.cuda.Device().synchronize
    kernel = get_kernel("grid", args.backend)
    rows = []
    for dist in args.dists.split(","):
        x = generate(dist, args.n, args.d, seed=0)
        eps = eps_for_neighbours(args.n, args.d, 32) if dist == "uniform" else calibrated_eps(dist, args.n, args.d, 32)
        if args.backend == "gpu":
            x = cp.asarray(x)
        half = args.n // 2
        a, b = x[:half], x[half:]
        kernel.self_count(x[:20000], eps)  # compile or load once
        kernel.cross_count(x[:20000], x[20000:40000], eps)
        row = {"dist": dist, "n": args.n, "d": args.d, "eps": eps}
        row["whole_s"], row["whole_pairs"] = best(lambda: kernel.self_count(x, eps), args.repeat, sync)
        row["a_s"], row["a_pairs"] = best(lambda: kernel.self_count(a, eps), args.repeat, sync)
        row["b_s"], row["b_pairs"] = best(lambda: kernel.self_count(b, eps), args.repeat, sync)
        row["cross_s"], row["cross_pairs"] = best(lambda: kernel.cross_count(a, b, eps), args.repeat, sync)
        row["cross_ba_s"], _ = best(lambda: kernel.cross_count(b, a, eps), args.repeat, sync)
        row["exact"] = row["a_pairs"] + row["b_pairs"] + row["cross_pairs"] == row["whole_pairs"]
        row["parts_over_whole"] = round((row["a_s"] + row["b_s"] + row["cross_s"]) / row["whole_s"], 2)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out_json:
        json.dump({"backend": args.backend, "rows": rows}, open(args.out_json, "w"), indent=1)
    print(f"\n{'dist':9} {'whole s':>8} {'A s':>7} {'B s':>7} {'AxB s':>7} {'BxA s':>7} {'parts/whole':>11} "
          f"{'cross pairs share':>17} {'exact':>5}")
    for r in rows:
        print(f"{r['dist']:9} {r['whole_s']:8.3f} {r['a_s']:7.3f} {r['b_s']:7.3f} {r['cross_s']:7.3f} "
              f"{r['cross_ba_s']:7.3f} {r['parts_over_whole']:11.2f} {r['cross_pairs'] / max(1, r['whole_pairs']):17.2f} "
              f"{str(r['exact']):>5}")


if __name__ == "__main__":
    main()
