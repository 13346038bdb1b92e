#!/usr/bin/env bash
# Serializes ninja runs in a shared build directory (several engineers build
# in one tree): flock on build/.ninja.lock, then ninja with the given args.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
mkdir -p "$BUILD_DIR"
exec flock "$BUILD_DIR/.ninja.lock" ninja -C "$BUILD_DIR" "$@"
