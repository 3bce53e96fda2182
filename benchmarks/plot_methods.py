"""Plot of the method comparison (``bench_methods.py`` results): seconds against d, one panel per
distribution and neighbour count, one line per method.  Needs matplotlib (not a daskjoin dependency).

    python3 benchmarks/plot_methods.py benchmarks/results/methods-H*-2026-11-26*.json \
        --out benchmarks/results/methods-2026-11-26.svg

Where several runs timed a method in a cell, the fastest is drawn (the runs agree within a few per cent:
the grid, timed in every run as the common reference, repeats within 0.001 s at d <= 6), so one line
may join points of different GPUs (the title lists them; on H100 and H200 the cells measured on both
agreed within 3% or 0.001 s).  Variants (``grid@pattern=unicomp``) are drawn dashed.
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict

STYLE = {"grid": "C0", "brute": "C1", "szl": "C2", "nlj": "C3", "directory": "C4"}


def collect(paths):
    """(dist, neighbours) -> method -> d -> (seconds, gpu name)."""
    table = defaultdict(lambda: defaultdict(dict))
    for path in paths:
        run = json.load(open(path))
        gpu = run.get("gpus", {}).get("devices", [{}])[0].get("name", "?")
        for cell in run["cells"]:
            for method, seconds in cell["seconds"].items():
                if seconds is None:
                    continue
                slot = table[cell["dist"], cell["neighbours"]][method]
                if cell["d"] not in slot or seconds < slot[cell["d"]][0]:
                    slot[cell["d"]] = (seconds, gpu)
    return table


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="+")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = collect(args.results)
    panels = sorted(table)
    cols = 2
    rows = -(-len(panels) // cols)
    fig, grid = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.6 * rows + 0.6), sharey=True, squeeze=False)
    axes = [list(grid.ravel())]
    gpus = set()
    for ax, key in zip(axes[0], panels):
        for method, by_d in sorted(table[key].items()):
            ds = sorted(by_d)
            gpus.update(g for _, g in by_d.values())
            base = method.split("@")[0]
            ax.plot(ds, [by_d[d][0] for d in ds], marker="o", ms=4, color=STYLE.get(base, "k"),
                    ls="--" if "@" in method else "-", label=method)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks([2, 3, 4, 6, 8, 12, 16, 32])
        ax.set_xticklabels(["2", "3", "4", "6", "8", "12", "16", "32"])
        ax.set_title(f"{key[0]}, ~{key[1]} neighbours")
        ax.set_xlabel("d")
        ax.grid(True, which="both", alpha=0.3)
    for ax in grid[:, 0]:
        ax.set_ylabel("seconds (2M-row self-join count)")
    labels = {}
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            labels.setdefault(label, handle)
    fig.legend(labels.values(), labels.keys(), loc="lower center", ncol=len(labels), fontsize=8)
    fig.suptitle("daskjoin's ε-join methods on one GPU (" + ", ".join(sorted(gpus)) + ")", fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
