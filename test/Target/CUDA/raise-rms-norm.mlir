// The decomposed bf16 RMSNorm the torch.compile plugin imports for Hugging
// Face's LlamaRMSNorm, after a residual add: llmc-compile raises it to
// llm.rms_norm (llmc-raise, in PrepareForLowering), which codegen lowers as
// one residual-add + RMSNorm kernel. --no-raise keeps the chain as written.
// RUN: llmc-compile %s --fn=residual_rms_norm --shape seq=2048 --print-stats | FileCheck %s --check-prefix=RAISED
// RUN: llmc-compile %s --fn=residual_rms_norm --shape seq=2048 --print-stats --no-raise | FileCheck %s --check-prefix=DECOMPOSED
// RUN: llmc-compile %s --fn=residual_rms_norm --shape seq=2048 --emit-cuda | FileCheck %s --check-prefix=CUDA
// RUN: llmc-compile %s --fn=hf_rms_norm --print-stats | FileCheck %s --check-prefix=HF
// RUN: llmc-compile %s --fn=hf_rms_norm --print-stats --no-raise | FileCheck %s --check-prefix=HF-DECOMPOSED

// Raised: the add and the norm are one kernel; nothing goes through the arena.
// RAISED: llm ops: 2
// RAISED-NEXT: kernel launches: 1 (1 distinct kernels)
// RAISED: arena peak bytes: 0 (sum of intermediates 0)
// As written: one row kernel too (llmc-form-kernels' row_reduction: the
// add, f32 cast and pow before the mean, rsqrt after it, and the
// normalize/weight multiplies); it writes the sum and the output, and no
// f32 intermediate goes through the arena (as 4 elementwise and reduction
// kernels, two [4, 2048, 4096] f32 values did: 268468224 bytes).
// DECOMPOSED: llm ops: 15
// DECOMPOSED-NEXT: kernel launches: 1 (1 distinct kernels)
// DECOMPOSED: arena peak bytes: 0
// CUDA-COUNT-1: ===== kernel
// CUDA-NOT: ===== kernel
func.func @residual_rms_norm(%h: tensor<4x?x4096xbf16> {llm.dim_names = ["seq"]},
                             %r: tensor<4x?x4096xbf16> {llm.dim_names = ["seq"]},
                             %w: tensor<4096xbf16>) -> (tensor<4x?x4096xbf16>, tensor<4x?x4096xbf16>) {
  %x = llm.add %h, %r : tensor<4x?x4096xbf16>
  %2 = llm.broadcast %w : tensor<4096xbf16> to tensor<4x?x4096xbf16>
  %3 = llm.cast %x : tensor<4x?x4096xbf16> to tensor<4x?x4096xf32>
  %4 = llm.constant dense<2.0> : tensor<f32>
  %5 = llm.broadcast %4 : tensor<f32> to tensor<4x?x4096xf32>
  %6 = llm.pow %3, %5 : tensor<4x?x4096xf32>
  %7 = llm.reduce_mean %6 [2] keepdim : tensor<4x?x4096xf32>
  %8 = llm.constant dense<1.0e-06> : tensor<f32>
  %9 = llm.broadcast %8 : tensor<f32> to tensor<4x?x1xf32>
  %10 = llm.add %7, %9 : tensor<4x?x1xf32>
  %11 = llm.rsqrt %10 : tensor<4x?x1xf32>
  %12 = llm.broadcast %11 : tensor<4x?x1xf32> to tensor<4x?x4096xf32>
  %13 = llm.mul %3, %12 : tensor<4x?x4096xf32>
  %14 = llm.cast %13 : tensor<4x?x4096xf32> to tensor<4x?x4096xbf16>
  %15 = llm.mul %2, %14 : tensor<4x?x4096xbf16>
  return %x, %15 : tensor<4x?x4096xbf16>, tensor<4x?x4096xbf16>
}

// The exact IR of a plugin dump (LlamaRMSNorm, hidden 128, bf16): one
// llm.rms_norm kernel raised, one row kernel as written (4 kernels before
// row kernels: cast and x^2, mean, rsqrt(+eps), normalize + cast back +
// weight).
// HF: llm ops: 1
// HF-NEXT: kernel launches: 1 (1 distinct kernels)
// HF-DECOMPOSED: llm ops: 14
// HF-DECOMPOSED-NEXT: kernel launches: 1 (1 distinct kernels)
func.func @hf_rms_norm(%x: tensor<1x16x128xbf16>, %w: tensor<128xbf16>) -> tensor<1x16x128xbf16> {
  %2 = llm.broadcast %w : tensor<128xbf16> to tensor<1x16x128xbf16>
  %3 = llm.cast %x : tensor<1x16x128xbf16> to tensor<1x16x128xf32>
  %4 = llm.constant dense<2.0> : tensor<f32>
  %5 = llm.broadcast %4 : tensor<f32> to tensor<1x16x128xf32>
  %6 = llm.pow %3, %5 : tensor<1x16x128xf32>
  %7 = llm.reduce_mean %6 [2] keepdim : tensor<1x16x128xf32>
  %8 = llm.constant dense<1.0e-06> : tensor<f32>
  %9 = llm.broadcast %8 : tensor<f32> to tensor<1x16x1xf32>
  %10 = llm.add %7, %9 : tensor<1x16x1xf32>
  %11 = llm.rsqrt %10 : tensor<1x16x1xf32>
  %12 = llm.broadcast %11 : tensor<1x16x1xf32> to tensor<1x16x128xf32>
  %13 = llm.mul %3, %12 : tensor<1x16x128xf32>
  %14 = llm.cast %13 : tensor<1x16x128xf32> to tensor<1x16x128xbf16>
  %15 = llm.mul %2, %14 : tensor<1x16x128xbf16>
  return %15 : tensor<1x16x128xbf16>
}
