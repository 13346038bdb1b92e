// RUN: llmc-opt %llmc_src_root/examples/tiny_llama_block.mlir | FileCheck %s

// CHECK-LABEL: func.func @tiny_llama_block
// CHECK-SAME:    tensor<1x?x64xf32>
// CHECK:         llm.rms_norm
// CHECK:         llm.matmul {{.*}} -> tensor<1x?x32xf32>
// CHECK:         llm.attention {{.*}} {causal} : tensor<1x?x4x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>
// CHECK:         llm.silu {{.*}} : tensor<1x?x176xf32>
// CHECK:         return {{.*}} : tensor<1x?x64xf32>
