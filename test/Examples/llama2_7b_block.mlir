// RUN: llmc-opt %llmc_src_root/examples/llama2_7b_block.mlir | FileCheck %s

// CHECK-LABEL: func.func @llama2_7b_block
// CHECK-SAME:    tensor<1x?x4096xbf16>
// CHECK:         llm.rms_norm {{.*}} : tensor<1x?x4096xbf16>, tensor<4096xbf16>
// CHECK:         llm.matmul {{.*}} {transpose_rhs} : tensor<1x?x4096xbf16>, tensor<4096x4096xbf16> -> tensor<1x?x4096xbf16>
// CHECK:         llm.reshape {{.*}} to tensor<1x?x32x128xbf16>
// CHECK:         llm.rope {{.*}} half_split : tensor<1x?x32x128xbf16>
// CHECK:         llm.attention {{.*}} {causal} : tensor<1x?x32x128xbf16>, tensor<1x?x32x128xbf16>, tensor<1x?x32x128xbf16>
// CHECK:         llm.add
// CHECK:         llm.silu {{.*}} : tensor<1x?x11008xbf16>
// CHECK:         llm.mul
// CHECK:         -> tensor<1x?x4096xbf16>
// CHECK:         return {{.*}} : tensor<1x?x4096xbf16>
