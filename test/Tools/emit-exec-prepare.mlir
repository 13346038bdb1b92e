// The lowering builds the parameter-preparation segment as the exec.prepare
// region directly (lib/Compiler/ExecBuilder.h): the fp8 scaling and [n,k]
// relayout of the weight run there, the per-call launches follow it. The
// preparation's scratch buffers live before every per-call step (negative
// steps), so llmc-plan-arena lets them share offsets with per-call buffers;
// the preparation results that per-call launches read are persistent.
// RUN: llmc-compile %s --precision=fp8 --emit=exec | FileCheck %s
// RUN: llmc-compile %s --precision=bf16 --emit=exec | FileCheck %s --check-prefix=BF16

// CHECK-LABEL: exec.executable @proj
// CHECK:         exec.input "arg1" : tensor<64x32xf32> parameter
// CHECK:         %[[W:.+]] = exec.buffer input[1] 8192 bytes
// CHECK-NEXT:    %[[ABS:.+]] = exec.buffer arena 8192 bytes live [-{{[0-9]+}}, -{{[0-9]+}}] offset 0
// CHECK:         %[[SCALE:.+]] = exec.buffer persistent 4 bytes
// CHECK:         exec.buffer arena 2048 bytes live [{{[0-9]+}}, {{[0-9]+}}] offset 0
// CHECK:         %[[WT:.+]] = exec.buffer persistent 2048 bytes
// CHECK:         exec.prepare {
// CHECK-NEXT:      exec.launch @{{.+}}(%[[ABS]][0], %[[W]][0], 2048 : i64) label "llm.abs"
// CHECK:           exec.launch @{{.+}}(%[[SCALE]][0], %{{.+}}[0], 1 : i64) label "llm.div"
// CHECK:           exec.launch @{{.+}}(%[[WT]][0], %{{.+}}[0], 2048 : i64, "{{.*}}") label "llm.matmul"
// CHECK-NEXT:    }
// CHECK-NEXT:    exec.launch {{.+}} label "llm.abs"
// CHECK:         exec.gemm a %{{.+}}[0] b %[[WT]][0]
// CHECK-NOT:     exec.prepare

// BF16-LABEL: exec.executable @proj
// BF16:         %[[WB:.+]] = exec.buffer persistent 4096 bytes
// BF16:         exec.prepare {
// BF16-NEXT:      exec.launch @{{.+}}(%[[WB]][0], %{{.+}}[0], 2048 : i64) label "llm.cast"
// BF16-NEXT:    }
// BF16-NEXT:    exec.launch {{.+}} label "llm.cast"
// BF16-NEXT:    exec.gemm a %{{.+}}[0] b %[[WB]][0]
func.func @proj(%x: tensor<8x64xf32>, %w: tensor<64x32xf32> {llm.param}) -> tensor<8x32xf32> {
  %y = llm.matmul %x, %w : tensor<8x64xf32>, tensor<64x32xf32> -> tensor<8x32xf32>
  %z = llm.silu %y : tensor<8x32xf32>
  return %z : tensor<8x32xf32>
}

// Nothing to prepare (f32: the weight is read as it is): no exec.prepare.
// RUN: llmc-compile %s --emit=exec --fn=plain | FileCheck %s --check-prefix=PLAIN
// PLAIN-LABEL: exec.executable @plain
// PLAIN-NOT:   exec.prepare
func.func @plain(%x: tensor<8x64xf32>, %w: tensor<64x32xf32>) -> tensor<8x32xf32> {
  %y = llm.matmul %x, %w : tensor<8x64xf32>, tensor<64x32xf32> -> tensor<8x32xf32>
  return %y : tensor<8x32xf32>
}
