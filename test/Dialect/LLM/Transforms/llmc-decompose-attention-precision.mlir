// Under a lower-precision policy attention's training ops take the
// attention's type before llmc-decompose-attention: bf16 (fp8 policy included:
// the scores and probabilities stay out of fp8, as the forward kernel's),
// the statistics f32, the gradients cast back to the graph's f32.
// RUN: llmc-compile %s --precision=fp8 --emit=mlir | FileCheck %s
// RUN: llmc-compile %s --precision=bf16 --emit=mlir | FileCheck %s

// (In bf16 the op is the fused backward kernel's: it stays.)
// CHECK-LABEL: func.func @grads
// CHECK-NOT: f8E4M3FN
// CHECK: llm.attention_backward %{{.*}} {causal{{.*}}} : tensor<1x8x4x32xbf16>, tensor<1x8x2x32xbf16>, tensor<1x8x2x32xbf16>, tensor<1x8x4x32xbf16>, tensor<1x8x4x32xbf16>, tensor<1x4x8xf32>
// CHECK-NOT: f8E4M3FN
// CHECK: return %{{.*}}, %{{.*}}, %{{.*}} : tensor<1x8x4x32xf32>, tensor<1x8x2x32xf32>, tensor<1x8x2x32xf32>
func.func @grads(%q: tensor<1x8x4x32xf32>, %k: tensor<1x8x2x32xf32>, %v: tensor<1x8x2x32xf32>, %o: tensor<1x8x4x32xf32>, %do: tensor<1x8x4x32xf32>, %lse: tensor<1x4x8xf32>) -> (tensor<1x8x4x32xf32>, tensor<1x8x2x32xf32>, tensor<1x8x2x32xf32>) {
  %dq, %dk, %dv = llm.attention_backward %q, %k, %v, %o, %do, %lse {causal} : tensor<1x8x4x32xf32>, tensor<1x8x2x32xf32>, tensor<1x8x2x32xf32>, tensor<1x8x4x32xf32>, tensor<1x8x4x32xf32>, tensor<1x4x8xf32>
  return %dq, %dk, %dv : tensor<1x8x4x32xf32>, tensor<1x8x2x32xf32>, tensor<1x8x2x32xf32>
}
