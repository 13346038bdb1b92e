// Row kernels over rows too long for registers are streamed, not unrolled:
// NVRTC's time grew with the row width when every thread kept width/1024
// elements in an unrolled register array (rms_norm over 2^20 columns: 3.4 s;
// 2^22: over 2 minutes; 2^31: never finished). Rows of 2^30 elements or more
// are indexed with 64-bit integers (an `int kN = 2147483648` wrapped).
// RUN: llmc-compile %s --fn=rms_norm_2p31 --arch=sm_90a --emit-cuda | FileCheck %s --check-prefix=RMS
// RMS: ===== kernel llmc_rmsnorm_bf16_bf16_bf16_h2147483648
// RMS: Long row: one block per row, streamed
// RMS-NOT: kChunks
// RMS: static constexpr long long kN = 2147483648LL;
// RMS-NOT: kChunks
// RMS: for (int64_t vi = t; vi < kNumVec; vi += kThreadsPerRow)
// RMS-NOT: kChunks
func.func @rms_norm_2p31(%x: tensor<2x2147483648xbf16>, %w: tensor<2147483648xbf16>) -> tensor<2x2147483648xbf16> {
  %y = llm.rms_norm %x, %w {eps = 1.0e-05 : f64} : tensor<2x2147483648xbf16>, tensor<2147483648xbf16>
  return %y : tensor<2x2147483648xbf16>
}

// RUN: llmc-compile %s --fn=layer_norm_2p20 --arch=sm_90a --emit-cuda | FileCheck %s --check-prefix=LN
// LN: ===== kernel llmc_layernorm_f32_f32_f32_h1048576
// LN: Long row: one block per row, streamed
// LN-NOT: kChunks
// LN: pass 2: biased variance
func.func @layer_norm_2p20(%x: tensor<4x1048576xf32>, %w: tensor<1048576xf32>, %b: tensor<1048576xf32>) -> tensor<4x1048576xf32> {
  %y = llm.layer_norm %x, %w, %b : tensor<4x1048576xf32>, tensor<1048576xf32>, tensor<1048576xf32>
  return %y : tensor<4x1048576xf32>
}

// RUN: llmc-compile %s --fn=softmax_2p31 --arch=sm_90a --emit-cuda | FileCheck %s --check-prefix=SOFTMAX
// SOFTMAX: ===== kernel llmc_softmax_f16_f16_n2147483648
// SOFTMAX: static constexpr long long kN = 2147483648LL;
// SOFTMAX-NOT: int vi
// SOFTMAX: for (int64_t vi = t; vi < kNumVec; vi += kThreadsPerRow)
// SOFTMAX-NOT: int vi
func.func @softmax_2p31(%x: tensor<1x2147483648xf16>) -> tensor<1x2147483648xf16> {
  %y = llm.softmax %x : tensor<1x2147483648xf16>
  return %y : tensor<1x2147483648xf16>
}

// Kernels indexing a row with 32-bit integers refuse rows they would
// overflow (gather emitted `int kDim = 2147483648`, a wrapped row length).
// RUN: not llmc-compile %s --fn=gather_2p31 --arch=sm_90a 2>&1 | FileCheck %s --check-prefix=GATHER
// GATHER: llmc-compile: error: cuda backend: 'llm.gather' at {{.*}}long-rows.mlir{{.*}}: llmc::cuda kernel generator: gather: rows of 2147483648 elements; at most 2^30 (1073741824) are supported
func.func @gather_2p31(%t: tensor<16x2147483648xbf16>, %i: tensor<3xi64>) -> tensor<3x2147483648xbf16> {
  %y = llm.gather %t, %i axis = 0 : tensor<16x2147483648xbf16>, tensor<3xi64>
  return %y : tensor<3x2147483648xbf16>
}
