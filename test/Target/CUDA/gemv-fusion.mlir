// Horizontal fusion of decode GEMVs that read the same input (LowerOptions::
// fuse_gemv): one multi-output GEMV launch, or one SwiGLU GEMV for
// mul(silu(x Wg^T), x Wu^T).
// RUN: llmc-compile %s --fn=qkv --emit-cuda --print-stats | FileCheck %s --check-prefix=QKV
// RUN: llmc-compile %s --fn=gqa_bias --emit-cuda --print-stats | FileCheck %s --check-prefix=GQA
// RUN: llmc-compile %s --fn=apart --emit-cuda --print-stats | FileCheck %s --check-prefix=APART
// RUN: llmc-compile %s --fn=dependent --emit-cuda --print-stats | FileCheck %s --check-prefix=DEP
// RUN: llmc-compile %s --fn=hf_order --emit-cuda --print-stats | FileCheck %s --check-prefix=HF
// RUN: llmc-compile %s --fn=view_then_blocked --print-stats | FileCheck %s --check-prefix=BLOCKED
// RUN: llmc-compile %s --fn=swiglu --emit-cuda --print-stats | FileCheck %s --check-prefix=SWIGLU
// RUN: llmc-compile %s --fn=swiglu_act_escapes --emit-cuda --print-stats | FileCheck %s --check-prefix=ESC
// RUN: llmc-compile %s --fn=five --print-stats | FileCheck %s --check-prefix=FIVE

// q, k, v projections of one normed input: one launch over 3 x 4096 rows.
// QKV: ===== kernel llmc_multigemv_bf16_m1_k4096_bf16_bf16_bf16
// QKV-NOT: ===== kernel
// QKV: kernel launches: 1
// QKV: GEMMs: 0
func.func @qkv(%h: tensor<1x1x4096xbf16>, %wq: tensor<4096x4096xbf16>, %wk: tensor<4096x4096xbf16>, %wv: tensor<4096x4096xbf16>)
    -> (tensor<1x1x4096xbf16>, tensor<1x1x4096xbf16>, tensor<1x1x4096xbf16>) {
  %q = llm.matmul %h, %wq {transpose_rhs} : tensor<1x1x4096xbf16>, tensor<4096x4096xbf16> -> tensor<1x1x4096xbf16>
  %k = llm.matmul %h, %wk {transpose_rhs} : tensor<1x1x4096xbf16>, tensor<4096x4096xbf16> -> tensor<1x1x4096xbf16>
  %v = llm.matmul %h, %wv {transpose_rhs} : tensor<1x1x4096xbf16>, tensor<4096x4096xbf16> -> tensor<1x1x4096xbf16>
  return %q, %k, %v : tensor<1x1x4096xbf16>, tensor<1x1x4096xbf16>, tensor<1x1x4096xbf16>
}

// GQA-shaped projections (4096 and 1024 rows), 3 tokens, biases, f32 result.
// GQA: ===== kernel llmc_multigemv_f16_m3_k4096_f16b_f32b
// GQA-NOT: ===== kernel
// GQA: kernel launches: 1
func.func @gqa_bias(%h: tensor<3x4096xf16>, %wq: tensor<4096x4096xf16>, %bq: tensor<4096xf16>, %wk: tensor<1024x4096xf16>, %bk: tensor<1024xf16>)
    -> (tensor<3x4096xf16>, tensor<3x1024xf32>) {
  %q = llm.matmul %h, %wq bias %bq {transpose_rhs} : tensor<3x4096xf16>, tensor<4096x4096xf16>, tensor<4096xf16> -> tensor<3x4096xf16>
  %k = llm.matmul %h, %wk bias %bk {transpose_rhs} : tensor<3x4096xf16>, tensor<1024x4096xf16>, tensor<1024xf16> -> tensor<3x1024xf32>
  return %q, %k : tensor<3x4096xf16>, tensor<3x1024xf32>
}

// The first result is used before the second matmul, whose operands are all
// defined before the first: the second moves up next to the first (a matmul
// has no side effect) and both are one launch, then the neg.
// APART: ===== kernel llmc_multigemv_bf16_m1_k4096_bf16_bf16
// APART: kernel launches: 2
func.func @apart(%h: tensor<1x4096xbf16>, %w1: tensor<4096x4096xbf16>, %w2: tensor<4096x4096xbf16>)
    -> (tensor<1x4096xbf16>, tensor<1x4096xbf16>) {
  %a = llm.matmul %h, %w1 {transpose_rhs} : tensor<1x4096xbf16>, tensor<4096x4096xbf16> -> tensor<1x4096xbf16>
  %n = llm.neg %a : tensor<1x4096xbf16>
  %b = llm.matmul %h, %w2 {transpose_rhs} : tensor<1x4096xbf16>, tensor<4096x4096xbf16> -> tensor<1x4096xbf16>
  return %n, %b : tensor<1x4096xbf16>, tensor<1x4096xbf16>
}

// The second GEMV's weight is computed from the first's result: it cannot
// move, and the two stay separate launches.
// DEP-NOT: multigemv
// DEP: kernel launches: 3
func.func @dependent(%h: tensor<1x64xbf16>, %w1: tensor<64x64xbf16>) -> tensor<1x64xbf16> {
  %a = llm.matmul %h, %w1 {transpose_rhs} : tensor<1x64xbf16>, tensor<64x64xbf16> -> tensor<1x64xbf16>
  %ab = llm.broadcast %a : tensor<1x64xbf16> to tensor<64x64xbf16>
  %w2 = llm.add %w1, %ab : tensor<64x64xbf16>
  %b = llm.matmul %h, %w2 {transpose_rhs} : tensor<1x64xbf16>, tensor<64x64xbf16> -> tensor<1x64xbf16>
  return %b : tensor<1x64xbf16>
}

// A view of the first result comes before a GEMV that cannot move (its
// weight is computed after the first): no group is planned (the plan and the
// lowering's check agree), three launches.
// BLOCKED-NOT: multigemv
// BLOCKED: kernel launches: 3
func.func @view_then_blocked(%h: tensor<1x64xbf16>, %wq: tensor<64x64xbf16>, %wk: tensor<64x64xbf16>, %x: tensor<64x64xbf16>)
    -> (tensor<1x1x64xbf16>, tensor<1x64xbf16>) {
  %q = llm.matmul %h, %wq {transpose_rhs} : tensor<1x64xbf16>, tensor<64x64xbf16> -> tensor<1x64xbf16>
  %q3 = llm.reshape %q : tensor<1x64xbf16> to tensor<1x1x64xbf16>
  %wk2 = llm.add %wk, %x : tensor<64x64xbf16>
  %k = llm.matmul %h, %wk2 {transpose_rhs} : tensor<1x64xbf16>, tensor<64x64xbf16> -> tensor<1x64xbf16>
  return %q3, %k : tensor<1x1x64xbf16>, tensor<1x64xbf16>
}

// Hugging Face's order: k's projection, its reshape, transpose and RoPE-like
// elementwise work, then v's and q's projections: one launch for all three.
// HF: ===== kernel llmc_multigemv_bf16_m1_k256_bf16_bf16_bf16
// HF-NOT: ===== kernel llmc_gemv_
// HF: kernel launches: 2
func.func @hf_order(%h: tensor<1x1x256xbf16>, %wq: tensor<256x256xbf16>, %wk: tensor<256x256xbf16>, %wv: tensor<256x256xbf16>)
    -> (tensor<1x4x1x64xbf16>, tensor<1x1x256xbf16>, tensor<1x1x256xbf16>) {
  %k = llm.matmul %h, %wk {transpose_rhs} : tensor<1x1x256xbf16>, tensor<256x256xbf16> -> tensor<1x1x256xbf16>
  %k4 = llm.reshape %k : tensor<1x1x256xbf16> to tensor<1x1x4x64xbf16>
  %kt = llm.transpose %k4 [0, 2, 1, 3] : tensor<1x1x4x64xbf16>
  %kr = llm.neg %kt : tensor<1x4x1x64xbf16>
  %v = llm.matmul %h, %wv {transpose_rhs} : tensor<1x1x256xbf16>, tensor<256x256xbf16> -> tensor<1x1x256xbf16>
  %q = llm.matmul %h, %wq {transpose_rhs} : tensor<1x1x256xbf16>, tensor<256x256xbf16> -> tensor<1x1x256xbf16>
  return %kr, %v, %q : tensor<1x4x1x64xbf16>, tensor<1x1x256xbf16>, tensor<1x1x256xbf16>
}

// LLaMA's MLP input: gate, up, silu and mul are one kernel; gate and up are
// never stored.
// SWIGLU: ===== kernel llmc_swiglu_gemv_bf16_m1_k4096_bf16bf16bf16bf16
// SWIGLU: gate and up are never written
// SWIGLU-NOT: ===== kernel
// SWIGLU: kernel launches: 1
// SWIGLU: arena peak bytes: 0
func.func @swiglu(%h: tensor<1x1x4096xbf16>, %wg: tensor<11008x4096xbf16>, %wu: tensor<11008x4096xbf16>) -> tensor<1x1x11008xbf16> {
  %g = llm.matmul %h, %wg {transpose_rhs} : tensor<1x1x4096xbf16>, tensor<11008x4096xbf16> -> tensor<1x1x11008xbf16>
  %u = llm.matmul %h, %wu {transpose_rhs} : tensor<1x1x4096xbf16>, tensor<11008x4096xbf16> -> tensor<1x1x11008xbf16>
  %a = llm.silu %g : tensor<1x1x11008xbf16>
  %y = llm.mul %a, %u : tensor<1x1x11008xbf16>
  return %y : tensor<1x1x11008xbf16>
}

// silu(gate) is also a result: gate and up are one multi-output GEMV, silu
// and mul stay elementwise kernels.
// ESC: ===== kernel llmc_multigemv_bf16_m1_k4096_bf16_bf16
// ESC-NOT: swiglu
// ESC: kernel launches: 3
func.func @swiglu_act_escapes(%h: tensor<1x4096xbf16>, %wg: tensor<1024x4096xbf16>, %wu: tensor<1024x4096xbf16>)
    -> (tensor<1x1024xbf16>, tensor<1x1024xbf16>) {
  %g = llm.matmul %h, %wg {transpose_rhs} : tensor<1x4096xbf16>, tensor<1024x4096xbf16> -> tensor<1x1024xbf16>
  %u = llm.matmul %h, %wu {transpose_rhs} : tensor<1x4096xbf16>, tensor<1024x4096xbf16> -> tensor<1x1024xbf16>
  %a = llm.silu %g : tensor<1x1024xbf16>
  %y = llm.mul %a, %u : tensor<1x1024xbf16>
  return %a, %y : tensor<1x1024xbf16>, tensor<1x1024xbf16>
}

// Five projections of one input: 4 in one launch, the fifth alone (five
// weights: identical matmuls would be merged by CSE before lowering).
// FIVE: kernel launches: 2
// FIVE: ({{[0-9]+}} distinct kernels)
func.func @five(%h: tensor<2x64xbf16>, %w0: tensor<8x64xbf16>, %w1: tensor<8x64xbf16>,
                %w2: tensor<8x64xbf16>, %w3: tensor<8x64xbf16>, %w4: tensor<8x64xbf16>)
    -> (tensor<2x8xbf16>, tensor<2x8xbf16>, tensor<2x8xbf16>, tensor<2x8xbf16>, tensor<2x8xbf16>) {
  %a = llm.matmul %h, %w0 {transpose_rhs} : tensor<2x64xbf16>, tensor<8x64xbf16> -> tensor<2x8xbf16>
  %b = llm.matmul %h, %w1 {transpose_rhs} : tensor<2x64xbf16>, tensor<8x64xbf16> -> tensor<2x8xbf16>
  %c = llm.matmul %h, %w2 {transpose_rhs} : tensor<2x64xbf16>, tensor<8x64xbf16> -> tensor<2x8xbf16>
  %d = llm.matmul %h, %w3 {transpose_rhs} : tensor<2x64xbf16>, tensor<8x64xbf16> -> tensor<2x8xbf16>
  %e = llm.matmul %h, %w4 {transpose_rhs} : tensor<2x64xbf16>, tensor<8x64xbf16> -> tensor<2x8xbf16>
  return %a, %b, %c, %d, %e : tensor<2x8xbf16>, tensor<2x8xbf16>, tensor<2x8xbf16>, tensor<2x8xbf16>, tensor<2x8xbf16>
}
