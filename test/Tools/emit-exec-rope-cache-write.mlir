// RoPE written straight into a KV cache (llmc-form-kernels' rope_cache_write):
// one launch of the RoPE table kernel's cache-write variant, storing token
// (b, s) of head h at cache row index[s] through the cache's (b, row, h)
// strides -- here a [B, H, S, D] cache through gpt-fast's transpose, with
// B = 2 and H = 4 so every stride is distinct: out_b = 4*16*64,
// out_row = 64, out_h = 16*64. A RoPE of no tokens writes nothing: no
// launch at all, as the unfused ops.
// RUN: llmc-compile %s --emit=exec | FileCheck %s
// RUN: llmc-compile %s --fn=empty --emit=exec | FileCheck %s --check-prefix=EMPTY
// RUN: llmc-compile %s --fn=decode_qkv --emit=exec | FileCheck %s --check-prefix=QKV
// RUN: llmc-compile %s --fn=empty_cache --emit=exec | FileCheck %s --check-prefix=EMPTY-CACHE

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

// q, k and v of a decode step from one fused QKV output in one launch
// (blockIdx.y: k, q, v): k rotated into its cache, q rotated into a dense
// buffer, v copied into its cache; the three slices are read in place
// (q at byte 0, k at 512, v at 768 of the QKV buffer).
// QKV-LABEL: exec.executable @decode_qkv
// QKV:     %[[QKV:b[0-9]+]] = exec.buffer input[0] 1024 bytes
// QKV:     %[[KC:b[0-9]+]] = exec.buffer input[3] 32768 bytes
// QKV:     %[[VC:b[0-9]+]] = exec.buffer input[4] 32768 bytes
// QKV-NOT: exec.launch
// QKV:     exec.launch @llmc_rope_table_bf16_tabbf16_h2_d64_half_cachewrite_i64_q4_v grid [1, 3, 1] {{.*}}(%[[KC]][0], %[[QKV]][512], {{.*}}, 128 : i64, 0 : i64, 64 : i64, 8192 : i64, %[[Q:b[0-9]+]][0], %[[QKV]][0], %[[VC]][0], %[[QKV]][768]) label "llm.rope"
// QKV:     exec.launch @llmc_flashdec_split
// QKV-SAME: %[[Q]][0], %[[KC]][0], %[[VC]][0]
func.func @decode_qkv(%qkv: tensor<1x1x512xbf16>, %c: tensor<1x1x64xbf16>, %s: tensor<1x1x64xbf16>,
                      %kc: tensor<1x2x128x64xbf16> {llm.donate}, %vc: tensor<1x2x128x64xbf16> {llm.donate},
                      %pos: tensor<1xi64>) -> (tensor<1x1x4x64xbf16>, tensor<1x2x128x64xbf16>, tensor<1x2x128x64xbf16>) {
  %k0 = llm.slice %qkv [0, 0, 256] to [1, 1, 384] step [1, 1, 1] : tensor<1x1x512xbf16>
  %k1 = llm.reshape %k0 : tensor<1x1x128xbf16> to tensor<1x1x2x64xbf16>
  %kr = llm.rope %k1 cos(%c : tensor<1x1x64xbf16>) sin(%s : tensor<1x1x64xbf16>) half_split : tensor<1x1x2x64xbf16>
  %kt = llm.transpose %kr [0, 2, 1, 3] : tensor<1x1x2x64xbf16>
  %kw = llm.index_put %kc[%pos], %kt dim = 2 : tensor<1x2x128x64xbf16>, tensor<1xi64>, tensor<1x2x1x64xbf16>
  %v0 = llm.slice %qkv [0, 0, 384] to [1, 1, 512] step [1, 1, 1] : tensor<1x1x512xbf16>
  %v1 = llm.reshape %v0 : tensor<1x1x128xbf16> to tensor<1x1x2x64xbf16>
  %vt = llm.transpose %v1 [0, 2, 1, 3] : tensor<1x1x2x64xbf16>
  %vw = llm.index_put %vc[%pos], %vt dim = 2 : tensor<1x2x128x64xbf16>, tensor<1xi64>, tensor<1x2x1x64xbf16>
  %q0 = llm.slice %qkv [0, 0, 0] to [1, 1, 256] step [1, 1, 1] : tensor<1x1x512xbf16>
  %q1 = llm.reshape %q0 : tensor<1x1x256xbf16> to tensor<1x1x4x64xbf16>
  %qr = llm.rope %q1 cos(%c : tensor<1x1x64xbf16>) sin(%s : tensor<1x1x64xbf16>) half_split : tensor<1x1x4x64xbf16>
  %o = llm.attention %qr, %kw, %vw {kv_hnd} : tensor<1x1x4x64xbf16>, tensor<1x2x128x64xbf16>, tensor<1x2x128x64xbf16>
  return %o, %kw, %vw : tensor<1x1x4x64xbf16>, tensor<1x2x128x64xbf16>, tensor<1x2x128x64xbf16>
}

// A cache of no rows is never written (its index_put launches nothing), so
// no group forms around it: q is still rotated by a launch of its own, and
// the neg reads what that launch wrote.
// EMPTY-CACHE-LABEL: exec.executable @empty_cache
// EMPTY-CACHE:     exec.launch @llmc_rope_table_bf16_tabbf16_h4_d64_half grid [1, 1, 1] {{.*}}(%[[Q:b[0-9]+]][0], {{.*}}label "llm.rope"
// EMPTY-CACHE:     exec.launch @llmc_ew_{{[0-9a-f]+}} {{.*}}%[[Q]][0]{{.*}}label "llm.neg"
func.func @empty_cache(%q: tensor<1x1x4x64xbf16>, %k: tensor<1x1x2x64xbf16>, %c: tensor<1x1x64xbf16>, %s: tensor<1x1x64xbf16>,
                       %kc: tensor<1x2x0x64xbf16> {llm.donate}, %pos: tensor<1xi64>) -> (tensor<1x1x4x64xbf16>, tensor<1x2x0x64xbf16>) {
  %kr = llm.rope %k cos(%c : tensor<1x1x64xbf16>) sin(%s : tensor<1x1x64xbf16>) half_split : tensor<1x1x2x64xbf16>
  %qr = llm.rope %q cos(%c : tensor<1x1x64xbf16>) sin(%s : tensor<1x1x64xbf16>) half_split : tensor<1x1x4x64xbf16>
  %kt = llm.transpose %kr [0, 2, 1, 3] : tensor<1x1x2x64xbf16>
  %kw = llm.index_put %kc[%pos], %kt dim = 2 : tensor<1x2x0x64xbf16>, tensor<1xi64>, tensor<1x2x1x64xbf16>
  %n = llm.neg %qr : tensor<1x1x4x64xbf16>
  return %n, %kw : tensor<1x1x4x64xbf16>, tensor<1x2x0x64xbf16>
}
