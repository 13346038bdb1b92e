#!/usr/bin/env bash
# Runs every llmc test that needs no GPU: lit + FileCheck, GoogleTest (through
# ctest), and pytest for the Python package. Installs missing packages and
# builds first (incrementally).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --build
BUILD_DIR="${BUILD_DIR:-build}"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)"
