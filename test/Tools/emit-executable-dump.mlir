// --emit=executable-dump: the canonical text of the executable each tool
// builds (rt::DescribeExecutable), without NVRTC, inputs or a GPU; the
// golden executables of test/golden are these dumps.
// RUN: llmc-compile %s --shape seq=8 --emit=executable-dump | FileCheck %s
// CHECK:      llmc-executable-dump 1
// CHECK-NEXT: format_version 2
// CHECK-NEXT: counts inputs=3 outputs=1 buffers={{[0-9]+}} kernels=1 gemms=1 collectives=0 attentions=0 launches=2
// CHECK-NEXT: num_prepare_launches 0
// CHECK-NEXT: arena_bytes {{[0-9]+}}
// CHECK-NEXT: input 0 "arg0" f32 [8,64] alias_input=-1 parameter=0
// CHECK:      output 0 "result0" f32 [8,32] alias_input=-1 parameter=0
// CHECK:      kernel 0 llmc_rmsnorm_{{[a-z0-9_]+}} source={{[0-9]+:[0-9a-f]+}} options=[]
// CHECK:      gemm 0 m=8 n=32 k=64 batch=1
// CHECK:      launch 0 call kernel llmc_rmsnorm_{{[a-z0-9_]+}} grid=[{{.*}}] block=[{{.*}}] smem={{[0-9]+}} args=[{{.*}}] label="llm.rms_norm"
// CHECK-NEXT: launch 1 call gemm 0 label="llm.matmul"
// CHECK-NOT:  cubin
//
// llmc-run's cuda path builds the same executable as llmc-compile, here and
// under a precision policy (whose weight casts are hoisted into the
// parameter-preparation segment unless --no-hoist).
// RUN: llmc-run %s --shape seq=8 --emit=executable-dump > %t.run
// RUN: llmc-compile %s --shape seq=8 --emit=executable-dump > %t.compile
// RUN: diff %t.compile %t.run
// RUN: llmc-run %s --shape seq=8 --precision=bf16 --emit=executable-dump > %t.run.bf16
// RUN: llmc-compile %s --shape seq=8 --precision=bf16 --emit=executable-dump > %t.compile.bf16
// RUN: diff %t.compile.bf16 %t.run.bf16
// RUN: FileCheck %s --check-prefix=BF16 < %t.run.bf16
// BF16: num_prepare_launches 1
// BF16: launch 0 prepare kernel
// RUN: llmc-run %s --shape seq=8 --precision=bf16 --no-hoist --emit=executable-dump | FileCheck %s --check-prefix=NOHOIST
// NOHOIST: num_prepare_launches 0
// NOHOIST: launch 0 call kernel
//
// With --tp=N, one rank's program (llmc-shard), no NCCL: the attention and
// the MLP each end in an all-reduce.
// RUN: llmc-run %llmc_src_root/examples/tiny_llama_block.mlir --shape seq=7 --tp=2 --rank=1 --emit=executable-dump | FileCheck %s --check-prefix=TP
// TP: collectives=2
// TP: input 2 "arg2" f32 [64,64] alias_input=-1 parameter=1
// TP: collective 0 all_reduce sum f32 count=448
// TP: collective 1 all_reduce sum f32 count=448
// TP: launch {{[0-9]+}} call collective 0 label="llm.all_reduce"
// TP: launch {{[0-9]+}} call collective 1 label="llm.all_reduce"
//
// The dump is the whole of stdout: flags that print, write, compile kernels
// or run are refused, naming both flags.
// RUN: not llmc-compile %s --shape seq=8 --emit=executable-dump -o %t.llmcx 2>&1 | FileCheck %s --check-prefix=OUT
// RUN: not llmc-compile %s --shape seq=8 --emit=executable-dump --print-stats 2>&1 | FileCheck %s --check-prefix=STATS
// RUN: not llmc-compile %s --shape seq=8 --emit=executable-dump --arch=sm_90a --arch=sm_80 2>&1 | FileCheck %s --check-prefix=ARCHES
// RUN: not llmc-compile %s --shape seq=8 --emit=cuda 2>&1 | FileCheck %s --check-prefix=EMIT
// RUN: not llmc-run %s --shape seq=8 --emit=executable-dump --check 2>&1 | FileCheck %s --check-prefix=CHECKFLAG
// RUN: not llmc-run %s --shape seq=8 --emit=executable-dump --input arg0=%t.f32 2>&1 | FileCheck %s --check-prefix=INPUT
// RUN: not llmc-run %s --shape seq=8 --emit=executable-dump --backend=ref 2>&1 | FileCheck %s --check-prefix=REF
// RUN: not llmc-run %s --shape seq=8 --emit=executable-dump --tp=2 2>&1 | FileCheck %s --check-prefix=NORANK
// RUN: not llmc-run %s --shape seq=8 --emit=executable-dump --tp=2 --rank=2 2>&1 | FileCheck %s --check-prefix=BADRANK
// RUN: not llmc-run %s --shape seq=8 --emit=dump 2>&1 | FileCheck %s --check-prefix=RUNEMIT
// OUT: llmc-compile: error: --emit=executable-dump prints the executable's text on stdout and runs no NVRTC; it cannot be combined with -o
// STATS: error: {{.*}} it cannot be combined with --print-stats
// ARCHES: error: --emit=executable-dump prints one executable; give at most one --arch (found 2)
// EMIT: llmc-compile: error: --emit=cuda: expected executable, executable-dump, mlir or exec
// CHECKFLAG: llmc-run: error: --check has no effect with --emit=executable-dump (it prints the executable and runs nothing)
// INPUT: llmc-run: error: --input has no effect with --emit=executable-dump
// REF: llmc-run: error: --emit=executable-dump prints the cuda backend's executable; it has no effect with --backend=ref
// NORANK: llmc-run: error: --emit=executable-dump with --tp=2 prints one rank's executable: give --rank=R
// BADRANK: llmc-run: error: --rank=2: expected 0 <= rank < --tp (2)
// RUNEMIT: llmc-run: error: --emit=dump: expected run, executable-dump or exec
func.func @norm_proj(%x: tensor<?x64xf32> {llm.dim_names = ["seq"]},
                     %g: tensor<64xf32>, %w: tensor<32x64xf32>) -> tensor<?x32xf32> {
  %n = llm.rms_norm %x, %g {eps = 1.0e-05 : f64} : tensor<?x64xf32>, tensor<64xf32>
  %y = llm.matmul %n, %w {transpose_rhs} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}
