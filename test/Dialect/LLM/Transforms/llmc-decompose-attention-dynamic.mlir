// llmc-decompose-attention needs static shapes (the pipeline runs it after
// shape specialization); a dynamic one is an error naming the op.
// RUN: not llmc-opt %s --llmc-decompose-attention=fused-kernels=false -o /dev/null 2>&1 | FileCheck %s

// CHECK: error: 'llm.attention_backward' op llmc-decompose-attention needs static shapes, found 'tensor<2x?x4x64xbf16>' (bind the dynamic dimensions with shape specialization)
func.func @dynamic(%q: tensor<2x?x4x64xbf16>, %lse: tensor<2x4x?xf32>) -> tensor<2x?x4x64xbf16> {
  %g:3 = llm.attention_backward %q, %q, %q, %q, %q, %lse : tensor<2x?x4x64xbf16>, tensor<2x?x4x64xbf16>, tensor<2x?x4x64xbf16>, tensor<2x?x4x64xbf16>, tensor<2x?x4x64xbf16>, tensor<2x4x?xf32>
  return %g#0 : tensor<2x?x4x64xbf16>
}
