// All-reduce bandwidth benchmark: one sum all_reduce over 256 MiB of bf16
// (134217728 elements) between 2 ranks, the size nccl-tests and the issue's
// acceptance use. Run it as one rank per GPU and read the bus bandwidth
// (busbw = 2(n-1)/n * bytes / time, NCCL's doc/PERFORMANCE.md):
//
//   llmc-run examples/allreduce_bf16_256mb.mlir --tp=2 --bench
//
// Compare with bench/allreduce_torch.py under torchrun --nproc-per-node=2.
// For other degrees change group_size (llmc-run checks it against --tp).
func.func @allreduce_bf16_256mb(%x: tensor<134217728xbf16>) -> tensor<134217728xbf16> {
  %r = llm.all_reduce %x sum group_size = 2 : tensor<134217728xbf16>
  return %r : tensor<134217728xbf16>
}
