// A linear layer over an empty batch (M = 0) compiles and runs under every
// fp8 form, as it does without a policy: the product computes nothing.
// RUN: llmc-compile %s --precision=fp8 --arch=sm_90a -o %t.tensor.llmcx
// RUN: llmc-compile %s --precision=fp8 --fp8-scaling=row --arch=sm_90a -o %t.row.llmcx
// RUN: llmc-run %s --backend=ref --precision=fp8 | FileCheck %s
// RUN: llmc-run %s --backend=ref --precision=fp8 --fp8-scaling=row | FileCheck %s
// CHECK: result0: tensor<0x32xbf16> checksum 0.000000e+00
func.func @empty_batch(%x: tensor<0x64xbf16>, %w: tensor<32x64xbf16>) -> tensor<0x32xbf16> {
  %y = llm.matmul %x, %w {transpose_rhs} : tensor<0x64xbf16>, tensor<32x64xbf16> -> tensor<0x32xbf16>
  return %y : tensor<0x32xbf16>
}
