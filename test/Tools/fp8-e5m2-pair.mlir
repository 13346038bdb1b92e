// cuBLASLt has no e5m2 x e5m2 GEMM (torch._scaled_mm refuses the pair too):
// on sm_89+ such a matmul takes the path of sm_80, both operands
// dequantized to bf16 (exact) in their logical layout, the GEMM writing f32
// and one kernel scaling, adding the bias and rounding once. An e5m2 x
// e4m3 pair stays an fp8 GEMM with the scales in cuBLASLt's pointers.
// RUN: llmc-compile %s --arch=sm_90a --emit=executable-dump | FileCheck %s
// RUN: llmc-compile %s --arch=sm_90a --arch=sm_89 --print-stats -o %t.llmcx | FileCheck %s --check-prefix=STATS
// STATS: GEMMs: 3
// CHECK: gemm 0 {{.*}} trans=[0,1] {{.*}} dtypes=[bf16,bf16,f32,f32] {{.*}} scale_a=none scale_b=none
// CHECK: gemm 1 {{.*}} trans=[0,0] {{.*}} dtypes=[bf16,bf16,f32,f32] {{.*}} scale_a=none scale_b=none
// CHECK: gemm 2 {{.*}} dtypes=[f8e5m2,f8e4m3,bf16,bf16] {{.*}} scale_a=b{{[0-9]+}}+0 scale_b=b{{[0-9]+}}+0
func.func @f(%a: tensor<24x32xf8E5M2>, %b: tensor<48x32xf8E5M2>, %c: tensor<32x24xf8E5M2>,
             %w: tensor<48x32xf8E4M3FN>, %sa: tensor<f32>, %sb: tensor<f32>, %bias: tensor<48xbf16>)
    -> (tensor<24x48xbf16>, tensor<48x24xbf16>, tensor<24x48xbf16>) {
  %0 = llm.matmul %a, %b bias %bias scales(%sa, %sb) {transpose_rhs} : tensor<24x32xf8E5M2>, tensor<48x32xf8E5M2>, tensor<48xbf16> -> tensor<24x48xbf16>
  %1 = llm.matmul %b, %c scales(%sa, %sb) : tensor<48x32xf8E5M2>, tensor<32x24xf8E5M2> -> tensor<48x24xbf16>
  %2 = llm.matmul %a, %w scales(%sa, %sb) {transpose_rhs} : tensor<24x32xf8E5M2>, tensor<48x32xf8E4M3FN> -> tensor<24x48xbf16>
  return %0, %1, %2 : tensor<24x48xbf16>, tensor<48x24xbf16>, tensor<24x48xbf16>
}
