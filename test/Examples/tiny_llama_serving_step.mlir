// The serving step parses and compiles for CUDA at a ragged batch (12 new
// tokens of 3 sequences): both layers append K and V into their donated pages
// in place (the page outputs alias their inputs) and attend with paged
// flash-decoding taking ceil(12 / 3) = 4 query rows at a time.
// RUN: llmc-opt %llmc_src_root/examples/tiny_llama_serving_step.mlir | FileCheck %s --check-prefix=IR
// RUN: llmc-compile %llmc_src_root/examples/tiny_llama_serving_step.mlir --shape tokens=12 --shape seqs_plus_one=4 --shape seqs=3 --shape logit_rows=3 --emit=exec | FileCheck %s

// IR-LABEL: func.func @tiny_llama_serving_step
// IR-COUNT-2: llm.paged_kv_append
// IR: llm.paged_attention
// IR-COUNT-2: llm.paged_kv_append
// IR: llm.paged_attention
// IR: return %{{.*}} : tensor<?x97xf32>, tensor<64x4x2x16xf32>

// CHECK: exec.output "result0" : tensor<3x97xf32>
// CHECK: exec.output "result1" : tensor<64x4x2x16xf32> alias_input 6
// CHECK: exec.output "result4" : tensor<64x4x2x16xf32> alias_input 9
// CHECK-COUNT-2: exec.launch @llmc_paged_kvappend_f32_h2_d16_ps4_i32i32i32 grid [12, 1, 1]
// CHECK: exec.launch @llmc_flashdec_split_f32_d16_g2_q4_causal_paged4_i32i32i32_{{[a-z0-9]+}} grid [1, 2, 3]
// CHECK: exec.launch @llmc_flashdec_combine_f32_d16_g2_q1_lenarg grid [48, 1, 1]
// CHECK-COUNT-2: exec.launch @llmc_paged_kvappend_f32_h2_d16_ps4_i32i32i32 grid [12, 1, 1]
// CHECK: exec.launch @llmc_flashdec_split_f32_d16_g2_q4_causal_paged4_i32i32i32_{{[a-z0-9]+}} grid [1, 2, 3]
