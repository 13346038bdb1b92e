#!/usr/bin/env bash
# Installs the stripped tools, libllmc.so, test binaries and examples into
# dist/ (ignored by git) for carrying to the GPU machine (see GPU-MACHINE.md).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
ninja -C "$BUILD_DIR" -j"$(nproc)"
rm -rf dist
cmake --install "$BUILD_DIR" --prefix dist --strip >/dev/null
for t in llmc-runtime-tests llmc-kernel-tests llmc-compiler-tests; do
  if [ -x "$BUILD_DIR/bin/$t" ]; then
    cp "$BUILD_DIR/bin/$t" dist/bin/ && strip dist/bin/$t
  fi
done
du -sh dist
