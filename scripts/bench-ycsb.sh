#!/usr/bin/env bash
# The YCSB figures of docs/bench/ycsb.md: divergence of preliminary from
# final views (Correctables §6.2.1) on a 1,000-record dataset for workloads
# A and B under zipfian, latest and uniform requests, in the simulator
# (5 replicas, 0.2-0.3 ms links) and on a local 3-replica cluster; then
# ticket selling on both targets (tickets-*.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p creek
bin=./target/release/creek
out=docs/bench
for target in sim cluster; do
  for w in a b; do
    for d in zipfian latest uniform; do
      "$bin" bench ycsb --target "$target" --workload "$w" --distribution "$d" --records 1000 \
        --clients 16 --duration 3s --warmup 1s --label "$w $d" --json
    done
  done > "$out/ycsb-$target.jsonl"
  scripts/plot.sh --title "YCSB, $target" --out "$out/ycsb-$target.png" "$out/ycsb-$target.jsonl"
done
"$bin" bench tickets --target sim --clients 16 --duration 2s --warmup 500ms --json > "$out/tickets-sim.jsonl"
"$bin" bench tickets --target cluster --clients 16 --duration 3s --warmup 500ms --json > "$out/tickets-cluster.jsonl"
