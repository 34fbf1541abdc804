#!/usr/bin/env bash
# A replica restarted with a long log to run again, under load:
# scripts/restart-recovery.sh [BEFORE_S] [DOWN_S] [LOAD_S]. Starts `creek
# dev` (3 replicas, ports 7901.., data in a temporary directory), has
# `creek bench cluster --attach` write weak and strong ops from 16 clients
# at replicas 1 and 2 for LOAD_S seconds (default 40), kills replica 3
# after BEFORE_S (default 15: before its first checkpoint, so its whole
# log is recovered), starts it again DOWN_S later (default 10), and prints
# what replica 3 logged about it: the ops recovered, the node loop's slow
# turns (with where their time went), the consensus timing it measured,
# and when it took client calls again; then the bench's JSON line.
# $CREEK_BIN picks the binary (default ./target/release/creek); KEEP=1 keeps
# the temporary directory (its path is printed last).
# docs/reliability.md, "A restarted replica's long first turns", has runs.
set -euo pipefail
bin=$(realpath "${CREEK_BIN:-./target/release/creek}")
before=${1:-15}
down=${2:-10}
load=${3:-40}
dir=$(mktemp -d)
addrs=127.0.0.1:7901,127.0.0.1:7902,127.0.0.1:7903
mkfifo "$dir/in"
sleep 100000 >"$dir/in" &
holder=$!
"$bin" dev --data-dir "$dir/data" --client-port 7901 --peer-port 7951 --metrics-port 7981 \
  <"$dir/in" >"$dir/dev.log" 2>&1 &
dev=$!
trap 'kill $dev $holder 2>/dev/null; wait $dev 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
exec 3>"$dir/in"
for _ in $(seq 100); do
  "$bin" status --addr "$addrs" -o json 2>/dev/null | grep -q '"role":"leader"' && break
  sleep 0.2
done
"$bin" bench cluster --attach 127.0.0.1:7901,127.0.0.1:7902 --levels weak,strong --clients 16 \
  --seconds "$load" --under-load 0 --latency-ops 100 --json >"$dir/bench.jsonl" 2>"$dir/bench.err" &
bench=$!
sleep "$before"
echo "kill 3" >&3
sleep "$down"
echo "start 3" >&3
wait $bench || true
sleep 5
grep -E "recovered|took_ms|stretched|fast again|taking client calls" "$dir/data/r3.log" |
  sed -n '/recovered_ops=[1-9]/,$p'
tail -n 1 "$dir/bench.jsonl"
echo "$dir"
