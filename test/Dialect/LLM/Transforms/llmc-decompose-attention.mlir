// llm.attention_logsumexp and llm.attention_backward become matmuls over
// [B, Hq, Sq, Skv] scores with GQA heads repeated (and summed back for dK,
// dV), the causal mask from two index constants, and f32 accumulation;
// P and dS enter the products in the query's type. Numerics of the rewrite
// against the ops' reference semantics: test/python/test_attention_training.py.
// (These bf16 ops have fused kernels, llmc-attention-training-fused.mlir;
// fused-kernels=false decomposes them as the pass does f32, masked ones and
// other head dims.)
// RUN: llmc-opt %s --llmc-decompose-attention=fused-kernels=false | FileCheck %s
// The rewrite lowers to cuBLAS GEMMs and NVRTC kernels (sm_90a and sm_80):
// RUN: rm -rf %t && mkdir %t && llmc-opt %s --llmc-decompose-attention=fused-kernels=false -o %t/d.mlir
// RUN: llmc-compile %t/d.mlir --arch=sm_90a --emit=executable-dump | FileCheck %s --check-prefix=EXE
// RUN: llmc-compile %t/d.mlir --arch=sm_90a -o %t/a.llmcx && llmc-compile %t/d.mlir --arch=sm_80 -o %t/b.llmcx

// CHECK-LABEL: func.func @backward
// CHECK-NOT: llm.attention_backward
// CHECK: %[[P:.+]] = llm.exp %{{.*}} : tensor<2x4x5x5xf32>
// CHECK: llm.matmul %{{.*}}, %{{.*}} {transpose_rhs} : tensor<2x4x5x64xbf16>, tensor<2x4x5x64xbf16> -> tensor<2x4x5x5xf32>
// CHECK-DAG: %[[PB:.+]] = llm.cast %[[P]] : tensor<2x4x5x5xf32> to tensor<2x4x5x5xbf16>
// CHECK-DAG: llm.matmul %[[PB]], %{{.*}} {transpose_lhs} : tensor<2x4x5x5xbf16>, tensor<2x4x5x64xbf16> -> tensor<2x4x5x64xf32>
// CHECK: llm.reduce_sum %{{.*}} [2] : tensor<2x2x2x5x64xf32>
// CHECK: return %{{.*}}, %{{.*}}, %{{.*}} : tensor<2x5x4x64xbf16>, tensor<2x5x2x64xbf16>, tensor<2x5x2x64xbf16>
func.func @backward(%q: tensor<2x5x4x64xbf16>, %k: tensor<2x5x2x64xbf16>, %v: tensor<2x5x2x64xbf16>, %o: tensor<2x5x4x64xbf16>, %do: tensor<2x5x4x64xbf16>, %lse: tensor<2x4x5xf32>) -> (tensor<2x5x4x64xbf16>, tensor<2x5x2x64xbf16>, tensor<2x5x2x64xbf16>) {
  %dq, %dk, %dv = llm.attention_backward %q, %k, %v, %o, %do, %lse : tensor<2x5x4x64xbf16>, tensor<2x5x2x64xbf16>, tensor<2x5x2x64xbf16>, tensor<2x5x4x64xbf16>, tensor<2x5x4x64xbf16>, tensor<2x4x5xf32>
  return %dq, %dk, %dv : tensor<2x5x4x64xbf16>, tensor<2x5x2x64xbf16>, tensor<2x5x2x64xbf16>
}

// CHECK-LABEL: func.func @lse
// CHECK-NOT: llm.attention_logsumexp
// CHECK-DAG: llm.constant dense<[0, 1, 2, 3, 4]> : tensor<5xi64>
// CHECK-DAG: %[[QT:.+]] = llm.transpose %arg0 [0, 2, 1, 3] : tensor<2x5x4x64xbf16>
// CHECK-DAG: llm.broadcast %{{.*}} : tensor<2x2x1x5x64xbf16> to tensor<2x2x2x5x64xbf16>
// CHECK: %[[S:.+]] = llm.matmul %[[QT]], %{{.*}} {transpose_rhs} : tensor<2x4x5x64xbf16>, tensor<2x4x5x64xbf16> -> tensor<2x4x5x5xf32>
// CHECK: llm.compare le
// CHECK: llm.select
// CHECK: llm.reduce_max %{{.*}} [3] keepdim
// CHECK: llm.exp
// CHECK: llm.reduce_sum %{{.*}} [3] keepdim
// CHECK: llm.log
// CHECK: llm.select
// CHECK: return %{{.*}} : tensor<2x4x5xf32>
func.func @lse(%q: tensor<2x5x4x64xbf16>, %k: tensor<2x5x2x64xbf16>) -> tensor<2x4x5xf32> {
  %lse = llm.attention_logsumexp %q, %k {causal} : tensor<2x5x4x64xbf16>, tensor<2x5x2x64xbf16> -> tensor<2x4x5xf32>
  return %lse : tensor<2x4x5xf32>
}

// EXE: counts inputs=6 outputs=3 {{.*}} gemms=5 collectives=0 attentions=0
