// RUN: llmc-opt %llmc_src_root/examples/llama2_7b_decode_step.mlir | FileCheck %s

// CHECK-LABEL: func.func @llama2_7b_decode_step
// CHECK-SAME:    %[[POS:[^:]+]]: tensor<i64>
// CHECK:         %[[ONE:.+]] = llm.constant dense<1> : tensor<i64>
// CHECK:         %[[LEN:.+]] = llm.add %[[POS]], %[[ONE]] : tensor<i64>
// CHECK:         llm.rope {{.*}} offset %[[POS]] half_split
// CHECK:         %[[KC:.+]] = llm.kv_cache_append {{.*}}, %[[POS]] : tensor<?x2048x32x128xbf16>, tensor<?x1x32x128xbf16>, tensor<i64>
// CHECK:         %[[VC:.+]] = llm.kv_cache_append {{.*}}, %[[POS]]
// CHECK:         llm.attention {{.*}}, %[[KC]], %[[VC]] kv_len(%[[LEN]] : tensor<i64>) {causal}
// CHECK:         return {{.*}}, %[[KC]], %[[VC]] : tensor<?x1x4096xbf16>, tensor<?x2048x32x128xbf16>, tensor<?x2048x32x128xbf16>
