// llm.sin / llm.cos lower into fused elementwise kernels that call the
// accurate sinf/cosf: RoPE angles (position * inv_freq) reach thousands of
// radians, where the __sinf/__cosf intrinsics are off by ~1e-3.
// RUN: llmc-compile %s --fn=fused --emit-cuda --print-stats | FileCheck %s --check-prefix=FUSED
// RUN: llmc-compile %s --fn=rope_table --emit-cuda | FileCheck %s --check-prefix=TABLE
// RUN: llmc-compile %s --fn=rope_table -o %t.llmcx

// Each angle computation and its sin or cos fuse into one kernel.
// FUSED: ===== kernel llmc_ew_
// FUSED-NOT: __sinf
// FUSED: const float n1 = sinf(n0);
// FUSED: ===== kernel llmc_ew_
// FUSED-NOT: __cosf
// FUSED: const float n1 = cosf(n0);
// FUSED-NOT: ===== kernel
// FUSED: kernel launches: 2
func.func @fused(%x: tensor<64x128xf32>, %f: tensor<64x128xf32>) -> (tensor<64x128xf32>, tensor<64x128xf32>) {
  %a = llm.mul %x, %f : tensor<64x128xf32>
  %s = llm.sin %a : tensor<64x128xf32>
  %b = llm.add %x, %f : tensor<64x128xf32>
  %c = llm.cos %b : tensor<64x128xf32>
  return %s, %c : tensor<64x128xf32>, tensor<64x128xf32>
}

// HF LLaMA's table: position ids from a static arange (a non-splat constant
// buffer), cos/sin of position * inv_freq.
// TABLE-NOT: __sinf
// TABLE-NOT: __cosf
// TABLE-DAG: = cosf(
// TABLE-DAG: = sinf(
func.func @rope_table(%inv_freq: tensor<1x4xf32>) -> (tensor<6x4xf32>, tensor<6x4xf32>) {
  %pos = llm.constant dense<[0, 1, 2, 3, 4, 5]> : tensor<6xi64>
  %pf = llm.cast %pos : tensor<6xi64> to tensor<6xf32>
  %p2 = llm.reshape %pf : tensor<6xf32> to tensor<6x1xf32>
  %pb = llm.broadcast %p2 : tensor<6x1xf32> to tensor<6x4xf32>
  %fb = llm.broadcast %inv_freq : tensor<1x4xf32> to tensor<6x4xf32>
  %ang = llm.mul %pb, %fb : tensor<6x4xf32>
  %c = llm.cos %ang : tensor<6x4xf32>
  %s = llm.sin %ang : tensor<6x4xf32>
  return %c, %s : tensor<6x4xf32>, tensor<6x4xf32>
}
