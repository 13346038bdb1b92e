// A fused elementwise kernel is bounded (FusionPlan.h): at most kMaxFusedOps
// (64) ops, kMaxFusedCost (512) cost units and kMaxFusedInputs (32) inputs.
// NVRTC's time grows faster than linearly in a fused kernel's body (1,000
// fused unary ops took 30 s, 2,000 over 120 s), so a longer chain is split
// into kernels within the bounds, each continuing from the previous result.

// 300 adds: 64 + 64 + 64 + 64 + 44 ops, both in llmc-form-kernels and in
// codegen.
// RUN: %python %S/Inputs/elementwise-chain.py add 300 > %t.add.mlir
// RUN: llmc-compile %t.add.mlir --arch=sm_90a --print-stats | FileCheck %s --check-prefix=ADD
// ADD: llm ops: 300
// ADD-NEXT: kernel launches: 5 (2 distinct kernels)
// RUN: llmc-opt --llmc-form-kernels %t.add.mlir | FileCheck %s --check-prefix=FUSE
// FUSE-COUNT-64: llm.add {{.*}}llm.kernel = {group = 0 : i64, kind = "elementwise"}
// FUSE-COUNT-64: llm.add {{.*}}llm.kernel = {group = 1 : i64, kind = "elementwise"}
// FUSE-COUNT-64: llm.add {{.*}}llm.kernel = {group = 2 : i64, kind = "elementwise"}
// FUSE-COUNT-64: llm.add {{.*}}llm.kernel = {group = 3 : i64, kind = "elementwise"}
// FUSE-COUNT-44: llm.add {{.*}}llm.kernel = {group = 4 : i64, kind = "elementwise"}
// FUSE-NOT: llm.kernel

// sinf costs 64 units: 8 per kernel, so 20 sins are 8 + 8 + 4.
// RUN: %python %S/Inputs/elementwise-chain.py sin 20 > %t.sin.mlir
// RUN: llmc-compile %t.sin.mlir --arch=sm_90a --print-stats | FileCheck %s --check-prefix=SIN
// SIN: llm ops: 20
// SIN-NEXT: kernel launches: 3 (2 distinct kernels)

// 40 adds of 40 different arguments: a kernel reads at most 32 inputs
// (31 adds read %x and 31 arguments), the next one the rest.
// RUN: %python %S/Inputs/elementwise-chain.py add 40 --distinct-inputs > %t.inputs.mlir
// RUN: llmc-compile %t.inputs.mlir --arch=sm_90a --print-stats | FileCheck %s --check-prefix=INPUTS
// INPUTS: llm ops: 40
// INPUTS-NEXT: kernel launches: 2 (2 distinct kernels)

// Splat constants are immediates of the kernel, not inputs: 40 adds of 40
// different splats are one kernel.
// RUN: %python %S/Inputs/elementwise-chain.py add 40 --splat-inputs > %t.splats.mlir
// RUN: llmc-compile %t.splats.mlir --arch=sm_90a --print-stats | FileCheck %s --check-prefix=SPLATS
// SPLATS: llm ops: 80
// SPLATS-NEXT: kernel launches: 1 (1 distinct kernels)
