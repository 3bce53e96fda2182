#!/usr/bin/env python
"""Parquet encodings of sorted pairs: write speed, read speed and size per pair, one thread.

The data are a real join's pairs sorted by (i, j) (1M uniform 3-d points, ~32 neighbours:
15.6M pairs).  Rows: codec (none, snappy, lz4, zstd) x id encoding (plain with or without
dictionary, DELTA_BINARY_PACKED).  The choice in daskjoin/io/parquet_out.ENCODING follows
from it.  Results: benchmarks/results/parquet-encodings-<machine>-<date>.json.

    .venv/bin/python benchmarks/bench_parquet.py [--n 1000000]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import tempfile
import time

import pyarrow as pa
import pyarrow.parquet as pq


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--out-json", default=None)
    args = p.parse_args()
    from daskjoin.io.synth import generate
    from daskjoin.kernels.grid import GridJoin
    from daskjoin.kernels.pair_sort import sort_pairs

    x = generate("uniform", args.n, 3, seed=0)
    eps = (32 / (args.n * 4 / 3 * math.pi)) ** (1 / 3)
    i, j, v = sort_pairs(*GridJoin(x, None, eps).pairs())
    table = pa.Table.from_arrays([pa.array(i), pa.array(j), pa.array(v)], names=["i", "j", "dist"])
    rows = []
    path = os.path.join(tempfile.mkdtemp(), "pairs.parquet")
    for codec in ("none", "snappy", "lz4", "zstd"):
        for encoding, dictionary in ((None, True), (None, False), ("DELTA_BINARY_PACKED", False)):
            kwargs = dict(compression=codec, use_dictionary=dictionary)
            if encoding:
                kwargs["column_encoding"] = {"i": encoding, "j": encoding}
            writes = []
            for _ in range(2):
                start = time.perf_counter()
                pq.write_table(table, path, row_group_size=len(i), **kwargs)
                writes.append(time.perf_counter() - start)
            start = time.perf_counter()
            pq.read_table(path)
            read = time.perf_counter() - start
            row = {"codec": codec, "ids": encoding or "plain", "dictionary": dictionary, "write_s": min(writes),
                   "read_s": read, "bytes_per_pair": os.path.getsize(path) / len(i),
                   "write_mpairs_s": len(i) / min(writes) / 1e6}
            rows.append(row)
            print(f"{codec:7s} {row['ids']:20s} dict={dictionary!s:5s} write {row['write_s']:.3f} s "
                  f"({row['write_mpairs_s']:.1f}M pairs/s) read {read:.3f} s, {row['bytes_per_pair']:.2f} B/pair")
    out = args.out_json or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                        f"parquet-encodings-vm-{dt.date.today().isoformat()}.json")
    with open(out, "w") as f:
        json.dump({"pairs": int(len(i)), "machine": platform.node(), "cores": os.cpu_count(), "rows": rows}, f,
                  indent=1)
    print(f"results written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
