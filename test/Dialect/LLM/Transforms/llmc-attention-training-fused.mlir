// Attention's training ops that the fused kernels take (bf16/f16, no mask,
// one element type, head dim a multiple of 16 up to 128) stay through
// llmc-decompose-attention and lower to FlashAttention-2's training forward
// (the statistics variant, one launch writing O and the logsumexp: the
// attention_stats kernel of llmc-form-kernels, with cuDNN's SDPA attached
// writing its stats) and its three backward kernels (with cuDNN's fused
// SDPA backward attached to them): no GEMM, no scores in memory. Head dim 256 is decomposed. Numerics of the kernels:
// test/unit/kernels EmuAttentionBackward (emulator vs float64).
// RUN: llmc-opt %s --llmc-decompose-attention | FileCheck %s
// RUN: llmc-compile %s --arch=sm_90a --emit=executable-dump | FileCheck %s --check-prefix=EXE
// RUN: llmc-opt %s --llmc-form-kernels | FileCheck %s --check-prefix=FORM
// RUN: rm -rf %t && mkdir %t && llmc-compile %s --arch=sm_90a -o %t/a.llmcx && llmc-compile %s --arch=sm_80 -o %t/b.llmcx

// CHECK-LABEL: func.func @train
// CHECK-NOT: llm.matmul
// CHECK: llm.attention %
// CHECK-NEXT: llm.attention_logsumexp %{{.*}}, %{{.*}} {causal}
// CHECK-NEXT: llm.attention_backward %{{.*}} {causal}
// CHECK-NOT: llm.matmul
// CHECK: return
func.func @train(%q: tensor<2x70x4x64xbf16>, %k: tensor<2x70x2x64xbf16>, %v: tensor<2x70x2x64xbf16>, %do: tensor<2x70x4x64xbf16>) -> (tensor<2x70x4x64xbf16>, tensor<2x4x70xf32>, tensor<2x70x4x64xbf16>, tensor<2x70x2x64xbf16>, tensor<2x70x2x64xbf16>) {
  %o = llm.attention %q, %k, %v {causal} : tensor<2x70x4x64xbf16>, tensor<2x70x2x64xbf16>, tensor<2x70x2x64xbf16>
  %lse = llm.attention_logsumexp %q, %k {causal} : tensor<2x70x4x64xbf16>, tensor<2x70x2x64xbf16> -> tensor<2x4x70xf32>
  %dq, %dk, %dv = llm.attention_backward %q, %k, %v, %o, %do, %lse {causal} : tensor<2x70x4x64xbf16>, tensor<2x70x2x64xbf16>, tensor<2x70x2x64xbf16>, tensor<2x70x4x64xbf16>, tensor<2x70x4x64xbf16>, tensor<2x4x70xf32>
  return %o, %lse, %dq, %dk, %dv : tensor<2x70x4x64xbf16>, tensor<2x4x70xf32>, tensor<2x70x4x64xbf16>, tensor<2x70x2x64xbf16>, tensor<2x70x2x64xbf16>
}

// FORM: llm.attention {{.*}}llm.kernel = {group = 0 : i64, kind = "attention_stats"}
// FORM-NEXT: llm.attention_logsumexp {{.*}}llm.kernel = {group = 0 : i64, kind = "attention_stats"}

// EXE: counts inputs=4 outputs=5 {{.*}} gemms=0 collectives=0 attentions=2 launches=4
// EXE: attention 0 b=2 sq=70 skv=70 hq=4 hkv=2 d=64 causal=1 {{.*}} o=[[O:b[0-9]+\+0]] lse=[[LSE:b[0-9]+\+0]]{{$}}
// EXE: attention 1 b=2 sq=70 {{.*}} lse=[[LSE]] backward grad_output=b3+0
// EXE: launch 0 call kernel llmc_flash_attn_bf16_d64_causal_lse_{{.*}} args=[[[O]],{{.*}},[[LSE]]] attention=0 label="llm.attention"
// EXE-NOT: label="llm.attention_logsumexp"
// The backward's three kernels carry one cuDNN SDPA backward (they fall
// back together).
// EXE: llmc_flash_attn_bwd_bf16_d64_causal_prep {{.*}} attention=1 label="llm.attention_backward"
// EXE: llmc_flash_attn_bwd_bf16_d64_causal {{.*}} attention=1 label="llm.attention_backward"
// EXE: llmc_flash_attn_bwd_bf16_d64_causal_dq {{.*}} attention=1 label="llm.attention_backward"
