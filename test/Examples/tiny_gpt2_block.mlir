// RUN: llmc-opt %llmc_src_root/examples/tiny_gpt2_block.mlir | FileCheck %s

// CHECK-LABEL: func.func @tiny_gpt2_block
// CHECK:         llm.gather {{.*}} axis = 0 : tensor<97x48xf32>, tensor<1x?xi64>
// CHECK:         llm.attention {{.*}} {causal} : tensor<1x?x4x12xf32>
// CHECK:         llm.gelu {{.*}} tanh : tensor<1x?x192xf32>
// CHECK:         llm.matmul {{.*}} {transpose_rhs} : tensor<1x?x48xf32>, tensor<97x48xf32> -> tensor<1x?x97xf32>
// CHECK:         return {{.*}} : tensor<1x?x97xf32>
