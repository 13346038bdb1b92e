// RUN: llmc-opt --llmc-pipeline="pad-all=1" %llmc_src_root/examples/llama2_7b_block.mlir | FileCheck %s --check-prefix=DYN
// RUN: llmc-opt --llmc-specialize-shapes="dims=seq=2048" --llmc-pipeline="form-kernels=1 pad-all=1" %llmc_src_root/examples/llama2_7b_block.mlir | FileCheck %s
// RUN: llmc-opt --llmc-specialize-shapes="dims=seq=5" --llmc-pipeline="form-kernels=1 pad-all=1 precision=bf16" %llmc_src_root/examples/tiny_llama_block.mlir | FileCheck %s --check-prefix=TINY
// RUN: not llmc-opt --llmc-pipeline="form-kernels=1" %llmc_src_root/examples/llama2_7b_block.mlir 2>&1 | FileCheck %s --check-prefix=DYN-KERNELS

// Dynamic sequence length: raised and cleaned up; kernels are formed only
// for static shapes.
// DYN-LABEL: func.func @llama2_7b_block
// DYN: llm.rms_norm
// DYN: llm.attention
// DYN-NOT: llm.kernel
// DYN: return
// DYN-KERNELS: llmc-form-kernels expects static shapes

// Static: the kernels the lowering emits (a residual add computed by the
// second norm's kernel, SiLU * up as one elementwise kernel) and the
// attention's configuration (FlashAttention-2 with cuDNN's SDPA first).
// CHECK-LABEL: func.func @llama2_7b_block
// CHECK-SAME: llm.kernel_configs = {elementwise_unroll = 1 : i64, gemv_unroll = 4 : i64}
// CHECK-SAME: llm.kernels_formed
// CHECK: llm.rms_norm
// CHECK: llm.rope
// CHECK: llm.attention {{.*}}llm.kernel_config = {cudnn = true, kernel = "flash_attention", tile = "bm64_bn64_w4_s2_gh"}
// CHECK: llm.add {{.*}}llm.kernel = {group = 0 : i64, kind = "residual_norm"}
// CHECK: llm.rms_norm {{.*}}llm.kernel = {group = 0 : i64, kind = "residual_norm"}
// CHECK: llm.silu {{.*}}llm.kernel = {group = 1 : i64, kind = "elementwise"}
// CHECK: llm.mul {{.*}}llm.kernel = {group = 1 : i64, kind = "elementwise"}
// CHECK: return

// bf16 GEMMs with f32 accumulation, M padded from 5 to 16 and sliced back.
// TINY-LABEL: func.func @tiny_llama_block
// TINY: llm.pad %{{.+}} high [0, 11, 0] : tensor<1x5x64xbf16> to tensor<1x16x64xbf16>
// TINY: llm.matmul %{{.+}}, %{{.+}} {{{.*}}transpose_rhs} : tensor<1x16x64xbf16>, tensor<64x64xbf16> -> tensor<1x16x64xf32>
// TINY: llm.slice
// TINY: llm.rope
// TINY: llm.cast
// TINY: llm.attention %{{.+}} {causal, llm.kernel_config = {{{.*}}}} : tensor<1x5x4x16xbf16>
