// RUN: llmc-opt --split-input-file --llmc-raise %s | FileCheck %s

// The backward's gradient of k or v around attention: the tangent plus the
// attention gradient transposed to [B, H, S, D], then transposed back for the
// projection's GEMM. The transpose moves into the add, where it folds with the
// one it meets: the add reads the tangent strided and writes [B, S, H, D].
// CHECK-LABEL: func.func @add_then_head_transpose
// CHECK-SAME: (%[[T:.+]]: tensor<2x4x8x16xbf16>, %[[D:.+]]: tensor<2x8x4x16xbf16>)
// CHECK: %[[TT:.+]] = llm.transpose %[[T]] [0, 2, 1, 3] : tensor<2x4x8x16xbf16>
// CHECK: %[[A:.+]] = llm.add %[[TT]], %[[D]] : tensor<2x8x4x16xbf16>
// CHECK-NEXT: return %[[A]]
func.func @add_then_head_transpose(%t: tensor<2x4x8x16xbf16>, %d: tensor<2x8x4x16xbf16>) -> tensor<2x8x4x16xbf16> {
  %dt = llm.transpose %d [0, 2, 1, 3] : tensor<2x8x4x16xbf16>
  %a = llm.add %t, %dt : tensor<2x4x8x16xbf16>
  %r = llm.transpose %a [0, 2, 1, 3] : tensor<2x4x8x16xbf16>
  return %r : tensor<2x8x4x16xbf16>
}

// -----

// Through a chain: each op's only use is the next; the whole chain computes
// in the transposed layout.
// CHECK-LABEL: func.func @chain
// CHECK: %[[TX:.+]] = llm.transpose %arg0 [1, 0, 2] : tensor<4x6x8xf32>
// CHECK: %[[E:.+]] = llm.exp %[[TX]] : tensor<6x4x8xf32>
// CHECK: %[[N:.+]] = llm.neg %[[E]] : tensor<6x4x8xf32>
// CHECK-NEXT: return %[[N]]
func.func @chain(%x: tensor<4x6x8xf32>) -> tensor<6x4x8xf32> {
  %e = llm.exp %x : tensor<4x6x8xf32>
  %n = llm.neg %e : tensor<4x6x8xf32>
  %r = llm.transpose %n [1, 0, 2] : tensor<4x6x8xf32>
  return %r : tensor<6x4x8xf32>
}

// -----

// Not sunk: the permutation moves the innermost dimension (the inputs would
// be read with a non-unit innermost stride), and an elementwise result with
// another use (it would be computed twice).
// CHECK-LABEL: func.func @not_sunk
// CHECK: %[[E:.+]] = llm.exp %arg0 : tensor<4x8xf32>
// CHECK: llm.transpose %[[E]] [1, 0] : tensor<4x8xf32>
// CHECK: %[[N:.+]] = llm.neg %arg1 : tensor<2x4x8xf32>
// CHECK: llm.transpose %[[N]] [1, 0, 2] : tensor<2x4x8xf32>
func.func @not_sunk(%x: tensor<4x8xf32>, %y: tensor<2x4x8xf32>) -> (tensor<8x4xf32>, tensor<4x2x8xf32>, tensor<2x4x8xf32>) {
  %e = llm.exp %x : tensor<4x8xf32>
  %t = llm.transpose %e [1, 0] : tensor<4x8xf32>
  %n = llm.neg %y : tensor<2x4x8xf32>
  %u = llm.transpose %n [1, 0, 2] : tensor<2x4x8xf32>
  return %t, %u, %n : tensor<8x4xf32>, tensor<4x2x8xf32>, tensor<2x4x8xf32>
}

// -----

// A splat operand becomes a splat of the transposed shape (an immediate of the
// fused kernel, not a stored constant read through a transpose), and a cast
// (operand and result of different element types) moves like any other op.
// CHECK-LABEL: func.func @splat_and_cast
// CHECK-DAG: %[[C:.+]] = llm.constant dense<2.000000e+00> : tensor<3x2x8xf32>
// CHECK-DAG: %[[TX:.+]] = llm.transpose %arg0 [1, 0, 2] : tensor<2x3x8xbf16>
// CHECK: %[[F:.+]] = llm.cast %[[TX]] : tensor<3x2x8xbf16> to tensor<3x2x8xf32>
// CHECK: %[[M:.+]] = llm.mul %[[F]], %[[C]] : tensor<3x2x8xf32>
// CHECK-NOT: llm.transpose
// CHECK: return %[[M]]
func.func @splat_and_cast(%x: tensor<2x3x8xbf16>) -> tensor<3x2x8xf32> {
  %f = llm.cast %x : tensor<2x3x8xbf16> to tensor<2x3x8xf32>
  %c = llm.constant dense<2.0> : tensor<2x3x8xf32>
  %m = llm.mul %f, %c : tensor<2x3x8xf32>
  %r = llm.transpose %m [1, 0, 2] : tensor<2x3x8xf32>
  return %r : tensor<3x2x8xf32>
}
