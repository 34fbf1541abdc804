#!/usr/bin/env bash
# The Creek paper's evaluation (section 6) in the simulator: `creek bench
# paper` runs TPC-C for creek, archie, smr and bayou at Figure 1's setting
# and the section 6.3 variations, streams every point to
# docs/bench/paper.jsonl and writes paper-summary.json and paper.md; then
# this draws docs/bench/paper-<variation>.png for each variation in
# paper.jsonl (Creek's weak tentative and strong stable latencies, the
# others' response latency). Arguments go to `creek bench paper`, e.g.
#   scripts/bench-paper.sh --only fig1,wh1 --jobs 1
#   scripts/bench-paper.sh --quick              # a few minutes; prints, plots nothing
#   scripts/bench-paper.sh --quick --out /tmp/p # ... and writes /tmp/p
# The full run takes about an hour on 2 cores (the simulator executes
# every transaction for real on every replica) and ~7 GB with 2 jobs; wh20
# alone needs ~17 GB (docs/operations.md). Put the analysis in docs/bench/paper-notes.md: paper.md includes
# it. A relative --out is taken from the repository root. Exits with the
# command's status, after plotting what was written.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p creek
bin=./target/release/creek

# Where the command writes, and whether it writes at all (--quick only
# with --out).
out=docs/bench
quick=0
explicit_out=0
prev=
for arg in "$@"; do
  case $arg in
    --quick) quick=1 ;;
    --out=*) out=${arg#--out=}; explicit_out=1 ;;
  esac
  if [ "$prev" = --out ]; then
    out=$arg
    explicit_out=1
  fi
  prev=$arg
done

status=0
"$bin" bench paper "$@" || status=$?

if [ "$quick" = 1 ] && [ "$explicit_out" = 0 ]; then
  exit "$status"
fi
points=$out/paper.jsonl
if [ ! -s "$points" ]; then
  echo "bench-paper.sh: no points in $points, nothing to plot" >&2
  exit "$status"
fi
series=creek:weak_tentative,creek:strong_stable,archie:response,smr:response,bayou:response
for label in $(grep -o '"label":"[a-z0-9]*"' "$points" | sort -u | sed 's/.*:"\(.*\)"/\1/'); do
  case $label in
    fig1) title="TPC-C, Figure 1 setting: 5 warehouses, Payment strong" ;;
    wh1) title="TPC-C, 1 warehouse" ;;
    wh20) title="TPC-C, 20 warehouses" ;;
    strong10) title="TPC-C, 10% strong transactions" ;;
    strong50) title="TPC-C, 50% strong transactions" ;;
    long5) title="TPC-C, 5x longer transactions" ;;
    *) title="TPC-C, $label" ;;
  esac
  scripts/plot.sh --label "$label" --series "$series" \
    --title "$title (simulator, 5 x 16 cores)" --out "$out/paper-$label.png" "$points"
done
exit "$status"
