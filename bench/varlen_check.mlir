// llm.varlen_attention at a packed prefill shape (issue 19): 4 sequences of
// 256, 512, 768 and 512 tokens packed into T = 2048, LLaMA-3-8B heads
// (32 query, 8 KV, head dim 128), causal, bf16. Run on the GPU with the
// offsets given (bench/varlen_cu.npy = [0, 256, 768, 1536, 2048]):
//   llmc-run bench/varlen_check.mlir --input arg3=bench/varlen_cu.npy \
//     --input arg4=bench/varlen_cu.npy --check=ref --bench
func.func @packed(%q: tensor<2048x32x128xbf16>, %k: tensor<2048x8x128xbf16>, %v: tensor<2048x8x128xbf16>,
                  %cuq: tensor<5xi32>, %cuk: tensor<5xi32>) -> tensor<2048x32x128xbf16> {
  %o = llm.varlen_attention %q, %k, %v, %cuq, %cuk {causal} : tensor<2048x32x128xbf16>, tensor<2048x8x128xbf16>, tensor<2048x8x128xbf16>, tensor<5xi32>, tensor<5xi32>
  return %o : tensor<2048x32x128xbf16>
}
