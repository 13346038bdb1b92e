// RoPE written straight into a KV cache (llmc-form-kernels' rope_cache_write):
// one launch of the RoPE table kernel's cache-write variant, storing token
// (b, s) of head h at cache row index[s] through the cache's (b, row, h)
// strides -- here a [B, H, S, D] cache through gpt-fast's transpose, with
// B = 2 and H = 4 so every stride is distinct: out_b = 4*16*64,
// out_row = 64, out_h = 16*64. A RoPE of no tokens writes nothing: no
// launch at all, as the unfused ops.
// RUN: llmc-compile %s --emit=exec | FileCheck %s
// RUN: llmc-compile %s --fn=empty --emit=exec | FileCheck %s --check-prefix=EMPTY

// CHECK-LABEL: exec.executable @decode_k
// CHECK:     %[[CACHE:b[0-9]+]] = exec.buffer input[3] 16384 bytes
// CHECK-NOT: exec.launch
// CHECK:     exec.launch @llmc_rope_table_bf16_tabf32_h4_d64_half_cachewrite_i64 grid [2, 1, 1] {{.*}}(%[[CACHE]][0], {{.*}}, 2 : i64, 1 : i64, 0 : i64, %{{b[0-9]+}}[0], 16 : i64, 4096 : i64, 64 : i64, 1024 : i64) label "llm.index_put"
// CHECK-NOT: exec.launch
func.func @decode_k(%k: tensor<2x1x4x64xbf16>, %c: tensor<1x64xf32>, %s: tensor<1x64xf32>,
                    %cache: tensor<2x4x16x64xbf16> {llm.donate}, %pos: tensor<1xi64>) -> tensor<2x4x16x64xbf16> {
  %kr = llm.rope %k cos(%c : tensor<1x64xf32>) sin(%s : tensor<1x64xf32>) half_split : tensor<2x1x4x64xbf16>
  %kt = llm.transpose %kr [0, 2, 1, 3] : tensor<2x1x4x64xbf16>
  %w = llm.index_put %cache[%pos], %kt dim = 2 : tensor<2x4x16x64xbf16>, tensor<1xi64>, tensor<2x4x1x64xbf16>
  return %w : tensor<2x4x16x64xbf16>
}

// EMPTY-LABEL: exec.executable @empty
// EMPTY-NOT: exec.launch
func.func @empty(%kp: tensor<2x0x4x64xbf16>, %c3: tensor<0x64xf32>, %s3: tensor<0x64xf32>,
                 %cache: tensor<2x128x4x64xbf16> {llm.donate}, %pos3: tensor<0xi64>) -> tensor<2x128x4x64xbf16> {
  %pr = llm.rope %kp cos(%c3 : tensor<0x64xf32>) sin(%s3 : tensor<0x64xf32>) half_split : tensor<2x0x4x64xbf16>
  %w = llm.index_put %cache[%pos3], %pr dim = 1 : tensor<2x128x4x64xbf16>, tensor<0xi64>, tensor<2x0x4x64xbf16>
  return %w : tensor<2x128x4x64xbf16>
}
