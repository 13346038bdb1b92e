// Reductions over any block of adjacent dimensions (issue 16): the weight
// gradients of RMSNorm and biases reduce over batch and sequence
// (sum(dy * x_hat, dims=[0, 1])). On the GPU, `llmc-run --check` compares
// every result with the float64 reference executor on fresh random inputs.
// RUN: llmc-compile %s --emit=exec | FileCheck %s
// ARGS:
//
// [0, 1] of [4, 512, 256] f32: 4 columns per thread (16-byte loads), 2048
// rows split 32 ways, fp32 partials in the arena, then the combine kernel.
// CHECK-LABEL: exec.executable @reduce_leading_dims
// CHECK:       %[[WS:.+]] = exec.buffer arena 32768 bytes
// CHECK:       %[[S:.+]] = exec.buffer output[0] 1024 bytes
// CHECK:       exec.launch @llmc_colreduce_sum_f32_f32_v4 grid [2, 32, 1] block [256, 1, 1] smem 0 (%[[S]][0], %[[WS]][0], %{{.+}}[0], 1 : i64, 2048 : i64, 256 : i64, 64 : i64) label "llm.reduce_sum"
// CHECK-NEXT:  exec.launch @llmc_colreduce_combine_sum_f32_f32 grid [1, 1, 1] block [256, 1, 1] smem 0 (%[[S]][0], %[[WS]][0], 256 : i64, 2048 : i64, 32 : i32) label "llm.reduce_sum"
// A middle dimension (outer 4): mean in bf16 with fp32 accumulation.
// CHECK:       exec.launch @llmc_colreduce_mean_bf16_bf16_v8 grid [4, 8, 1]
// CHECK-NEXT:  exec.launch @llmc_colreduce_combine_mean_bf16_bf16
// The last dimension: the row kernel, as before.
// CHECK:       exec.launch @llmc_rowreduce_max_bf16_bf16_n256
// Trailing dimensions [1, 2]: one row of 512 x 256 per batch, a row kernel.
// CHECK:       exec.launch @llmc_rowreduce_sum_f32_f32_n131072
// Dimensions of size 1 do not separate the reduced ones: [0, 2] of
// [64, 1, 96] is a column reduction of 64 rows, too few to split.
// CHECK:       exec.launch @llmc_colreduce_min_bf16_bf16_v8 grid [1, 1, 1]
// CHECK-NOT:   llmc_colreduce_combine_min
func.func @reduce_leading_dims(%dy: tensor<4x512x256xbf16>, %g: tensor<4x512x256xf32>,
                               %t: tensor<64x1x96xbf16>)
    -> (tensor<256xf32>, tensor<4x256xbf16>, tensor<4x512xbf16>, tensor<4xf32>, tensor<1x1x96xbf16>) {
  %s = llm.reduce_sum %g [0, 1] : tensor<4x512x256xf32>
  %m = llm.reduce_mean %dy [1] : tensor<4x512x256xbf16>
  %r = llm.reduce_max %dy [2] : tensor<4x512x256xbf16>
  %q = llm.reduce_sum %g [1, 2] : tensor<4x512x256xf32>
  %k = llm.reduce_min %t [0, 1] keepdim : tensor<64x1x96xbf16>
  return %s, %m, %r, %q, %k : tensor<256xf32>, tensor<4x256xbf16>, tensor<4x512xbf16>, tensor<4xf32>, tensor<1x1x96xbf16>
}
