// llm.paged_attention has reference semantics (the reference executor) but
// no CUDA kernel yet (issue 19): compiling it is a clear error naming the
// op, and nothing is written.
// RUN: rm -f %t.llmcx
// RUN: not llmc-compile %s -o %t.llmcx 2>&1 | FileCheck %s
// RUN: not test -e %t.llmcx
// CHECK: llmc-compile: error: {{.*}}llm.paged_attention{{.*}}no CUDA lowering for this op
func.func @decode(%q: tensor<4x8x64xbf16>, %kp: tensor<32x16x2x64xbf16>, %vp: tensor<32x16x2x64xbf16>,
                  %bt: tensor<4x8xi32>, %cu: tensor<5xi32>, %lens: tensor<4xi32>) -> tensor<4x8x64xbf16> {
  %o = llm.paged_attention %q, %kp, %vp, %bt, %cu, %lens {causal} : tensor<4x8x64xbf16>, tensor<32x16x2x64xbf16>, tensor<32x16x2x64xbf16>, tensor<4x8xi32>, tensor<5xi32>, tensor<4xi32>
  return %o : tensor<4x8x64xbf16>
}
