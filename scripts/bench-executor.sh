#!/usr/bin/env bash
# Runs the executor benchmark sweep and writes docs/bench/executor.jsonl
# (one JSON object per point, prefixed by a machine/date header object).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p creek
out=docs/bench/executor.jsonl
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
{
  printf '{"machine":{"cpu":"%s","cores":%s,"rustc":"%s"},"date":"%s","command":"scripts/bench-executor.sh"}\n' \
    "$cpu" "$(nproc)" "$(rustc --version)" "$(date -u +%Y-%m-%dT%H:%MZ)"
  for reorder in 0 0.1 0.3; do
    for overlap in 0 0.1 1; do
      ./target/release/creek bench executor --ops 1000000 --reorder "$reorder" --overlap "$overlap" --json
    done
  done
  for keys in 1000 10000 1000000; do
    ./target/release/creek bench executor --ops 1000000 --reorder 0.1 --overlap 0 --keys "$keys" --json
  done
} > "$out"
echo "wrote $out"
