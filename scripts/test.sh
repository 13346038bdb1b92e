#!/usr/bin/env bash
# Runs every llmc test that needs no GPU: lit + FileCheck, GoogleTest (through
# ctest), a fixed-seed fuzz run of the tools, and pytest for the Python
# package, and the platform wheel installed into a fresh virtual environment
# (scripts/test-wheel.sh); with LLMC_TEST_SANITIZERS=1 (as in CI) also the ASan + UBSan build
# and its tests. Installs missing packages and builds first (incrementally).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --build
BUILD_DIR="${BUILD_DIR:-build}"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)"
# Mutation fuzzing of llmc-opt, llmc-run --backend=ref and llmc-compile
# (scripts/fuzz.py, fixed seed): fails on any crash, internal error,
# sanitizer report, timeout or out-of-memory kill; failing inputs are
# minimized into $BUILD_DIR/fuzz.
"${PYTHON:-python3}" scripts/fuzz.py --tools "$BUILD_DIR/bin" \
  --executions "${LLMC_FUZZ_EXECUTIONS:-3000}" --jobs "$(nproc)" \
  --out "$BUILD_DIR/fuzz" --progress 60
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
[ "$rc" -eq 0 ] || exit "$rc"
# The platform wheel, installed into a fresh environment outside the checkout.
bash scripts/test-wheel.sh
# CI (.ci/run) also builds and tests under ASan + UBSan (build-asan, a few
# tens of minutes on 2 cores); locally: LLMC_TEST_SANITIZERS=1.
if [ "${LLMC_TEST_SANITIZERS:-0}" = 1 ]; then
  bash scripts/test-sanitizers.sh
fi
