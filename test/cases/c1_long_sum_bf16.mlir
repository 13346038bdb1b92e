// RUN: llmc-compile %s --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s
// CHECK: kernel launches:
// ARGS:
// C1: the sum of 2^25 ones stored in bf16 is 2^25 (fp32 accumulation split
// over blocks; a bf16 accumulator would stall at 256).
func.func @c1_long_sum_bf16() -> tensor<bf16> {
  %one = llm.constant dense<1.0> : tensor<1xbf16>
  %x = llm.broadcast %one : tensor<1xbf16> to tensor<33554432xbf16>
  %s = llm.reduce_sum %x [0] : tensor<33554432xbf16>
  return %s : tensor<bf16>
}
