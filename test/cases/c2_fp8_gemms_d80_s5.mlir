// RUN: llmc-compile %s --precision=fp8 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s
// CHECK: GEMMs: 5
// ARGS: --precision=fp8
// C2 under fp8: the tiny decoder's GEMMs with M = 3 x 5 = 15, head dim 80
// (2 heads), SwiGLU 536, LM head tied to the [50257, 200] embedding; bf16
// operands, per-tensor scaled e4m3 on the GPU, padded to multiples of 32.
func.func @c2_fp8_gemms_d80_s5(%x: tensor<3x5x200xbf16>, %a: tensor<3x5x160xbf16>, %m: tensor<3x5x536xbf16>,
    %wq: tensor<160x200xbf16>, %wo: tensor<200x160xbf16>,
    %wg: tensor<536x200xbf16>, %wd: tensor<200x536xbf16>,
    %wte: tensor<50257x200xbf16>) -> (tensor<3x5x160xbf16>, tensor<3x5x200xbf16>, tensor<3x5x536xbf16>, tensor<3x5x200xbf16>, tensor<3x5x50257xf32>) {
  %q = llm.matmul %x, %wq {transpose_rhs} : tensor<3x5x200xbf16>, tensor<160x200xbf16> -> tensor<3x5x160xbf16>
  %o = llm.matmul %a, %wo {transpose_rhs} : tensor<3x5x160xbf16>, tensor<200x160xbf16> -> tensor<3x5x200xbf16>
  %g = llm.matmul %x, %wg {transpose_rhs} : tensor<3x5x200xbf16>, tensor<536x200xbf16> -> tensor<3x5x536xbf16>
  %dn = llm.matmul %m, %wd {transpose_rhs} : tensor<3x5x536xbf16>, tensor<200x536xbf16> -> tensor<3x5x200xbf16>
  %logits = llm.matmul %x, %wte {transpose_rhs} : tensor<3x5x200xbf16>, tensor<50257x200xbf16> -> tensor<3x5x50257xf32>
  return %q, %o, %g, %dn, %logits : tensor<3x5x160xbf16>, tensor<3x5x200xbf16>, tensor<3x5x536xbf16>, tensor<3x5x200xbf16>, tensor<3x5x50257xf32>
}
