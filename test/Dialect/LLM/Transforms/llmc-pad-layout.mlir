// RUN: llmc-opt --split-input-file --llmc-pad-layout %s | FileCheck %s
// RUN: not llmc-opt --llmc-pad-layout=multiple=0 %s 2>&1 | FileCheck %s --check-prefix=ERR

// ERR: error: 'func.func' op multiple and vocab-multiple must be in 1..4096, found 0 and 64

// A vocab-like N goes to a multiple of 64, M and K to 16 (the weight's pad
// depends on an argument only), the result is sliced back.
// CHECK-LABEL: func.func @lm_head
// CHECK-SAME: (%[[X:.+]]: tensor<7x48xf32>, %[[W:.+]]: tensor<50257x48xf32>)
// CHECK: %[[R:.+]] = llm.exp %[[X]]
// CHECK: %[[WT:.+]] = llm.transpose %[[W]]
// CHECK: %[[XP:.+]] = llm.pad %[[R]] high [9, 0] : tensor<7x48xf32> to tensor<16x48xf32>
// CHECK: %[[WP:.+]] = llm.pad %[[WT]] high [0, 47] : tensor<48x50257xf32> to tensor<48x50304xf32>
// CHECK: %[[Y:.+]] = llm.matmul %[[XP]], %[[WP]] : tensor<16x48xf32>, tensor<48x50304xf32> -> tensor<16x50304xf32>
// CHECK: %[[S:.+]] = llm.slice %[[Y]] [0, 0] to [7, 50257] step [1, 1] : tensor<16x50304xf32>
// CHECK: return %[[S]]
func.func @lm_head(%x: tensor<7x48xf32>, %w: tensor<50257x48xf32>) -> tensor<7x50257xf32> {
  %r = llm.exp %x : tensor<7x48xf32>
  %wt = llm.transpose %w [1, 0] : tensor<50257x48xf32>
  %y = llm.matmul %r, %wt : tensor<7x48xf32>, tensor<48x50257xf32> -> tensor<7x50257xf32>
  return %y : tensor<7x50257xf32>
}

// -----

// K is padded on both operands (transpose flags respected), the bias along N.
// CHECK-LABEL: func.func @pad_k_and_bias
// CHECK-DAG: llm.pad %{{.+}} high [9, 3] : tensor<7x13xf32> to tensor<16x16xf32>
// CHECK-DAG: llm.pad %{{.+}} high [13, 3] : tensor<3x13xf32> to tensor<16x16xf32>
// CHECK-DAG: llm.pad %{{.+}} high [13] : tensor<3xf32> to tensor<16xf32>
// CHECK: llm.matmul %{{.+}}, %{{.+}} bias %{{.+}} {transpose_rhs} : tensor<16x16xf32>, tensor<16x16xf32>, tensor<16xf32> -> tensor<16x16xf32>
// CHECK: llm.slice %{{.+}} [0, 0] to [7, 3] step [1, 1]
func.func @pad_k_and_bias(%x: tensor<7x13xf32>, %w: tensor<3x13xf32>, %b: tensor<3xf32>) -> tensor<7x3xf32> {
  %y = llm.matmul %x, %w bias %b {transpose_rhs} : tensor<7x13xf32>, tensor<3x13xf32>, tensor<3xf32> -> tensor<7x3xf32>
  return %y : tensor<7x3xf32>
}

// -----

// fp8 operands use a multiple of at least 32.
// CHECK-LABEL: func.func @fp8_multiple
// CHECK: llm.pad %{{.+}} high [0, 16] : tensor<32x48xf8E4M3FN> to tensor<32x64xf8E4M3FN>
func.func @fp8_multiple(%x: tensor<32x48xf8E4M3FN>, %w: tensor<48x32xf8E4M3FN>) -> tensor<32x32xbf16> {
  %y = llm.matmul %x, %w : tensor<32x48xf8E4M3FN>, tensor<48x32xf8E4M3FN> -> tensor<32x32xbf16>
  return %y : tensor<32x32xbf16>
}

// -----

// Already aligned, or dynamic: untouched.
// CHECK-LABEL: func.func @aligned_and_dynamic
// CHECK-NOT: llm.pad
// CHECK-NOT: llm.slice
// CHECK: llm.matmul %{{.+}}, %{{.+}} {transpose_rhs} : tensor<32x4096xbf16>, tensor<11008x4096xbf16> -> tensor<32x11008xbf16>
// CHECK: llm.matmul %{{.+}}, %{{.+}} : tensor<?x13xf32>, tensor<13x3xf32> -> tensor<?x3xf32>
func.func @aligned_and_dynamic(%x: tensor<32x4096xbf16>, %w: tensor<11008x4096xbf16>, %d: tensor<?x13xf32>, %v: tensor<13x3xf32>) -> (tensor<32x11008xbf16>, tensor<?x3xf32>) {
  %y = llm.matmul %x, %w {transpose_rhs} : tensor<32x4096xbf16>, tensor<11008x4096xbf16> -> tensor<32x11008xbf16>
  %z = llm.matmul %d, %v : tensor<?x13xf32>, tensor<13x3xf32> -> tensor<?x3xf32>
  return %y, %z : tensor<32x11008xbf16>, tensor<?x3xf32>
}
