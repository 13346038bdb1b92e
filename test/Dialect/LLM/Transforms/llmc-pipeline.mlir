// RUN: llmc-opt --llmc-pipeline="show-kernels=1 pad-all=1" %llmc_src_root/examples/llama2_7b_block.mlir | FileCheck %s --check-prefix=DYN
// RUN: llmc-opt --llmc-specialize-shapes="dims=seq=2048" --llmc-pipeline="show-kernels=1 pad-all=1" %llmc_src_root/examples/llama2_7b_block.mlir | FileCheck %s
// RUN: llmc-opt --llmc-specialize-shapes="dims=seq=2048" --llmc-pipeline="show-kernels=1 pad-all=1 report=true" %llmc_src_root/examples/llama2_7b_block.mlir -o /dev/null 2>&1 | FileCheck %s --check-prefix=REMARK
// RUN: llmc-opt --llmc-specialize-shapes="dims=seq=5" --llmc-pipeline="show-kernels=1 pad-all=1 precision=bf16" %llmc_src_root/examples/tiny_llama_block.mlir | FileCheck %s --check-prefix=TINY

// Dynamic sequence length: fused, not memory-planned.
// DYN-LABEL: func.func @llama2_7b_block
// DYN: llm.fusion "rope_attention"
// DYN: llm.fusion "residual_norm"
// DYN: llm.fusion "gemm_epilogue"
// DYN: llm.fusion "gemm_epilogue"
// DYN-NOT: llm.arena_bytes

// REMARK: remark: arena peak 140509184 bytes, sum of intermediates 224395264 bytes
// CHECK-LABEL: func.func @llama2_7b_block
// CHECK-SAME: llm.arena_bytes = 140509184
// CHECK: llm.rms_norm
// CHECK: llm.fusion "rope_attention"
// CHECK:   llm.rope
// CHECK:   llm.rope
// CHECK:   llm.attention
// CHECK: llm.fusion "residual_norm"
// CHECK:   llm.add
// CHECK:   llm.rms_norm
// CHECK: llm.fusion "gemm_epilogue"
// CHECK:   llm.matmul
// CHECK:   llm.silu
// CHECK:   llm.mul
// CHECK: llm.fusion "gemm_epilogue"
// CHECK:   llm.matmul
// CHECK:   llm.add
// CHECK: return

// bf16 GEMMs with f32 accumulation, M padded from 5 to 16 and sliced back.
// TINY-LABEL: func.func @tiny_llama_block
// TINY: llm.pad %{{.+}} high [0, 11, 0] {{{.*}}llm.arena_offset{{.*}}} : tensor<1x5x64xbf16> to tensor<1x16x64xbf16>
// TINY: llm.matmul %{{.+}}, %{{.+}} {{{.*}}transpose_rhs} : tensor<1x16x64xbf16>, tensor<64x64xbf16> -> tensor<1x16x64xf32>
// TINY: llm.slice
// TINY: llm.fusion "rope_attention"
// TINY:   llm.rope
// TINY:   llm.cast
// TINY:   llm.attention %{{.+}} : tensor<1x5x4x16xbf16>
