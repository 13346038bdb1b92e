// Every tool's --version names llmc's version (CMake's project VERSION)
// and the LLVM/MLIR it was built with.
// RUN: llmc-opt --version | FileCheck %s
// RUN: llmc-compile --version | FileCheck %s
// RUN: llmc-run --version | FileCheck %s
// CHECK: llmc version {{[0-9]+\.[0-9]+\.[0-9]+$}}
// CHECK-NEXT: built with LLVM/MLIR {{[0-9]+}}
