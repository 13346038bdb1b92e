// Parameter preparation: work that depends on parameters only (weight casts,
// fp8 per-tensor scaling and e4m3 casts, pads, fp8 relayouts, materialized
// weight slices) runs once per parameter set, before the per-call launches.
// `kernel launches`, `GEMMs` and `copies` count the per-call launches; the
// segment is reported with the Persistent bytes that hold its results.
//
// Negative case (this file's function): nothing that reads an activation or
// a donated input is hoisted, nor a function result; a parameter may still be
// read per call (add(x, w)). Per call: add, neg(c), mul and two GEMMs.
// RUN: llmc-compile %s --print-stats | FileCheck %s --check-prefix=MIXED
// MIXED: kernel launches: 3 (
// MIXED: GEMMs: 2
// MIXED: persistent bytes: 16384 (parameter preparation: 1 launches, once per parameter set)
//
// LLaMA-2-7B block, fp8: every weight's scaling and e4m3 cast (the row
// maxima of |w| in w's own type, the amax and scale, then widen + divide +
// cast in one kernel) is prepared: 39 -> 18 kernel launches per call (40 -> 19 before the
// widening of an activation to f32 moved next to its scaling division,
// where it stopped keeping the SwiGLU product's row maxima out of the
// product's kernel; 84 -> 42 before an
// activation's scaling kernel also wrote the value it scales: multi-output
// fusion; 74 -> 39 before the GEMMs took their scales through cuBLASLt's
// scale pointers and wrote bf16; 62 -> 27 before the amax was found per row
// in the operand's own type by row kernels), the seven fp8 weights (1 byte
// per element) persistent, the arena smaller (128 bytes more since the
// scale kernels also write the scales' reciprocals, which the quantizing
// casts multiply by).
// RUN: llmc-compile %llmc_src_root/examples/llama2_7b_block.mlir --shape seq=2048 --precision=fp8 --print-stats | FileCheck %s --check-prefix=LLAMA8
// LLAMA8: kernel launches: 18 (
// LLAMA8: GEMMs: 7
// LLAMA8: arena peak bytes: 177213696
// LLAMA8: persistent bytes: 202375196 (parameter preparation: 21 launches
// RUN: llmc-compile %llmc_src_root/examples/llama2_7b_block.mlir --shape seq=2048 --precision=fp8 --print-stats --no-hoist | FileCheck %s --check-prefix=LLAMA8-NOHOIST
// LLAMA8-NOHOIST: kernel launches: 39 (
// LLAMA8-NOHOIST: arena peak bytes: 227549440
// LLAMA8-NOHOIST: persistent bytes: 0 (parameter preparation: 0 launches
//
// The bf16 block has no parameter-only work.
// RUN: llmc-compile %llmc_src_root/examples/llama2_7b_block.mlir --shape seq=2048 --precision=bf16 --print-stats | FileCheck %s --check-prefix=LLAMA16
// LLAMA16: kernel launches: 7 (
// LLAMA16: persistent bytes: 0 (parameter preparation: 0 launches
//
// Tiny LLaMA (f32 weights, K/N of 176 padded to 192 under fp8): the weights'
// scaling, casts and pads are prepared (44 -> 27 per call).
// RUN: llmc-compile %llmc_src_root/examples/tiny_llama_block.mlir --shape seq=7 --precision=fp8 --print-stats | FileCheck %s --check-prefix=TINY8
// TINY8: kernel launches: 27 (
// TINY8: persistent bytes: 49180 (parameter preparation: 17 launches
// RUN: llmc-compile %llmc_src_root/examples/tiny_llama_block.mlir --shape seq=7 --precision=fp8 --print-stats --no-hoist | FileCheck %s --check-prefix=TINY8-NOHOIST
// TINY8-NOHOIST: kernel launches: 44 (
//
// bf16 policy on f32 weights: the seven weight casts are prepared (25 -> 18;
// 7 rows: q/k/v and gate/up are multi-output GEMVs reading the prepared
// weights).
// RUN: llmc-compile %llmc_src_root/examples/tiny_llama_block.mlir --shape seq=7 --precision=bf16 --print-stats | FileCheck %s --check-prefix=TINY16
// TINY16: kernel launches: 18 (
// TINY16: persistent bytes: 92160 (parameter preparation: 7 launches
// RUN: llmc-compile %llmc_src_root/examples/tiny_llama_block.mlir --shape seq=7 --precision=bf16 --print-stats --no-hoist | FileCheck %s --check-prefix=TINY16-NOHOIST
// TINY16-NOHOIST: kernel launches: 25 (
//
// One rank of TP=2 (llmc-shard): the rank's weight slices are scaled and cast
// once (46 -> 18 per call, 47 -> 19 before the SwiGLU product's kernel
// found its row maxima; half the weights persistent).
// RUN: llmc-opt --llmc-shard="tp=2 rank=1" %llmc_src_root/examples/llama2_7b_block.mlir | llmc-compile - --shape seq=2048 --precision=fp8 --print-stats | FileCheck %s --check-prefix=TP8
// TP8: kernel launches: 18 (
// TP8: GEMMs: 7
// TP8: persistent bytes: 101187612 (parameter preparation: 28 launches
// RUN: llmc-opt --llmc-shard="tp=2 rank=1" %llmc_src_root/examples/llama2_7b_block.mlir | llmc-compile - --shape seq=2048 --precision=fp8 --print-stats --no-hoist | FileCheck %s --check-prefix=TP8-NOHOIST
// TP8-NOHOIST: kernel launches: 46 (
//
// The CPU reference executor evaluates the graph as written: unaffected.
// RUN: llmc-run %s --backend=ref | FileCheck %s --check-prefix=REF
// REF: result0: tensor<64x64xf32>
// REF: result1: tensor<64x64xf32>
func.func @mixed(%x: tensor<64x64xf32>, %w: tensor<64x64xf32> {llm.param},
                 %c: tensor<64x64xf32> {llm.donate})
    -> (tensor<64x64xf32>, tensor<64x64xf32>) {
  %wn = llm.neg %w : tensor<64x64xf32>
  %xw = llm.add %x, %w : tensor<64x64xf32>
  %cn = llm.neg %c : tensor<64x64xf32>
  %y = llm.matmul %xw, %wn : tensor<64x64xf32>, tensor<64x64xf32> -> tensor<64x64xf32>
  %z = llm.matmul %y, %cn : tensor<64x64xf32>, tensor<64x64xf32> -> tensor<64x64xf32>
  %r = llm.mul %w, %w : tensor<64x64xf32>
  return %z, %r : tensor<64x64xf32>, tensor<64x64xf32>
}
