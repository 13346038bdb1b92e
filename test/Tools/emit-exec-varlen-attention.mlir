// llm.varlen_attention (issue 19): one FlashAttention-2 launch over the packed
// sequences, in the tile its llm.kernel_config chose; the kernel reads each
// sequence's rows from cu_seqlens_q / cu_seqlens_k (its last two arguments).
// Grid: batch x heads (2 x 8) by the T = 9 query rows in 64-row tiles.
// RUN: llmc-compile %s --fn=packed --emit=exec | FileCheck %s
// RUN: llmc-opt %s --llmc-select-kernel-configs | FileCheck %s --check-prefix=CONFIG
// CHECK-LABEL: exec.executable @packed
// CHECK-DAG:     %[[Q:b[0-9]+]] = exec.buffer input[0]
// CHECK-DAG:     %[[K:b[0-9]+]] = exec.buffer input[1]
// CHECK-DAG:     %[[V:b[0-9]+]] = exec.buffer input[2]
// CHECK-DAG:     %[[CUQ:b[0-9]+]] = exec.buffer input[3]
// CHECK-DAG:     %[[CUK:b[0-9]+]] = exec.buffer input[4]
// CHECK-DAG:     %[[O:b[0-9]+]] = exec.buffer output[0]
// CHECK:         exec.launch @llmc_flash_attn_bf16_d64_causal_varlen_i32i64_bm64_bn64_w4_s2_gh grid [16, 1, 1] {{.*}}(%[[O]][0], %[[Q]][0], %[[K]][0], %[[V]][0], 0 : i64, 2 : i64, 9 : i64, 12 : i64, 8 : i32, 2 : i32, 1.250000e-01 : f32, 0 : i64, 0 : i64, 0 : i64, %[[CUQ]][0], %[[CUK]][0]) label "llm.varlen_attention"
// CHECK-NOT:     exec.launch
// CONFIG: llm.varlen_attention {{.*}}llm.kernel_config = {cudnn = false, kernel = "flash_attention", tile = "bm64_bn64_w4_s2_gh"}
func.func @packed(%q: tensor<9x8x64xbf16>, %k: tensor<12x2x64xbf16>, %v: tensor<12x2x64xbf16>,
                  %cuq: tensor<3xi32>, %cuk: tensor<3xi64>) -> tensor<9x8x64xbf16> {
  %o = llm.varlen_attention %q, %k, %v, %cuq, %cuk {causal} : tensor<9x8x64xbf16>, tensor<12x2x64xbf16>, tensor<12x2x64xbf16>, tensor<3xi32>, tensor<3xi64>
  return %o : tensor<9x8x64xbf16>
}
