#!/usr/bin/env bash
# The long swarm, run by hand (docs/reliability.md, "Figures"): 10,000
# seeds with every fault class, 5 replicas, two runs at a time. Creek on a
# LAN (500 ms of clients): kv 3,800, queue 2,600, tickets 1,000, list 250,
# bank 250, ycsb 150 (list, bank and ycsb cost 5-8x a kv seed); on
# wide-area links (4 s): kv 1,000, queue 500; the baselines (smr, bayou,
# archie): kv 100 and bank 50 each. Every run's JSON
# report goes to $SWARM_LOGS (default /tmp/creek-hand-swarm); the summary
# (seeds, ops checked, faults, failures, longest settling time against the
# liveness bound) is printed at the end. Exits non-zero if any seed fails.
# About an hour on the 2-core machine.
#
# `scripts/hand-swarm.sh shards` runs the sharded swarm instead: 2,050
# seeds of clusters of 2 or 3 shards of 3 replicas (faults hit one shard
# at a time; checks per shard and the ownership check), 300 ms of clients
# on a LAN: kv 1,300 on 2 shards and 200 on 3, bank 100 (single-shard
# transfers; a bank seed costs about eight kv seeds), procs 250 (pinned
# keyspaces), ycsb 100; on wide-area links (4 s): kv 100. About 25
# minutes on an idle machine.
#
# `scripts/hand-swarm.sh mpo` runs the swarm of operations across shards:
# 2,100 seeds on clusters of shards of 3 replicas, 300 ms of clients on a
# LAN: bank where 30 % of the transfers go between two shards
# (docs/cross-shard.md), 1,600 on 2 shards and 300 on 3, and TPC-C with
# the specification's remote warehouses, 100 on 2 shards; on wide-area
# links (4 s): bank, 100 on 2 shards.
#
# `scripts/hand-swarm.sh snapshot` runs the swarm of snapshot reads: 2,000
# seeds where 30 % of read-only ops are at the snapshot level (weak ones
# to a random replica of their shard with the session's read time; a
# quarter of the strong ones with all three views; kv.mgets spanning
# shards as reads across shards at one time), the clients keep a cache of
# their own writes, and stable times every 5 ms (reports, publication
# between shards, clock no-ops): on a LAN, kv 700 and bank 150 and ycsb
# 150 on one group of 5 replicas (500 ms), kv 400 on 2 shards of 3
# (300 ms), bank with 30 % of transfers across 2 shards 300 and ycsb with
# 30 % of ops across 2 shards 200 (300 ms); on wide-area links (4 s), kv
# 100.
#
# SWARM_OFFSET=N moves every seed range up by N (another set of seeds than
# the last run's).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${CREEK_BIN:-./target/release/creek}
[ -x "$bin" ] || cargo build --release -p creek
logs=${SWARM_LOGS:-/tmp/creek-hand-swarm}
mkdir -p "$logs"
rm -f "$logs"/*.jsonl

# name protocol links workload first count duration shards replicas
plan="kv creek lan kv 100000 3800 500ms 1 5
queue creek lan queue 100000 2600 500ms 1 5
tickets creek lan tickets 100000 1000 500ms 1 5
list creek lan list 100000 250 500ms 1 5
bank creek lan bank 100000 250 500ms 1 5
ycsb creek lan ycsb 100000 150 500ms 1 5
wan-kv creek wan kv 100000 1000 4s 1 5
wan-queue creek wan queue 100000 500 4s 1 5
smr-kv smr lan kv 100000 100 500ms 1 5
smr-bank smr lan bank 100000 50 500ms 1 5
bayou-kv bayou lan kv 100000 100 500ms 1 5
bayou-bank bayou lan bank 100000 50 500ms 1 5
archie-kv archie lan kv 100000 100 500ms 1 5
archie-bank archie lan bank 100000 50 500ms 1 5"
if [ "${1:-}" = shards ]; then
  plan="kv2 creek lan kv 200000 1300 300ms 2 3
kv3 creek lan kv 200000 200 300ms 3 3
bank2 creek lan bank 200000 100 300ms 2 3
procs2 creek lan procs 200000 250 300ms 2 3
ycsb2 creek lan ycsb 200000 100 300ms 2 3
wan-kv2 creek wan kv 200000 100 4s 2 3"
fi
cross=0
snapshot=0
stable=0
if [ "${1:-}" = snapshot ]; then
  snapshot=0.3
  stable=5ms
  plan="snap-kv creek lan kv 400000 700 500ms 1 5
snap-bank creek lan bank 400000 150 500ms 1 5
snap-ycsb creek lan ycsb 400000 150 500ms 1 5
snap-kv2 creek lan kv 400000 400 300ms 2 3
snap-wan-kv creek wan kv 400000 100 4s 1 5"
  mpo_plan="snap-mpo2 creek lan bank 400000 300 300ms 2 3
snap-across2 creek lan ycsb 400000 200 300ms 2 3"
fi
if [ "${1:-}" = mpo ]; then
  cross=0.3
  plan="mpo2 creek lan bank 300000 1600 300ms 2 3
mpo3 creek lan bank 300000 300 300ms 3 3
mpo-tpcc2 creek lan tpcc 300000 100 300ms 2 3
wan-mpo2 creek wan bank 300000 100 4s 2 3"
fi

# Chunks of at most 100 seeds, so the two workers stay balanced; the last
# field is the chunk's share of operations across shards.
offset=${SWARM_OFFSET:-0}
chunks_of() {
  while read -r name proto links workload first count duration shards replicas; do
    [ -n "$name" ] || continue
    first=$((first + offset))
    for ((a = first; a < first + count; a += 100)); do
      b=$((a + 100 < first + count ? a + 100 : first + count))
      echo "$name-$a $proto $links $workload $a..$b $duration $shards $replicas $2"
    done
  done <<< "$1"
}
chunks=$(chunks_of "$plan" "$cross"; chunks_of "${mpo_plan:-}" 0.3)

run() {
  "$bin" sim --protocol "$2" --links "$3" --replicas "$8" --shards "$7" --workload "$4" \
    --cross-shard "$9" --snapshot-reads "$snapshot" --stable-every "$stable" \
    --seeds "$5" --duration "$6" --faults all --json \
    > "$logs/$1.jsonl" 2> "$logs/$1.err" || true
}
export -f run
export bin logs snapshot stable
started=$(date +%s)
echo "$chunks" | xargs -P 2 -L 1 bash -c 'run "$@"' _
echo "wall time: $(( $(date +%s) - started )) s"
summary=$(python3 scripts/swarm-summary.py "$logs"/*.jsonl)
echo "$summary"
python3 -c 'import json,sys; sys.exit(json.loads(sys.argv[1])["failed"] != 0)' "$summary"
