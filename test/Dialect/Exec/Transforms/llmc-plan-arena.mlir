// RUN: llmc-opt %s --split-input-file --llmc-plan-arena | FileCheck %s
// RUN: llmc-opt %s --split-input-file --llmc-plan-arena=alignment=256 | FileCheck %s --check-prefix=A256
// RUN: not llmc-opt %s --split-input-file --llmc-plan-arena=alignment=96 2>&1 | FileCheck %s --check-prefix=ALIGN
// RUN: not llmc-opt %S/Inputs/huge-arena.mlir --llmc-plan-arena 2>&1 | FileCheck %s --check-prefix=HUGE
// ALIGN: error: 'exec.executable' op llmc-plan-arena: expected alignment a power of two in [1, 2^30], found 96
// The planner's sums stay below 2^62: a plan beyond is an error on the
// buffer that does not fit, never a wrapped offset.
// HUGE: huge-arena.mlir:6:9: error: 'exec.buffer' op llmc-plan-arena: the arena would exceed 2^62 bytes placing this buffer of 2305843009213693952 bytes at offset 4611686018427387904

// Overlapping lifetimes get disjoint 128-byte aligned blocks; a buffer whose
// interval starts after another's ends reuses its block.
// CHECK-LABEL: exec.executable @overlap_and_reuse
// CHECK-SAME:    arena_bytes = 512
// CHECK:         exec.buffer arena 100 bytes live [0, 1] offset 0
// CHECK-NEXT:    exec.buffer arena 300 bytes live [1, 2] offset 128
// CHECK-NEXT:    exec.buffer arena 64 bytes live [2, 3] offset 0
// A256-LABEL:  exec.executable @overlap_and_reuse
// A256-SAME:     arena_bytes = 768
// A256:          exec.buffer arena 100 bytes live [0, 1] offset 0
// A256-NEXT:     exec.buffer arena 300 bytes live [1, 2] offset 256
// A256-NEXT:     exec.buffer arena 64 bytes live [2, 3] offset 0
exec.executable @overlap_and_reuse {
  %b0 = exec.buffer arena 100 bytes live [0, 1]
  %b1 = exec.buffer arena 300 bytes live [1, 2]
  %b2 = exec.buffer arena 64 bytes live [2, 3]
}

// -----

// Disjoint lifetimes all take offset 0; the peak is the largest block.
// CHECK-LABEL: exec.executable @disjoint
// CHECK-SAME:    arena_bytes = 1024
// CHECK:         exec.buffer arena 1000 bytes live [0, 0] offset 0
// CHECK-NEXT:    exec.buffer arena 129 bytes live [1, 1] offset 0
// CHECK-NEXT:    exec.buffer arena 1 bytes live [2, 2] offset 0
exec.executable @disjoint {
  %b0 = exec.buffer arena 1000 bytes live [0, 0]
  %b1 = exec.buffer arena 129 bytes live [1, 1]
  %b2 = exec.buffer arena 1 bytes live [2, 2]
}

// -----

// First fit: a hole between live blocks is used when the buffer fits; ties
// at the same first step go in buffer order; other kinds are left alone.
// Placed in order b0 (0), b1 (128), b2 (256); b0 dies; b3 (128 bytes) fits
// the hole at 0, b4 (256 bytes) does not and goes after b2.
// CHECK-LABEL: exec.executable @first_fit
// CHECK-SAME:    arena_bytes = 640
// CHECK:         exec.buffer arena 128 bytes live [0, 0] offset 0
// CHECK-NEXT:    exec.buffer arena 128 bytes live [0, 5] offset 128
// CHECK-NEXT:    exec.buffer arena 100 bytes live [0, 5] offset 256
// CHECK-NEXT:    exec.buffer persistent 64 bytes{{$}}
// CHECK-NEXT:    exec.buffer arena 256 bytes live [1, 5] offset 384
// CHECK-NEXT:    exec.buffer arena 128 bytes live [1, 5] offset 0
exec.executable @first_fit {
  %b0 = exec.buffer arena 128 bytes live [0, 0]
  %b1 = exec.buffer arena 128 bytes live [0, 5]
  %b2 = exec.buffer arena 100 bytes live [0, 5]
  %p = exec.buffer persistent 64 bytes
  %b4 = exec.buffer arena 256 bytes live [1, 5]
  %b3 = exec.buffer arena 128 bytes live [1, 5]
}

// -----

// Preparation scratch (negative steps) is placed before the per-call
// buffers, which reuse its block; an empty arena has arena_bytes 0.
// CHECK-LABEL: exec.executable @prep_scratch
// CHECK-SAME:    arena_bytes = 256
// CHECK:         exec.buffer arena 256 bytes live [-9, -8] offset 0
// CHECK-NEXT:    exec.buffer arena 200 bytes live [0, 1] offset 0
exec.executable @prep_scratch {
  %b0 = exec.buffer arena 256 bytes live [-9, -8]
  %b1 = exec.buffer arena 200 bytes live [0, 1]
}

// -----

// CHECK-LABEL: exec.executable @no_arena
// CHECK-SAME:    arena_bytes = 0
exec.executable @no_arena {
}
