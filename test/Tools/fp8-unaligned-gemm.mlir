// An fp8 GEMM the graph states itself (torch._scaled_mm, hand-written IR)
// with K and N not multiples of 16 compiles under every policy:
// llmc-pad-layout{fp8-only} pads its operands (K and N to 32) and slices the
// result back; a bf16 GEMM beside it is left as written. Before, llmc-compile
// without --precision=fp8 refused it ("cuBLASLt needs both to be multiples of
// 16").
// RUN: llmc-compile %s --arch=sm_90a --emit=executable-dump | FileCheck %s
// RUN: llmc-compile %s --arch=sm_90a --precision=bf16 --emit=executable-dump | FileCheck %s
// RUN: llmc-opt %s --llmc-pad-layout="fp8-only=1" | FileCheck %s --check-prefix=PASS
// An fp8 GEMM's dimensions are multiples of 32 and of the option's multiple
// (lcm: 40 -> 160), never 40 alone, which cuBLASLt would refuse.
// RUN: llmc-opt %s --llmc-pad-layout="fp8-only=1 multiple=40" | FileCheck %s --check-prefix=LCM
// LCM: llm.matmul {{.*}} : tensor<160x160xf8E4M3FN>, tensor<160x160xf8E4M3FN> -> tensor<160x160xbf16>
// CHECK-DAG: gemm {{[0-9]+}} m=32 n=64 k=32 {{.*}} dtypes=[f8e4m3,f8e4m3,bf16,bf16]
// CHECK-DAG: gemm {{[0-9]+}} m=24 n=40 k=20 {{.*}} dtypes=[bf16,bf16,bf16,bf16]
// PASS-LABEL: func.func @f
// PASS: llm.pad %arg0 high [8, 12] : tensor<24x20xf8E4M3FN> to tensor<32x32xf8E4M3FN>
// PASS: llm.pad %arg1 high [24, 12] : tensor<40x20xf8E4M3FN> to tensor<64x32xf8E4M3FN>
// PASS: llm.matmul {{.*}} -> tensor<32x64xbf16>
// PASS: llm.slice {{.*}} [0, 0] to [24, 40]
// PASS-NOT: llm.pad
// PASS: llm.matmul %arg4, %arg5 {transpose_rhs} : tensor<24x20xbf16>, tensor<40x20xbf16> -> tensor<24x40xbf16>
func.func @f(%a: tensor<24x20xf8E4M3FN>, %w: tensor<40x20xf8E4M3FN>, %sa: tensor<f32>, %sb: tensor<f32>,
             %x: tensor<24x20xbf16>, %v: tensor<40x20xbf16>) -> (tensor<24x40xbf16>, tensor<24x40xbf16>) {
  %0 = llm.matmul %a, %w scales(%sa, %sb) {transpose_rhs} : tensor<24x20xf8E4M3FN>, tensor<40x20xf8E4M3FN> -> tensor<24x40xbf16>
  %1 = llm.matmul %x, %v {transpose_rhs} : tensor<24x20xbf16>, tensor<40x20xbf16> -> tensor<24x40xbf16>
  return %0, %1 : tensor<24x40xbf16>, tensor<24x40xbf16>
}
