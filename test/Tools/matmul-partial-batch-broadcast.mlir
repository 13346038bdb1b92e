// A batched matmul whose batch dimensions broadcast only in part (the
// verifier and the reference accept NumPy broadcasting) is refused by the
// CUDA backend with both batch shapes and what it takes, not a bare phrase.
// RUN: not llmc-compile %s --emit=executable-dump 2>&1 | FileCheck %s
// CHECK: 'llm.matmul'{{.*}}batch dimensions [2,3] (lhs) and [3] (rhs) that broadcast only in part; the CUDA backend's GEMMs take equal batch counts, or a batch count of 1 on one side
func.func @f(%a: tensor<2x3x3x5xbf16>, %b: tensor<3x5x7xbf16>) -> tensor<2x3x3x7xbf16> {
  %0 = llm.matmul %a, %b : tensor<2x3x3x5xbf16>, tensor<3x5x7xbf16> -> tensor<2x3x3x7xbf16>
  return %0 : tensor<2x3x3x7xbf16>
}
