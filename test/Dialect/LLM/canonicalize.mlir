// RUN: llmc-opt %s --split-input-file --canonicalize | FileCheck %s

// CHECK-LABEL: func.func @mul_by_one
// CHECK-SAME: (%[[X:.+]]: tensor<4x8xbf16>)
// CHECK-NEXT: return %[[X]]
func.func @mul_by_one(%x: tensor<4x8xbf16>) -> tensor<4x8xbf16> {
  %one = llm.constant dense<1.0> : tensor<4x8xbf16>
  %0 = llm.mul %x, %one : tensor<4x8xbf16>
  return %0 : tensor<4x8xbf16>
}

// -----

// A broadcast splat works for dynamic shapes.
// CHECK-LABEL: func.func @one_times_dynamic
// CHECK-SAME: (%[[X:.+]]: tensor<?x8xf32>)
// CHECK-NEXT: return %[[X]]
func.func @one_times_dynamic(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %one = llm.constant dense<1.0> : tensor<8xf32>
  %b = llm.broadcast %one : tensor<8xf32> to tensor<?x8xf32>
  %0 = llm.mul %b, %x : tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

// CHECK-LABEL: func.func @add_zero
// CHECK-SAME: (%[[X:.+]]: tensor<4xi32>)
// CHECK-NEXT: return %[[X]]
func.func @add_zero(%x: tensor<4xi32>) -> tensor<4xi32> {
  %zero = llm.constant dense<0> : tensor<4xi32>
  %0 = llm.add %zero, %x : tensor<4xi32>
  return %0 : tensor<4xi32>
}

// -----

// CHECK-LABEL: func.func @sub_div_identity
// CHECK-SAME: (%[[X:.+]]: tensor<4xf32>)
// CHECK-NEXT: return %[[X]]
func.func @sub_div_identity(%x: tensor<4xf32>) -> tensor<4xf32> {
  %zero = llm.constant dense<0.0> : tensor<4xf32>
  %one = llm.constant dense<1.0> : tensor<4xf32>
  %0 = llm.sub %x, %zero : tensor<4xf32>
  %1 = llm.div %0, %one : tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// Negative: x * 2 and x + 1 stay.
// CHECK-LABEL: func.func @mul_by_two_kept
// CHECK: llm.mul
// CHECK: llm.add
func.func @mul_by_two_kept(%x: tensor<4xf32>) -> tensor<4xf32> {
  %two = llm.constant dense<2.0> : tensor<4xf32>
  %one = llm.constant dense<1.0> : tensor<4xf32>
  %0 = llm.mul %x, %two : tensor<4xf32>
  %1 = llm.add %0, %one : tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// Negative: x - 0 folds but 0 - x does not.
// CHECK-LABEL: func.func @zero_minus_x_kept
// CHECK: llm.sub
func.func @zero_minus_x_kept(%x: tensor<4xf32>) -> tensor<4xf32> {
  %zero = llm.constant dense<0.0> : tensor<4xf32>
  %0 = llm.sub %zero, %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// CHECK-LABEL: func.func @neg_neg
// CHECK-SAME: (%[[X:.+]]: tensor<4xf32>)
// CHECK-NEXT: return %[[X]]
func.func @neg_neg(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = llm.neg %x : tensor<4xf32>
  %1 = llm.neg %0 : tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// CHECK-LABEL: func.func @transpose_of_transpose
// CHECK-SAME: (%[[X:.+]]: tensor<2x3x4xf32>)
// CHECK-NEXT: %[[T:.+]] = llm.transpose %[[X]] [2, 0, 1] : tensor<2x3x4xf32>
// CHECK-NEXT: return %[[T]]
func.func @transpose_of_transpose(%x: tensor<2x3x4xf32>) -> tensor<4x2x3xf32> {
  %0 = llm.transpose %x [1, 0, 2] : tensor<2x3x4xf32>
  %1 = llm.transpose %0 [2, 1, 0] : tensor<3x2x4xf32>
  return %1 : tensor<4x2x3xf32>
}

// -----

// CHECK-LABEL: func.func @transpose_inverse
// CHECK-SAME: (%[[X:.+]]: tensor<1x?x32x128xbf16>)
// CHECK-NEXT: return %[[X]]
func.func @transpose_inverse(%x: tensor<1x?x32x128xbf16>) -> tensor<1x?x32x128xbf16> {
  %0 = llm.transpose %x [0, 2, 1, 3] : tensor<1x?x32x128xbf16>
  %1 = llm.transpose %0 [0, 2, 1, 3] : tensor<1x32x?x128xbf16>
  return %1 : tensor<1x?x32x128xbf16>
}

// -----

// CHECK-LABEL: func.func @reshape_chain
// CHECK-SAME: (%[[X:.+]]: tensor<?x4096xbf16>)
// CHECK-NEXT: %[[R:.+]] = llm.reshape %[[X]] : tensor<?x4096xbf16> to tensor<?x32x2x64xbf16>
// CHECK-NEXT: return %[[R]]
func.func @reshape_chain(%x: tensor<?x4096xbf16>) -> tensor<?x32x2x64xbf16> {
  %0 = llm.reshape %x : tensor<?x4096xbf16> to tensor<?x32x128xbf16>
  %1 = llm.reshape %0 : tensor<?x32x128xbf16> to tensor<?x32x2x64xbf16>
  return %1 : tensor<?x32x2x64xbf16>
}

// -----

// CHECK-LABEL: func.func @reshape_roundtrip
// CHECK-SAME: (%[[X:.+]]: tensor<6x4xf32>)
// CHECK-NEXT: return %[[X]]
func.func @reshape_roundtrip(%x: tensor<6x4xf32>) -> tensor<6x4xf32> {
  %0 = llm.reshape %x : tensor<6x4xf32> to tensor<24xf32>
  %1 = llm.reshape %0 : tensor<24xf32> to tensor<6x4xf32>
  return %1 : tensor<6x4xf32>
}

// -----

// CHECK-LABEL: func.func @cast_same_type
// CHECK-SAME: (%[[X:.+]]: tensor<4xbf16>)
// CHECK-NEXT: return %[[X]]
func.func @cast_same_type(%x: tensor<4xbf16>) -> tensor<4xbf16> {
  %0 = llm.cast %x : tensor<4xbf16> to tensor<4xbf16>
  return %0 : tensor<4xbf16>
}

// -----

// A lossless widening followed by a narrowing is one cast; bf16 -> f32 -> bf16 is x.
// CHECK-LABEL: func.func @cast_pair_lossless
// CHECK-SAME: (%[[X:.+]]: tensor<4xbf16>, %[[Y:.+]]: tensor<4xf16>)
// CHECK-NEXT: %[[C:.+]] = llm.cast %[[Y]] : tensor<4xf16> to tensor<4xbf16>
// CHECK-NEXT: return %[[X]], %[[C]]
func.func @cast_pair_lossless(%x: tensor<4xbf16>, %y: tensor<4xf16>) -> (tensor<4xbf16>, tensor<4xbf16>) {
  %0 = llm.cast %x : tensor<4xbf16> to tensor<4xf32>
  %1 = llm.cast %0 : tensor<4xf32> to tensor<4xbf16>
  %2 = llm.cast %y : tensor<4xf16> to tensor<4xf32>
  %3 = llm.cast %2 : tensor<4xf32> to tensor<4xbf16>
  return %1, %3 : tensor<4xbf16>, tensor<4xbf16>
}

// -----

// Negative: f32 -> bf16 -> f32 rounds, so both casts stay.
// CHECK-LABEL: func.func @cast_pair_lossy_kept
// CHECK: llm.cast %{{.*}} : tensor<4xf32> to tensor<4xbf16>
// CHECK: llm.cast %{{.*}} : tensor<4xbf16> to tensor<4xf32>
func.func @cast_pair_lossy_kept(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = llm.cast %x : tensor<4xf32> to tensor<4xbf16>
  %1 = llm.cast %0 : tensor<4xbf16> to tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// Negative: f16 -> bf16 is not exact (bf16 has fewer mantissa bits), both stay.
// CHECK-LABEL: func.func @cast_f16_bf16_kept
// CHECK: llm.cast %{{.*}} : tensor<4xf16> to tensor<4xbf16>
// CHECK: llm.cast %{{.*}} : tensor<4xbf16> to tensor<4xf32>
func.func @cast_f16_bf16_kept(%x: tensor<4xf16>) -> tensor<4xf32> {
  %0 = llm.cast %x : tensor<4xf16> to tensor<4xbf16>
  %1 = llm.cast %0 : tensor<4xbf16> to tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// CHECK-LABEL: func.func @identity_broadcast_and_slice
// CHECK-SAME: (%[[X:.+]]: tensor<4x8xf32>)
// CHECK-NEXT: return %[[X]]
func.func @identity_broadcast_and_slice(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = llm.broadcast %x : tensor<4x8xf32> to tensor<4x8xf32>
  %1 = llm.slice %0 [0, 0] to [-1, 8] step [1, 1] : tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}
