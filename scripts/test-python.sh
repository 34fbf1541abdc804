#!/usr/bin/env bash
# The Python client's tests (clients/python). Makes a venv in target/pyenv
# once (reused afterwards), installs the package from this tree the way a
# user would (`pip install ./clients/python`, which generates the gRPC stubs
# from proto/creek.proto) with the extras of its store bindings (redis,
# postgres) and pytest, then runs the tests against real clusters of
# target/debug/creek ($CREEK_BIN overrides; built if missing). The binding
# tests also start throwaway redis-server and PostgreSQL servers; they are
# skipped, saying why, if those are not installed, and fail instead with
# CREEK_TEST_STORES=required (as in CI).
# Extra arguments go to pytest, e.g. `scripts/test-python.sh -k speculation`.
# Needs Python >= 3.10 with its venv module (Debian/Ubuntu: python3-venv),
# and PyPI (or a mirror) for grpcio, grpcio-tools, protobuf, redis, psycopg
# and pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/pyenv
python=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || { echo "test-python.sh: needs Python >= 3.10 ($python is $("$python" --version 2>&1))" >&2; exit 1; }
  # Without python3-venv, Debian's venv fails after making bin/python: remove
  # the half-made venv so the next run does not take it for a good one.
  "$python" -m venv "$venv" || {
    rm -rf "$venv"
    echo "test-python.sh: '$python -m venv' failed; on Debian/Ubuntu install python3-venv" >&2
    exit 1
  }
fi
pip=("$venv/bin/pip" --disable-pip-version-check -q)
# The build writes nothing into clients/python (setup.py keeps its scratch
# files in a temporary directory), so every install starts from a clean slate.
"${pip[@]}" install './clients/python[redis,postgres]' 'pytest>=7'

bin=${CREEK_BIN:-target/debug/creek}
if [ ! -x "$bin" ]; then
  cargo build -p creek
fi
CREEK_BIN=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
export CREEK_BIN
# Leave no test run's files in the source tree either: no bytecode next to
# the tests, pytest's cache under target/.
export PYTHONDONTWRITEBYTECODE=1
exec "$venv/bin/python" -m pytest -q -o cache_dir="$PWD/target/pytest-cache" clients/python/tests "$@"
