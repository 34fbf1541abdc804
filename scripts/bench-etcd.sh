#!/usr/bin/env bash
# etcd baseline for `creek bench cluster` (docs/bench/etcd-baseline.md).
#
# Builds etcd + its tools/benchmark (cached), starts a 3-member etcd cluster
# on loopback with default durability (fsync on) and data dirs under $TMPDIR,
# then measures with 16-byte values over 10k distinct keys:
#   - put latency p50/p99 at 1 client / 1 connection against the leader
#     (3000 sequential puts);
#   - put throughput at 1, 16 and 64 clients (one connection per client),
#     endpoints = all three members, each point sized to run ~$SECONDS_PER_POINT s.
# Prints one JSON line on stdout:
#   {"p50_us":…, "p99_us":…, "clients_1":…, "clients_16":…, "clients_64":…}
# Everything else (progress, raw benchmark output) goes to stderr.
#
# Environment:
#   ETCD_VERSION        etcd release tag to build (default v3.6.14)
#   ETCD_BENCH_CACHE    where built binaries are kept
#                       (default ${XDG_CACHE_HOME:-$HOME/.cache}/creek-bench-etcd)
#   ETCD_SRC            optional etcd source: a git dir / clone containing the
#                       tag, or a plain source tree already at the tag. Without
#                       it the script tries `git clone` from GitHub and falls
#                       back to the Go module proxy (module zips).
#   ETCD_BENCH_PORT     first of six loopback ports used (default 32379)
#   SECONDS_PER_POINT   target duration of each throughput point (default 5)
# Not run by CI.
set -euo pipefail

# The build (ETCD_VERSION, ETCD_BENCH_CACHE, ETCD_SRC) is shared with
# scripts/bench-peers-setup.sh.
# shellcheck source=lib/etcd-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/etcd-build.sh"
BIN=$ETCD_BIN_DIR
PORT=${ETCD_BENCH_PORT:-32379}
SECS=${SECONDS_PER_POINT:-5}
KEYS=10000
VAL=16

log() { echo "bench-etcd: $*" >&2; }

etcd_ensure_binaries etcd benchmark
ETCD=$BIN/etcd
BENCH=$BIN/benchmark
log "$("$ETCD" --version | tr '\n' ' ')"

# -------------------------------------------------------------- cluster --
DATA=$(mktemp -d "${TMPDIR:-/tmp}/creek-bench-etcd.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  # a stopping leader tries to hand leadership over first, which can take
  # a few seconds once its peers are gone; SIGKILL after 20 s
  for _ in $(seq 200); do
    local alive=0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$DATA"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Disk fdatasync latency in the data dir (informational, stderr): 4 KiB
# overwrites of a preallocated file, like etcd's WAL segments.
python3 - "$DATA" <<'EOF' >&2 || true
import os, sys, tempfile, time
fd, p = tempfile.mkstemp(dir=sys.argv[1])
os.posix_fallocate(fd, 0, 64 << 20); os.fsync(fd)
lat = []
for _ in range(1000):
    os.write(fd, b"x" * 4096)
    t = time.perf_counter_ns(); os.fdatasync(fd); lat.append((time.perf_counter_ns() - t) / 1e3)
os.close(fd); os.unlink(p); lat.sort()
print("bench-etcd: fdatasync 4KiB x1000: p50=%.0fus p99=%.0fus mean=%.0fus" % (lat[500], lat[990], sum(lat) / 1000))
EOF

client_url() { echo "http://127.0.0.1:$((PORT + 2 * ($1 - 1)))"; }
peer_url() { echo "http://127.0.0.1:$((PORT + 2 * ($1 - 1) + 1))"; }
INITIAL=""
for i in 1 2 3; do INITIAL+="${INITIAL:+,}m$i=$(peer_url "$i")"; done
ENDPOINTS="$(client_url 1),$(client_url 2),$(client_url 3)"

for i in 1 2 3; do
  "$ETCD" --name "m$i" --data-dir "$DATA/m$i" \
    --listen-client-urls "$(client_url "$i")" --advertise-client-urls "$(client_url "$i")" \
    --listen-peer-urls "$(peer_url "$i")" --initial-advertise-peer-urls "$(peer_url "$i")" \
    --initial-cluster "$INITIAL" --initial-cluster-state new \
    --initial-cluster-token creek-bench-etcd --log-level warn \
    >"$DATA/m$i.log" 2>&1 &
  PIDS+=($!)
done

# Wait for all members to be healthy and find the leader (via the gRPC gateway).
LEADER=$(python3 - "$ENDPOINTS" <<'EOF'
import json, sys, time, urllib.request
eps = sys.argv[1].split(",")
def post(ep, path):
    req = urllib.request.Request(ep + path, data=b"{}", method="POST")
    return json.load(urllib.request.urlopen(req, timeout=2))
deadline = time.time() + 30
while True:
    try:
        if all(json.load(urllib.request.urlopen(ep + "/health", timeout=2))["health"] == "true" for ep in eps):
            st = {ep: post(ep, "/v3/maintenance/status") for ep in eps}
            leaders = {s["leader"] for s in st.values()}
            if len(leaders) == 1:
                lead = leaders.pop()
                for ep, s in st.items():
                    if s["header"]["member_id"] == lead:
                        print(ep); sys.exit(0)
    except Exception:
        pass
    if time.time() > deadline:
        sys.exit("cluster did not become healthy")
    time.sleep(0.2)
EOF
)
log "cluster up, leader $LEADER, data in $DATA"

# ------------------------------------------------------------ measure --
# pull numbers out of benchmark's summary / latency distribution
rps() { awk '/Requests\/sec:/ {print $2}' <<<"$1"; }
secs() { awk '$1 == "Total:" {print $2}' <<<"$1"; }
pct() { awk -v p="$2%" '$1 == p && $2 == "in" {printf "%.0f", $3 * 1e6}' <<<"$1"; }

run() { # args passed to benchmark; raw output to stderr, returned on stdout
  local out
  out=$("$BENCH" --precise "$@" 2>/dev/null)
  printf '\n$ benchmark --precise %s\n%s\n' "$*" "$out" >&2
  printf '%s' "$out"
}

PUT=(put --key-size=8 --key-space-size=$KEYS --sequential-keys --val-size=$VAL)

log "latency at 1 client (leader)"
# warm-up
run --endpoints="$LEADER" --conns=1 --clients=1 "${PUT[@]}" --total=300 >/dev/null
out=$(run --endpoints="$LEADER" --conns=1 --clients=1 "${PUT[@]}" --total=3000)
P50=$(pct "$out" 50)
P99=$(pct "$out" 99)

declare -A TPUT
for n in 1 16 64; do
  log "throughput at $n clients"
  # calibration / warm-up run, then a run sized to ~$SECS seconds
  probe=$(run --endpoints="$ENDPOINTS" --conns=$n --clients=$n "${PUT[@]}" --total=$((n < 8 ? 400 : 50 * n)))
  total=$(python3 -c "print(max(1000, int(float('$(rps "$probe")') * $SECS)))")
  out=$(run --endpoints="$ENDPOINTS" --conns=$n --clients=$n "${PUT[@]}" --total="$total")
  # the short probe underestimates the steady rate; if the run came out
  # well under $SECS s, repeat it sized from its own rate
  if python3 -c "import sys; sys.exit(0 if float('$(secs "$out")') < 0.8 * $SECS else 1)"; then
    total=$(python3 -c "print(max(1000, int(float('$(rps "$out")') * $SECS)))")
    out=$(run --endpoints="$ENDPOINTS" --conns=$n --clients=$n "${PUT[@]}" --total="$total")
  fi
  TPUT[$n]=$(printf '%.0f' "$(rps "$out")")
done

# etcd's own WAL fsync histogram on the leader (informational, stderr).
python3 - "$LEADER" <<'EOF' >&2 || true
import sys, urllib.request
m = urllib.request.urlopen(sys.argv[1] + "/metrics", timeout=5).read().decode()
for name in ("etcd_disk_wal_fsync_duration_seconds", "etcd_disk_backend_commit_duration_seconds"):
    b = [(float(l.split('le="')[1].split('"')[0]), float(l.split()[-1]))
         for l in m.splitlines() if l.startswith(name + "_bucket")]
    s = float([l for l in m.splitlines() if l.startswith(name + "_sum")][0].split()[-1])
    c = float([l for l in m.splitlines() if l.startswith(name + "_count")][0].split()[-1])
    q = lambda f: next(le for le, v in b if v >= f * c)
    print(f"leader {name}: count={c:.0f} mean={s / c * 1e6:.0f}us p50<={q(.5) * 1e6:.0f}us p99<={q(.99) * 1e6:.0f}us")
EOF

printf '{"p50_us":%s,"p99_us":%s,"clients_1":%s,"clients_16":%s,"clients_64":%s}\n' \
  "$P50" "$P99" "${TPUT[1]}" "${TPUT[16]}" "${TPUT[64]}"
