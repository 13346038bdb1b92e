// Round trip of every exec op, in the custom and the generic form.
// RUN: llmc-opt %s | FileCheck %s
// RUN: llmc-opt %s | llmc-opt | FileCheck %s
// RUN: llmc-opt --mlir-print-op-generic %s | llmc-opt | FileCheck %s

// CHECK-LABEL: exec.executable @everything
// CHECK-SAME:    arena_bytes = 4096 : i64
// CHECK-SAME:    symbol_bindings = {seq = 7 : i64}
exec.executable @everything attributes {arena_bytes = 4096 : i64, symbol_bindings = {seq = 7 : i64}} {
  // CHECK: exec.input "arg0" : tensor<7x64xbf16>
  exec.input "arg0" : tensor<7x64xbf16>
  // CHECK: exec.input "arg1" : tensor<64x64xbf16> parameter
  exec.input "arg1" : tensor<64x64xbf16> parameter
  // CHECK: exec.input "arg2" : tensor<f32>
  exec.input "arg2" : tensor<f32>
  // CHECK: exec.output "result0" : tensor<7x64xbf16>
  exec.output "result0" : tensor<7x64xbf16>
  // CHECK: exec.output "result1" : tensor<7x64xbf16> alias_input 0
  exec.output "result1" : tensor<7x64xbf16> alias_input 0
  // CHECK: %[[IN0:.+]] = exec.buffer input[0] 896 bytes
  %b0 = exec.buffer input[0] 896 bytes
  // CHECK: %[[IN1:.+]] = exec.buffer input[1] 8192 bytes
  %b1 = exec.buffer input[1] 8192 bytes
  // CHECK: exec.buffer input[2] 4 bytes
  %b2 = exec.buffer input[2] 4 bytes
  // CHECK: %[[OUT:.+]] = exec.buffer output[0] 896 bytes
  %b3 = exec.buffer output[0] 896 bytes
  // CHECK: exec.buffer output[1] 896 bytes
  %b4 = exec.buffer output[1] 896 bytes
  // CHECK: %[[TMP:.+]] = exec.buffer arena 896 bytes live [0, 3] offset 0
  %b5 = exec.buffer arena 896 bytes live [0, 3] offset 0
  // CHECK: %[[CST:.+]] = exec.buffer constant 4 bytes data "\00\00\80?"
  %b6 = exec.buffer constant 4 bytes data "\00\00\80?"
  // CHECK: %[[PERSIST:.+]] = exec.buffer persistent 8192 bytes
  %b7 = exec.buffer persistent 8192 bytes
  // CHECK: exec.kernel @scale_bf16 source "extern
  // CHECK-SAME: headers = {preamble.h = "// preamble"}
  // CHECK-SAME: options = ["-std=c++17"]
  exec.kernel @scale_bf16 source "extern \22C\22 __global__ void scale_bf16() {}" {headers = {"preamble.h" = "// preamble"}, options = ["-std=c++17"]}
  // CHECK: exec.kernel @attn_1 entry "attn" source
  exec.kernel @attn_1 entry "attn" source "" {arch = "sm_90a", cubin = "\7FELF"}
  // CHECK: exec.prepare {
  // CHECK-NEXT: exec.launch @scale_bf16 grid [64, 1, 1] block [128, 1, 1] smem 0 (%[[IN1]][0], %[[PERSIST]][0], 4096 : i32, 7 : i64, 5.000000e-01 : f32, "\01\02") label "prep"
  // CHECK-NEXT: }
  exec.prepare {
    exec.launch @scale_bf16 grid [64, 1, 1] block [128, 1, 1] smem 0 (%b1[0], %b7[0], 4096 : i32, 7, 0.5 : f32, "\01\02") label "prep"
  }
  // CHECK: exec.launch @scale_bf16 grid [1, 1, 1] block [1, 1, 1] smem 0 ()
  // CHECK-NOT: label
  exec.launch @scale_bf16 grid [1, 1, 1] block [1, 1, 1] smem 0 ()
  // CHECK: exec.launch @attn_1 grid [7, 1, 1] block [128, 1, 1] smem 49152 (%[[IN0]][0], %[[TMP]][128])
  // CHECK-SAME: attention(%[[IN0]][0], %[[IN0]][128], %[[IN0]][256], %[[TMP]][0]) <b = 1, sq = 7, skv = 7, hq = 1, hkv = 1, d = 64, causal = true, scale = 1.250000e-01 : f32, dtype = bf16>
  // CHECK-SAME: label "attention"
  exec.launch @attn_1 grid [7, 1, 1] block [128, 1, 1] smem 49152 (%b0[0], %b5[128]) attention(%b0[0], %b0[128], %b0[256], %b5[0]) #exec.attention<b = 1, sq = 7, skv = 7, hq = 1, hkv = 1, d = 64, causal = true, scale = 0.125 : f32, dtype = bf16> label "attention"
  // A training forward's launch also writes the logsumexp (a fifth operand).
  // CHECK: exec.launch @attn_1
  // CHECK-SAME: attention(%[[IN0]][0], %[[IN0]][128], %[[IN0]][256], %[[TMP]][0], %[[TMP]][256]) <b = 1, sq = 7, skv = 7
  exec.launch @attn_1 grid [7, 1, 1] block [128, 1, 1] smem 49152 (%b0[0], %b5[128]) attention(%b0[0], %b0[128], %b0[256], %b5[0], %b5[256]) #exec.attention<b = 1, sq = 7, skv = 7, hq = 1, hkv = 1, d = 64, causal = true, scale = 0.125 : f32, dtype = bf16> label "attention"
  // CHECK: exec.gemm a %[[TMP]][0] b %[[PERSIST]][0] d %[[OUT]][0]
  // CHECK-SAME: dtype_a = bf16
  // CHECK-SAME: transb
  // CHECK-SAME: label "proj"
  exec.gemm a %b5[0] b %b7[0] d %b3[0] {m = 7 : i64, n = 64 : i64, k = 64 : i64, lda = 64 : i64, ldb = 64 : i64, ldc = 64 : i64, ldd = 64 : i64, dtype_a = bf16, dtype_b = bf16, dtype_c = bf16, dtype_d = bf16, transb} label "proj"
  // CHECK: exec.gemm a %{{.+}}[0] b %{{.+}}[0] c %[[OUT]][0] d %[[OUT]][0] bias %[[CST]][0] scale_a %[[CST]][0] scale_b %[[CST]][0]
  // CHECK-SAME: alpha = 2.000000e+00 : f32
  // CHECK-SAME: batch = 2 : i64
  // CHECK-SAME: beta = 1.000000e+00 : f32
  // CHECK-SAME: epilogue = #exec.epilogue<relu_bias>
  exec.gemm a %b0[0] b %b1[0] c %b3[0] d %b3[0] bias %b6[0] scale_a %b6[0] scale_b %b6[0] {m = 7 : i64, n = 64 : i64, k = 64 : i64, batch = 2 : i64, stride_a = 448 : i64, lda = 64 : i64, ldb = 64 : i64, ldc = 64 : i64, ldd = 64 : i64, dtype_a = bf16, dtype_b = bf16, dtype_c = bf16, dtype_d = bf16, alpha = 2.0 : f32, beta = 1.0 : f32, epilogue = #exec.epilogue<relu_bias>}
  // CHECK: exec.copy 896 bytes from %[[IN0]][0] to %{{.+}}[0] label "copy"
  exec.copy 896 bytes from %b0[0] to %b4[0] label "copy"
  // CHECK: exec.collective all_reduce sum 448 x bf16 from %[[OUT]][0] to %[[OUT]][0] label "all_reduce"
  exec.collective all_reduce sum 448 x bf16 from %b3[0] to %b3[0] label "all_reduce"
  // CHECK: exec.collective all_gather avg 1 x f32 from %[[CST]][0] to %[[TMP]][0]
  exec.collective all_gather avg 1 x f32 from %b6[0] to %b5[0]
}

// CHECK-LABEL: exec.executable @empty
// CHECK-NOT: attributes
exec.executable @empty {
}
