// llmc-run --emit=exec prints the program --emit=executable-dump describes,
// as execution-level IR: translated back (llmc-compile --from-exec) it is the
// golden executable of rank 1 of the TP=2 block, byte for byte.
// RUN: llmc-run %llmc_src_root/examples/tiny_llama_block.mlir --shape seq=7 --tp=2 --rank=1 --emit=exec > %t.tp2r1.mlir
// RUN: FileCheck %s < %t.tp2r1.mlir
// RUN: llmc-compile %t.tp2r1.mlir --from-exec --emit=executable-dump > %t.tp2r1.dump
// RUN: diff %llmc_src_root/test/golden/run.tiny_llama_block.seq7.tp2r1.dump %t.tp2r1.dump
// CHECK-LABEL: exec.executable @
// CHECK:         exec.collective all_reduce sum {{[0-9]+}} x f32 from
// CHECK:         exec.collective all_reduce sum {{[0-9]+}} x f32 from

// MLIR's pass-manager flags reach the execution-level passes too: the IR
// after llmc-plan-arena is printed (on stderr) with the llm passes'.
// RUN: llmc-compile %llmc_src_root/examples/tiny_llama_block.mlir --shape seq=7 --emit=executable-dump --mlir-print-ir-after-all 2>&1 >/dev/null | FileCheck %s --check-prefix=PRINT
// RUN: llmc-run %llmc_src_root/examples/tiny_llama_block.mlir --shape seq=7 --emit=exec --mlir-print-ir-after-all 2>&1 >/dev/null | FileCheck %s --check-prefix=PRINT
// The tools' contexts have no threads, so module-scope printing works too.
// RUN: llmc-compile %llmc_src_root/examples/tiny_llama_block.mlir --shape seq=7 --emit=executable-dump --mlir-print-ir-after-all --mlir-print-ir-module-scope 2>&1 >/dev/null | FileCheck %s --check-prefix=PRINT
// PRINT:      IR Dump After FormKernelsPass (llmc-form-kernels)
// PRINT:      IR Dump After PlanArenaPass (llmc-plan-arena)
// PRINT-NEXT: exec.executable @{{.+}} attributes {arena_bytes =

// RUN: not llmc-run %llmc_src_root/examples/tiny_llama_block.mlir --shape seq=7 --emit=exec --check 2>&1 | FileCheck %s --check-prefix=FLAG
// FLAG: llmc-run: error: --check has no effect with --emit=exec (it prints the executable and runs nothing)
