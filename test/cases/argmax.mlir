// llm.argmax (issue 17): the greedy token of a decode step over a 32000
// vocabulary (f32 logits, 4 sequences), and bf16 rows short enough to tie
// (the first maximum wins, as torch.argmax). On the GPU, `llmc-run --check`
// compares the indices with the reference executor.
// RUN: llmc-compile %s --emit=exec | FileCheck %s
// ARGS:
//
// CHECK-LABEL: exec.executable @argmax
// CHECK: exec.launch @llmc_argmax_f32_n32000 grid [4, 1, 1] block [256, 1, 1] smem 0 ({{.*}}, 4 : i64) label "llm.argmax"
// CHECK: exec.launch @llmc_argmax_bf16_n7 grid [6, 1, 1] block [32, 1, 1]
func.func @argmax(%logits: tensor<4x32000xf32>, %y: tensor<2x3x7xbf16>)
    -> (tensor<4xi64>, tensor<2x3x1xi64>) {
  %t = llm.argmax %logits dim = 1 : tensor<4x32000xf32>
  %a = llm.argmax %y dim = 2 keepdim : tensor<2x3x7xbf16>
  return %t, %a : tensor<4xi64>, tensor<2x3x1xi64>
}
