#!/usr/bin/env bash
# Build the documentation site (docs/, as laid out in mkdocs.yml) into
# target/site with MkDocs, failing on any broken internal link or anchor
# (`--strict`). Makes a venv in target/docsenv once (reused afterwards)
# with the pinned MkDocs from PyPI. Regenerates nothing: the CLI reference
# (docs/reference/cli.md) is `creek reference`'s output, and a test checks
# it is current. Open target/site/index.html, or serve the directory.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/docsenv
python=${PYTHON:-python3}
if [ ! -x "$venv/bin/mkdocs" ]; then
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "mkdocs==1.6.1"
fi
"$venv/bin/mkdocs" build --strict --clean --site-dir target/site
echo "docs-site.sh: the site is in target/site (index.html)"
