// llmc-run: a flag given twice, two flags that give one argument, a value out
// of range or a flag the chosen backend ignores is an error naming both
// occurrences or the value, before anything runs (llvm::cl keeps the last
// value of a repeated flag and said nothing: --shape seq=8 --shape seq=9 ran
// seq=9).
// RUN: not llmc-run %s --shape seq=8 --shape seq=9 --backend=ref 2>&1 | FileCheck %s --check-prefix=SHAPE
// RUN: not llmc-run %s --shape seq=8 --backend=ref --backend=cuda 2>&1 | FileCheck %s --check-prefix=BACKEND
// RUN: not llmc-run %s --shape seq=8 --backend ref --seed=1 --seed 2 --backend=ref 2>&1 | FileCheck %s --check-prefix=TWO
// RUN: not llmc-run %s --shape seq=8 --bench --bench --backend=ref 2>&1 | FileCheck %s --check-prefix=BOOL
// RUN: not llmc-run %s --fn=scalar --value arg1=3 --value arg1=4 --backend=ref 2>&1 | FileCheck %s --check-prefix=VALUE
// RUN: not llmc-run %s --fn=scalar --value arg1=300 --backend=ref 2>&1 | FileCheck %s --check-prefix=RANGE
// RUN: not llmc-run %s --shape seq=8 --input arg0=%s --input arg0=%t.other 2>&1 | FileCheck %s --check-prefix=INPUT
// RUN: not llmc-run %s --fn=scalar --input arg1=%t.bin --value arg1=3 2>&1 | FileCheck %s --check-prefix=BOTH
// Values are checked whatever the backend.
// RUN: not llmc-run %s --shape seq=8 --attention=fast 2>&1 | FileCheck %s --check-prefix=ATTN
// RUN: not llmc-run %s --shape seq=8 --check --tol=-5 2>&1 | FileCheck %s --check-prefix=TOL
// RUN: not llmc-run %s --shape seq=8 --check=cpu 2>&1 | FileCheck %s --check-prefix=CHECK
// RUN: not llmc-run %s --shape seq=8 --bench --iters=0 2>&1 | FileCheck %s --check-prefix=ITERS
// RUN: not llmc-run %s --shape seq=8 --precision=fp7 --backend=ref 2>&1 | FileCheck %s --check-prefix=PREC
// RUN: not llmc-run %s --shape seq=8 --gpu=-2 2>&1 | FileCheck %s --check-prefix=GPU
// Flags the reference executor ignores, and flags that need another.
// RUN: not llmc-run %s --shape seq=8 --backend=ref --attention=llmc 2>&1 | FileCheck %s --check-prefix=REFATTN
// RUN: not llmc-run %s --shape seq=8 --backend=ref --tol=1e-3 2>&1 | FileCheck %s --check-prefix=REFTOL
// RUN: not llmc-run %s --shape seq=8 --backend=ref --check 2>&1 | FileCheck %s --check-prefix=REFCHECK
// RUN: not llmc-run %s --shape seq=8 --tol=1e-3 2>&1 | FileCheck %s --check-prefix=TOLCHECK
// RUN: not llmc-run %s --shape seq=8 --iters=5 2>&1 | FileCheck %s --check-prefix=ITERSBENCH
// RUN: not llmc-run %s --shape seq=8 --tp=2 --rendezvous=%t.rdzv 2>&1 | FileCheck %s --check-prefix=RDZV
// RUN: not llmc-run %s --shape seq=8 --run-id=x 2>&1 | FileCheck %s --check-prefix=RUNID
// The valid spellings still run.
// RUN: llmc-run %s --shape seq=8 --backend=ref --seed=3 | FileCheck %s --check-prefix=OK
// SHAPE: llmc-run: error: --shape seq=9: 'seq' is already bound by --shape seq=8 (bind each dynamic dimension once)
// BACKEND: llmc-run: error: --backend is given 2 times (--backend=ref, then --backend=cuda); give it once
// TWO: llmc-run: error: --backend is given 2 times (--backend=ref, then --backend=ref); give it once; --seed is given 2 times (--seed=1, then --seed=2); give it once
// BOOL: llmc-run: error: --bench is given 2 times (--bench, then --bench); give it once
// VALUE: llmc-run: error: --value arg1=4: argument 1 already has --value arg1=3 (give it once)
// RANGE: llmc-run: error: --value arg1=300: argument 1 (tensor<i8>) takes integers in [-128, 127], found 300
// INPUT: llmc-run: error: --input arg0={{.*}}.other: argument 0 already has --input arg0={{.*}}repeated-flags.mlir (give it once)
// BOTH: llmc-run: error: --input arg1={{.*}}.bin and --value arg1=3 both give argument 1
// ATTN: llmc-run: error: --attention: {{.*}}'fast'
// TOL: llmc-run: error: --tol=-5: expected a finite relative error >= 0
// CHECK: llmc-run: error: unknown --check mode 'cpu' (expected ref or gpu-f32)
// ITERS: llmc-run: error: --iters=0: expected at least 1 timed run
// PREC: llmc-run: error: --precision: expected fp32, bf16, fp16 or fp8, found 'fp7'
// GPU: llmc-run: error: --gpu=-2: expected a GPU ordinal >= 0
// REFATTN: llmc-run: error: --attention applies to the cuda backend only; it has no effect with --backend=ref
// REFTOL: llmc-run: error: --tol applies to the cuda backend only; it has no effect with --backend=ref
// REFCHECK: llmc-run: error: --check applies to the cuda backend only; it has no effect with --backend=ref
// TOLCHECK: llmc-run: error: --tol needs --check (it bounds the check's relative error)
// ITERSBENCH: llmc-run: error: --iters needs --bench (it counts the timed runs)
// RDZV: llmc-run: error: --rendezvous is for a rank started by hand (--tp=N --rank=R); llmc-run --tp=N without --rank starts the ranks with its own
// RUNID: llmc-run: error: --run-id is for a rank started by hand (--tp=N --rank=R); without --tp there is no rendezvous
// OK: result0: tensor<8x16xf32> checksum
func.func @f(%x: tensor<?x16xf32> {llm.dim_names = ["seq"]}) -> tensor<?x16xf32> {
  %z = llm.silu %x : tensor<?x16xf32>
  return %z : tensor<?x16xf32>
}
func.func @scalar(%x: tensor<4xf32>, %n: tensor<i8>) -> tensor<4xf32> {
  %z = llm.silu %x : tensor<4xf32>
  return %z : tensor<4xf32>
}
