// Sizes, element types and edge cases the tools refuse with an error (exit
// 1) instead of a crash, an abort or a silent result (issue 14, items 2, 3,
// 5 and 9). Each function is run alone with --fn.
//
// RUN: not llmc-run %s --fn=passthrough_complex --backend=ref 2>&1 | FileCheck %s --check-prefix=COMPLEX
// COMPLEX: error: argument 0 of @passthrough_complex has element type 'complex<f32>', which llmc does not support (expected f32, f16, bf16, f8E4M3FN, f8E5M2, i1, i8, i32 or i64)
//
// RUN: not llmc-run %s --fn=passthrough_huge --backend=ref 2>&1 | FileCheck %s --check-prefix=HUGE
// RUN: not llmc-compile %s --fn=passthrough_huge -o %t.llmcx 2>&1 | FileCheck %s --check-prefix=HUGE
// HUGE: error: argument 0 of @passthrough_huge has type 'tensor<4611686018427387904x4xf32>' whose dimension 0 is 4611686018427387904, more than the supported 2^40 (1099511627776)
//
// RUN: not llmc-run %s --fn=two_dims --backend=ref --shape a=4611686018427387904 --shape b=4 2>&1 | FileCheck %s --check-prefix=BIGDIM
// BIGDIM: error: dimension 'a' = 4611686018427387904 (argument 0 of @two_dims, dimension 0) is more than the supported 2^40 (1099511627776)
//
// RUN: not llmc-run %s --fn=two_dims --backend=ref --shape a=1099511627776 --shape b=1099511627776 2>&1 | FileCheck %s --check-prefix=PRODUCT
// PRODUCT: error: argument 0 of @two_dims (a = 1099511627776, b = 1099511627776) has type 'tensor<1099511627776x1099511627776xf32>' with over 2^63 elements, more than the supported 2^40 (1099511627776)
//
// The reference executor's host memory budget (8 GiB of float64 data by
// default, less on a machine with less than 16 GiB), for --backend=ref and
// for --check (which runs the reference before it needs a GPU).
// RUN: not llmc-run %s --fn=broadcast_budget --backend=ref --ref-max-memory=8 2>&1 | FileCheck %s --check-prefix=BUDGET
// RUN: not llmc-run %s --fn=broadcast_budget --check --ref-max-memory=8 2>&1 | FileCheck %s --check-prefix=BUDGET
// BUDGET: error: {{(reference executor: )?}}'llm.broadcast' at loc("{{.*}}llmc-run-limits.mlir":{{[0-9]+}}:{{[0-9]+}}): the result tensor<1099511627776xf32> needs 8796093022208 bytes of host memory (float64 values) but 8589934584 bytes are left of the reference executor's budget of 8589934592 bytes (8 in use)
// --ref-max-memory sets it (GiB); the inputs llmc-run makes must fit it too,
// checked before they are allocated (a 2^31-element input aborted with
// "LLVM ERROR: out of memory" under the fuzzer's memory limit).
// RUN: not llmc-run %s --fn=two_dims --backend=ref --shape a=1024 --shape b=1024 --ref-max-memory=0.001 2>&1 | FileCheck %s --check-prefix=INPUTS
// INPUTS: error: argument 0 (tensor<1024x1024xf32>) brings the inputs to 8388608 bytes of float64 host values, more than the reference executor's budget of 1073741 bytes (raise it with --ref-max-memory=GIB)
// RUN: not llmc-run %s --fn=two_dims --backend=ref --shape a=256 --shape b=256 --ref-max-memory=0.0006 2>&1 | FileCheck %s --check-prefix=SMALL
// SMALL: error: 'llm.neg' at {{.*}}: the result tensor<256x256xf32> needs 524288 bytes of host memory (float64 values) but 119957 bytes are left of the reference executor's budget of 644245 bytes (524288 in use); raise it with EvaluateOptions::max_host_bytes (llmc-run --ref-max-memory=GIB)
// RUN: llmc-run %s --fn=two_dims --backend=ref --shape a=256 --shape b=256 --ref-max-memory=0.001 | FileCheck %s --check-prefix=ENOUGH
// ENOUGH: result0: tensor<256x256xf32> checksum
// RUN: not llmc-run %s --fn=two_dims --backend=ref --shape a=4 --shape b=4 --ref-max-memory=0 2>&1 | FileCheck %s --check-prefix=ZERO
// ZERO: error: --ref-max-memory must be > 0 (GiB), found 0.000000
// Without the option, the default stays below half the address-space limit
// (the fuzzer's 4 GiB limit aborted on a 5.6 GB input before).
// RUN: %if !asan %{ (ulimit -v 4194304 && not llmc-run %s --fn=two_dims --backend=ref --shape a=16384 --shape b=20000) 2>&1 | FileCheck %s --check-prefix=RLIMIT %}
// RLIMIT: error: argument 0 (tensor<16384x20000xf32>) brings the inputs to 2621440000 bytes of float64 host values, more than the reference executor's budget of 2147483648 bytes (raise it with --ref-max-memory=GIB)
//
// The work budget (1.6e10 multiply-adds in matmuls and attention by
// default, --ref-max-gmacs in 1e9): a graph of little memory but minutes of
// float64 loops (a fuzzer timeout: 4096^3 matmuls) is refused at once, before
// the inputs are made; --shape bindings are applied first, so a dynamic graph
// is checked the same way (the executor also checks op by op, for API users).
// RUN: not llmc-run %s --fn=matmul_work --backend=ref 2>&1 | FileCheck %s --check-prefix=WORK
// RUN: not llmc-run %s --fn=matmul_work --check 2>&1 | FileCheck %s --check-prefix=WORK-GPU
// WORK: error: 'llm.matmul' at loc("{{.*}}llmc-run-limits.mlir":{{[0-9]+}}:{{[0-9]+}}): the reference executor would need 6.87e+10 multiply-adds in matmuls and attention up to this op, more than its work budget of 1.60e+10 (raise it with --ref-max-gmacs=G, in units of 1e9)
// Plain --check does not pick the reference for such a graph (a GPU run).
// WORK-GPU: 1.4e+11 multiply-adds in matmul/attention: checking against an unfused float32 run on the GPU
// RUN: not llmc-run %s --fn=matmul_seq_work --backend=ref --shape seq=64 --ref-max-gmacs=0.00001 2>&1 | FileCheck %s --check-prefix=WORK-DYN
// WORK-DYN: error: 'llm.matmul' at loc("{{.*}}llmc-run-limits.mlir":{{[0-9]+}}:{{[0-9]+}}): the reference executor would need 1.64e+04 multiply-adds in matmuls and attention up to this op, more than its work budget of 1.00e+04 (raise it with --ref-max-gmacs=G, in units of 1e9)
// RUN: llmc-run %s --fn=matmul_seq_work --backend=ref --shape seq=64 --ref-max-gmacs=0.0001 | FileCheck %s --check-prefix=WORK-OK
// WORK-OK: result0: tensor<64x64xf32> checksum
// RUN: not llmc-run %s --fn=matmul_seq_work --backend=ref --shape seq=4 --ref-max-gmacs=-1 2>&1 | FileCheck %s --check-prefix=WORK-NEG
// WORK-NEG: error: --ref-max-gmacs must be > 0 (1e9 multiply-adds), found -1.000000
//
// Edge cases of the op semantics, after shape specialization.
// RUN: not llmc-run %s --fn=reduce_seq --backend=ref --shape seq=0 2>&1 | FileCheck %s --check-prefix=REDUCE
// RUN: not llmc-compile %s --fn=reduce_seq --shape seq=0 -o %t.llmcx 2>&1 | FileCheck %s --check-prefix=REDUCE
// REDUCE: error: 'llm.reduce_max' op reduces dimension 1 of the input [4, 0], which is empty; reduced dimensions must have size >= 1
//
// RUN: not llmc-run %s --fn=matmul_seq --backend=ref --shape seq=0 2>&1 | FileCheck %s --check-prefix=KZERO
// KZERO: error: 'llm.matmul' op contraction size K is 0; a matmul needs K >= 1
//
// RUN: not test -e %t.llmcx

func.func @passthrough_complex(%x: tensor<4xcomplex<f32>>) -> tensor<4xcomplex<f32>> {
  return %x : tensor<4xcomplex<f32>>
}

// No llm op sees this argument: the function's own types are checked.
func.func @passthrough_huge(%x: tensor<4611686018427387904x4xf32>) -> tensor<4611686018427387904x4xf32> {
  return %x : tensor<4611686018427387904x4xf32>
}

func.func @two_dims(%x: tensor<?x?xf32> {llm.dim_names = ["a", "b"]}) -> tensor<?x?xf32> {
  %y = llm.neg %x : tensor<?x?xf32>
  return %y : tensor<?x?xf32>
}

func.func @broadcast_budget(%x: tensor<1xf32>) -> tensor<1099511627776xf32> {
  %b = llm.broadcast %x : tensor<1xf32> to tensor<1099511627776xf32>
  return %b : tensor<1099511627776xf32>
}

func.func @reduce_seq(%x: tensor<4x?xf32> {llm.dim_names = ["seq"]}) -> tensor<4xf32> {
  %m = llm.reduce_max %x [1] : tensor<4x?xf32>
  return %m : tensor<4xf32>
}

func.func @matmul_seq(%x: tensor<4x?xf32> {llm.dim_names = ["seq"]}, %w: tensor<?x8xf32> {llm.dim_names = ["seq"]}) -> tensor<4x8xf32> {
  %y = llm.matmul %x, %w : tensor<4x?xf32>, tensor<?x8xf32> -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

func.func @matmul_work(%x: tensor<4096x4096xf32>, %w: tensor<4096x4096xf32>) -> tensor<4096x4096xf32> {
  %h = llm.matmul %x, %w : tensor<4096x4096xf32>, tensor<4096x4096xf32> -> tensor<4096x4096xf32>
  %y = llm.matmul %h, %w : tensor<4096x4096xf32>, tensor<4096x4096xf32> -> tensor<4096x4096xf32>
  return %y : tensor<4096x4096xf32>
}

func.func @matmul_seq_work(%x: tensor<?x4xf32> {llm.dim_names = ["seq"]}, %w: tensor<4x?xf32> {llm.dim_names = ["seq"]}) -> tensor<?x?xf32> {
  %y = llm.matmul %x, %w : tensor<?x4xf32>, tensor<4x?xf32> -> tensor<?x?xf32>
  return %y : tensor<?x?xf32>
}
