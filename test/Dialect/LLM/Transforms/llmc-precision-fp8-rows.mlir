// fp8-scaling=row (torchao's rowwise recipe): one scale per row of the LHS
// and per column of the RHS, each over its K values; the epilogue multiplies
// the fp32 product by s_a[m] and s_b[n].
// RUN: llmc-opt --split-input-file --llmc-precision="policy=fp8 fp8-scaling=row" %s | FileCheck %s
// RUN: not llmc-opt --split-input-file --llmc-precision="policy=fp8 fp8-scaling=block" %s 2>&1 | FileCheck %s --check-prefix=ERR
// RUN: not llmc-opt --llmc-pipeline="precision=fp8 fp8-scaling=rows" %s 2>&1 | FileCheck %s --check-prefix=ERR-PIPE
// RUN: not llmc-opt --split-input-file --llmc-precision="policy=bf16 fp8-scaling=row" %s 2>&1 | FileCheck %s --check-prefix=ERR-POLICY
// RUN: not llmc-opt --split-input-file --llmc-precision="policy=fp32 fp8-gradients=e4m3" %s 2>&1 | FileCheck %s --check-prefix=ERR-GRAD

// A linear layer: x [7, 64] scaled per row (reduce over K = dim 1 -> [7, 1]),
// the nn.Linear weight [32, 64] per output channel (reduce over dim 1 ->
// [32, 1], viewed as [1, 32] for the result's columns).
// CHECK-LABEL: func.func @linear
// CHECK-DAG: llm.reduce_max %{{.+}} [1] keepdim : tensor<32x64xf32>
// CHECK-DAG: llm.broadcast %{{.+}} : tensor<32x1xf32> to tensor<32x64xf32>
// CHECK-DAG: llm.reduce_max %{{.+}} [1] keepdim : tensor<7x64xf32>
// CHECK-DAG: llm.broadcast %{{.+}} : tensor<7x1xf32> to tensor<7x64xf32>
// CHECK-DAG: llm.cast %{{.+}} : tensor<7x64xf32> to tensor<7x64xf8E4M3FN>
// CHECK-DAG: llm.cast %{{.+}} : tensor<32x64xf32> to tensor<32x64xf8E4M3FN>
// CHECK: %[[MM:.+]] = llm.matmul %{{.+}}, %{{.+}} {transpose_rhs} : tensor<7x64xf8E4M3FN>, tensor<32x64xf8E4M3FN> -> tensor<7x32xf32>
// CHECK-DAG: %[[SW:.+]] = llm.reshape %{{.+}} : tensor<32x1xf32> to tensor<1x32xf32>
// CHECK-DAG: %[[RB:.+]] = llm.broadcast %{{.+}} : tensor<7x1xf32> to tensor<7x32xf32>
// CHECK-DAG: %[[CB:.+]] = llm.broadcast %[[SW]] : tensor<1x32xf32> to tensor<7x32xf32>
// CHECK: %[[Y:.+]] = llm.mul %[[MM]], %[[RB]] : tensor<7x32xf32>
// CHECK: llm.mul %[[Y]], %[[CB]] : tensor<7x32xf32>
// ERR: error: 'func.func' op fp8-scaling: expected tensor or row, found 'block'
// ERR-PIPE: fp8-scaling: expected tensor or row, found 'rows'
// ERR-POLICY: error: 'func.func' op fp8-scaling=row needs policy=fp8, found policy=bf16
// ERR-GRAD: error: 'func.func' op fp8-gradients=e4m3 needs policy=fp8, found policy=fp32
func.func @linear(%x: tensor<7x64xf32>, %w: tensor<32x64xf32>) -> tensor<7x32xf32> {
  %y = llm.matmul %x, %w {transpose_rhs} : tensor<7x64xf32>, tensor<32x64xf32> -> tensor<7x32xf32>
  return %y : tensor<7x32xf32>
}

// -----

// A weight gradient dW = dy^T x: the transposed LHS dy [16, 8] is reduced
// over its rows (K = tokens, dim 0 -> [1, 8], viewed as [8, 1]); the RHS x
// [16, 24] likewise (-> [1, 24], already the columns' shape).
// CHECK-LABEL: func.func @weight_gradient
// CHECK-DAG: llm.reduce_max %{{.+}} [0] keepdim : tensor<16x8xf32>
// CHECK-DAG: llm.reduce_max %{{.+}} [0] keepdim : tensor<16x24xf32>
// CHECK: llm.matmul %{{.+}}, %{{.+}} {transpose_lhs} : tensor<16x8xf8E5M2>, tensor<16x24xf8E4M3FN> -> tensor<8x24xf32>
// CHECK-DAG: llm.reshape %{{.+}} : tensor<1x8xf32> to tensor<8x1xf32>
// CHECK-DAG: llm.broadcast %{{.+}} : tensor<8x1xf32> to tensor<8x24xf32>
// CHECK-DAG: llm.broadcast %{{.+}} : tensor<1x24xf32> to tensor<8x24xf32>
func.func @weight_gradient(%dy: tensor<16x8xf32> {llm.gradient}, %x: tensor<16x24xf32>) -> tensor<8x24xf32> {
  %dw = llm.matmul %dy, %x {transpose_lhs} : tensor<16x8xf32>, tensor<16x24xf32> -> tensor<8x24xf32>
  return %dw : tensor<8x24xf32>
}

// -----

// An operand of dynamic shape keeps one scale per tensor; the static weight
// is still scaled per output channel.
// CHECK-LABEL: func.func @dynamic_rows
// CHECK-DAG: %[[ROWMAX:.+]] = llm.reduce_max %{{.+}} [1] : tensor<?x64xf32>
// CHECK-DAG: llm.reduce_max %[[ROWMAX]] [0] : tensor<?xf32>
// CHECK-DAG: llm.reduce_max %{{.+}} [1] keepdim : tensor<32x64xf32>
// CHECK: llm.broadcast %{{.+}} : tensor<f32> to tensor<?x32xf32>
func.func @dynamic_rows(%x: tensor<?x64xf32> {llm.dim_names = ["seq"]}, %w: tensor<32x64xf32>) -> tensor<?x32xf32> {
  %y = llm.matmul %x, %w {transpose_rhs} : tensor<?x64xf32>, tensor<32x64xf32> -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}
