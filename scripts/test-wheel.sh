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
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  echo "test-wheel: $BUILD_DIR is not a configured build (run bash scripts/setup.sh --build first)" >&2
  exit 1
fi
rm -rf "$WHEELHOUSE"
mkdir -p "$WHEELHOUSE/raw"

# scikit-build-core configures BUILD_DIR with its own cache entries (the
# install prefix of a temporary wheel directory, its Python, SKBUILD_*):
# the developer's configuration is put back afterwards and CMake re-run, so
# the next build is what it was (nothing recompiles). Under the build
# directory's lock, as scripts/ninja-locked.sh takes it.
t0=$(date +%s)
exec 9>"$BUILD_DIR/.ninja.lock"
flock 9
cp "$BUILD_DIR/CMakeCache.txt" "$WHEELHOUSE/CMakeCache.txt.saved"
restore() {
  cp "$WHEELHOUSE/CMakeCache.txt.saved" "$BUILD_DIR/CMakeCache.txt"
  cmake "$BUILD_DIR" > "$WHEELHOUSE/reconfigure.log" 2>&1 ||
    { echo "test-wheel: re-running CMake on $BUILD_DIR failed (see $WHEELHOUSE/reconfigure.log)" >&2; return 1; }
}
set +e
"$PYTHON" -m pip wheel -q --no-deps --no-build-isolation -w "$WHEELHOUSE/raw" \
  -Cbuild-dir="$BUILD_DIR" "$ROOT"
rc=$?
set -e
restore
flock -u 9
[ "$rc" -eq 0 ] || exit "$rc"
"$PYTHON" -m auditwheel repair -w "$WHEELHOUSE" "$WHEELHOUSE"/raw/llmc-*.whl
WHEEL="$(ls "$WHEELHOUSE"/llmc-*.whl)"
echo "llmc wheel: $WHEEL ($(du -h "$WHEEL" | cut -f1), built in $(( $(date +%s) - t0 )) s)"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
"$PYTHON" -m venv --system-site-packages "$WORK/venv"
"$WORK/venv/bin/python" -m pip install -q --no-deps --no-index "$WHEEL"
cd "$WORK"
env -u LLMC_LIB -u PYTHONPATH "$WORK/venv/bin/python" "$ROOT/test/wheel/check_installed.py"
