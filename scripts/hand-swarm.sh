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
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${CREEK_BIN:-./target/release/creek}
[ -x "$bin" ] || cargo build --release -p creek
logs=${SWARM_LOGS:-/tmp/creek-hand-swarm}
mkdir -p "$logs"
rm -f "$logs"/*.jsonl

# name protocol links workload first count duration
plan="kv creek lan kv 100000 3800 500ms
queue creek lan queue 100000 2600 500ms
tickets creek lan tickets 100000 1000 500ms
list creek lan list 100000 250 500ms
bank creek lan bank 100000 250 500ms
ycsb creek lan ycsb 100000 150 500ms
wan-kv creek wan kv 100000 1000 4s
wan-queue creek wan queue 100000 500 4s
smr-kv smr lan kv 100000 100 500ms
smr-bank smr lan bank 100000 50 500ms
bayou-kv bayou lan kv 100000 100 500ms
bayou-bank bayou lan bank 100000 50 500ms
archie-kv archie lan kv 100000 100 500ms
archie-bank archie lan bank 100000 50 500ms"

# Chunks of at most 100 seeds, so the two workers stay balanced.
chunks=$(while read -r name proto links workload first count duration; do
  for ((a = first; a < first + count; a += 100)); do
    b=$((a + 100 < first + count ? a + 100 : first + count))
    echo "$name-$a $proto $links $workload $a..$b $duration"
  done
done <<< "$plan")

run() {
  "$bin" sim --protocol "$2" --links "$3" --replicas 5 --workload "$4" --seeds "$5" \
    --duration "$6" --faults all --json > "$logs/$1.jsonl" 2> "$logs/$1.err" || true
}
export -f run
export bin logs
started=$(date +%s)
echo "$chunks" | xargs -P 2 -L 1 bash -c 'run "$@"' _
echo "wall time: $(( $(date +%s) - started )) s"
summary=$(python3 scripts/swarm-summary.py "$logs"/*.jsonl)
echo "$summary"
python3 -c 'import json,sys; sys.exit(json.loads(sys.argv[1])["failed"] != 0)' "$summary"
