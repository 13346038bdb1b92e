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
// a combine kernel merges flash-decoding's splits (18 launches unfused).
// RUN: llmc-compile %llmc_src_root/examples/llama2_7b_decode_step.mlir --shape batch=4 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=DECODE
// RUN: llmc-compile %llmc_src_root/examples/llama2_7b_decode_step.mlir --shape batch=1 --arch=sm_90a --arch=sm_80 --print-stats | FileCheck %s --check-prefix=DECODE
// DECODE: kernel launches: 14
// The split kernel merging its splits itself (--flash-decode-combine=fused,
// or its variable; for A/B measurements): one launch less, and the
// preparation zeroes its semaphores once.
// RUN: llmc-compile %llmc_src_root/examples/llama2_7b_decode_step.mlir --shape batch=1 --flash-decode-combine=fused --print-stats | FileCheck %s --check-prefix=COMBINE
// RUN: env LLMC_FLASH_DECODE_COMBINE=fused llmc-compile %llmc_src_root/examples/llama2_7b_decode_step.mlir --shape batch=1 --print-stats | FileCheck %s --check-prefix=COMBINE
// COMBINE: kernel launches: 13
// COMBINE: parameter preparation: 1 launches
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
