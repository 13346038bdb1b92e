// The CUDA C++ that codegen emits for representative fusion regions.
// RUN: llmc-compile %s --fn=swiglu --emit-cuda | FileCheck %s --check-prefix=SWIGLU
// RUN: llmc-compile %s --fn=residual_rmsnorm --emit-cuda | FileCheck %s --check-prefix=RESNORM
// RUN: llmc-compile %s --fn=bias_gelu --emit-cuda --print-stats | FileCheck %s --check-prefix=GELU
// RUN: llmc-compile %s --fn=decode_proj --emit-cuda --print-stats | FileCheck %s --check-prefix=GEMV

// SwiGLU: silu(gate) * up is one elementwise kernel; each node is rounded to
// bf16 as the unfused graph stores it.
// SWIGLU: ===== kernel llmc_ew_
// SWIGLU: every node rounded to its type
// SWIGLU: silu
// SWIGLU: mul
// SWIGLU-NOT: ===== kernel
func.func @swiglu(%g: tensor<16x11008xbf16>, %u: tensor<16x11008xbf16>) -> tensor<16x11008xbf16> {
  %s = llm.silu %g : tensor<16x11008xbf16>
  %m = llm.mul %s, %u : tensor<16x11008xbf16>
  return %m : tensor<16x11008xbf16>
}

// Residual add + RMSNorm: one row kernel that also writes the sum.
// RESNORM: ===== kernel llmc_rmsnorm_bf16_bf16_bf16_h4096_eps{{.*}}_res
// RESNORM-NOT: ===== kernel
func.func @residual_rmsnorm(%x: tensor<8x4096xbf16>, %r: tensor<8x4096xbf16>, %w: tensor<4096xbf16>) -> (tensor<8x4096xbf16>, tensor<8x4096xbf16>) {
  %s = llm.add %x, %r : tensor<8x4096xbf16>
  %n = llm.rms_norm %s, %w {eps = 1.0e-05 : f64} : tensor<8x4096xbf16>, tensor<4096xbf16>
  return %s, %n : tensor<8x4096xbf16>, tensor<8x4096xbf16>
}

// A bias goes into the cuBLASLt epilogue; GELU (tanh) stays one kernel.
// GELU: ===== kernel llmc_ew_
// GELU: gelu_tanh
// GELU: kernel launches: 1
// GELU: GEMMs: 1
func.func @bias_gelu(%x: tensor<64x768xbf16>, %w: tensor<768x3072xbf16>, %b: tensor<3072xbf16>) -> tensor<64x3072xbf16> {
  %y = llm.matmul %x, %w bias %b : tensor<64x768xbf16>, tensor<768x3072xbf16>, tensor<3072xbf16> -> tensor<64x3072xbf16>
  %g = llm.gelu %y tanh : tensor<64x3072xbf16>
  return %g : tensor<64x3072xbf16>
}

// A decode-step projection (one row against an nn.Linear weight) is a GEMV.
// GEMV: ===== kernel llmc_gemv_bf16_bf16_m1_k4096
// GEMV: one warp per output column
// GEMV: GEMMs: 0
func.func @decode_proj(%x: tensor<1x1x4096xbf16>, %w: tensor<11008x4096xbf16>) -> tensor<1x1x11008xbf16> {
  %y = llm.matmul %x, %w {transpose_rhs} : tensor<1x1x4096xbf16>, tensor<11008x4096xbf16> -> tensor<1x1x11008xbf16>
  return %y : tensor<1x1x11008xbf16>
}
