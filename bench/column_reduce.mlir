// The weight gradient of RMSNorm for a LLaMA-7B-shaped batch: the sum over
// batch and sequence of [4, 2048, 4096] bf16 (64 MiB read, 8 KiB written):
// the column-reduction kernel and its combine (lib/Target/CUDA/ColumnReduce.cpp).
//   llmc-run bench/column_reduce.mlir --bench --check
func.func @weight_grad_sum(%g: tensor<4x2048x4096xbf16>) -> tensor<4096xbf16> {
  %s = llm.reduce_sum %g [0, 1] : tensor<4x2048x4096xbf16>
  return %s : tensor<4096xbf16>
}
