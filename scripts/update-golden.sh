#!/usr/bin/env bash
# Rewrites the golden executables (test/golden/*.dump) from the current
# build: every configuration of test/golden/MANIFEST, or those whose name
# matches REGEX. Prints, per changed configuration, the launches, kernels,
# GEMMs and arena bytes before and after; the commit that changes a golden
# file must say why it changed and that none of those grew (issue 15).
#   bash scripts/update-golden.sh [REGEX]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
bash scripts/ninja-locked.sh llmc-compile llmc-run
exec "${PYTHON:-python3}" scripts/golden.py --bin "$BUILD_DIR/bin" --update \
  ${1:+--filter "$1"}
