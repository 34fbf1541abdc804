#!/usr/bin/env bash
# The README's run command, checked: `creek dev` starts a local cluster, a
# client call gets its views, `creek status` sees three replicas, and SIGTERM
# stops it cleanly. Ports are picked at random so a running cluster is not
# hit; the script fails if `creek dev` does not stay up.
set -euo pipefail
cd "$(dirname "$0")/.."
# $CREEK_BIN: the binary to check (CI passes the test build's).
bin=${CREEK_BIN:-./target/release/creek}
dir=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
# Ports below the kernel's ephemeral range (32768 and up on Linux), so an
# outgoing connection cannot hold one; a port taken anyway (another cluster)
# makes `creek dev` exit at once, and the script tries another base.
start() {
  base=$((20000 + RANDOM % 12000))
  c1=$base c2=$((base + 1)) c3=$((base + 2))
  addrs="--addr 127.0.0.1:$c1 --addr 127.0.0.1:$c2 --addr 127.0.0.1:$c3"
  rm -rf "$dir/data"
  $bin dev --data-dir "$dir/data" --client-port $c1 --peer-port $((base + 100)) --metrics-port $((base + 200)) >"$dir/out" 2>"$dir/err" &
  pid=$!
}
up=
for attempt in 1 2 3 4 5; do
  start
  for _ in $(seq 1 100); do
    if ! kill -0 $pid 2>/dev/null; then
      break
    fi
    status=$($bin status $addrs 2>/dev/null || true)
    if grep -qE '^[0-9]+ +[^ ]+ +leader ' <<<"$status"; then
      up=1
      break
    fi
    sleep 0.1
  done
  [ -n "$up" ] && break
  if kill -0 $pid 2>/dev/null || ! grep -q "is taken" "$dir/err"; then
    echo "creek dev did not come up:" >&2
    cat "$dir/err" >&2
    exit 1
  fi
  echo "dev smoke: a port was taken (attempt $attempt), trying other ports" >&2
done
[ -n "$up" ] || { echo "creek dev: no free ports found in 5 attempts" >&2; cat "$dir/err" >&2; exit 1; }
cat "$dir/out"
$bin call --addr 127.0.0.1:$c2 kv.put smoke '"ok"'
$bin call --addr 127.0.0.1:$c3 --level strong kv.get smoke | tee "$dir/get"
grep -q '"ok"' "$dir/get"
$bin status $addrs
# (into a file first: `grep -q` closing the pipe early would fail curl)
curl -sf "http://127.0.0.1:$((base + 201))/metrics" -o "$dir/metrics"
grep -q "creek_ops_total{" "$dir/metrics"
# The console: its page, and its JSON once the first sample is taken.
curl -sf "http://127.0.0.1:$((base + 201))/" -o "$dir/console.html"
grep -q "Creek console" "$dir/console.html"
for _ in $(seq 1 30); do
  curl -sf "http://127.0.0.1:$((base + 201))/api/console" -o "$dir/console.json" && break
  sleep 0.2
done
grep -q '"members"' "$dir/console.json"
kill -TERM $pid
for _ in $(seq 1 100); do
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
if kill -0 $pid 2>/dev/null; then
  echo "creek dev did not stop on SIGTERM" >&2
  exit 1
fi
wait $pid
echo "dev smoke: ok"
