"""The README's multi-GPU plot from bench_multigpu.py results: wall time and speedup over one GPU per workload.

    python benchmarks/plot_multigpu.py RESULT.json [HIGHD.json] --out docs/img/multigpu.png
"""
from __future__ import annotations

import argparse
import json


def series(report: dict) -> dict:
    """workload label -> {gpus: seconds}."""
    out = {}
    sc = report.get("scaling")
    if sc:
        n = f"{sc['workload']['n'] / 1e6:.0f}M x 3-d"
        out[f"{n}\ncount"] = {r["gpus"]: r["count_s"] for r in sc["rows"]}
        out[f"{n}\nParquet"] = {r["gpus"]: r["parquet_s"] for r in sc["rows"]}
    oc = report.get("outofcore")
    if oc:
        n = f"{oc['n'] / 1e6:.0f}M x 3-d"
        out[f"{n}\ncount"] = {c["gpus"]: c["count_s"] for c in oc["counts"]}
        out[f"{n}\nParquet ({oc['budget']})"] = {w["gpus"]: w["parquet_s"] for w in oc.get("writes", [])}
    hd = report.get("highd")
    if hd:
        w = hd["workload"]
        out[f"{w['n'] / 1e6:.0f}M x {w['d']}-d\ncount"] = {r["gpus"]: r["count_s"] for r in hd["rows"] if "count_s" in r}
    return {k: v for k, v in out.items() if len(v) > 1 and 1 in v}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    data, device = {}, None
    for path in args.results:
        report = json.load(open(path))
        device = device or f"{len(report['device'])} x {report['device'][0]}"
        data.update(series(report))
    labels = list(data)
    gpus = sorted({g for v in data.values() for g in v})
    fig, ax = plt.subplots(figsize=(8.5, 3.6))
    x = np.arange(len(labels))
    width = 0.8 / len(gpus)
    for k, g in enumerate(gpus):
        speed = [data[lab][1] / data[lab][g] if g in data[lab] else np.nan for lab in labels]
        bars = ax.bar(x + (k - (len(gpus) - 1) / 2) * width, speed, width, label=f"{g} GPU" + ("s" if g > 1 else ""))
        for bar, lab in zip(bars, labels):
            if g in data[lab]:
                ax.annotate(f"{data[lab][g]:.2f} s", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                            ha="center", va="bottom", fontsize=7)
    for g in gpus[1:]:
        ax.axhline(g, color="grey", lw=0.6, ls=":")
    ax.axhline(1.8, color="tab:red", lw=0.8, ls="--", label="target on 2 GPUs (1.8x)")
    if 4 in gpus:
        ax.axhline(3.4, color="tab:purple", lw=0.8, ls="--", label="target on 4 GPUs (3.4x)")
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylabel("speedup over 1 GPU")
    ax.set_title(f"daskjoin on {device}: one dask-cuda worker per GPU (wall time on the bars)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    ax.set_ylim(0, max(gpus) + 0.4)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)


if __name__ == "__main__":
    main()
