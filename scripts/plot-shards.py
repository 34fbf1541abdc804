#!/usr/bin/env python3
"""Plot throughput against shards from `creek bench ycsb|tpcc --target sim
--shards 1,2,4,8 --json` runs, one curve per file, with the ideal (S times
one shard's) dashed, and each curve's scaling efficiency in its label.

Usage (plot.sh runs this in a venv that has matplotlib):
  scripts/plot.sh shards --out docs/bench/shards.png FILE.jsonl [FILE2.jsonl ...]
"""

import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def points(path):
    """(label, [(shards, throughput)], efficiency) of one sweep's file."""
    sweep, efficiency, label = [], None, path
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            p = json.loads(line)
            if p.get("summary") == "scaling":
                efficiency = p.get("scaling_efficiency")
                continue
            if "shards" in p and p.get("throughput_ops_per_sec") is not None:
                sweep.append((p["shards"], p["throughput_ops_per_sec"]))
                unit = "tx/s" if p.get("bench") == "tpcc" else "ops/s"
                label = f"{p.get('bench', path)} ({unit})"
    return label, sorted(sweep), efficiency


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    fig, axes = plt.subplots(1, len(a.files), figsize=(5 * len(a.files), 4), squeeze=False)
    for ax, path in zip(axes[0], a.files):
        label, sweep, eff = points(path)
        if not sweep:
            print(f"{path}: no sharded points", file=sys.stderr)
            continue
        xs = [s for s, _ in sweep]
        ys = [t / 1000 for _, t in sweep]
        one = dict(sweep).get(1)
        ax.plot(xs, ys, "o-", label=f"measured (efficiency {eff:.2f})" if eff else "measured")
        if one:
            ax.plot(xs, [s * one / 1000 for s in xs], "k--", linewidth=1, label="ideal: S x one shard")
        ax.set_xlabel("shards")
        ax.set_ylabel(f"throughput, thousands of {label.split('(')[-1].rstrip(')')}")
        ax.set_title(label.split(" (")[0])
        ax.set_xticks(xs)
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
