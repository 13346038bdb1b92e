// llmc-run --tp: flag and environment errors, found before any GPU is used.
// (The runs themselves need GPUs: see docs/tensor-parallel.md.)
// RUN: not llmc-run %s --tp=2 --backend=ref 2>&1 | FileCheck %s --check-prefix=REF
// RUN: not llmc-run %s --tp=0 2>&1 | FileCheck %s --check-prefix=DEGREE
// RUN: not llmc-run %s --tp=2 --rank=2 --rendezvous=%t.id 2>&1 | FileCheck %s --check-prefix=RANK
// RUN: not llmc-run %s --tp=2 --rank=1 2>&1 | FileCheck %s --check-prefix=RDZV
// RUN: env RANK=0 WORLD_SIZE=4 not llmc-run %s --tp=2 2>&1 | FileCheck %s --check-prefix=WORLD
// RUN: env RANK=1 not llmc-run %s --tp=2 2>&1 | FileCheck %s --check-prefix=NOWORLD
// RUN: not llmc-run %s --tp=2 --rank=-1 2>&1 | FileCheck %s --check-prefix=NEGRANK
// RUN: not llmc-run %s 2>&1 | FileCheck %s --check-prefix=GROUP
// RUN: not llmc-run %s --tp=4 --rank=0 --rendezvous=%t.id 2>&1 | FileCheck %s --check-prefix=GROUP4
// REF: error: --tp needs the cuda backend
// DEGREE: error: --tp=0: expected a degree >= 1
// RANK: error: rank 2 is out of range for --tp=2 (expected 0 <= rank < tp)
// RDZV: [rank 1] error: rank 1 of --tp=2 needs --rendezvous=PATH
// WORLD: error: --tp=2 but WORLD_SIZE=4: start as many processes as the tensor-parallel degree
// NOWORLD: error: RANK is set but WORLD_SIZE is not
// NEGRANK: error: --rank=-1: expected 0 <= rank < --tp
// GROUP: error: 'llm.all_reduce' op has group_size = 2 but llmc-run runs 1 rank(s); use --tp=2
// GROUP4: error: 'llm.all_reduce' op has group_size = 2 but llmc-run runs 4 rank(s); use --tp=2
func.func @two_rank_sum(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %r = llm.all_reduce %x sum group_size = 2 : tensor<8x16xf32>
  return %r : tensor<8x16xf32>
}
