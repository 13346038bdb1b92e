// RUN: llmc-opt --split-input-file --llmc-precision=policy=bf16 %s | FileCheck %s
// RUN: llmc-opt --split-input-file --llmc-precision=policy=fp16 %s | FileCheck %s --check-prefix=F16
// RUN: llmc-opt --split-input-file --llmc-precision=policy=fp8 %s | FileCheck %s --check-prefix=FP8
// RUN: llmc-opt --split-input-file --llmc-precision=policy=fp32 %s | FileCheck %s --check-prefix=F32
// RUN: not llmc-opt --split-input-file --llmc-precision="policy=bf16 weight-only=int3" %s 2>&1 | FileCheck %s --check-prefix=ERR
// RUN: not llmc-opt --split-input-file --llmc-precision="policy=fp8 weight-only=int4" %s 2>&1 | FileCheck %s --check-prefix=ERR-FP8
// RUN: not llmc-opt --split-input-file --llmc-precision=policy=fp64 %s 2>&1 | FileCheck %s --check-prefix=ERR-POLICY

// CHECK-LABEL: func.func @matmul
// CHECK-SAME: (%[[X:.+]]: tensor<7x64xf32>, %[[W:.+]]: tensor<32x64xf32>)
// CHECK-DAG: %[[WB:.+]] = llm.cast %[[W]] : tensor<32x64xf32> to tensor<32x64xbf16>
// CHECK-DAG: %[[XB:.+]] = llm.cast %[[X]] : tensor<7x64xf32> to tensor<7x64xbf16>
// CHECK: %[[Y:.+]] = llm.matmul %[[XB]], %[[WB]] {transpose_rhs} : tensor<7x64xbf16>, tensor<32x64xbf16> -> tensor<7x32xf32>
// CHECK: %[[Z:.+]] = llm.matmul %[[XB]], %[[WB]] {transpose_rhs} : tensor<7x64xbf16>, tensor<32x64xbf16> -> tensor<7x32xf32>
// CHECK: llm.add %[[Y]], %[[Z]]
// F16-LABEL: func.func @matmul
// F16: llm.matmul %{{.+}}, %{{.+}} {transpose_rhs} : tensor<7x64xf16>, tensor<32x64xf16> -> tensor<7x32xf32>
// F32-LABEL: func.func @matmul
// F32-NOT: llm.cast
// F32: return
// FP8-LABEL: func.func @matmul
// FP8-DAG: %[[ONE:.+]] = llm.constant dense<1.000000e+00> : tensor<f32>
// FP8-DAG: %[[C448:.+]] = llm.constant dense<4.480000e+02> : tensor<f32>
// FP8: %[[WR:.+]] = llm.reshape %{{.+}} : tensor<32x64xf32> to tensor<2048xf32>
// FP8: %[[A:.+]] = llm.abs %[[WR]] : tensor<2048xf32>
// FP8: %[[M:.+]] = llm.reduce_max %[[A]] [0] : tensor<2048xf32>
// FP8: %[[MC:.+]] = llm.maximum %[[M]]
// FP8: %[[S:.+]] = llm.div %[[MC]], %[[C448]] : tensor<f32>
// The quantization multiplies by the scale's reciprocal (torchao's recipe).
// FP8: %[[R:.+]] = llm.div %[[ONE]], %[[S]] : tensor<f32>
// FP8: %[[RB:.+]] = llm.broadcast %[[R]] : tensor<f32> to tensor<32x64xf32>
// FP8: %[[Q:.+]] = llm.mul %{{.+}}, %[[RB]] : tensor<32x64xf32>
// FP8: llm.cast %[[Q]] : tensor<32x64xf32> to tensor<32x64xf8E4M3FN>
// FP8: %[[B16:.+]] = llm.matmul %{{.+}}, %{{.+}} scales(%{{.+}}, %[[S]]) {transpose_rhs} : tensor<7x64xf8E4M3FN>, tensor<32x64xf8E4M3FN> -> tensor<7x32xbf16>
// FP8-NOT: llm.mul
// FP8: llm.cast %[[B16]] : tensor<7x32xbf16> to tensor<7x32xf32>
func.func @matmul(%x: tensor<7x64xf32>, %w: tensor<32x64xf32>) -> tensor<7x32xf32> {
  %y = llm.matmul %x, %w {transpose_rhs} : tensor<7x64xf32>, tensor<32x64xf32> -> tensor<7x32xf32>
  %z = llm.matmul %x, %w {transpose_rhs} : tensor<7x64xf32>, tensor<32x64xf32> -> tensor<7x32xf32>
  %s = llm.add %y, %z : tensor<7x32xf32>
  return %s : tensor<7x32xf32>
}

// -----

// Attention runs in the low type and its result is cast back; the norm and
// softmax stay in f32 (their kernels compute in fp32 anyway).
// CHECK-LABEL: func.func @attention_and_norm
// CHECK: %[[N:.+]] = llm.rms_norm %{{.+}}, %{{.+}} : tensor<1x7x2x16xf32>, tensor<16xf32>
// CHECK-DAG: %[[NB:.+]] = llm.cast %[[N]] : tensor<1x7x2x16xf32> to tensor<1x7x2x16xbf16>
// CHECK: %[[A:.+]] = llm.attention %[[NB]], %[[NB]], %[[NB]] {causal} : tensor<1x7x2x16xbf16>
// CHECK: %[[AF:.+]] = llm.cast %[[A]] : tensor<1x7x2x16xbf16> to tensor<1x7x2x16xf32>
// CHECK: llm.softmax %[[AF]] : tensor<1x7x2x16xf32>
// FP8-LABEL: func.func @attention_and_norm
// FP8: llm.attention %{{.+}} : tensor<1x7x2x16xbf16>
func.func @attention_and_norm(%x: tensor<1x7x2x16xf32>, %w: tensor<16xf32>) -> tensor<1x7x2x16xf32> {
  %n = llm.rms_norm %x, %w : tensor<1x7x2x16xf32>, tensor<16xf32>
  %a = llm.attention %n, %n, %n {causal} : tensor<1x7x2x16xf32>, tensor<1x7x2x16xf32>, tensor<1x7x2x16xf32>
  %s = llm.softmax %a : tensor<1x7x2x16xf32>
  return %s : tensor<1x7x2x16xf32>
}

// -----

// Already low precision: nothing to do; a lossless cast pair is removed.
// CHECK-LABEL: func.func @already_bf16
// CHECK-NOT: llm.cast
// CHECK: llm.matmul %{{.+}}, %{{.+}} : tensor<8x8xbf16>, tensor<8x8xbf16> -> tensor<8x8xbf16>
func.func @already_bf16(%x: tensor<8x8xbf16>, %w: tensor<8x8xbf16>) -> tensor<8x8xbf16> {
  %up = llm.cast %x : tensor<8x8xbf16> to tensor<8x8xf32>
  %down = llm.cast %up : tensor<8x8xf32> to tensor<8x8xbf16>
  %y = llm.matmul %down, %w : tensor<8x8xbf16>, tensor<8x8xbf16> -> tensor<8x8xbf16>
  return %y : tensor<8x8xbf16>
}

// -----

// ERR-POLICY: error: 'func.func' op policy: expected fp32, bf16, fp16 or fp8, found 'fp64'
// ERR: error: 'func.func' op weight-only: expected none, int8 or int4, found 'int3'
// ERR-FP8: error: 'func.func' op weight-only=int4 cannot be combined with policy=fp8
func.func @weight_only(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  return %x : tensor<8x8xf32>
}

// -----

// A bf16 operand's per-tensor amax is found in bf16 (abs and max are exact),
// per row and then over the row maxima as one row; only the rank-0 amax is
// widened, so no f32 copy of the activation or of its absolute value is made.
// A small operand (at most 65536 elements, here the weight) is one row: one
// row kernel finds its amax and scale.
// FP8-LABEL: func.func @bf16_amax
// FP8-NOT: llm.abs {{.*}}xf32>
// FP8: %[[WR:.+]] = llm.reshape %arg1 : tensor<32x1024xbf16> to tensor<32768xbf16>
// FP8: %[[WA:.+]] = llm.abs %[[WR]] : tensor<32768xbf16>
// FP8: llm.reduce_max %[[WA]] [0] : tensor<32768xbf16>
// FP8: %[[A:.+]] = llm.abs %arg0 : tensor<2x64x1024xbf16>
// FP8: %[[R:.+]] = llm.reduce_max %[[A]] [2] : tensor<2x64x1024xbf16>
// FP8: %[[R1:.+]] = llm.reshape %[[R]] : tensor<2x64xbf16> to tensor<128xbf16>
// FP8: %[[M:.+]] = llm.reduce_max %[[R1]] [0] : tensor<128xbf16>
// FP8: llm.cast %[[M]] : tensor<bf16> to tensor<f32>
// FP8-NOT: llm.abs {{.*}}xf32>
// FP8: return
func.func @bf16_amax(%x: tensor<2x64x1024xbf16>, %w: tensor<32x1024xbf16>) -> tensor<2x64x32xbf16> {
  %y = llm.matmul %x, %w {transpose_rhs} : tensor<2x64x1024xbf16>, tensor<32x1024xbf16> -> tensor<2x64x32xbf16>
  return %y : tensor<2x64x32xbf16>
}

// -----

// Short rows (attention's [B, S, H, D] layout) are read as rows of their
// trailing dimensions H x D; rows of at least 512 are kept; a large tensor
// with short rows and no such view (no row length of 512 to 4096 divides
// its 205000 elements) keeps its own rows.
// FP8-LABEL: func.func @short_rows
// FP8-DAG: llm.reshape %arg0 : tensor<4x64x4x128xbf16> to tensor<256x512xbf16>
// FP8-DAG: llm.abs %arg1 : tensor<512x512xbf16>
// FP8-DAG: llm.abs %arg2 : tensor<1025x200xbf16>
// FP8-DAG: llm.reshape %arg3 : tensor<200x64xbf16> to tensor<12800xbf16>
// FP8: return
func.func @short_rows(%x: tensor<4x64x4x128xbf16>, %w: tensor<512x512xbf16>,
                      %a: tensor<1025x200xbf16>, %b: tensor<200x64xbf16>)
    -> (tensor<4x64x512xbf16>, tensor<1025x64xbf16>) {
  %x2 = llm.reshape %x : tensor<4x64x4x128xbf16> to tensor<4x64x512xbf16>
  %y = llm.matmul %x2, %w : tensor<4x64x512xbf16>, tensor<512x512xbf16> -> tensor<4x64x512xbf16>
  %z = llm.matmul %a, %b : tensor<1025x200xbf16>, tensor<200x64xbf16> -> tensor<1025x64xbf16>
  return %y, %z : tensor<4x64x512xbf16>, tensor<1025x64xbf16>
}

// -----

// A per-tensor scale does not depend on the view: an operand read as
// [B, S, D] by one GEMM and through a reshape as [B*S, D] by another (a
// linear layer's output gradient, by its input- and weight-gradient GEMMs)
// is reduced once. Every fp8 GEMM takes cuBLASLt's TN layout (LHS [M, K],
// RHS [N, K]): an operand stored the other way round is cast straight into
// it through a transpose (the weight [K, N]; the gradient and the input,
// [tokens, features], for the weight gradient), with its source's scale.
// FP8-LABEL: func.func @quantize_through_reshape
// FP8-COUNT-3: llm.abs
// FP8-NOT: llm.abs
// FP8: %[[Q:.+]] = llm.cast %{{.+}} : tensor<2x8x512xf32> to tensor<2x8x512xf8E5M2>
// FP8: %[[WT:.+]] = llm.transpose %arg1 [1, 0] : tensor<512x64xbf16>
// FP8: llm.cast %[[WT]] : tensor<64x512xbf16> to tensor<64x512xf32>
// FP8: llm.matmul %[[Q]], %{{.+}} scales(%[[SG:.+]], %{{.+}}) {transpose_rhs} : tensor<2x8x512xf8E5M2>, tensor<64x512xf8E4M3FN>
// FP8: %[[GR:.+]] = llm.reshape %arg0 : tensor<2x8x512xbf16> to tensor<16x512xbf16>
// FP8: %[[GT:.+]] = llm.transpose %[[GR]] [1, 0] : tensor<16x512xbf16>
// FP8: llm.cast %[[GT]] : tensor<512x16xbf16> to tensor<512x16xf32>
// FP8: %[[QT:.+]] = llm.cast %{{.+}} : tensor<512x16xf32> to tensor<512x16xf8E5M2>
// FP8: %[[XT:.+]] = llm.transpose %arg2 [1, 0] : tensor<16x64xbf16>
// FP8: llm.cast %[[XT]] : tensor<64x16xbf16> to tensor<64x16xf32>
// FP8: llm.matmul %[[QT]], %{{.+}} scales(%[[SG]], %{{.+}}) {transpose_rhs} : tensor<512x16xf8E5M2>, tensor<64x16xf8E4M3FN>
// FP8-NOT: transpose_lhs
// FP8: return
func.func @quantize_through_reshape(%g: tensor<2x8x512xbf16> {llm.gradient}, %w: tensor<512x64xbf16>,
                                    %x: tensor<16x64xbf16>)
    -> (tensor<2x8x64xbf16>, tensor<512x64xbf16>) {
  %dx = llm.matmul %g, %w : tensor<2x8x512xbf16>, tensor<512x64xbf16> -> tensor<2x8x64xbf16>
  %g2 = llm.reshape %g : tensor<2x8x512xbf16> to tensor<16x512xbf16>
  %dw = llm.matmul %g2, %x {transpose_lhs} : tensor<16x512xbf16>, tensor<16x64xbf16> -> tensor<512x64xbf16>
  return %dx, %dw : tensor<2x8x64xbf16>, tensor<512x64xbf16>
}

// -----

// An outer product (K = 1: Hugging Face LLaMA's RoPE angles, inverse
// frequencies x positions in float32 with autocast off) keeps its types
// under every policy: rounding the positions (above 256 in bf16, above 16 in
// e4m3) made the cos/sin tables noise. The linear layer beside it (K = 16)
// is cast, and so is a small one (K = 2).
// CHECK-LABEL: func.func @outer_product
// CHECK: llm.matmul %arg0, %arg1 : tensor<1x64x1xf32>, tensor<1x1x2048xf32> -> tensor<1x64x2048xf32>
// CHECK: llm.matmul %{{.+}}, %{{.+}} {transpose_rhs} : tensor<8x16xbf16>, tensor<4x16xbf16> -> tensor<8x4xf32>
// CHECK: llm.matmul %{{.+}}, %{{.+}} : tensor<8x2xbf16>, tensor<2x4xbf16> -> tensor<8x4xf32>
// F16-LABEL: func.func @outer_product
// F16: llm.matmul %arg0, %arg1 : tensor<1x64x1xf32>, tensor<1x1x2048xf32> -> tensor<1x64x2048xf32>
// FP8-LABEL: func.func @outer_product
// FP8: llm.matmul %arg0, %arg1 : tensor<1x64x1xf32>, tensor<1x1x2048xf32> -> tensor<1x64x2048xf32>
// FP8: llm.matmul %{{.+}}, %{{.+}} {transpose_rhs} : tensor<8x16xf8E4M3FN>, tensor<4x16xf8E4M3FN>
// FP8: llm.matmul %{{.+}}, %{{.+}} scales(%{{.+}}, %{{.+}}) {transpose_rhs} : tensor<8x2xf8E4M3FN>, tensor<4x2xf8E4M3FN>
// FP8: return
func.func @outer_product(%inv: tensor<1x64x1xf32>, %pos: tensor<1x1x2048xf32>,
                              %x: tensor<8x16xf32>, %w: tensor<4x16xf32>,
                              %a: tensor<8x2xf32>, %b: tensor<2x4xf32>)
    -> (tensor<1x64x2048xf32>, tensor<8x4xf32>, tensor<8x4xf32>) {
  %f = llm.matmul %inv, %pos : tensor<1x64x1xf32>, tensor<1x1x2048xf32> -> tensor<1x64x2048xf32>
  %y = llm.matmul %x, %w {transpose_rhs} : tensor<8x16xf32>, tensor<4x16xf32> -> tensor<8x4xf32>
  %z = llm.matmul %a, %b : tensor<8x2xf32>, tensor<2x4xf32> -> tensor<8x4xf32>
  return %f, %y, %z : tensor<1x64x2048xf32>, tensor<8x4xf32>, tensor<8x4xf32>
}

// -----

// K = 1 as the RHS declares it, the LHS leaving it dynamic: still an outer
// product.
// CHECK-LABEL: func.func @outer_product_dynamic_lhs
// CHECK: llm.matmul %arg0, %arg1 : tensor<1x64x?xf32>, tensor<1x1x2048xf32> -> tensor<1x64x2048xf32>
// FP8-LABEL: func.func @outer_product_dynamic_lhs
// FP8: llm.matmul %arg0, %arg1 : tensor<1x64x?xf32>, tensor<1x1x2048xf32> -> tensor<1x64x2048xf32>
func.func @outer_product_dynamic_lhs(%inv: tensor<1x64x?xf32>, %pos: tensor<1x1x2048xf32>) -> tensor<1x64x2048xf32> {
  %f = llm.matmul %inv, %pos : tensor<1x64x?xf32>, tensor<1x1x2048xf32> -> tensor<1x64x2048xf32>
  return %f : tensor<1x64x2048xf32>
}

// -----

// Through reshapes only between static, non-empty shapes: a dynamic source
// reached through a static middle reshape may not be reshaped to an operand
// with two unknown dimensions, and an empty source is skipped like an empty
// operand. Both keep the operand's own quantization and verify.
// FP8-LABEL: func.func @reshape_chain_dynamic
// FP8: %[[V:.+]] = llm.reshape %{{.+}} : tensor<8x512xf32> to tensor<?x?xf32>
// FP8: llm.abs %[[V]] : tensor<?x?xf32>
// FP8: llm.matmul {{.*}} : tensor<?x?xf8E4M3FN>, tensor<32x512xf8E4M3FN>
func.func @reshape_chain_dynamic(%x: tensor<?x512xf32>, %w: tensor<512x32xf32>) -> tensor<?x32xf32> {
  %s = llm.reshape %x : tensor<?x512xf32> to tensor<8x512xf32>
  %v = llm.reshape %s : tensor<8x512xf32> to tensor<?x?xf32>
  %y = llm.matmul %v, %w : tensor<?x?xf32>, tensor<512x32xf32> -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}

// -----

// FP8-LABEL: func.func @reshape_of_empty
// FP8: llm.abs %{{.+}} : tensor<?x512xf32>
// FP8: return
func.func @reshape_of_empty(%x: tensor<0x4x128xf32>, %w: tensor<32x512xf32>) -> tensor<?x32xf32> {
  %x2 = llm.reshape %x : tensor<0x4x128xf32> to tensor<?x512xf32>
  %y = llm.matmul %x2, %w {transpose_rhs} : tensor<?x512xf32>, tensor<32x512xf32> -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}

// -----

// The amax view does not follow the source's shape where that is poor: a
// flat source (one row would be one thread block for 16M elements) and an
// [N, 1] one (rows of one element) are read as rows of 4096.
// FP8-LABEL: func.func @amax_view_of_poor_sources
// FP8-DAG: llm.reshape %arg0 : tensor<16777216xbf16> to tensor<4096x4096xbf16>
// FP8-DAG: llm.reshape %arg1 : tensor<2097152x1xbf16> to tensor<512x4096xbf16>
// FP8: return
func.func @amax_view_of_poor_sources(%x: tensor<16777216xbf16>, %w: tensor<2097152x1xbf16>) -> tensor<4096x512xbf16> {
  %v = llm.reshape %x : tensor<16777216xbf16> to tensor<4096x4096xbf16>
  %w2 = llm.reshape %w : tensor<2097152x1xbf16> to tensor<4096x512xbf16>
  %y = llm.matmul %v, %w2 : tensor<4096x4096xbf16>, tensor<4096x512xbf16> -> tensor<4096x512xbf16>
  return %y : tensor<4096x512xbf16>
}
