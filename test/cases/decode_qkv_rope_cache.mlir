// A decode step's q, k and v from one fused QKV projection output, as
// gpt-fast writes it (issue 17): k rotated by RoPE tables and written into
// its [B, H, Smax, D] cache at the position, v written into its cache, q
// rotated with the same tables (GQA: twice k's heads), then attention over
// both caches. llmc-form-kernels puts the q RoPE, the k RoPE + cache write
// and the v cache write in one launch (rope_cache_write with q and v);
// at B = 2 the q, k and v slices are strided and copied first. On the GPU,
// `llmc-run --check` compares the attention output and both caches with
// the float64 reference executor (random positions in [0, 7]).
// RUN: llmc-compile %s --emit=exec | FileCheck %s
// ARGS:
//
// CHECK-LABEL: exec.executable @decode_qkv
// CHECK:       exec.launch @llmc_rope_table_bf16_tabf32_h2_d64_half_cachewrite_i64_q4_v grid [2, 3, 1]
// CHECK-NOT:   llmc_index_copy
// CHECK-NOT:   exec.launch @llmc_rope_table
// CHECK:       exec.launch @llmc_flashdec_split
func.func @decode_qkv(%qkv: tensor<2x1x512xbf16>, %c: tensor<1x64xf32>, %s: tensor<1x64xf32>,
                      %kc: tensor<2x2x64x64xbf16> {llm.donate}, %vc: tensor<2x2x64x64xbf16> {llm.donate},
                      %pos: tensor<1xi64>) -> (tensor<2x1x4x64xbf16>, tensor<2x2x64x64xbf16>, tensor<2x2x64x64xbf16>) {
  %k0 = llm.slice %qkv [0, 0, 256] to [2, 1, 384] step [1, 1, 1] : tensor<2x1x512xbf16>
  %k1 = llm.reshape %k0 : tensor<2x1x128xbf16> to tensor<2x1x2x64xbf16>
  %kr = llm.rope %k1 cos(%c : tensor<1x64xf32>) sin(%s : tensor<1x64xf32>) half_split : tensor<2x1x2x64xbf16>
  %kt = llm.transpose %kr [0, 2, 1, 3] : tensor<2x1x2x64xbf16>
  %kw = llm.index_put %kc[%pos], %kt dim = 2 : tensor<2x2x64x64xbf16>, tensor<1xi64>, tensor<2x2x1x64xbf16>
  %v0 = llm.slice %qkv [0, 0, 384] to [2, 1, 512] step [1, 1, 1] : tensor<2x1x512xbf16>
  %v1 = llm.reshape %v0 : tensor<2x1x128xbf16> to tensor<2x1x2x64xbf16>
  %vt = llm.transpose %v1 [0, 2, 1, 3] : tensor<2x1x2x64xbf16>
  %vw = llm.index_put %vc[%pos], %vt dim = 2 : tensor<2x2x64x64xbf16>, tensor<1xi64>, tensor<2x2x1x64xbf16>
  %q0 = llm.slice %qkv [0, 0, 0] to [2, 1, 256] step [1, 1, 1] : tensor<2x1x512xbf16>
  %q1 = llm.reshape %q0 : tensor<2x1x256xbf16> to tensor<2x1x4x64xbf16>
  %qr = llm.rope %q1 cos(%c : tensor<1x64xf32>) sin(%s : tensor<1x64xf32>) half_split : tensor<2x1x4x64xbf16>
  %o = llm.attention %qr, %kw, %vw {kv_hnd} : tensor<2x1x4x64xbf16>, tensor<2x2x64x64xbf16>, tensor<2x2x64x64xbf16>
  return %o, %kw, %vw : tensor<2x1x4x64xbf16>, tensor<2x2x64x64xbf16>, tensor<2x2x64x64xbf16>
}
