// llm.paged_attention and llm.varlen_attention have reference semantics
// (the reference executor) but no CUDA kernel yet (issue 19): compiling them
// is a clear error naming the op, and nothing is written.
// RUN: rm -f %t.llmcx
// RUN: not llmc-compile %s --fn=decode -o %t.llmcx 2>&1 | FileCheck %s
// RUN: not llmc-compile %s --fn=packed -o %t.llmcx 2>&1 | FileCheck %s --check-prefix=VARLEN
// RUN: not test -e %t.llmcx
// CHECK: llmc-compile: error: {{.*}}llm.paged_attention{{.*}}no CUDA lowering for this op
// VARLEN: llmc-compile: error: {{.*}}llm.varlen_attention{{.*}}no CUDA lowering for this op
func.func @decode(%q: tensor<4x8x64xbf16>, %kp: tensor<32x16x2x64xbf16>, %vp: tensor<32x16x2x64xbf16>,
                  %bt: tensor<4x8xi32>, %cu: tensor<5xi32>, %lens: tensor<4xi32>) -> tensor<4x8x64xbf16> {
  %o = llm.paged_attention %q, %kp, %vp, %bt, %cu, %lens {causal} : tensor<4x8x64xbf16>, tensor<32x16x2x64xbf16>, tensor<32x16x2x64xbf16>, tensor<4x8xi32>, tensor<5xi32>, tensor<4xi32>
  return %o : tensor<4x8x64xbf16>
}
func.func @packed(%q: tensor<9x8x64xbf16>, %k: tensor<9x2x64xbf16>, %v: tensor<9x2x64xbf16>,
                  %cuq: tensor<3xi32>, %cuk: tensor<3xi32>) -> tensor<9x8x64xbf16> {
  %o = llm.varlen_attention %q, %k, %v, %cuq, %cuk {causal} : tensor<9x8x64xbf16>, tensor<9x2x64xbf16>, tensor<9x2x64xbf16>, tensor<3xi32>, tensor<3xi32>
  return %o : tensor<9x8x64xbf16>
}
