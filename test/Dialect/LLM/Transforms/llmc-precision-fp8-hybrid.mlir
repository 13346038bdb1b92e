// The fp8 policy's HYBRID format (Transformer Engine): GEMM operands computed
// from an `llm.gradient` argument are e5m2 scaled by amax / 57344, all others
// e4m3 scaled by amax / 448.
// RUN: llmc-opt --split-input-file --llmc-precision=policy=fp8 %s | FileCheck %s
// RUN: llmc-opt --split-input-file --llmc-precision="policy=fp8 fp8-gradients=e4m3" %s | FileCheck %s --check-prefix=E4M3
// RUN: not llmc-opt --split-input-file --llmc-precision="policy=fp8 fp8-gradients=e3m4" %s 2>&1 | FileCheck %s --check-prefix=ERR

// The backward of y = x @ w^T: dx = dy @ w takes dy (a gradient) in e5m2 and
// w in e4m3; dw = dy^T @ x takes dy in e5m2 and x in e4m3. The gradient's
// scale is made once and shared by both GEMMs. Each GEMM takes cuBLASLt's
// fp8 TN layout (LHS [M, K], RHS [N, K]): w, dy for dw, and x are cast
// straight into it through a transpose.
// CHECK-LABEL: func.func @linear_backward
// CHECK-DAG: %[[C57344:.+]] = llm.constant dense<5.734400e+04> : tensor<f32>
// CHECK-DAG: %[[C448:.+]] = llm.constant dense<4.480000e+02> : tensor<f32>
// CHECK-DAG: %[[SDY:.+]] = llm.div %{{.+}}, %[[C57344]] : tensor<f32>
// CHECK-DAG: %[[QDY:.+]] = llm.cast %{{.+}} : tensor<8x32xf32> to tensor<8x32xf8E5M2>
// CHECK: llm.transpose %arg1 [1, 0] : tensor<32x64xf32>
// CHECK: llm.cast %{{.+}} : tensor<64x32xf32> to tensor<64x32xf8E4M3FN>
// CHECK: llm.matmul %[[QDY]], %{{.+}} scales(%[[SDY]], %{{.+}}) {transpose_rhs} : tensor<8x32xf8E5M2>, tensor<64x32xf8E4M3FN> -> tensor<8x64xbf16>
// CHECK: llm.transpose %arg2 [1, 0] : tensor<8x32xf32>
// CHECK: %[[QDYT:.+]] = llm.cast %{{.+}} : tensor<32x8xf32> to tensor<32x8xf8E5M2>
// CHECK: llm.transpose %arg0 [1, 0] : tensor<8x64xf32>
// CHECK: llm.cast %{{.+}} : tensor<64x8xf32> to tensor<64x8xf8E4M3FN>
// CHECK: llm.matmul %[[QDYT]], %{{.+}} scales(%[[SDY]], %{{.+}}) {transpose_rhs} : tensor<32x8xf8E5M2>, tensor<64x8xf8E4M3FN> -> tensor<32x64xbf16>
// CHECK-NOT: f8E5M2
// CHECK: return
// E4M3-LABEL: func.func @linear_backward
// E4M3-NOT: f8E5M2
// E4M3: return
// ERR: error: 'func.func' op fp8-gradients: expected e5m2 or e4m3, found 'e3m4'
func.func @linear_backward(%x: tensor<8x64xf32>, %w: tensor<32x64xf32>,
                           %dy: tensor<8x32xf32> {llm.gradient}) -> (tensor<8x64xf32>, tensor<32x64xf32>) {
  %dx = llm.matmul %dy, %w : tensor<8x32xf32>, tensor<32x64xf32> -> tensor<8x64xf32>
  %dw = llm.matmul %dy, %x {transpose_lhs} : tensor<8x32xf32>, tensor<8x64xf32> -> tensor<32x64xf32>
  return %dx, %dw : tensor<8x64xf32>, tensor<32x64xf32>
}

// -----

// Values computed from a gradient are gradients (the SwiGLU backward's
// product feeds the next GEMM); a GEMM of two gradients takes its RHS in e4m3
// (cuBLASLt has no e5m2 x e5m2 GEMM); a GEMM that reads no gradient stays
// e4m3 x e4m3.
// CHECK-LABEL: func.func @derived_gradients
// CHECK: llm.matmul %{{.+}}, %{{.+}} scales(%{{.+}}, %{{.+}}) {transpose_rhs} : tensor<4x16xf8E5M2>, tensor<16x16xf8E4M3FN> -> tensor<4x16xbf16>
// CHECK: llm.matmul %{{.+}}, %{{.+}} scales(%{{.+}}, %{{.+}}) {transpose_rhs} : tensor<16x4xf8E5M2>, tensor<16x4xf8E4M3FN> -> tensor<16x16xbf16>
// CHECK: llm.matmul %{{.+}}, %{{.+}} scales(%{{.+}}, %{{.+}}) {transpose_rhs} : tensor<4x16xf8E4M3FN>, tensor<16x16xf8E4M3FN> -> tensor<4x16xbf16>
func.func @derived_gradients(%g: tensor<4x16xf32> {llm.gradient}, %a: tensor<4x16xf32>,
                             %w: tensor<16x16xf32>) -> (tensor<4x16xf32>, tensor<16x16xf32>, tensor<4x16xf32>) {
  %d = llm.mul %g, %a : tensor<4x16xf32>
  %dx = llm.matmul %d, %w {transpose_rhs} : tensor<4x16xf32>, tensor<16x16xf32> -> tensor<4x16xf32>
  %gg = llm.matmul %d, %g {transpose_lhs} : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<16x16xf32>
  %y = llm.matmul %a, %w : tensor<4x16xf32>, tensor<16x16xf32> -> tensor<4x16xf32>
  return %dx, %gg, %y : tensor<4x16xf32>, tensor<16x16xf32>, tensor<4x16xf32>
}

// -----

// A matmul reading another's result directly (dX = (dY W2) W1): the first
// product is a gradient, so the second GEMM reads it in e5m2 too.
// CHECK-LABEL: func.func @chained
// CHECK: llm.matmul %{{.+}}, %{{.+}} scales(%{{.+}}, %{{.+}}) {transpose_rhs} : tensor<8x32xf8E5M2>, tensor<64x32xf8E4M3FN> -> tensor<8x64xbf16>
// CHECK: llm.matmul %{{.+}}, %{{.+}} scales(%{{.+}}, %{{.+}}) {transpose_rhs} : tensor<8x64xf8E5M2>, tensor<16x64xf8E4M3FN> -> tensor<8x16xbf16>
func.func @chained(%dy: tensor<8x32xf32> {llm.gradient}, %w2: tensor<32x64xf32>,
                   %w1: tensor<64x16xf32>) -> tensor<8x16xf32> {
  %dh = llm.matmul %dy, %w2 : tensor<8x32xf32>, tensor<32x64xf32> -> tensor<8x64xf32>
  %dx = llm.matmul %dh, %w1 : tensor<8x64xf32>, tensor<64x16xf32> -> tensor<8x16xf32>
  return %dx : tensor<8x16xf32>
}

// -----

// An empty product (no rows: an empty batch) keeps its types under fp8: it
// computes nothing, and an amax over no element would be invalid.
// CHECK-LABEL: func.func @empty_rows
// CHECK-NOT: f8E
// CHECK: llm.matmul %{{.+}}, %{{.+}} {transpose_rhs} : tensor<0x64xf32>, tensor<32x64xf32> -> tensor<0x32xf32>
func.func @empty_rows(%x: tensor<0x64xf32>, %w: tensor<32x64xf32>) -> tensor<0x32xf32> {
  %y = llm.matmul %x, %w {transpose_rhs} : tensor<0x64xf32>, tensor<32x64xf32> -> tensor<0x32xf32>
  return %y : tensor<0x32xf32>
}
