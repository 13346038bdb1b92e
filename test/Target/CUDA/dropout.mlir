// Dropout as the importer writes it: a Philox keep mask on the function's
// seed (one kernel, stream and threshold as launch arguments), then the
// scaled product fused into one elementwise kernel; NVRTC compiles it.
// RUN: llmc-compile %s --arch=sm_90a --emit=executable-dump | FileCheck %s
// RUN: rm -rf %t && mkdir %t && llmc-compile %s --arch=sm_90a -o %t/a.llmcx && llmc-compile %s --arch=sm_80 -o %t/b.llmcx

// CHECK: kernel 0 llmc_dropout_mask_philox
// CHECK: launch 0 call kernel llmc_dropout_mask_philox grid=[5,1,1] block=[256,1,1] {{.*}}i64:1152,i32:1677722,i32:2] label="llm.dropout_mask"
// CHECK: launch 1 call kernel llmc_ew_
func.func @dropout(%x: tensor<2x9x64xbf16>, %seed: tensor<i64>) -> (tensor<2x9x64xbf16>, tensor<2x9x64xi1>) {
  %keep = llm.dropout_mask %seed {p = 0.1 : f64, stream = 2 : i64} : tensor<i64> -> tensor<2x9x64xi1>
  %kf = llm.cast %keep : tensor<2x9x64xi1> to tensor<2x9x64xbf16>
  %k = llm.mul %x, %kf : tensor<2x9x64xbf16>
  %c = llm.constant dense<1.109375> : tensor<bf16>
  %cb = llm.broadcast %c : tensor<bf16> to tensor<2x9x64xbf16>
  %y = llm.mul %k, %cb : tensor<2x9x64xbf16>
  return %y, %keep : tensor<2x9x64xbf16>, tensor<2x9x64xi1>
}
