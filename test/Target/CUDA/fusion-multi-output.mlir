// Multi-output elementwise fusion: a producer whose result is used again
// after its consumer joins the consumer's kernel, which writes both results;
// a producer read (directly or through a view) before the consumer's kernel
// would run stays a kernel of its own.
// RUN: llmc-compile %s --fn=written_too --print-stats | FileCheck %s --check-prefix=WRITTEN
// RUN: llmc-compile %s --fn=written_too --emit=exec | FileCheck %s --check-prefix=WRITTEN-EXEC
// RUN: llmc-compile %s --fn=read_between --print-stats | FileCheck %s --check-prefix=BETWEEN
// RUN: llmc-compile %s --fn=view_read_between --print-stats | FileCheck %s --check-prefix=VIEW
// RUN: llmc-compile %s --fn=view_read_between --emit=exec | FileCheck %s --check-prefix=VIEW-EXEC

// exp is used by neg (same kernel) and returned: one kernel, two outputs.
// WRITTEN: kernel launches: 1 (1 distinct kernels)
// WRITTEN-EXEC: exec.launch @llmc_ew_{{[0-9a-f]+}} {{.*}}(%[[E:b[0-9]+]][0], %[[N:b[0-9]+]][0], %{{b[0-9]+}}[0], {{.*}}label "llm.mul"
// WRITTEN-EXEC-NOT: exec.launch
func.func @written_too(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %e = llm.exp %x : tensor<4x8xf32>
  %n = llm.neg %e : tensor<4x8xf32>
  %m = llm.mul %n, %y : tensor<4x8xf32>
  return %e, %m : tensor<4x8xf32>, tensor<4x8xf32>
}

// The row sum reads exp before neg: exp's kernel must run first (3 kernels:
// exp, the sum, neg * y).
// BETWEEN: kernel launches: 3
func.func @read_between(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>) {
  %e = llm.exp %x : tensor<4x8xf32>
  %s = llm.reduce_sum %e [1] keepdim : tensor<4x8xf32>
  %n = llm.neg %e : tensor<4x8xf32>
  %m = llm.mul %n, %y : tensor<4x8xf32>
  return %m, %s : tensor<4x8xf32>, tensor<4x1xf32>
}

// The same through views of exp (reshape, transpose, reshape) read by the
// sum before neg: exp, the transpose's copy, the sum, neg * y.
// VIEW: kernel launches: 4
// VIEW-EXEC: exec.launch {{.*}}label "llm.exp"
// VIEW-EXEC: exec.launch {{.*}}label "llm.reduce_sum"
// VIEW-EXEC: exec.launch {{.*}}label "llm.mul"
func.func @view_read_between(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>) {
  %e = llm.exp %x : tensor<4x8xf32>
  %r = llm.reshape %e : tensor<4x8xf32> to tensor<4x2x4xf32>
  %t = llm.transpose %r [0, 2, 1] : tensor<4x2x4xf32>
  %r2 = llm.reshape %t : tensor<4x4x2xf32> to tensor<4x8xf32>
  %s = llm.reduce_sum %r2 [1] keepdim : tensor<4x8xf32>
  %n = llm.neg %e : tensor<4x8xf32>
  %m = llm.mul %n, %y : tensor<4x8xf32>
  return %m, %s : tensor<4x8xf32>, tensor<4x1xf32>
}
