// llmc-compile --emit=exec prints the execution-level IR after arena
// planning; --from-exec translates such IR back. Printed, re-parsed by
// llmc-opt and translated, it gives the golden executable byte for byte
// (test/golden): the translation decides nothing.
// RUN: llmc-compile %s --shape seq=8 --emit=exec | FileCheck %s

// CHECK-LABEL: exec.executable @block
// CHECK-SAME:    arena_bytes = {{[0-9]+}}
// CHECK:         exec.input "arg0" : tensor<8x64xf32>
// CHECK:         exec.output "result0" : tensor<8x64xf32>
// CHECK:         exec.buffer input[0] 2048 bytes
// CHECK:         exec.buffer arena 2048 bytes live [0, 1] offset 0
// CHECK:         exec.buffer arena 2048 bytes live [1, 3] offset 2048
// CHECK:         exec.buffer output[0] 2048 bytes
// CHECK:         exec.kernel @[[NORM:llmc_rmsnorm[a-z0-9_]+]] source "
// CHECK:         exec.launch @[[NORM]] grid [2, 1, 1] block [128, 1, 1] smem 0 (%{{.+}}[0], %{{.+}}[0], %{{.+}}[0], 8 : i64) label "llm.rms_norm"
// CHECK-NEXT:    exec.gemm a
func.func @block(%x: tensor<?x64xf32> {llm.dim_names = ["seq"]}, %w: tensor<64x64xf32>, %g: tensor<64xf32>) -> tensor<?x64xf32> {
  %n = llm.rms_norm %x, %g {eps = 1.0e-05 : f64} : tensor<?x64xf32>, tensor<64xf32>
  %y = llm.matmul %n, %w : tensor<?x64xf32>, tensor<64x64xf32> -> tensor<?x64xf32>
  %z = llm.silu %y : tensor<?x64xf32>
  %r = llm.add %z, %x : tensor<?x64xf32>
  return %r : tensor<?x64xf32>
}

// Round trips against golden executables: persistent buffers and
// parameter preparation (bf16), fp8 GEMM scales with a cuDNN attention
// alternative, a collective, constants.
// RUN: llmc-compile %llmc_src_root/examples/gpt2_small_block.mlir --shape seq=64 --precision=bf16 --emit=exec > %t.gpt2.mlir
// RUN: llmc-opt %t.gpt2.mlir -o %t.gpt2.reparsed.mlir
// RUN: llmc-compile %t.gpt2.reparsed.mlir --from-exec --emit=executable-dump > %t.gpt2.dump
// RUN: diff %llmc_src_root/test/golden/compile.gpt2_small_block.seq64.bf16.dump %t.gpt2.dump

// RUN: llmc-compile %llmc_src_root/test/cases/c2_tiny_decoder_d80.mlir --shape seq=129 --precision=fp8 --emit=exec > %t.c2.mlir
// RUN: llmc-opt %t.c2.mlir -o %t.c2.reparsed.mlir
// RUN: llmc-compile %t.c2.reparsed.mlir --from-exec --emit=executable-dump > %t.c2.dump
// RUN: diff %llmc_src_root/test/golden/compile.c2_tiny_decoder_d80.seq129.fp8.dump %t.c2.dump

// RUN: llmc-compile %llmc_src_root/examples/allreduce_bf16_256mb.mlir --precision=bf16 --emit=exec > %t.ar.mlir
// RUN: llmc-opt %t.ar.mlir -o %t.ar.reparsed.mlir
// RUN: llmc-compile %t.ar.reparsed.mlir --from-exec --emit=executable-dump > %t.ar.dump
// RUN: diff %llmc_src_root/test/golden/compile.allreduce_bf16_256mb.bf16.dump %t.ar.dump

// RUN: llmc-compile %llmc_src_root/test/cases/c1_long_mean_f32.mlir --precision=fp16 --emit=exec > %t.c1.mlir
// RUN: llmc-opt %t.c1.mlir -o %t.c1.reparsed.mlir
// RUN: llmc-compile %t.c1.reparsed.mlir --from-exec --emit=executable-dump > %t.c1.dump
// RUN: diff %llmc_src_root/test/golden/compile.c1_long_mean_f32.fp16.dump %t.c1.dump

// Flags that do not fit.
// RUN: not llmc-compile %s --shape seq=8 --emit=exec --print-stats 2>&1 | FileCheck %s --check-prefix=STATS
// STATS: error: --emit=exec prints the execution-level IR on stdout; it cannot be combined with --print-stats
// RUN: not llmc-compile %s --shape seq=8 --emit=exec --arch=sm_90a --arch=sm_80 2>&1 | FileCheck %s --check-prefix=ARCH
// ARCH: error: --emit=exec prints one executable; give at most one --arch (found 2)
// RUN: not llmc-compile %t.ar.mlir --from-exec --shape seq=8 2>&1 | FileCheck %s --check-prefix=FROM
// FROM: error: --from-exec translates execution-level IR, which is already compiled; it cannot be combined with --shape
// RUN: not llmc-compile %s --from-exec --emit=executable-dump 2>&1 | FileCheck %s --check-prefix=NONE
// NONE: has no exec.executable
