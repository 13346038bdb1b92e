// fp8 training backward graphs (bench/testdata: the 1B LLaMA step and the
// tiny smoke step, as the torch.compile backend imported them): every fp8
// GEMM operand is cast straight into cuBLASLt's TN layout (LHS [M, K], RHS
// [N, K]). A linear layer's weight (for the input gradient) and its input
// and output gradient (for the weight gradient) are read through a
// transpose by the tiled quantizing cast (llmc_ew_* with the trailing
// numel, rows, cols arguments), three per linear layer: no fp8 relayout
// (llmc_transpose_*, 339 launches and 8.9 ms of the 1B step on the H100,
// docs/performance.md, 2026-12-05), and no elementwise kernel reading
// through swapped strides (54.6 ms of the 1B step's 145 ms on the H200
// before the tiled transpose).
// RUN: llmc-compile %llmc_src_root/bench/testdata/llama1b_train_bwd.mlir --precision=fp8 --arch=sm_90a --emit=executable-dump > %t.b1
// RUN: FileCheck %s --check-prefix=B1 < %t.b1
// RUN: grep -cE 'kernel llmc_ew_[0-9a-f]+ grid=\[[0-9]+,[0-9]+,[0-9]+\] .*args=\[b[0-9]+\+[0-9]+,b[0-9]+\+[0-9]+,b[0-9]+\+[0-9]+,i64:[0-9]+,i64:[0-9]+,i64:[0-9]+\] label="llm.cast"' %t.b1 | FileCheck %s --check-prefix=B1-TILED
// RUN: llmc-compile %llmc_src_root/bench/testdata/tiny_llama_train_bwd.mlir --precision=fp8 --arch=sm_90a --emit=executable-dump > %t.tiny
// RUN: FileCheck %s --check-prefix=TINY < %t.tiny
// RUN: grep -cE 'kernel llmc_ew_[0-9a-f]+ grid=\[[0-9]+,[0-9]+,[0-9]+\] .*args=\[b[0-9]+\+[0-9]+,b[0-9]+\+[0-9]+,b[0-9]+\+[0-9]+,i64:[0-9]+,i64:[0-9]+,i64:[0-9]+\] label="llm.cast"' %t.tiny | FileCheck %s --check-prefix=TINY-TILED
// B1: counts inputs=617 outputs=147 {{.*}} gemms=226 {{.*}} launches=1650
// B1-NOT: kernel llmc_transpose_
// B1-NOT: kernel {{.*}}label="llm.matmul"
// B1-TILED: 339
// TINY: counts {{.*}} gemms=30 {{.*}} launches=240
// TINY-NOT: kernel llmc_transpose_
// TINY-TILED: 45
