// RUN: llmc-opt --split-input-file --llmc-hoist-parameter-work %s | FileCheck %s

// Weights read only as a matmul's rank-2 RHS are parameters (no llm.param
// anywhere): their casts, the transpose and the pad run once per parameter
// set; the activation's cast and everything after the matmul run per call.
// CHECK-LABEL: func.func @weights
// CHECK-SAME: attributes {llm.parameter_preparation_planned}
// CHECK: %[[XB:.+]] = llm.cast %arg0 : tensor<8x64xf32> to tensor<8x64xbf16>
// CHECK: %[[T:.+]] = llm.transpose %arg1 [1, 0] {llm.parameter_preparation}
// CHECK: %[[WB:.+]] = llm.cast %[[T]] {llm.parameter_preparation}
// CHECK: %[[WP:.+]] = llm.pad %[[WB]] high [0, 16] {llm.parameter_preparation}
// CHECK: %[[Y:.+]] = llm.matmul %[[XB]], %[[WP]] : tensor<8x64xbf16>
// CHECK: llm.silu %[[Y]] : tensor<8x80xf32>
func.func @weights(%x: tensor<8x64xf32>, %w: tensor<64x64xf32>) -> tensor<8x80xf32> {
  %xb = llm.cast %x : tensor<8x64xf32> to tensor<8x64xbf16>
  %t = llm.transpose %w [1, 0] : tensor<64x64xf32>
  %wb = llm.cast %t : tensor<64x64xf32> to tensor<64x64xbf16>
  %wp = llm.pad %wb high [0, 16] : tensor<64x64xbf16> to tensor<64x80xbf16>
  %y = llm.matmul %xb, %wp : tensor<8x64xbf16>, tensor<64x80xbf16> -> tensor<8x80xf32>
  %s = llm.silu %y : tensor<8x80xf32>
  return %s : tensor<8x80xf32>
}

// -----

// With llm.param, exactly the marked arguments are parameters: %b is not
// (so the add that reads it runs per call), %g is. A returned value is
// written on every call, so the cast that computes it is not prepared, but
// the reshape of a returned parameter still is.
// CHECK-LABEL: func.func @marked_params
// CHECK: llm.cast %arg1 {llm.parameter_preparation} : tensor<64xf32> to tensor<64xbf16>
// CHECK: llm.add %{{.+}}, %arg2 : tensor<64xbf16>
// CHECK: llm.rms_norm %arg0
// CHECK: llm.cast %arg1 : tensor<64xf32> to tensor<64xf16>
// CHECK: llm.reshape %arg1 {llm.parameter_preparation} : tensor<64xf32> to tensor<8x8xf32>
// CHECK: llm.exp %{{.+}} {llm.parameter_preparation} : tensor<8x8xf32>
// CHECK: llm.mul %{{.+}}, %{{.+}} : tensor<8x8xf32>
func.func @marked_params(%x: tensor<4x64xbf16>, %g: tensor<64xf32> {llm.param}, %b: tensor<64xbf16>) -> (tensor<4x64xbf16>, tensor<64xf16>, tensor<64xf32>, tensor<8x8xf32>) {
  %gb = llm.cast %g : tensor<64xf32> to tensor<64xbf16>
  %gbb = llm.add %gb, %b : tensor<64xbf16>
  %n = llm.rms_norm %x, %gbb {eps = 1.0e-05 : f64} : tensor<4x64xbf16>, tensor<64xbf16>
  %gh = llm.cast %g : tensor<64xf32> to tensor<64xf16>
  %r = llm.reshape %g : tensor<64xf32> to tensor<8x8xf32>
  %e = llm.exp %r : tensor<8x8xf32>
  %m = llm.mul %e, %e : tensor<8x8xf32>
  return %n, %gh, %g, %m : tensor<4x64xbf16>, tensor<64xf16>, tensor<64xf32>, tensor<8x8xf32>
}

// -----

// Work that must run on every call is never prepared, even from parameters
// alone: dequantize_weight (fused into its GEMV), collectives and KV-cache
// appends. The quantization of the weight is prepared.
// CHECK-LABEL: func.func @per_call
// CHECK: llm.quantize_weight %arg1 {{.*}}llm.parameter_preparation
// CHECK: llm.dequantize_weight %{{.+}}, %{{.+}} {bits = 8 : i64, group_size = 128 : i64} : tensor<64x128xi8>
// CHECK: llm.matmul %arg0, %{{.+}} {transpose_rhs} : tensor<1x128xf32>
// CHECK: llm.all_reduce %arg2 sum group_size = 2 : tensor<64xf32>
func.func @per_call(%x: tensor<1x128xf32>, %w: tensor<64x128xf32> {llm.param}, %b: tensor<64xf32> {llm.param}) -> (tensor<1x64xf32>, tensor<64xf32>) {
  %q, %s = llm.quantize_weight %w {bits = 8 : i64, group_size = 128 : i64} : tensor<64x128xf32> -> tensor<64x128xi8>, tensor<64x1xf32>
  %d = llm.dequantize_weight %q, %s {bits = 8 : i64, group_size = 128 : i64} : tensor<64x128xi8>, tensor<64x1xf32> -> tensor<64x128xf32>
  %y = llm.matmul %x, %d {transpose_rhs} : tensor<1x128xf32>, tensor<64x128xf32> -> tensor<1x64xf32>
  %r = llm.all_reduce %b sum group_size = 2 : tensor<64xf32>
  return %y, %r : tensor<1x64xf32>, tensor<64xf32>
}
