#!/usr/bin/env bash
# The TPC-C figures of docs/bench/tpcc.md: the simulator at the Creek
# paper's setting (5 replicas x 16 cores, 0.2-0.3 ms links, 1 Gbps, 5
# warehouses, Payment strong) across a rate sweep, the strong-share
# variations, and a local 3-replica cluster across client counts. Writes
# docs/bench/tpcc-*.jsonl and the PNG figures. Takes about 40 minutes on
# 2 cores (the simulator executes every transaction for real on every
# replica).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p creek
bin=./target/release/creek
out=docs/bench
rates=2500,5000,10000,15000,20000,25000,30000,35000,40000
"$bin" bench tpcc --target sim --replicas 5 --cores 16 --warehouses 5 \
  --rate "$rates" --duration 2s --warmup 500ms --json > "$out/tpcc-sim.jsonl"
for share in 0.1 0.5; do
  "$bin" bench tpcc --target sim --replicas 5 --cores 16 --warehouses 5 --strong-share "$share" \
    --rate 5000,20000,35000 --duration 2s --warmup 500ms --label "$share strong" --json
done > "$out/tpcc-sim-strong-share.jsonl"
"$bin" bench tpcc --target cluster --replicas 3 --warehouses 1 \
  --clients 1,4,16,32 --duration 5s --warmup 2s --json > "$out/tpcc-cluster.jsonl"
scripts/plot.sh --title "TPC-C, simulator (5 x 16 cores, 5 warehouses)" --out "$out/tpcc-sim.png" "$out/tpcc-sim.jsonl"
scripts/plot.sh --title "TPC-C, simulator: share of strong transactions" --out "$out/tpcc-sim-strong-share.png" "$out/tpcc-sim.jsonl" "$out/tpcc-sim-strong-share.jsonl"
scripts/plot.sh --title "TPC-C, local cluster (3 replicas, 1 warehouse)" --out "$out/tpcc-cluster.png" "$out/tpcc-cluster.jsonl"
