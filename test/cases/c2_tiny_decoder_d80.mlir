// RUN: llmc-compile %s --shape seq=129 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s
// CHECK: GEMMs: 8
// ARGS: --shape seq=5
// C2: tied-embedding decoder, hidden 200, 2 heads x 80, SwiGLU 536,
// vocab 50257, batch 3, bf16; f32 logits.
func.func @c2_tiny_decoder_d80(%tokens: tensor<3x?xi64> {llm.dim_names = ["seq"]},
    %wte: tensor<50257x200xbf16>, %n1: tensor<200xbf16>,
    %wq: tensor<160x200xbf16>, %wk: tensor<160x200xbf16>, %wv: tensor<160x200xbf16>,
    %wo: tensor<200x160xbf16>, %n2: tensor<200xbf16>,
    %wg: tensor<536x200xbf16>, %wu: tensor<536x200xbf16>, %wd: tensor<200x536xbf16>,
    %nf: tensor<200xbf16>) -> tensor<3x?x50257xf32> {
  %x = llm.gather %wte, %tokens axis = 0 : tensor<50257x200xbf16>, tensor<3x?xi64>
  %h = llm.rms_norm %x, %n1 : tensor<3x?x200xbf16>, tensor<200xbf16>
  %q = llm.matmul %h, %wq {transpose_rhs} : tensor<3x?x200xbf16>, tensor<160x200xbf16> -> tensor<3x?x160xbf16>
  %k = llm.matmul %h, %wk {transpose_rhs} : tensor<3x?x200xbf16>, tensor<160x200xbf16> -> tensor<3x?x160xbf16>
  %v = llm.matmul %h, %wv {transpose_rhs} : tensor<3x?x200xbf16>, tensor<160x200xbf16> -> tensor<3x?x160xbf16>
  %q4 = llm.reshape %q : tensor<3x?x160xbf16> to tensor<3x?x2x80xbf16>
  %k4 = llm.reshape %k : tensor<3x?x160xbf16> to tensor<3x?x2x80xbf16>
  %v4 = llm.reshape %v : tensor<3x?x160xbf16> to tensor<3x?x2x80xbf16>
  %qr = llm.rope %q4 half_split : tensor<3x?x2x80xbf16>
  %kr = llm.rope %k4 half_split : tensor<3x?x2x80xbf16>
  %a = llm.attention %qr, %kr, %v4 {causal} : tensor<3x?x2x80xbf16>, tensor<3x?x2x80xbf16>, tensor<3x?x2x80xbf16>
  %a2 = llm.reshape %a : tensor<3x?x2x80xbf16> to tensor<3x?x160xbf16>
  %o = llm.matmul %a2, %wo {transpose_rhs} : tensor<3x?x160xbf16>, tensor<200x160xbf16> -> tensor<3x?x200xbf16>
  %r1 = llm.add %x, %o : tensor<3x?x200xbf16>
  %h2 = llm.rms_norm %r1, %n2 : tensor<3x?x200xbf16>, tensor<200xbf16>
  %g = llm.matmul %h2, %wg {transpose_rhs} : tensor<3x?x200xbf16>, tensor<536x200xbf16> -> tensor<3x?x536xbf16>
  %u = llm.matmul %h2, %wu {transpose_rhs} : tensor<3x?x200xbf16>, tensor<536x200xbf16> -> tensor<3x?x536xbf16>
  %s = llm.silu %g : tensor<3x?x536xbf16>
  %m = llm.mul %s, %u : tensor<3x?x536xbf16>
  %dn = llm.matmul %m, %wd {transpose_rhs} : tensor<3x?x536xbf16>, tensor<200x536xbf16> -> tensor<3x?x200xbf16>
  %r2 = llm.add %r1, %dn : tensor<3x?x200xbf16>
  %hf = llm.rms_norm %r2, %nf : tensor<3x?x200xbf16>, tensor<200xbf16>
  %logits = llm.matmul %hf, %wte {transpose_rhs} : tensor<3x?x200xbf16>, tensor<50257x200xbf16> -> tensor<3x?x50257xf32>
  return %logits : tensor<3x?x50257xf32>
}
