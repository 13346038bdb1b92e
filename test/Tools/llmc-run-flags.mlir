// llmc-run flag combinations that are refused before anything runs.
// RUN: not llmc-run %s --backend=ref --weight-only=int8 --precision=fp8 2>&1 | FileCheck %s --check-prefix=WOFP8
// RUN: not llmc-run %s --backend=ref --weight-only=int2 2>&1 | FileCheck %s --check-prefix=WOBITS
// RUN: env LLMC_EW_UNROLL=2abc not llmc-compile %s -o %t.llmcx 2>&1 | FileCheck %s --check-prefix=UNROLL
// RUN: not test -e %t.llmcx
// WOFP8: error: --weight-only=int8 cannot be combined with --precision=fp8
// WOBITS: error: --weight-only: expected none, int8 or int4, found 'int2'
// UNROLL: environment variable LLMC_EW_UNROLL: expected 1, 2, 3 or 4, found '2abc'
func.func @f(%x: tensor<4x128xf32>, %w: tensor<64x128xf32>) -> tensor<4x64xf32> {
  %y = llm.matmul %x, %w {transpose_rhs} : tensor<4x128xf32>, tensor<64x128xf32> -> tensor<4x64xf32>
  %z = llm.silu %y : tensor<4x64xf32>
  return %z : tensor<4x64xf32>
}
