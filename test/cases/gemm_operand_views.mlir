// (A shared case: scripts/gpu-round.sh runs it on the GPU with --check.)
// Slice and transpose views of weights feed cuBLASLt in place (an offset and
// a leading dimension, or a flipped transpose flag) instead of being copied
// on every call: llmc-shard's per-rank rows (column parallel) and columns
// (row parallel) of a weight, and a weight stored [k, n] read as [n, k].
// A view whose start is not 256-byte aligned is still copied, once per
// parameter set (the parameter-preparation segment), not on every call.
// RUN: llmc-compile %s --arch=sm_90a --print-stats | FileCheck %s
// CHECK: kernel launches: 0 (1 distinct kernels)
// CHECK: GEMMs: 4
// CHECK: persistent bytes: 1024000 (parameter preparation: 1 launches
// RUN: llmc-compile %s --arch=sm_90a -o %t.llmcx && sed 1d %t.llmcx | FileCheck %s --check-prefix=EXE
// EXE: "b":[1,1048576],"batch"
// EXE: "b":[1,1024],"batch"
func.func @views(%x: tensor<16x1024xbf16>, %w: tensor<2048x1024xbf16>,
                 %wt: tensor<1024x512xbf16>, %h: tensor<16x512xbf16>)
    -> (tensor<16x1024xbf16>, tensor<16x512xbf16>, tensor<16x512xbf16>, tensor<16x1000xbf16>) {
  // Rows [512, 1536) of a [n, k] weight: column-parallel shard, offset 1 MiB.
  %rows = llm.slice %w [512, 0] to [1536, 1024] step [1, 1] : tensor<2048x1024xbf16>
  %a = llm.matmul %x, %rows {transpose_rhs} : tensor<16x1024xbf16>, tensor<1024x1024xbf16> -> tensor<16x1024xbf16>
  // Columns [512, 1024) of a [n, k] weight: row-parallel shard (ld 1024).
  %cols = llm.slice %w [0, 512] to [512, 1024] step [1, 1] : tensor<2048x1024xbf16>
  %b = llm.matmul %h, %cols {transpose_rhs} : tensor<16x512xbf16>, tensor<512x512xbf16> -> tensor<16x512xbf16>
  // A [k, n] weight transposed to [n, k]: the GEMM flips transb.
  %t = llm.transpose %wt [1, 0] : tensor<1024x512xbf16>
  %c = llm.matmul %x, %t {transpose_rhs} : tensor<16x1024xbf16>, tensor<512x1024xbf16> -> tensor<16x512xbf16>
  // Columns [8, 520): a 16-byte start, not 256-byte aligned: copied first.
  %odd = llm.slice %w [0, 8] to [1000, 520] step [1, 1] : tensor<2048x1024xbf16>
  %d = llm.matmul %h, %odd {transpose_rhs} : tensor<16x512xbf16>, tensor<1000x512xbf16> -> tensor<16x1000xbf16>
  return %a, %b, %c, %d : tensor<16x1024xbf16>, tensor<16x512xbf16>, tensor<16x512xbf16>, tensor<16x1000xbf16>
}
