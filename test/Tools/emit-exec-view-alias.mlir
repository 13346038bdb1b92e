// A view whose layout is a dense block of its source's storage is read in
// place: the consumer gets the source's buffer at the block's byte offset,
// with no copy, when that offset keeps 256-byte alignment (the k and v parts
// of a fused QKV output at decode: slices of one row). A view at an offset
// that breaks the alignment is still copied into a buffer of its own.
// RUN: llmc-compile %s --emit=exec | FileCheck %s
// RUN: llmc-compile %s --fn=misaligned_slice --emit=exec | FileCheck %s --check-prefix=MIS

// CHECK-LABEL: exec.executable @qkv_slices
// CHECK-DAG:     %[[QKV:b[0-9]+]] = exec.buffer input[0] 768 bytes
// CHECK-DAG:     %[[KC:b[0-9]+]] = exec.buffer input[1] 4096 bytes
// CHECK-DAG:     %[[VC:b[0-9]+]] = exec.buffer input[2] 4096 bytes
// CHECK-NOT:     exec.copy
// CHECK-NOT:     llmc_ew_
// CHECK:         exec.launch @llmc_index_copy{{[a-z0-9_]+}} {{.*}}(%[[KC]][0], %[[QKV]][256], {{.*}} label "llm.index_put"
// CHECK:         exec.launch @llmc_index_copy{{[a-z0-9_]+}} {{.*}}(%[[VC]][0], %[[QKV]][512], {{.*}} label "llm.index_put"
func.func @qkv_slices(%qkv: tensor<1x384xbf16>, %kc: tensor<1x2x16x64xbf16> {llm.donate},
                      %vc: tensor<1x2x16x64xbf16> {llm.donate}, %pos: tensor<1xi64>)
    -> (tensor<1x2x16x64xbf16>, tensor<1x2x16x64xbf16>) {
  %k = llm.slice %qkv [0, 128] to [1, 256] step [1, 1] : tensor<1x384xbf16>
  %v = llm.slice %qkv [0, 256] to [1, 384] step [1, 1] : tensor<1x384xbf16>
  %k4 = llm.reshape %k : tensor<1x128xbf16> to tensor<1x2x1x64xbf16>
  %v4 = llm.reshape %v : tensor<1x128xbf16> to tensor<1x2x1x64xbf16>
  %kc2 = llm.index_put %kc[%pos], %k4 dim = 2 : tensor<1x2x16x64xbf16>, tensor<1xi64>, tensor<1x2x1x64xbf16>
  %vc2 = llm.index_put %vc[%pos], %v4 dim = 2 : tensor<1x2x16x64xbf16>, tensor<1xi64>, tensor<1x2x1x64xbf16>
  return %kc2, %vc2 : tensor<1x2x16x64xbf16>, tensor<1x2x16x64xbf16>
}

// 64 elements of bf16 are 128 bytes: the slice is copied (a strided copy
// kernel) before the write reads it.
// MIS-LABEL: exec.executable @misaligned_slice
// MIS:         exec.launch @llmc_ew_{{[0-9a-f]+}} {{.*}}%b0[128]
// MIS:         exec.launch @llmc_index_copy{{[a-z0-9_]+}}
func.func @misaligned_slice(%qkv: tensor<1x384xbf16>, %kc: tensor<1x2x16x64xbf16> {llm.donate},
                            %pos: tensor<1xi64>) -> tensor<1x2x16x64xbf16> {
  %k = llm.slice %qkv [0, 64] to [1, 192] step [1, 1] : tensor<1x384xbf16>
  %k4 = llm.reshape %k : tensor<1x128xbf16> to tensor<1x2x1x64xbf16>
  %kc2 = llm.index_put %kc[%pos], %k4 dim = 2 : tensor<1x2x16x64xbf16>, tensor<1xi64>, tensor<1x2x1x64xbf16>
  return %kc2 : tensor<1x2x16x64xbf16>
}
