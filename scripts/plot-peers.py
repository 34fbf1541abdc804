"""Plot `creek bench peers` results: p50 latency at one client, and
throughput at 1/16/64 clients, for every system of one run.

    scripts/plot.sh peers [--run N] [--out FILE] [docs/bench/peers.jsonl]

Reads the combined lines (those with "ratios") of the JSON Lines file and
plots run N (default: the last; 1 is the first). Needs matplotlib (plot.sh
installs it into target/plotenv)."""

import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# (label, system, operation) in the order they are drawn.
SERIES = [
    ("Creek weak", "creek", "weak"),
    ("Creek strong", "creek", "strong"),
    ("etcd put", "etcd", "put"),
    ("PostgreSQL write", "postgres", "write"),
    ("Redis SET", "redis", "set"),
    ("Redis SET+WAIT 2", "redis", "set_wait2"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", nargs="?", default="docs/bench/peers.jsonl")
    ap.add_argument("--run", type=int, default=0, help="1-based; 0 = last")
    ap.add_argument("--out", default="docs/bench/peers.png")
    args = ap.parse_args()
    runs = []
    with open(args.path) as f:
        for line in f:
            line = line.strip()
            if line:
                row = json.loads(line)
                if "ratios" in row:
                    runs.append(row)
    if not runs:
        sys.exit(f"plot-peers: no combined run (a line with \"ratios\") in {args.path}")
    if not 0 <= args.run <= len(runs):
        sys.exit(f"plot-peers: --run {args.run}: {args.path} has {len(runs)} runs")
    run = runs[args.run - 1] if args.run else runs[-1]
    series = [(label, run[s][op]) for label, s, op in SERIES if s in run and op in run[s]]

    fig, (lat, thr) = plt.subplots(1, 2, figsize=(11, 4.2))
    labels = [label for label, _ in series]
    p50 = [m["p50_us"] for _, m in series]
    bars = lat.bar(range(len(series)), p50, color=[f"C{i}" for i in range(len(series))])
    lat.bar_label(bars, fmt="%d")
    lat.set_xticks(range(len(series)), labels, rotation=30, ha="right")
    lat.set_ylabel("p50 latency at 1 client (µs)")
    lat.set_title("Latency (lower is better)")
    clients = ["clients_1", "clients_16", "clients_64"]
    for i, (label, m) in enumerate(series):
        ops = m["throughput_ops_per_sec"]
        thr.plot([1, 16, 64], [ops[c] for c in clients], marker="o", color=f"C{i}", label=label)
    thr.set_xscale("log", base=2)
    thr.set_yscale("log")
    thr.set_xticks([1, 16, 64], ["1", "16", "64"])
    thr.set_xlabel("closed-loop clients")
    thr.set_ylabel("ops/s")
    thr.set_title("Throughput (higher is better)")
    thr.legend(fontsize=8)
    r = run["ratios"]
    fig.suptitle(
        "creek bench peers, 3 replicas each, 2 cores, fsync on — "
        f"strong/etcd p50 {r['strong_p50_vs_etcd_put_p50']}, "
        f"strong/PG p50 {r['strong_p50_vs_pg_write_p50']}, "
        f"ops64/etcd {r['strong_ops64_vs_etcd_ops64']}, "
        f"weak/Redis p50 {r['weak_p50_vs_redis_set_p50']}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"plot-peers: wrote {args.out}")


if __name__ == "__main__":
    main()
