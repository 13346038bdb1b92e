// RUN: llmc-opt --split-input-file --llmc-precision="weight-only=int4" %s | FileCheck %s
// RUN: llmc-opt --split-input-file --llmc-precision="weight-only=int8" %s | FileCheck %s --check-prefix=I8
// RUN: llmc-opt --split-input-file --llmc-precision="policy=bf16 weight-only=int8" %s | FileCheck %s --check-prefix=BF16

// An nn.Linear weight [N, K] (transpose_rhs) is quantized once and read
// dequantized; the activation keeps its type.
// CHECK-LABEL: func.func @linear_nk
// CHECK-SAME: (%[[X:.+]]: tensor<1x256xbf16>, %[[W:.+]]: tensor<64x256xbf16>)
// CHECK: %[[Q:.+]], %[[S:.+]] = llm.quantize_weight %[[W]] {bits = 4 : i64, group_size = 128 : i64} : tensor<64x256xbf16> -> tensor<64x128xi8>, tensor<64x2xf32>
// CHECK: %[[D:.+]] = llm.dequantize_weight %[[Q]], %[[S]] {bits = 4 : i64, group_size = 128 : i64} : tensor<64x128xi8>, tensor<64x2xf32> -> tensor<64x256xbf16>
// CHECK: llm.matmul %[[X]], %[[D]] {transpose_rhs} : tensor<1x256xbf16>, tensor<64x256xbf16> -> tensor<1x64xbf16>
// I8-LABEL: func.func @linear_nk
// I8: llm.quantize_weight %{{.+}} {bits = 8 : i64, group_size = 128 : i64} : tensor<64x256xbf16> -> tensor<64x256xi8>, tensor<64x2xf32>
func.func @linear_nk(%x: tensor<1x256xbf16>, %w: tensor<64x256xbf16>) -> tensor<1x64xbf16> {
  %y = llm.matmul %x, %w {transpose_rhs} : tensor<1x256xbf16>, tensor<64x256xbf16> -> tensor<1x64xbf16>
  return %y : tensor<1x64xbf16>
}

// -----

// A [K, N] weight is viewed as [N, K]; two matmuls of one weight share one
// quantization.
// CHECK-LABEL: func.func @kn_shared
// CHECK: %[[T:.+]] = llm.transpose %{{.+}} [1, 0] : tensor<256x32xf32>
// CHECK: llm.quantize_weight %[[T]] {bits = 4 : i64, group_size = 128 : i64}
// CHECK-NOT: llm.quantize_weight
// CHECK: llm.dequantize_weight {{.+}} -> tensor<32x256xf32>
// CHECK: llm.matmul {{.+}} {transpose_rhs} : tensor<4x256xf32>, tensor<32x256xf32> -> tensor<4x32xf32>
// CHECK: llm.dequantize_weight {{.+}} -> tensor<32x256xf32>
// CHECK: llm.matmul {{.+}} {transpose_rhs} : tensor<4x256xf32>, tensor<32x256xf32> -> tensor<4x32xf32>
func.func @kn_shared(%a: tensor<4x256xf32>, %b: tensor<4x256xf32>, %w: tensor<256x32xf32>) -> (tensor<4x32xf32>, tensor<4x32xf32>) {
  %y = llm.matmul %a, %w : tensor<4x256xf32>, tensor<256x32xf32> -> tensor<4x32xf32>
  %z = llm.matmul %b, %w : tensor<4x256xf32>, tensor<256x32xf32> -> tensor<4x32xf32>
  return %y, %z : tensor<4x32xf32>, tensor<4x32xf32>
}

// -----

// Under policy=bf16 the bf16 cast of the f32 weight is what gets quantized.
// BF16-LABEL: func.func @after_policy_cast
// BF16: %[[C:.+]] = llm.cast %{{.+}} : tensor<64x128xf32> to tensor<64x128xbf16>
// BF16: llm.quantize_weight %[[C]] {bits = 8 : i64, group_size = 128 : i64} : tensor<64x128xbf16> -> tensor<64x128xi8>, tensor<64x1xf32>
// BF16: llm.dequantize_weight {{.+}} -> tensor<64x128xbf16>
// BF16: llm.matmul {{.+}} {transpose_rhs} : tensor<2x128xbf16>, tensor<64x128xbf16> -> tensor<2x64xf32>
func.func @after_policy_cast(%x: tensor<2x128xf32>, %w: tensor<64x128xf32>) -> tensor<2x64xf32> {
  %y = llm.matmul %x, %w {transpose_rhs} : tensor<2x128xf32>, tensor<64x128xf32> -> tensor<2x64xf32>
  return %y : tensor<2x64xf32>
}

// -----

// Negative: activation x activation (attention scores) and a weight whose K
// is not a multiple of 128 stay in floating point.
// CHECK-LABEL: func.func @untouched
// CHECK-NOT: llm.quantize_weight
// CHECK-NOT: llm.dequantize_weight
// CHECK: return
func.func @untouched(%q: tensor<4x128xbf16>, %k: tensor<4x128xbf16>, %x: tensor<4x96xbf16>, %w: tensor<64x96xbf16>) -> (tensor<4x4xbf16>, tensor<4x64xbf16>) {
  %kr = llm.neg %k : tensor<4x128xbf16>
  %s = llm.matmul %q, %kr {transpose_rhs} : tensor<4x128xbf16>, tensor<4x128xbf16> -> tensor<4x4xbf16>
  %y = llm.matmul %x, %w {transpose_rhs} : tensor<4x96xbf16>, tensor<64x96xbf16> -> tensor<4x64xbf16>
  return %s, %y : tensor<4x4xbf16>, tensor<4x64xbf16>
}

// -----

// With llm.param on some arguments only those are weights: %kv is an
// activation argument and its matmul is untouched.
// CHECK-LABEL: func.func @marked_params
// CHECK: llm.quantize_weight %arg2
// CHECK-NOT: llm.quantize_weight
// CHECK: return
func.func @marked_params(%x: tensor<1x128xbf16>, %kv: tensor<8x128xbf16>, %w: tensor<16x128xbf16> {llm.param}) -> (tensor<1x8xbf16>, tensor<1x16xbf16>) {
  %s = llm.matmul %x, %kv {transpose_rhs} : tensor<1x128xbf16>, tensor<8x128xbf16> -> tensor<1x8xbf16>
  %y = llm.matmul %x, %w {transpose_rhs} : tensor<1x128xbf16>, tensor<16x128xbf16> -> tensor<1x16xbf16>
  return %s, %y : tensor<1x8xbf16>, tensor<1x16xbf16>
}
