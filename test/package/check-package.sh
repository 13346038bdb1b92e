#!/usr/bin/env bash
# The installed C++ package, used as a user's project would (ctest
# 'package'): `cmake --install` into a fresh prefix, then
#  0. every installed header compiles on its own (Abseil from the system);
#  1. examples/embed configured on its own with find_package(LLMC) against
#     that prefix, built, and run on the tiny LLaMA block (without a GPU it
#     compiles and says "compiled only");
#  2. a C program built with `pkg-config --cflags --libs llmc` that prints
#     llmc_version(), which must be the project's version.
#
#   check-package.sh BUILD_DIR SOURCE_DIR VERSION [SANITIZE_FLAGS]
set -euo pipefail
build=$1 src=$2 version=$3 sanitize=${4:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" > "$work/install.log"
for f in include/llmc/Compiler.h include/llmc/llmc_c.h include/llmc/runtime/Session.h \
         lib/libllmc.so lib/cmake/LLMC/LLMCConfig.cmake lib/cmake/LLMC/LLMCConfigVersion.cmake \
         lib/pkgconfig/llmc.pc; do
  [[ -f $prefix/$f ]] || { echo "FAIL: $f is not installed"; exit 1; }
done

# 0. Every installed header compiles on its own (C++17; llmc_c.h also as C).
while IFS= read -r h; do
  rel=${h#"$prefix/include/"}
  echo "#include <$rel>" > "$work/one.cpp"
  c++ -std=c++17 -fsyntax-only -I"$prefix/include" "$work/one.cpp" ||
    { echo "FAIL: $rel does not compile on its own"; exit 1; }
done < <(find "$prefix/include/llmc" -name '*.h')
echo '#include <llmc/llmc_c.h>' > "$work/one.c"
cc -std=c99 -fsyntax-only -I"$prefix/include" "$work/one.c" || { echo "FAIL: llmc_c.h is not C"; exit 1; }

# 1. find_package(LLMC) from an out-of-tree project.
flags=()
[[ -n $sanitize ]] && flags=(-DCMAKE_CXX_FLAGS="$sanitize" -DCMAKE_EXE_LINKER_FLAGS="$sanitize")
cmake -S "$src/examples/embed" -B "$work/embed" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_BUILD_TYPE=Release "${flags[@]}" > "$work/configure.log" ||
  { cat "$work/configure.log"; exit 1; }
cmake --build "$work/embed" > "$work/build.log" || { cat "$work/build.log"; exit 1; }
out=$("$work/embed/llmc-embed-example" "$prefix/share/llmc/examples/tiny_llama_block.mlir" 7)
echo "$out"
grep -qE "compiled only|checksum" <<< "$out" || { echo "FAIL: the embed example did not run"; exit 1; }

# 2. pkg-config for the C API.
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
[[ $(pkg-config --modversion llmc) == "$version" ]] ||
  { echo "FAIL: llmc.pc says $(pkg-config --modversion llmc), expected $version"; exit 1; }
# shellcheck disable=SC2046
cc $sanitize "$src/test/package/version.c" $(pkg-config --cflags --libs llmc) \
   -Wl,-rpath,"$prefix/lib" -o "$work/version"
got=$("$work/version")
[[ $got == "$version" ]] || { echo "FAIL: llmc_version() is '$got', expected $version"; exit 1; }
echo "package OK: find_package(LLMC) and pkg-config llmc $got"
