#!/usr/bin/env bash
# CAB and gossip measurements (docs/bench/cab.md); writes docs/bench/cab.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p creek
out=docs/bench/cab.jsonl
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
{
  printf '{"machine":{"cpu":"%s","cores":%s},"date":"%s","command":"scripts/bench-cab.sh"}\n' \
    "$cpu" "$(nproc)" "$(date -u +%Y-%m-%dT%H:%MZ)"
  for n in 3 5; do
    for rate in 2000 20000; do
      ./target/release/creek bench cab --replicas "$n" --strong-rate "$rate" --weak-rate "$rate" --json
    done
  done
} > "$out"
echo "wrote $out"
