// llm.varlen_attention has reference semantics (the reference executor) but
// no CUDA kernel yet (issue 19): compiling it is a clear error naming the
// op, and nothing is written.
// RUN: rm -f %t.llmcx
// RUN: not llmc-compile %s --fn=packed -o %t.llmcx 2>&1 | FileCheck %s
// RUN: not test -e %t.llmcx
// CHECK: llmc-compile: error: {{.*}}llm.varlen_attention{{.*}}no CUDA lowering for this op
func.func @packed(%q: tensor<9x8x64xbf16>, %k: tensor<9x2x64xbf16>, %v: tensor<9x2x64xbf16>,
                  %cuq: tensor<3xi32>, %cuk: tensor<3xi32>) -> tensor<9x8x64xbf16> {
  %o = llm.varlen_attention %q, %k, %v, %cuq, %cuk {causal} : tensor<9x8x64xbf16>, tensor<9x2x64xbf16>, tensor<9x2x64xbf16>, tensor<3xi32>, tensor<3xi32>
  return %o : tensor<9x8x64xbf16>
}
