// Reductions the CUDA lowering does not take are errors naming the op: the
// reduced dimensions must be adjacent once dimensions of size 1 are dropped
// (test/cases/reduce_leading_dims.mlir has the forms it takes).
// RUN: not llmc-compile %s --emit=exec 2>&1 | FileCheck %s
// CHECK: error: cuda backend: 'llm.reduce_sum' at loc("{{.*}}reductions.mlir":7:8): a reduction over dimensions that are not adjacent (apart from dimensions of size 1); reduce one block of adjacent dimensions at a time
func.func @non_adjacent(%x: tensor<4x5x6xf32>) -> tensor<5xf32> {
  %s = llm.reduce_sum %x [0, 2] : tensor<4x5x6xf32>
  return %s : tensor<5xf32>
}
