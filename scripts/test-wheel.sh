#!/usr/bin/env bash
# Builds the platform wheel from an existing build directory (nothing is
# compiled twice: scikit-build-core reuses BUILD_DIR), vendors the shared
# libraries libllmc.so needs beyond the C/C++ runtime (Abseil) with
# auditwheel, installs the wheel into a fresh virtual environment outside the
# checkout and runs test/wheel/check_installed.py there.
#
#   bash scripts/test-wheel.sh        # after scripts/setup.sh --build
#
# The environment sees the system's site-packages (torch, numpy) but not the
# checkout: the check asserts llmc and libllmc.so are the wheel's.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
BUILD_DIR="$(realpath "${BUILD_DIR:-build}")"
PYTHON="${PYTHON:-python3}"
WHEELHOUSE="$BUILD_DIR/wheelhouse"
rm -rf "$WHEELHOUSE"
mkdir -p "$WHEELHOUSE/raw"

t0=$(date +%s)
"$PYTHON" -m pip wheel -q --no-deps --no-build-isolation -w "$WHEELHOUSE/raw" \
  -Cbuild-dir="$BUILD_DIR" "$ROOT"
"$PYTHON" -m auditwheel repair -w "$WHEELHOUSE" "$WHEELHOUSE"/raw/llmc-*.whl
WHEEL="$(ls "$WHEELHOUSE"/llmc-*.whl)"
echo "llmc wheel: $WHEEL ($(du -h "$WHEEL" | cut -f1), built in $(( $(date +%s) - t0 )) s)"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
"$PYTHON" -m venv --system-site-packages "$WORK/venv"
"$WORK/venv/bin/python" -m pip install -q --no-deps --no-index "$WHEEL"
cd "$WORK"
env -u LLMC_LIB -u PYTHONPATH "$WORK/venv/bin/python" "$ROOT/test/wheel/check_installed.py"
