// RUN: llmc-opt --split-input-file --llmc-plan-memory %s | FileCheck %s
// RUN: llmc-opt --split-input-file --llmc-plan-memory="report=true" %s -o /dev/null 2>&1 | FileCheck %s --check-prefix=REMARK
// RUN: not llmc-opt --llmc-plan-memory=alignment=96 %s 2>&1 | FileCheck %s --check-prefix=ERR

// ERR: error: 'func.func' op alignment must be a positive power of two, found 96

// A dead buffer is reused: %c reuses %a's space; the returned value and the
// argument get no arena offset.
// REMARK: remark: arena peak 2048 bytes, sum of intermediates 3072 bytes
// CHECK-LABEL: func.func @chain
// CHECK-SAME: attributes {llm.arena_bytes = 2048 : i64}
// CHECK: llm.exp %{{.+}} {llm.arena_offset = 0 : i64}
// CHECK: llm.exp %{{.+}} {llm.arena_offset = 1024 : i64}
// CHECK: llm.exp %{{.+}} {llm.arena_offset = 0 : i64}
// CHECK: %[[R:.+]] = llm.exp %{{.+}} : tensor<256xf32>
// CHECK: return %[[R]]
func.func @chain(%x: tensor<256xf32>) -> tensor<256xf32> {
  %a = llm.exp %x : tensor<256xf32>
  %b = llm.exp %a : tensor<256xf32>
  %c = llm.exp %b : tensor<256xf32>
  %d = llm.exp %c : tensor<256xf32>
  return %d : tensor<256xf32>
}

// -----

// A reshape aliases its input and keeps it alive: %a is read through %r by
// the last op, so %b and %c cannot take its space. Sizes round up to 128.
// REMARK: remark: arena peak 384 bytes, sum of intermediates 384 bytes
// CHECK-LABEL: func.func @view_extends_life
// CHECK: llm.neg %{{.+}} {llm.arena_offset = 0 : i64} : tensor<2x3xf32>
// CHECK: llm.reshape %{{.+}} {llm.arena_offset = 0 : i64}
// CHECK: llm.exp %{{.+}} {llm.arena_offset = 128 : i64}
// CHECK: llm.exp %{{.+}} {llm.arena_offset = 256 : i64}
func.func @view_extends_life(%x: tensor<2x3xf32>) -> tensor<6xf32> {
  %a = llm.neg %x : tensor<2x3xf32>
  %r = llm.reshape %a : tensor<2x3xf32> to tensor<6xf32>
  %b = llm.exp %x : tensor<2x3xf32>
  %c = llm.exp %b : tensor<2x3xf32>
  %cr = llm.reshape %c : tensor<2x3xf32> to tensor<6xf32>
  %s = llm.add %r, %cr : tensor<6xf32>
  return %s : tensor<6xf32>
}

// -----

// A reshape of an argument, or a returned value, is never in the arena.
// REMARK: remark: arena peak 0 bytes, sum of intermediates 0 bytes
// CHECK-LABEL: func.func @no_intermediates
// CHECK-NOT: llm.arena_offset
// CHECK: return
func.func @no_intermediates(%x: tensor<2x3xf32>) -> tensor<6xf32> {
  %r = llm.reshape %x : tensor<2x3xf32> to tensor<6xf32>
  %e = llm.exp %r : tensor<6xf32>
  return %e : tensor<6xf32>
}

// -----

// Multi-result ops get one offset per result (-1: not in the arena).
// CHECK-LABEL: func.func @fusion_results
// CHECK: llm.fusion "residual_norm"(%{{.+}}) {llm.arena_offset = array<i64: 0, -1>}
func.func @fusion_results(%x: tensor<4x8xf32>, %o: tensor<4x8xf32>, %w: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %f:2 = llm.fusion "residual_norm"(%x, %o, %w) : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  ^bb0(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>, %c: tensor<8xf32>):
    %s = llm.add %a, %b : tensor<4x8xf32>
    %n = llm.rms_norm %s, %c : tensor<4x8xf32>, tensor<8xf32>
    llm.yield %s, %n : tensor<4x8xf32>, tensor<4x8xf32>
  }
  %y = llm.add %f#0, %f#1 : tensor<4x8xf32>
  return %y, %f#1 : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Dynamic shapes: not planned until shapes are specialized.
// REMARK: remark: not planned: dynamic shapes
// CHECK-LABEL: func.func @dynamic
// CHECK-NOT: llm.arena
func.func @dynamic(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %a = llm.exp %x : tensor<?x8xf32>
  %b = llm.exp %a : tensor<?x8xf32>
  return %b : tensor<?x8xf32>
}

// -----

// Storage the lowering does not allocate (llm::aliasRoot): a kv_cache_append
// into a donated cache that nothing else reads writes the argument in place,
// and an all_reduce over a group of one is its input. Neither gets a buffer
// of its own (the all_reduce's offset is its input's, as a reshape's is); the
// exp that feeds the all_reduce lives until the all_reduce's last use.
// CHECK-LABEL: func.func @in_place_aliases
// CHECK-SAME: attributes {llm.arena_bytes = 256 : i64}
// CHECK: llm.exp %{{.+}} {llm.arena_offset = 0 : i64} : tensor<1x4x1x8xf32>
// CHECK: llm.kv_cache_append
// CHECK-NOT: llm.arena_offset
// CHECK-SAME: tensor<1x16x1x8xf32>
// CHECK: llm.exp %{{.+}} {llm.arena_offset = 0 : i64} : tensor<4x8xf32>
// CHECK: llm.all_reduce %{{.+}} sum group_size = 1 {llm.arena_offset = 0 : i64}
// CHECK: llm.neg %{{.+}} {llm.arena_offset = 128 : i64}
func.func @in_place_aliases(%cache: tensor<1x16x1x8xf32> {llm.donate}, %k: tensor<1x4x1x8xf32>, %pos: tensor<i64>, %x: tensor<4x8xf32>) -> (tensor<1x16x1x8xf32>, tensor<4x8xf32>) {
  %e = llm.exp %k : tensor<1x4x1x8xf32>
  %c = llm.kv_cache_append %cache, %e, %pos : tensor<1x16x1x8xf32>, tensor<1x4x1x8xf32>, tensor<i64>
  %a = llm.exp %x : tensor<4x8xf32>
  %r = llm.all_reduce %a sum group_size = 1 : tensor<4x8xf32>
  %n = llm.neg %r : tensor<4x8xf32>
  %m = llm.mul %n, %r : tensor<4x8xf32>
  return %c, %m : tensor<1x16x1x8xf32>, tensor<4x8xf32>
}

// -----

// A returned strided view is copied into its output buffer after the last
// op; its source lives in the arena until then (as the lowering does).
// CHECK-LABEL: func.func @returned_strided_view
// CHECK-SAME: attributes {llm.arena_bytes = 128 : i64}
// CHECK: llm.exp %{{.+}} {llm.arena_offset = 0 : i64} : tensor<4x8xf32>
// CHECK: llm.transpose %{{.+}} [1, 0] {llm.arena_offset = 0 : i64}
func.func @returned_strided_view(%x: tensor<4x8xf32>) -> tensor<8x4xf32> {
  %a = llm.exp %x : tensor<4x8xf32>
  %t = llm.transpose %a [1, 0] : tensor<4x8xf32>
  return %t : tensor<8x4xf32>
}
