// RUN: llmc-compile %s --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s
// CHECK: kernel launches:
// ARGS: --value arg4=299
// C3: one decode step at position 299: RoPE at offset 299, append K/V to a
// 300-row cache, attend the 300 valid rows (kv_len = pos + 1).
func.func @c3_decode_h32_kv8_d80_f32(%q: tensor<1x1x32x80xf32>, %k: tensor<1x1x8x80xf32>, %kc: tensor<1x300x8x80xf32>, %vc: tensor<1x300x8x80xf32>, %pos: tensor<i64>) -> tensor<1x1x32x80xf32> {
  %one = llm.constant dense<1> : tensor<i64>
  %len = llm.add %pos, %one : tensor<i64>
  %qr = llm.rope %q offset %pos half_split : tensor<1x1x32x80xf32>, tensor<i64>
  %kr = llm.rope %k offset %pos half_split : tensor<1x1x8x80xf32>, tensor<i64>
  %kc2 = llm.kv_cache_append %kc, %kr, %pos : tensor<1x300x8x80xf32>, tensor<1x1x8x80xf32>, tensor<i64>
  %vc2 = llm.kv_cache_append %vc, %k, %pos : tensor<1x300x8x80xf32>, tensor<1x1x8x80xf32>, tensor<i64>
  %o = llm.attention %qr, %kc2, %vc2 kv_len(%len : tensor<i64>) {causal} : tensor<1x1x32x80xf32>, tensor<1x300x8x80xf32>, tensor<1x300x8x80xf32>
  return %o : tensor<1x1x32x80xf32>
}
