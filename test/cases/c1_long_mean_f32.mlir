// RUN: llmc-compile %s --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s
// CHECK: kernel launches:
// ARGS:
// C1: the mean of 2^28 float32 values, all 0.5, is 0.5 within 1e-5.
func.func @c1_long_mean_f32() -> tensor<f32> {
  %half = llm.constant dense<0.5> : tensor<1xf32>
  %x = llm.broadcast %half : tensor<1xf32> to tensor<268435456xf32>
  %m = llm.reduce_mean %x [0] : tensor<268435456xf32>
  return %m : tensor<f32>
}
