// llm.rope with cos/sin tables (HF apply_rotary_pos_emb) lowers to one
// llmc_rope_table kernel per rope, compiled by NVRTC for sm_90a.
// RUN: llmc-compile %s --fn=hf_llama --emit-cuda --print-stats | FileCheck %s --check-prefix=LLAMA
// RUN: llmc-compile %s --fn=per_batch_interleaved --emit-cuda --print-stats | FileCheck %s --check-prefix=PB
// RUN: llmc-compile %s --fn=broadcast_table --print-stats | FileCheck %s --check-prefix=BCAST
// RUN: llmc-compile %s --fn=hf_llama --arch=sm_80 -o %t.llmcx

// LLaMA-2-7B shapes at batch 4 x 2048: bf16 q and k, one bf16 table for the
// batch (GQA: 32 query heads, 8 KV heads). Two launches, no copies.
// LLAMA: ===== kernel llmc_rope_table_bf16_tabbf16_h32_d128_half
// LLAMA: HF apply_rotary_pos_emb
// LLAMA: ===== kernel llmc_rope_table_bf16_tabbf16_h8_d128_half
// LLAMA-NOT: ===== kernel
// LLAMA: kernel launches: 2
func.func @hf_llama(%q: tensor<4x2048x32x128xbf16>, %k: tensor<4x2048x8x128xbf16>, %cos: tensor<1x2048x128xbf16>, %sin: tensor<1x2048x128xbf16>) -> (tensor<4x2048x32x128xbf16>, tensor<4x2048x8x128xbf16>) {
  %qr = llm.rope %q cos(%cos : tensor<1x2048x128xbf16>) sin(%sin : tensor<1x2048x128xbf16>) half_split : tensor<4x2048x32x128xbf16>
  %kr = llm.rope %k cos(%cos : tensor<1x2048x128xbf16>) sin(%sin : tensor<1x2048x128xbf16>) half_split : tensor<4x2048x8x128xbf16>
  return %qr, %kr : tensor<4x2048x32x128xbf16>, tensor<4x2048x8x128xbf16>
}

// f32 x, one f32 table per batch (position_ids differ per sequence), GPT-J pairs.
// PB: ===== kernel llmc_rope_table_f32_tabf32_h4_d64_interleaved
// PB: kernel launches: 1
func.func @per_batch_interleaved(%x: tensor<2x7x4x64xf32>, %cos: tensor<2x7x64xf32>, %sin: tensor<2x7x64xf32>) -> tensor<2x7x4x64xf32> {
  %y = llm.rope %x cos(%cos : tensor<2x7x64xf32>) sin(%sin : tensor<2x7x64xf32>) interleaved : tensor<2x7x4x64xf32>
  return %y : tensor<2x7x4x64xf32>
}

// Tables broadcast over the batch are read in place (stride 0), not copied.
// BCAST: kernel launches: 1
func.func @broadcast_table(%x: tensor<3x7x4x64xbf16>, %c: tensor<7x64xf32>, %s: tensor<7x64xf32>) -> tensor<3x7x4x64xbf16> {
  %cb = llm.broadcast %c : tensor<7x64xf32> to tensor<3x7x64xf32>
  %sb = llm.broadcast %s : tensor<7x64xf32> to tensor<3x7x64xf32>
  %y = llm.rope %x cos(%cb : tensor<3x7x64xf32>) sin(%sb : tensor<3x7x64xf32>) half_split : tensor<3x7x4x64xbf16>
  return %y : tensor<3x7x4x64xbf16>
}
