#!/usr/bin/env bash
# Runs every fuzz target of fuzz/ (cargo-fuzz, libFuzzer, nightly toolchain)
# for N seconds each, one after the other: scripts/fuzz.sh [--seconds N]
# [--dev] [TARGET...]. --dev builds the targets unoptimised (a smoke run:
# the optimised build takes 9 minutes on two cores, one codegen unit).
# Installs cargo-fuzz if missing. Exits non-zero on
# the first crash; libFuzzer leaves the input under
# fuzz/artifacts/TARGET/ and `cargo +nightly fuzz run TARGET FILE` replays
# it. The corpus grows in fuzz/corpus/TARGET/ (not committed); inputs that
# once crashed are kept in fuzz/regressions/TARGET/ and replay first.
# docs/security.md, "Fuzzing", records the long run.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds=60
targets=()
build=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --dev) build+=(--dev); shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
dir=()
[ -z "${FUZZ_TARGET_DIR:-}" ] || dir=(--target-dir "$FUZZ_TARGET_DIR")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(cargo +nightly fuzz list)
cargo +nightly fuzz build "${build[@]}" "${dir[@]}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  # Inputs that once crashed (fuzz/regressions/TARGET/) replay first.
  if compgen -G "regressions/$t/*" >/dev/null; then
    if ! cargo +nightly fuzz run "${build[@]}" "${dir[@]}" "$t" regressions/"$t"/* >"$log" 2>&1; then
      tail -n 60 "$log" >&2
      echo "fuzz $t: a kept regression input crashes again (fuzz/regressions/$t)" >&2
      exit 1
    fi
  fi
  # -rss_limit_mb: a decoder whose memory grows past its input's size fails.
  if ! cargo +nightly fuzz run "${build[@]}" "${dir[@]}" "$t" -- -max_total_time="$seconds" \
      -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    echo "fuzz $t: FAILED; the input is in fuzz/artifacts/$t" >&2
    exit 1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  echo "fuzz $t: ${runs:-?} inputs in ${seconds}s, no crash"
done
