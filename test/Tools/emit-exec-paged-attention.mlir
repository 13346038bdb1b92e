// One serving step of a layer over a paged KV cache (issue 19): the new
// tokens' K and V appended into their pages in place (the donated pages are
// the outputs, alias_input), then paged flash-decoding (split + combine) as
// the attention's llm.kernel_config chose it.
// RUN: llmc-compile %s --fn=decode --emit=exec | FileCheck %s
// RUN: llmc-opt %s --llmc-select-kernel-configs | FileCheck %s --check-prefix=CONFIG
// CHECK-LABEL: exec.executable @decode
// CHECK:         exec.output "result1" : tensor<32x16x2x64xbf16> alias_input 3
// CHECK:         exec.output "result2" : tensor<32x16x2x64xbf16> alias_input 4
// CHECK-DAG:     %[[Q:b[0-9]+]] = exec.buffer input[0]
// CHECK-DAG:     %[[K:b[0-9]+]] = exec.buffer input[1]
// CHECK-DAG:     %[[V:b[0-9]+]] = exec.buffer input[2]
// CHECK-DAG:     %[[KP:b[0-9]+]] = exec.buffer input[3]
// CHECK-DAG:     %[[VP:b[0-9]+]] = exec.buffer input[4]
// CHECK-DAG:     %[[BT:b[0-9]+]] = exec.buffer input[5]
// CHECK-DAG:     %[[CU:b[0-9]+]] = exec.buffer input[6]
// CHECK-DAG:     %[[LENS:b[0-9]+]] = exec.buffer input[7]
// CHECK-DAG:     %[[O:b[0-9]+]] = exec.buffer output[0]
// CHECK:         exec.launch @llmc_paged_kvappend_bf16_h2_d64_ps16_i32i32i32 grid [4, 1, 1] {{.*}}(%[[KP]][0], %[[K]][0], %[[BT]][0], %[[CU]][0], %[[LENS]][0], %{{b[0-9]+}}[0], 4 : i64, 4 : i64, 8 : i64, 32 : i64) label "llm.paged_kv_append"
// CHECK:         exec.launch @llmc_paged_kvappend_bf16_h2_d64_ps16_i32i32i32 grid [4, 1, 1] {{.*}}(%[[VP]][0], %[[V]][0], %[[BT]][0], %[[CU]][0], %[[LENS]][0], %{{b[0-9]+}}[0], 4 : i64, 4 : i64, 8 : i64, 32 : i64) label "llm.paged_kv_append"
// CHECK:         exec.launch @llmc_flashdec_split_bf16_d64_g4_q1_causal_paged16_i32i32i32_{{[a-z0-9]+}} grid [1, 2, 4] {{.*}}(%[[ACC:b[0-9]+]][0], %[[ML:b[0-9]+]][0], %[[Q]][0], %[[KP]][0], %[[VP]][0], %[[BT]][0], %[[CU]][0], %[[LENS]][0], 8 : i64, 32 : i64, 2 : i32, 1.250000e-01 : f32, 1 : i32) label "llm.paged_attention"
// CHECK:         exec.launch @llmc_flashdec_combine_bf16_d64_g4_q1_lenarg grid [32, 1, 1] {{.*}}(%[[O]][0], %[[ACC]][0], %[[ML]][0], 2 : i32, 1 : i32) label "llm.paged_attention"
// CONFIG: llm.paged_attention {{.*}}llm.kernel_config = {kernel = "paged_flash_decode", query_rows = 1 : i64, splits = 1 : i64}
func.func @decode(%q: tensor<4x8x64xbf16>, %k: tensor<4x2x64xbf16>, %v: tensor<4x2x64xbf16>,
                  %kp: tensor<32x16x2x64xbf16> {llm.donate, llm.aliasing_output = 1 : i64},
                  %vp: tensor<32x16x2x64xbf16> {llm.donate, llm.aliasing_output = 2 : i64},
                  %bt: tensor<4x8xi32>, %cu: tensor<5xi32>, %lens: tensor<4xi32>)
    -> (tensor<4x8x64xbf16>, tensor<32x16x2x64xbf16>, tensor<32x16x2x64xbf16>) {
  %kp2 = llm.paged_kv_append %kp, %k, %bt, %cu, %lens : tensor<32x16x2x64xbf16>, tensor<4x2x64xbf16>, tensor<4x8xi32>, tensor<5xi32>, tensor<4xi32>
  %vp2 = llm.paged_kv_append %vp, %v, %bt, %cu, %lens : tensor<32x16x2x64xbf16>, tensor<4x2x64xbf16>, tensor<4x8xi32>, tensor<5xi32>, tensor<4xi32>
  %o = llm.paged_attention %q, %kp2, %vp2, %bt, %cu, %lens {causal} : tensor<4x8x64xbf16>, tensor<32x16x2x64xbf16>, tensor<32x16x2x64xbf16>, tensor<4x8xi32>, tensor<5xi32>, tensor<4xi32>
  return %o, %kp2, %vp2 : tensor<4x8x64xbf16>, tensor<32x16x2x64xbf16>, tensor<32x16x2x64xbf16>
}
