# Builds etcd (and its tools/benchmark) from source, cached; sourced by
# scripts/bench-etcd.sh and scripts/bench-peers-setup.sh, not run.
#
#   source scripts/lib/etcd-build.sh
#   etcd_ensure_binaries etcd benchmark   # the binaries missing are built
#   "$ETCD_BIN_DIR/etcd" --version
#
# Environment (read when sourced):
#   ETCD_VERSION        etcd release tag to build (default v3.6.14)
#   ETCD_BENCH_CACHE    where built binaries are kept
#                       (default ${XDG_CACHE_HOME:-$HOME/.cache}/creek-bench-etcd);
#                       they land in $ETCD_BENCH_CACHE/$ETCD_VERSION/
#   ETCD_SRC            optional etcd source: a git dir / clone containing the
#                       tag, or a plain source tree already at the tag. Without
#                       it the build tries `git clone` from GitHub and falls
#                       back to the Go module proxy (module zips).
# Progress goes to stderr; nothing is printed on stdout. A failed build
# returns non-zero (also where the caller has no `set -e`).

ETCD_VERSION=${ETCD_VERSION:-v3.6.14}
ETCD_BENCH_CACHE=${ETCD_BENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/creek-bench-etcd}
ETCD_BIN_DIR=$ETCD_BENCH_CACHE/$ETCD_VERSION

etcd_build_log() { echo "etcd-build: $*" >&2; }

# The go build of one binary: $1 = name (etcd | benchmark), $2 = ldflags,
# $3 = package (a directory inside the source tree, or a module path).
etcd_build_one() {
  case $1 in
    etcd) go build -trimpath -buildvcs=false -ldflags "$2" -o "$ETCD_BIN_DIR/etcd" "$3" ;;
    benchmark) go build -trimpath -buildvcs=false -o "$ETCD_BIN_DIR/benchmark" "$3" ;;
    *) etcd_build_log "unknown binary $1" && return 1 ;;
  esac
}

etcd_build_from_tree() { # $1 = source tree at $ETCD_VERSION, $2 = git sha, $3… = binaries
  local src=$1 sha=$2 b
  shift 2
  local ldf="-X go.etcd.io/etcd/api/v3/version.GitSHA=${sha:0:7}"
  etcd_build_log "building etcd $ETCD_VERSION ($sha) from $src: $* (a few minutes on 2 cores)"
  for b in "$@"; do
    case $b in
      etcd) (cd "$src/server" && etcd_build_one etcd "$ldf" .) || return 1 ;;
      benchmark) (cd "$src" && etcd_build_one benchmark "" ./tools/benchmark) || return 1 ;;
    esac
  done
}

etcd_build_from_proxy() { # $1 = scratch directory, $2… = binaries
  # etcd's own go.mod files use local replace directives, so
  # `go install …@version` fails; a throwaway main module that requires the
  # published modules ignores those replaces and builds the same packages.
  local w=$1/proxy-build b
  shift
  mkdir -p "$w"
  (
    cd "$w" || exit 1
    go mod init creek-bench-etcd-build >/dev/null 2>&1
    go get "go.etcd.io/etcd/v3@$ETCD_VERSION" "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2 || exit 1
    local sha
    sha=$(go mod download -json "go.etcd.io/etcd/v3@$ETCD_VERSION" |
      python3 -c 'import json,sys; print(json.load(sys.stdin).get("Origin",{}).get("Hash","unknown"))')
    local ldf="-X go.etcd.io/etcd/api/v3/version.GitSHA=${sha:0:7}"
    etcd_build_log "building etcd $ETCD_VERSION ($sha) from Go module proxy zips: $* (a few minutes on 2 cores)"
    for b in "$@"; do
      case $b in
        etcd) etcd_build_one etcd "$ldf" go.etcd.io/etcd/server/v3 || exit 1 ;;
        benchmark) etcd_build_one benchmark "" go.etcd.io/etcd/v3/tools/benchmark || exit 1 ;;
      esac
    done
  )
}

# Build those of the named binaries (etcd, benchmark; default both) that
# are not in $ETCD_BIN_DIR yet.
etcd_ensure_binaries() {
  local want=("$@") missing=() b
  ((${#want[@]})) || want=(etcd benchmark)
  for b in "${want[@]}"; do [[ -x $ETCD_BIN_DIR/$b ]] || missing+=("$b"); done
  ((${#missing[@]})) || return 0
  if ! command -v go >/dev/null; then
    etcd_build_log "building etcd needs Go (https://go.dev/doc/install, or Debian's golang-go)"
    return 1
  fi
  mkdir -p "$ETCD_BIN_DIR"
  local tmp rc=0
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/creek-bench-etcd-build.XXXXXX")
  if [[ -n ${ETCD_SRC:-} ]] && git --git-dir="$ETCD_SRC" rev-parse -q --verify "$ETCD_VERSION^{commit}" >/dev/null 2>&1; then
    mkdir "$tmp/src"
    git --git-dir="$ETCD_SRC" archive "$ETCD_VERSION" | tar -x -C "$tmp/src"
    etcd_build_from_tree "$tmp/src" "$(git --git-dir="$ETCD_SRC" rev-parse "$ETCD_VERSION^{commit}")" "${missing[@]}" || rc=$?
  elif [[ -n ${ETCD_SRC:-} ]] && git -C "$ETCD_SRC" rev-parse -q --verify "$ETCD_VERSION^{commit}" >/dev/null 2>&1; then
    mkdir "$tmp/src"
    git -C "$ETCD_SRC" archive "$ETCD_VERSION" | tar -x -C "$tmp/src"
    etcd_build_from_tree "$tmp/src" "$(git -C "$ETCD_SRC" rev-parse "$ETCD_VERSION^{commit}")" "${missing[@]}" || rc=$?
  elif [[ -n ${ETCD_SRC:-} && -f $ETCD_SRC/server/main.go ]]; then
    etcd_build_from_tree "$ETCD_SRC" unknown "${missing[@]}" || rc=$?
  elif GIT_TERMINAL_PROMPT=0 timeout 300 git clone -q --depth 1 --branch "$ETCD_VERSION" https://github.com/etcd-io/etcd.git "$tmp/src" 2>/dev/null; then
    etcd_build_from_tree "$tmp/src" "$(git -C "$tmp/src" rev-parse HEAD)" "${missing[@]}" || rc=$?
  else
    etcd_build_from_proxy "$tmp" "${missing[@]}" || rc=$?
  fi
  rm -rf "$tmp"
  return "$rc"
}
