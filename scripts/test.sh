#!/usr/bin/env bash
# Runs every llmc test that needs no GPU: lit + FileCheck, GoogleTest (through
# ctest), and pytest for the Python package. Installs missing packages and
# builds first (incrementally).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --build
BUILD_DIR="${BUILD_DIR:-build}"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)"
# Python package: import, partition, compile (execution tests need a GPU and skip).
# pytest's exit code 5 ("no tests collected") is a failure here: there must be tests.
set +e
"${PYTHON:-python3}" -m pytest -q -p no:cacheprovider test/python
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "llmc test: pytest collected no tests in test/python" >&2
  exit 1
fi
exit "$rc"
