// Constant data stored in an executable is bounded by
// LowerOptions::max_constant_bytes (1 GiB by default), checked before the
// bytes are built: a 2^40-element splat returned by a function made
// lowering build a 4 TiB string and abort ("LLVM ERROR: out of memory").
// RUN: not llmc-compile %s --fn=huge_splat 2>&1 | FileCheck %s --check-prefix=HUGE
// HUGE: llmc-compile: error: cuda backend: 'arith.constant' at {{.*}}constant-budget.mlir{{.*}}: a constant of 4398046511104 bytes (tensor<1048576x1048576xf32>) takes the executable's constant data to 4398046511104 bytes, more than the limit of 1073741824 bytes (LowerOptions::max_constant_bytes); pass large tensors as function arguments
func.func @huge_splat() -> tensor<1048576x1048576xf32> {
  %c = arith.constant dense<1.0> : tensor<1048576x1048576xf32>
  return %c : tensor<1048576x1048576xf32>
}

// A GEMM operand is read from memory, so its constant is data too.
// RUN: not llmc-compile %s --fn=gemm_of_ones 2>&1 | FileCheck %s --check-prefix=GEMM
// GEMM: llmc-compile: error: cuda backend: 'llm.constant' at {{.*}}: a constant of 8589934592 bytes (tensor<1048576x4096xbf16>) takes the executable's constant data to 8589934592 bytes, more than the limit of 1073741824 bytes
func.func @gemm_of_ones(%x: tensor<8x1048576xbf16>) -> tensor<8x4096xbf16> {
  %w = llm.constant dense<1.0> : tensor<1048576x4096xbf16>
  %y = llm.matmul %x, %w : tensor<8x1048576xbf16>, tensor<1048576x4096xbf16> -> tensor<8x4096xbf16>
  return %y : tensor<8x4096xbf16>
}

// The same splat read only by an elementwise kernel is an immediate of the
// kernel: no constant data at all.
// RUN: llmc-compile %s --fn=add_huge_splat --arch=sm_90a --print-stats | FileCheck %s --check-prefix=IMM
// IMM: kernel launches: 1 (1 distinct kernels)
func.func @add_huge_splat(%x: tensor<1048576x1048576xf32>) -> tensor<1048576x1048576xf32> {
  %c = arith.constant dense<1.0> : tensor<1048576x1048576xf32>
  %y = llm.add %x, %c : tensor<1048576x1048576xf32>
  return %y : tensor<1048576x1048576xf32>
}
