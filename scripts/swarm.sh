#!/usr/bin/env bash
# The CI swarm: 147 seeds, every fault class (the simulated disk and a lost
# disk included), two runs at a time (2 cores). On Creek: 12 seeds each of
# queue and bank, 8 each of kv and list, 4 kv seeds of 3 s (long enough for
# leases of 1-2 s to expire under every fault), 4 of procs (user procedures
# registered at run time; a seed costs about two kv seeds) and 5 each of
# the benchmark workloads (ycsb, tickets) on a LAN, 500 ms each; 7 kv and
# 3 queue seeds on wide-area links (10-150 ms one way, asymmetric,
# jittered), 4 s each; 4 bank seeds of 2 s where up to two disks are lost
# (wipe2). On every baseline (smr, bayou, archie): 4 seeds each of kv and
# bank. Sharded clusters (2 shards of 3 replicas, faults on one shard at a
# time, the ownership check): 4 kv, 2 bank and 2 procs seeds on a LAN
# (500 ms), 2 kv seeds on wide-area links (4 s); operations across shards
# (bank with 30 % of transfers between shards, the cross-shard check): 4
# seeds on a LAN (500 ms), 2 on wide-area links (4 s), 4 kv seeds whose
# transactions over two registers span the shards (500 ms), and 2 TPC-C seeds
# with the specification's remote warehouses (500 ms). Snapshot reads (30 %
# of read-only ops at the snapshot level, the snapshot_reads check): 4 kv,
# 4 bank and 3 ycsb seeds on a LAN (500 ms), 2 kv seeds on wide-area links
# (4 s), 3 sharded bank seeds with operations across shards, 2 sharded
# ycsb seeds with reads across shards at one time (the
# snapshot_across_shards check); all but the one-group ycsb's with stable
# times every 5 ms (reports, publication between shards, clock no-ops).
# Moves of keys between shards under load (the reshard fault class, three
# moves a run, checked across the whole cluster): 4 kv seeds on 2 shards
# (500 ms) and 3 bank seeds on 3 shards with operations across shards,
# where the third shard is added while keys move and a shard is drained
# and dropped after them (600 ms). Durable weak writes: 4 kv seeds where
# 30 % of weak ops wait for their replica's disk or a majority (500 ms),
# the durable_weak check.
#
# It is a regression net of fixed seeds, sized so CI stays short (about 7
# minutes of the test build's binary); the search for new failures is the
# hand swarm's (scripts/hand-swarm.sh, thousands of seeds a mode).
# Exits
# non-zero if any seed fails; each failure prints the command that
# reproduces it. Logs go to $SWARM_LOGS (default /tmp/creek-swarm).
#
# The binary is the `swarm` profile's (target/swarm/creek, built here if
# missing): release optimisation with debug assertions and overflow checks
# on, so the paired invariants (`debug_assert!`) hold where the seeds run
# (docs/operations.md, "The swarm profile"). $CREEK_BIN runs another one,
# e.g. ./target/release/creek to compare.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${CREEK_BIN:-./target/swarm/creek}
[ -x "$bin" ] || cargo build --profile swarm -p creek
logs=${SWARM_LOGS:-/tmp/creek-swarm}
mkdir -p "$logs"
rm -f "$logs"/*.log

# name protocol links workload seeds duration faults [shards replicas
#   cross-shard snapshot-reads stable-every moves durable-weak]
jobs="bank creek lan bank 1000..1012 500ms all
list creek lan list 1000..1008 500ms all
kv creek lan kv 1000..1008 500ms all
lease-kv creek lan kv 1000..1004 3s all
procs creek lan procs 1000..1004 500ms all
queue creek lan queue 1000..1012 500ms all
ycsb creek lan ycsb 1000..1005 500ms all
tickets creek lan tickets 1000..1005 500ms all
wan-kv creek wan kv 1000..1007 4s all
wan-queue creek wan queue 1000..1003 4s all
wipe2-bank creek lan bank 1000..1004 2s partition,crash,clock,loss,disk,wipe2
smr-kv smr lan kv 1000..1004 500ms all
smr-bank smr lan bank 1000..1004 500ms all
bayou-kv bayou lan kv 1000..1004 500ms all
bayou-bank bayou lan bank 1000..1004 500ms all
archie-kv archie lan kv 1000..1004 500ms all
archie-bank archie lan bank 1000..1004 500ms all
shard-kv creek lan kv 1000..1004 500ms all 2 3
shard-bank creek lan bank 1000..1002 500ms all 2 3
shard-procs creek lan procs 1000..1002 500ms all 2 3
shard-wan-kv creek wan kv 1000..1002 4s all 2 3
shard-mpo-bank creek lan bank 1000..1004 500ms all 2 3 0.3
shard-mpo-kv creek lan kv 1000..1004 500ms all 2 3 0.3
shard-mpo-tpcc creek lan tpcc 1000..1002 500ms all 2 3 0.3
shard-wan-mpo-bank creek wan bank 1000..1002 4s all 2 3 0.3
snap-kv creek lan kv 1000..1004 500ms all 1 5 0 0.3 5ms
snap-bank creek lan bank 1000..1004 500ms all 1 5 0 0.3 5ms
snap-ycsb creek lan ycsb 1000..1003 500ms all 1 5 0 0.3
snap-wan-kv creek wan kv 1000..1002 4s all 1 5 0 0.3 5ms
shard-snap-mpo-bank creek lan bank 1000..1003 500ms all 2 3 0.3 0.3 5ms
shard-snap-ycsb creek lan ycsb 1000..1002 500ms all 2 3 0.3 0.3 5ms
shard-move-kv creek lan kv 1000..1004 500ms all 2 3 0 0 0 3
shard-move-mpo-bank creek lan bank 1000..1003 600ms all 3 3 0.3 0 0 3
durable-kv creek lan kv 1000..1004 500ms all 1 5 0 0 0 0 0.3"

run() {
  "$bin" sim --protocol "$2" --links "$3" --replicas "${9:-5}" --shards "${8:-1}" \
    --cross-shard "${10:-0}" --snapshot-reads "${11:-0}" --stable-every "${12:-0}" \
    --moves "${13:-0}" --durable-weak "${14:-0}" \
    --workload "$4" --seeds "$5" \
    --duration "$6" --faults "$7" \
    > "$logs/$1.log" 2>&1
}
export -f run
export bin logs
status=0
echo "$jobs" | xargs -P 2 -L 1 bash -c 'run "$@"' _ || status=1
while read -r name _; do
  tail -n 1 "$logs/$name.log" | sed "s/^/$name: /"
  grep -A1 "FAIL" "$logs/$name.log" || true
done <<< "$jobs"
python3 scripts/swarm-summary.py "$logs"/*.log
exit $status
