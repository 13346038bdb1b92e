// kv_len attention needs flash-decoding; when a mask is what keeps a
// configuration out of it (masked flash-decoding keeps at most 8 query rows
// per warp), the error says so instead of blaming the head dim or dtype.
// RUN: not llmc-compile %s --emit=exec 2>&1 | FileCheck %s
// CHECK: kv_len needs the flash-decoding kernel, which does not support a mask with group size x query length = 64 query rows per KV head (masked flash-decoding keeps at most 8 query rows per warp)
func.func @masked_gqa8_q8(%q: tensor<1x8x16x64xbf16>, %k: tensor<1x256x2x64xbf16>,
                          %len: tensor<i64>, %m: tensor<1x1x8x256xbf16>) -> tensor<1x8x16x64xbf16> {
  %o = llm.attention %q, %k, %k mask(%m : tensor<1x1x8x256xbf16>) kv_len(%len : tensor<i64>) {causal} : tensor<1x8x16x64xbf16>, tensor<1x256x2x64xbf16>, tensor<1x256x2x64xbf16>
  return %o : tensor<1x8x16x64xbf16>
}
