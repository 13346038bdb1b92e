// Position-indexed gathers of a decode step (issue 17): the RoPE tables and
// the causal-mask rows at the positions (`cos[input_pos]`,
// `mask[None, None, input_pos]` in gpt-fast-style models), llm.gather along
// an axis with only dimensions of size 1 before it. On the GPU,
// `llmc-run --check` compares the results with the reference executor
// (llmc-run's random positions are in [0, 7]).
// RUN: llmc-compile %s --emit=exec | FileCheck %s
// ARGS:
//
// CHECK-LABEL: exec.executable @position_gathers
// CHECK:       exec.launch @llmc_gather_f32_i64_d64 grid [2, 1, 1] {{.*}} 2 : i64, 16 : i64)
// CHECK:       exec.launch @llmc_gather_i1_i64_d16 grid [2, 1, 1] {{.*}} 2 : i64, 16 : i64)
func.func @position_gathers(%cos: tensor<16x64xf32>, %mask: tensor<1x1x16x16xi1>, %pos: tensor<2xi64>)
    -> (tensor<2x64xf32>, tensor<1x1x2x16xf32>) {
  %c = llm.gather %cos, %pos axis = 0 : tensor<16x64xf32>, tensor<2xi64>
  %m = llm.gather %mask, %pos axis = 2 : tensor<1x1x16x16xi1>, tensor<2xi64>
  %z = llm.constant dense<0.0> : tensor<1x1x2x16xf32>
  %ninf = llm.constant dense<0xFF800000> : tensor<1x1x2x16xf32>
  %b = llm.select %m, %z, %ninf : tensor<1x1x2x16xi1>, tensor<1x1x2x16xf32>
  return %c, %b : tensor<2x64xf32>, tensor<1x1x2x16xf32>
}
