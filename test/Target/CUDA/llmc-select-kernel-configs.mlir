// The configuration choices of the CUDA lowering, made in IR by
// llmc-select-kernel-configs (lib/Compiler/KernelConfigs.h) with the tuning
// knobs as its options; LowerToExecutable reads them
// (test/unit/compiler/KernelConfigsTest.cpp checks that it obeys).
// RUN: llmc-opt --split-input-file --llmc-select-kernel-configs %s | FileCheck %s
// RUN: llmc-opt --split-input-file --llmc-select-kernel-configs="attention-backend=llmc attention-tile=bm128_bn64_w8_s2 elementwise-unroll=4 gemv-unroll=8" %s | FileCheck %s --check-prefix=KNOBS
// RUN: llmc-opt --split-input-file --llmc-select-kernel-configs="attention-backend=cudnn" %s | FileCheck %s --check-prefix=CUDNN
// RUN: not llmc-opt --llmc-select-kernel-configs="attention-tile=bm64" %s 2>&1 | FileCheck %s --check-prefix=BAD-TILE
// RUN: not llmc-opt --llmc-select-kernel-configs="elementwise-unroll=5" %s 2>&1 | FileCheck %s --check-prefix=BAD-UNROLL
// RUN: not llmc-opt --llmc-select-kernel-configs="gemv-unroll=17" %s 2>&1 | FileCheck %s --check-prefix=BAD-GEMV
// RUN: not llmc-opt --llmc-select-kernel-configs="attention-backend=fast" %s 2>&1 | FileCheck %s --check-prefix=BAD-BACKEND
// RUN: llmc-opt --split-input-file --llmc-select-kernel-configs="flash-decode-combine=fused" %s | FileCheck %s --check-prefix=COMBINE
// RUN: not llmc-opt --llmc-select-kernel-configs="flash-decode-combine=yes" %s 2>&1 | FileCheck %s --check-prefix=BAD-COMBINE

// One query against a GQA KV cache: split-KV flash-decoding, its splits
// combined by a second kernel (flash-decode-combine=fused: by the split
// kernel itself, fused_combine); the other knobs do not change it.
// CHECK-LABEL: func.func @decode
// CHECK-SAME: attributes {llm.kernel_configs = {elementwise_unroll = 1 : i64, gemv_unroll = 4 : i64}}
// CHECK: llm.attention {{.*}}llm.kernel_config = {kernel = "flash_decode", splits = 32 : i64}
// COMBINE-LABEL: func.func @decode
// COMBINE: llm.attention {{.*}}llm.kernel_config = {fused_combine, kernel = "flash_decode", splits = 32 : i64}
// BAD-COMBINE: llmc-select-kernel-configs: flash-decode-combine: expected fused or kernel, found 'yes'
// KNOBS-LABEL: func.func @decode
// KNOBS-SAME: attributes {llm.kernel_configs = {elementwise_unroll = 4 : i64, gemv_unroll = 8 : i64}}
// KNOBS: llm.attention {{.*}}llm.kernel_config = {kernel = "flash_decode", splits = {{[0-9]+}} : i64}
func.func @decode(%q: tensor<1x1x32x128xbf16>, %k: tensor<1x2048x8x128xbf16>, %v: tensor<1x2048x8x128xbf16>) -> tensor<1x1x32x128xbf16> {
  %o = llm.attention %q, %k, %v : tensor<1x1x32x128xbf16>, tensor<1x2048x8x128xbf16>, tensor<1x2048x8x128xbf16>
  return %o : tensor<1x1x32x128xbf16>
}

// -----

// Causal prefill in bf16: FlashAttention-2 with the head dim's tile and
// cuDNN's SDPA first; backend=llmc keeps llmc's kernel alone.
// CHECK-LABEL: func.func @prefill
// CHECK: llm.attention {{.*}}llm.kernel_config = {cudnn = true, kernel = "flash_attention", tile = "bm64_bn64_w4_s2_gh"}
// KNOBS-LABEL: func.func @prefill
// KNOBS: llm.attention {{.*}}llm.kernel_config = {cudnn = false, kernel = "flash_attention", tile = "bm128_bn64_w8_s2"}
func.func @prefill(%q: tensor<2x128x8x128xbf16>, %k: tensor<2x128x8x128xbf16>, %v: tensor<2x128x8x128xbf16>) -> tensor<2x128x8x128xbf16> {
  %o = llm.attention %q, %k, %v {causal} : tensor<2x128x8x128xbf16>, tensor<2x128x8x128xbf16>, tensor<2x128x8x128xbf16>
  return %o : tensor<2x128x8x128xbf16>
}

// -----

// cuDNN does not take f32, nor an additive mask; head dim 256 has its own
// default tile.
// CHECK-LABEL: func.func @no_cudnn
// CHECK: llm.attention {{.*}}llm.kernel_config = {cudnn = false, kernel = "flash_attention", tile = "bm64_bn64_w4_s2_gh"}
// CHECK: llm.attention {{.*}}llm.kernel_config = {cudnn = false, kernel = "flash_attention", tile = "bm64_bn32_w4_s2_gh"}
func.func @no_cudnn(%q: tensor<1x64x4x64xf32>, %k: tensor<1x64x4x64xf32>, %v: tensor<1x64x4x64xf32>,
                    %q2: tensor<1x64x4x256xbf16>, %k2: tensor<1x64x4x256xbf16>, %v2: tensor<1x64x4x256xbf16>,
                    %m: tensor<64x64xbf16>) -> (tensor<1x64x4x64xf32>, tensor<1x64x4x256xbf16>) {
  %o = llm.attention %q, %k, %v {causal} : tensor<1x64x4x64xf32>, tensor<1x64x4x64xf32>, tensor<1x64x4x64xf32>
  %o2 = llm.attention %q2, %k2, %v2 mask(%m : tensor<64x64xbf16>) : tensor<1x64x4x256xbf16>, tensor<1x64x4x256xbf16>, tensor<1x64x4x256xbf16>
  return %o, %o2 : tensor<1x64x4x64xf32>, tensor<1x64x4x256xbf16>
}

// BAD-TILE: error: 'func.func' op llmc-select-kernel-configs: attention-tile: attention tile 'bm64': expected bm<M>_bn<N>_w<warps>_s<stages>[_gh]
// BAD-UNROLL: error: 'func.func' op llmc-select-kernel-configs: elementwise-unroll: expected 1, 2, 3 or 4, found 5
// BAD-GEMV: error: 'func.func' op llmc-select-kernel-configs: gemv-unroll: expected 1..16, found 17
// BAD-BACKEND: error: 'func.func' op llmc-select-kernel-configs: attention-backend: unknown attention backend 'fast' (expected auto, llmc or cudnn)

// -----

// Within FlashDecodeSupported's limits, but no register layout of the
// flash-decoding kernel fits 5 x 13 query rows of head dim 16
// (FlashDecodeNumSplits fails): FlashAttention-2, which the lowering then
// refuses for kv_len with an error naming the op. Before the generators
// returned statuses this threw out of the pass.
// CHECK-LABEL: func.func @decode_without_register_layout
// CHECK: llm.attention {{.*}}llm.kernel_config = {cudnn = false, kernel = "flash_attention"
// KNOBS-LABEL: func.func @decode_without_register_layout
// KNOBS: llm.attention {{.*}}llm.kernel_config = {cudnn = false, kernel = "flash_attention"
func.func @decode_without_register_layout(%q: tensor<1x13x5x16xbf16>, %k: tensor<1x300x1x16xbf16>, %v: tensor<1x300x1x16xbf16>, %len: tensor<i64>) -> tensor<1x13x5x16xbf16> {
  %o = llm.attention %q, %k, %v kv_len(%len : tensor<i64>) {causal} : tensor<1x13x5x16xbf16>, tensor<1x300x1x16xbf16>, tensor<1x300x1x16xbf16>
  return %o : tensor<1x13x5x16xbf16>
}

// -----

// gpt-fast decode: one query against a [B, H, S, D] cache (kv_hnd) under a
// position mask over the whole cache: flash-decoding (it reads the mask and
// skips the masked rows); prefill over the same cache keeps FlashAttention-2
// and, with kv_hnd, no cuDNN.
// CHECK-LABEL: func.func @gpt_fast
// CHECK: llm.attention {{.*}}llm.kernel_config = {kernel = "flash_decode", splits = {{[0-9]+}} : i64}
// CHECK: llm.attention {{.*}}llm.kernel_config = {cudnn = false, kernel = "flash_attention", tile = "bm64_bn64_w4_s2_gh"}
func.func @gpt_fast(%q: tensor<1x1x32x128xbf16>, %kc: tensor<1x8x2048x128xbf16>, %vc: tensor<1x8x2048x128xbf16>,
                    %m: tensor<1x1x1x2048xbf16>, %q2: tensor<1x64x32x128xbf16>, %m2: tensor<1x1x64x2048xbf16>)
    -> (tensor<1x1x32x128xbf16>, tensor<1x64x32x128xbf16>) {
  %o = llm.attention %q, %kc, %vc mask(%m : tensor<1x1x1x2048xbf16>) {kv_hnd} : tensor<1x1x32x128xbf16>, tensor<1x8x2048x128xbf16>, tensor<1x8x2048x128xbf16>
  %o2 = llm.attention %q2, %kc, %vc mask(%m2 : tensor<1x1x64x2048xbf16>) {kv_hnd} : tensor<1x64x32x128xbf16>, tensor<1x8x2048x128xbf16>, tensor<1x8x2048x128xbf16>
  return %o, %o2 : tensor<1x1x32x128xbf16>, tensor<1x64x32x128xbf16>
}

// -----

// A mask broadcast along the keys is not flash-decoding's (it reads keys
// densely): FlashAttention-2 takes the op and the lowering says why.
// CHECK-LABEL: func.func @key_broadcast_mask
// CHECK: llm.attention {{.*}}llm.kernel_config = {cudnn = false, kernel = "flash_attention"
func.func @key_broadcast_mask(%q: tensor<1x1x8x64xbf16>, %k: tensor<1x64x8x64xbf16>, %m: tensor<1x1x1x1xbf16>) -> tensor<1x1x8x64xbf16> {
  %o = llm.attention %q, %k, %k mask(%m : tensor<1x1x1x1xbf16>) : tensor<1x1x8x64xbf16>, tensor<1x64x8x64xbf16>, tensor<1x64x8x64xbf16>
  return %o : tensor<1x1x8x64xbf16>
}

// -----

// An attention backward: llmc's FlashAttention-2 backward kernels with
// cuDNN's fused SDPA backward attached (not with attention-backend=llmc,
// and never where it does not take the shape: sq != skv).
// CHECK-LABEL: func.func @backward
// CHECK: llm.attention_backward {{.*}}llm.kernel_config = {cudnn = true, kernel = "flash_attention_backward"}
// CHECK: llm.attention_backward {{.*}}llm.kernel_config = {cudnn = false, kernel = "flash_attention_backward"}
// CUDNN-LABEL: func.func @backward
// CUDNN: llm.attention_backward {{.*}}llm.kernel_config = {cudnn = true, kernel = "flash_attention_backward"}
// CUDNN: llm.attention_backward {{.*}}llm.kernel_config = {cudnn = false, kernel = "flash_attention_backward"}
// KNOBS-LABEL: func.func @backward
// KNOBS: llm.attention_backward {{.*}}llm.kernel_config = {cudnn = false, kernel = "flash_attention_backward"}
// KNOBS: llm.attention_backward {{.*}}llm.kernel_config = {cudnn = false, kernel = "flash_attention_backward"}
func.func @backward(%q: tensor<2x128x4x64xbf16>, %k: tensor<2x128x2x64xbf16>, %v: tensor<2x128x2x64xbf16>, %o: tensor<2x128x4x64xbf16>, %do: tensor<2x128x4x64xbf16>, %lse: tensor<2x4x128xf32>, %k2: tensor<2x256x2x64xbf16>) -> (tensor<2x128x4x64xbf16>, tensor<2x128x4x64xbf16>) {
  %dq, %dk, %dv = llm.attention_backward %q, %k, %v, %o, %do, %lse {causal} : tensor<2x128x4x64xbf16>, tensor<2x128x2x64xbf16>, tensor<2x128x2x64xbf16>, tensor<2x128x4x64xbf16>, tensor<2x128x4x64xbf16>, tensor<2x4x128xf32>
  %dq2, %dk2, %dv2 = llm.attention_backward %q, %k2, %k2, %o, %do, %lse : tensor<2x128x4x64xbf16>, tensor<2x256x2x64xbf16>, tensor<2x256x2x64xbf16>, tensor<2x128x4x64xbf16>, tensor<2x128x4x64xbf16>, tensor<2x4x128xf32>
  return %dq, %dq2 : tensor<2x128x4x64xbf16>, tensor<2x128x4x64xbf16>
}
