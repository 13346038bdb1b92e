// Multi-output elementwise fusion: a producer whose result is used again
// after its consumer joins the consumer's kernel, which writes both results;
// a producer read (directly or through a view) before the consumer's kernel
// would run stays a kernel of its own.
// RUN: llmc-compile %s --fn=written_too --print-stats | FileCheck %s --check-prefix=WRITTEN
// RUN: llmc-compile %s --fn=written_too --emit=exec | FileCheck %s --check-prefix=WRITTEN-EXEC
// RUN: llmc-compile %s --fn=read_between --print-stats | FileCheck %s --check-prefix=BETWEEN
// RUN: llmc-compile %s --fn=view_read_between --print-stats | FileCheck %s --check-prefix=VIEW
// RUN: llmc-compile %s --fn=view_read_between --emit=exec | FileCheck %s --check-prefix=VIEW-EXEC
// RUN: llmc-compile %s --fn=silu_backward --print-stats | FileCheck %s --check-prefix=DAG
// RUN: llmc-compile %s --fn=dag_read_between --print-stats | FileCheck %s --check-prefix=DAG-BETWEEN

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

// The row sum reads exp before neg: as elementwise kernels exp's would have
// to run first (3 kernels: exp, the sum, neg * y); the row kernel of the
// sum (llmc-form-kernels' row_reduction) computes all three and writes %m
// and %s.
// BETWEEN: kernel launches: 1 (1 distinct kernels)
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

// SiLU's backward as AOTAutograd decomposes it, grad * sigmoid(x) * (1 + x *
// (1 - sigmoid(x))) in f32: the sigmoid (and x) are read by two chains that
// meet at the last multiply. The chains are two kernels until that multiply
// joins both: one kernel for the whole DAG.
// DAG: kernel launches: 1 (1 distinct kernels)
func.func @silu_backward(%g: tensor<4x40xbf16>, %x: tensor<4x40xbf16>) -> tensor<4x40xbf16> {
  %one = llm.constant dense<1.0> : tensor<f32>
  %gf = llm.cast %g : tensor<4x40xbf16> to tensor<4x40xf32>
  %xf = llm.cast %x : tensor<4x40xbf16> to tensor<4x40xf32>
  %sig = llm.sigmoid %xf : tensor<4x40xf32>
  %a = llm.mul %gf, %sig : tensor<4x40xf32>
  %ones = llm.broadcast %one : tensor<f32> to tensor<4x40xf32>
  %b = llm.sub %ones, %sig : tensor<4x40xf32>
  %c = llm.mul %xf, %b : tensor<4x40xf32>
  %d = llm.add %c, %ones : tensor<4x40xf32>
  %e = llm.mul %a, %d : tensor<4x40xf32>
  %r = llm.cast %e : tensor<4x40xf32> to tensor<4x40xbf16>
  return %r : tensor<4x40xbf16>
}

// The same DAG, but the column sum reads one chain's value (%a) before the
// multiply that joins them: that chain's kernel must run first, so the
// join takes only the other chain (3 kernels: sigmoid * g, the sum, the
// rest). (A row sum would make one row kernel of all of it.)
// DAG-BETWEEN: kernel launches: 3 (
func.func @dag_read_between(%g: tensor<4x40xf32>, %x: tensor<4x40xf32>) -> (tensor<4x40xf32>, tensor<1x40xf32>) {
  %sig = llm.sigmoid %x : tensor<4x40xf32>
  %a = llm.mul %g, %sig : tensor<4x40xf32>
  %s = llm.reduce_sum %a [0] keepdim : tensor<4x40xf32>
  %b = llm.neg %sig : tensor<4x40xf32>
  %c = llm.mul %x, %b : tensor<4x40xf32>
  %e = llm.mul %a, %c : tensor<4x40xf32>
  return %e, %s : tensor<4x40xf32>, tensor<1x40xf32>
}
