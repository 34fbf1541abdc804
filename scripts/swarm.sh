#!/usr/bin/env bash
# The CI swarm: 380 seeds with every fault class, 50 per checking workload
# and 30 each for the benchmark workloads (ycsb, tickets) on Creek, and 20
# each of kv and bank on every baseline (smr, bayou, archie), two at a time
# (2 cores). Exits non-zero if any seed fails; each
# failure prints the command that reproduces it.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=./target/release/creek
[ -x "$bin" ] || cargo build --release -p creek
run() { "$bin" sim --replicas 5 --workload "$1" --seeds "$2" --duration 500ms --faults all > "/tmp/swarm-$1.log" 2>&1; }
baseline() { "$bin" sim --protocol "$1" --replicas 5 --workload "$2" --seeds 1000..1020 --duration 500ms --faults all > "/tmp/swarm-$1-$2.log" 2>&1; }
status=0
run kv 1000..1050 & a=$!
run queue 1000..1050 & b=$!
wait $a || status=1; wait $b || status=1
run bank 1000..1050 & a=$!
run list 1000..1050 & b=$!
wait $a || status=1; wait $b || status=1
run ycsb 1000..1030 & a=$!
run tickets 1000..1030 & b=$!
wait $a || status=1; wait $b || status=1
for p in smr bayou archie; do
  baseline "$p" kv & a=$!
  baseline "$p" bank & b=$!
  wait $a || status=1; wait $b || status=1
done
for w in kv queue bank list ycsb tickets smr-kv smr-bank bayou-kv bayou-bank archie-kv archie-bank; do
  tail -n 1 "/tmp/swarm-$w.log" | sed "s/^/$w: /"
  grep -A1 "FAIL" "/tmp/swarm-$w.log" || true
done
exit $status
