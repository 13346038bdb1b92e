// fp8 with one scale per row of the LHS and per column of the RHS
// (--fp8-scaling=row): the kernels (row amax reductions, scaling casts, the
// row x column epilogue) compile with NVRTC for sm_90a and sm_89, the
// reference executor runs it, and a bad value or a policy other than fp8 is
// an error naming the flag.
// RUN: llmc-compile %s --precision=fp8 --fp8-scaling=row --arch=sm_90a --arch=sm_89 --print-stats -o %t.llmcx | FileCheck %s --check-prefix=STATS
// RUN: llmc-run %s --backend=ref --precision=fp8 --fp8-scaling=row --seed=3 | FileCheck %s --check-prefix=REF
// RUN: not llmc-run %s --backend=ref --precision=fp8 --fp8-scaling=rows 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not llmc-compile %s --precision=bf16 --fp8-scaling=row -o %t.bf16.llmcx 2>&1 | FileCheck %s --check-prefix=POLICY
// RUN: not llmc-run %s --backend=ref --precision=bf16 --fp8-scaling=row 2>&1 | FileCheck %s --check-prefix=POLICY
// STATS: GEMMs: 1
// REF: result0: tensor<96x64xbf16> checksum
// BAD: --fp8-scaling: expected tensor or row, found 'rows'
// POLICY: fp8-scaling=row needs precision=fp8, found precision=bf16
func.func @linear(%x: tensor<96x128xbf16>, %w: tensor<64x128xbf16>) -> tensor<96x64xbf16> {
  %y = llm.matmul %x, %w {transpose_rhs} : tensor<96x128xbf16>, tensor<64x128xbf16> -> tensor<96x64xbf16>
  return %y : tensor<96x64xbf16>
}
