// Elementwise kernels index strided reads through at most 8 dims. A view of
// higher rank runs over its collapsed index space (size-1 dims dropped,
// dims read as one run merged), and one that still needs more than 8 dims
// is an error naming the op; before, a rank-10 view returned by the
// function escaped lowering as an uncaught exception (terminate).
// RUN: llmc-compile %s --fn=rank10_view --arch=sm_90a --print-stats | FileCheck %s --check-prefix=VIEW
// VIEW: kernel launches: 1 (1 distinct kernels)
func.func @rank10_view(%x: tensor<120xf32>) -> tensor<120xf32> {
  %v = llm.reshape %x : tensor<120xf32> to tensor<2x1x3x1x2x2x1x1x5x1xf32>
  %t = llm.transpose %v [8, 0, 2, 4, 5, 1, 3, 6, 7, 9] : tensor<2x1x3x1x2x2x1x1x5x1xf32>
  %r = llm.reshape %t : tensor<5x2x3x2x2x1x1x1x1x1xf32> to tensor<120xf32>
  return %r : tensor<120xf32>
}

// RUN: not llmc-compile %s --fn=rank9_reversed --arch=sm_90a 2>&1 | FileCheck %s --check-prefix=REVERSED
// REVERSED: llmc-compile: error: cuda backend: 'llm.transpose' at loc("{{.*}}high-rank-views.mlir":[[# @LINE + 3]]:8): llmc::cuda kernel generator: elementwise: a strided or broadcast read over 9 dimensions (after merging size-1 and contiguous ones); 1 to 8 are supported
func.func @rank9_reversed(%x: tensor<512xf32>) -> tensor<512xf32> {
  %v = llm.reshape %x : tensor<512xf32> to tensor<2x2x2x2x2x2x2x2x2xf32>
  %t = llm.transpose %v [8, 7, 6, 5, 4, 3, 2, 1, 0] : tensor<2x2x2x2x2x2x2x2x2xf32>
  %r = llm.reshape %t : tensor<2x2x2x2x2x2x2x2x2xf32> to tensor<512xf32>
  return %r : tensor<512xf32>
}
