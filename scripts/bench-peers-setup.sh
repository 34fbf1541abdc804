#!/usr/bin/env bash
# Installs what `creek bench peers` needs beyond the default build
# (docs/bench/peers.md, docs/operations.md "creek bench peers"):
#   - PostgreSQL and Redis servers, from Debian's packages (apt-get, with
#     sudo when not root);
#   - etcd, built from its Go module and cached (scripts/lib/etcd-build.sh,
#     shared with scripts/bench-etcd.sh);
#   - a `protoc` for the build of the `etcd-client` crate (feature `peers`):
#     the one on PATH, else the workspace's vendored one (protoc-bin-vendored).
#     A protoc of version 3.x is exported as PROTOC; a newer one (the vendored
#     libprotoc is 30+) is put first on PATH instead and PROTOC unset:
#     `raft-proto`'s build script (protobuf-build 0.14) panics on a PROTOC it
#     cannot use ("PROTOC version not usable") but passes over a `protoc` on
#     PATH it cannot use and takes its bundled one, while etcd-client's
#     build (prost-build) takes either.
# Prints on stdout only `export`/`unset` lines for the build and the
# command, so
#
#   eval "$(scripts/bench-peers-setup.sh)"
#   cargo run --release -p creek --features peers -- bench peers
#
# Progress and errors go to stderr. Running it again only checks.
# Environment: ETCD_VERSION, ETCD_BENCH_CACHE, ETCD_SRC (see the helper).
# `--protoc-only` finds the protoc alone (what CI does before it builds
# the feature in a clean target directory; it runs no peer).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
protoc_only=false
[[ ${1:-} == --protoc-only ]] && protoc_only=true

log() { echo "bench-peers-setup: $*" >&2; }
die() { log "$*" && exit 1; }

# ------------------------------------------------------ Debian packages --
apt_install() { # $@ = packages
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null ||
      die "installing $* needs root: run 'apt-get install $*' as root (no sudo here), then run this again"
    sudo -n true 2>/dev/null ||
      die "installing $* needs root: run 'sudo apt-get install $*' (sudo asks for a password), then run this again"
    sudo=(sudo -n)
  fi
  command -v apt-get >/dev/null ||
    die "no apt-get here: install $* with this system's package manager, then run this again"
  log "installing $* with apt-get"
  "${sudo[@]}" apt-get update -qq >&2 || die "apt-get update failed"
  # The packages' own services are not wanted: the benchmark starts its own
  # servers on free ports (where no init system runs, starting fails harmlessly).
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "$@" >&2 ||
    die "apt-get install $* failed"
}

# The newest PostgreSQL server's bin directory (Debian keeps it off PATH).
pg_bindir() {
  if [[ -n ${CREEK_BENCH_PG_BIN:-} && -x $CREEK_BENCH_PG_BIN/initdb ]]; then
    echo "$CREEK_BENCH_PG_BIN"
    return
  fi
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [[ -n $d && -x $d/initdb ]]; then
    echo "$d"
  elif command -v initdb >/dev/null; then
    dirname "$(command -v initdb)"
  fi
}

if ! $protoc_only; then
  missing=()
  [[ -n $(pg_bindir) ]] || missing+=(postgresql)
  command -v redis-server >/dev/null || missing+=(redis-server)
  ((${#missing[@]} == 0)) || apt_install "${missing[@]}"
  PG_BIN=$(pg_bindir)
  [[ -n $PG_BIN ]] || die "no PostgreSQL server found after installing it (initdb)"
  for t in initdb postgres pg_basebackup; do
    [[ -x $PG_BIN/$t ]] || die "$PG_BIN/$t is missing"
  done
  REDIS=$(command -v redis-server) || die "no redis-server found after installing it"
  log "$("$PG_BIN/postgres" --version)"
  log "$("$REDIS" --version)"
  # PostgreSQL refuses to run as root: the benchmark then runs it as the
  # user the Debian package made.
  if [[ $(id -u) -eq 0 ]] && ! id postgres >/dev/null 2>&1; then
    die "running as root, and there is no user 'postgres' to run PostgreSQL as (the Debian package makes one)"
  fi

  # ----------------------------------------------------------------- etcd --
  # shellcheck source=lib/etcd-build.sh
  source "$ROOT/scripts/lib/etcd-build.sh"
  etcd_ensure_binaries etcd || die "building etcd $ETCD_VERSION failed"
  ETCD=$ETCD_BIN_DIR/etcd
  log "$("$ETCD" --version | tr '\n' ' ')"
fi

# ---------------------------------------------------------------- protoc --
# etcd-client generates its gRPC code at build time and asks for `protoc`.
if [[ -n ${PROTOC:-} && -x $PROTOC ]]; then
  protoc=$PROTOC
elif command -v protoc >/dev/null; then
  protoc=$(command -v protoc)
else
  # The workspace vendors protoc for creek-proto's build: find the copy
  # cargo downloaded for this platform (cargo metadata fetches it if need be).
  protoc=$(cd "$ROOT" && cargo metadata --format-version 1 2>/dev/null |
    python3 -c '
import json, os, platform, subprocess, sys
# this machine'"'"'s build first (protoc-bin-vendored spells aarch64 "aarch_64")
arch = platform.machine().replace("aarch64", "aarch_64")
found = [p for p in json.load(sys.stdin)["packages"] if p["name"].startswith("protoc-bin-vendored-")]
found.sort(key=lambda p: not p["name"].endswith("-" + arch))
for p in found:
    exe = os.path.join(os.path.dirname(p["manifest_path"]), "bin", "protoc")
    try:
        subprocess.run([exe, "--version"], check=True, capture_output=True)
    except Exception:
        continue
    print(exe)
    break
') || true
  [[ -n $protoc ]] || die "no protoc: neither on PATH nor vendored by the workspace (cargo metadata found none that runs); install Debian's protobuf-compiler"
fi
version=$("$protoc" --version)
log "protoc: $protoc ($version)"

if [[ $version =~ ^libprotoc\ 3\. ]]; then
  printf 'export PROTOC=%q\n' "$protoc"
else
  printf 'unset PROTOC\n'
  printf 'export PATH=%q:"$PATH"\n' "$(dirname "$protoc")"
fi
$protoc_only && exit 0
printf 'export CREEK_BENCH_ETCD=%q\n' "$ETCD"
printf 'export CREEK_BENCH_PG_BIN=%q\n' "$PG_BIN"
printf 'export CREEK_BENCH_REDIS=%q\n' "$REDIS"
log "ready: cargo run --release -p creek --features peers -- bench peers"
