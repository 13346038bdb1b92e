// fp8 training backward graphs (bench/testdata: the 1B LLaMA step and the
// tiny smoke step, as the torch.compile backend imported them): every
// relayout of an fp8 GEMM operand into cuBLASLt's TN layout is the tiled
// transpose (llmc_transpose_*), never an elementwise kernel reading through
// swapped strides, which took 54.6 ms of the 1B step's 145 ms on the H200
// (docs/performance.md, 2026-12-05).
// RUN: llmc-compile %llmc_src_root/bench/testdata/llama1b_train_bwd.mlir --precision=fp8 --arch=sm_90a --emit=executable-dump | FileCheck %s --check-prefix=B1
// RUN: llmc-compile %llmc_src_root/bench/testdata/llama1b_train_bwd.mlir --precision=fp8 --arch=sm_90a --emit=executable-dump | grep -c "kernel llmc_transpose_" | FileCheck %s --check-prefix=B1-COUNT
// RUN: llmc-compile %llmc_src_root/bench/testdata/tiny_llama_train_bwd.mlir --precision=fp8 --arch=sm_90a --emit=executable-dump | FileCheck %s --check-prefix=TINY
// RUN: llmc-compile %llmc_src_root/bench/testdata/tiny_llama_train_bwd.mlir --precision=fp8 --arch=sm_90a --emit=executable-dump | grep -c "kernel llmc_transpose_" | FileCheck %s --check-prefix=TINY-COUNT
// B1: counts inputs=617 outputs=147 {{.*}} gemms=226 {{.*}} launches=1876
// B1-NOT: kernel llmc_ew_{{[0-9a-f]+}} {{.*}}label="llm.matmul"
// B1-COUNT: 339
// TINY: counts {{.*}} gemms=30
// TINY-NOT: kernel llmc_ew_{{[0-9a-f]+}} {{.*}}label="llm.matmul"
// TINY-COUNT: 45
