//===- Passes.td - exec dialect passes ---------------------*- tablegen -*-===//

#ifndef LLMC_DIALECT_EXEC_TRANSFORMS_PASSES_TD
#define LLMC_DIALECT_EXEC_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def PlanArenaPass : Pass<"llmc-plan-arena", "::llmc::exec::ExecutableOp"> {
  let summary = "Places every arena buffer in the per-call arena (first fit by liveness).";
  let description = [{
    Gives each `exec.buffer arena` with a `live = [first, last]` interval an
    `offset` and the executable its `arena_bytes` (the peak). Buffers are
    placed in order of their first step (ties: buffer order); each takes the
    lowest offset, in `alignment`-byte blocks, that overlaps no buffer still
    live at its first step (first fit). Two buffers may share bytes only when
    their intervals are disjoint. The parameter-preparation segment's
    scratch has intervals before every per-call step, so the per-call
    buffers reuse its blocks.

    Before:
    ```mlir
    exec.executable @f {
      %b0 = exec.buffer arena 100 bytes live [0, 1]
      %b1 = exec.buffer arena 300 bytes live [1, 2]
      %b2 = exec.buffer arena 64 bytes live [2, 3]
    }
    ```
    After (`alignment=128`):
    ```mlir
    exec.executable @f attributes {arena_bytes = 512 : i64} {
      %b0 = exec.buffer arena 100 bytes live [0, 1] offset 0
      %b1 = exec.buffer arena 300 bytes live [1, 2] offset 128
      %b2 = exec.buffer arena 64 bytes live [2, 3] offset 0
    }
    ```
  }];
  let options = [
    Option<"alignment", "alignment", "int64_t", /*default=*/"128",
           "Alignment of arena offsets and sizes, bytes">
  ];
  let dependentDialects = ["::llmc::exec::ExecDialect"];
}

#endif // LLMC_DIALECT_EXEC_TRANSFORMS_PASSES_TD
