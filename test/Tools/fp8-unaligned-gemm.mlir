// An fp8 GEMM the graph states itself (torch._scaled_mm, hand-written IR)
// with K and N not multiples of 16 compiles under every policy:
// llmc-pad-layout{fp8-only} pads K and N to multiples of 16 (20 -> 32,
// 40 -> 48; M stays 24) and slices the result back; a bf16 GEMM beside it is
// left as written. Before, llmc-compile
// without --precision=fp8 refused it ("cuBLASLt needs both to be multiples of
// 16").
// RUN: llmc-compile %s --arch=sm_90a --emit=executable-dump | FileCheck %s
// RUN: llmc-compile %s --arch=sm_90a --precision=bf16 --emit=executable-dump | FileCheck %s
// RUN: llmc-opt %s --llmc-pad-layout="fp8-only=1" | FileCheck %s --check-prefix=PASS
// Padding every GEMM (the fp8 policy's mode), an fp8 GEMM's dimensions are
// multiples of 32 and of the option's multiple (lcm: 40 -> 160), never 40
// alone, which cuBLASLt would refuse; the bf16 GEMM gets 40.
// RUN: llmc-opt %s --llmc-pad-layout="multiple=40" | FileCheck %s --check-prefix=LCM
// LCM: llm.matmul {{.*}} : tensor<160x160xf8E4M3FN>, tensor<160x160xf8E4M3FN> -> tensor<160x160xbf16>
// LCM: llm.matmul {{.*}} : tensor<40x40xbf16>, tensor<40x40xbf16> -> tensor<40x40xbf16>
// LCM: llm.matmul {{.*}} : tensor<160x160xf8E4M3FN>, tensor<160x160xf8E4M3FN> -> tensor<160x160xbf16>
// CHECK-DAG: gemm {{[0-9]+}} m=24 n=48 k=32 {{.*}} dtypes=[f8e4m3,f8e4m3,bf16,bf16]
// CHECK-DAG: gemm {{[0-9]+}} m=24 n=40 k=20 {{.*}} dtypes=[bf16,bf16,bf16,bf16]
// CHECK-DAG: gemm {{[0-9]+}} m=7 n=64 k=64 {{.*}} dtypes=[f8e4m3,f8e4m3,bf16,bf16]
// PASS-LABEL: func.func @f
// PASS: llm.pad %arg0 high [0, 12] : tensor<24x20xf8E4M3FN> to tensor<24x32xf8E4M3FN>
// PASS: llm.pad %arg1 high [8, 12] : tensor<40x20xf8E4M3FN> to tensor<48x32xf8E4M3FN>
// PASS: llm.matmul {{.*}} -> tensor<24x48xbf16>
// PASS: llm.slice {{.*}} [0, 0] to [24, 40]
// PASS-NOT: llm.pad
// PASS: llm.matmul %arg4, %arg5 {transpose_rhs} : tensor<24x20xbf16>, tensor<40x20xbf16> -> tensor<24x40xbf16>
// A decode-shaped fp8 GEMM with K and N aligned (M = 7) is not padded.
// PASS-NOT: llm.pad
// PASS: llm.matmul %arg6, %arg7 scales(%arg2, %arg3) {transpose_rhs} : tensor<7x64xf8E4M3FN>, tensor<64x64xf8E4M3FN> -> tensor<7x64xbf16>
func.func @f(%a: tensor<24x20xf8E4M3FN>, %w: tensor<40x20xf8E4M3FN>, %sa: tensor<f32>, %sb: tensor<f32>,
             %x: tensor<24x20xbf16>, %v: tensor<40x20xbf16>, %c: tensor<7x64xf8E4M3FN>, %d: tensor<64x64xf8E4M3FN>)
    -> (tensor<24x40xbf16>, tensor<24x40xbf16>, tensor<7x64xbf16>) {
  %0 = llm.matmul %a, %w scales(%sa, %sb) {transpose_rhs} : tensor<24x20xf8E4M3FN>, tensor<40x20xf8E4M3FN> -> tensor<24x40xbf16>
  %1 = llm.matmul %x, %v {transpose_rhs} : tensor<24x20xbf16>, tensor<40x20xbf16> -> tensor<24x40xbf16>
  %2 = llm.matmul %c, %d scales(%sa, %sb) {transpose_rhs} : tensor<7x64xf8E4M3FN>, tensor<64x64xf8E4M3FN> -> tensor<7x64xbf16>
  return %0, %1, %2 : tensor<24x40xbf16>, tensor<24x40xbf16>, tensor<7x64xbf16>
}
