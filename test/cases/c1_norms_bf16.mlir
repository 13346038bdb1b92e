// RUN: llmc-compile %s --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s
// CHECK: kernel launches: 2
// ARGS: --input arg0=@C1X@
// C1: RMSNorm and LayerNorm over [3, 7, 4096] in bf16, eps 1e-5. The input
// (scripts/gen-c1-inputs.py) has row block 0 ~ N(0, 1), block 1 scaled to
// |x| ~ 300 (the sum of squares overflows fp16), block 2 constant 1e-6
// (variance ~ eps). Norms accumulate in fp32, so every output is finite.
func.func @c1_norms_bf16(%x: tensor<3x7x4096xbf16>, %w: tensor<4096xbf16>, %b: tensor<4096xbf16>) -> (tensor<3x7x4096xbf16>, tensor<3x7x4096xbf16>) {
  %r = llm.rms_norm %x, %w {eps = 1.0e-05 : f64} : tensor<3x7x4096xbf16>, tensor<4096xbf16>
  %l = llm.layer_norm %x, %w, %b {eps = 1.0e-05 : f64} : tensor<3x7x4096xbf16>, tensor<4096xbf16>, tensor<4096xbf16>
  return %r, %l : tensor<3x7x4096xbf16>, tensor<3x7x4096xbf16>
}
