// Every kernel of every example compiles with NVRTC for sm_90a and sm_80 (no
// GPU needed); the stats show what codegen produced.
// RUN: llmc-compile %llmc_src_root/examples/llama2_7b_block.mlir --shape seq=2048 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=LLAMA
// LLAMA: llm ops: 20
// LLAMA: kernel launches: 7 (6 distinct kernels)
// LLAMA: GEMMs: 7
// RUN: llmc-compile %llmc_src_root/examples/mistral_gqa_block.mlir --shape seq=512 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=MISTRAL
// MISTRAL: GEMMs: 7
// RUN: llmc-compile %llmc_src_root/examples/gpt2_small_block.mlir --shape seq=64 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=GPT2
// GPT2: GEMMs: 5
// Decode with a few rows: every projection is a GEMV kernel, the donated KV
// caches are appended in place (no cache copies); 32 rows use cuBLASLt.
// q/k/v are one multi-output GEMV and gate/up/silu/mul one SwiGLU GEMV, and
// flash-decoding's split kernel combines its splits (18 launches unfused).
// RUN: llmc-compile %llmc_src_root/examples/llama2_7b_decode_step.mlir --shape batch=4 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=DECODE
// RUN: llmc-compile %llmc_src_root/examples/llama2_7b_decode_step.mlir --shape batch=1 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=DECODE
// DECODE: kernel launches: 13
// The combine as a kernel of its own (--flash-decode-combine=kernel, or its
// variable; for A/B measurements): one launch more, nothing prepared.
// RUN: llmc-compile %llmc_src_root/examples/llama2_7b_decode_step.mlir --shape batch=1 --flash-decode-combine=kernel --print-stats | FileCheck %s --check-prefix=COMBINE
// RUN: env LLMC_FLASH_DECODE_COMBINE=kernel llmc-compile %llmc_src_root/examples/llama2_7b_decode_step.mlir --shape batch=1 --print-stats | FileCheck %s --check-prefix=COMBINE
// COMBINE: kernel launches: 14
// COMBINE: parameter preparation: 0 launches
// RUN: env LLMC_FLASH_DECODE_COMBINE=both not llmc-compile %llmc_src_root/examples/llama2_7b_decode_step.mlir --shape batch=1 --print-stats 2>&1 | FileCheck %s --check-prefix=COMBINE-BAD
// COMBINE-BAD: error: environment variable LLMC_FLASH_DECODE_COMBINE: expected fused or kernel, found 'both'
// DECODE: GEMMs: 0
// DECODE: copies: 2
// RUN: llmc-compile %llmc_src_root/examples/llama2_7b_decode_step.mlir --shape batch=32 --arch=sm_90a --print-stats | FileCheck %s --check-prefix=DECODE32
// DECODE32: GEMMs: 7
// RUN: llmc-compile %llmc_src_root/examples/tiny_llama_block.mlir --shape seq=7 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=TINY
// TINY: kernel launches:
// RUN: llmc-compile %llmc_src_root/examples/tiny_gpt2_block.mlir --shape seq=7 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=TINYGPT
// TINYGPT: kernel launches:
