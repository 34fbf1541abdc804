#!/usr/bin/env bash
# Plot benchmark results (JSON Lines from `creek bench … --json`) as a PNG
# like the paper's Figure 1. Makes a venv in target/plotenv once (reused
# afterwards), installs scripts/plot-requirements.txt, then runs
# scripts/plot-bench.py with all arguments, e.g.
#   scripts/plot.sh --stat p99 --out /tmp/tpcc.png results/tpcc.jsonl
# or, with `peers` first, scripts/plot-peers.py (`creek bench peers` runs):
#   scripts/plot.sh peers --out docs/bench/peers.png docs/bench/peers.jsonl
# or, with `shards` first, scripts/plot-shards.py (throughput against
# shards of `creek bench ycsb|tpcc --shards` sweeps):
#   scripts/plot.sh shards --out docs/bench/shards.png ycsb.jsonl tpcc.jsonl
# Paths are taken relative to where you run it from.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

venv=$root/target/plotenv
python=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || { echo "plot.sh: needs Python >= 3.10 ($python is $("$python" --version 2>&1))" >&2; exit 1; }
  "$python" -m venv "$venv"
fi
"$venv/bin/pip" --disable-pip-version-check -q install -r "$root/scripts/plot-requirements.txt"
if [ "${1:-}" = shards ]; then
  shift
  exec "$venv/bin/python" "$root/scripts/plot-shards.py" "$@"
fi
if [ "${1:-}" = peers ]; then
  shift
  exec "$venv/bin/python" "$root/scripts/plot-peers.py" "$@"
fi
exec "$venv/bin/python" "$root/scripts/plot-bench.py" "$@"
