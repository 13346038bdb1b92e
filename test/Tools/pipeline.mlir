// One pipeline (llmc/Pipelines/Pipeline.h) behind every entry point:
// `llmc-compile --emit=mlir` prints the function after the pass pipeline,
// before lowering, and `llmc-opt --llmc-pipeline` with the same options
// prints the same function.
// RUN: llmc-compile %s --shape seq=5 --precision=bf16 --emit=mlir > %t.compile.mlir
// RUN: llmc-opt %s --llmc-pipeline="dims=seq=5 precision=bf16 form-kernels=1" > %t.opt.mlir
// RUN: FileCheck %s --check-prefix=MLIR < %t.compile.mlir
// RUN: FileCheck %s --check-prefix=MLIR < %t.opt.mlir
// RUN: llmc-opt %t.opt.mlir | grep -v '^module\|^}' | diff -w -B - %t.compile.mlir
// Specialized, raised (the decomposed RMSNorm is one llm.rms_norm) and cast
// for bf16 GEMMs:
// MLIR: func.func @block(%{{.*}}: tensor<5x64xf32> {{.*}}, %{{.*}}: tensor<64xf32>, %{{.*}}: tensor<64x64xf32>) -> tensor<5x64xf32>
// MLIR: llm.rms_norm
// MLIR: llm.matmul {{.*}} : tensor<5x64xbf16>, tensor<64x64xbf16> -> tensor<5x64xf32>
//
// MLIR's pass-manager flags apply to the pipeline of llmc-compile and llmc-run.
// RUN: llmc-compile %s --shape seq=5 --emit=mlir --mlir-print-ir-after-all 2>&1 >/dev/null | FileCheck %s --check-prefix=AFTER
// AFTER: // -----// IR Dump After SpecializeShapesPass (llmc-specialize-shapes)
// AFTER: // -----// IR Dump After RaisePass (llmc-raise)
// RUN: llmc-run %s --shape seq=5 --emit=executable-dump --mlir-print-ir-after-all 2>&1 >/dev/null | FileCheck %s --check-prefix=RUN-AFTER
// RUN-AFTER: // -----// IR Dump After RaisePass (llmc-raise)
//
// --emit=mlir prints the function alone.
// RUN: not llmc-compile %s --shape seq=5 --emit=mlir -o %t.x 2>&1 | FileCheck %s --check-prefix=MLIR-O
// MLIR-O: llmc-compile: error: --emit=mlir prints the function after the pass pipeline on stdout; it cannot be combined with -o
//
// Tuning knobs: a flag, else the environment variable, else the default;
// a bad value names the flag or the variable.
// RUN: not llmc-compile %s --shape seq=5 --ew-unroll=5 -o %t.x 2>&1 | FileCheck %s --check-prefix=EW-FLAG
// EW-FLAG: llmc-compile: error: --ew-unroll: expected 1, 2, 3 or 4, found '5'
// RUN: env LLMC_EW_UNROLL=9 llmc-compile %s --shape seq=5 --ew-unroll=2 --emit=executable-dump | FileCheck %s --check-prefix=EW-WINS
// EW-WINS: kernel
// RUN: not llmc-compile %s --shape seq=5 --gemv-unroll=17 -o %t.x 2>&1 | FileCheck %s --check-prefix=GEMV-FLAG
// GEMV-FLAG: llmc-compile: error: --gemv-unroll: expected 1..16, found '17'
// RUN: env LLMC_GEMV_UNROLL=+8 not llmc-compile %s --shape seq=5 -o %t.x 2>&1 | FileCheck %s --check-prefix=GEMV-ENV
// GEMV-ENV: llmc-compile: error: environment variable LLMC_GEMV_UNROLL: expected 1..16, found '+8'
// RUN: env LLMC_GEMV_UNROLL=08 not llmc-compile %s --shape seq=5 -o %t.x 2>&1 | FileCheck %s --check-prefix=GEMV-ZERO
// GEMV-ZERO: error: environment variable LLMC_GEMV_UNROLL: expected 1..16, found '08'
// RUN: env LLMC_GEMV_UNROLL=99 llmc-compile %s --shape seq=5 --gemv-unroll=8 --emit=executable-dump | FileCheck %s --check-prefix=EW-WINS
// RUN: not llmc-compile %s --shape seq=5 --attention-tile=bm7 --emit=executable-dump 2>&1 | FileCheck %s --check-prefix=TILE
// TILE: llmc-compile: error: --attention-tile:
// RUN: env LLMC_ATTENTION_BACKEND=fast not llmc-run %s --shape seq=5 --emit=executable-dump 2>&1 | FileCheck %s --check-prefix=ATTN-ENV
// ATTN-ENV: llmc-run: error: environment variable LLMC_ATTENTION_BACKEND: unknown attention backend 'fast' (expected auto, llmc or cudnn)
// RUN: not llmc-run %s --backend=ref --shape seq=5 --ew-unroll=2 2>&1 | FileCheck %s --check-prefix=REF
// REF: llmc-run: error: --ew-unroll applies to the cuda backend only; it has no effect with --backend=ref
// The variables are read only where code is generated.
// RUN: env LLMC_EW_UNROLL=9 LLMC_ATTENTION_BACKEND=x llmc-run %s --backend=ref --shape seq=5 | FileCheck %s --check-prefix=REF-ENV
// REF-ENV: result0: tensor<5x64xf32> checksum
// RUN: env LLMC_EW_UNROLL=9 llmc-compile %s --shape seq=5 --emit=mlir | FileCheck %s --check-prefix=MLIR-ENV
// MLIR-ENV: llm.rms_norm
// RUN: not llmc-compile %s --shape seq=5 --ew-unroll= --emit=executable-dump 2>&1 | FileCheck %s --check-prefix=EMPTY
// EMPTY: llmc-compile: error: --ew-unroll needs a value
// RUN: not llmc-compile %s --shape seq=5 --attention-tile=bm4294967360_bn64_w4_s2 --emit=executable-dump 2>&1 | FileCheck %s --check-prefix=TILE-BIG
// TILE-BIG: llmc-compile: error: --attention-tile: attention tile 'bm4294967360_bn64_w4_s2': expected bm<M>_bn<N>_w<warps>_s<stages>[_gh]
// Pass names are known to the pass-manager flags.
// RUN: llmc-compile %s --shape seq=5 --emit=mlir --mlir-print-ir-after=llmc-raise 2>&1 >/dev/null | FileCheck %s --check-prefix=AFTER-ONE
// AFTER-ONE: // -----// IR Dump After RaisePass (llmc-raise)
// AFTER-ONE-NOT: IR Dump After
//
// llmc-pipeline's options are checked when it is parsed.
// RUN: not llmc-opt %s --llmc-pipeline="tp=2 rank=2" 2>&1 | FileCheck %s --check-prefix=TP
// TP: llmc-pipeline: tp/rank: expected 1 <= tp <= 1024 and 0 <= rank < tp, found tp=2 rank=2
// RUN: not llmc-opt %s --llmc-pipeline="tp=4294967298 rank=1" 2>&1 | FileCheck %s --check-prefix=TP-BIG
// TP-BIG: llmc-pipeline: tp/rank: expected 1 <= tp <= 1024 and 0 <= rank < tp, found tp=4294967298 rank=1
// RUN: not llmc-opt %s --llmc-pipeline="pad-multiple=0" 2>&1 | FileCheck %s --check-prefix=PAD
// PAD: llmc-pipeline: pad-multiple: expected 1..4096, found 0
// RUN: not llmc-opt %s --llmc-pipeline="dims=seq" 2>&1 | FileCheck %s --check-prefix=DIMS
// DIMS: llmc-pipeline: dims: malformed binding 'seq', expected name=<integer>
// RUN: not llmc-opt %s --llmc-pipeline="precision=fp64" 2>&1 | FileCheck %s --check-prefix=PREC
// PREC: llmc-pipeline: precision: expected fp32, bf16, fp16 or fp8, found 'fp64'
// RUN: not llmc-opt %s --llmc-pipeline="weight-only=int8 precision=fp8" 2>&1 | FileCheck %s --check-prefix=WO
// WO: llmc-pipeline: weight-only=int8 cannot be combined with precision=fp8
func.func @block(%x: tensor<?x64xf32> {llm.dim_names = ["seq"]}, %g: tensor<64xf32>, %w: tensor<64x64xf32>) -> tensor<?x64xf32> {
  %c2 = llm.constant dense<2.0> : tensor<f32>
  %b2 = llm.broadcast %c2 : tensor<f32> to tensor<?x64xf32>
  %sq = llm.pow %x, %b2 : tensor<?x64xf32>
  %ms = llm.reduce_mean %sq [1] keepdim : tensor<?x64xf32>
  %eps = llm.constant dense<1.0e-06> : tensor<f32>
  %ep = llm.broadcast %eps : tensor<f32> to tensor<?x1xf32>
  %v = llm.add %ms, %ep : tensor<?x1xf32>
  %r = llm.rsqrt %v : tensor<?x1xf32>
  %rb = llm.broadcast %r : tensor<?x1xf32> to tensor<?x64xf32>
  %n = llm.mul %x, %rb : tensor<?x64xf32>
  %gb = llm.broadcast %g : tensor<64xf32> to tensor<?x64xf32>
  %y = llm.mul %gb, %n : tensor<?x64xf32>
  %o = llm.matmul %y, %w : tensor<?x64xf32>, tensor<64x64xf32> -> tensor<?x64xf32>
  return %o : tensor<?x64xf32>
}
