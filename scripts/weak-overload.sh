#!/usr/bin/env bash
# Weak-only overload on a real cluster: scripts/weak-overload.sh [SECONDS]
# [CLIENTS]. Starts `creek dev` (3 replicas, ports 7601.., data in a
# temporary directory), has `creek bench cluster --attach` write weak ops
# from CLIENTS closed-loop clients (default 64) for SECONDS (default 60) —
# a weak op is answered before it commits, so such clients write as fast
# as the replicas execute, not as fast as the group commits — and samples
# every replica's status every 2 s during the load and for up to 60 s
# after it, until every tentative list is empty. Prints JSON lines: one
# per replica per sample (`t_s`, `replica`, `role`, `tentative`,
# `committed`, `invoked_weak`, `election_timeout_ms`, `longest_turn_us`,
# `term`), the bench's own lines (`"bench": …`), and a summary
# (`"summary": true`: the largest tentative list, the commit rate during
# the load, the seconds after it until the lists were empty, elections).
# $CREEK_BIN picks the binary (default ./target/release/creek).
# docs/reliability.md, "Overload", has the runs.
set -euo pipefail
bin=${CREEK_BIN:-./target/release/creek}
seconds=${1:-60}
clients=${2:-64}
dir=$(mktemp -d)
addrs=127.0.0.1:7601,127.0.0.1:7602,127.0.0.1:7603
"$bin" dev --data-dir "$dir/data" --client-port 7601 --peer-port 7701 --metrics-port 7801 \
  >"$dir/dev.log" 2>&1 &
dev=$!
trap 'kill $dev 2>/dev/null; wait $dev 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 50); do
  "$bin" status --addr "$addrs" -o json 2>/dev/null | grep -q '"role":"leader"' && break
  sleep 0.2
done
sample() { # $1: seconds since the load started
  "$bin" status --addr "$addrs" -o json 2>/dev/null | python3 -c '
import json, sys
t = float(sys.argv[1])
for line in sys.stdin:
    s = json.loads(line)
    if s.get("replica") is None:
        continue
    c = s.get("counters", {})
    print(json.dumps({"t_s": t, "replica": s.get("replica"), "role": s.get("role"),
        "tentative": s.get("tentative"), "committed": s.get("committed"), "term": s.get("term"),
        "invoked_weak": c.get("invoked_weak"), "election_timeout_ms": c.get("election_timeout_ms"),
        "longest_turn_us": c.get("longest_turn_us")}))' "$1" || true
}
"$bin" bench cluster --attach "$addrs" --levels weak --clients "$clients" --seconds "$seconds" \
  --under-load 0 --latency-ops 200 --json >"$dir/bench.jsonl" 2>"$dir/bench.err" &
bench=$!
start=$(date +%s.%N)
since() { python3 -c "import sys; print(round($(date +%s.%N) - $start, 1))"; }
while kill -0 $bench 2>/dev/null; do
  sample "$(since)" >>"$dir/samples.jsonl"
  sleep 2
done
wait $bench || { cat "$dir/bench.err" >&2; exit 1; }
loaded=$(since)
for _ in $(seq 30); do
  t=$(since)
  sample "$t" >>"$dir/samples.jsonl"
  tail -n 3 "$dir/samples.jsonl" | grep -q '"tentative": [1-9]' || break
  sleep 2
done
cat "$dir/samples.jsonl"
sed 's/^/{"bench": /; s/$/}/' "$dir/bench.jsonl"
python3 - "$dir/samples.jsonl" "$loaded" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
loaded = float(sys.argv[2])
during = [r for r in rows if r["t_s"] <= loaded]
after = [r for r in rows if r["t_s"] > loaded]
def committed_at(rs):
    return max((r["committed"] or 0) for r in rs) if rs else 0
first_t = min(r["t_s"] for r in during) if during else 0
last_t = max(r["t_s"] for r in during) if during else 0
first = [r for r in during if r["t_s"] == first_t]
last = [r for r in during if r["t_s"] == last_t]
rate = (committed_at(last) - committed_at(first)) / max(last_t - first_t, 1e-9)
empty_at = None
for t in sorted({r["t_s"] for r in after}):
    if all((r["tentative"] or 0) == 0 for r in after if r["t_s"] == t):
        empty_at = round(t - loaded, 1)
        break
print(json.dumps({"summary": True,
    "tentative_max": max((r["tentative"] or 0) for r in rows),
    "committed_per_sec_during_load": round(rate),
    "drained_after_load_s": empty_at,
    "terms": sorted({r["term"] for r in rows if r["term"] is not None}),
    "election_timeout_ms_max": max((r["election_timeout_ms"] or 0) for r in rows),
    "longest_turn_us_max": max((r["longest_turn_us"] or 0) for r in rows)}))
PYEOF
