// A donated argument that names a result (llm.aliasing_output) holds it
// after the call when the elementwise kernel computing that result is the
// argument's only reader, reading it at the written index: the kernel writes
// over the input buffer (no __restrict__ on its pointers) and the output is
// a copy the runtime skips when the caller passes the input as the output
// (alias_input). Anything else is computed out of place.
// RUN: llmc-compile %s --fn=sgd_momentum --emit=exec | FileCheck %s
// RUN: llmc-compile %s --fn=read_after_update --emit=exec | FileCheck %s --check-prefix=AFTER
// RUN: llmc-compile %s --fn=read_transposed --emit=exec | FileCheck %s --check-prefix=TRANS
// RUN: llmc-compile %s --fn=without_alias --emit=exec | FileCheck %s --check-prefix=NONE

// SGD with momentum: buf = 0.9 buf + g; p -= 0.01 buf (4 x 37: the vector
// body and the scalar tail of one kernel).
// CHECK-LABEL: exec.executable @sgd_momentum
// CHECK:         exec.output "result0" : tensor<4x37xf32> alias_input 0
// CHECK:         exec.output "result1" : tensor<4x37xf32> alias_input 1
// CHECK-DAG:     %[[P:b[0-9]+]] = exec.buffer input[0]
// CHECK-DAG:     %[[BUF:b[0-9]+]] = exec.buffer input[1]
// CHECK-DAG:     %[[G:b[0-9]+]] = exec.buffer input[2]
// CHECK-DAG:     %[[O0:b[0-9]+]] = exec.buffer output[0]
// CHECK-DAG:     %[[O1:b[0-9]+]] = exec.buffer output[1]
// CHECK:         exec.kernel @[[K:llmc_ew_[0-9a-f]+]] source "{{.*}}In place: an output shares memory with an input (no __restrict__).
// CHECK-NOT:     __restrict__
// CHECK-SAME:    {grid_dependency}
// CHECK:         exec.launch @[[K]] {{.*}}(%[[BUF]][0], %[[P]][0], %[[BUF]][0], %[[G]][0], %[[P]][0], 148 : i64) label "llm.sub"
// CHECK:         exec.copy 592 bytes from %[[P]][0] to %[[O0]][0]
// CHECK:         exec.copy 592 bytes from %[[BUF]][0] to %[[O1]][0]
func.func @sgd_momentum(%p: tensor<4x37xf32> {llm.donate, llm.aliasing_output = 0 : i64},
                        %buf: tensor<4x37xf32> {llm.donate, llm.aliasing_output = 1 : i64},
                        %g: tensor<4x37xf32>) -> (tensor<4x37xf32>, tensor<4x37xf32>) {
  %mu = llm.constant dense<0.9> : tensor<4x37xf32>
  %lr = llm.constant dense<0.01> : tensor<4x37xf32>
  %b0 = llm.mul %buf, %mu : tensor<4x37xf32>
  %b1 = llm.add %b0, %g : tensor<4x37xf32>
  %u = llm.mul %b1, %lr : tensor<4x37xf32>
  %p1 = llm.sub %p, %u : tensor<4x37xf32>
  return %p1, %b1 : tensor<4x37xf32>, tensor<4x37xf32>
}

// The old p is read again by a reduction after the update: out of place.
// AFTER-LABEL: exec.executable @read_after_update
// AFTER:         exec.output "result0" : tensor<4x37xf32>{{$}}
// AFTER-NOT:     In place
// AFTER-NOT:     alias_input
func.func @read_after_update(%p: tensor<4x37xf32> {llm.donate, llm.aliasing_output = 0 : i64},
                             %g: tensor<4x37xf32>) -> (tensor<4x37xf32>, tensor<4xf32>) {
  %p1 = llm.sub %p, %g : tensor<4x37xf32>
  %n = llm.reduce_sum %p [1] : tensor<4x37xf32>
  return %p1, %n : tensor<4x37xf32>, tensor<4xf32>
}

// p is read through a transpose: element (i, j) of the result reads p at
// (j, i), which another thread may already have written. Out of place.
// TRANS-LABEL: exec.executable @read_transposed
// TRANS-NOT:     In place
// TRANS-NOT:     alias_input
func.func @read_transposed(%p: tensor<8x8xf32> {llm.donate, llm.aliasing_output = 0 : i64},
                           %g: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %t = llm.transpose %p [1, 0] : tensor<8x8xf32>
  %p1 = llm.add %t, %g : tensor<8x8xf32>
  return %p1 : tensor<8x8xf32>
}

// Donated without naming a result: value semantics, restrict pointers.
// NONE-LABEL: exec.executable @without_alias
// NONE-NOT:     alias_input
// NONE:         __restrict__
func.func @without_alias(%p: tensor<4x37xf32> {llm.donate}, %g: tensor<4x37xf32>) -> tensor<4x37xf32> {
  %p1 = llm.sub %p, %g : tensor<4x37xf32>
  return %p1 : tensor<4x37xf32>
}
