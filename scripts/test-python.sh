#!/usr/bin/env bash
# The Python client's tests (clients/python). Makes a venv in target/pyenv
# once (reused afterwards), installs the package from this tree the way a
# user would (`pip install ./clients/python`, which generates the gRPC stubs
# from proto/creek.proto) and pytest, then runs the tests against real
# clusters of target/debug/creek ($CREEK_BIN overrides; built if missing).
# Extra arguments go to pytest, e.g. `scripts/test-python.sh -k speculation`.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/pyenv
python=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || { echo "test-python.sh: needs Python >= 3.10 ($python is $("$python" --version 2>&1))" >&2; exit 1; }
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/pip" --disable-pip-version-check -q)
# setuptools reuses build/ between builds; start clean so nothing stale is packaged.
rm -rf clients/python/build
"${pip[@]}" install ./clients/python 'pytest>=7'

bin=${CREEK_BIN:-target/debug/creek}
if [ ! -x "$bin" ]; then
  cargo build -p creek
fi
CREEK_BIN=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
export CREEK_BIN
exec "$venv/bin/python" -m pytest -q clients/python/tests "$@"
