#!/usr/bin/env python3
"""Plot the samples of `creek bench soak --json` reports: resident memory,
data-directory size and consensus-log entries (sums over the replicas)
against time, one line per report, the warm-up shaded.

    target/plotenv/bin/python scripts/plot-soak.py --out docs/bench/soak.png \
        docs/bench/soak.jsonl

(`scripts/plot.sh` makes target/plotenv once.) Each input line is one report;
`--label` names the lines (one per report, comma-separated).
"""

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", metavar="FILE.jsonl")
    ap.add_argument("--out", required=True, help="PNG to write")
    ap.add_argument("--label", help="one label per report, comma-separated")
    args = ap.parse_args()
    reports = []
    for path in args.files:
        with open(path) as f:
            reports += [json.loads(line) for line in f if line.strip()]
    labels = args.label.split(",") if args.label else [
        f"{r.get('minutes')} min, {r.get('replicas')} replicas" for r in reports
    ]
    panels = [
        ("rss_bytes", "RSS (MB)", 1e6),
        ("disk_bytes", "data directories (MB)", 1e6),
        ("raft_log_entries", "consensus log (entries)", 1),
    ]
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 8), sharex=True)
    for report, label in zip(reports, labels):
        t = [s["t_secs"] / 60 for s in report["samples"]]
        for ax, (field, _, scale) in zip(axes, panels):
            ax.plot(t, [s[field] / scale for s in report["samples"]], label=label, lw=1)
    warmup = max(r.get("warmup_secs", 0) for r in reports) / 60
    for ax, (_, title, _) in zip(axes, panels):
        ax.set_ylabel(title)
        ax.set_ylim(bottom=0)
        ax.axvspan(0, warmup, color="0.9")
        ax.grid(alpha=0.3)
    axes[0].legend(loc="upper left", fontsize="small")
    axes[-1].set_xlabel("minutes of load (shaded: warm-up), sums over the replicas")
    fig.suptitle("creek bench soak: YCSB-A, 30% strong, checkpoints on")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)


if __name__ == "__main__":
    main()
