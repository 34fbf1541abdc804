#!/usr/bin/env bash
# What one op costs the replicas of a local 3-replica cluster: CPU time,
# context switches and system calls per op, by thread kind (creek-io: the
# Tokio runtime with gRPC and the peer transport; creek-node: the node
# loop; creek-persister: the store's group commit; creek-exec: the
# execution pool), summed over the three `creek serve` processes.
#
#   scripts/cost-per-op.sh [--bin PATH] [--levels weak,strong] [--ops N]
#
# Starts `creek dev` (release binary by default) on random loopback ports
# in a temporary directory, and for each level runs `creek bench cluster
# --attach` with one client (N sequential ops for the latency percentiles,
# then 2 s closed-loop) while `perf stat` counts per thread. An op counts
# where it was invoked (the leader's weak or strong counter). Prints one
# JSON line per level. Needs Linux `perf` with access to the syscall
# tracepoints (root, or kernel.perf_event_paranoid <= -1). Not run by CI;
# docs/bench/cluster.md, "What an op costs", has a run and what it shows.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=./target/release/creek
levels=weak,strong
ops=5000
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2; shift 2 ;;
    --levels) levels=$2; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "cost-per-op: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
command -v perf >/dev/null ||
  { echo "cost-per-op: needs perf (Debian: apt-get install linux-perf)" >&2; exit 1; }
[ -x "$bin" ] ||
  { echo "cost-per-op: no $bin (cargo build --release -p creek, or --bin)" >&2; exit 1; }
events=task-clock,context-switches
for s in fdatasync pwrite64 futex epoll_wait recvfrom sendto writev write; do
  events+=,syscalls:sys_enter_$s
done
perf stat -e "$events" -x, -o /dev/null true 2>/dev/null ||
  { echo "cost-per-op: perf cannot count syscall tracepoints here (run as root, or lower kernel.perf_event_paranoid)" >&2; exit 1; }

dir=$(mktemp -d)
dev=
cleanup() {
  [ -z "$dev" ] || { kill -INT "$dev" 2>/dev/null || true; wait "$dev" 2>/dev/null || true; }
  rm -rf "$dir"
}
trap cleanup EXIT
# (below the ephemeral port range, so no outgoing connection holds one)
base=$((20000 + RANDOM % 12000))
addrs=() attach=
for i in 0 1 2; do
  addrs+=(--addr "127.0.0.1:$((base + i))")
  attach+=${attach:+,}127.0.0.1:$((base + i))
done
"$bin" dev --data-dir "$dir/data" --client-port "$base" --peer-port $((base + 100)) \
  --metrics-port $((base + 200)) >"$dir/dev.out" 2>&1 &
dev=$!
for _ in $(seq 1 100); do
  "$bin" status "${addrs[@]}" 2>/dev/null | grep -qE '^[0-9]+ +[^ ]+ +leader ' && break
  kill -0 "$dev" 2>/dev/null || { cat "$dir/dev.out" >&2; exit 1; }
  sleep 0.1
done
pids=$(pgrep -f "serve --config $dir/data/r" | paste -sd,)

for level in ${levels//,/ }; do
  bench=("$bin" bench cluster --attach "$attach" --levels "$level" --clients 1 --under-load 0 --json)
  "${bench[@]}" --latency-ops 500 --seconds 0.2 >/dev/null # warm-up
  "$bin" status -o json "${addrs[@]}" >"$dir/before"
  perf stat --per-thread -e "$events" -x, -o "$dir/perf.csv" -p "$pids" &
  perf=$!
  sleep 0.3
  "${bench[@]}" --latency-ops "$ops" --seconds 2 >"$dir/bench.json"
  kill -INT $perf
  wait $perf || true
  "$bin" status -o json "${addrs[@]}" >"$dir/after"
  python3 - "$level" "$dir" <<'EOF'
import collections, json, re, sys
level, d = sys.argv[1], sys.argv[2]
def invoked(path):
    # One status object per replica, then the summary; an op counts where
    # it was invoked.
    rows = [json.loads(l) for l in open(path) if l.strip()]
    return sum(r["counters"][f"invoked_{level}"] for r in rows if "counters" in r)
ops = invoked(f"{d}/after") - invoked(f"{d}/before")
per = collections.defaultdict(collections.Counter)
for line in open(f"{d}/perf.csv"):
    f = line.strip().split(",")
    if len(f) < 4 or f[0].startswith("#") or not f[1].replace(".", "").isdigit():
        continue
    kind = re.sub(r"-\d+$", "", f[0])
    kind = re.sub(r"^creek-(node|exec)-\d+$", r"creek-\1", kind)
    event = f[3].replace("syscalls:sys_enter_", "")
    per[event][kind] += float(f[1]) * (1000 if event == "task-clock" else 1)
def table(c):
    out = {k: round(v / ops, 2) for k, v in sorted(c.items()) if v}
    out["total"] = round(sum(c.values()) / ops, 2)
    return out
bench = json.load(open(f"{d}/bench.json"))[level]
print(json.dumps({
    "level": level,
    "ops": ops,
    "p50_us": bench["p50_us"],
    "ops_per_sec_1_client": bench["throughput_ops_per_sec"]["clients_1"],
    "cpu_us_per_op": table(per.pop("task-clock")),
    "context_switches_per_op": table(per.pop("context-switches")),
    "syscalls_per_op": {e: table(c)["total"] for e, c in sorted(per.items())},
}))
EOF
done
