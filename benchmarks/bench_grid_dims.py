#!/usr/bin/env python
"""The CPU grid's choice of how many dimensions it indexes (``kernels/grid_dims.py``), as users meet it.

Each workload runs in a new process (the notebook path): ``dj.similarity_join(x, eps=eps).compute()``
with ``x`` a numpy array and no client — a first join, then the best of ``--repeat`` — against
``cKDTree(x).query_pairs(eps)`` in the same process (best of as many runs); then the grid kernel alone
(``GridJoin(...).count()``, warm, the two ways interleaved, best of ``--repeat``) with the dimensions the model chooses and with
all of the candidates indexed (the fixed rule before: up to six), on the same data.  The pair counts of
all must agree.

Workloads: uniform data from 3 to 8 dimensions, from 0.04 to 100 neighbours a point (eps from the
expected count), and ``clusters`` data; the 2-d and dense 3-d rows are controls (nothing to choose, or
all dimensions chosen).  Results: ``benchmarks/results/grid-dims-<machine>-<date>.json``.

Usage::

    .venv/bin/python benchmarks/bench_grid_dims.py            # this VM, about 4 minutes
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_e2e import eps_for  # noqa: E402

#: (kind, n, d, neighbours a point)
WORKLOADS = [
    ("uniform", 1_000_000, 2, 4), ("uniform", 2_000_000, 3, 32), ("uniform", 1_000_000, 3, 0.5),
    ("uniform", 1_000_000, 4, 0.1), ("uniform", 1_000_000, 4, 10), ("uniform", 400_000, 5, 0.3),
    ("uniform", 400_000, 6, 0.04), ("uniform", 400_000, 6, 1), ("uniform", 400_000, 6, 30),
    ("uniform", 300_000, 8, 1), ("uniform", 300_000, 8, 100), ("clusters", 400_000, 6, 5),
]

ONE = r'''
import json, sys, time
import numpy as np
from daskjoin.io.synth import generate
kind, n, d, eps, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
x = generate(kind, n, d, seed=1)
out = {}
import daskjoin as dj
runs = []
for _ in range(1 + repeat):
    df = None
    start = time.perf_counter()
    df = dj.similarity_join(x, eps=eps).compute()
    runs.append(time.perf_counter() - start)
out["first_s"], out["repeat_s"], out["pairs"] = runs[0], min(runs[1:]), int(len(df))
df = None
from scipy.spatial import cKDTree
ck = []
for _ in range(repeat):
    ref = None
    start = time.perf_counter()
    ref = cKDTree(x).query_pairs(eps, output_type="ndarray")
    ck.append(time.perf_counter() - start)
out["ckdtree_s"], out["ckdtree_pairs"] = min(ck), int(len(ref))
ref = None
from daskjoin.kernels.grid import GridJoin
x64 = x.astype(np.float64)
ways = (("chosen", "auto"), ("all", "all"))
ts = {name: [] for name, _ in ways}
for r in range(1 + repeat):  # interleaved (the first round warms both): neither gains from going second
    for name, choose in ways:
        join = None
        start = time.perf_counter()
        join = GridJoin(x64, None, eps, dims=choose)
        count = join.count()
        if r:
            ts[name].append(time.perf_counter() - start)
        out[f"kernel_{name}_dims"], out[f"kernel_{name}_pairs"] = join.spec.k, count
for name, _ in ways:
    out[f"kernel_{name}_s"] = min(ts[name])
print("RESULT " + json.dumps(out))
'''


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--only", default="", help="comma-separated row numbers (0-based) of WORKLOADS to run")
    p.add_argument("--out-json", default="")
    a = p.parse_args()
    rows = [WORKLOADS[int(i)] for i in a.only.split(",")] if a.only else WORKLOADS
    results = []
    print(f"{'workload':<28}{'pairs':>12}{'first':>8}{'repeat':>8}{'cKDTree':>9}{'ratio':>7}"
          f"{'kernel chosen':>16}{'all dims':>14}{'gain':>7}")
    for kind, n, d, nbrs in rows:
        eps = eps_for(n, d, nbrs)
        proc = subprocess.run([sys.executable, "-c", ONE, kind, str(n), str(d), repr(eps), str(a.repeat)],
                              capture_output=True, text=True)
        if proc.returncode:
            print(proc.stdout, proc.stderr, file=sys.stderr)
            return 1
        r = json.loads([x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1][7:])
        r.update(kind=kind, n=n, d=d, neighbours=nbrs, eps=eps)
        counts = {r["pairs"], r["ckdtree_pairs"], r["kernel_chosen_pairs"], r["kernel_all_pairs"]}
        if len(counts) != 1:
            print(f"pair counts differ: {r}", file=sys.stderr)
            return 1
        results.append(r)
        name = f"{kind} {n // 1000}k x {d}-d, {nbrs:g}/pt"
        print(f"{name:<28}{r['pairs']:>12,}{r['first_s']:>8.2f}{r['repeat_s']:>8.2f}{r['ckdtree_s']:>9.2f}"
              f"{r['ckdtree_s'] / r['repeat_s']:>6.2f}x{r['kernel_chosen_s']:>9.3f} ({r['kernel_chosen_dims']})"
              f"{r['kernel_all_s']:>9.3f} ({r['kernel_all_dims']}){r['kernel_all_s'] / r['kernel_chosen_s']:>6.2f}x",
              flush=True)
    info = {"host": platform.node(), "cores": os.cpu_count(), "python": platform.python_version(),
            "date": dt.datetime.now().isoformat(timespec="seconds")}
    out = a.out_json or os.path.join(HERE, "results", f"grid-dims-vm-{dt.date.today().isoformat()}.json")
    with open(out, "w") as f:
        json.dump({"machine": info, "results": results}, f, indent=1)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
