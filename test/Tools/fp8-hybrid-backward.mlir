// The backward GEMMs of an MLP under the fp8 policy's HYBRID format: the
// gradient (llm.gradient) and what is computed from it are e5m2, weights and
// saved activations e4m3. cuBLASLt takes e5m2 x e4m3, scales the
// accumulator through its A/B scale pointers and writes bf16; every kernel
// (the amax reductions, the scaling casts to e5m2 and e4m3) compiles with
// NVRTC for Hopper (sm_90a) and Ada (sm_89), the fp8 targets.
// RUN: llmc-compile %s --precision=fp8 --arch=sm_90a --arch=sm_89 --print-stats -o %t.llmcx | FileCheck %s --check-prefix=STATS
// RUN: llmc-run %s --precision=fp8 --emit=executable-dump | FileCheck %s
// Below sm_89 (no fp8 GEMM): the operands dequantize to bf16, the GEMM writes
// f32 and one elementwise kernel scales and rounds; it compiles for sm_80.
// RUN: llmc-compile %s --precision=fp8 --arch=sm_80 --print-stats -o %t.sm80.llmcx | FileCheck %s --check-prefix=STATS
// STATS: GEMMs: 4
// CHECK-COUNT-4: gemm {{[0-9]+}} {{.*}} dtypes=[f8e5m2,f8e4m3,bf16,bf16] {{.*}} scale_a=b{{[0-9]+}}+0 scale_b=b{{[0-9]+}}+0
// CHECK-NOT: dtypes=[f8e4m3,f8e4m3
func.func @mlp_backward(%x: tensor<96x128xbf16>, %w1: tensor<256x128xbf16>,
                        %h: tensor<96x256xbf16>, %w2: tensor<64x256xbf16>,
                        %dy: tensor<96x64xbf16> {llm.gradient})
    -> (tensor<96x128xbf16>, tensor<256x128xbf16>, tensor<64x256xbf16>) {
  %dh = llm.matmul %dy, %w2 : tensor<96x64xbf16>, tensor<64x256xbf16> -> tensor<96x256xbf16>
  %dw2 = llm.matmul %dy, %h {transpose_lhs} : tensor<96x64xbf16>, tensor<96x256xbf16> -> tensor<64x256xbf16>
  %dh2 = llm.mul %dh, %h : tensor<96x256xbf16>
  %dx = llm.matmul %dh2, %w1 : tensor<96x256xbf16>, tensor<256x128xbf16> -> tensor<96x128xbf16>
  %dw1 = llm.matmul %dh2, %x {transpose_lhs} : tensor<96x256xbf16>, tensor<96x128xbf16> -> tensor<256x128xbf16>
  return %dx, %dw1, %dw2 : tensor<96x128xbf16>, tensor<256x128xbf16>, tensor<64x256xbf16>
}
