// gpt-fast decode (issue 17): SDPA over the KV cache as gpt-fast keeps it,
// [B, H, Smax, D], under a position mask over the whole cache. llmc-raise
// folds the importer's key/value transposes into attention (kv_hnd), so no
// transposed copy of the cache is made; the cache writes are in place
// (donated); flash-decoding reads the mask and loads only the keys some
// query row sees (llmc-run's random positions are in [0, 7], so most of the
// cache is masked). A prefill chunk of 5 queries over the same cache under a
// random additive mask takes FlashAttention-2 reading HND. On the GPU,
// `llmc-run --check` compares every result with the float64 reference
// executor.
// RUN: llmc-compile %s --emit=exec | FileCheck %s
// RUN: llmc-compile %s --emit=exec --flash-decode-combine=fused | FileCheck %s --check-prefix=FUSED
// ARGS:
//
// A combine kernel merges the flash-decoding splits (the default).
// CHECK-LABEL: exec.executable @gpt_fast_decode
// CHECK-NOT:   llmc_transpose
// CHECK-NOT:   exec.prepare
// CHECK-NOT:   exec.copy
// CHECK:       exec.launch @llmc_flashdec_split_bf16_d64_g4_q1_lenarg_maskbf16_hnd_
// CHECK-NEXT:  exec.launch @llmc_flashdec_combine_bf16_d64_g4_q1_lenarg_maskbf16_hnd
// CHECK:       exec.launch @llmc_flash_attn_bf16_d64_maskbf16_hnd_
//
// --flash-decode-combine=fused: the split kernel merges its splits itself
// (its last block per batch and kv head, counted on semaphores the
// preparation zeroes once).
// FUSED-LABEL: exec.executable @gpt_fast_decode
// FUSED-NOT:   llmc_transpose
// FUSED:       exec.prepare {
// FUSED-NEXT:    exec.copy 16 bytes from {{.*}} label "semaphores"
// FUSED-NEXT:  }
// FUSED-NOT:   exec.copy
// FUSED:       exec.launch @llmc_flashdec_split_bf16_d64_g4_q1_lenarg_maskbf16_hnd_fused_
// FUSED-NOT:   llmc_flashdec_combine
// FUSED:       exec.launch @llmc_flash_attn_bf16_d64_maskbf16_hnd_
func.func @gpt_fast_decode(%kc: tensor<2x2x256x64xbf16> {llm.donate}, %vc: tensor<2x2x256x64xbf16> {llm.donate},
                           %pos: tensor<1xi64>, %q: tensor<2x1x8x64xbf16>,
                           %k: tensor<2x2x1x64xbf16>, %v: tensor<2x2x1x64xbf16>,
                           %q5: tensor<2x5x8x64xbf16>, %m5: tensor<1x1x5x256xbf16>)
    -> (tensor<2x1x8x64xbf16>, tensor<2x5x8x64xbf16>, tensor<2x2x256x64xbf16>, tensor<2x2x256x64xbf16>) {
  %kc1 = llm.index_put %kc[%pos], %k dim = 2 : tensor<2x2x256x64xbf16>, tensor<1xi64>, tensor<2x2x1x64xbf16>
  %vc1 = llm.index_put %vc[%pos], %v dim = 2 : tensor<2x2x256x64xbf16>, tensor<1xi64>, tensor<2x2x1x64xbf16>
  %keys = llm.constant dense<[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127, 128, 129, 130, 131, 132, 133, 134, 135, 136, 137, 138, 139, 140, 141, 142, 143, 144, 145, 146, 147, 148, 149, 150, 151, 152, 153, 154, 155, 156, 157, 158, 159, 160, 161, 162, 163, 164, 165, 166, 167, 168, 169, 170, 171, 172, 173, 174, 175, 176, 177, 178, 179, 180, 181, 182, 183, 184, 185, 186, 187, 188, 189, 190, 191, 192, 193, 194, 195, 196, 197, 198, 199, 200, 201, 202, 203, 204, 205, 206, 207, 208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222, 223, 224, 225, 226, 227, 228, 229, 230, 231, 232, 233, 234, 235, 236, 237, 238, 239, 240, 241, 242, 243, 244, 245, 246, 247, 248, 249, 250, 251, 252, 253, 254, 255]> : tensor<256xi64>
  %posb = llm.broadcast %pos : tensor<1xi64> to tensor<256xi64>
  %vis = llm.compare le, %keys, %posb : tensor<256xi64>
  %zero = llm.constant dense<0.0> : tensor<256xbf16>
  %ninf = llm.constant dense<0xFF80> : tensor<256xbf16>
  %m = llm.select %vis, %zero, %ninf : tensor<256xi1>, tensor<256xbf16>
  %m4 = llm.reshape %m : tensor<256xbf16> to tensor<1x1x1x256xbf16>
  %kt = llm.transpose %kc1 [0, 2, 1, 3] : tensor<2x2x256x64xbf16>
  %vt = llm.transpose %vc1 [0, 2, 1, 3] : tensor<2x2x256x64xbf16>
  %o = llm.attention %q, %kt, %vt mask(%m4 : tensor<1x1x1x256xbf16>) : tensor<2x1x8x64xbf16>, tensor<2x256x2x64xbf16>, tensor<2x256x2x64xbf16>
  %o5 = llm.attention %q5, %kt, %vt mask(%m5 : tensor<1x1x5x256xbf16>) : tensor<2x5x8x64xbf16>, tensor<2x256x2x64xbf16>, tensor<2x256x2x64xbf16>
  return %o, %o5, %kc1, %vc1 : tensor<2x1x8x64xbf16>, tensor<2x5x8x64xbf16>, tensor<2x2x256x64xbf16>, tensor<2x2x256x64xbf16>
}
