// The tools compile one top-level func.func; one inside a nested module is
// not searched, and the error says so (before: only "no function with a body
// in the module", which reads as if the file were empty).
// RUN: not llmc-run %s --backend=ref 2>&1 | FileCheck %s
// RUN: not llmc-compile %s --arch=sm_90a -o %t.llmcx 2>&1 | FileCheck %s
// CHECK: error: no function with a body in the module; functions in nested modules are not searched: put the function at the top level of the file
module {
  module @inner {
    func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
      %0 = llm.add %a, %a : tensor<4xf32>
      return %0 : tensor<4xf32>
    }
  }
}
