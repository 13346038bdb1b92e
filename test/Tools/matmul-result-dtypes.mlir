// llm.matmul takes any float result type; cuBLASLt's GEMMs write only some
// (f32 -> f32; f16 -> f16/f32; bf16 -> bf16/f32; fp8 -> bf16/f16/f32). A
// result it cannot write from the operands is computed through an f32
// product and one kernel that rounds it once (rt::UnsupportedGemmDTypes).
// Before, these lowered to cuBLASLt GEMMs that do not exist and failed at
// load on the GPU. The e5m2 pair with an f16 result dequantizes to bf16
// operands, so it takes the f32 product too; e4m3 x e4m3 -> f16 is direct.
// RUN: llmc-compile %s --arch=sm_90a --emit=executable-dump | FileCheck %s
// RUN: llmc-compile %s --arch=sm_90a --arch=sm_80 --print-stats -o %t.llmcx | FileCheck %s --check-prefix=STATS
// STATS: GEMMs: 6
// CHECK: gemm 0 {{.*}} dtypes=[f32,f32,f32,f32]
// CHECK: gemm 1 {{.*}} dtypes=[f16,f16,f32,f32]
// CHECK: gemm 2 {{.*}} dtypes=[bf16,bf16,f32,f32]
// CHECK: gemm 3 {{.*}} dtypes=[bf16,bf16,f32,f32]
// CHECK: gemm 4 {{.*}} dtypes=[bf16,bf16,f32,f32]
// CHECK: gemm 5 {{.*}} dtypes=[f8e4m3,f8e4m3,f16,f16]
// CHECK: call gemm 0 label="llm.matmul"
// CHECK-NEXT: call kernel llmc_ew_{{[0-9a-f]+}} {{.*}} label="llm.matmul"
// CHECK: call gemm 1 label="llm.matmul"
// CHECK-NEXT: call kernel llmc_ew_{{[0-9a-f]+}} {{.*}} label="llm.matmul"
// CHECK: call gemm 2 label="llm.matmul"
// CHECK-NEXT: call kernel llmc_ew_{{[0-9a-f]+}} {{.*}} label="llm.matmul"
// CHECK: call gemm 3 label="llm.matmul"
// CHECK-NEXT: call kernel llmc_ew_{{[0-9a-f]+}} {{.*}} label="llm.matmul"
// CHECK: call gemm 4 label="llm.matmul"
// CHECK-NEXT: call kernel llmc_ew_{{[0-9a-f]+}} {{.*}} label="llm.matmul"
// CHECK: call gemm 5 label="llm.matmul"
// CHECK-NOT: launch
func.func @f(%x: tensor<64x32xf32>, %w: tensor<32x16xf32>, %y: tensor<64x32xf16>, %v: tensor<32x16xf16>,
             %p: tensor<64x32xbf16>, %q: tensor<32x16xbf16>, %a: tensor<64x32xf8E5M2>, %b: tensor<32x32xf8E5M2>,
             %c: tensor<64x32xf8E4M3FN>, %d: tensor<32x32xf8E4M3FN>)
    -> (tensor<64x16xf16>, tensor<64x16xbf16>, tensor<64x16xf8E4M3FN>, tensor<64x16xf16>, tensor<64x32xf16>, tensor<64x32xf16>) {
  %0 = llm.matmul %x, %w : tensor<64x32xf32>, tensor<32x16xf32> -> tensor<64x16xf16>
  %1 = llm.matmul %y, %v : tensor<64x32xf16>, tensor<32x16xf16> -> tensor<64x16xbf16>
  %2 = llm.matmul %p, %q : tensor<64x32xbf16>, tensor<32x16xbf16> -> tensor<64x16xf8E4M3FN>
  %3 = llm.matmul %p, %q : tensor<64x32xbf16>, tensor<32x16xbf16> -> tensor<64x16xf16>
  %4 = llm.matmul %a, %b {transpose_rhs} : tensor<64x32xf8E5M2>, tensor<32x32xf8E5M2> -> tensor<64x32xf16>
  %5 = llm.matmul %c, %d {transpose_rhs} : tensor<64x32xf8E4M3FN>, tensor<32x32xf8E4M3FN> -> tensor<64x32xf16>
  return %0, %1, %2, %3, %4, %5 : tensor<64x16xf16>, tensor<64x16xbf16>, tensor<64x16xf8E4M3FN>, tensor<64x16xf16>, tensor<64x32xf16>, tensor<64x32xf16>
}
