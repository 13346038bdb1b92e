// Every kernel of every example, under every precision policy, compiles with
// NVRTC for sm_90a and sm_80 (no GPU needed). fp32 is the graph as written
// (compile-examples.mlir covers it for every example). Under fp8 the GEMMs are
// cuBLASLt fp8 GEMMs for sm_90a; for sm_80, which has no fp8 tensor cores,
// llmc-compile lowers the function a second time with dequantize + bf16 GEMMs
// and compiles those kernels too.
// RUN: llmc-compile %llmc_src_root/examples/tiny_llama_block.mlir --shape seq=7 --precision=fp32 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=ANY
// RUN: llmc-compile %llmc_src_root/examples/tiny_llama_block.mlir --shape seq=7 --precision=bf16 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=ANY
// RUN: llmc-compile %llmc_src_root/examples/tiny_llama_block.mlir --shape seq=7 --precision=fp16 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=ANY
// RUN: llmc-compile %llmc_src_root/examples/tiny_llama_block.mlir --shape seq=7 --precision=fp8 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=TINY8
// The fp8 policy pads M = 7 to 32: seven projections become cuBLASLt GEMMs.
// TINY8: GEMMs: 7
// RUN: llmc-compile %llmc_src_root/examples/tiny_gpt2_block.mlir --shape seq=7 --precision=bf16 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=ANY
// RUN: llmc-compile %llmc_src_root/examples/tiny_gpt2_block.mlir --shape seq=7 --precision=fp16 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=ANY
// RUN: llmc-compile %llmc_src_root/examples/tiny_gpt2_block.mlir --shape seq=7 --precision=fp8 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=ANY
// RUN: llmc-compile %llmc_src_root/examples/gpt2_small_block.mlir --shape seq=64 --precision=bf16 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=ANY
// RUN: llmc-compile %llmc_src_root/examples/gpt2_small_block.mlir --shape seq=64 --precision=fp16 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=ANY
// RUN: llmc-compile %llmc_src_root/examples/gpt2_small_block.mlir --shape seq=64 --precision=fp8 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=GPT2
// GPT2: GEMMs: 5
// RUN: llmc-compile %llmc_src_root/examples/mistral_gqa_block.mlir --shape seq=33 --precision=bf16 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=ANY
// RUN: llmc-compile %llmc_src_root/examples/mistral_gqa_block.mlir --shape seq=33 --precision=fp16 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=ANY
// RUN: llmc-compile %llmc_src_root/examples/mistral_gqa_block.mlir --shape seq=33 --precision=fp8 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=ANY
// RUN: llmc-compile %llmc_src_root/examples/llama2_7b_block.mlir --shape seq=33 --precision=bf16 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=ANY
// RUN: llmc-compile %llmc_src_root/examples/llama2_7b_block.mlir --shape seq=33 --precision=fp16 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=ANY
// RUN: llmc-compile %llmc_src_root/examples/llama2_7b_block.mlir --shape seq=33 --precision=fp8 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=LLAMA8
// LLAMA8: GEMMs: 7
// RUN: llmc-compile %llmc_src_root/examples/llama2_7b_decode_step.mlir --shape batch=4 --precision=bf16 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=ANY
// RUN: llmc-compile %llmc_src_root/examples/llama2_7b_decode_step.mlir --shape batch=4 --precision=fp16 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=ANY
// RUN: llmc-compile %llmc_src_root/examples/llama2_7b_decode_step.mlir --shape batch=4 --precision=fp8 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=ANY
// ANY: kernel launches:
// ANY: compile time:

// An unknown policy is a one-line error naming it.
// RUN: not llmc-compile %llmc_src_root/examples/tiny_llama_block.mlir --shape seq=7 --precision=fp4 2>&1 | FileCheck %s --check-prefix=BADPOLICY
// BADPOLICY: llmc-compile: error: --precision: expected fp32, bf16, fp16 or fp8, found 'fp4'
