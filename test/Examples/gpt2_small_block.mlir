// RUN: llmc-opt %llmc_src_root/examples/gpt2_small_block.mlir | FileCheck %s

// CHECK-LABEL: func.func @gpt2_small_block
// CHECK-SAME:    tensor<1x?xi64>
// CHECK:         llm.gather {{.*}} axis = 0 : tensor<50257x768xf32>, tensor<1x?xi64>
// CHECK:         llm.gather {{.*}} axis = 0 : tensor<1024x768xf32>, tensor<1x?xi64>
// CHECK:         llm.layer_norm {{.*}} : tensor<1x?x768xf32>, tensor<768xf32>, tensor<768xf32>
// CHECK:         llm.matmul {{.*}} bias {{.*}} -> tensor<1x?x2304xf32>
// CHECK:         llm.slice
// CHECK:         llm.attention {{.*}} {causal} : tensor<1x?x12x64xf32>
// CHECK:         llm.gelu {{.*}} tanh : tensor<1x?x3072xf32>
// CHECK:         llm.layer_norm
// CHECK:         llm.matmul {{.*}} {transpose_rhs} : tensor<1x?x768xf32>, tensor<50257x768xf32> -> tensor<1x?x50257xf32>
// CHECK:         return {{.*}} : tensor<1x?x50257xf32>
