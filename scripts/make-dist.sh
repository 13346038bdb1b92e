#!/usr/bin/env bash
# Installs the stripped tools, libllmc.so, test binaries and examples into
# dist/ (ignored by git) for carrying to the GPU machine (see GPU-MACHINE.md).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
bash scripts/ninja-locked.sh
rm -rf dist
cmake --install "$BUILD_DIR" --prefix dist --strip >/dev/null
for t in llmc-runtime-tests llmc-kernel-tests llmc-compiler-tests llmc-capi-tests; do
  if [ -x "$BUILD_DIR/bin/$t" ]; then
    cp "$BUILD_DIR/bin/$t" dist/bin/ && strip dist/bin/$t
  fi
done
# Abseil comes from Debian as shared libraries; the GPU machine has none, so
# ship the ones llmc links next to libllmc.so (found through its $ORIGIN rpath).
for f in dist/lib/libllmc.so dist/bin/*; do
  ldd "$f" 2>/dev/null | awk '/libabsl_/ {print $3}'
done | sort -u | xargs -r cp -L -t dist/lib/
rm -f dist/lib/*.a
# The commit the binaries come from (read by bench/run.py); "+dirty" when the
# tree had uncommitted changes.
{ git rev-parse HEAD 2>/dev/null || echo unknown; } | tr -d '\n' > dist/COMMIT
git diff --quiet HEAD 2>/dev/null || printf '+dirty' >> dist/COMMIT
du -sh dist
