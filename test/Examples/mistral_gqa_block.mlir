// RUN: llmc-opt %llmc_src_root/examples/mistral_gqa_block.mlir | FileCheck %s

// CHECK-LABEL: func.func @mistral_gqa_block
// CHECK:         llm.matmul {{.*}} : tensor<1x?x4096xbf16>, tensor<1024x4096xbf16> -> tensor<1x?x1024xbf16>
// CHECK:         llm.reshape {{.*}} to tensor<1x?x8x128xbf16>
// CHECK:         llm.rope {{.*}} half_split {theta = 1.000000e+06 : f64} : tensor<1x?x32x128xbf16>
// CHECK:         llm.rope {{.*}} half_split {theta = 1.000000e+06 : f64} : tensor<1x?x8x128xbf16>
// CHECK:         llm.attention {{.*}} {causal} : tensor<1x?x32x128xbf16>, tensor<1x?x8x128xbf16>, tensor<1x?x8x128xbf16>
// CHECK:         llm.silu {{.*}} : tensor<1x?x14336xbf16>
// CHECK:         return {{.*}} : tensor<1x?x4096xbf16>
