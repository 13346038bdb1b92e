// llm.index_put (issues 16 and 17): a KV-cache write into a donated cache
// (in place: no copy of the cache), a copy into a fresh result (the base is
// copied first), the embedding backward (accumulate into zeros: the add
// kernel zero-fills, nothing is read for the base) and a bf16 accumulate
// (fp32 scratch, one rounding). Random integer inputs of llmc-run are in
// [0, 7], so %tok has duplicates; %pos has one element and the copy's
// indices are constants, so no copy sees a duplicate. On the GPU,
// `llmc-run --check` compares every result with the float64 reference
// executor.
// RUN: llmc-compile %s --emit=exec | FileCheck %s
// ARGS:
//
// CHECK-LABEL: exec.executable @index_put
// CHECK:       exec.output "result0" : tensor<2x4x16x64xbf16> alias_input 0
// CHECK:       %[[CACHE:.+]] = exec.buffer input[0] 16384 bytes
// CHECK:       %[[DW:.+]] = exec.buffer output[1] 19200 bytes
// CHECK:       %[[SCRATCH:.+]] = exec.buffer arena 3840 bytes
// No buffer holds the embedding backward's 50x96 zeros (19200 bytes).
// CHECK-NOT:   exec.buffer constant 19200 bytes
// The KV-cache write: one row per (batch, head), into the donated cache.
// CHECK-NOT:   exec.copy
// CHECK:       exec.launch @llmc_index_copy_bf16_i64_i64 grid [1, 8, 1] block [256, 1, 1] smem 0 (%[[CACHE]][0],
// The embedding backward: the base is zeros, so the base pointer is the
// output (never read), and no constant buffer holds the zeros.
// CHECK-NEXT:  exec.launch @llmc_index_add_zero_f32_i64_i96 grid [50, 1, 1] block [256, 1, 1] smem 0 (%[[DW]][0], %[[DW]][0],
// CHECK-NEXT:  exec.launch @llmc_index_add_bf16_i64_i40 {{.*}}, %[[SCRATCH]][0], 1 : i64, 10 : i64, 24 : i64, 1 : i64)
// A base that is not donated is copied into the result first.
// CHECK-NEXT:  exec.copy 480 bytes
// CHECK-NEXT:  exec.launch @llmc_index_copy_f32_i64_i5
func.func @index_put(%cache: tensor<2x4x16x64xbf16> {llm.donate}, %pos: tensor<1xi64>,
                     %k: tensor<2x4x1x64xbf16>, %tok: tensor<24xi64>, %g: tensor<24x96xf32>,
                     %b: tensor<10x40xbf16>, %gb: tensor<24x40xbf16>,
                     %w: tensor<3x8x5xf32>, %v: tensor<3x3x5xf32>)
    -> (tensor<2x4x16x64xbf16>, tensor<50x96xf32>, tensor<10x40xbf16>, tensor<3x8x5xf32>) {
  %kc = llm.index_put %cache[%pos], %k dim = 2 : tensor<2x4x16x64xbf16>, tensor<1xi64>, tensor<2x4x1x64xbf16>
  %zeros = llm.constant dense<0.0> : tensor<50x96xf32>
  %dw = llm.index_put %zeros[%tok], %g dim = 0 {accumulate} : tensor<50x96xf32>, tensor<24xi64>, tensor<24x96xf32>
  %db = llm.index_put %b[%tok], %gb dim = 0 {accumulate} : tensor<10x40xbf16>, tensor<24xi64>, tensor<24x40xbf16>
  %idx = llm.constant dense<[4, 0, -1]> : tensor<3xi64>
  %x = llm.index_put %w[%idx], %v dim = 1 : tensor<3x8x5xf32>, tensor<3xi64>, tensor<3x3x5xf32>
  return %kc, %dw, %db, %x : tensor<2x4x16x64xbf16>, tensor<50x96xf32>, tensor<10x40xbf16>, tensor<3x8x5xf32>
}
