// The fp8 weight gradient of a LLaMA-1B MLP down projection (dW = dY^T X, 4 x 2048 tokens): two amax
// reductions, two quantizing casts into cuBLASLt's TN layout (the tiled elementwise form) and one fp8 GEMM.
// llmc-run bench/fp8_wgrad.mlir --precision=fp8 --bench (and under ncu, per kernel).
func.func @wgrad(%dy: tensor<8192x5632xbf16>, %x: tensor<8192x2048xbf16>, %unused: tensor<1xf32> {llm.param}) -> tensor<5632x2048xbf16> {
  %0 = llm.matmul %dy, %x {transpose_lhs} : tensor<8192x5632xbf16>, tensor<8192x2048xbf16> -> tensor<5632x2048xbf16>
  return %0 : tensor<5632x2048xbf16>
}
