// Executables (and the C API's LLMC_MAX_RANK) hold tensors of rank <= 8: a
// rank-10 argument or result is a user error at lowering, not an executable
// that Executable::Validate refuses later as an internal error.
// RUN: rm -f %t.llmcx
// RUN: not llmc-compile %s --fn=arg10 -o %t.llmcx 2>&1 | FileCheck %s --check-prefix=ARG
// RUN: not llmc-compile %s --fn=result10 -o %t.llmcx 2>&1 | FileCheck %s --check-prefix=RES
// RUN: not test -e %t.llmcx
// The reference executor has no such limit.
// RUN: llmc-run %s --fn=arg10 --backend=ref | FileCheck %s --check-prefix=REF
// ARG: llmc-compile: error: cuda backend: argument 0 has rank 10; executables take tensors of rank at most 8
// RES: llmc-compile: error: cuda backend: result 0 has rank 9; executables return tensors of rank at most 8
// REF: result0: tensor<4x16xf32>
func.func @arg10(%x: tensor<1x1x1x1x1x1x1x2x2x16xf32>) -> tensor<4x16xf32> {
  %r = llm.reshape %x : tensor<1x1x1x1x1x1x1x2x2x16xf32> to tensor<4x16xf32>
  %z = llm.silu %r : tensor<4x16xf32>
  return %z : tensor<4x16xf32>
}
func.func @result10(%x: tensor<4x16xf32>) -> tensor<1x1x1x1x1x1x2x2x16xf32> {
  %z = llm.silu %x : tensor<4x16xf32>
  %r = llm.reshape %z : tensor<4x16xf32> to tensor<1x1x1x1x1x1x2x2x16xf32>
  return %r : tensor<1x1x1x1x1x1x2x2x16xf32>
}
